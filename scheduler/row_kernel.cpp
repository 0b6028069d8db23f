#include "scheduler/row_kernel.h"

#include <algorithm>
#include <functional>
#include <map>
#include <optional>
#include <set>

#include "lang/error.h"
#include "scheduler/cooperative_tree.h"
#include "scheduler/expr_lowering.h"
#include "scheduler/intrinsics.h"
#include "scheduler/pointwise_kernel.h"
#include "scheduler/reduction_kernel.h"
#include "scheduler/stmt_building.h"
#include "scheduler/vector_accesses.h"

namespace twist {

using namespace Halide::Internal;
using namespace twist::stmt;

namespace {

constexpr int kDefaultThreads = 256;
// The most runs of 16 bytes a thread keeps of a row in registers; longer rows stay in shared memory.
constexpr int kMaxRegisterRuns = 8;
// The most registers per thread (by the row kernel's model) for which the row rule trades threads per row
// for runs per thread. In the norms of apps/norms at hidden 4096 to 16384, f16 and bf16, ptxas met bounds of
// 56 to 80 without spilling for softmax, RMSNorm and two-pass LayerNorm at 8 runs per thread, and spilled 4
// to 40 bytes for add + RMSNorm's 96 (two rows kept). LayerNorm by shifted sums spilled 32 to 72 bytes
// within it (72 and 80): the model's margin does not cover what ptxas keeps of its one tree of two sums.
constexpr int kMostRowRegisters = 80;
// The 16-byte vectors an elementwise thread moves per output, a block's width apart: loads in flight.
constexpr int kPointwiseRuns = 2;

Halide::Expr product(const std::vector<Halide::Expr> &extents) {
  Halide::Expr n = 1;
  for (const Halide::Expr &e : extents) n = n * e;
  return simplify(n);
}

// The block size for rows of `points` elements of `element_bytes`: each thread about four 16-byte vectors.
int row_threads(const Halide::Expr &points, int element_bytes) {
  const std::optional<int64_t> n = constant_value(points);
  if (!n) return kDefaultThreads;
  const int64_t per_thread = 4 * std::max(1, kVectorBytes / element_bytes);
  int threads = 32;
  while (threads < 1024 && threads * per_thread < *n) threads *= 2;
  return threads;
}

// The calls named `name` (of a func or an input) in e.
std::vector<const Call *> calls_named(const Halide::Expr &e, const std::string &name) {
  struct Calls : IRVisitor {
    const std::string &name;
    std::vector<const Call *> found;
    explicit Calls(const std::string &n) : name(n) {}
    using IRVisitor::visit;
    void visit(const Call *c) override {
      IRVisitor::visit(c);
      if ((c->call_type == Call::Halide || c->call_type == Call::Image) && c->name == name)
        found.push_back(c);
    }
  } calls(name);
  e.accept(&calls);
  return calls.found;
}

bool uses_any(const Halide::Expr &e, const std::set<std::string> &vars) {
  for (const std::string &v : vars)
    if (expr_uses_var(e, v)) return true;
  return false;
}

std::string join(const std::vector<Halide::Expr> &v) {
  return fmt::format("{}", fmt::join(v, ", "));
}

// The arguments and shared memory of a stage's kernel, and what the stage's schedule says of its every
// kernel: approximate math and the blocks each SM must hold (__launch_bounds__).
void finish(Kernel &k, const StageKernelRequest &r) {
  collect_arguments(*r.graph, k, r.output_buffers, r.intermediates);
  k.shared_bytes = shared_arrays(k.body).bytes;
  if (const FuncSchedule *fs = r.schedule->find(r.stage.name())) {
    k.fast_math = fs->approximate();
    k.min_blocks_per_sm = fs->min_blocks();
  }
}

int widest_output_bytes(const Func &stage) {
  int bytes = 1;
  for (const Type &t : stage.output_types()) bytes = std::max(bytes, t.bytes());
  return bytes;
}

// Scalar accesses: a thread's points a block's width apart (the fallback of the 16-byte kernel below).
Kernel scalar_pointwise_stage(const StageKernelRequest &r) {
  const Definition &d = r.stage.definition();
  const int points_per_thread = std::max(1, kVectorBytes / widest_output_bytes(r.stage));
  Kernel k = pointwise_kernel(
      r.kernel_name, r.extents,
      [&](const std::vector<Halide::Expr> &coords) {
        ExprLowering lowering(*r.graph);
        read_intermediates(lowering, r.intermediates);
        for (size_t a = 0; a < d.args.size(); ++a) lowering.bind(d.args[a].name(), coords[a]);
        std::vector<Stmt> stores;
        for (size_t o = 0; o < d.values.size(); ++o)
          stores.push_back(store(r.output_buffers[o].name,
                                 Halide::cast(r.output_buffers[o].type, lowering.lower(d.values[o])),
                                 flat_index(coords, r.extents)));
        return block(stores);
      },
      points_per_thread);
  k.schedule_summary =
      fmt::format("  {}: elementwise, {} points per thread a block apart, 256 threads per block\n",
                  r.stage.name(), points_per_thread);
  finish(k, r);
  return k;
}

// Runs of 16 bytes of the outputs per thread: each output stored, and each input that moves along its last
// dimension with the run read, with 16-byte copies. Needs the innermost extent to be a whole number of runs
// (a requirement when it is not a constant, with the scalar kernel as the fallback).
Kernel pointwise_stage(const StageKernelRequest &r) {
  const Definition &d = r.stage.definition();
  const int width = std::max(1, kVectorBytes / widest_output_bytes(r.stage));
  bool vectors = width > 1 && !r.extents.empty();
  for (const BufferArg &b : r.output_buffers) vectors = vectors && vector_copy_bytes(b.type, width) > 0;
  const Halide::Expr whole_runs = vectors ? simplify(r.extents.back() % width == 0) : const_false();
  if (is_const_zero(whole_runs)) return scalar_pointwise_stage(r);
  std::vector<Halide::Expr> runs = r.extents;
  runs.back() = simplify(runs.back() / width);
  std::vector<Halide::Expr> conditions = {whole_runs};
  int vector_reads = 0;
  Kernel k = pointwise_kernel(
      r.kernel_name, runs,
      [&](const std::vector<Halide::Expr> &coords) {
        const VectorRun run{"point.e", width, coords.back() * width, r.extents.back()};
        VectorReads reads(*r.graph, run);
        ExprLowering lowering(*r.graph);
        reads.install(lowering);
        read_intermediates(lowering, r.intermediates);
        for (size_t a = 0; a + 1 < d.args.size(); ++a) lowering.bind(d.args[a].name(), coords[a]);
        lowering.bind(d.args.back().name(), run.first + run.lane_var());
        std::vector<Halide::Expr> at = coords;
        at.back() = run.first;
        std::vector<Stmt> stores;
        for (size_t o = 0; o < d.values.size(); ++o)
          stores.push_back(vector_store(r.output_buffers[o].name, r.output_buffers[o].type,
                                        Halide::cast(r.output_buffers[o].type, lowering.lower(d.values[o])),
                                        flat_index(at, r.extents), run));
        for (const Halide::Expr &c : reads.conditions())
          if (std::none_of(conditions.begin(), conditions.end(),
                           [&](const Halide::Expr &known) { return equal(known, c); }))
            conditions.push_back(c);
        vector_reads = reads.vectorized();
        return reads.around(block(stores));
      },
      kPointwiseRuns);
  k.schedule_summary = fmt::format(
      "  {}: elementwise, {} runs of {} points per thread a block apart, 256 threads per block: 16-byte "
      "stores, {} input run(s) read with 16-byte loads\n",
      r.stage.name(), kPointwiseRuns, width, vector_reads);
  finish(k, r);
  for (const Halide::Expr &c : conditions)
    if (!is_const_one(c))
      k.requirements.push_back(
          {c, fmt::format("the rows of '{}' and of the inputs it reads along them are whole 16-byte vectors",
                          r.stage.name())});
  if (!k.requirements.empty()) {
    StageKernelRequest narrow = r;
    narrow.kernel_name += "_fallback";
    k.fallback = std::make_shared<const Kernel>(scalar_pointwise_stage(narrow));
  }
  return k;
}

// A reduction computed at the rows of the stage.
struct RowReduction {
  const FuncRealization *realization = nullptr;
  std::vector<Halide::Expr> point;  // its coordinates, over the stage's variables
  bool located = false;             // whether `point` was found (a func of no dimensions has an empty one)
  CooperativeTree tree;
};

// An input whose row is kept in shared memory, or in registers: each thread its runs of the row.
struct CachedRow {
  Input input;
  std::vector<Halide::Expr> prefix;  // its coordinates before the last, over the stage's row variables
  int length = 0;
};

// Where a loop nest of the row kernel visits the row in runs: point (run * threads + thread) * width + lane
// in the iteration (run, lane) of two unrolled loops, the register run * width + lane of a row kept in
// registers.
struct RunLayout {
  std::string run, lane;
  Halide::Expr thread;
};

class RowKernelBuilder {
 public:
  // `threads`: the block size to try, or 0 for row_threads' (a tree the schedule binds sets its own).
  // `form`: where a row of runs read several times is kept (registers, or not at all: read again).
  RowKernelBuilder(const StageKernelRequest &r, int threads, RowForm form)
      : req_(r), def_(r.stage.definition()), asked_threads_(threads), reread_(form == RowForm::reread) {}

