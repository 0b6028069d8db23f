#include "scheduler/chained_kernel.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <set>

#include "algebra/relative_form.h"
#include "algebra/substitution.h"
#include "lang/error.h"
#include "lang/param.h"
#include "scheduler/chained_kernel_builder.h"
#include "scheduler/contraction.h"
#include "scheduler/epilogue.h"
#include "scheduler/expr_lowering.h"
#include "scheduler/fragments.h"
#include "scheduler/hopper_layouts.h"
#include "scheduler/intrinsics.h"
#include "scheduler/kernel_assembly.h"
#include "scheduler/loops.h"
#include "scheduler/named_barriers.h"
#include "scheduler/staging.h"
#include "scheduler/stmt_building.h"
#include "scheduler/thread_mapping.h"

namespace twist {

using namespace Halide::Internal;
using namespace twist::stmt;
using algebra::RelativeForm;

namespace {

Halide::Expr combine_op(RelativeForm::BaseOp op, const Halide::Expr &a, const Halide::Expr &b) {
  switch (op) {
    case RelativeForm::BaseOp::max:
      return Halide::max(a, b);
    case RelativeForm::BaseOp::min:
      return Halide::min(a, b);
    case RelativeForm::BaseOp::add:
      return a + b;
  }
  return a;
}

const char *const kReference = "ref";

// The factor f with e == f * v, when e is a product in which the variable v is one factor and nothing else
// uses it (floating-point products are not reassociated, so this reads the product's own shape).
std::optional<Halide::Expr> scale_of(const Halide::Expr &e, const std::string &v) {
  if (const auto *var = e.as<Variable>(); var && var->name == v) return make_one(e.type());
  const auto *mul = e.as<Mul>();
  if (!mul) return std::nullopt;
  if (!expr_uses_var(mul->b, v))
    if (auto f = scale_of(mul->a, v)) return simplify(*f * mul->b);
  if (!expr_uses_var(mul->a, v))
    if (auto f = scale_of(mul->b, v)) return simplify(mul->a * *f);
  return std::nullopt;
}

// `e` with comparisons of the elements (loads of "elem.*", scaled or not) against infinities folded to false
// (== inf) or true (!= inf): under approximate math, elements computed from finite inputs are taken to be
// finite, as -ffinite-math-only does. (Points outside a mask are left out by the mask's select around the
// expression, not by an infinite element; the states, whose identity is often -inf, are left alone.)
Halide::Expr assume_finite_elements(const Halide::Expr &e) {
  struct Fold : IRMutator {
    using IRMutator::visit;
    static bool infinite_vs_element(const Halide::Expr &a, const Halide::Expr &b) {
      // An element is read from "elem.*", times its scale if it has one (see element_scales_).
      auto stored = [](const Halide::Expr &x) {
        const auto *l = x.as<Load>();
        return l && l->name.rfind("elem.", 0) == 0;
      };
      auto element = [&](const Halide::Expr &x) {
        const auto *m = x.as<Mul>();
        return stored(x) || (m && (stored(m->a) || stored(m->b)));
      };
      auto infinite = [](const Halide::Expr &x) {
        const auto *f = x.as<FloatImm>();
        return f && std::isinf(f->value);
      };
      return (element(a) && infinite(b)) || (infinite(a) && element(b));
    }
    Halide::Expr visit(const EQ *op) override {
      return infinite_vs_element(op->a, op->b) ? const_false() : IRMutator::visit(op);
    }
    Halide::Expr visit(const NE *op) override {
      return infinite_vs_element(op->a, op->b) ? const_true() : IRMutator::visit(op);
    }
  } fold;
  return simplify(fold.mutate(e));
}

}  // namespace

namespace chained {

Halide::Expr ChainedKernelBuilder::atom_row_at(const Halide::Expr &e) const {
  return (hopper_ ? wgmma_accumulator_row(0) : accumulator_row(0)) + 8 * (e / 2);
}

Halide::Expr ChainedKernelBuilder::atom_col_at(const Halide::Expr &e) const {
  return hopper_ ? var(kColumnGroup) * 8 + wgmma_accumulator_col(0) + e % 2 : accumulator_col(0) + e % 2;
}

std::map<std::string, Halide::Expr> ChainedKernelBuilder::s_point(const Halide::Expr &jn,
                                                                  const Halide::Expr &e) const {
  // Key j_local = jn * 8 + col(e) of the tile; the consumer's own loops over the tile are its key steps and
  // atom keys: j_local = key_step * 16 + atom_key.
  const Halide::Expr local = jn * 8 + accumulator_col(0) + e % 2;
  std::map<std::string, Halide::Expr> at = {{atom_row_, atom_row_at(e)}, {atom_col_, 0}};
  at[atom_key_] = local % 16;
  if (!key_step_.empty()) at[key_step_] = local / 16;
  return at;
}

Halide::Expr ChainedKernelBuilder::valid_at(const Halide::Expr &jn, const Halide::Expr &e) const {
  if (!masked_) return const_true();
  return load(Halide::Bool(), "valid", s_index(jn, e));
}

Halide::Expr ChainedKernelBuilder::guards_at(const Halide::Expr &jn, const Halide::Expr &e) const {
  return simplify(substitute(s_point(jn, e), all_of(loops_.reduction_guards)));
}

Halide::Expr ChainedKernelBuilder::tile_is_full() const {
  // The tile needs no mask when every guard holds for every key of the tile and every row of the block.
  Scope<Interval> varying;
  for (const LoopDim &d : loops_.dims) {
    const bool block =
        d.binding == Binding::block_x || d.binding == Binding::block_y || d.binding == Binding::block_z;
    if (!block && d.name != key_loop_) varying.push(d.name, Interval(0, simplify(d.extent - 1)));
  }
  return simplify(and_condition_over_domain(all_of(loops_.reduction_guards), varying));
}

void ChainedKernelBuilder::plan_loops() {
  const std::string &fname = req_.reduction.name();
  const FuncSchedule &s = *req_.schedule;
  loops_ = make_loops(req_.reduction, req_.extents, &s);
  if (s.reduction_split())
    split_into_parts(loops_, s.reduction_split()->var, s.reduction_split()->var + ".part",
                     s.reduction_split()->parts, Binding::block_z);
  mapping_ = map_threads(loops_, s.block_launch_order(), true, req_.target);
  if (!s.atom())
    fail(
        "schedule of '{}': a reduction fed by a contraction computed at its tile needs matrix_atom(rows, "
        "columns, keys)",
        fname);
  atom_row_ = s.atom()->i, atom_col_ = s.atom()->j, atom_key_ = s.atom()->k;
  hopper_ = s.atom()->atom == MatrixAtom::wgmma;
  consumer_threads_ = mapping_.threads;
  if (s.warp_specialization()) {
    if (!hopper_)
      fail(
          "schedule of '{}': warp_specialize() gives the TMA copies of a wgmma key loop to a producer "
          "warpgroup; use MatrixAtom::wgmma (sm_90a) with Transport::tma stages, or drop warp_specialize()",
          fname);
    // The producer warpgroup comes after the warpgroups the loops are bound to.
    mapping_.add_warps(hopper::kWarpgroupThreads / 32);
  }
  summary_ += launch_summary(mapping_);
  plan_persistent();
  if (hopper_) {
    plan_hopper();
  } else {
    if (s.overlaps_producer() || s.delays_column_products()) {
      const char *option = s.overlaps_producer() ? "overlap_producer" : "delay_column_products";
      fail(
          "schedule of '{}': {} keeps a key tile's wgmmas in flight while a tile's update runs, which needs "
          "asynchronous atoms; use MatrixAtom::wgmma (sm_90a) or drop FuncSchedule::{}",
          fname, option, option);
    }
    const int want[3] = {16, 8, 16};
    const std::string *names[3] = {&atom_row_, &atom_col_, &atom_key_};
    for (int k = 0; k < 3; ++k)
      if (extent_of(*names[k], "a matrix atom") != want[k])
        fail("schedule of '{}': the mma.m16n8k16 atom covers 16 x 8 x 16, but loop '{}' has extent {}", fname,
             *names[k], loops_.dim(*names[k]).extent);
  }
  key_loop_ = chain_.producer_schedule->compute_at()->at;
  const int at = loops_.index(key_loop_);
  if (at < 0) loops_.dim(key_loop_);
  if (!loops_.dims[at].reduction || loops_.dims[at].binding != Binding::serial)
    fail("schedule of '{}': '{}' is computed at loop '{}', which must be a serial reduction loop of '{}'",
         chain_.producer.name(), chain_.producer.name(), key_loop_, fname);
  if (def_.reduction->domain.dimensions() != 1)
    fail("func '{}': a reduction fed by a contraction must reduce over a one-dimensional RDom", fname);
  key_var_ = def_.reduction->domain[0].name();
  // The loops inside the key tile: key steps (reduction), register loops over rows and columns (pure).
  std::set<std::string> atom = {atom_row_, atom_col_, atom_key_};
  for (size_t k = at + 1; k < loops_.dims.size(); ++k) {
    const LoopDim &d = loops_.dims[k];
    if (d.binding != Binding::serial && d.binding != Binding::unrolled) continue;
    if (atom.count(d.name)) continue;
    const int extent = d.constant_extent(fname, "a loop inside the key tile");
    if (d.reduction) {
      if (!key_step_.empty())
        fail(
            "schedule of '{}': split the key tile into one loop of 16-key steps ('{}' and '{}' are both "
            "inside '{}')",
            fname, key_step_, d.name, key_loop_);
      key_step_ = d.name, key_steps_ = extent;
    } else {
      std::string row_arg, uses;
      bool row = false, col = false;
      for (const Var &v : def_.args) {
        const Halide::Expr value = loops_.value_of.at(v.name());
        if (!expr_uses_var(value, d.name)) continue;
        (expr_uses_var(value, atom_row_) ? row : col) = true;
      }
      if (row == col)
        fail("schedule of '{}': register loop '{}' must tile either the atom's rows or its columns", fname,
             d.name);
      (row ? row_loops_ : col_loops_).push_back({d.name, extent});
    }
  }
  for (size_t k = 0; k < static_cast<size_t>(at); ++k) {
    const LoopDim &d = loops_.dims[k];
    if ((d.binding == Binding::serial || d.binding == Binding::unrolled) &&
        d.constant_extent(fname, "a loop") != 1)
      fail("schedule of '{}': loop '{}' outside the key loop '{}' must be bound to blocks or warps", fname,
           d.name, key_loop_);
  }
  // A wgmma's accumulators cover all its columns: its 8-column groups are one more register loop.
  if (hopper_) col_loops_.push_back({kColumnGroup, extent_of(atom_col_, "a wgmma atom's N") / 8});
  for (const auto &[name, extent] : col_loops_) col_points_ *= extent;
  for (const Var &v : def_.args)
    if (expr_uses_var(loops_.value_of.at(v.name()), atom_col_)) column_arg_ = v.name();
  // The tile's keys: key = key_base + key_step * 16 + atom_key.
  const Halide::Expr key = loops_.value_of.at(key_var_);
  std::map<std::string, Halide::Expr> zero = {{atom_key_, 0}};
  if (!key_step_.empty()) zero[key_step_] = 0;
  key_base_ = simplify(substitute(zero, key));
  if (!is_const_one(simplify(substitute(atom_key_, 1, key) - substitute(atom_key_, 0, key))) ||
      (!key_step_.empty() &&
       !is_const(simplify(substitute(key_step_, 1, key) - substitute(key_step_, 0, key)), 16)))
    fail(
        "schedule of '{}': the keys of a tile must be key_step * 16 + {} (split the key loop by the tile, "
        "then by 16)",
        fname, atom_key_);
  jn_extent_ = key_steps_ * 2;
}

void ChainedKernelBuilder::plan_producer() {
  const Func &s = chain_.producer;
  const Definition &sd = s.definition();
  contraction_ = as_contraction(*sd.reduction->monoid, sd.reduction->elements);
  if (!contraction_)
    fail(
        "func '{}' is computed at '{}' through matrix atoms, so it must be a sum of products of two f16 or "
        "bf16 inputs",
        s.name(), key_loop_);
  s_type_ = sd.reduction->monoid->state[0].type;
  if (s_type_ != f32) fail("func '{}': its sum must be f32 to accumulate in mma atoms", s.name());
  const RDom &dd = sd.reduction->domain;
  if (dd.dimensions() != 1) fail("func '{}' must reduce over a one-dimensional RDom", s.name());
  const std::optional<int64_t> depth = constant_value(dd[0].extent());
  if (!depth || *depth % 16 != 0 || !is_const_zero(simplify(dd[0].min())))
    fail(
        "func '{}': its reduction over '{}' must have a constant extent that is a multiple of 16 (the atom's "
        "k), starting at 0",
        s.name(), dd.name());
  dk_extent_ = static_cast<int>(*depth / 16);
  // The consumer's call of S, which must be the same at every use.
  struct Calls : IRVisitor {
    std::string name;
    std::vector<std::vector<Halide::Expr>> args;
    using IRVisitor::visit;
    void visit(const Call *c) override {
      IRVisitor::visit(c);
      if (c->call_type == Call::Halide && c->name == name) args.push_back(c->args);
    }
  } calls;
  calls.name = s.name();
  for (const Expr &e : def_.reduction->elements) e.accept(&calls);
  if (calls.args.empty())
    fail("func '{}' is computed at '{}' but '{}' does not read it", s.name(), key_loop_,
         req_.reduction.name());
  for (const auto &a : calls.args)
    for (size_t k = 0; k < a.size(); ++k)
      if (!equal(a[k], calls.args[0][k]))
        fail("func '{}' reads '{}' at two different points; a producer computed at its tile is read at one",
             req_.reduction.name(), s.name());
  s_call_args_ = calls.args[0];
  // S's variables at the S point (row loops, S.jn, S.ja) and its reduction at (S.dk, S.dka).
  ExprLowering at_point(*req_.graph);
  at_point.bind(loops_.value_of);
  const Halide::Expr key = key_base_ + var("S.jn") * 8 + var("S.ja");
  at_point.bind(key_var_, key);
  std::map<std::string, Halide::Expr> s_vars;
  for (size_t k = 0; k < sd.args.size(); ++k) s_vars[sd.args[k].name()] = at_point.lower(s_call_args_[k]);
  s_vars[dd[0].name()] = var("S.dk") * 16 + var("S.dka");
  auto coords = [&](const ContractionOperand &o) {
    std::vector<Halide::Expr> c;
    for (const Halide::Expr &x : o.coords) c.push_back(simplify(substitute(s_vars, x)));
    return c;
  };
  auto uses = [](const std::vector<Halide::Expr> &c, const std::string &v) {
    return std::any_of(c.begin(), c.end(), [&](const Halide::Expr &x) { return expr_uses_var(x, v); });
  };
  // A coordinate that stays constant over a loop's range (h / group over the rows of one group) does not
  // depend on it: fold it to that constant, so that each operand follows only its own loops.
  auto eliminate = [&](std::vector<Halide::Expr> c, const std::string &loop, int extent) {
    Scope<Interval> scope;
    scope.push(loop, Interval(0, extent - 1));
    for (Halide::Expr &x : c) {
      if (!expr_uses_var(x, loop)) continue;
      const Interval range = bounds_of_expr_in_scope(x, scope);
      if (range.is_bounded() && is_const_zero(simplify(range.max - range.min))) x = simplify(range.min);
    }
    return c;
  };
  std::vector<Halide::Expr> a = coords(contraction_->a), b = coords(contraction_->b);
  const int atom_rows = extent_of(atom_row_, "a matrix atom");
  for (std::vector<Halide::Expr> *c : {&a, &b})
    *c = eliminate(eliminate(*c, atom_row_, atom_rows), "S.ja", 8);
  rows_operand_ = contraction_->a, keys_operand_ = contraction_->b;
  if (uses(a, "S.ja")) {
    std::swap(a, b);
    std::swap(rows_operand_, keys_operand_);
  }
  if (uses(a, "S.ja") || uses(b, atom_row_))
    fail("func '{}': one factor of its products must follow the rows ({}) and the other the keys", s.name(),
         atom_row_);
  q_coords_ = a, k_coords_ = b;
}

void ChainedKernelBuilder::plan_components() {
  const std::string &fname = req_.reduction.name();
  std::string why;
  form_ = algebra::relative_form(monoid_, &why);
  if (!form_)
    fail(
        "func '{}': its monoid '{}' has no relative form ({}), which a reduction fed tile by tile by a "
        "contraction needs",
        fname, monoid_.name, why);
  // Elements: those that do not depend on the column are evaluated where S's accumulators are.
  lowering_.bind(loops_.value_of);
  for (size_t e = 0; e < def_.reduction->elements.size(); ++e) {
    const Expr &x = def_.reduction->elements[e];
    ExprLowering probe(*req_.graph);
    probe.bind(loops_.value_of);
    probe.on_func_call([&](const Call *c, const std::vector<Halide::Expr> &) -> std::optional<Halide::Expr> {
      if (c->name == chain_.producer.name()) return Halide::Expr(0.0f);
      return std::nullopt;
    });
    const Halide::Expr lowered = probe.lower(x);
    bool per_column = expr_uses_var(lowered, atom_col_);
    for (const auto &[c, extent] : col_loops_) per_column = per_column || expr_uses_var(lowered, c);
    if (!per_column) {
      row_elements_.push_back(static_cast<int>(e));
      continue;
    }
    if (column_element_ >= 0)
      fail("func '{}': only one of its elements may depend on '{}' (the second atom's B operand)", fname,
           column_arg_);
    column_element_ = static_cast<int>(e);
    Halide::Expr inner = x;
    if (const auto *c = inner.as<Cast>()) inner = c->value;
    const auto *call = inner.as<Call>();
    if (!call || call->call_type != Call::Image || (call->type != f16 && call->type != bf16))
      fail(
          "func '{}': its element {} depends on '{}', so it must read an f16 or bf16 input (V(j, d)), not {}",
          fname, monoid_.elements[e].name, column_arg_, x);
    column_operand_ = ContractionOperand{call->name, call->type, call->args};
    for (const Halide::Expr &c : call->args) {
      Halide::Expr lowered = simplify(lowering_.lower(c));
      // As for S's operands: V does not follow the rows, though h / group is written over them.
      Scope<Interval> scope;
      scope.push(atom_row_, Interval(0, extent_of(atom_row_, "a matrix atom") - 1));
      const Interval range = bounds_of_expr_in_scope(lowered, scope);
      if (expr_uses_var(lowered, atom_row_) && range.is_bounded() &&
          is_const_zero(simplify(range.max - range.min)))
        lowered = simplify(range.min);
      v_coords_.push_back(lowered);
    }
  }
  if (column_element_ < 0) fail("func '{}': none of its elements depends on '{}'", fname, column_arg_);
  if (!req_.fallback) plan_element_scales();
  for (const auto &[k, c] : element_scales_)
    summary_ += fmt::format("  element {} = S * {}: selectors pick before scaling (needs {} > 0)\n",
                            monoid_.elements[k].name, c, c);
  const std::string column_var = monoid_.element()[column_element_].as<Variable>()->name;
  for (size_t k = 0; k < form_->base.size(); ++k) {
    if (!expr_uses_var(form_->relative_lift[k], column_var)) {
      row_components_.push_back(static_cast<int>(k));
      continue;
    }
    if (column_component_ >= 0 || form_->is_selector(static_cast<int>(k)))
      fail("monoid '{}': one additive component may depend on the element '{}'", monoid_.name, column_var);
    column_component_ = static_cast<int>(k);
    // Its contribution must be (row part) x (column element): then the tile's sum is a matrix product.
    column_row_factor_ = simplify(
        substitute(column_var, make_one(monoid_.elements[column_element_].type), form_->relative_lift[k]));
    const Halide::Expr residue =
        simplify(form_->relative_lift[k] -
                 column_row_factor_ * Variable::make(monoid_.elements[column_element_].type, column_var));
    if (!is_const_zero(residue))
      fail(
          "monoid '{}': the contribution {} of component '{}' is not a multiple of '{}', so it is no "
          "contraction",
          monoid_.name, form_->relative_lift[k], form_->base[k].name, column_var);
  }
  summary_ += fmt::format(
      "  {} over tiles of {} keys, fed by {} ({}, k = {}) at '{}'; relative form of '{}': {} row "
      "component(s), 1 column component\n",
      fname, key_steps_ * 16, chain_.producer.name(),
      hopper_ ? fmt::format("wgmma.m64n{}k16", jn_extent_ * 8) : std::string("mma.m16n8k16"), dk_extent_ * 16,
      key_loop_, monoid_.name, row_components_.size());
}

void ChainedKernelBuilder::plan_stages() {
  // The producer's loops, for the footprints: S.dk (k-steps), S.jn (atoms of keys), S.ja, S.dka (the atom).
  for (const auto &[name, extent, reduction] : std::vector<std::tuple<std::string, int, bool>>{
           {"S.dk", dk_extent_, true}, {"S.jn", jn_extent_, false}, {"S.ja", 8, false}, {"S.dka", 16, true}})
    loops_.dims.push_back({name, Halide::Expr(extent), reduction, Binding::serial});
  std::vector<StageDirective> directives = req_.schedule->stages();
  for (const StageDirective &d : chain_.producer_schedule->stages()) directives.push_back(d);
  const std::map<std::string, std::vector<Halide::Expr>> reads = {
      {rows_operand_.input, q_coords_}, {keys_operand_.input, k_coords_}, {column_operand_.input, v_coords_}};
  for (const StageDirective &d : directives) {
    const Input *in = nullptr;
    for (const Input &i : req_.graph->inputs)
      if (i.name() == d.input) in = &i;
    auto it = reads.find(d.input);
    if (!in || it == reads.end())
      fail("schedule of '{}': stage({}) names no operand of its matrix atoms", req_.reduction.name(),
           d.input);
    stages_.push_back(plan_stage(d, *in, loops_, {it->second}, req_.fallback));
    summary_ += stages_.back().summary();
  }
  for (const std::string &operand : {rows_operand_.input, keys_operand_.input, column_operand_.input})
    if (std::none_of(stages_.begin(), stages_.end(), [&](const StagePlan &p) { return p.input == operand; }))
      fail("schedule of '{}': '{}' is read by {}, so it must be staged in shared memory",
           req_.reduction.name(), operand, hopper_ ? "wgmma matrix descriptors" : "ldmatrix");
}

std::map<std::string, Halide::Expr> ChainedKernelBuilder::base_at(const Halide::Expr &slot,
                                                                  const Halide::Expr &column) const {
  std::map<std::string, Halide::Expr> b;
  const State vars = form_->base_vars();
  for (int k : row_components_)
    b[vars[k].as<Variable>()->name] = load(form_->base[k].type, "row." + form_->base[k].name, slot);
  if (column.defined()) b[vars[column_component_].as<Variable>()->name] = column;
  if (form_->has_reference) b[kReference] = reference_at(slot);
  return b;
}

Halide::Expr ChainedKernelBuilder::reference_at(const Halide::Expr &slot) const {
  if (form_->reference_selector < 0) return load(form_->ref_type, "row.ref", slot);
  const Component &c = form_->base[form_->reference_selector];
  return load(c.type, "row." + c.name, slot);
}

std::map<std::string, Halide::Expr> ChainedKernelBuilder::elements_at(const Halide::Expr &jn,
                                                                      const Halide::Expr &e,
                                                                      bool unscaled) const {
  std::map<std::string, Halide::Expr> x;
  const State vars = monoid_.element();
  for (int k : row_elements_) {
    const Halide::Expr stored =
        load(monoid_.elements[k].type, "elem." + monoid_.elements[k].name, s_index(jn, e));
    x[vars[k].as<Variable>()->name] =
        element_scales_.count(k) && !unscaled ? stored * element_scales_.at(k) : stored;
  }
  return x;
}

const StagePlan &ChainedKernelBuilder::q_stage() const {
  // plan_stages refused schedules that do not stage every operand of the atoms.
  const auto it = std::find_if(stages_.begin(), stages_.end(),
                               [&](const StagePlan &p) { return p.input == rows_operand_.input; });
  TWIST_CHECK(it != stages_.end(), "'{}' is not staged", rows_operand_.input);
  return *it;
}

Halide::Expr ChainedKernelBuilder::element_value(
    int k, const Halide::Expr &score, const std::map<std::string, Halide::Expr> &loop_values) const {
  ExprLowering at(*req_.graph);
  at.bind(loop_values);
  at.on_func_call([&](const Call *c, const std::vector<Halide::Expr> &) -> std::optional<Halide::Expr> {
    if (c->name == chain_.producer.name()) return score;
    return std::nullopt;
  });
  return at.lower(def_.reduction->elements[k]);
}

void ChainedKernelBuilder::plan_element_scales() {
  const Halide::Expr score = Variable::make(s_type_, "S.score");
  for (int k : row_elements_) {
    const auto *mul = element_value(k, score, loops_.value_of).as<Mul>();
    if (!mul) continue;
    for (const auto &[x, c] : {std::pair{mul->a, mul->b}, std::pair{mul->b, mul->a}}) {
      const auto *param = c.as<Variable>();
      if (equal(x, score) && param && is_param(param) && c.type().is_float()) {
        element_scales_[k] = c;
        break;
      }
    }
  }
}

Stmt ChainedKernelBuilder::scores_by_mma() {
  // acc_s = sum over k-steps of Q fragments (loaded once, before the key loop) x K fragments.
  const StagePlan *k_stage = nullptr;
  for (const StagePlan &p : stages_)
    if (p.input == keys_operand_.input) k_stage = &p;
  FragmentLoad k{
      AtomOperand::b,
      k_coords_,
      "S.dka",
      "S.ja",
      atom_row_,
      {{"S.jn", jn_extent_}},
      "frag.k",
      k_stage,
      k_stage->directive.depth > 1 ? var(k_stage->directive.at) % k_stage->directive.depth : Halide::Expr(0)};
  Stmt mma = intrinsic::mma({"acc.s", "frag.q", "frag.k", "acc.s", s_index(var("S.jn"), 0),
                             flat(q_loops()) * 8, var("S.jn") * 4, s_index(var("S.jn"), 0)});
  std::vector<std::pair<std::string, int>> mma_loops = row_loops_;
  mma_loops.push_back({"S.jn", jn_extent_});
  Stmt step = block({load_fragments(k, req_.reduction.name()),
                     q_per_step() ? load_fragments(q_fragments(), req_.reduction.name()) : Stmt(),
                     over(mma_loops, mma)});
  std::vector<std::pair<std::string, int>> all = row_loops_;
  all.push_back({"S.jn", jn_extent_});
  all.push_back({"S.e", 4});
  Stmt zero = over(all, store("acc.s", make_zero(s_type_), s_index(var("S.jn"), var("S.e"))));
  return block({zero, unrolled("S.dk", dk_extent_, step)});
}

Stmt ChainedKernelBuilder::scores() {
  // S for the tile (on Hopper, issued by the key loop: see tma_key_loop), then the elements at each S
  // point: the consumer's expressions with S replaced by its accumulator.
  std::vector<std::pair<std::string, int>> all = row_loops_;
  all.push_back({"S.jn", jn_extent_});
  all.push_back({"S.e", 4});
  std::vector<Stmt> element_stores;
  for (int k : row_elements_) {
    std::map<std::string, Halide::Expr> values = loops_.value_of;
    for (auto &[name, v] : values) v = substitute(s_point(var("S.jn"), var("S.e")), v);
    const Halide::Expr score = load(s_type_, "acc.s", s_index(var("S.jn"), var("S.e")));
    const Halide::Expr value = element_scales_.count(k) ? score : element_value(k, score, values);
    element_stores.push_back(
        store("elem." + monoid_.elements[k].name, value, s_index(var("S.jn"), var("S.e"))));
  }
  if (masked_)
    element_stores.push_back(
        store("valid", guards_at(var("S.jn"), var("S.e")), s_index(var("S.jn"), var("S.e"))));
  const Stmt elements = over(all, block(element_stores));
  return hopper_ ? elements : block({scores_by_mma(), elements});
}

Stmt ChainedKernelBuilder::quad_reduce(const std::string &array, int count, RelativeForm::BaseOp op,
                                       const Type &t) const {
  // The four lanes of a quad hold the same rows: a butterfly over lane bits 0 and 1 gives each the whole row.
  std::vector<Stmt> steps;
  for (int mask : {1, 2}) {
    const Halide::Expr i = var(array + ".i");
    steps.push_back(
        unrolled(array + ".i", count,
                 block({intrinsic::shuffle_xor({"peer", 0, load(t, array, i), mask}),
                        store(array, combine_op(op, load(t, array, i), load(t, "peer", 0)), i)})));
  }
  return Allocate::make("peer", t, Halide::MemoryType::Register, {1}, const_true(), block(steps));
}

Stmt ChainedKernelBuilder::tile_selectors() {
  // tile.<k>[slot] = op over the tile's valid points of selector k's contribution, over the whole row.
  const int slots = row_slots();
  std::vector<Stmt> steps;
  std::vector<int> selectors;
  for (int k : row_components_) {
    if (!form_->is_selector(k)) continue;
    selectors.push_back(k);
    const Component &c = form_->base[k];
    const std::string tile = "tile." + c.name;
    const Halide::Expr identity = form_->base_identity[k];
    const Halide::Expr slot = flat(row_loops_) * 2 + var("S.h");
    const Halide::Expr e = var("S.h") * 2 + var("S.e2");
    // A selector that picks a scaled element picks among the unscaled values, then scales its pick.
    std::optional<Halide::Expr> scale;
    for (const auto &[element, c] : element_scales_)
      if (const auto *v = form_->relative_lift[k].as<Variable>();
          v && v->name == monoid_.element()[element].as<Variable>()->name)
        scale = c;
    const Halide::Expr lift =
        substitute(elements_at(var("S.jn"), e, scale.has_value()), form_->relative_lift[k]);
    Stmt fold = store(tile,
                      combine_op(form_->ops[k], load(c.type, tile, slot),
                                 Halide::select(valid_at(var("S.jn"), e), lift, identity)),
                      slot);
    steps.push_back(
        over(row_loops_, unrolled("S.h", 2,
                                  block({store(tile, identity, slot),
                                         unrolled("S.jn", jn_extent_, unrolled("S.e2", 2, fold))}))));
    steps.push_back(quad_reduce(tile, slots, form_->ops[k], c.type));
    if (scale)
      steps.push_back(unrolled(tile + ".i", slots,
                               store(tile, load(c.type, tile, var(tile + ".i")) * *scale, var(tile + ".i"))));
  }
  if (selectors.empty() && !form_->has_reference) return Stmt();
  steps.push_back(move_reference());
  Stmt s = block(steps);
  for (int k : selectors)
    s = Allocate::make("tile." + form_->base[k].name, form_->base[k].type, Halide::MemoryType::Register,
                       {slots}, const_true(), s);
  return s;
}

Stmt ChainedKernelBuilder::move_reference() {
  const int slots = row_slots();
  const Halide::Expr slot = flat(row_loops_) * 2 + var("S.h");
  const State vars = form_->base_vars();
  // The selectors after the tile, and the reference they choose.
  std::map<std::string, Halide::Expr> updated = base_at(slot, Halide::Expr());
  for (int k : row_components_)
    if (form_->is_selector(k))
      updated[vars[k].as<Variable>()->name] =
          combine_op(form_->ops[k], load(form_->base[k].type, "row." + form_->base[k].name, slot),
                     load(form_->base[k].type, "tile." + form_->base[k].name, slot));
  std::vector<Stmt> steps;
  if (form_->has_reference)
    steps.push_back(over(
        row_loops_, unrolled("S.h", 2, store("ref.new", substitute(updated, form_->reference_of), slot))));
  auto rebased_with = [&](const Halide::Expr &expr, const Halide::Expr &column) {
    std::map<std::string, Halide::Expr> b = base_at(slot, column);
    if (form_->has_reference) {
      b[algebra::kOldReferenceName] = reference_at(slot);
      b[algebra::kNewReferenceName] = load(form_->ref_type, "ref.new", slot);
    }
    return substitute(b, expr);
  };
  auto rebased = [&](int k, const Halide::Expr &column) { return rebased_with(form_->rebase[k], column); };
  // The factor f with rebase_k = f * b.<k>, if component k's rebase is such a product.
  auto rebase_factor = [&](int k) { return scale_of(form_->rebase[k], vars[k].as<Variable>()->name); };
  // The column component moves first, while the rows still hold the old state (rebase reads it). When its
  // rebase scales it by a factor of the row alone (2^(ref.old - ref.new) for attention), the factor is
  // computed once per row instead of once per element, and the row components rebased by the same factor
  // (the softmax denominator) read it too.
  std::optional<Halide::Expr> shared_factor;
  if (form_->has_reference) {
    std::vector<std::pair<std::string, int>> cols = col_loops_;
    cols.push_back({"S.e2", 2});
    const Halide::Expr e = var("S.h") * 2 + var("S.e2");
    const Halide::Expr index = o_index(e);
    const Type ot = form_->base[column_component_].type;
    shared_factor = rebase_factor(column_component_);
    if (shared_factor) {
      // With the reference a selector, ref.old is that selector, and 2^(ref.old - m) folds to 1.
      const Halide::Expr factor = algebra::simplified(rebased_with(*shared_factor, Halide::Expr()));
      steps.push_back(over(row_loops_, unrolled("S.h", 2, store("rescale", factor, slot))));
      // Delayed column products: the accumulators still miss the previous tile's products, so the key loop
      // applies this factor once those have landed (tma_key_loop).
      if (!delays_column_products()) steps.push_back(rescale_columns());
    } else if (delays_column_products()) {
      fail(
          "schedule of '{}': delay_column_products applies the column accumulators' rebase once the previous "
          "tile's products have landed, so it must be a factor of the row alone, but the column component's "
          "rebase is {}; drop "
          "FuncSchedule::delay_column_products",
          req_.reduction.name(), form_->rebase[column_component_]);
    } else {
      steps.push_back(over(
          row_loops_,
          unrolled("S.h", 2,
                   over(cols, store("acc.o", rebased(column_component_, load(ot, "acc.o", index)), index)))));
    }
  }
  // Then the rows: every additive component rebased from the old state, then the selectors and reference.
  std::vector<Stmt> row_updates;
  std::vector<std::pair<std::string, Halide::Expr>> lets;
  for (int k : row_components_) {
    const std::string name = "new." + form_->base[k].name;
    const Halide::Expr old = load(form_->base[k].type, "row." + form_->base[k].name, slot);
    Halide::Expr value = old;
    if (form_->is_selector(k)) {
      value = updated[vars[k].as<Variable>()->name];
    } else if (form_->has_reference) {
      const auto factor = rebase_factor(k);
      const bool shares = shared_factor && factor && equal(*factor, *shared_factor) &&
                          form_->base[k].type == form_->base[column_component_].type;
      value = shares ? old * load(form_->base[k].type, "rescale", slot) : rebased(k, Halide::Expr());
    }
    lets.push_back({name, value});
    row_updates.push_back(
        store("row." + form_->base[k].name, Variable::make(form_->base[k].type, name), slot));
  }
  if (keeps_reference())
    row_updates.push_back(store("row.ref", load(form_->ref_type, "ref.new", slot), slot));
  Stmt update = block(row_updates);
  for (auto it = lets.rbegin(); it != lets.rend(); ++it)
    update = LetStmt::make(it->first, it->second, update);
  steps.push_back(over(row_loops_, unrolled("S.h", 2, update)));
  Stmt body = block(steps);
  if (form_->has_reference) {
    body =
        Allocate::make("ref.new", form_->ref_type, Halide::MemoryType::Register, {slots}, const_true(), body);
    // Delayed column products read the factor after the tile's update: the kernel holds it (build).
    if (!delays_column_products())
      body = Allocate::make("rescale", form_->base[column_component_].type, Halide::MemoryType::Register,
                            {slots}, const_true(), body);
  }
  return body;
}

Stmt ChainedKernelBuilder::rescale_columns() const {
  std::vector<std::pair<std::string, int>> cols = col_loops_;
  cols.push_back({"S.e2", 2});
  const Halide::Expr slot = flat(row_loops_) * 2 + var("S.h");
  const Halide::Expr index = o_index(var("S.h") * 2 + var("S.e2"));
  const Type ot = form_->base[column_component_].type;
  return over(
      row_loops_,
      unrolled("S.h", 2,
               over(cols, store("acc.o", load(ot, "acc.o", index) * load(ot, "rescale", slot), index))));
}

Stmt ChainedKernelBuilder::contributions() {
  const Halide::Expr slot = flat(row_loops_) * 2 + var("S.h");
  const std::map<std::string, Halide::Expr> b = base_at(slot, Halide::Expr());
  std::vector<Stmt> steps;
  // The column component's row part at every point, once (2^(s - ref) for attention): the P fragments and
  // every row sum with the same contribution (the softmax denominator) read it.
  const Type wt = column_row_factor_.type();
  {
    std::vector<std::pair<std::string, int>> all = row_loops_;
    all.push_back({"S.jn", jn_extent_});
    all.push_back({"S.e", 4});
    std::map<std::string, Halide::Expr> at = elements_at(var("S.jn"), var("S.e"));
    if (form_->has_reference) at[kReference] = reference_at(row_slot(var("S.e")));
    Halide::Expr w = substitute(at, column_row_factor_);
    if (finite_elements()) w = assume_finite_elements(w);
    steps.push_back(
        over(all, store("weight", Halide::select(valid_at(var("S.jn"), var("S.e")), w, make_zero(wt)),
                        s_index(var("S.jn"), var("S.e")))));
  }
  // Row components: lane-partial sums over the lane's points of each row.
  for (int k : row_components_) {
    if (form_->is_selector(k)) continue;
    const Component &c = form_->base[k];
    const Halide::Expr e = var("S.h") * 2 + var("S.e2");
    std::map<std::string, Halide::Expr> at = elements_at(var("S.jn"), e);
    if (form_->has_reference) at[kReference] = b.at(kReference);
    Halide::Expr lift = substitute(at, form_->relative_lift[k]);
    if (finite_elements()) lift = assume_finite_elements(lift);
    const bool same_as_weight =
        c.type == wt && equal(simplify(form_->relative_lift[k]), simplify(column_row_factor_));
    const Halide::Expr contribution = same_as_weight
                                          ? load(wt, "weight", s_index(var("S.jn"), e))
                                          : Halide::select(valid_at(var("S.jn"), e), lift, make_zero(c.type));
    Stmt add = store("row." + c.name, load(c.type, "row." + c.name, slot) + contribution, slot);
    steps.push_back(
        over(row_loops_, unrolled("S.h", 2, unrolled("S.jn", jn_extent_, unrolled("S.e2", 2, add)))));
  }
  // The column component: its P fragments, then the atoms against V's fragments; delayed column products
  // are converted and issued by the key loop (tma_key_loop), after the wgmmas still reading P.
  if (!delays_column_products()) {
    steps.push_back(p_fragments());
    steps.push_back(hopper_ ? column_products_by_wgmma(ring_slot_) : column_products_by_mma());
  }
  return block(steps);
}

Stmt ChainedKernelBuilder::p_fragments() const {
  // The column component's row part in the A fragments of the second atom: accumulator element c of key atom
  // 2s + q/4 is fragment element q of key step s.
  const Halide::Expr q = var("P.q");
  const Halide::Expr jn = var("P.step") * 2 + q / 4, e = q % 4;
  std::vector<std::pair<std::string, int>> p_loops = row_loops_;
  p_loops.push_back({"P.step", key_steps_});
  p_loops.push_back({"P.q", 8});
  return over(p_loops, store("frag.p",
                             Halide::cast(column_operand_.type,
                                          load(column_row_factor_.type(), "weight", s_index(jn, e))),
                             flat(p_loops)));
}

Stmt ChainedKernelBuilder::column_products_by_mma() {
  const StagePlan *v_stage = nullptr;
  for (const StagePlan &p : stages_)
    if (p.input == column_operand_.input) v_stage = &p;
  const std::string step = key_step_.empty() ? std::string("P.one") : key_step_;
  std::vector<Halide::Expr> v_coords = v_coords_;
  FragmentLoad v{
      AtomOperand::b,
      v_coords,
      atom_key_,
      atom_col_,
      atom_row_,
      col_loops_,
      "frag.v",
      v_stage,
      v_stage->directive.depth > 1 ? var(v_stage->directive.at) % v_stage->directive.depth : Halide::Expr(0)};
  std::vector<std::pair<std::string, int>> p_at_step = row_loops_;
  p_at_step.push_back({step, key_steps_});
  Stmt mma = intrinsic::mma({"acc.o", "frag.p", "frag.v", "acc.o", o_index(0), flat(p_at_step) * 8,
                             flat(col_loops_) * 4, o_index(0)});
  std::vector<std::pair<std::string, int>> mma_loops = row_loops_;
  for (const auto &c : col_loops_) mma_loops.push_back(c);
  return unrolled(step, key_steps_, block({load_fragments(v, req_.reduction.name()), over(mma_loops, mma)}));
}

std::pair<Halide::Expr, Halide::Expr> ChainedKernelBuilder::key_tiles() {
  const LoopDim &key = loops_.dim(key_loop_);
  const int tile = key_steps_ * 16;
  // Tiles whose every key is masked out for every row of the block are skipped, not masked: the RDom's
  // predicates that bound the key by an expression of the rows (causal: j <= i + offset; a window:
  // j > i + offset - w) bound the key loop over the block's rows.
  if (!equal(key_base_, simplify(var(key_loop_) * tile))) return {0, key.extent};
  Scope<Interval> rows;
  for (const LoopDim &d : loops_.dims)
    if (d.binding == Binding::warp || d.binding == Binding::thread || !d.reduction)
      if (d.binding != Binding::block_x && d.binding != Binding::block_y && d.binding != Binding::block_z)
        rows.push(d.name, Interval(0, simplify(d.extent - 1)));
  const std::string &j = key_var_;
  Halide::Expr last = simplify(key.extent - 1), first = 0;
  for (const Expr &p : def_.reduction->domain.predicates()) {
    auto bound = [&](const Halide::Expr &side) {
      return bounds_of_expr_in_scope(simplify(lowering_.lower(side)), rows);
    };
    auto is_key = [&](const Halide::Expr &e) {
      const auto *v = e.as<Variable>();
      return v && v->name == j;
    };
    auto upper = [&](const Halide::Expr &e, int slack) {  // key <= e - slack
      const Interval r = bound(e);
      if (r.has_upper_bound()) last = simplify(Halide::min(last, (r.max - slack) / tile));
    };
    auto lower = [&](const Halide::Expr &e, int slack) {  // key >= e + slack
      const Interval r = bound(e);
      if (r.has_lower_bound()) first = simplify(Halide::max(first, (r.min + slack) / tile));
    };
    if (const auto *le = p.as<LE>()) {
      if (is_key(le->a)) upper(le->b, 0);
      if (is_key(le->b)) lower(le->a, 0);
    } else if (const auto *lt = p.as<LT>()) {
      if (is_key(lt->a)) upper(lt->b, 1);
      if (is_key(lt->b)) lower(lt->a, 1);
    } else if (const auto *ge = p.as<GE>()) {
      if (is_key(ge->a)) lower(ge->b, 0);
      if (is_key(ge->b)) upper(ge->a, 0);
    } else if (const auto *gt = p.as<GT>()) {
      if (is_key(gt->a)) lower(gt->b, 1);
      if (is_key(gt->b)) upper(gt->a, 1);
    }
  }
  first = simplify(Halide::max(first, 0));
  return {first, simplify(Halide::max(last - first + 1, 0))};
}

Stmt ChainedKernelBuilder::epilogue() {
  std::vector<Halide::Expr> coords;
  std::map<std::string, Halide::Expr> at = {{atom_row_, atom_row_at(var("S.e"))},
                                            {atom_col_, atom_col_at(var("S.e"))}};
  for (const Var &v : def_.args) coords.push_back(substitute(at, loops_.value_of.at(v.name())));
  std::map<std::string, Halide::Expr> b =
      base_at(row_slot(var("S.e")), load(form_->base[column_component_].type, "acc.o", o_index(var("S.e"))));
  std::vector<Halide::Expr> state;
  for (const Expr &s : form_->to_state) state.push_back(algebra::simplified(substitute(b, s)));
  std::vector<Halide::Expr> guards, repeat_guards;
  for (const Halide::Expr &g : loops_.pure_guards) guards.push_back(substitute(at, g));
  for (const Halide::Expr &g : loops_.repeat_guards) repeat_guards.push_back(substitute(at, g));
  const Halide::Expr part = req_.output == ReductionKernelRequest::Output::partial_states
                                ? var(req_.schedule->reduction_split()->var + ".part")
                                : Halide::Expr();
  Stmt stores = epilogue_stores(req_, coords, state, part);
  // Into a write-back tile a point outside the output may go, as the tile's copy-out skips it; a repeated
  // point may not, as it shares its cell with the point it repeats.
  stores = guarded(all_of(write_backs_.empty() || reads_inputs(stores, *req_.graph) ? guards : repeat_guards),
                   stores);
  std::vector<std::pair<std::string, int>> points = row_loops_;
  for (const auto &c : col_loops_) points.push_back(c);
  points.push_back({"S.e", 4});
  stores = over(points, stores);
  if (write_backs_.empty()) return stores;
  // Only the consumers of a warp-specialized kernel reach the epilogue: they synchronize among themselves.
  return write_back(write_backs_, coords, stores, consumer_threads_,
                    specialized() ? intrinsic::named_barrier(named_barriers::kConsumers, consumer_threads_)
                                  : intrinsic::barrier());
}

Kernel ChainedKernelBuilder::build() {
  plan_loops();
  plan_producer();
  plan_components();
  plan_stages();
  const int slots = row_slots();
  int row_points = 1;
  for (const auto &[name, e] : row_loops_) row_points *= e;

  // Once per block: Q's tile into shared memory, then into registers for the whole key loop.
  std::vector<const StagePlan *> root, at_key;
  for (const StagePlan &p : stages_) (p.at < 0 ? root : at_key).push_back(&p);
  std::vector<Stmt> prologue;
  if (q_stage().at >= 0)
    fail("schedule of '{}': '{}' is the same for every key tile: stage it once per block (at \"\")",
         chain_.producer.name(), rows_operand_.input);
  // (The Hopper datapath copies Q with the first tiles of its ring, and its atoms read it where it lands.)
  if (!hopper_) {
    for (const StagePlan *p : root) prologue.push_back(p->copy(Halide::Expr(), 0, mapping_.threads));
    prologue.push_back(intrinsic::async_commit());
  }
  // Q fragments held for the whole loop are read now; fragments read at every k-step wait instead with the
  // first key tile (the key loop's first wait covers every earlier group), so that Q's copies and that tile's
  // are in flight together.
  if (!hopper_ && !q_per_step())
    prologue.insert(prologue.end(), {intrinsic::async_wait(0), intrinsic::barrier(),
                                     load_fragments(q_fragments(), req_.reduction.name())});
  // The states: rows at the base identity and the initial reference, the column accumulators at 0.
  std::vector<Stmt> init;
  for (int k : row_components_)
    init.push_back(unrolled("S.slot", slots,
                            store("row." + form_->base[k].name, form_->base_identity[k], var("S.slot"))));
  if (keeps_reference())
    init.push_back(unrolled("S.slot", slots, store("row.ref", form_->initial_reference, var("S.slot"))));
  init.push_back(unrolled("S.o", row_points * col_points_ * 4,
                          store("acc.o", form_->base_identity[column_component_], var("S.o"))));

  auto tile_body = [&](bool masked) {
    masked_ = masked;
    return block({scores(), tile_selectors(), contributions()});
  };
  const Halide::Expr full = tile_is_full();
  auto tile = [&] {
    const Stmt masked = tile_body(true);
    if (is_const_zero(full)) return masked;
    return is_const_one(full) ? tile_body(false) : IfThenElse::make(full, tile_body(false), masked);
  };
  if (!is_const_one(full)) summary_ += fmt::format("  tiles where {} need no mask\n", full);
  const auto [first, count] = key_tiles();
  std::vector<Stmt> finish;
  for (int k : row_components_)
    if (!form_->is_selector(k))
      finish.push_back(quad_reduce("row." + form_->base[k].name, slots, form_->ops[k], form_->base[k].type));
  if (req_.output == ReductionKernelRequest::Output::values)
    write_backs_ = plan_write_backs(req_, loops_, summary_);
  Stmt body;
  if (specialized()) {
    // The epilogue stays in the consumers' branch, where setmaxnreg raised their registers: past the
    // branches' join the column accumulators would have to fit the producer's budget too. Its write-back
    // tiles then share the block's shared memory with the ring, so they are dropped (the outputs stored
    // directly) where the two do not fit together.
    int bytes = 0;
    for (const StagePlan &p : stages_) bytes += p.bytes();
    for (const StagePlan &p : write_backs_) bytes += p.bytes();
    if (bytes > req_.target.max_shared_bytes_per_block) {
      write_backs_.clear();
      summary_ += "  outputs stored directly: the write-back tiles do not fit beside the TMA ring\n";
    }
    // A persistent block's tiles write back through one tile, allocated around them all.
    const Stmt stores = persistent() ? epilogue() : with_shared_arrays(write_backs_, epilogue());
    body = with_shared_arrays(
        stages_, block({block(prologue),
                        tma_key_loop(first, count, tile, block(init), block({block(finish), stores}))}));
    if (persistent()) body = with_shared_arrays(write_backs_, body);
  } else {
    const Stmt loop =
        hopper_ ? tma_key_loop(first, count, tile, block(init), block(finish))
                : block({block(init),
                         staged_loop(key_loop_, first, count, ForType::Serial, at_key, mapping_.threads,
                                     tile(), loops_.func, PrefetchGuards::by_tile),
                         block(finish)});
    body = block({with_shared_arrays(stages_, block({block(prologue), loop})),
                  with_shared_arrays(write_backs_, epilogue())});
  }

  // Registers: the Q fragments for every k-step, one key tile's K, P and V fragments (wgmmas read Q, K and
  // V from shared memory), S's accumulators and the consumer's elements at S's points, the column
  // accumulators and the rows' states.
  const int s_points = row_points * jn_extent_ * 4;
  auto reg = [&](const std::string &name, const Type &t, int n, Stmt s) {
    return Allocate::make(name, t, Halide::MemoryType::Register, {n}, const_true(), s);
  };
  if (!hopper_) {
    body = reg("frag.q", rows_operand_.type, row_points * (q_per_step() ? 1 : dk_extent_) * 8, body);
    body = reg("frag.k", keys_operand_.type, jn_extent_ * 4, body);
    body = reg("frag.v", column_operand_.type, col_points_ * 4, body);
  }
  body = reg("frag.p", column_operand_.type, row_points * key_steps_ * 8, body);
  body = reg("acc.s", s_type_, s_points, body);
  if (hopper_ && req_.schedule->overlaps_producer()) body = reg("acc.s.next", s_type_, s_points, body);
  if (delays_column_products() && form_->has_reference)
    body = reg("rescale", form_->base[column_component_].type, slots, body);
  body = reg("valid", Halide::Bool(), s_points, body);
  body = reg("weight", column_row_factor_.type(), s_points, body);
  for (int k : row_elements_)
    body = reg("elem." + monoid_.elements[k].name, monoid_.elements[k].type, s_points, body);
  body = reg("acc.o", form_->base[column_component_].type, row_points * col_points_ * 4, body);
  for (int k : row_components_) body = reg("row." + form_->base[k].name, form_->base[k].type, slots, body);
  if (keeps_reference()) body = reg("row.ref", form_->ref_type, slots, body);
  std::vector<StagePlan> plans = stages_;
  plans.insert(plans.end(), write_backs_.begin(), write_backs_.end());
  std::vector<std::string> instructions =
      hopper_
          ? std::vector<std::string>{fmt::format("wgmma.mma_async.sync.aligned.m64n{}k16", jn_extent_ * 8),
                                     fmt::format("wgmma.mma_async.sync.aligned.m64n{}k16",
                                                 extent_of(atom_col_, "a wgmma atom's N")),
                                     "cp.async.bulk.tensor", "mbarrier.try_wait.parity", "__shfl_xor_sync"}
          : std::vector<std::string>{"ldmatrix.sync.aligned", "mma.sync.aligned.m16n8k16.row.col",
                                     "__shfl_xor_sync"};
  if (specialized()) instructions.push_back("setmaxnreg");
  Kernel k = assemble_kernel(req_, body, plans, mapping_, instructions, summary_);
  for (const auto &[element, c] : element_scales_)
    k.requirements.push_back(
        {c > make_zero(c.type()),
         fmt::format(
             "the scale {} of element '{}' must be positive for the tile's maximum to be taken before "
             "scaling; other values run the fallback kernel",
             c, monoid_.elements[element].name)});
  return k;
}

}  // namespace chained

Kernel build_chained_kernel(const ChainedKernelRequest &request) {
  return with_fallback<ChainedKernelRequest>(
      request, [](ChainedKernelRequest &r) -> ReductionKernelRequest & { return r.consumer; },
      [](const ChainedKernelRequest &r) { return chained::ChainedKernelBuilder(r).build(); });
}

}  // namespace twist
