#include <doctest/doctest.h>

#include "lang/twist.h"
#include "tests/error_capture.h"

using twist::testing::contains;
using twist::testing::error_of;

using namespace twist;

TEST_CASE("type errors are reported at definition time with the func's name") {
  Var i("i");
  Input A("te_A", f16, {8});
  Input B("te_B", i32, {8});
  Func f("te_f");
  std::string msg = error_of([&] { f(i) = A(i) + B(i); });
  CHECK(msg.find("te_f") != std::string::npos);
  CHECK(msg.find("f16 and i32") != std::string::npos);

  Func g("te_g");
  msg = error_of([&] { g(i) = A(i, i); });
  CHECK(msg.find("te_g") != std::string::npos);
  CHECK(msg.find("rank 1 but is called with 2") != std::string::npos);

  RDom r(0, 8, "te_r");
  Func h("te_h");
  msg = error_of([&] { h(i) = A(r.x); });
  CHECK(msg.find("te_h") != std::string::npos);
  CHECK(msg.find("te_r.x") != std::string::npos);
  CHECK(msg.find("reduce") != std::string::npos);
}
