#include "scheduler/address_bases.h"

#include <map>
#include <set>
#include <vector>

#include "lang/evaluate.h"
#include "scheduler/intrinsics.h"
#include "scheduler/linear_sums.h"
#include "scheduler/stmt_building.h"

namespace twist {

using namespace Halide::Internal;

namespace {

// Whether `e` reads nothing but the thread index: no other variable (Let-bound ones inside it aside), no
// memory, no call to a func or input.
bool thread_only(const Halide::Expr &e) {
  struct Check : IRGraphVisitor {
    std::set<std::string> bound;
    bool ok = true;
    using IRGraphVisitor::visit;
    void visit(const Variable *v) override {
      if (v->name != intrinsic::kThreadIndex && !bound.count(v->name)) ok = false;
    }
    void visit(const Let *l) override {
      l->value.accept(this);
      bound.insert(l->name);
      l->body.accept(this);
    }
    void visit(const Load *) override { ok = false; }
    void visit(const Call *c) override {
      if (c->call_type != Call::Intrinsic && c->call_type != Call::PureIntrinsic) ok = false;
      IRGraphVisitor::visit(c);
    }
  } check;
  e.accept(&check);
  return check.ok;
}

// Whether `s` is an ldmatrix or stmatrix (whose source or destination is shared), or a copy into or out of
// one of the `shared` arrays.
bool shared_intrinsic(const Stmt &s, const std::set<std::string> &shared) {
  if (intrinsic::as_matrix_move(s)) return true;
  const auto c = intrinsic::as_copy(s);
  return c && (shared.count(c->dst) || shared.count(c->src));
}

class Rebase : public IRMutator {
 public:
  explicit Rebase(int threads) : threads_(threads) {}
  std::vector<std::pair<std::string, Halide::Expr>> base_lets;

 private:
  struct Base {
    std::string buffer, name;
    std::vector<int64_t> values;  // at each thread index
  };
  // Swizzles permute 16-byte chunks within groups of 8, so two columns of one tile differ in at most the 3
  // bits above a chunk's elements: bits 3-5 of an f16 index, 2-4 of an f32 one, 4-6 of a byte one.
  static constexpr int64_t kMaxFlip = 128;
  int threads_;
  std::set<std::string> shared_;
  std::map<std::string, Halide::Expr> thread_lets_;  // in scope, with values over the thread index alone
  std::vector<Base> bases_;

  using IRMutator::visit;

  Stmt visit(const Allocate *op) override {
    if (op->memory_type == Halide::MemoryType::GPUShared) shared_.insert(op->name);
    return IRMutator::visit(op);
  }

  Stmt visit(const LetStmt *op) override {
    const Halide::Expr value = substitute(thread_lets_, op->value);
    const bool thread = thread_only(value);
    if (thread) thread_lets_[op->name] = value;
    Stmt s = IRMutator::visit(op);
    if (thread) thread_lets_.erase(op->name);
    return s;
  }

  Stmt visit(const For *op) override {
    const auto *min = as_const_int(op->min), *extent = as_const_int(op->extent);
    if (op->for_type != ForType::Unrolled || !min || !extent || !accesses_shared(op->body))
      return IRMutator::visit(op);
    std::vector<Stmt> iterations;
    for (int64_t i = *min; i < *min + *extent; ++i)
      iterations.push_back(mutate(substitute(op->name, Halide::Expr(static_cast<int>(i)), op->body)));
    return stmt::block(iterations);
  }

  Stmt visit(const Evaluate *op) override {
    const Stmt s(op);
    if (!shared_intrinsic(s, shared_)) return s;
    if (auto m = intrinsic::as_matrix_move(s)) {
      m->shared_index = rebase(m->shared, m->shared_index);
      return intrinsic::matrix_move(*m);
    }
    auto c = intrinsic::as_copy(s);
    if (shared_.count(c->dst)) c->dst_index = rebase(c->dst, c->dst_index);
    if (shared_.count(c->src)) c->src_index = rebase(c->src, c->src_index);
    return intrinsic::copy(*c);
  }

  Stmt visit(const Store *op) override {
    if (!shared_.count(op->name)) return IRMutator::visit(op);
    return Store::make(op->name, mutate(op->value), rebase(op->name, op->index), op->param, op->predicate,
                       op->alignment);
  }

  bool accesses_shared(const Stmt &s) const {
    struct Find : IRVisitor {
      const std::set<std::string> &shared;
      bool found = false;
      explicit Find(const std::set<std::string> &s) : shared(s) {}
      using IRVisitor::visit;
      void visit(const Evaluate *e) override { found = found || shared_intrinsic(Stmt(e), shared); }
      void visit(const Store *st) override {
        found = found || shared.count(st->name);
        IRVisitor::visit(st);
      }
    } find(shared_);
    s.accept(&find);
    return find.found;
  }

  // The index's thread-dependent terms as a base shared with every index of `buffer` that differs from it by
  // a constant at each thread, plus that constant; terms that read anything else stay as they are.
  Halide::Expr rebase(const std::string &buffer, const Halide::Expr &index) {
    const SplitSum parts = split_sum(
        index, [&](const Halide::Expr &term) { return thread_only(substitute(thread_lets_, term)); });
    const Halide::Expr thread_part = simplify(substitute(thread_lets_, parts.kept));
    if (!expr_uses_var(thread_part, intrinsic::kThreadIndex)) return index;
    const std::vector<int64_t> values = at_every_thread(thread_part);
    // A base that differs by a constant serves as it is; one that differs by a constant after flipping a few
    // low bits (the swizzle of another chunk column) serves through one XOR with a constant.
    for (int64_t flip = 0; flip < kMaxFlip; ++flip) {
      for (const Base &b : bases_) {
        if (b.buffer != buffer) continue;
        const int64_t offset = values[0] - (b.values[0] ^ flip);
        bool match = true;
        for (int t = 1; t < threads_ && match; ++t) match = values[t] - (b.values[t] ^ flip) == offset;
        if (!match) continue;
        const Halide::Expr base = stmt::var(b.name);
        return parts.rest + (flip ? base ^ static_cast<int>(flip) : base) + static_cast<int>(offset);
      }
    }
    const std::string name = fmt::format("{}.base{}", buffer, bases_.size());
    bases_.push_back({buffer, name, values});
    base_lets.push_back({name, thread_part});
    return parts.rest + stmt::var(name);
  }

  std::vector<int64_t> at_every_thread(const Halide::Expr &e) const {
    ExprCompiler compiler(Arithmetic::exact);
    const int slot = compiler.slot(intrinsic::kThreadIndex);
    const CompiledExpr value = compiler.compile(e);
    Slots slots(compiler.num_slots());
    std::vector<int64_t> values(threads_);
    for (int t = 0; t < threads_; ++t) {
      slots[slot] = t;
      values[t] = static_cast<int64_t>(value(slots));
    }
    return values;
  }
};

}  // namespace

Stmt share_address_bases(const Stmt &body, int threads) {
  Rebase rebase(threads);
  const Stmt rebased = rebase.mutate(body);
  return stmt::let_all(rebase.base_lets, rebased);
}

}  // namespace twist
