#include "scheduler/reduction_kernel.h"

#include <algorithm>
#include <array>
#include <functional>
#include <map>
#include <set>

#include "lang/error.h"
#include "lang/param.h"
#include "scheduler/contraction.h"
#include "scheduler/epilogue.h"
#include "scheduler/expr_lowering.h"
#include "scheduler/fragments.h"
#include "scheduler/hopper_layouts.h"
#include "scheduler/intrinsics.h"
#include "scheduler/kernel_assembly.h"
#include "scheduler/loops.h"
#include "scheduler/named_barriers.h"
#include "scheduler/register_split.h"
#include "scheduler/staging.h"
#include "scheduler/stmt_building.h"
#include "scheduler/stream_k.h"
#include "scheduler/thread_mapping.h"

namespace twist {

using namespace Halide::Internal;
using namespace twist::stmt;

namespace {

class ReductionKernelBuilder {
 public:
  explicit ReductionKernelBuilder(const ReductionKernelRequest &r)
      : req_(r), def_(r.reduction.definition()), monoid_(*def_.reduction->monoid), lowering_(*r.graph) {
    read_intermediates(lowering_, r.intermediates);
  }

  Kernel build();

 private:
  using Output = ReductionKernelRequest::Output;

  void plan_loops();
  void plan_stages();
  void plan_atom();
  void plan_write_backs();
  void check_register_budget() const;

  // The loop nest from the first reduction loop inwards, with the innermost statement `inner`.
  Stmt nest(size_t position, const std::function<Stmt()> &inner);
  Stmt wrap_with_stages(int dim, Stmt loop_body);
  Stmt fragment_loads(const Halide::Expr &slice = 0);
  // The staged k-tile loop of a tensor-core reduction with its fragment loads software-pipelined (see the
  // definition), or an undefined Stmt when the loops do not have that shape.
  Stmt pipelined_mainloop();
  // The reduction and epilogue of a wgmma kernel: TMA copies into a ring of slots with full and empty
  // mbarriers, wgmma atoms reading the slots through descriptors, then `finish` (the promotion of hybrid
  // partials and the epilogue). Without warp specialization every thread computes and thread 0 also issues
  // the copies; with it, a producer warpgroup issues them and the bound warpgroups compute.
  // `finish(split)`: a stream-K unit's finish folds its tile's parts first (stream_k.h).
  Stmt tma_wgmma_kernel(const std::function<Stmt(bool split)> &finish);
  // The warpgroups' register demand against the SM's register file and the setmaxnreg budgets.
  void check_warp_specialization() const;
  intrinsic::WgmmaOperand wgmma_operand(const ContractionOperand &operand) const;
  // Accumulator elements per thread and register point: 4 for mma.m16n8k16, N / 2 for wgmma.
  int accumulator_elements() const { return wgmma_n_ > 0 ? wgmma_n_ / 2 : 4; }
  int fragment_count(const std::vector<int> &dims) const;
  Stmt promote_partials() const;
  Stmt fold_update();
  Stmt atom_update();
  // Runs `body` once per register point (the register dims as unrolled loops; in atom mode, also the four
  // accumulator elements of each lane, with the atom's row and column loops defined from the lane). With
  // `pairs`, only the even elements: each the first of a column pair whose second is the element after it.
  Stmt for_each_point(const std::function<Stmt()> &body, bool pairs = false) const;
  // Whether the epilogue stores a consumer's points from column pairs of the accumulators; refuses, saying
  // why, a schedule under which a thread does not hold both columns of each pair.
  bool stores_column_pairs() const;
  // The epilogue's stores where the consumer folds the reduction's rows (ReductionKernelRequest::fold_dim):
  // the row folds from the accumulators and quad shuffles, then each point's value; refuses, saying why, a
  // schedule under which one thread quad does not hold each row whole.
  Stmt stores_with_row_folds(const Halide::Expr &part) const;
  Halide::Expr register_index(const std::vector<int> &dims) const;
  Stmt init_states() const;
  Stmt epilogue();
  // The epilogue's writes of a wgmma kernel's 16-bit output into its TMA write-back tile by stmatrix, or an
  // undefined Stmt where that does not apply (see the definition).
  Stmt stmatrix_writes(const std::vector<Halide::Expr> &coords) const;
  // The states at the current point (in atom mode, at the accumulator element `element_offset` after it),
  // as the monoid's types.
  std::vector<Halide::Expr> state_values(int element_offset = 0) const;

