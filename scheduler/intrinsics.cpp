#include "scheduler/intrinsics.h"

#include "lang/error.h"
#include "lang/types.h"

namespace twist::intrinsic {

using namespace Halide::Internal;

namespace {

Stmt make(const std::string &op, const std::vector<Expr> &args) {
  return Evaluate::make(Call::make(Halide::Int(32), "twist." + op, args, Call::Extern));
}

const Call *match(const Stmt &s, const std::string &op) {
  const auto *e = s.as<Evaluate>();
  if (!e) return nullptr;
  const auto *c = e->value.as<Call>();
  return c && c->call_type == Call::Extern && c->name == "twist." + op ? c : nullptr;
}

Expr name(const std::string &s) { return StringImm::make(s); }
std::string name_of(const Expr &e) { return e.as<StringImm>()->value; }
int int_of(const Expr &e) { return static_cast<int>(e.as<IntImm>()->value); }

}  // namespace

Stmt barrier() { return make("barrier", {}); }
bool is_barrier(const Stmt &s) { return match(s, "barrier") != nullptr; }

Stmt copy(const Copy &c) {
  TWIST_CHECK(c.bytes == 4 || c.bytes == 8 || c.bytes == 16, "copy of {} bytes", c.bytes);
  return make("copy", {name(c.dst), c.dst_index, name(c.src), c.src_index, c.bytes, c.src_bytes,
                       Halide::Expr(c.async ? 1 : 0)});
}

std::optional<Copy> as_copy(const Stmt &s) {
  const Call *c = match(s, "copy");
  if (!c) return std::nullopt;
  return Copy{name_of(c->args[0]), c->args[1], name_of(c->args[2]), c->args[3],
              int_of(c->args[4]),  c->args[5], int_of(c->args[6]) != 0};
}

Stmt async_commit() { return make("async_commit", {}); }
bool is_async_commit(const Stmt &s) { return match(s, "async_commit") != nullptr; }

Stmt async_wait(int pending) { return make("async_wait", {pending}); }
std::optional<int> as_async_wait(const Stmt &s) {
  const Call *c = match(s, "async_wait");
  if (!c) return std::nullopt;
  return int_of(c->args[0]);
}

Stmt ldmatrix(const Ldmatrix &l) {
  TWIST_CHECK(l.matrices == 1 || l.matrices == 2 || l.matrices == 4, "ldmatrix of {} matrices", l.matrices);
  return make("ldmatrix", {name(l.dst), l.dst_index, l.matrices, Halide::Expr(l.transpose ? 1 : 0), name(l.src),
                           l.src_index});
}

std::optional<Ldmatrix> as_ldmatrix(const Stmt &s) {
  const Call *c = match(s, "ldmatrix");
  if (!c) return std::nullopt;
  return Ldmatrix{name_of(c->args[0]), c->args[1], int_of(c->args[2]), int_of(c->args[3]) != 0,
                  name_of(c->args[4]), c->args[5]};
}

Stmt mma(const Mma &m) {
  return make("mma", {name(m.d), m.d_index, name(m.a), m.a_index, name(m.b), m.b_index, name(m.c), m.c_index});
}

std::optional<Mma> as_mma(const Stmt &s) {
  const Call *c = match(s, "mma");
  if (!c) return std::nullopt;
  return Mma{name_of(c->args[0]), name_of(c->args[2]), name_of(c->args[4]), name_of(c->args[6]),
             c->args[1],          c->args[3],          c->args[5],          c->args[7]};
}

Stmt shuffle_xor(const ShuffleXor &s) {
  return make("shuffle_xor", {name(s.dst), s.dst_index, s.value, s.lane_mask});
}

std::optional<ShuffleXor> as_shuffle_xor(const Stmt &s) {
  const Call *c = match(s, "shuffle_xor");
  if (!c) return std::nullopt;
  return ShuffleXor{name_of(c->args[0]), c->args[1], c->args[2], int_of(c->args[3])};
}

Stmt atomic_add(const AtomicAdd &a) { return make("atomic_add", {name(a.buffer), a.index, a.value}); }

std::optional<AtomicAdd> as_atomic_add(const Stmt &s) {
  const Call *c = match(s, "atomic_add");
  if (!c) return std::nullopt;
  return AtomicAdd{name_of(c->args[0]), c->args[1], c->args[2]};
}

bool is_intrinsic(const Stmt &s) {
  const auto *e = s.as<Evaluate>();
  const auto *c = e ? e->value.as<Call>() : nullptr;
  return c && c->call_type == Call::Extern && c->name.rfind("twist.", 0) == 0;
}

Expr thread_index() { return Variable::make(Halide::Int(32), kThreadIndex); }
Expr block_index(int dim) { return Variable::make(Halide::Int(32), kBlockIndex[dim]); }

}  // namespace twist::intrinsic
