// Shared-memory addresses rebased onto per-thread bases (share_address_bases) and the layout of shared arrays
// in disjoint scopes (shared_arrays): checked by value at every thread, and by form.
#include <doctest/doctest.h>

#include <map>
#include <vector>

#include "lang/evaluate.h"
#include "scheduler/address_bases.h"
#include "scheduler/intrinsics.h"
#include "scheduler/loop_nest.h"

using namespace Halide;
using namespace Halide::Internal;
namespace intrinsic = twist::intrinsic;

namespace {

constexpr int kThreads = 64;

Expr v(const char *name) {
  return Variable::make(Int(32), name);
}

Stmt shared(const std::string &name, int elements, const Stmt &body) {
  return Allocate::make(name, Float(16), MemoryType::GPUShared, {elements}, const_true(), body);
}

// An ldmatrix of `tile` at `index` into frag[8 * u].
Stmt load(const std::string &tile, const Expr &index, const Expr &u) {
  return intrinsic::matrix_move({intrinsic::MatrixMove::Direction::load, "frag", u * 8, tile, index});
}

// A swizzled index as staging writes it: 8 chunks of 8 elements per row, chunk c of row r at c ^ (r & 7).
Expr swizzled(const Expr &row, const Expr &chunk) {
  return row * 64 + (chunk ^ (row & 7)) * 8;
}

// The top-level lets (the bases) and the ldmatrix indices of a rebased body, in order.
struct Rebased {
  std::map<std::string, Expr> bases;
  std::vector<Expr> indices;
  int loops = 0;
};
Rebased inspect(const Stmt &s) {
  struct Walk : IRVisitor {
    Rebased r;
    using IRVisitor::visit;
    void visit(const LetStmt *l) override {
      r.bases[l->name] = l->value;
      IRVisitor::visit(l);
    }
    void visit(const For *f) override {
      ++r.loops;
      IRVisitor::visit(f);
    }
    void visit(const Evaluate *e) override {
      if (auto l = intrinsic::as_matrix_move(Stmt(e))) r.indices.push_back(l->shared_index);
    }
  } walk;
  s.accept(&walk);
  return walk.r;
}

// e (over the thread index, the bases and `slot`) at every thread, for slot = 0 and 3.
std::vector<int64_t> values(const Expr &e, const std::map<std::string, Expr> &bases) {
  twist::ExprCompiler compiler(twist::Arithmetic::exact);
  const int tid = compiler.slot(intrinsic::kThreadIndex), slot = compiler.slot("slot");
  const twist::CompiledExpr f = compiler.compile(substitute(bases, e));
  twist::Slots slots(compiler.num_slots());
  std::vector<int64_t> out;
  for (int s : {0, 3})
    for (int t = 0; t < kThreads; ++t) {
      slots[tid] = t;
      slots[slot] = s;
      out.push_back(static_cast<int64_t>(f(slots)));
    }
  return out;
}

}  // namespace

TEST_CASE("fragment loads an atom apart share one base and keep their addresses at every thread") {
  // Four loads 16 rows apart, in pipeline slot `slot` of 4096 elements: rows move outside the swizzle's bits.
  const Expr lane = intrinsic::thread_index() % 32, slot = v("slot");
  const Expr row = v("u") * 16 + lane % 16, chunk = lane / 16 + (intrinsic::thread_index() / 32) * 2;
  const Expr index = slot * 4096 + swizzled(row, chunk);
  const Stmt body =
      shared("tile", 4 * 4096,
             For::make("u", 0, 4, ForType::Unrolled, DeviceAPI::None, load("tile", index, v("u"))));
  const Rebased r = inspect(twist::share_address_bases(body, kThreads));
  CHECK(r.loops == 0);  // unrolled in the IR
  REQUIRE(r.indices.size() == 4);
  CHECK(r.bases.size() == 1);
  for (int u = 0; u < 4; ++u) {
    CHECK(expr_uses_var(r.indices[u], "slot"));  // the slot's term stays in the index
    CHECK(values(r.indices[u], r.bases) == values(substitute("u", Expr(u), index), {}));
  }
}

TEST_CASE("fragment loads of other chunk columns share a base through an XOR with a constant") {
  // Chunk 2u + (lane / 16): the swizzle's XOR mixes u with the row, so no two loads differ by a constant.
  const Expr lane = intrinsic::thread_index() % 32;
  const Expr index = swizzled(lane % 16, v("u") * 2 + lane / 16);
  const Stmt body = shared(
      "tile", 4096, For::make("u", 0, 4, ForType::Unrolled, DeviceAPI::None, load("tile", index, v("u"))));
  const Rebased r = inspect(twist::share_address_bases(body, kThreads));
  REQUIRE(r.indices.size() == 4);
  CHECK(r.bases.size() == 1);
  for (int u = 0; u < 4; ++u)
    CHECK(values(r.indices[u], r.bases) == values(substitute("u", Expr(u), index), {}));
}

TEST_CASE("indices into global memory and loops without shared accesses are left alone") {
  const Expr index = intrinsic::thread_index() * 8 + v("u") * 512;
  const Stmt copy = intrinsic::copy({"out", index, "in", index, 16, 16, false});
  const Stmt body = For::make("u", 0, 4, ForType::Unrolled, DeviceAPI::None, copy);
  CHECK(equal(twist::share_address_bases(body, kThreads), body));
}

TEST_CASE("shared arrays in disjoint scopes share bytes; nested ones do not") {
  const Stmt use = Evaluate::make(0);
  // {a {b}} then {c}: b after a, c over a's bytes.
  const Stmt body = Block::make(shared("a", 1000, shared("b", 64, use)), shared("c", 3000, use));
  const twist::SharedArrays layout = twist::shared_arrays(body);
  REQUIRE(layout.arrays.size() == 3);
  std::map<std::string, int> offset;
  for (const twist::SharedArray &a : layout.arrays) offset[a.allocate->name] = a.offset;
  CHECK(offset["a"] == 0);
  CHECK(offset["b"] == 2048);  // a's 2000 bytes, aligned to 128
  CHECK(offset["c"] == 0);
  CHECK(layout.bytes == 6000 / 128 * 128 + 128);  // c's 6000 bytes, aligned, exceed a and b's 2176
}
