#include "lang/types.h"

#include "lang/error.h"

namespace twist {

std::string type_name(const Type &t) {
  std::string base;
  if (t.is_bfloat() && t.bits() == 16)
    base = "bf16";
  else if (t.is_float())
    base = fmt::format("f{}", t.bits());
  else if (t.is_bool())
    base = "bool";
  else if (t.is_int())
    base = fmt::format("i{}", t.bits());
  else if (t.is_uint())
    base = fmt::format("u{}", t.bits());
  else
    base = "handle";
  return t.lanes() == 1 ? base : fmt::format("{}x{}", base, t.lanes());
}

Type parse_type(const std::string &name) {
  for (const Type &t : {f16, bf16, f32, f64, i32, boolean})
    if (type_name(t) == name) return t;
  fail("unknown element type '{}': use one of f16, bf16, f32, f64, i32", name);
}

bool is_element_type(const Type &t) {
  return t == f16 || t == bf16 || t == f32 || t == f64 || t == i32;
}

}  // namespace twist
