// The chained kernel on the Hopper datapath (the consumer's atom is MatrixAtom::wgmma): Q lands once by TMA,
// K and V tiles by TMA in a ring of mbarrier slots; S = Q K^T is a wgmma m64nNk16 reading both operands
// through matrix descriptors, and the column component's products P V a wgmma with P from registers (the
// register-A layout is the mma.m16n8k16 A fragment's, 16 rows per warp) and V from its MN-major tile. A
// wgmma's accumulators are those of N / 8 mma atoms of 16 x 8 per warp, so the tile's update (elements,
// masks, selectors, rescale) is the one chained_kernel.cpp builds for both datapaths.
#include <algorithm>

#include "lang/error.h"
#include "scheduler/chained_kernel_builder.h"
#include "scheduler/hopper_layouts.h"
#include "scheduler/named_barriers.h"
#include "scheduler/register_split.h"

namespace twist::chained {

using namespace Halide::Internal;
using namespace twist::stmt;

namespace {

// `s` with register arrays `a` and `b` exchanged: their loads and stores, and their names in intrinsics
// (a wgmma's accumulators).
Stmt swap_arrays(const Stmt &s, const std::string &a, const std::string &b) {
  struct Swap : IRMutator {
    const std::string &a, &b;
    Swap(const std::string &x, const std::string &y) : a(x), b(y) {}
    const std::string &other(const std::string &name) const { return name == a ? b : name == b ? a : name; }
    using IRMutator::visit;
    Halide::Expr visit(const Load *op) override {
      const Halide::Expr index = mutate(op->index);
      return Load::make(op->type, other(op->name), index, op->image, op->param, op->predicate, op->alignment);
    }
    Stmt visit(const Store *op) override {
      return Store::make(other(op->name), mutate(op->value), mutate(op->index), op->param, op->predicate,
                         op->alignment);
    }
    Halide::Expr visit(const StringImm *op) override { return StringImm::make(other(op->value)); }
  } swap(a, b);
  return swap.mutate(s);
}

}  // namespace

void ChainedKernelBuilder::plan_hopper() {
  const std::string &fname = req_.reduction.name();
  if (!req_.target.has_wgmma)
    fail(
        "schedule of '{}': the wgmma atom runs on sm_90a, but the program is lowered for {}; use "
        "MatrixAtom::mma_m16n8k16 there",
        fname, req_.target.arch);
  const int rows = extent_of(atom_row_, "a wgmma atom"), n = extent_of(atom_col_, "a wgmma atom's N"),
            keys = extent_of(atom_key_, "a wgmma atom");
  if (rows != 64 || keys != 16 || !hopper::is_wgmma_n(n))
    fail(
        "schedule of '{}': the wgmma atom covers 64 x N x 16 with N from 8 to 256 in steps of 8, but its "
        "loops "
        "'{}', '{}' and '{}' have extents {}, {} and {}",
        fname, atom_row_, atom_col_, atom_key_, rows, n, keys);
  if (std::none_of(loops_.dims.begin(), loops_.dims.end(),
                   [](const LoopDim &d) { return d.binding == Binding::warpgroup; }))
    fail(
        "schedule of '{}': a wgmma atom runs on a warpgroup; bind the loop over the block's 64-row atoms to "
        "Binding::warpgroup (extent 1 for one warpgroup)",
        fname);
}

void ChainedKernelBuilder::plan_persistent() {
  const FuncSchedule &s = *req_.schedule;
  if (s.persistent_blocks() == 0) return;
  const std::string &fname = req_.reduction.name();
  if (!s.warp_specialization())
    fail(
        "schedule of '{}': persistent() has a producer warpgroup load the next output tile's Q and key tiles "
        "while the consumers finish this tile's update and epilogue, and the kernel has none; add "
        "warp_specialize() (AttentionTiling::warp_specialized), or drop persistent()",
        fname);
  if (s.stream_k_enabled())
    fail(
        "schedule of '{}': stream_k() splits a contraction's k-tiles across persistent blocks, which the "
        "chained kernel's key loop does not; drop stream_k() (split_reduction() splits the keys)",
        fname);
  persistent_ = make_grid_persistent(mapping_, s.persistent_blocks(), false);
  summary_ += fmt::format(
      "  persistent grid: min({}, tiles) blocks, each taking every {}th tile in launch order; the producer "
      "loads a tile's Q once the consumers have released the last one\n",
      s.persistent_blocks(), s.persistent_blocks());
}

Halide::Expr ChainedKernelBuilder::ring_base() const {
  return persistent() ? load(Halide::Int(32), "ring.base", 0) : Halide::Expr(0);
}

Stmt ChainedKernelBuilder::over_block_tiles(const Stmt &per_tile) const {
  if (!persistent()) return per_tile;
  const int blocks = req_.schedule->persistent_blocks();
  const Halide::Expr b = intrinsic::block_index(0), step = var("tile.step");
  const Stmt tile =
      LetStmt::make(unit::kTile, b + step * blocks, let_all(persistent_->coordinates, per_tile));
  return block({store("ring.base", 0, 0),
                For::make("tile.step", 0, simplify((persistent_->count - b + blocks - 1) / blocks),
                          ForType::Serial, Halide::DeviceAPI::None, tile)});
}

const StagePlan &ChainedKernelBuilder::stage_of(const std::string &input) const {
  const auto it =
      std::find_if(stages_.begin(), stages_.end(), [&](const StagePlan &p) { return p.input == input; });
  TWIST_CHECK(it != stages_.end(), "'{}' is not staged", input);  // plan_stages refused such schedules
  return *it;
}

intrinsic::WgmmaOperand ChainedKernelBuilder::staged_operand(const std::string &input,
                                                             const std::vector<Halide::Expr> &coords,
                                                             const std::string &k_loop,
                                                             const std::vector<std::string> &atom_loops,
                                                             const Halide::Expr &slot) const {
  // The operand is K-major when its contiguous (last) coordinate moves with the atom's k; its tile starts
  // where the atom's loops are 0.
  const bool k_major = expr_uses_var(coords.back(), k_loop);
  std::vector<Halide::Expr> start = coords;
  for (Halide::Expr &c : start) {
    for (const std::string &l : atom_loops) c = substitute(l, Halide::Expr(0), c);
    c = simplify(c);
  }
  return stage_of(input).wgmma_operand(start, slot, k_major);
}

Stmt ChainedKernelBuilder::scores_by_wgmma(const std::string &accumulator, const Halide::Expr &slot) {
  // Per atom of 64 rows and k-step: accumulator (+)= Q tile x K tile^T, both K-major; the first k-step
  // overwrites, so the accumulator needs no zeroing. One commit group, waited for by the caller.
  intrinsic::Wgmma w;
  w.n = jn_extent_ * 8;
  w.d = accumulator;
  w.d_index = s_index(0, 0);
  w.a = staged_operand(rows_operand_.input, q_coords_, "S.dka", {atom_row_, "S.dka"}, 0);
  w.b = staged_operand(keys_operand_.input, k_coords_, "S.dka", {"S.jn", "S.ja", "S.dka"}, slot);
  w.accumulate = var("S.dk") > 0;
  return block({intrinsic::wgmma_fence({accumulator}),
                over(row_loops_, unrolled("S.dk", dk_extent_, intrinsic::wgmma(w))),
                intrinsic::wgmma_commit()});
}

int ChainedKernelBuilder::live_registers() const {
  const int s_sets = req_.schedule->overlaps_producer() ? 2 : 1;
  const int s_points = row_slots() / 2 * jn_extent_ * 4;
  const int o_points = row_slots() / 2 * col_points_ * 4;
  int bytes = s_sets * s_points * s_type_.bytes() + o_points * form_->base[column_component_].type.bytes() +
              s_points * column_operand_.type.bytes();
  for (int k : row_components_) bytes += row_slots() * std::max(4, form_->base[k].type.bytes());
  return (bytes + 3) / 4;
}

int ChainedKernelBuilder::consumer_register_budget() const {
  if (specialized()) return req_.schedule->warp_specialization()->consumer_registers;
  return std::min(req_.target.max_registers_per_thread,
                  req_.target.registers_per_sm / (mapping_.threads * req_.schedule->min_blocks()));
}

void ChainedKernelBuilder::check_overlap_registers() const {
  const int s_points = row_slots() / 2 * jn_extent_ * 4;
  const int o_points = row_slots() / 2 * col_points_ * 4;
  const int demand = live_registers(), budget = consumer_register_budget();
  if (demand > budget)
    fail(
        "schedule of '{}': overlap_producer keeps two tiles of S ({} values each) with the column "
        "accumulators ({}) and P live, at least {} registers per thread, but {}; use a smaller key tile or "
        "fewer column points per warpgroup, min_blocks_per_sm(1), more consumer registers, or drop "
        "FuncSchedule::overlap_producer",
        req_.reduction.name(), s_points, o_points, demand,
        specialized() ? fmt::format("warp_specialize() gives the consumers {}", budget)
                      : fmt::format("{} threads per block and {} block(s) per SM on {} allow {}",
                                    mapping_.threads, req_.schedule->min_blocks(), req_.target.arch, budget));
}

bool ChainedKernelBuilder::ping_pong() const {
  return specialized() && req_.schedule->warp_specialization()->ping_pong;
}

Stmt ChainedKernelBuilder::take_turn() const {
  const Halide::Expr warpgroup = intrinsic::thread_index() / hopper::kWarpgroupThreads;
  return intrinsic::named_barrier(named_barriers::kFirstTurn + warpgroup, 2 * hopper::kWarpgroupThreads);
}

Stmt ChainedKernelBuilder::pass_turn(const Halide::Expr &last_turn) const {
  const int warpgroups = consumer_threads_ / hopper::kWarpgroupThreads;
  named_barriers::last_turn_barrier(warpgroups);
  const Halide::Expr warpgroup = intrinsic::thread_index() / hopper::kWarpgroupThreads;
  const Stmt pass = intrinsic::named_barrier_arrive(named_barriers::kFirstTurn + (warpgroup + 1) % warpgroups,
                                                    2 * hopper::kWarpgroupThreads);
  return guarded(simplify(!(last_turn && is_last_consumer_warpgroup())), pass);
}

Halide::Expr ChainedKernelBuilder::is_last_consumer_warpgroup() const {
  return intrinsic::thread_index() >= consumer_threads_ - hopper::kWarpgroupThreads;
}

void ChainedKernelBuilder::check_warp_specialization() const {
  const WarpSpecialization &w = *req_.schedule->warp_specialization();
  const std::string &fname = req_.reduction.name();
  const int warpgroups = consumer_threads_ / hopper::kWarpgroupThreads;
  if (w.ping_pong && warpgroups < 2)
    fail(
        "schedule of '{}': WarpSpecialization::ping_pong alternates two or more consumer warpgroups on the "
        "tensor cores, but the block has {} ({} threads bound to its loops); bind the rows to two "
        "warpgroups (64 rows each: a block of 128 rows) or drop ping_pong",
        fname, warpgroups, consumer_threads_);
  check_register_split(fname, w, mapping_.threads, consumer_threads_, req_.schedule->min_blocks(),
                       req_.target);
  if (!req_.schedule->overlaps_producer() && live_registers() > w.consumer_registers)
    fail(
        "schedule of '{}': each consumer thread keeps at least {} registers live across a key tile (S, the "
        "column accumulators, P and the rows' states), but warp_specialize() gives the consumers {}; use a "
        "smaller key tile or fewer columns per warpgroup, or more consumer registers",
        fname, live_registers(), w.consumer_registers);
}

Stmt ChainedKernelBuilder::column_products_by_wgmma(const Halide::Expr &slot) {
  // Per atom of 64 rows, key step and column point: acc.o += P (registers) x V tile (MN-major).
  const std::string step = key_step_.empty() ? std::string("P.one") : key_step_;
  std::vector<std::pair<std::string, int>> p_at_step = row_loops_, loops = row_loops_;
  p_at_step.push_back({step, key_steps_});
  loops.push_back({step, key_steps_});
  loops.insert(loops.end(), col_loops_.begin(), col_loops_.end() - 1);  // all but the wgmma's own groups
  intrinsic::Wgmma w;
  w.n = extent_of(atom_col_, "a wgmma atom's N");
  w.d = "acc.o";
  w.d_index = simplify(substitute(kColumnGroup, Halide::Expr(0), o_index(0)));
  w.a_registers = "frag.p";
  w.a_index = flat(p_at_step) * 8;
  w.b = staged_operand(column_operand_.input, v_coords_, atom_key_, {atom_key_, atom_col_}, slot);
  w.accumulate = 1;
  // In ping-pong without overlap_producer the products are issued in the warpgroup's turn and waited for by
  // the key loop once the next S is issued too (tma_key_loop); delayed ones after the next tile's update,
  // issued in the turn the key loop takes for the next tile's S.
  const bool turn = ping_pong() && !req_.schedule->overlaps_producer() && !delays_column_products();
  const bool waited_here = !turn && !delays_column_products();
  // The fence orders acc.o alone: with overlap_producer or delayed products an S is in flight across it.
  return block({turn ? take_turn() : Stmt(), intrinsic::wgmma_fence({w.d}), over(loops, intrinsic::wgmma(w)),
                intrinsic::wgmma_commit(), waited_here ? intrinsic::wgmma_wait(0) : Stmt()});
}

Stmt ChainedKernelBuilder::tma_key_loop(const Halide::Expr &first, const Halide::Expr &count,
                                        const std::function<Stmt()> &tile, const Stmt &states,
                                        const Stmt &finish) {
  const std::string &fname = req_.reduction.name();
  const StagePlan *q = &stage_of(rows_operand_.input);
  std::vector<const StagePlan *> ring;
  for (const StagePlan &p : stages_) {
    if (p.directive.transport != Transport::tma)
      fail(
          "schedule of '{}': its wgmma atoms read '{}' from shared memory through matrix descriptors, so "
          "stage it with Transport::tma",
          fname, p.input);
    if (&p == q) continue;
    if (p.directive.at != key_loop_)
      fail(
          "schedule of '{}': '{}' is staged at loop '{}'; the TMA ring of a chained kernel is the key loop "
          "'{}'",
          fname, p.input, p.directive.at, key_loop_);
    ring.push_back(&p);
  }
  const int depth = ring.front()->directive.depth;
  for (const StagePlan *p : ring)
    if (p->directive.depth != depth || depth < 2)
      fail(
          "schedule of '{}': the TMA stages of the key loop share one ring of 2 or more slots, but '{}' has "
          "{}; "
          "give every one the same depth, at least 2",
          fname, p->input, p->directive.depth);
  int tile_bytes = 0;
  for (const StagePlan *p : ring) tile_bytes += p->slot_elems * p->elem_bytes;
  const int q_bytes = q->slot_elems * q->elem_bytes;

  auto full = [](const Halide::Expr &slot) { return intrinsic::MbarrierRef{"tma.full", slot}; };
  auto empty = [](const Halide::Expr &slot) { return intrinsic::MbarrierRef{"tma.empty", slot}; };
  const intrinsic::MbarrierRef q_full{"tma.q", 0};
  // A persistent kernel's Q is released by each consumer warpgroup once every S on it has completed, before
  // the producer loads the next tile's.
  const intrinsic::MbarrierRef q_empty{"tma.q.empty", 0};
  const std::optional<WarpSpecialization> &specialization = req_.schedule->warp_specialization();
  const Halide::Expr thread = intrinsic::thread_index();
  // The thread that issues the copies: thread 0, or the producer warpgroup's first.
  const Halide::Expr issuer = thread == (specialization ? consumer_threads_ : 0);
  // One thread expects key tile `key_tile`'s bytes on the slot's full barrier and issues its copies.
  auto issue = [&](const Halide::Expr &key_tile, const Halide::Expr &slot) {
    std::vector<Stmt> s = {intrinsic::mbarrier_arrive(full(slot), tile_bytes)};
    for (const StagePlan *p : ring) s.push_back(p->tma_copies(key_tile, slot, full(slot)));
    return block(s);
  };
  auto each_slot = [&](const std::function<Stmt(const Halide::Expr &)> &body) {
    return unrolled("tma.slot", depth, body(var("tma.slot")));
  };
  // Tile r of the block's key tiles (key tile first + r) is the ring's iteration r, or in a persistent
  // kernel ring_base() + r, and computes on that iteration's slot, in the phase of its use. The full barrier
  // of a slot completes when its tile has landed; the empty one when its readers' wgmmas have finished: every
  // thread arrives, or with warp specialization one thread of each consumer warpgroup, after the wgmma wait
  // that the whole warpgroup passes together.
  const int consumer_warpgroups = consumer_threads_ / hopper::kWarpgroupThreads;
  const int releases = specialization ? consumer_warpgroups : mapping_.threads;
  const Halide::Expr r = var("ring.r"), previous = r - 1, reuse = previous % depth;
  auto iteration = [&](const Halide::Expr &tile_r) { return persistent() ? ring_base() + tile_r : tile_r; };
  auto slot_of = [&](const Halide::Expr &tile_r) { return iteration(tile_r) % depth; };
  auto wait_landed = [&](const Halide::Expr &tile_r) {
    return intrinsic::mbarrier_wait(full(slot_of(tile_r)), (iteration(tile_r) / depth) % 2);
  };
  ring_slot_ = slot_of(r);
  // Without a producer, one thread refills the slot tile r - 1 released with tile r - 1 + depth once every
  // thread has arrived; with one, the producer does (below).
  const Stmt refill = specialization
                          ? Stmt()
                          : guarded(r >= 1 && issuer && previous + depth < count,
                                    block({intrinsic::mbarrier_wait(empty(reuse), (previous / depth) % 2),
                                           issue(var(key_loop_) - 1 + depth, reuse)}));
  // Ping-pong: the consumer warpgroups take turns in a ring, the last one giving the first its first turn
  // before the loop and keeping its own last turn, so that each barrier ends with as many arrivals as waits
  // and every warpgroup runs as many bar.sync as the others (compute-sanitizer's racecheck reported the
  // epilogue's write-back tile as raced when the first warpgroup took one more turn after the loop than the
  // others: bench/RESULTS.md). Without overlap_producer a turn issues one tile's P V and the next tile's S
  // together (FlashAttention-3's order; the first turn issues the first S): taken before the column
  // products (column_products_by_wgmma, which then leaves its wait to the loop), passed once S is issued,
  // and the P V waited for after the pass, so that the other warpgroup's turn follows at once. With
  // overlap_producer the next tile's S is issued before this tile's update: a turn is that S's issue alone,
  // taken once its tile has landed (a turn that waited for a tile inside could wait for the other
  // warpgroup's release of its slot, which that one gives only after its own next turn). With
  // delay_column_products a turn issues a tile's S and the previous tile's P V (below).
  const bool ping_pong_turns = ping_pong();
  auto in_turn = [&](const Stmt &issue, const Halide::Expr &last_turn) {
    return ping_pong_turns ? block({take_turn(), issue, pass_turn(last_turn)}) : issue;
  };
  const Halide::Expr has_next = r + 1 < count;
  std::vector<Stmt> steps, before_loop;
  Stmt after_loop;
  if (ping_pong_turns) before_loop.push_back(guarded(is_last_consumer_warpgroup(), pass_turn(const_false())));
  if (delays_column_products()) {
    // Tile r issues its S, then tile r - 1's column products, and waits for the S alone: the products run
    // during tile r's update, which writes neither acc.o nor P. Their wait comes after the update, inside the
    // tile that issued them (ptxas serializes every wgmma when one is in flight across the loop's back edge);
    // then tile r - 1's slot is released (its V read), the accumulators, complete up to tile r - 1, rescaled
    // by tile r's factor, and tile r's P converted. (The rescale before the products, in flight beside
    // tile r's S, made ptxas wait for that S: C7517.) Each tile's slot is released a tile after its S
    // completes. A producer warpgroup issues the copies: without one, thread 0's refill after the release
    // passes on the interpreter but one GPU test case of it timed out on the H200 (D 64, grouped-query
    // heads, causal: bench/RESULTS.md, "Delayed column products"), so that form is refused until understood.
    if (!specialization)
      fail(
          "schedule of '{}': delay_column_products releases each slot a tile after its S completes, and "
          "without a producer warpgroup the refill that follows timed out on the H200 (not yet understood); "
          "add warp_specialize() or drop FuncSchedule::delay_column_products",
          fname);
    if (req_.schedule->overlaps_producer())
      fail(
          "schedule of '{}': delay_column_products issues each tile's column products with the next tile's "
          "S, in one order of its own; drop FuncSchedule::overlap_producer",
          fname);
    const Halide::Expr has_previous = r > 0;
    auto release_of = [&](const Halide::Expr &tile_r) {
      return guarded(thread % hopper::kWarpgroupThreads == 0,
                     intrinsic::mbarrier_arrive(empty(slot_of(tile_r))));
    };
    // In ping-pong a turn is tile r's S and tile r - 1's products (FlashAttention-3's order), taken once
    // tile r has landed, never holding the turn through a copy. The landing cannot deadlock: it needs both
    // warpgroups' releases of tile r - depth, which each gives in its own tile r - depth + 1 <= r - 1 after
    // that tile's turn, and that turn needs only passes already given. The pass precedes the waits, so that
    // the other warpgroup issues while this one waits for its S and computes its update. The last tile's
    // products after the loop take no turn: each warpgroup takes one a tile, and the last one keeps its
    // last (pass_turn), so every barrier ends with as many arrivals as waits.
    const Stmt pass = ping_pong_turns ? pass_turn(!has_next) : Stmt();
    steps = {wait_landed(r),
             ping_pong_turns ? take_turn() : Stmt(),
             scores_by_wgmma("acc.s", ring_slot_),
             IfThenElse::make(has_previous,
                              block({column_products_by_wgmma(slot_of(previous)), pass,
                                     intrinsic::wgmma_wait(1, {"acc.s"})}),
                              block({pass, intrinsic::wgmma_wait(0, {"acc.s"})})),
             tile(),
             intrinsic::wgmma_wait(0, {"acc.o"}),
             guarded(has_previous, release_of(previous)),
             form_->has_reference ? rescale_columns() : Stmt(),
             p_fragments()};
    // The last tile's products, their wait and its slot's release (every slot is released once per use, as
    // without the delay).
    after_loop =
        guarded(simplify(count > 0), block({column_products_by_wgmma(slot_of(count - 1)),
                                            intrinsic::wgmma_wait(0, {"acc.o"}), release_of(count - 1)}));
    summary_ +=
        "  each key tile's column products are issued after the next tile's S and run during its update\n";
  } else if (!req_.schedule->overlaps_producer() && !ping_pong_turns) {
    // S for this tile; the refill runs while its wgmmas are in flight.
    steps = {wait_landed(r), scores_by_wgmma("acc.s", ring_slot_), refill, intrinsic::wgmma_wait(0), tile()};
  } else if (!req_.schedule->overlaps_producer()) {
    // Tile r's S is complete on entry (issued in the turn before); the tile's update takes the turn for its
    // P V, which the next tile's S follows into acc.s (P is in registers by then). Both are waited for
    // together: a wait for the P V alone would leave acc.s in flight where the CUDA source pins the
    // accumulators, and ptxas would serialize the wgmmas.
    before_loop.push_back(wait_landed(0));
    before_loop.push_back(in_turn(scores_by_wgmma("acc.s", simplify(slot_of(0))), const_false()));
    before_loop.push_back(intrinsic::wgmma_wait(0));
    steps = {tile(), guarded(has_next, block({wait_landed(r + 1), scores_by_wgmma("acc.s", slot_of(r + 1))})),
             pass_turn(!has_next), intrinsic::wgmma_wait(0)};
  } else {
    // Tile r's S was issued by the tile before (in flight on entry only for the first, issued before the
    // loop). The refill comes first: with two slots, it brings the next tile that is waited for right after.
    // The next tile's S goes into the other set of accumulators while this tile's update runs; waiting for
    // all but that group completes this tile's S, and the column products' wait completes the next. The two
    // sets take turns by the tile's parity (even tiles compute on acc.s, odd ones on acc.s.next), so no
    // register moves between them and no accumulator of a wgmma in flight is touched.
    check_overlap_registers();
    before_loop.push_back(wait_landed(0));
    before_loop.push_back(in_turn(scores_by_wgmma("acc.s", simplify(slot_of(0))), count == 1));
    const Stmt even =
        block({IfThenElse::make(has_next,
                                block({wait_landed(r + 1),
                                       in_turn(scores_by_wgmma("acc.s.next", slot_of(r + 1)), r + 2 == count),
                                       intrinsic::wgmma_wait(1, {"acc.s"})}),
                                intrinsic::wgmma_wait(0)),
               tile()});
    steps = {refill, IfThenElse::make(r % 2 == 0, even, swap_arrays(even, "acc.s", "acc.s.next"))};
    // Every tile's column products retire all its groups, so after the loop nothing is in flight; but the
    // first S is issued under `count > 0` and the loop tests its count again, and ptxas, which does not tie
    // the two, sees the first S reach the epilogue in flight when the loop is skipped, and injects a wait
    // there (C7517; with ping-pong in a divergent path, which serializes every wgmma: C7518). This wait is
    // that one, where no compiler needs to infer it.
    after_loop = intrinsic::wgmma_wait(0, {"acc.s"});
    summary_ +=
        "  the next key tile's S wgmmas overlap this tile's update (acc.s and acc.s.next by the tile's "
        "parity)\n";
  }
  const Stmt release = intrinsic::mbarrier_arrive(empty(ring_slot_));
  if (!delays_column_products())
    steps.push_back(specialization ? guarded(thread % hopper::kWarpgroupThreads == 0, release) : release);
  steps.erase(std::remove_if(steps.begin(), steps.end(), [](const Stmt &x) { return !x.defined(); }),
              steps.end());
  const Stmt body = LetStmt::make("ring.r", var(key_loop_) - first, block(steps));

  const Stmt init = guarded(
      thread == 0, block({intrinsic::mbarrier_init(q_full, 1),
                          persistent() ? intrinsic::mbarrier_init(q_empty, consumer_warpgroups) : Stmt(),
                          each_slot([&](const Halide::Expr &slot) {
                            return block({intrinsic::mbarrier_init(full(slot), 1),
                                          intrinsic::mbarrier_init(empty(slot), releases)});
                          })}));
  const Stmt load_q =
      block({intrinsic::mbarrier_arrive(q_full, q_bytes), q->tma_copies(Halide::Expr(), 0, q_full)});
  // A persistent block's tiles wait for Q's phases in turn.
  const Halide::Expr tile_step = var("tile.step");
  std::vector<Stmt> compute = {states, intrinsic::mbarrier_wait(q_full, persistent() ? tile_step % 2 : 0)};
  if (!before_loop.empty()) compute.push_back(guarded(simplify(count > 0), block(before_loop)));
  compute.push_back(For::make(key_loop_, first, count, ForType::Serial, Halide::DeviceAPI::None, body));
  if (after_loop.defined()) compute.push_back(after_loop);
  // Every S of the tile has completed by now (each order waits for its last before the loop ends, or after
  // it): Q is released before the epilogue, so that the next tile's lands while it runs, and the ring runs
  // on from the tile's last iteration.
  const Stmt next_ring_base = store("ring.base", ring_base() + count, 0);
  if (persistent())
    compute.insert(compute.end(),
                   {guarded(thread % hopper::kWarpgroupThreads == 0, intrinsic::mbarrier_arrive(q_empty)),
                    next_ring_base});
  if (ping_pong_turns)
    summary_ += fmt::format(
        "  ping-pong: consumer warpgroup w takes its turn on named barrier {} + w {}\n",
        named_barriers::kFirstTurn,
        req_.schedule->overlaps_producer() ? "to issue each S, once the S's tile has landed"
        : delays_column_products()
            ? "to issue each tile's S and the previous tile's column products, once the tile has landed, and "
              "passes it on before waiting for the S"
            : "to issue its column products and the next S, and passes it on before waiting for them");
  compute.push_back(finish);
  summary_ += fmt::format(
      "  Q by TMA once ({} B); TMA ring of {} slots ({} B a key tile) with full and empty mbarriers, over "
      "'{}'\n",
      q_bytes, depth, tile_bytes, key_loop_);
  std::vector<Stmt> s = {init, intrinsic::barrier()};
  if (!specialization) {
    // Thread 0 loads Q and fills the ring before the loop.
    s.push_back(guarded(issuer, block({load_q, each_slot([&](const Halide::Expr &slot) {
                                         return guarded(simplify(slot < count), issue(first + slot, slot));
                                       })})));
    s.insert(s.end(), compute.begin(), compute.end());
  } else {
    check_warp_specialization();
    // The producer's elected thread loads Q, then issues every key tile into a slot its consumers have
    // released: use u = i / depth >= 1 of slot i % depth (i the ring's iteration) waits for the release of
    // use u - 1, the phase of parity (u - 1) % 2.
    auto issue_keys = [&](const Halide::Expr &start, const Halide::Expr &extent) {
      return For::make(
          key_loop_, start, extent, ForType::Serial, Halide::DeviceAPI::None,
          LetStmt::make(
              "ring.r", var(key_loop_) - first,
              block({guarded(iteration(r) >= depth,
                             intrinsic::mbarrier_wait(empty(slot_of(r)), (iteration(r) / depth + 1) % 2)),
                     issue(var(key_loop_), slot_of(r))})));
    };
    Stmt producer_tile = block({load_q, issue_keys(first, count)});
    if (persistent()) {
      // The tile's first key tiles go into the slots the tile before releases as it ends (they wait for
      // nothing else); then Q once the consumers have released the tile before's (phase step - 1 of its
      // empty barrier), then the rest, which need the consumers to compute on this tile's Q.
      const Halide::Expr ahead = simplify(Halide::min(count, depth));
      producer_tile =
          block({issue_keys(first, ahead),
                 guarded(tile_step >= 1, intrinsic::mbarrier_wait(q_empty, (tile_step - 1) % 2)), load_q,
                 issue_keys(simplify(first + ahead), simplify(count - ahead)), next_ring_base});
    }
    const Stmt producer = block({intrinsic::setmaxnreg(specialization->producer_registers, false),
                                 guarded(issuer, over_block_tiles(producer_tile))});
    const Stmt consumers = block(
        {intrinsic::setmaxnreg(specialization->consumer_registers, true), over_block_tiles(block(compute))});
    s.push_back(IfThenElse::make(thread >= consumer_threads_, producer, consumers));
    summary_ += fmt::format(
        "  warp specialized, {} threads a block: warpgroup {} issues the TMA copies ({} registers a thread), "
        "warpgroups 0 to {} compute ({} registers a thread)\n",
        mapping_.threads, consumer_warpgroups, specialization->producer_registers, consumer_warpgroups - 1,
        specialization->consumer_registers);
  }
  Stmt loop = block(s);
  if (persistent()) {
    loop = Allocate::make("tma.q.empty", Halide::UInt(64), Halide::MemoryType::GPUShared, {1}, const_true(),
                          loop);
    loop =
        Allocate::make("ring.base", Halide::Int(32), Halide::MemoryType::Register, {1}, const_true(), loop);
  }
  loop = Allocate::make("tma.q", Halide::UInt(64), Halide::MemoryType::GPUShared, {1}, const_true(), loop);
  for (const char *name : {"tma.empty", "tma.full"})
    loop = Allocate::make(name, Halide::UInt(64), Halide::MemoryType::GPUShared, {depth}, const_true(), loop);
  return loop;
}

}  // namespace twist::chained
