#include "scheduler/wide_offsets.h"

#include <algorithm>
#include <limits>
#include <map>
#include <vector>

#include "lang/error.h"
#include "scheduler/intrinsics.h"

namespace twist {

using namespace Halide::Internal;
using Halide::Expr;

namespace {

constexpr int64_t kMax32 = std::numeric_limits<int32_t>::max();

// The index arithmetic whose 64-bit form is computed in 64 bits (above its leaves).
bool is_index_arithmetic(const Expr &e) {
  return e.as<Add>() || e.as<Sub>() || e.as<Mul>() || e.as<Select>() || e.as<Min>() || e.as<Max>();
}

class Widen : public IRMutator {
 public:
  explicit Widen(const std::set<std::string> &buffers) : buffers_(buffers) {}

 private:
  using IRMutator::visit;

  // The value of i32 offset `e` as an i64 expression.
  Expr wide(const Expr &e) {
    const Halide::Type i64 = Halide::Int(64);
    if (e.type() == i64) return e;
    if (e.type() != Halide::Int(32)) return Cast::make(i64, e);
    if (const auto *i = e.as<IntImm>()) return make_const(i64, i->value);
    if (const auto *o = e.as<Add>()) return Add::make(wide(o->a), wide(o->b));
    if (const auto *o = e.as<Sub>()) return Sub::make(wide(o->a), wide(o->b));
    if (const auto *o = e.as<Mul>()) return Mul::make(wide(o->a), wide(o->b));
    if (const auto *o = e.as<Min>()) return Min::make(wide(o->a), wide(o->b));
    if (const auto *o = e.as<Max>()) return Max::make(wide(o->a), wide(o->b));
    if (const auto *o = e.as<Select>())
      return Select::make(o->condition, wide(o->true_value), wide(o->false_value));
    if (const auto *l = e.as<Let>()) {
      lets_[l->name].push_back(l->value);
      Expr body = wide(l->body);
      lets_[l->name].pop_back();
      return Let::make(l->name, l->value, body);
    }
    if (const auto *v = e.as<Variable>()) {
      // A let-bound partial offset (a row's start) may already pass 2^31 - 1: recompute it in 64 bits here.
      auto it = lets_.find(v->name);
      if (it != lets_.end() && !it->second.empty() && is_index_arithmetic(it->second.back()))
        return wide(it->second.back());
    }
    return Cast::make(i64, e);
  }
  Expr offset(const std::string &buffer, const Expr &index) {
    return buffers_.count(buffer) ? wide(index) : index;
  }

  Expr visit(const Let *op) override {
    const Expr value = mutate(op->value);
    lets_[op->name].push_back(value);
    const Expr body = mutate(op->body);
    lets_[op->name].pop_back();
    return Let::make(op->name, value, body);
  }
  Stmt visit(const LetStmt *op) override {
    const Expr value = mutate(op->value);
    lets_[op->name].push_back(value);
    const Stmt body = mutate(op->body);
    lets_[op->name].pop_back();
    return LetStmt::make(op->name, value, body);
  }
  Expr visit(const Load *op) override {
    const Expr index = offset(op->name, mutate(op->index));
    if (index.same_as(op->index)) return op;
    return Load::make(op->type, op->name, index, op->image, op->param, mutate(op->predicate), op->alignment);
  }
  Stmt visit(const Store *op) override {
    const Expr index = offset(op->name, mutate(op->index)), value = mutate(op->value);
    if (index.same_as(op->index) && value.same_as(op->value)) return op;
    return Store::make(op->name, value, index, op->param, mutate(op->predicate), op->alignment);
  }
  Stmt visit(const Evaluate *op) override {
    const Stmt s = op;
    if (auto c = intrinsic::as_copy(s)) {
      c->dst_index = offset(c->dst, mutate(c->dst_index));
      c->src_index = offset(c->src, mutate(c->src_index));
      return intrinsic::copy(*c);
    }
    if (auto a = intrinsic::as_atomic_add(s)) {
      a->index = offset(a->buffer, mutate(a->index));
      a->value = mutate(a->value);
      return intrinsic::atomic_add(*a);
    }
    if (auto t = intrinsic::as_arrival_ticket(s)) {
      t->counter_index = offset(t->counter, mutate(t->counter_index));
      return intrinsic::arrival_ticket(*t);
    }
    if (const auto *call = op->value.as<Call>())
      for (const Expr &arg : call->args)
        if (const auto *name = arg.as<StringImm>())
          TWIST_CHECK(!buffers_.count(name->value),
                      "{} names buffer '{}', whose offsets widen_offsets does not know how to widen",
                      call->name, name->value);
    return IRMutator::visit(op);
  }