  const ReductionKernelRequest &req_;
  const Definition &def_;
  const Monoid &monoid_;
  ExprLowering lowering_;
  LoopStructure loops_;
  ThreadMapping mapping_;
  std::vector<StagePlan> stages_;
  std::vector<StagePlan> write_backs_;  // outputs whose tiles go out through shared memory
  std::vector<Halide::Expr> elements_;  // the reduction's elements in kernel terms
  std::vector<size_t> outer_;           // serial pure loops outside the reduction, in order
  std::vector<size_t> nest_;  // serial loops from the first reduction loop inwards (atom loops excluded)
  std::vector<int> register_dims_;  // pure loops inside the reduction nest: their states live in registers
  // Matrix atom.
  bool atom_ = false;
  int atom_i_ = -1, atom_j_ = -1, atom_k_ = -1;
  int wgmma_n_ = 0;  // the wgmma atom's N; 0 for mma.m16n8k16
  std::optional<Contraction> contraction_;
  Type accumulator_type_;
  int load_point_ = -1;    // the loop (index into dims) at the top of whose body fragments are loaded
  int promote_loop_ = -1;  // hybrid accumulation: the loop at the end of whose body partials are promoted
  int fragment_slices_ =
      1;  // fragment arrays hold this many k-steps (the pipelined main loop keeps them all)
  std::vector<int> a_dims_, b_dims_;  // register dims each operand's fragment array spans
  // Warp specialization: the threads of the bound warpgroups, which compute (the producer's come after).
  int consumer_threads_ = 0;
  // The TMA ring's iteration, whose slot and phase the wgmma operands read: the k-tile loop's variable, or in
  // a persistent kernel the k-tiles of the block's earlier tiles plus it.
  Halide::Expr ring_iteration_;
  // A persistent grid: the output tiles, and each bound block loop's value at tile `tile.index`.
  Halide::Expr tile_count_;
  std::vector<std::pair<std::string, Halide::Expr>> tile_coordinates_;
  // Makes the grid persistent (FuncSchedule::persistent): the block loops become functions of a tile index.
  void plan_persistent_grid();
  // The persistent grid's units of work (stream_k.h), set by tma_wgmma_kernel.
  PersistentUnits units_;
  // Stream-K (FuncSchedule::stream_k): the fixup's access to the states, and its workspaces.
  TileStates stream_k_states() const;
  Stmt set_states(const std::vector<Halide::Expr> &values) const;
  std::vector<BufferArg> stream_k_buffers() const;
  // Thread-block clusters (FuncSchedule::cluster): the blocks of a cluster take consecutive tiles of the
  // raster order, vertically adjacent, and the TMA stages whose tiles they share are multicast.
  int cluster_ = 1;
  std::vector<std::string> multicast_inputs_;  // the inputs whose tiles a cluster's blocks share
  void plan_cluster();
  // Ping-pong (WarpSpecialization::ping_pong on a persistent contraction): the block runs kPingPongTeams
  // consumer warpgroups, "teams", each computing whole output tiles as the consumer of a one-warpgroup block
  // would (its code is that block's, with the thread index taken within the team), the block's tiles dealt
  // to them in turn. Their main loops alternate on named barriers: team t waits for its turn on barrier
  // named_barriers::kFirstTurn + t and passes it to the next team once it has waited for its tile's last
  // k-tile, so that one team's epilogue runs while the next team's wgmmas do. Each team has its own
  // write-back tile (slot t of the write-backs) and epilogue barrier (named_barriers::kFirstTeamEpilogue +
  // t).
  static constexpr int kPingPongTeams = named_barriers::kPingPongTeams;
  bool ping_pong_ = false;
  int team_threads_ = 0;  // the threads of one team: the threads the loops bind
  void plan_ping_pong();
  Halide::Expr team() const { return var("consumer.team"); }
  // `x` (an expression or statement of one team's code) with the thread index taken within the team.
  template <typename T>
  T team_local(const T &x) const {
    const Halide::Expr thread = intrinsic::thread_index();
    return substitute(intrinsic::kThreadIndex, thread % team_threads_, x);
  }
  Stmt take_turn() const;
  Stmt pass_turn() const;
  std::string summary_;
};

void ReductionKernelBuilder::plan_loops() {
  const Func &f = req_.reduction;
  loops_ = make_loops(f, req_.extents, req_.schedule);
  if (req_.schedule && req_.schedule->reduction_split()) {
    const ReductionSplit &s = *req_.schedule->reduction_split();
    for (const LoopDim &d : loops_.dims)
      if (d.binding == Binding::block_z)
        fail(
            "schedule of '{}': split_reduction({}) spreads parts over block.z, but loop '{}' is already "
            "bound there",
            f.name(), s.var, d.name);
    split_into_parts(loops_, s.var, s.var + ".part", s.parts, Binding::block_z);
  }
  for (const LoopDim &d : loops_.dims)
    if (d.reduction && (d.binding == Binding::warp || d.binding == Binding::thread))
      fail(
          "schedule of '{}': reduction loop '{}' is bound to {}: cooperative reductions across threads are "
          "not lowered yet; split the reduction across blocks with split_reduction() instead",
          f.name(), d.name, to_string(d.binding));
  atom_ = req_.schedule && req_.schedule->atom().has_value();
  cluster_ = req_.schedule ? req_.schedule->cluster_blocks() : 1;
  mapping_ = map_threads(loops_, req_.schedule ? req_.schedule->block_launch_order() : BlockLaunchOrder{},
                         atom_, req_.target, cluster_);
  plan_ping_pong();
  consumer_threads_ = mapping_.threads;
  // A warp-specialized kernel's producer warpgroup comes after the warpgroups the loops are bound to.
  if (req_.schedule && req_.schedule->warp_specialization())
    mapping_.add_warps(hopper::kWarpgroupThreads / 32);
  summary_ += launch_summary(mapping_);
  if (ping_pong_)
    summary_ += fmt::format(
        "  ping-pong: {} consumer warpgroups take the block's tiles in turn, warpgroup t waiting for its "
        "main "
        "loop on named barrier {} + t\n",
        kPingPongTeams, named_barriers::kFirstTurn);
  if (req_.schedule && req_.schedule->persistent_blocks() > 0) plan_persistent_grid();

  bool in_reduction = false;
  for (size_t k = 0; k < loops_.dims.size(); ++k) {
    const LoopDim &d = loops_.dims[k];
    if (d.binding != Binding::serial && d.binding != Binding::unrolled) continue;
    in_reduction = in_reduction || d.reduction;
    (in_reduction ? nest_ : outer_).push_back(k);
  }
  if (nest_.empty()) fail("schedule of '{}' leaves no serial reduction loop", f.name());
}

void ReductionKernelBuilder::plan_persistent_grid() {
  const int blocks = req_.schedule->persistent_blocks();
  const bool stream_k = req_.schedule->stream_k_enabled();
  PersistentTiles tiles = make_grid_persistent(mapping_, blocks, stream_k);
  tile_count_ = tiles.count;
  tile_coordinates_ = std::move(tiles.coordinates);
  if (stream_k)
    summary_ += fmt::format(
        "  persistent grid of {} blocks with stream-K: whole tiles in {}, then the rest split along k in "
        "equal "
        "ranges over the blocks; a tile's last part to arrive folds the others (a ticket after a fence) and "
        "runs the epilogue\n",
        blocks,
        req_.schedule->stream_k_tiles() == StreamKTiles::tail ? "every full wave"
                                                              : "all but the last full wave");
  else
    summary_ +=
        fmt::format("  persistent grid: min({}, tiles) blocks, each taking every {}th tile in raster order\n",
                    blocks, blocks);
}

void ReductionKernelBuilder::plan_cluster() {
  if (cluster_ == 1) return;
  const std::string &fname = req_.reduction.name();
  const FuncSchedule &schedule = *req_.schedule;
  if (!schedule.warp_specialization() || schedule.persistent_blocks() == 0 || !wgmma_n_)
    fail(
        "schedule of '{}': cluster({}) is lowered for persistent warp-specialized wgmma kernels, whose "
        "producers multicast the tiles the cluster's blocks share; add warp_specialize() and persistent() "
        "(apps::schedule_hopper with HopperTiling::cluster), or drop cluster()",
        fname, cluster_);
  if (schedule.persistent_blocks() % cluster_ != 0)
    fail(
        "schedule of '{}': persistent({}) with cluster({}): the grid must be a whole number of clusters; "
        "give persistent() a multiple of {} blocks",
        fname, schedule.persistent_blocks(), cluster_, cluster_);
  if (schedule.raster_group() % cluster_ != 0)
    fail(
        "schedule of '{}': cluster({}) gives a cluster consecutive tiles of the raster order, which are "
        "vertically adjacent (one column of tiles, sharing its tile of the operand indexed by block_x's "
        "loop) only when the raster group is a multiple of {}, not {}; use raster({}), for example",
        fname, cluster_, cluster_, schedule.raster_group(), 4 * cluster_);
  const LoopDim *rows = nullptr;
  for (const LoopDim &d : loops_.dims)
    if (d.binding == Binding::block_y) rows = &d;
  if (!rows)
    fail(
        "schedule of '{}': cluster({}) pairs tiles along the loop bound to Binding::block_y, and no loop is "
        "bound there; bind the output's row tiles to block_y",
        fname, cluster_);
  // The cluster's tiles differ only in the block_y loop: a stage whose box does not move with it is the
  // same tile for every block of the cluster.
  for (const StagePlan &p : stages_) {
    if (p.directive.transport != Transport::tma) continue;
    bool moves = false;
    for (const Halide::Expr &e : p.box_min) moves = moves || expr_uses_var(e, rows->name);
    if (moves) continue;
    if (p.tma_box_count() % cluster_ != 0)
      fail(
          "schedule of '{}': cluster({}) multicasts the tile of '{}', each block copying an equal share of "
          "its TMA boxes, but the tile is {} box(es) of {} columns; make its columns a multiple of {}",
          fname, cluster_, p.input, p.tma_box_count(), p.box_cols, cluster_ * p.box_cols);
    multicast_inputs_.push_back(p.input);
  }
  if (multicast_inputs_.empty())
    fail(
        "schedule of '{}': cluster({}): every TMA stage moves with the block_y loop '{}', so the cluster's "
        "blocks share no tile to multicast; drop cluster()",
        fname, cluster_, rows->name);
  std::string inputs;
  for (const std::string &i : multicast_inputs_) inputs += (inputs.empty() ? "'" : ", '") + i + "'";
  summary_ += fmt::format(
      "  clusters of {} blocks on consecutive tiles of '{}': {} loaded a share by each block and "
      "multicast to the cluster\n",
      cluster_, rows->name, inputs);
}

void ReductionKernelBuilder::plan_ping_pong() {
  const FuncSchedule *schedule = req_.schedule;
  if (!schedule || !schedule->warp_specialization() || !schedule->warp_specialization()->ping_pong) return;
  const std::string &fname = req_.reduction.name();
  if (schedule->persistent_blocks() == 0)
    fail(
        "schedule of '{}': WarpSpecialization::ping_pong deals a persistent block's output tiles to its {} "
        "consumer warpgroups in turn, but the grid is not persistent; add persistent() "
        "(HopperTiling::persistent_blocks), or drop ping_pong",
        fname, kPingPongTeams);
  if (mapping_.threads != hopper::kWarpgroupThreads)
    fail(
        "schedule of '{}': WarpSpecialization::ping_pong gives each of {} consumer warpgroups whole output "
        "tiles of its own, so the loops must bind one warpgroup to a tile, but they bind {} threads; bind a "
        "loop of extent 1 to Binding::warpgroup (HopperTiling::warpgroups = 1 with ping_pong), or drop "
        "ping_pong",
        fname, kPingPongTeams, mapping_.threads);
  ping_pong_ = true;
  team_threads_ = mapping_.threads;
  for (auto &[name, value] : mapping_.bound_values) value = team_local(value);
  mapping_.add_warps((kPingPongTeams - 1) * mapping_.warps);
}

Stmt ReductionKernelBuilder::take_turn() const {
  return intrinsic::named_barrier(named_barriers::kFirstTurn + team(), kPingPongTeams * team_threads_);
}

Stmt ReductionKernelBuilder::pass_turn() const {
  return intrinsic::named_barrier_arrive(named_barriers::kFirstTurn + (team() + 1) % kPingPongTeams,
                                         kPingPongTeams * team_threads_);
}

void ReductionKernelBuilder::plan_atom() {
  if (!atom_) return;
  const AtomDirective &a = *req_.schedule->atom();
  const std::string &fname = req_.reduction.name();
  atom_i_ = loops_.index(a.i), atom_j_ = loops_.index(a.j), atom_k_ = loops_.index(a.k);
  for (const std::string *n : {&a.i, &a.j, &a.k})
    if (loops_.index(*n) < 0) loops_.dim(*n);
  const bool wgmma = a.atom == MatrixAtom::wgmma;
  if (wgmma && !req_.target.has_wgmma)
    fail(
        "schedule of '{}': the wgmma atom runs on sm_90a, but the program is lowered for {}; use the "
        "mma_m16n8k16 atom there (apps::schedule_tensor_core)",
        fname, req_.target.arch);
  if (wgmma) {
    const LoopDim &j = loops_.dims[atom_j_];
    wgmma_n_ = j.constant_extent(fname, "a wgmma atom's N");
    if (!hopper::is_wgmma_n(wgmma_n_))
      fail(
          "schedule of '{}': the wgmma atom's N is the extent of loop '{}', {}, but wgmma.m64nNk16 has N "
          "from 8 to 256 in steps of 8; tile '{}' to such a width",
          fname, j.name, wgmma_n_, j.name);
  }
  const int want[3] = {wgmma ? 64 : 16, wgmma ? wgmma_n_ : 8, 16};
  const int dims[3] = {atom_i_, atom_j_, atom_k_};
  for (int d = 0; d < 3; ++d) {
    const LoopDim &dim = loops_.dims[dims[d]];
    if (dim.constant_extent(fname, "a matrix atom") != want[d])
      fail(
          "schedule of '{}': the {} atom covers {} x {} x {} (i, j, k), but loop '{}' has extent {}; split "
          "it to {}",
          fname, wgmma ? "wgmma.m64nNk16" : "mma.m16n8k16", want[0], want[1], want[2], dim.name, dim.extent,
          want[d]);
    if (dim.binding != Binding::serial && dim.binding != Binding::unrolled)
      fail("schedule of '{}': loop '{}' of the matrix atom must not be bound to {}", fname, dim.name,
           to_string(dim.binding));
  }
  if (loops_.dims[atom_i_].reduction || loops_.dims[atom_j_].reduction || !loops_.dims[atom_k_].reduction)
    fail("schedule of '{}': matrix_atom(i, j, k) takes two pure loops and then a reduction loop", fname);
  // The atom's loops must be the three innermost serial loops.
  std::set<size_t> atom_dims = {size_t(atom_i_), size_t(atom_j_), size_t(atom_k_)};
  const size_t n = nest_.size();
  if (n < 3 || !atom_dims.count(nest_[n - 1]) || !atom_dims.count(nest_[n - 2]) ||
      !atom_dims.count(nest_[n - 3]))
    fail(
        "schedule of '{}': the matrix atom's loops {}, {}, {} must be the innermost serial loops (the loops "
        "are {})",
        fname, a.i, a.j, a.k, loops_.names());
  nest_.resize(n - 3);
  if (!def_.reduction->domain.predicates().empty())
    fail(
        "schedule of '{}': a matrix atom cannot apply the predicates of RDom '{}'; use a fold (no "
        "matrix_atom)",
        fname, def_.reduction->domain.name());
  contraction_ = as_contraction(monoid_, def_.reduction->elements);
  if (!contraction_)
    fail(
        "schedule of '{}': a matrix atom needs a sum of products of two inputs (as in a GEMM), but the "
        "reduction is {} over {}",
        fname, monoid_.name, def_.reduction->elements[0]);
  const Accumulation acc = req_.schedule->accumulation();
  const Type state_type = monoid_.state[0].type;
  accumulator_type_ = acc.kind == Accumulation::Kind::f32 ? f32 : f16;
  if (acc.kind == Accumulation::Kind::f32 && state_type != f32)
    fail("schedule of '{}': f32 accumulation needs an f32 sum, but the monoid's state is {}", fname,
         type_name(state_type));
  summary_ += fmt::format("  matrix atom {} {}.{} -> {} accumulation ({})\n",
                          wgmma ? fmt::format("wgmma.m64n{}k16", wgmma_n_) : std::string("mma.m16n8k16"),
                          type_name(contraction_->a.type), type_name(contraction_->b.type), to_string(acc),
                          type_name(state_type));
}

void ReductionKernelBuilder::plan_stages() {
  lowering_.bind(loops_.value_of);
  std::vector<StageDirective> directives;
  if (req_.schedule) directives = req_.schedule->stages();
  // First pass: staged inputs stay calls, so their coordinates in kernel terms can be read off.
  for (const StageDirective &d : directives)
    lowering_.read_input_with(d.input, [d, this](const std::vector<Halide::Expr> &coords) {
      const Input *in = nullptr;
      for (const Input &i : req_.graph->inputs)
        if (i.name() == d.input) in = &i;
      std::vector<Halide::Expr> args(coords.begin(), coords.end());
      return Halide::Expr(Call::make(in->type(), d.input, args, Call::Image, FunctionPtr(), 0,
                                     Halide::Buffer<>(), in->contents()->parameter));
    });
  std::vector<Halide::Expr> marked;
  for (const Expr &e : def_.reduction->elements) marked.push_back(lowering_.lower(e));
  // A split wider than a loop of known extent repeats the loop's last point (apply_split), which keeps the
  // reads of plain and cp.async copies inside the tensor; a TMA box is what the matrix atom reads whole, so
  // it spans the split's full width, from the unclamped loops, and TMA fills what lies past the tensor with
  // zeros.
  std::vector<Halide::Expr> marked_unclamped;
  lowering_.bind(loops_.unclamped_value_of);
  for (const Expr &e : def_.reduction->elements) marked_unclamped.push_back(lowering_.lower(e));
  lowering_.bind(loops_.value_of);
  for (const StageDirective &d : directives) {
    const Input *in = nullptr;
    for (const Input &i : req_.graph->inputs)
      if (i.name() == d.input) in = &i;
    if (!in)
      fail("schedule of '{}': stage({}) names no input of the program", req_.reduction.name(), d.input);
    std::vector<std::vector<Halide::Expr>> reads;
    for (const Halide::Expr &e : d.transport == Transport::tma ? marked_unclamped : marked)
      for (auto &r : reads_of(e, d.input)) reads.push_back(r);
    StagePlan plan = plan_stage(d, *in, loops_, reads, req_.fallback);
    if (std::find(nest_.begin(), nest_.end(), size_t(plan.at)) == nest_.end())
      fail(
          "schedule of '{}': input '{}' is staged at loop '{}', which is outside the reduction loops; stage "
          "it at a reduction loop",
          req_.reduction.name(), d.input, d.at);
    summary_ += plan.summary();
    stages_.push_back(plan);
  }
  // Second pass: staged inputs read shared memory, at the pipeline slot of the stage loop's iteration.
  for (const StagePlan &p : stages_) {
    const Halide::Expr slot =
        p.directive.depth > 1 ? var(p.directive.at) % p.directive.depth : Halide::Expr(0);
    lowering_.read_input_with(p.input, [p, slot](const std::vector<Halide::Expr> &coords) {
      return load(p.type, p.buffer, p.index_of(coords, slot));
    });
  }
  for (const Expr &e : def_.reduction->elements) elements_.push_back(lowering_.lower(e));
}

Halide::Expr ReductionKernelBuilder::register_index(const std::vector<int> &dims) const {
  Halide::Expr index = 0;
  for (int d : dims) index = index * loops_.dims[d].extent + loops_.dims[d].var();
  return simplify(index);
}

Stmt ReductionKernelBuilder::for_each_point(const std::function<Stmt()> &body, bool pairs) const {
  Stmt s = body();
  if (atom_) {
    // The accumulator element e of this lane is the atom's (row, col) = (accumulator_row(e),
    // accumulator_col(e)).
    const std::string e = "acc.e";
    std::vector<Stmt> per_element;
    for (int k = 0; k < accumulator_elements(); k += pairs ? 2 : 1) {
      Stmt one = substitute(e, Halide::Expr(k), s);
      one = LetStmt::make(loops_.dims[atom_j_].name, wgmma_n_ ? wgmma_accumulator_col(k) : accumulator_col(k),
                          one);
      one = LetStmt::make(loops_.dims[atom_i_].name, wgmma_n_ ? wgmma_accumulator_row(k) : accumulator_row(k),
                          one);
      per_element.push_back(one);
    }
    s = block(per_element);
  }
  for (auto it = register_dims_.rbegin(); it != register_dims_.rend(); ++it) {
    const LoopDim &d = loops_.dims[*it];
    s = For::make(d.name, 0, d.extent, ForType::Unrolled, Halide::DeviceAPI::None, s);
  }
  return s;
}

// In atom mode a point's state lives at acc[register_index * accumulator_elements() + e].
std::vector<Halide::Expr> ReductionKernelBuilder::state_values(int element_offset) const {
  std::vector<Halide::Expr> values;
  if (atom_) {
    const Halide::Expr index =
        register_index(register_dims_) * accumulator_elements() + var("acc.e") + element_offset;
    const bool hybrid = req_.schedule->accumulation().kind == Accumulation::Kind::hybrid;
    Halide::Expr v = load(hybrid ? f32 : accumulator_type_, hybrid ? "acc.f32" : "acc", index);
    values.push_back(Halide::cast(monoid_.state[0].type, v));
    return values;
  }
  for (size_t c = 0; c < monoid_.state.size(); ++c)
    values.push_back(
        load(monoid_.state[c].type, "state." + monoid_.state[c].name, register_index(register_dims_)));
  return values;
}

Stmt ReductionKernelBuilder::init_states() const {
  return for_each_point([&] {
    std::vector<Stmt> inits;
    if (atom_) {
      const Halide::Expr index = register_index(register_dims_) * accumulator_elements() + var("acc.e");
      inits.push_back(store("acc", make_zero(accumulator_type_), index));
      if (req_.schedule->accumulation().kind == Accumulation::Kind::hybrid)
        inits.push_back(store("acc.f32", make_zero(f32), index));
    } else {
      for (size_t c = 0; c < monoid_.state.size(); ++c)
        inits.push_back(
            store("state." + monoid_.state[c].name, monoid_.identity[c], register_index(register_dims_)));
    }
    return block(inits);
  });
}

Stmt ReductionKernelBuilder::fold_update() {
  // state = combine(state, lift(elements)), where the point is in the reduction domain.
  const State a = monoid_.lhs(), b = monoid_.rhs(), x = monoid_.element();
  std::vector<std::pair<std::string, Halide::Expr>> lets;
  for (int e = 0; e < x.size(); ++e) lets.push_back({x[e].as<Variable>()->name, elements_[e]});
  for (size_t c = 0; c < monoid_.state.size(); ++c)
    lets.push_back({b[c].as<Variable>()->name, monoid_.lift[c]});
  const std::vector<Halide::Expr> current = state_values();
  for (size_t c = 0; c < monoid_.state.size(); ++c) lets.push_back({a[c].as<Variable>()->name, current[c]});
  std::vector<Stmt> stores;
  for (size_t c = 0; c < monoid_.state.size(); ++c)
    stores.push_back(
        store("state." + monoid_.state[c].name, monoid_.combine[c], register_index(register_dims_)));
  return guarded(all_of(loops_.reduction_guards), let_all(lets, block(stores)));
}

Stmt ReductionKernelBuilder::atom_update() {
  if (wgmma_n_) {
    intrinsic::Wgmma w;
    w.n = wgmma_n_;
    w.d = "acc";
    w.d_index = register_index(register_dims_) * accumulator_elements();
    w.a = wgmma_operand(contraction_->a);
    w.b = wgmma_operand(contraction_->b);
    w.accumulate = 1;  // the accumulators start at zero (init_states)
    return intrinsic::wgmma(w);
  }
  const Halide::Expr acc = register_index(register_dims_) * 4;
  const Halide::Expr slice = fragment_slices_ > 1 ? loops_.dims[load_point_].var() : Halide::Expr(0);
  return intrinsic::mma({"acc", "frag.a", "frag.b", "acc", acc,
                         (slice * fragment_count(a_dims_) + register_index(a_dims_)) * 8,
                         (slice * fragment_count(b_dims_) + register_index(b_dims_)) * 4, acc});
}

Stmt ReductionKernelBuilder::pipelined_mainloop() {
  // The shape this applies to: the staged k-tile loop, inside it the k-step loop whose top loads the
  // fragments, and inside that only register loops (a GEMM's main loop).
  if (!atom_ || req_.schedule->accumulation().kind == Accumulation::Kind::hybrid || nest_.size() < 2)
    return Stmt();
  const int tile = static_cast<int>(nest_[0]), step = static_cast<int>(nest_[1]);
  if (step != load_point_) return Stmt();
  for (size_t p = 2; p < nest_.size(); ++p)
    if (loops_.dims[nest_[p]].reduction) return Stmt();
  std::vector<const StagePlan *> here;
  for (const StagePlan &p : stages_) {
    if (p.at != tile || p.directive.depth < 2 || p.directive.transport != Transport::cp_async) return Stmt();
    here.push_back(&p);
  }
  if (here.empty()) return Stmt();
  const int depth = here[0]->directive.depth;
  for (const StagePlan *p : here)
    if (p->directive.depth != depth) return Stmt();
  const LoopDim &x = loops_.dims[tile], &k = loops_.dims[step];
  const int steps = k.constant_extent(loops_.func, "pipelined fragments");
  fragment_slices_ = steps;
  // The copies of tile `iteration` (the steady state's loop is partitioned at first_guarded_prefetch, so
  // its copies are all guarded or none).
  auto copies = [&](const Halide::Expr &iteration, StagePlan::Guards guards) {
    std::vector<Stmt> s;
    for (const StagePlan *p : here)
      s.push_back(p->copy(iteration, iteration % depth, mapping_.threads, guards));
    return block(s);
  };
  // The fragments of k-step `s` of tile `t`, into slice `slice`.
  auto loads = [&](const Halide::Expr &t, int s, int slice) {
    return substitute(x.name, t, substitute(k.name, Halide::Expr(s), fragment_loads(slice)));
  };
  auto atoms = [&](int s) {
    Stmt body = atom_update();
    for (size_t p = nest_.size() - 1; p >= 2; --p) {
      const LoopDim &d = loops_.dims[nest_[p]];
      body = For::make(d.name, 0, d.extent, ForType::Unrolled, Halide::DeviceAPI::None, body);
    }
    return substitute(k.name, Halide::Expr(s), body);
  };
  // Each k-step loads the next one's fragments before its atoms run, and the last k-step of a tile waits
  // for the next tile, synchronizes and loads its first fragments: so the atoms never wait on ldmatrix, and
  // the barrier sits where the warp still has atoms to issue. After that barrier every warp has read the
  // whole tile, so the copies issued at the next tile's first step may overwrite the slot it came from.
  std::vector<Stmt> prologue;
  for (int s = 0; s < depth - 1; ++s)
    prologue.push_back(block(
        {guarded(simplify(s < x.extent), copies(s, StagePlan::Guards::by_tile)), intrinsic::async_commit()}));
  prologue.push_back(intrinsic::async_wait(depth - 2));
  prologue.push_back(intrinsic::barrier());
  prologue.push_back(loads(0, 0, 0));
  const Halide::Expr t = x.var();
  auto tile_body = [&](bool guarded_copies) {
    std::vector<Stmt> body;
    for (int s = 0; s < steps; ++s) {
      if (s == 0) {
        const Halide::Expr ahead = t + (depth - 1);
        body.push_back(guarded_copies ? guarded(ahead < x.extent, copies(ahead, StagePlan::Guards::all))
                                      : copies(ahead, StagePlan::Guards::none));
        body.push_back(intrinsic::async_commit());
      }
      if (s + 1 < steps) {
        body.push_back(loads(t, s + 1, s + 1));
      } else {
        body.push_back(intrinsic::async_wait(depth - 2));
        body.push_back(intrinsic::barrier());
        body.push_back(loads(t + 1, 0, 0));
      }
      body.push_back(atoms(s));
    }
    return block(body);
  };
  summary_ +=
      fmt::format("  fragments software-pipelined over the {} k-steps of each '{}' tile\n", steps, x.name);
  const Stmt tiles =
      partitioned_loop(x.name, 0, x.extent, first_guarded_prefetch(here, 0, x.extent, depth - 1), tile_body);
  return block({block(prologue), tiles, intrinsic::async_wait(0)});
}

int ReductionKernelBuilder::fragment_count(const std::vector<int> &dims) const {
  int n = 1;
  for (int d : dims) n *= loops_.dims[d].constant_extent(loops_.func, "fragments");
  return n;
}

Stmt ReductionKernelBuilder::fragment_loads(const Halide::Expr &slice) {
  std::vector<Stmt> loads;
  for (const AtomOperand op : {AtomOperand::a, AtomOperand::b}) {
    const ContractionOperand &operand = op == AtomOperand::a ? contraction_->a : contraction_->b;
    FragmentLoad f{};
    f.op = op;
    for (const StagePlan &p : stages_)
      if (p.input == operand.input) f.stage = &p;
    if (!f.stage)
      fail(
          "schedule of '{}': the matrix atom reads '{}' through ldmatrix, so '{}' must be staged in shared "
          "memory",
          req_.reduction.name(), operand.input, operand.input);
    for (const Halide::Expr &c : operand.coords) f.coords.push_back(simplify(lowering_.lower(c)));
    f.k_loop = loops_.dims[atom_k_].name;
    f.other_loop = loops_.dims[op == AtomOperand::a ? atom_i_ : atom_j_].name;
    f.unused_loop = loops_.dims[op == AtomOperand::a ? atom_j_ : atom_i_].name;
    for (int d : op == AtomOperand::a ? a_dims_ : b_dims_)
      f.register_loops.push_back(
          {loops_.dims[d].name, loops_.dims[d].constant_extent(loops_.func, "fragments")});
    f.fragment = op == AtomOperand::a ? "frag.a" : "frag.b";
    f.slot = f.stage->directive.depth > 1 ? var(f.stage->directive.at) % f.stage->directive.depth
                                          : Halide::Expr(0);
    f.dst_offset = slice * (fragment_count(op == AtomOperand::a ? a_dims_ : b_dims_) * fragment_elements(op));
    loads.push_back(load_fragments(f, req_.reduction.name()));
  }
  return block(loads);
}

Stmt ReductionKernelBuilder::promote_partials() const {
  return for_each_point([&] {
    const Halide::Expr index = register_index(register_dims_) * accumulator_elements() + var("acc.e");
    return block(
        {store("acc.f32", load(f32, "acc.f32", index) + Halide::cast(f32, load(f16, "acc", index)), index),
         store("acc", make_zero(f16), index)});
  });
}

Stmt ReductionKernelBuilder::wrap_with_stages(int dim, Stmt body) {
  std::vector<const StagePlan *> here;
  for (const StagePlan &p : stages_)
    if (p.at == dim) here.push_back(&p);
  const LoopDim &d = loops_.dims[dim];
  // Register loops index register arrays, so they must unroll.
  const bool unrolled = d.binding == Binding::unrolled ||
                        std::find(register_dims_.begin(), register_dims_.end(), dim) != register_dims_.end();
  return staged_loop(d.name, 0, d.extent, unrolled ? ForType::Unrolled : ForType::Serial, here,
                     mapping_.threads, body, loops_.func, PrefetchGuards::partitioned);
}

Stmt ReductionKernelBuilder::nest(size_t position, const std::function<Stmt()> &inner) {
  if (position == nest_.size()) return inner();
  const int dim = static_cast<int>(nest_[position]);
  Stmt body = nest(position + 1, inner);
  if (atom_ && !wgmma_n_ && dim == load_point_) body = block({fragment_loads(), body});
  // (The wgmma main loop promotes between k-tiles itself: its atoms are still in flight inside one.)
  if (atom_ && !wgmma_n_ && req_.schedule->accumulation().kind == Accumulation::Kind::hybrid) {
    // Promote the f16 partials into f32 after every `promote_every` k-steps, counted at the innermost
    // reduction loop whose inner k-steps divide that number.
    const int every = req_.schedule->accumulation().promote_every;
    int inner_steps = 1;
    for (size_t p = position + 1; p < nest_.size(); ++p)
      if (loops_.dims[nest_[p]].reduction)
        inner_steps *= loops_.dims[nest_[p]].constant_extent(loops_.func, "hybrid accumulation");
    const LoopDim &d = loops_.dims[dim];
    const std::optional<int64_t> extent = constant_value(d.extent);
    const bool fits = every % inner_steps == 0 && (!extent || *extent % (every / inner_steps) == 0);
    if (d.reduction && fits && promote_loop_ < 0) {
      promote_loop_ = dim;
      const int per = every / inner_steps;
      body = block({body, guarded(simplify((d.var() + 1) % per == 0), promote_partials())});
    }
  }
  return wrap_with_stages(dim, body);
}

void ReductionKernelBuilder::plan_write_backs() {
  // Tensor-core kernels write their outputs back through shared memory (see plan_write_backs). A serial pure
  // loop outside the reduction would write a slice of the tile per iteration, so such kernels store directly.
  if (!atom_ || req_.output != Output::values || !outer_.empty()) return;
  write_backs_ = twist::plan_write_backs(req_, loops_, summary_);
}

Stmt ReductionKernelBuilder::epilogue() {
  std::vector<Halide::Expr> coords;
  for (const Var &v : def_.args) coords.push_back(loops_.value_of.at(v.name()));
  const Halide::Expr part = req_.output == Output::partial_states
                                ? var(req_.schedule->reduction_split()->var + ".part")
                                : Halide::Expr();
  // Only the consumers of a warp-specialized kernel reach the epilogue: they synchronize among themselves, or
  // in ping-pong each team in its own tile.
  const bool specialized = consumer_threads_ < mapping_.threads;
  const Stmt sync = ping_pong_
                        ? intrinsic::named_barrier(named_barriers::kFirstTeamEpilogue + team(), team_threads_)
                    : specialized ? intrinsic::named_barrier(named_barriers::kConsumers, consumer_threads_)
                                  : intrinsic::barrier();
  const int writers = ping_pong_ ? team_threads_ : consumer_threads_;
  const Halide::Expr slot = ping_pong_ ? team() : Halide::Expr(0);
  const std::vector<Halide::Expr> stored = output_coords(req_, coords);
  if (const Stmt writes = stmatrix_writes(coords); writes.defined())
    return write_back(write_backs_, stored, writes, writers, sync, slot);
  // A point outside the output is not stored; into a shared tile it may be, as the tile's copy-out skips it,
  // unless computing its value reads an input or it repeats a point (sharing that point's cell). A column
  // pair's first point is even and the reduction's extent there is twice the output's, so where the first
  // is inside, so is the second.
  const bool pairs = stores_column_pairs();
  const Stmt stores =
      req_.fold_dim >= 0
          ? stores_with_row_folds(part)
          : for_each_point(
                [&] {
                  const Stmt s = epilogue_stores(req_, coords, state_values(), part,
                                                 pairs ? state_values(1) : std::vector<Halide::Expr>{});
                  const bool all_guards = write_backs_.empty() || reads_inputs(s, *req_.graph);
                  return guarded(all_of(all_guards ? loops_.pure_guards : loops_.repeat_guards), s);
                },
                pairs);
  if (write_backs_.empty()) return stores;
  return write_back(write_backs_, stored, stores, writers, sync, slot);
}

Stmt ReductionKernelBuilder::stores_with_row_folds(const Halide::Expr &part) const {
  const std::string &fname = req_.reduction.name(), &consumer = req_.consumer->name();
  const int dim = req_.fold_dim;
  const Halide::Expr dim_extent = simplify(req_.extents[dim]);
  const int64_t *extent = as_const_int(dim_extent);
  const int atom_columns = wgmma_n_ ? wgmma_n_ : 8;
  // One thread quad holds each row of the dimension whole where the dimension's coordinate is the atom's
  // column loop alone (a single block and no register tiles along it) and the atom is as wide as it: the
  // accumulator layouts give a row's columns to the 4 lanes of a quad.
  bool whole_rows = atom_ && extent && *extent == atom_columns;
  if (whole_rows) {
    Scope<Interval> ranges;
    for (const LoopDim &d : loops_.dims) ranges.push(d.name, Interval(0, simplify(d.extent - 1)));
    const Halide::Expr coordinate = loops_.value_of.at(def_.args[dim].name());
    const Interval rest = bounds_of_expr_in_scope(
        simplify(substitute(loops_.dims[atom_j_].name, Halide::Expr(0), coordinate)), ranges);
    whole_rows = rest.is_bounded() && can_prove(rest.min == 0 && rest.max == 0);
  }
  if (!whole_rows)
    fail(
        "func '{}' folds '{}' over its dimension {} (extent {}) in the epilogue, which needs each row "
        "of that dimension in one thread quad's registers: schedule '{}' with one matrix atom as wide as the "
        "dimension along it ({} columns: a single block and no register tiles there), or compute '{}' as a "
        "stage of its own (FuncSchedule::compute_root)",
        consumer, fname, dim, req_.extents[dim], fname, atom_columns, fname);
  // Each accumulator element's row and column relative to element 0's: constants, the lane's terms cancel.
  const int elements = accumulator_elements();
  auto row_of = [&](int e) { return wgmma_n_ ? wgmma_accumulator_row(e) : accumulator_row(e); };
  auto col_of = [&](int e) { return wgmma_n_ ? wgmma_accumulator_col(e) : accumulator_col(e); };
  std::vector<int64_t> rows, row_offset(elements), col_offset(elements);
  std::map<std::pair<int64_t, int64_t>, int> element_at;
  for (int e = 0; e < elements; ++e) {
    const Halide::Expr row = simplify(row_of(e) - row_of(0)), col = simplify(col_of(e) - col_of(0));
    const int64_t *r = as_const_int(row), *c = as_const_int(col);
    TWIST_CHECK(r && c, "accumulator elements at constant offsets from element 0");
    row_offset[e] = *r;
    col_offset[e] = *c;
    element_at[{*r, *c}] = e;
    if (std::find(rows.begin(), rows.end(), *r) == rows.end()) rows.push_back(*r);
  }
  // A fold's state per row of the thread: its register point's rows, each at one of `rows`.
  const int slots = static_cast<int>(rows.size());
  int points = 1;
  for (int d : register_dims_) points *= loops_.dims[d].constant_extent(loops_.func, "keeping row folds");
  auto slot = [&](int row) { return simplify(register_index(register_dims_) * slots + row); };
  auto slot_of = [&](int e) {
    return slot(static_cast<int>(std::find(rows.begin(), rows.end(), row_offset[e]) - rows.begin()));
  };
  const std::string &atom_row = loops_.dims[atom_i_].name, &atom_col = loops_.dims[atom_j_].name;
  // The statement `s` at accumulator element e of each register point, the atom's loops defined there.
  auto at_elements = [&](const std::function<Stmt(int e)> &s) {
    std::vector<Stmt> per_element;
    for (int e = 0; e < elements; ++e)
      per_element.push_back(
          LetStmt::make(atom_row, row_of(e),
                        LetStmt::make(atom_col, col_of(e), substitute("acc.e", Halide::Expr(e), s(e)))));
    return block(per_element);
  };
  auto at_slots = [&](const std::function<Stmt(const Halide::Expr &slot)> &s) {
    std::vector<Stmt> per_slot;
    for (int r = 0; r < slots; ++r) per_slot.push_back(s(slot(r)));
    return block(per_slot);
  };
  auto over_register_points = [&](Stmt s) {
    for (auto it = register_dims_.rbegin(); it != register_dims_.rend(); ++it) {
      const LoopDim &d = loops_.dims[*it];
      s = For::make(d.name, 0, d.extent, ForType::Unrolled, Halide::DeviceAPI::None, s);
    }
    return s;
  };
  // The reduction's value at element e + offset of this register point, as its consumer reads it.
  auto finalized_at = [&](int offset, int value_index) {
    std::map<std::string, Halide::Expr> state;
    const std::vector<Halide::Expr> values = state_values(offset);
    for (int c = 0; c < monoid_.one().size(); ++c) state[monoid_.one()[c].as<Variable>()->name] = values[c];
    return substitute(state, Halide::Expr(monoid_.finalize[value_index]));
  };
  std::vector<Halide::Expr> coords;
  for (const Var &v : def_.args) coords.push_back(loops_.value_of.at(v.name()));
  const std::string &column = def_.args[dim].name();
  std::vector<Stmt> init, fold, exchange;
  std::vector<std::pair<std::string, Type>> registers;  // the folds' arrays, points * slots each
  struct FoldArrays {
    std::vector<std::string> state, other;
  };
  std::map<std::string, FoldArrays> fold_arrays;
  for (const Func &f : req_.row_folds) {
    const Definition &fd = f.definition();
    const Monoid &fm = *fd.reduction->monoid;
    const RVar column_var = fd.reduction->domain[0];
    if (!can_prove(column_var.min() == 0 && column_var.extent() == dim_extent))
      fail(
          "func '{}' folds '{}' by '{}' over [{}, {} + {}), but the epilogue folds whole rows of its "
          "dimension "
          "{} ([0, {})); fold over the whole dimension, or compute '{}' as a stage of its own "
          "(FuncSchedule::compute_root)",
          consumer, fname, f.name(), column_var.min(), column_var.min(), column_var.extent(), dim, dim_extent,
          fname);
    if (!fm.commutative)
      fail(
          "func '{}' folds '{}' in the epilogue by '{}', whose monoid is not commutative: the lanes of "
          "a quad fold their columns out of order; compute '{}' as a stage of its own "
          "(FuncSchedule::compute_root)",
          consumer, fname, f.name(), fname);
    FoldArrays &a = fold_arrays[f.name()];
    for (const Component &c : fm.state) {
      a.state.push_back("fold." + f.name() + "." + c.name);
      a.other.push_back("fold." + f.name() + "." + c.name + ".lane");
    }
    auto current = [&](const Halide::Expr &slot, const std::vector<std::string> &names) {
      std::vector<Halide::Expr> v;
      for (size_t c = 0; c < names.size(); ++c) v.push_back(load(fm.state[c].type, names[c], slot));
      return v;
    };
    auto combined = [&](const Halide::Expr &slot,
                        const std::vector<std::pair<std::string, Halide::Expr>> &lets,
                        const std::vector<Halide::Expr> &rhs) {
      std::vector<std::pair<std::string, Halide::Expr>> all = lets;
      const State lhs_vars = fm.lhs(), rhs_vars = fm.rhs();
      const std::vector<Halide::Expr> lhs = current(slot, a.state);
      for (size_t c = 0; c < fm.state.size(); ++c) {
        all.push_back({rhs_vars[c].as<Variable>()->name, rhs[c]});
        all.push_back({lhs_vars[c].as<Variable>()->name, lhs[c]});
      }
      std::vector<Stmt> stores;
      for (size_t c = 0; c < fm.state.size(); ++c) stores.push_back(store(a.state[c], fm.combine[c], slot));
      return let_all(all, block(stores));
    };
    init.push_back(at_slots([&](const Halide::Expr &slot) {
      std::vector<Stmt> s;
      for (size_t c = 0; c < fm.state.size(); ++c) s.push_back(store(a.state[c], fm.identity[c], slot));
      return block(s);
    }));
    // Each element's contribution: the fold's elements at this point, its reduction variable the column,
    // reading the reduction's value there.
    fold.push_back(at_elements([&](int e) {
      ExprLowering lowering(*req_.graph);
      read_intermediates(lowering, req_.intermediates);
      for (size_t k = 0, a = 0; k < coords.size(); ++k)
        if (static_cast<int>(k) != dim) lowering.bind(fd.args[a++].name(), coords[k]);
      lowering.bind(column_var.name(), coords[dim]);
      lowering.on_func_call(
          [&](const Call *c, const std::vector<Halide::Expr> &) -> std::optional<Halide::Expr> {
            if (c->name != fname) return std::nullopt;
            return finalized_at(0, c->value_index);
          });
      const State x = fm.element();
      std::vector<std::pair<std::string, Halide::Expr>> lets;
      for (int k = 0; k < x.size(); ++k)
        lets.push_back({x[k].as<Variable>()->name, lowering.lower(fd.reduction->elements[k])});
      std::vector<Halide::Expr> lifted;
      for (size_t c = 0; c < fm.state.size(); ++c) lifted.push_back(Halide::Expr(fm.lift[c]));
      return combined(slot_of(e), lets, lifted);
    }));
    // The quad's four partial folds of each row, combined in every lane.
    for (const int mask : {1, 2})
      exchange.push_back(at_slots([&](const Halide::Expr &slot) {
        std::vector<Stmt> s;
        for (size_t c = 0; c < fm.state.size(); ++c)
          s.push_back(
              intrinsic::shuffle_xor({a.other[c], slot, load(fm.state[c].type, a.state[c], slot), mask}));
        s.push_back(combined(slot, {}, current(slot, a.other)));
        return block(s);
      }));
    for (size_t c = 0; c < fm.state.size(); ++c)
      for (const std::string &name : {a.state[c], a.other[c]}) registers.push_back({name, fm.state[c].type});
  }
  // Each point: the consumer reads the folds at its row's slot, and the reduction at its own point or
  // rotated along the dimension, at the element of this thread that holds that column of the same row.
  const Stmt stores = at_elements([&](int e) {
    auto reads = [&](const Call *c, const std::vector<Halide::Expr> &args) -> std::optional<Halide::Expr> {
      if (fold_arrays.count(c->name)) {
        const Monoid &fm = *req_.graph->func(c->name).definition().reduction->monoid;
        const FoldArrays &a = fold_arrays.at(c->name);
        std::map<std::string, Halide::Expr> state;
        for (size_t k = 0; k < fm.state.size(); ++k)
          state[fm.one()[k].as<Variable>()->name] = load(fm.state[k].type, a.state[k], slot_of(e));
        return substitute(state, Halide::Expr(fm.finalize[c->value_index]));
      }
      if (c->name != fname || equal(simplify(args[dim]), simplify(coords[dim]))) return std::nullopt;
      const Halide::Expr rotated = simplify(args[dim]);
      const Mod *rotation = rotated.as<Mod>();
      const Halide::Expr shift = rotation ? simplify(rotation->a - coords[dim]) : Halide::Expr();
      const int64_t *offset = rotation ? as_const_int(shift) : nullptr;
      if (!offset || *offset % 8 != 0)
        fail(
            "func '{}' reads '{}' at {} = {} in its dimension {}, a rotation by a multiple of 8 columns in a "
            "row of the thread quad's registers only; read it at (x + 8c) % {}, or compute '{}' as a "
            "stage of its own (FuncSchedule::compute_root)",
            consumer, fname, column, args[dim], dim, *extent, fname);
      const int64_t partner_col = ((col_offset[e] + *offset) % *extent + *extent) % *extent;
      const auto partner = element_at.find({row_offset[e], partner_col});
      TWIST_CHECK(partner != element_at.end(), "a rotated column in the thread's registers");
      return finalized_at(partner->second - e, c->value_index);
    };
    const Stmt s = epilogue_stores(req_, coords, state_values(), part, {}, reads);
    const bool all_guards = write_backs_.empty() || reads_inputs(s, *req_.graph);
    return guarded(all_of(all_guards ? loops_.pure_guards : loops_.repeat_guards), s);
  });
  Stmt body = block({over_register_points(block(init)), over_register_points(block(fold)),
                     over_register_points(block(exchange)), over_register_points(stores)});
  for (const auto &[name, type] : registers)
    body = Allocate::make(name, type, Halide::MemoryType::Register, {points * slots}, const_true(), body);
  return body;
}

bool ReductionKernelBuilder::stores_column_pairs() const {
  if (req_.paired_dim < 0 || req_.output != Output::values) return false;
  const std::string &fname = req_.reduction.name(), &consumer = req_.consumer->name();
  if (!atom_)
    fail(
        "func '{}' reads '{}' at column pairs (2x, 2x + 1), which fuse into its epilogue only where one "
        "thread holds both columns: schedule '{}' with a matrix_atom, or compute it as a stage of its own "
        "(FuncSchedule::compute_root)",
        consumer, fname, fname);
  const std::string &column = loops_.dims[atom_j_].name;
  const Halide::Expr coordinate = loops_.value_of.at(def_.args[req_.paired_dim].name());
  if (!expr_uses_var(coordinate, column))
    fail(
        "func '{}' reads '{}' at pairs of coordinate {} ({}), which the matrix atom of '{}' does not lay out "
        "along its columns ({}), so a pair is not in one thread; pair along the atom's columns, or compute "
        "'{}' as a stage of its own (FuncSchedule::compute_root)",
        consumer, fname, req_.paired_dim, def_.args[req_.paired_dim].name(), fname, column, fname);
  // Both columns of a pair in one thread's registers: element 2p + 1 is the column after element 2p, in
  // the same row, and 2p is at an even column of the atom, whose other terms in the coordinate are even.
  const bool even_tiles = is_const_zero(simplify(substitute(column, Halide::Expr(0), coordinate) % 2));
  for (int e = 0; e < accumulator_elements(); e += 2) {
    const Halide::Expr col = wgmma_n_ ? wgmma_accumulator_col(e) : accumulator_col(e);
    const Halide::Expr next_col = wgmma_n_ ? wgmma_accumulator_col(e + 1) : accumulator_col(e + 1);
    const Halide::Expr row = wgmma_n_ ? wgmma_accumulator_row(e) : accumulator_row(e);
    const Halide::Expr next_row = wgmma_n_ ? wgmma_accumulator_row(e + 1) : accumulator_row(e + 1);
    if (!even_tiles || !is_const_one(simplify(next_col - col)) || !is_const_zero(simplify(next_row - row)) ||
        !is_const_zero(simplify(col % 2)))
      fail(
          "func '{}' reads '{}' at column pairs, but under the schedule of '{}' accumulator elements {} "
          "and {} are not columns 2x and 2x + 1 of one row (the tiles of coordinate {} = {} must be of "
          "even widths); tile '{}' to even widths, or compute it as a stage of its own "
          "(FuncSchedule::compute_root)",
          consumer, fname, fname, e, e + 1, req_.paired_dim, coordinate, fname);
  }
  return true;
}

Stmt ReductionKernelBuilder::stmatrix_writes(const std::vector<Halide::Expr> &coords) const {
  // A lane's accumulator elements 8c..8c+7 are its part of the four 8 x 8 matrices of its warp's 16 rows and
  // the atom's columns 16c..16c+15 (intrinsics.h, MatrixMove), so with 16-bit outputs the warp stores them
  // with one stmatrix.x4 instead of eight 2-byte stores per lane. It writes every cell of the matrices, so a
  // point outside the output gets a zero (the TMA store clips it), and a repeated point (a clamped split's)
  // would overwrite its twin: those kernels keep the stores by element. (A consumer of column pairs has one
  // element per pair: half the matrices' cells.)
  if (!wgmma_n_ || wgmma_n_ % 16 != 0 || write_backs_.size() != 1 || !req_.schedule->stmatrix_writes() ||
      req_.paired_dim >= 0 || req_.fold_dim >= 0)
    return Stmt();
  const StagePlan &tile = write_backs_[0];
  if (tile.directive.transport != Transport::tma || tile.type.bits() != 16 || !loops_.repeat_guards.empty())
    return Stmt();
  const std::string fragment = "epilogue.fragment";
  const std::string &i = loops_.dims[atom_i_].name, &j = loops_.dims[atom_j_].name;
  struct IntoFragment : IRMutator {
    const std::string &output, &fragment;
    Halide::Expr element;
    IntoFragment(const std::string &o, const std::string &f) : output(o), fragment(f) {}
    using IRMutator::visit;
    Stmt visit(const Store *op) override {
      return op->name == output ? store(fragment, op->value, element) : IRMutator::visit(op);
    }
  } into_fragment(tile.input, fragment);
  const Halide::Expr thread = intrinsic::thread_index(), lane = thread % 32;
  std::vector<Stmt> groups;
  for (int c = 0; c < wgmma_n_ / 16; ++c) {
    std::vector<Stmt> writes;
    for (int e = 0; e < 8; ++e) {
      const int k = 8 * c + e;
      into_fragment.element = e;
      Stmt one = epilogue_stores(req_, coords, state_values(), Halide::Expr());
      const bool guard = reads_inputs(one, *req_.graph);
      one = into_fragment.mutate(one);
      if (guard)
        one = IfThenElse::make(all_of(loops_.pure_guards), one, store(fragment, make_zero(tile.type), e));
      one = substitute("acc.e", Halide::Expr(k), one);
      writes.push_back(
          LetStmt::make(i, wgmma_accumulator_row(k), LetStmt::make(j, wgmma_accumulator_col(k), one)));
    }
    // Lanes 8m..8m+7 give the rows of matrix m: rows 8 (m % 2) and columns 8 (m / 2) on.
    const Halide::Expr row = (thread % 128) / 32 * 16 + lane % 8 + 8 * ((lane / 8) % 2);
    const Halide::Expr col = 16 * c + 8 * (lane / 16);
    std::vector<Halide::Expr> at;
    for (const Halide::Expr &x : coords) at.push_back(substitute(i, row, substitute(j, col, x)));
    writes.push_back(intrinsic::matrix_move(
        {.direction = intrinsic::MatrixMove::Direction::store,
         .registers = fragment,
         .registers_index = 0,
         .shared = tile.buffer,
         .shared_index = simplify(tile.thread_index_of(at, ping_pong_ ? team() : 0))}));
    groups.push_back(block(writes));
  }
  Stmt s = block(groups);
  for (auto it = register_dims_.rbegin(); it != register_dims_.rend(); ++it) {
    const LoopDim &d = loops_.dims[*it];
    s = For::make(d.name, 0, d.extent, ForType::Unrolled, Halide::DeviceAPI::None, s);
  }
  return Allocate::make(fragment, tile.type, Halide::MemoryType::Register, {8}, const_true(), s);
}

Kernel ReductionKernelBuilder::build() {
  plan_loops();
  plan_atom();
  plan_stages();
  plan_cluster();
  // Pure serial loops inside the reduction nest keep one state each, in registers.
  for (size_t k : nest_) {
    const LoopDim &d = loops_.dims[k];
    if (d.reduction) continue;
    d.constant_extent(loops_.func, "keeping its states in registers (it is inside a reduction loop)");
    register_dims_.push_back(static_cast<int>(k));
  }
  if (atom_) {
    // A is the operand indexed by the atom's rows.
    auto uses_loop = [&](const ContractionOperand &o, int dim) {
      bool uses = false;
      for (const Halide::Expr &c : o.coords)
        uses = uses || expr_uses_var(simplify(lowering_.lower(c)), loops_.dims[dim].name);
      return uses;
    };
    if (uses_loop(contraction_->a, atom_j_) && uses_loop(contraction_->b, atom_i_))
      std::swap(contraction_->a, contraction_->b);
    if (uses_loop(contraction_->a, atom_j_) || uses_loop(contraction_->b, atom_i_))
      fail(
          "schedule of '{}': the matrix atom needs one factor indexed by its rows ({}) and the other by its "
          "columns ({}), but '{}' and '{}' do not split that way",
          req_.reduction.name(), loops_.dims[atom_i_].name, loops_.dims[atom_j_].name, contraction_->a.input,
          contraction_->b.input);
    for (auto it = nest_.rbegin(); it != nest_.rend(); ++it)
      if (loops_.dims[*it].reduction) {
        load_point_ = static_cast<int>(*it);
        break;
      }
    // Each operand's fragments span the register loops inside the load point that its coordinates use.
    const auto load_at = std::find(nest_.begin(), nest_.end(), size_t(load_point_));
    for (const AtomOperand op : {AtomOperand::a, AtomOperand::b}) {
      const ContractionOperand &operand = op == AtomOperand::a ? contraction_->a : contraction_->b;
      std::vector<int> &dims = op == AtomOperand::a ? a_dims_ : b_dims_;
      for (auto it = load_at + 1; it != nest_.end(); ++it) {
        if (loops_.dims[*it].reduction) continue;
        bool uses = false;
        for (const Halide::Expr &c : operand.coords)
          uses = uses || expr_uses_var(simplify(lowering_.lower(c)), loops_.dims[*it].name);
        if (uses) dims.push_back(static_cast<int>(*it));
      }
    }
  }

  const bool hybrid = atom_ && req_.schedule->accumulation().kind == Accumulation::Kind::hybrid;
  const bool specialized = req_.schedule && req_.schedule->warp_specialization();
  if (specialized && !wgmma_n_)
    fail(
        "schedule of '{}': warp_specialize() splits a TMA + wgmma main loop into producer and consumer "
        "warpgroups, but the schedule has no wgmma atom; use matrix_atom(MatrixAtom::wgmma, ...) with "
        "Transport::tma stages (apps::schedule_hopper), or drop warp_specialize()",
        req_.reduction.name());
  if (req_.schedule && req_.schedule->persistent_blocks() > 0 && !specialized)
    fail(
        "schedule of '{}': persistent() is lowered for warp-specialized wgmma kernels, whose producer "
        "loads a block's next tile while its consumers finish the last; add warp_specialize() (and a wgmma "
        "atom), or drop persistent()",
        req_.reduction.name());
  if (req_.schedule && req_.schedule->stream_k_enabled()) {
    const FuncSchedule &schedule = *req_.schedule;
    // (persistent() itself needs warp_specialize(), refused above.)
    if (schedule.persistent_blocks() == 0)
      fail(
          "schedule of '{}': stream_k() splits the last tiles of a persistent grid along k across its "
          "blocks, but the grid is one block per tile; add persistent(blocks) and warp_specialize() "
          "(apps::HopperTiling::persistent_blocks), or drop stream_k()",
          req_.reduction.name());
    if (schedule.reduction_split())
      fail(
          "schedule of '{}': stream_k() and split_reduction({}, {}) both split the k-tiles across blocks; "
          "use one of them",
          req_.reduction.name(), schedule.reduction_split()->var, schedule.reduction_split()->parts);
    if (cluster_ > 1)
      fail(
          "schedule of '{}': stream_k() with cluster({}): a cluster's blocks run paired tiles over the same "
          "k-tiles, which stream-K's ranges do not keep; drop one of them",
          req_.reduction.name(), cluster_);
    if (ping_pong_)
      fail(
          "schedule of '{}': stream_k() with warp_specialize(WarpSpecialization::ping_pong): the ping-pong "
          "teams take whole tiles in turn, and stream-K's parts of a tile are not dealt to them; drop one of "
          "them (apps::HopperTiling::stream_k or ping_pong)",
          req_.reduction.name());
  }
  // Outputs go out through shared tiles; those of a warp-specialized kernel get bytes of their own, as the
  // producer may still hold ring slots, and are dropped (stored directly) where the two do not fit together,
  // TMA stores included: the schedule's stages decide that (HopperTiling's 128 x 256 tiles fit 3 with it).
  plan_write_backs();
  for (StagePlan &p : write_backs_)
    if (ping_pong_) p.directive.depth = kPingPongTeams;  // a tile for each team
  if (specialized) {
    int ring = 0, tiles = 0;
    for (const StagePlan &p : stages_) ring += p.bytes();
    for (const StagePlan &p : write_backs_) tiles += p.bytes();
    if (ring + tiles > req_.target.max_shared_bytes_per_block) {
      if (req_.schedule->output_sub_tile_buffers())
        fail(
            "schedule of '{}': store_output_sub_tiles({}) asks for {} B of output buffers beside the TMA "
            "ring's {} B, more than the {} B of a block; use fewer stages or buffers",
            req_.reduction.name(), req_.schedule->output_sub_tile_buffers(), tiles, ring,
            req_.target.max_shared_bytes_per_block);
      write_backs_.clear();
      summary_ += fmt::format(
          "  outputs stored directly: the write-back tiles ({} B) do not fit beside the TMA ring ({} B) in "
          "the {} B of a block\n",
          tiles, ring, req_.target.max_shared_bytes_per_block);
    }
  }
  Stmt reduction;
  Stmt body;
  if (wgmma_n_) {
    body = tma_wgmma_kernel([&](bool split) {
      std::vector<Stmt> finish;
      if (hybrid) finish.push_back(promote_partials());
      // (A warp-specialized kernel's write-back tiles are allocated beside the ring: tma_wgmma_kernel.)
      Stmt stores = specialized ? epilogue() : with_shared_arrays(write_backs_, epilogue());
      // A stream-K unit's states are one part of its tile: the tile's last part folds them all first.
      finish.push_back(split ? stream_k_fixup(units_, stream_k_states(), stores) : stores);
      return block(finish);
    });
  } else {
    reduction = pipelined_mainloop();
    if (!reduction.defined()) reduction = nest(0, [&] { return atom_ ? atom_update() : fold_update(); });
  }
  if (hybrid && promote_loop_ < 0) {
    std::string steps;
    for (size_t d : nest_)
      if (loops_.dims[d].reduction)
        steps +=
            fmt::format("{}{} ({})", steps.empty() ? "" : ", ", loops_.dims[d].name, loops_.dims[d].extent);
    fail(
        "schedule of '{}': hybrid accumulation promotes every {} k-steps, but no reduction loop ends after a "
        "whole number of such groups (the k-step loops are {}); choose a count that divides or is a multiple "
        "of the k-steps per tile",
        req_.reduction.name(), req_.schedule->accumulation().promote_every, steps);
  }
  if (!wgmma_n_) {
    std::vector<Stmt> parts = {init_states(), reduction};
    if (hybrid) parts.push_back(promote_partials());
    body = block({with_shared_arrays(stages_, block(parts)), with_shared_arrays(write_backs_, epilogue()),
                  drain_tma_stores(write_backs_)});
  }

  // Register arrays for the states (or accumulators and fragments), around the reduction.
  int points = 1;
  for (int d : register_dims_) points *= loops_.dims[d].constant_extent(loops_.func, "register states");
  if (atom_ && !wgmma_n_) {
    body = Allocate::make("frag.a", contraction_->a.type, Halide::MemoryType::Register,
                          {fragment_slices_ * fragment_count(a_dims_) * 8}, const_true(), body);
    body = Allocate::make("frag.b", contraction_->b.type, Halide::MemoryType::Register,
                          {fragment_slices_ * fragment_count(b_dims_) * 4}, const_true(), body);
  }
  if (atom_) {
    body = Allocate::make("acc", accumulator_type_, Halide::MemoryType::Register,
                          {points * accumulator_elements()}, const_true(), body);
    if (req_.schedule->accumulation().kind == Accumulation::Kind::hybrid)
      body = Allocate::make("acc.f32", f32, Halide::MemoryType::Register, {points * accumulator_elements()},
                            const_true(), body);
  } else {
    for (const Component &c : monoid_.state)
      body = Allocate::make("state." + c.name, c.type, Halide::MemoryType::Register, {points}, const_true(),
                            body);
  }
  for (auto it = outer_.rbegin(); it != outer_.rend(); ++it) {
    const LoopDim &d = loops_.dims[*it];
    body =
        For::make(d.name, 0, d.extent, d.binding == Binding::unrolled ? ForType::Unrolled : ForType::Serial,
                  Halide::DeviceAPI::None, body);
  }
  check_register_budget();
  if (specialized) check_warp_specialization();
  std::vector<std::string> instructions;
  if (atom_ && !wgmma_n_) instructions = {"ldmatrix.sync.aligned", "mma.sync.aligned.m16n8k16.row.col"};
  if (wgmma_n_)
    instructions = {fmt::format("wgmma.mma_async.sync.aligned.m64n{}k16", wgmma_n_), "cp.async.bulk.tensor",
                    "mbarrier.try_wait.parity"};
  if (specialized) instructions.push_back("setmaxnreg");
  std::vector<StagePlan> plans = stages_;
  plans.insert(plans.end(), write_backs_.begin(), write_backs_.end());
  if (cluster_ > 1)
    instructions.insert(instructions.end(),
                        {"multicast::cluster", "mapa.shared::cluster", "barrier.cluster"});
  Kernel kernel = assemble_kernel(req_, body, plans, mapping_, instructions, summary_);
  kernel.cluster = {cluster_, 1, 1};
  if (units_.stream_k) {
    std::vector<BufferArg> outputs = req_.output_buffers;
    for (const BufferArg &b : stream_k_buffers()) {
      outputs.push_back(b);
      kernel.workspaces.push_back({b.name, b.type, b.shape, /*zeroed=*/b.type == Halide::Int(32)});
    }
    collect_arguments(*req_.graph, kernel, outputs, req_.intermediates);
  }
  return kernel;
}

std::vector<BufferArg> ReductionKernelBuilder::stream_k_buffers() const {
  const TileStates states = stream_k_states();
  std::vector<BufferArg> buffers;
  const Halide::Expr elements = units_.partial_slots() * states.points * states.threads;
  for (size_t c = 0; c < monoid_.state.size(); ++c)
    buffers.push_back({states.partials[c], monoid_.state[c].type, {elements}, BufferArg::Role::workspace});
  buffers.push_back({states.counters, Halide::Int(32), {units_.counters()}, BufferArg::Role::workspace});
  return buffers;
}

TileStates ReductionKernelBuilder::stream_k_states() const {
  TileStates s;
  s.monoid = &monoid_;
  s.threads = consumer_threads_;
  int points = 1;
  for (int d : register_dims_) points *= loops_.dims[d].constant_extent(loops_.func, "register states");
  s.points = points * (atom_ ? accumulator_elements() : 1);
  const std::string &f = req_.reduction.name();
  for (const Component &c : monoid_.state) s.partials.push_back(f + ".stream_k.partial." + c.name);
  s.counters = f + ".stream_k.arrivals";
  s.for_each_point = [this](const std::function<Stmt(const Halide::Expr &)> &body) {
    const Halide::Expr point = atom_ ? register_index(register_dims_) * accumulator_elements() + var("acc.e")
                                     : register_index(register_dims_);
    return for_each_point([&] { return body(point); });
  };
  s.state = [this] { return state_values(); };
  s.set_state = [this](const std::vector<Halide::Expr> &values) { return set_states(values); };
  // Only the consumers of a warp-specialized kernel hold states.
  const bool specialized = consumer_threads_ < mapping_.threads;
  s.sync = specialized ? intrinsic::named_barrier(1, consumer_threads_) : intrinsic::barrier();
  return s;
}

Stmt ReductionKernelBuilder::set_states(const std::vector<Halide::Expr> &values) const {
  if (atom_) {
    // The array state_values reads: the f32 copies under hybrid accumulation, else the accumulators.
    const bool hybrid = req_.schedule->accumulation().kind == Accumulation::Kind::hybrid;
    const Halide::Expr index = register_index(register_dims_) * accumulator_elements() + var("acc.e");
    return store(hybrid ? "acc.f32" : "acc", Halide::cast(hybrid ? f32 : accumulator_type_, values[0]),
                 index);
  }
  std::vector<Stmt> stores;
  for (size_t c = 0; c < monoid_.state.size(); ++c)
    stores.push_back(store("state." + monoid_.state[c].name, values[c], register_index(register_dims_)));
  return block(stores);
}

intrinsic::WgmmaOperand ReductionKernelBuilder::wgmma_operand(const ContractionOperand &operand) const {
  const StagePlan *stage = nullptr;
  for (const StagePlan &p : stages_)
    if (p.input == operand.input) stage = &p;
  if (!stage || stage->directive.transport != Transport::tma)
    fail(
        "schedule of '{}': the wgmma atom reads '{}' from shared memory through a matrix descriptor, so '{}' "
        "must be staged with Transport::tma",
        req_.reduction.name(), operand.input, operand.input);
  // The operand's tile starts where the atom's loops are 0; it is K-major when its contiguous (last)
  // coordinate moves with the atom's k.
  std::vector<Halide::Expr> coords;
  bool k_major = false;
  for (size_t c = 0; c < operand.coords.size(); ++c) {
    Halide::Expr e = simplify(lowering_.lower(operand.coords[c]));
    if (c + 1 == operand.coords.size()) k_major = expr_uses_var(e, loops_.dims[atom_k_].name);
    for (int d : {atom_i_, atom_j_, atom_k_}) e = substitute(loops_.dims[d].name, Halide::Expr(0), e);
    coords.push_back(simplify(e));
  }
  const Halide::Expr iteration = ring_iteration_.defined() ? ring_iteration_ : var(stage->directive.at);
  const Halide::Expr slot = stage->directive.depth > 1 ? iteration % stage->directive.depth : Halide::Expr(0);
  return stage->wgmma_operand(coords, slot, k_major);
}

Stmt ReductionKernelBuilder::tma_wgmma_kernel(const std::function<Stmt(bool split)> &finish) {
  const std::string &fname = req_.reduction.name();
  const int tile = static_cast<int>(nest_[0]);
  const LoopDim &x = loops_.dims[tile];
  std::vector<const StagePlan *> here;
  for (const StagePlan &p : stages_) {
    if (p.directive.transport != Transport::tma) continue;
    if (p.at != tile)
      fail(
          "schedule of '{}': '{}' is staged by TMA at loop '{}', but the wgmma main loop stages its operands "
          "at the outermost reduction loop '{}'",
          fname, p.input, p.directive.at, x.name);
    here.push_back(&p);
  }
  if (here.empty())
    fail("schedule of '{}': the wgmma atom needs its operands staged with Transport::tma", fname);
  const int depth = here[0]->directive.depth;
  for (const StagePlan *p : here)
    if (p->directive.depth != depth || depth < 2)
      fail(
          "schedule of '{}': the TMA stages of a wgmma main loop share one ring of 2 or more slots, but '{}' "
          "has {}; give every TMA stage the same depth, at least 2",
          fname, p->input, p->directive.depth);
  int tile_bytes = 0;
  for (const StagePlan *p : here) tile_bytes += p->slot_elems * p->elem_bytes;
  const std::optional<WarpSpecialization> &specialized = req_.schedule->warp_specialization();
  const Halide::Expr t = x.var(), tiles = x.extent, thread = intrinsic::thread_index();
  auto full = [](const Halide::Expr &slot) { return intrinsic::MbarrierRef{"tma.full", slot}; };
  auto empty = [](const Halide::Expr &slot) { return intrinsic::MbarrierRef{"tma.empty", slot}; };
  // One thread expects the tile's bytes on the slot's full barrier and issues its copies. In a cluster it
  // copies its share of each shared tile into every block of the cluster; its barrier still expects the
  // whole tile, the other shares coming from its peers.
  const Halide::Expr cluster_rank = intrinsic::block_index(0) % cluster_;
  auto issue = [&](const Halide::Expr &k_tile, const Halide::Expr &slot) {
    std::vector<Stmt> s = {intrinsic::mbarrier_arrive(full(slot), tile_bytes)};
    for (const StagePlan *p : here) {
      const bool shared = std::count(multicast_inputs_.begin(), multicast_inputs_.end(), p->input) > 0;
      s.push_back(shared ? p->tma_multicast_copies(k_tile, slot, full(slot), {cluster_rank, cluster_})
                         : p->tma_copies(k_tile, slot, full(slot)));
    }
    return block(s);
  };
  // A consumer releases a slot in every block of its cluster: each block's producer multicasts into all of
  // them.
  auto release = [&](const Halide::Expr &slot) {
    if (cluster_ == 1) return intrinsic::mbarrier_arrive(empty(slot));
    std::vector<Stmt> arrivals;
    for (int rank = 0; rank < cluster_; ++rank)
      arrivals.push_back(intrinsic::mbarrier_arrive_cluster(empty(slot), rank));
    return block(arrivals);
  };
  auto each_slot = [&](const std::function<Stmt(const Halide::Expr &)> &body) {
    return For::make("tma.slot", 0, depth, ForType::Unrolled, Halide::DeviceAPI::None, body(var("tma.slot")));
  };
  // The full barrier of a slot completes when its tile has landed (one arrival and the bytes); the empty one
  // when every consumer has finished reading it: each thread arrives, or with warp specialization one
  // thread of each consumer warpgroup (after its wgmma_wait, which the whole warpgroup passes together).
  const int consumer_warpgroups = consumer_threads_ / hopper::kWarpgroupThreads;
  // In ping-pong one team reads each k-tile.
  const int releases = specialized ? (ping_pong_ ? 1 : consumer_warpgroups) * cluster_ : mapping_.threads;
  const Stmt init = each_slot([&](const Halide::Expr &slot) {
    return block({intrinsic::mbarrier_init(full(slot), 1), intrinsic::mbarrier_init(empty(slot), releases)});
  });
  // In a cluster, the barriers are initialized before any peer's copy or arrival can reach them.
  std::vector<Stmt> setup = {cluster_ == 1
                                 ? guarded(thread == 0, init)
                                 : guarded(thread == 0, block({init, intrinsic::fence_mbarrier_init()})),
                             cluster_ == 1 ? intrinsic::barrier() : intrinsic::cluster_sync()};
  // Ring iteration i computes on slot i % depth; once its wgmmas are issued, those of iteration i - 1 are
  // waited for (one group stays in flight) and its slot is released. The iteration is the k-tile t, or in a
  // persistent kernel the k-tiles of the block's earlier units plus t's place in its unit (stream_k.h): the
  // ring's slots and phases carry on from one unit to the next.
  const bool persistent = req_.schedule->persistent_blocks() > 0;
  if (persistent)
    units_ = plan_persistent_units(tile_count_, tiles, req_.schedule->persistent_blocks(),
                                   req_.schedule->stream_k_enabled(), req_.schedule->stream_k_tiles());
  const Halide::Expr first_k = persistent ? var(unit::kFirstK) : Halide::Expr(0);
  const Halide::Expr k_count = persistent ? var(unit::kKCount) : tiles;
  const Halide::Expr it = persistent ? var("tma.iteration") : t;
  auto at_iteration = [&](const Stmt &s) {
    return persistent ? LetStmt::make("tma.iteration", var(unit::kRingBase) + t, s) : s;
  };
  auto k_loop = [&](const Stmt &s) {
    return For::make(x.name, first_k, k_count, ForType::Serial, Halide::DeviceAPI::None, at_iteration(s));
  };
  ring_iteration_ = it;
  const Halide::Expr previous = t - 1, reuse = previous % depth;
  std::vector<Stmt> body = {intrinsic::mbarrier_wait(full(it % depth), (it / depth) % 2),
                            intrinsic::wgmma_fence(), nest(1, [&] { return atom_update(); }),
                            intrinsic::wgmma_commit(), intrinsic::wgmma_wait(1)};
  const Halide::Expr releaser = thread % hopper::kWarpgroupThreads == 0;
  if (specialized) {
    body.push_back(guarded(t >= first_k + 1 && releaser, release((it - 1) % depth)));
  } else {
    // Thread 0 also refills the released slot with tile t - 1 + depth once every thread has arrived.
    body.push_back(
        guarded(t >= 1, block({intrinsic::mbarrier_arrive(empty(reuse)),
                               guarded(thread == 0 && previous + depth < tiles,
                                       block({intrinsic::mbarrier_wait(empty(reuse), (previous / depth) % 2),
                                              issue(previous + depth, reuse)}))})));
  }
  const Accumulation accumulation = req_.schedule->accumulation();
  if (accumulation.kind == Accumulation::Kind::hybrid) {
    // The f16 partials are promoted into f32 after every promote_every k-steps, which must be whole k-tiles:
    // the tile's wgmmas are waited for first.
    int steps = 1;
    for (size_t p = 1; p < nest_.size(); ++p)
      if (loops_.dims[nest_[p]].reduction)
        steps *= loops_.dims[nest_[p]].constant_extent(loops_.func, "k-steps");
    if (accumulation.promote_every % steps != 0)
      fail(
          "schedule of '{}': hybrid accumulation promotes every {} k-steps, but the wgmma main loop promotes "
          "between k-tiles of {} k-steps; choose a multiple of {}",
          fname, accumulation.promote_every, steps, steps);
    const int per = accumulation.promote_every / steps;
    promote_loop_ = tile;
    body.push_back(
        guarded(simplify((t + 1) % per == 0), block({intrinsic::wgmma_wait(0), promote_partials()})));
  }
  // After its tile's last k-tile has landed, a ping-pong team passes the turn: the next team's waits then
  // observe the phases that follow this team's (a team that waited earlier could take the phase of a slot's
  // use before its own for its own, of the same parity).
  std::vector<Stmt> loop = {ping_pong_ ? take_turn() : Stmt(), k_loop(block(body)),
                            ping_pong_ ? pass_turn() : Stmt(), intrinsic::wgmma_wait(0)};
  // The next output tile's copies go into the last slot too.
  if (persistent)
    loop.push_back(guarded(releaser, release((var(unit::kRingBase) + first_k + k_count - 1) % depth)));
  const Stmt mainloop = block(loop);
  summary_ += fmt::format("  TMA ring of {} slots ({} B a tile) with full and empty mbarriers, over '{}'\n",
                          depth, tile_bytes, x.name);
  auto with_barriers = [&](Stmt s) {
    for (const char *name : {"tma.empty", "tma.full"})
      s = Allocate::make(name, Halide::UInt(64), Halide::MemoryType::GPUShared, {depth}, const_true(), s);
    return s;
  };
  if (!specialized) {
    // Thread 0 fills the ring before the loop. The epilogue's write-back tiles reuse the ring's bytes.
    setup.push_back(guarded(thread == 0, each_slot([&](const Halide::Expr &slot) {
                              return guarded(simplify(slot < tiles), issue(slot, slot));
                            })));
    setup.push_back(mainloop);
    return block({with_shared_arrays(stages_, block({init_states(), with_barriers(block(setup))})),
                  finish(false), drain_tma_stores(write_backs_)});
  }
  // A persistent block runs `per_unit` for its units (stream_k.h), with the block loops' values at the
  // unit's tile; with a `team` of ping-pong, its tile steps team, team + kPingPongTeams, ...
  auto over_tiles = [&](const std::function<Stmt(bool split)> &per_unit, const Halide::Expr &team = {}) {
    if (!persistent) return per_unit(false);
    return over_units(
        units_, [&](bool split) { return let_all(tile_coordinates_, per_unit(split)); }, team,
        kPingPongTeams);
  };
  // The producer's elected thread issues every k-tile, into a slot its consumers have released: use u of slot
  // i % depth (u = i / depth) waits for the release of use u - 1, the phase of parity (u - 1) % 2.
  const Stmt producer = block(
      {intrinsic::setmaxnreg(specialized->producer_registers, false),
       guarded(thread == consumer_threads_, over_tiles([&](bool) {
                 return k_loop(block(
                     {guarded(it >= depth, intrinsic::mbarrier_wait(empty(it % depth), (it / depth + 1) % 2)),
                      issue(t, it % depth)}));
               }))});
  auto per_unit = [&](bool split) { return block({init_states(), mainloop, finish(split)}); };
  Stmt consumers = block({over_tiles(per_unit), drain_tma_stores(write_backs_)});
  if (ping_pong_) {
    // The turns form a ring: the last team gives the first its first turn, and the team after the one that
    // ran the block's last tile takes the last pass, so that every barrier has as many arrivals as waits.
    // (Ping-pong runs whole tiles only: stream-K is refused with it.)
    const Halide::Expr blocks = mapping_.grid[0], block_x = intrinsic::block_index(0);
    const Halide::Expr block_tiles = simplify((tile_count_ - block_x + blocks - 1) / blocks);
    consumers = team_local(block(
        {guarded(team() == kPingPongTeams - 1, pass_turn()), over_tiles(per_unit, team()),
         guarded(team() == block_tiles % kPingPongTeams, take_turn()), drain_tma_stores(write_backs_)}));
    consumers = LetStmt::make("consumer.team", thread / team_threads_, consumers);
  }
  consumers = block({intrinsic::setmaxnreg(specialized->consumer_registers, true), consumers});
  summary_ += fmt::format(
      "  warp specialized, {} threads a block: warpgroup {} issues the TMA copies ({} registers a thread), "
      "warpgroups 0 to {} compute ({} registers a thread)\n",
      mapping_.threads, consumer_warpgroups, specialized->producer_registers, consumer_warpgroups - 1,
      specialized->consumer_registers);
  setup.push_back(IfThenElse::make(thread >= consumer_threads_, producer, consumers));
  // No block of a cluster exits while a peer may still multicast into its shared memory or arrive on its
  // barriers.
  if (cluster_ > 1) setup.push_back(intrinsic::cluster_sync());
  // The write-back tiles follow the ring's slots, whose sizes are whole swizzle patterns, so that they start
  // at a pattern boundary as their TMA stores need (the barriers' few bytes come after them).
  return with_shared_arrays(stages_, with_shared_arrays(write_backs_, with_barriers(block(setup))));
}

void ReductionKernelBuilder::check_warp_specialization() const {
  const WarpSpecialization &w = *req_.schedule->warp_specialization();
  const std::string &fname = req_.reduction.name();
  check_register_split(fname, w, mapping_.threads, consumer_threads_, req_.schedule->min_blocks(),
                       req_.target);
  int points = 1;
  for (int d : register_dims_) points *= loops_.dims[d].constant_extent(loops_.func, "register states");
  int accumulators = points * accumulator_elements() * accumulator_type_.bytes() / 4;
  if (req_.schedule->accumulation().kind == Accumulation::Kind::hybrid)
    accumulators += points * accumulator_elements();
  if (accumulators > w.consumer_registers)
    fail(
        "schedule of '{}': each consumer thread keeps {} registers of accumulators, but warp_specialize() "
        "gives "
        "the consumers {} registers a thread; use a smaller tile per warpgroup or more consumer registers",
        fname, accumulators, w.consumer_registers);
}

void ReductionKernelBuilder::check_register_budget() const {
  // A floor on registers per thread: the states (or accumulators and fragments) alone, 4 bytes per register.
  int points = 1;
  for (int d : register_dims_) points *= loops_.dims[d].constant_extent(loops_.func, "register states");
  int bytes = 0;
  if (atom_) {
    bytes = points * accumulator_elements() * accumulator_type_.bytes();
    if (req_.schedule->accumulation().kind == Accumulation::Kind::hybrid)
      bytes += points * accumulator_elements() * 4;
  } else {
    for (const Component &c : monoid_.state) bytes += points * std::max(4, c.type.bytes());
  }
  const int registers = bytes / 4;
  if (registers > req_.target.max_registers_per_thread)
    fail(
        "schedule of '{}' keeps {} state value(s) per thread in registers, at least {} registers, but {} "
        "allows {} per thread; use smaller register tiles",
        req_.reduction.name(), points * (atom_ ? accumulator_elements() : int(monoid_.state.size())),
        registers, req_.target.arch, req_.target.max_registers_per_thread);
}

}  // namespace

Kernel build_reduction_kernel(const ReductionKernelRequest &request) {
  return with_fallback<ReductionKernelRequest>(
      request, [](ReductionKernelRequest &r) -> ReductionKernelRequest & { return r; },
      [](const ReductionKernelRequest &r) { return ReductionKernelBuilder(r).build(); });
}

void collect_arguments(const FuncGraph &graph, Kernel &k, const std::vector<BufferArg> &outputs,
                       const std::vector<BufferArg> &intermediates) {
  struct Uses : IRVisitor {
    std::set<std::string> buffers, allocated;
    std::vector<ScalarArg> scalars;
    using IRVisitor::visit;
    void visit(const Load *l) override {
      buffers.insert(l->name);
      IRVisitor::visit(l);
    }
    void visit(const Store *s) override {
      buffers.insert(s->name);
      IRVisitor::visit(s);
    }
    void visit(const StringImm *s) override { buffers.insert(s->value); }
    void visit(const Allocate *a) override {
      allocated.insert(a->name);
      IRVisitor::visit(a);
    }
    void visit(const Variable *v) override {
      if (is_param(v) &&
          std::none_of(scalars.begin(), scalars.end(), [&](auto &s) { return s.name == v->name; }))
        scalars.push_back({v->name, v->type});
    }
  } uses;
  k.body.accept(&uses);
  for (const Halide::Expr &g : k.grid) g.accept(&uses);
  for (const Requirement &r : k.requirements) r.condition.accept(&uses);
  // A buffer read only by TMA copies is named by its tensor map, whose extents may read scalars.
  for (const TensorMap &m : k.tensor_maps) {
    uses.buffers.insert(m.buffer);
    for (const Halide::Expr &e : m.extents) e.accept(&uses);
  }
  k.buffers.clear();
  for (const Input &in : graph.inputs)
    if (uses.buffers.count(in.name()) && !uses.allocated.count(in.name()))
      k.buffers.push_back({in.name(), in.type(), to_halide(in.shape()), BufferArg::Role::input});
  for (BufferArg b : intermediates)
    if (uses.buffers.count(b.name)) {
      b.role = BufferArg::Role::input;
      k.buffers.push_back(b);
    }
  for (const BufferArg &out : outputs) {
    k.buffers.push_back(out);
    for (const Halide::Expr &e : out.shape) e.accept(&uses);
  }
  for (const BufferArg &b : k.buffers)
    for (const Halide::Expr &e : b.shape) e.accept(&uses);
  k.scalars = uses.scalars;
}

}  // namespace twist