  Kernel build(const std::vector<const FuncRealization *> &at) {
    for (const FuncRealization *f : at) {
      RowReduction r;
      r.realization = f;
      reductions_.push_back(r);
    }
    find_points();
    choose_rows();
    plan_trees();
    plan_cache();
    return assemble();
  }

  int threads() const { return threads_; }
  // The registers per thread the model gives (resident_rows), as asked of the compiler.
  int registers_per_thread() const {
    return req_.target.registers_per_sm / (resident_blocks_ * threads_) / 8 * 8;
  }
  // Whether the row rule may pick this kernel's block size: rows kept in registers, no tree bound to threads.
  bool may_choose_threads() const { return !threads_bound_ && !registers_.empty(); }
  // Whether a row of runs is read several times (kept in registers, or read again under RowForm::reread).
  bool keeps_runs() const { return !registers_.empty() || !reread_rows_.empty(); }
  // The threads an SM holds at the blocks per SM asked of the compiler.
  int resident_threads() const { return resident_blocks_ * threads_; }
  // The bytes of rows kept in registers that an SM holds (and had in flight as they loaded), at the blocks
  // per SM asked of the compiler; 0 where no row is kept in registers.
  int64_t resident_row_bytes() const {
    int64_t row = 0;
    for (const CachedRow &c : registers_) row += int64_t(c.length) * c.input.type().bytes();
    return row * resident_blocks_;
  }

 private:
  RowReduction *find(const std::string &name) {
    for (RowReduction &r : reductions_)
      if (r.realization->func.name() == name) return &r;
    return nullptr;
  }