  const std::set<std::string> &buffers_;
  std::map<std::string, std::vector<Expr>> lets_;
};

Kernel widened(const Kernel &k, const std::set<std::string> &buffers) {
  Kernel w = k;
  w.body = widen_offsets(k.body, buffers);
  std::set<std::string> all(k.wide_offsets.begin(), k.wide_offsets.end());
  all.insert(buffers.begin(), buffers.end());
  w.wide_offsets.clear();
  for (const BufferArg &b : k.buffers)  // in the kernel's parameter order
    if (all.count(b.name)) w.wide_offsets.push_back(b.name);
  w.wide_variants = nullptr;
  w.fallback = nullptr;
  return w;
}

}  // namespace

bool can_pass_32_bit_offsets(const BufferArg &b) {
  int64_t elements = 1;
  for (const Expr &e : b.shape) {
    const int64_t *c = as_const_int(e);
    if (!c) return true;
    if (*c == 0) return false;
    if (*c > kMax32 || elements > kMax32 / *c)
      elements = kMax32 + 1;
    else
      elements *= *c;
  }
  return elements > kMax32;
}

Stmt widen_offsets(const Stmt &body, const std::set<std::string> &buffers) {
  if (buffers.empty()) return body;
  return Widen(buffers).mutate(body);
}

namespace {

// The buffers of `k` that can pass 32-bit offsets and are not addressed in 64 bits already.
std::set<std::string> narrow_but_can_pass(const Kernel &k) {
  std::set<std::string> out;
  for (const BufferArg &b : k.buffers)
    if (std::find(k.wide_offsets.begin(), k.wide_offsets.end(), b.name) == k.wide_offsets.end() &&
        can_pass_32_bit_offsets(b))
      out.insert(b.name);
  return out;
}

}  // namespace

Kernel with_wide_offsets(const Kernel &k) {
  Kernel out = k;
  if (k.fallback) out.fallback = std::make_shared<const Kernel>(with_wide_offsets(*k.fallback));
  const std::set<std::string> can_pass = narrow_but_can_pass(k);
  if (can_pass.empty()) return out;
  const bool always = std::any_of(k.buffers.begin(), k.buffers.end(), [&](const BufferArg &b) {
    return can_pass.count(b.name) && std::all_of(b.shape.begin(), b.shape.end(),
                                                 [](const Expr &e) { return as_const_int(e) != nullptr; });
  });
  if (always) {
    Kernel w = widened(k, can_pass);
    w.fallback = out.fallback;
    return w;
  }
  out.wide_variants = std::make_shared<WideVariants>();
  return out;
}

const Kernel &wide_variant(const Kernel &k, const std::set<std::string> &buffers) {
  TWIST_CHECK(k.wide_variants, "kernel {} has no variants with 64-bit offsets", k.name);
  const std::vector<std::string> key(buffers.begin(), buffers.end());
  std::lock_guard<std::mutex> lock(k.wide_variants->mutex);
  std::shared_ptr<const Kernel> &made = k.wide_variants->made[key];
  if (!made) made = std::make_shared<const Kernel>(widened(k, buffers));
  return *made;
}

namespace {

Kernel forced(const Kernel &k) {
  Kernel out = k.wide_variants ? widened(k, narrow_but_can_pass(k)) : k;
  out.fallback = k.fallback ? std::make_shared<const Kernel>(forced(*k.fallback)) : nullptr;
  return out;
}

}  // namespace

LoweredProgram force_wide_offsets(const LoweredProgram &program) {
  LoweredProgram out = program;
  for (Kernel &k : out.kernels) k = forced(k);
  return out;
}

}  // namespace twist