  // Records where `caller` reads each row reduction in `e`, whose variables `bound` gives in stage terms.
  void note_calls(const std::string &caller, const Halide::Expr &e,
                  const std::map<std::string, Halide::Expr> &bound, const std::set<std::string> &rvars) {
    for (RowReduction &r : reductions_)
      for (const Call *c : calls_named(e, r.realization->func.name())) {
        std::vector<Halide::Expr> point;
        for (const Halide::Expr &a : c->args) point.push_back(simplify(substitute(bound, a)));
        for (const Halide::Expr &p : point)
          if (uses_any(p, rvars))
            fail(
                "func '{}' reads '{}' at ({}), which changes along its own reduction, so '{}' cannot be "
                "computed "
                "once per row of '{}'; compute it with compute_root()",
                caller, r.realization->func.name(), join(point), r.realization->func.name(),
                req_.stage.name());
        if (!r.located) {
          r.point = point;
          r.located = true;
          continue;
        }
        for (size_t k = 0; k < point.size(); ++k)
          if (!can_prove(point[k] == r.point[k]))
            fail(
                "'{}' is read at ({}) and at ({}) in one row of '{}'; a reduction computed at a row has one "
                "point "
                "there: compute it with compute_root()",
                r.realization->func.name(), join(r.point), join(point), req_.stage.name());
      }
  }

  std::vector<Halide::Expr> inlined(const std::vector<Expr> &es) const {
    std::vector<Halide::Expr> out;
    for (const Expr &e : es) out.push_back(inline_calls(*req_.graph, *req_.realization, e));
    return out;
  }

  std::map<std::string, Halide::Expr> pure_binding(const RowReduction &r) const {
    std::map<std::string, Halide::Expr> bound;
    const Definition &d = r.realization->func.definition();
    for (size_t k = 0; k < d.args.size(); ++k) bound[d.args[k].name()] = r.point[k];
    return bound;
  }

  std::string arg_names() const {
    std::string names;
    for (const Var &v : def_.args) names += (names.empty() ? "" : ", ") + v.name();
    return names;
  }

  std::set<std::string> rvars_of(const Func &f) const {
    std::set<std::string> names;
    if (f.definition().is_reduction())
      for (int k = 0; k < f.definition().reduction->domain.dimensions(); ++k)
        names.insert(f.definition().reduction->domain[k].name());
    return names;
  }

  void find_points() {
    for (const Halide::Expr &v : inlined(def_.values)) note_calls(req_.stage.name(), v, {}, {});
    for (auto it = reductions_.rbegin(); it != reductions_.rend(); ++it) {
      const Func &f = it->realization->func;
      TWIST_CHECK(it->located, "reduction '{}' computed at '{}' is not read there", f.name(),
                  req_.stage.name());
      for (const Halide::Expr &e : inlined(expressions(f.definition())))
        note_calls(f.name(), e, pure_binding(*it), rvars_of(f));
    }
  }

  void choose_rows() {
    int used = -1, asked = -1;
    const RowReduction *asker = nullptr;
    for (const RowReduction &r : reductions_) {
      for (const Halide::Expr &p : r.point)
        for (size_t a = 0; a < def_.args.size(); ++a)
          if (expr_uses_var(p, def_.args[a].name())) used = std::max(used, static_cast<int>(a));
      if (r.realization->by_default) continue;
      int at = -1;
      for (size_t a = 0; a < def_.args.size(); ++a)
        if (def_.args[a].name() == r.realization->loop) at = static_cast<int>(a);
      if (at < 0)
        fail(
            "schedule of '{}': compute_at({}, {}) at a row: the loop must be one of '{}''s own variables "
            "({}), "
            "unsplit",
            r.realization->func.name(), req_.stage.name(), r.realization->loop, req_.stage.name(),
            arg_names());
      if (at > asked) asker = &r;
      asked = std::max(asked, at);
    }
    if (asker && used > asked) {
      const RowReduction *reader = nullptr;
      for (const RowReduction &r : reductions_)
        for (const Halide::Expr &p : r.point)
          if (expr_uses_var(p, def_.args[used].name())) reader = &r;
      fail(
          "schedule of '{}': compute_at({}, {}) computes it once per iteration of loop '{}', but '{}' is "
          "read at ({}), "
          "which changes inside that loop (with '{}'); compute it at loop '{}'",
          asker->realization->func.name(), req_.stage.name(), asker->realization->loop,
          asker->realization->loop, reader->realization->func.name(), join(reader->point),
          def_.args[used].name(), def_.args[used].name());
    }
    row_dims_ = std::max(used, asked) + 1;
    for (int a = 0; a < static_cast<int>(def_.args.size()); ++a)
      (a < row_dims_ ? row_extents_ : column_extents_).push_back(req_.extents[a]);
    for (int a = row_dims_; a < static_cast<int>(def_.args.size()); ++a)
      column_vars_.insert(def_.args[a].name());
  }

  // Rows in registers: runs of 16 bytes of the row per thread where the row is one constant dimension of
  // whole runs, few enough per thread, and every tree a default one over a commutative monoid (which can deal
  // its points in the same runs). Otherwise width_ stays 1: rows in shared memory, one point at a time.
  void choose_runs(int element_bytes) {
    const int width = kVectorBytes / element_bytes;
    if (column_extents_.size() != 1 || width < 2) return;
    const std::optional<int64_t> columns = constant_value(column_extents_[0]);
    if (!columns || *columns % width != 0) return;
    for (const BufferArg &b : req_.output_buffers)
      if (vector_copy_bytes(b.type, width) == 0) return;
    for (const RowReduction &r : reductions_) {
      const Func &f = r.realization->func;
      const FuncSchedule *fs = req_.schedule->find(f.name());
      if (binds_reduction_to_threads(f, fs) || !f.definition().reduction->monoid->commutative) return;
    }
    const int64_t runs = (*columns + threads_ * width - 1) / (threads_ * width);
    if (runs > kMaxRegisterRuns) return;
    width_ = width;
    runs_ = static_cast<int>(runs);
    columns_ = static_cast<int>(*columns);
  }

  void plan_trees() {
    int element_bytes = 1;
    for (const Type &t : req_.stage.output_types()) element_bytes = std::max(element_bytes, t.bytes());
    threads_ = asked_threads_ > 0 ? asked_threads_ : row_threads(product(column_extents_), element_bytes);
    choose_runs(element_bytes);
    const RowReduction *bound = nullptr;
    for (const RowReduction &r : reductions_) {
      const FuncSchedule *fs = req_.schedule->find(r.realization->func.name());
      if (!binds_reduction_to_threads(r.realization->func, fs)) continue;
      const int t = plan_tree(r.realization->func, fs, threads_).threads;
      if (bound && t != threads_)
        fail(
            "schedule of '{}': its tree uses {} threads but the tree of '{}' in the same row of '{}' uses "
            "{}; give "
            "both the same",
            r.realization->func.name(), t, bound->realization->func.name(), req_.stage.name(), threads_);
      bound = &r;
      threads_ = t;
      threads_bound_ = true;
    }
    for (RowReduction &r : reductions_) {
      const FuncSchedule *fs = req_.schedule->find(r.realization->func.name());
      if (fs && fs->reduction_split())
        fail(
            "schedule of '{}': split_reduction spreads a reduction over blocks, but it is computed at a row "
            "of '{}' "
            "(one block); compute it with compute_root() to split it",
            r.realization->func.name(), req_.stage.name());
      r.tree = plan_tree(r.realization->func, fs, threads_, width_);
      // Its fold reads the registers only where its runs are the row's (a longer reduction would index past
      // them).
      const int64_t *tree_runs =
          r.tree.run_loop.empty() ? nullptr : as_const_int(r.tree.loops.dim(r.tree.run_loop).extent);
      if (tree_runs && *tree_runs <= runs_)
        layouts_.push_back({r.tree.run_loop, r.tree.vector_loop, var(r.tree.lane_loop)});
      summary_ += r.tree.summary;
    }
  }

  void plan_cache() {
    std::set<std::string> rvars;
    for (const RowReduction &r : reductions_)
      for (const std::string &v : rvars_of(r.realization->func)) rvars.insert(v);
    std::vector<Halide::Expr> computed = inlined(def_.values);
    for (const RowReduction &r : reductions_)
      for (const Halide::Expr &e : inlined(expressions(r.realization->func.definition())))
        computed.push_back(substitute(pure_binding(r), e));
    bool placed_by_schedule = false;
    for (const RowReduction &r : reductions_)
      placed_by_schedule = placed_by_schedule || !r.realization->by_default;
    int bytes = 0;
    for (const Input &in : req_.graph->inputs) {
      std::vector<const Call *> reads;
      for (const Halide::Expr &e : computed)
        for (const Call *c : calls_named(e, in.name())) reads.push_back(c);
      if (reads.size() < 2) continue;
      const std::optional<int64_t> length = constant_value(in.shape().back());
      std::vector<Halide::Expr> prefix(reads[0]->args.begin(), reads[0]->args.end() - 1);
      bool one_row = true;
      for (const Call *c : reads)
        for (size_t k = 0; k + 1 < c->args.size(); ++k)
          one_row = one_row && !uses_any(c->args[k], column_vars_) && !uses_any(c->args[k], rvars) &&
                    can_prove(c->args[k] == prefix[k]);
      if (!one_row) continue;
      if (!length) {
        summary_ += fmt::format(
            "  input '{}' is read {} times per row from global memory: its row length {} is not a "
            "constant, so it is not kept in shared memory\n",
            in.name(), reads.size(), in.shape().back());
        continue;
      }
      if (width_ > 1 && *length == columns_ && vector_copy_bytes(in.type(), width_) > 0) {
        (reread_ ? reread_rows_ : registers_).push_back({in, prefix, static_cast<int>(*length)});
        continue;
      }
      const int demand = static_cast<int>(*length) * in.type().bytes();
      if (bytes + demand + kTreeReserve > req_.target.max_shared_bytes_per_block) {
        if (placed_by_schedule)
          fail(
              "schedule of '{}': computed at loop '{}' of '{}', it keeps the row of input '{}' in shared "
              "memory "
              "({} elements of {} B: {} bytes), {} bytes in all with the rows kept already ({} B) and the "
              "trees' "
              "arrays ({} B), but {} allows {} bytes per block; leave the reduction unscheduled (the default "
              "reads "
              "the input again from global memory) or compute it with compute_root()",
              first_scheduled()->func.name(), first_scheduled()->loop, req_.stage.name(), in.name(), *length,
              in.type().bytes(), demand, bytes + demand + kTreeReserve, bytes, kTreeReserve, req_.target.arch,
              req_.target.max_shared_bytes_per_block);
        summary_ += fmt::format(
            "  input '{}' is read {} times per row from global memory: its row ({} B) does not fit "
            "in shared memory\n",
            in.name(), reads.size(), demand);
        continue;
      }
      bytes += demand;
      cached_.push_back({in, prefix, static_cast<int>(*length)});
    }
  }

  const FuncRealization *first_scheduled() const {
    for (const RowReduction &r : reductions_)
      if (!r.realization->by_default) return r.realization;
    return reductions_.front().realization;
  }

  // Copies the row of `c` into shared memory: 16-byte cp.async copies where a row is a whole number of them.
  Stmt fill(const CachedRow &c, const ExprLowering &lowering) const {
    std::vector<Halide::Expr> at;
    for (const Halide::Expr &p : c.prefix) at.push_back(lowering.lower(p));
    at.push_back(0);
    const Halide::Expr base = flat_index(at, to_halide(c.input.shape()));
    const int bytes = c.input.type().bytes();
    const bool vectors = (c.length * bytes) % kVectorBytes == 0;
    const int per_copy = vectors ? kVectorBytes / bytes : 1;
    const int copies = c.length / per_copy;
    const std::string s = row_buffer(c) + ".s";
    const Halide::Expr q = var(s) * threads_ + intrinsic::thread_index();
    const Stmt one = vectors
                         ? intrinsic::copy({row_buffer(c), q * per_copy, c.input.name(), base + q * per_copy,
                                            kVectorBytes, Halide::Expr(kVectorBytes), true})
                         : store(row_buffer(c), load(c.input.type(), c.input.name(), base + q), q);
    Stmt loop = For::make(s, 0, (copies + threads_ - 1) / threads_, ForType::Serial, Halide::DeviceAPI::None,
                          guarded(q < copies, one));
    if (vectors) loop = block({loop, intrinsic::async_commit(), intrinsic::async_wait(0)});
    return loop;
  }

  static std::string row_buffer(const CachedRow &c) { return c.input.name() + ".row"; }

  // Copies this thread's runs of the row of `c` into its registers with 16-byte copies.
  Stmt fill_registers(const CachedRow &c, const ExprLowering &lowering) const {
    std::vector<Halide::Expr> at;
    for (const Halide::Expr &p : c.prefix) at.push_back(lowering.lower(p));
    const Halide::Expr chunk = var("fill.s") * threads_ + intrinsic::thread_index();
    at.push_back(chunk * width_);
    return unrolled(
        "fill.s", runs_,
        guarded(run_in_row(chunk),
                vector_copies(register_row(c), var("fill.s") * width_, c.input.name(),
                              flat_index(at, to_halide(c.input.shape())), c.input.type(), width_)));
  }

  // Whether the thread's run `chunk` lies in the row: no test where the threads' runs tile the row exactly.
  // Each test is a branch around the run's code, and a load inside one cannot be issued before the branch:
  // with tests, the epilogue loads each run's weights only after the run before it was computed and stored,
  // a round trip to L2 per run.
  Halide::Expr run_in_row(const Halide::Expr &chunk) const {
    if (runs_ * threads_ * width_ == columns_) return const_true();
    return chunk < columns_ / width_;
  }

  static std::string register_row(const CachedRow &c) { return c.input.name() + ".regs"; }

  // Reads of `c` in its row at a point some RunLayout visits come from the registers; the others from
  // `other`.
  ExprLowering::Reader read_registers(const CachedRow &c, const ExprLowering &lowering,
                                      ExprLowering::Reader other) const {
    std::vector<Halide::Expr> prefix;
    for (const Halide::Expr &p : c.prefix) prefix.push_back(lowering.lower(p));
    return [this, c, prefix, other](const std::vector<Halide::Expr> &coords) {
      bool same_row = true;
      for (size_t k = 0; k < prefix.size(); ++k) same_row = same_row && can_prove(coords[k] == prefix[k]);
      for (const RunLayout &l : layouts_)
        if (same_row && can_prove(coords.back() == (var(l.run) * threads_ + l.thread) * width_ + var(l.lane)))
          return load(c.input.type(), register_row(c), var(l.run) * width_ + var(l.lane));
      return other(coords);
    };
  }

  // The row's points of the stage, dealt to the threads in turn, one point at a time.
  Stmt scalar_epilogue(const ExprLowering &lowering) const {
    const Halide::Expr columns = product(column_extents_);
    const Halide::Expr c = var("column.s") * threads_ + intrinsic::thread_index();
    std::vector<Halide::Expr> at;
    for (const Var &v : def_.args) at.push_back(Halide::Expr(v));
    std::vector<Stmt> stores;
    for (size_t o = 0; o < def_.values.size(); ++o)
      stores.push_back(store(req_.output_buffers[o].name,
                             Halide::cast(req_.output_buffers[o].type, lowering.lower(def_.values[o])),
                             flat_index(at, req_.extents)));
    std::vector<std::pair<std::string, Halide::Expr>> column_lets;
    const std::vector<Halide::Expr> column_coords = point_coords(column_extents_, c);
    for (size_t k = 0; k < column_coords.size(); ++k)
      column_lets.push_back({def_.args[row_dims_ + k].name(), column_coords[k]});
    return For::make("column.s", 0, simplify((columns + (threads_ - 1)) / threads_), ForType::Serial,
                     Halide::DeviceAPI::None,
                     guarded(simplify(c < columns), let_all(column_lets, block(stores))));
  }

  // The row's points of the stage in runs of 16 bytes: each output stored with 16-byte copies.
  Stmt run_epilogue(ExprLowering lowering, VectorReads &reads) const {
    const VectorRun &run = epilogue_run();
    lowering.bind(def_.args[row_dims_].name(), run.first + run.lane_var());
    std::vector<Halide::Expr> at;
    for (const Var &v : def_.args) at.push_back(Halide::Expr(v));
    at.back() = run.first;
    std::vector<Stmt> stores;
    for (size_t o = 0; o < def_.values.size(); ++o)
      stores.push_back(vector_store(req_.output_buffers[o].name, req_.output_buffers[o].type,
                                    Halide::cast(req_.output_buffers[o].type, lowering.lower(def_.values[o])),
                                    flat_index(at, req_.extents), run));
    const Halide::Expr chunk = var("column.s") * threads_ + intrinsic::thread_index();
    return unrolled("column.s", runs_, guarded(run_in_row(chunk), reads.around(block(stores))));
  }

  VectorRun epilogue_run() const {
    const Halide::Expr chunk = var("column.s") * threads_ + intrinsic::thread_index();
    return {"column.e", width_, chunk * width_, Halide::Expr(columns_)};
  }

  Kernel assemble() {
    ExprLowering lowering(*req_.graph);
    VectorReads epilogue_reads(*req_.graph, epilogue_run());
    if (width_ > 1) {
      epilogue_reads.install(lowering);
      layouts_.push_back({"column.s", "column.e", intrinsic::thread_index()});
    }
    read_intermediates(lowering, req_.intermediates);
    std::vector<Stmt> fills;
    for (const CachedRow &c : cached_) {
      fills.push_back(fill(c, lowering));
      const int length = c.length;
      const std::string buffer = row_buffer(c);
      const Type t = c.input.type();
      summary_ += fmt::format(
          "  input '{}': its row of {} elements read once into shared memory{}\n", c.input.name(), c.length,
          (c.length * t.bytes()) % kVectorBytes == 0 ? " with 16-byte cp.async copies" : "");
      lowering.read_input_with(c.input.name(), [buffer, t, length](const std::vector<Halide::Expr> &coords) {
        return load(t, buffer, Halide::clamp(coords.back(), 0, length - 1));
      });
    }
    for (const CachedRow &c : registers_) {
      fills.push_back(fill_registers(c, lowering));
      summary_ += fmt::format(
          "  input '{}': its row of {} elements read once into registers, {} run(s) of {} per thread with "
          "16-byte loads\n",
          c.input.name(), c.length, runs_, width_);
      const Input in = c.input;
      VectorReads *reads = &epilogue_reads;
      lowering.read_input_with(
          in.name(), read_registers(c, lowering, [reads, in](const std::vector<Halide::Expr> &coords) {
            return reads->read(in, coords);
          }));
    }
    for (const CachedRow &c : reread_rows_)
      summary_ += fmt::format(
          "  input '{}': its row of {} elements not kept: each pass and the epilogue read it again from "
          "global memory, {} run(s) of {} per thread with 16-byte loads\n",
          c.input.name(), c.length, runs_, width_);
    lowering.on_func_call(
        [this](const Call *c, const std::vector<Halide::Expr> &args) -> std::optional<Halide::Expr> {
          const RowReduction *r = find(c->name);
          if (!r) return std::nullopt;
          for (size_t k = 0; k < args.size(); ++k)
            TWIST_CHECK(can_prove(args[k] == r->point[k]),
                        "'{}' read at ({}) in the row where it is computed at ({})", c->name, join(args),
                        join(r->point));
          return tree_values(r->tree)[c->value_index];
        });

    Stmt body = width_ > 1 ? run_epilogue(lowering, epilogue_reads) : scalar_epilogue(lowering);
    for (auto it = reductions_.rbegin(); it != reductions_.rend(); ++it) {
      ExprLowering own = lowering;
      own.bind(pure_binding(*it));
      // A row read again: each run of the tree's fold loads its points with 16-byte copies.
      std::optional<VectorReads> run_reads;
      std::function<Stmt(const Stmt &)> around_run;
      const CooperativeTree &t = it->tree;
      if (!reread_rows_.empty() && !t.run_loop.empty()) {
        const Halide::Expr chunk = var(t.run_loop) * threads_ + var(t.lane_loop);
        run_reads.emplace(*req_.graph,
                          VectorRun{t.vector_loop, width_, chunk * width_, Halide::Expr(columns_)});
        VectorReads *reads = &*run_reads;
        for (const CachedRow &c : reread_rows_) {
          const Input in = c.input;
          own.read_input_with(in.name(), [reads, in](const std::vector<Halide::Expr> &coords) {
            return reads->read(in, coords);
          });
        }
        around_run = [this, reads, chunk](const Stmt &fold) {
          return guarded(run_in_row(chunk), reads->around(fold));
        };
      }
      body = tree_fold(t, own, body, around_run);
    }
    if (!fills.empty()) body = block({block(fills), cached_.empty() ? Stmt() : intrinsic::barrier(), body});
    for (const CachedRow &cached : cached_)
      body = Allocate::make(row_buffer(cached), cached.input.type(), Halide::MemoryType::GPUShared,
                            {cached.length}, const_true(), body);
    for (const CachedRow &cached : registers_)
      body = Allocate::make(register_row(cached), cached.input.type(), Halide::MemoryType::Register,
                            {runs_ * width_}, const_true(), body);
    std::vector<std::pair<std::string, Halide::Expr>> row_lets;
    const std::vector<Halide::Expr> row_coords = point_coords(row_extents_, intrinsic::block_index(0));
    for (size_t k = 0; k < row_coords.size(); ++k) row_lets.push_back({def_.args[k].name(), row_coords[k]});
    body = let_all(row_lets, body);

    Kernel k;
    k.name = req_.kernel_name;
    k.threads = threads_;
    k.grid = {product(row_extents_), Halide::Expr(1), Halide::Expr(1)};
    k.body = simplify_exprs(body);
    std::vector<std::string> row_names;
    for (int a = 0; a < row_dims_; ++a) row_names.push_back(def_.args[a].name());
    const Halide::Expr columns = product(column_extents_);
    k.schedule_summary =
        fmt::format(
            "  {}: one block of {} threads per row ({}), {} point(s) of the row per thread{}\n",
            req_.stage.name(), threads_,
            row_names.empty() ? "the whole func" : fmt::format("{}", fmt::join(row_names, ", ")),
            simplify((columns + (threads_ - 1)) / threads_),
            width_ > 1 ? fmt::format(" in {} run(s) of {}, stored with 16-byte stores", runs_, width_) : "") +
        summary_;
    finish(k, req_);
    if (width_ > 1) {
      int vectors = epilogue_reads.vectorized();
      for (const CachedRow &c : reread_rows_) vectors -= epilogue_reads.vectorized(c.input.name());
      const int blocks = resident_rows(vectors);
      resident_blocks_ = std::max(blocks, k.min_blocks_per_sm);
      if (blocks > k.min_blocks_per_sm) {
        k.min_blocks_per_sm = blocks;
        k.schedule_summary += fmt::format(
            "  {} blocks per SM asked of the compiler (rows resident, their loads in flight): at most {} "
            "registers per thread\n",
            blocks, req_.target.registers_per_sm / (blocks * threads_) / 8 * 8);
      }
    }
    if (k.shared_bytes > req_.target.max_shared_bytes_per_block)
      fail("the row kernel of '{}' needs {} bytes of shared memory per block, but {} allows {}",
           req_.stage.name(), k.shared_bytes, req_.target.arch, req_.target.max_shared_bytes_per_block);
    return k;
  }

  // A row kept in registers is loaded whole before its trees read it, so what an SM has in flight is the
  // loads of the rows resident on it, and their number is set by registers (at 4.3 TB/s over 132 SMs and
  // about a microsecond of latency an SM needs some 32 KB in flight while its other rows fold and store).
  // The kernel asks the compiler (__launch_bounds__) for as many blocks as leave each thread the registers
  // of its runs of the rows (as loaded, packed), of the values of the epilogue's 16-byte vectors (in f32,
  // one register each) and kRowThreadRegisters more; left alone, ptxas keeps converted copies of the row and
  // held two rows of softmax's 16384 per SM where this asks for three (bench/RESULTS.md: 70% -> 98% of copy).
  // A row read again (RowForm::reread) counts the same (`epilogue_vectors` leaves out its vectors, the same
  // runs): its passes' runs are unrolled, and ptxas issues all of a pass's loads before it folds them, so a
  // thread holds its runs of the row within each pass. Asked for the epilogue's vectors alone (32-40
  // registers at hidden 16384 and 512 threads), RMSNorm and bf16 softmax spilled 8 to 20 bytes and lost 4-9%
  // and 19% to the row in registers at 40-61 (bench/RESULTS.md, "Norms: rows read again").
  int resident_rows(int epilogue_vectors) const {
    int words = epilogue_vectors * width_;
    for (const std::vector<CachedRow> *rows : {&registers_, &reread_rows_})
      for (const CachedRow &c : *rows) words += runs_ * width_ * c.input.type().bytes() / 4;
    // Registers are allocated to a warp's threads eight at a time.
    const int per_thread = (words + kRowThreadRegisters + 7) / 8 * 8;
    const int most = std::min(req_.target.max_blocks_per_sm, req_.target.max_threads_per_sm / threads_);
    return std::clamp(req_.target.registers_per_sm / (threads_ * per_thread), 1, most);
  }

  // The registers a row kernel's thread needs besides its runs of the rows and vectors: the trees' states,
  // indices, the row's statistics and the values in flight. Measured with ptxas on the norms of apps/norms
  // at hidden 2048 to 16384 in f16 and bf16 when every run was tested for its place in the row (16 spilled
  // LayerNorm in bf16). Without those tests ptxas hoists the epilogue's loads, and under it spills 4 to 8
  // bytes in some at hidden 4096 to 16384 (RMSNorm, bf16 softmax, LayerNorm and add + RMSNorm in bf16) and
  // 12 to 48 at 2048; measured so (bench/RESULTS.md, "Norms: runs without tests"), not refitted.
  static constexpr int kRowThreadRegisters = 24;

  // Shared memory kept for the trees' arrays (a state per warp and the result, per component).
  static constexpr int kTreeReserve = 2048;

  const StageKernelRequest &req_;
  const Definition &def_;
  std::vector<RowReduction> reductions_;
  int row_dims_ = 0;
  std::vector<Halide::Expr> row_extents_, column_extents_;
  std::set<std::string> column_vars_;
  const int asked_threads_;
  int threads_ = kDefaultThreads;
  bool threads_bound_ = false;
  int resident_blocks_ = 0;
  // Runs of `width_` points (1: one point at a time), `runs_` per thread, over a row of `columns_` points.
  int width_ = 1, runs_ = 0, columns_ = 0;
  std::vector<RunLayout> layouts_;
  std::vector<CachedRow> cached_, registers_;
  // RowForm::reread: rows of runs read several times, not kept (each pass reads them from global memory).
  const bool reread_;
  std::vector<CachedRow> reread_rows_;
  std::string summary_;
};

}  // namespace

Kernel build_row_kernel(const StageKernelRequest &request) {
  const std::vector<const FuncRealization *> at = request.realization->computed_at(request.stage.name());
  if (at.empty()) return pointwise_stage(request);
  const FuncSchedule *fs = request.schedule->find(request.stage.name());
  const RowForm asked = fs ? fs->row_form_choice() : RowForm::chosen;
  const int asked_threads = fs ? fs->row_threads() : 0;
  if (asked == RowForm::reread || asked_threads > 0) {
    RowKernelBuilder chosen(request, asked_threads, asked == RowForm::reread ? asked : RowForm::registers);
    Kernel k = chosen.build(at);
    if (chosen.keeps_runs())
      k.schedule_summary += fmt::format("  {} threads per row (the schedule's row_form): {} threads per SM\n",
                                        chosen.threads(), chosen.resident_threads());
    else
      k.schedule_summary +=
          "  the schedule's row_form does not apply: no row read several times is dealt in 16-byte runs\n";
    return k;
  }
  // The rule keeps rows in registers. Read again (RowForm::reread) a row needs as many registers for the
  // same bytes in flight, its passes' loads being issued together, and it never ran faster than the
  // registers at the same threads per row: a tie to 1.4% slower at the same registers, 2-6% slower for add +
  // RMSNorm at hidden 16384 (two rows read again), 4-19% where its launch bounds then made it spill (H200,
  // the norms of apps/norms at 8192x4096 to 32768x16384; bench/RESULTS.md, "Norms: rows read again"). It
  // stays the schedule's choice.
  RowKernelBuilder rule(request, 0, RowForm::registers);
  Kernel best = rule.build(at);
  if (!rule.may_choose_threads()) return best;
  // Fewer threads per row, each with more runs: a thread's registers beyond its runs (the epilogue's vectors,
  // the trees' states, indices) are the same whatever its runs, so longer runs per thread keep more of an
  // SM's registers as row, and more bytes of rows resident and in flight (RMSNorm at hidden 8192: 5 blocks
  // of 256 threads at 48 registers, 80 KB, or 8 of 128 at 64, 128 KB). The most bytes win; a tie keeps more
  // threads per row (shorter serial folds). Only within kMostRowRegisters per thread by the model: beyond
  // it ptxas spilled (bench/RESULTS.md, "Norms: threads per row").
  int64_t most = rule.resident_row_bytes();
  for (int threads = rule.threads() / 2; threads >= 32; threads /= 2) {
    RowKernelBuilder fewer(request, threads, RowForm::registers);
    Kernel k = fewer.build(at);
    if (!fewer.may_choose_threads()) break;  // past kMaxRegisterRuns runs per thread: not in registers
    if (fewer.registers_per_thread() > kMostRowRegisters || fewer.resident_row_bytes() <= most) continue;
    most = fewer.resident_row_bytes();
    best = std::move(k);
  }
  best.schedule_summary += fmt::format(
      "  {} threads per row: the block size (of {} and fewer) that keeps the most bytes of rows resident per "
      "SM, {} KB\n",
      best.threads, rule.threads(), most / 1024);
  return best;
}

Kernel build_tree_kernel(const StageKernelRequest &r) {
  const Func &f = r.stage;
  const Definition &d = f.definition();
  Halide::Expr points = 1;
  for (int k = 0; k < d.reduction->domain.dimensions(); ++k)
    points = points * d.reduction->domain[k].extent();
  const FuncSchedule *fs = r.schedule->find(f.name());
  const CooperativeTree tree = plan_tree(f, fs, row_threads(points, 4));
  const int parts = fs && fs->reduction_split() ? fs->reduction_split()->parts : 1;
  ExprLowering lowering(*r.graph);
  read_intermediates(lowering, r.intermediates);
  std::vector<Halide::Expr> at;
  for (const Var &v : d.args) at.push_back(Halide::Expr(v));
  std::vector<Stmt> stores;
  if (r.partial_states) {
    std::vector<Halide::Expr> where = {var(tree.part_loop)}, shape = {Halide::Expr(parts)};
    where.insert(where.end(), at.begin(), at.end());
    shape.insert(shape.end(), r.extents.begin(), r.extents.end());
    const std::vector<Halide::Expr> state = tree_state(tree);
    for (size_t c = 0; c < state.size(); ++c)
      stores.push_back(store(r.output_buffers[c].name, state[c], flat_index(where, shape)));
  } else {
    const std::vector<Halide::Expr> values = tree_values(tree);
    for (size_t o = 0; o < values.size(); ++o)
      stores.push_back(store(r.output_buffers[o].name, Halide::cast(r.output_buffers[o].type, values[o]),
                             flat_index(at, r.extents)));
  }
  Stmt body = tree_fold(tree, lowering, guarded(intrinsic::thread_index() == 0, block(stores)));
  if (!tree.part_loop.empty()) body = LetStmt::make(tree.part_loop, intrinsic::block_index(1), body);
  std::vector<std::pair<std::string, Halide::Expr>> lets;
  const std::vector<Halide::Expr> coords = point_coords(r.extents, intrinsic::block_index(0));
  for (size_t k = 0; k < coords.size(); ++k) lets.push_back({d.args[k].name(), coords[k]});
  Kernel k;
  k.name = r.kernel_name;
  k.threads = tree.threads;
  k.grid = {product(r.extents), Halide::Expr(parts), Halide::Expr(1)};
  k.body = simplify_exprs(let_all(lets, body));
  k.schedule_summary = fmt::format("  {}: one block per output point{}\n", f.name(),
                                   parts > 1 ? fmt::format(" and per part ({} parts)", parts) : "") +
                       tree.summary;
  finish(k, r);
  return k;
}

}  // namespace twist
