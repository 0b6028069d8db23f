#pragma once
// The builder of the chained kernel (chained_kernel.h), shared by the files that hold its parts: the tile's
// softmax-like update from the monoid's relative form, common to both datapaths (chained_kernel.cpp), and the
// Hopper datapath, TMA ring and wgmma atoms (chained_hopper.cpp). Internal to the scheduler.
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "algebra/relative_form.h"
#include "scheduler/chained_kernel.h"
#include "scheduler/contraction.h"
#include "scheduler/expr_lowering.h"
#include "scheduler/fragments.h"
#include "scheduler/intrinsics.h"
#include "scheduler/loops.h"
#include "scheduler/staging.h"
#include "scheduler/stmt_building.h"
#include "scheduler/stream_k.h"
#include "scheduler/thread_mapping.h"

namespace twist::chained {

using algebra::RelativeForm;
using Halide::Internal::Stmt;
using stmt::unrolled;
using stmt::var;

class ChainedKernelBuilder {
 public:
  explicit ChainedKernelBuilder(const ChainedKernelRequest &r)
      : req_(r.consumer),
        chain_(r),
        def_(r.consumer.reduction.definition()),
        monoid_(*def_.reduction->monoid),
        lowering_(*r.consumer.graph) {
    read_intermediates(lowering_, r.consumer.intermediates);
  }

  Kernel build();

 private:
  void plan_loops();
  void plan_producer();
  void plan_components();
  void plan_element_scales();
  // Element k of the consumer's reduction with the producer's value (S) replaced by `score` and the loops
  // bound to `loop_values`.
  Halide::Expr element_value(int k, const Halide::Expr &score,
                             const std::map<std::string, Halide::Expr> &loop_values) const;
  void plan_stages();

  int extent_of(const std::string &loop, const char *why) const {
    return loops_.dim(loop).constant_extent(loops_.func, why);
  }
  // Flat register index over loops (name, extent), outermost first.
  static Halide::Expr flat(const std::vector<std::pair<std::string, int>> &loops) {
    Halide::Expr index = 0;
    for (const auto &[name, extent] : loops) index = index * extent + var(name);
    return simplify(index);
  }
  Stmt over(const std::vector<std::pair<std::string, int>> &loops, Stmt body) const {
    for (auto it = loops.rbegin(); it != loops.rend(); ++it) body = unrolled(it->first, it->second, body);
    return body;
  }
  // The row slot of accumulator element e (rows g and g + 8 of each atom of rows).
  Halide::Expr row_slot(const Halide::Expr &e) const { return flat(row_loops_) * 2 + e / 2; }
  int row_slots() const {
    int n = 2;
    for (const auto &[name, e] : row_loops_) n *= e;
    return n;
  }
  // Lets that place the current S point (row loops, S.jn, S.e) in the consumer's loops.
  std::map<std::string, Halide::Expr> s_point(const Halide::Expr &jn, const Halide::Expr &e) const;
  Halide::Expr s_index(const Halide::Expr &jn, const Halide::Expr &e) const {
    return (flat(row_loops_) * jn_extent_ + jn) * 4 + e;
  }
  Halide::Expr o_index(const Halide::Expr &e) const {
    return (flat(row_loops_) * col_points_ + flat(col_loops_)) * 4 + e;
  }
  // Whether the S point is in the reduction domain: its mask, or true on tiles that need none.
  Halide::Expr valid_at(const Halide::Expr &jn, const Halide::Expr &e) const;
  Halide::Expr guards_at(const Halide::Expr &jn, const Halide::Expr &e) const;
  Halide::Expr tile_is_full() const;
  // Whether Q's fragments are read from shared memory at every k-step instead of kept in registers for the
  // whole key loop: with several atoms of rows per warp (each K and V fragment then feeds all of them, as in
  // FlashAttention-2), keeping every atom's Q fragments would take the registers the accumulators need; and
  // so would one atom's over a reduction deeper than 256 (4 registers a k-step: more than 64 a thread).
  bool q_per_step() const { return row_slots() > 2 || dk_extent_ > kQStepsInRegisters; }
  static constexpr int kQStepsInRegisters = 16;
  // The Q fragments' loops: the row atoms, and the k-steps when they are all kept.
  std::vector<std::pair<std::string, int>> q_loops() const {
    std::vector<std::pair<std::string, int>> loops = row_loops_;
    if (!q_per_step()) loops.push_back({"S.dk", dk_extent_});
    return loops;
  }
  const StagePlan &q_stage() const;
  FragmentLoad q_fragments() const {
    return {AtomOperand::a, q_coords_, "S.dka", atom_row_, "S.ja", q_loops(), "frag.q", &q_stage(), 0};
  }
  // Whether the tiles may take their elements to be finite (see assume_finite_elements).
  bool finite_elements() const { return req_.schedule->approximate(); }
  // The base state's variables bound to the row arrays at `slot` and, for the column component, `column`.
  std::map<std::string, Halide::Expr> base_at(const Halide::Expr &slot, const Halide::Expr &column) const;
  // Whether the rows keep a reference array: not when the reference is one of their selectors.
  bool keeps_reference() const { return form_->has_reference && form_->reference_selector < 0; }
  // The reference of the row at `slot` (row.ref, or the selector it equals).
  Halide::Expr reference_at(const Halide::Expr &slot) const;
  // The elements at S point (jn, e); unscaled: as stored, without their element_scales_.
  std::map<std::string, Halide::Expr> elements_at(const Halide::Expr &jn, const Halide::Expr &e,
                                                  bool unscaled = false) const;

  Stmt scores();
  // S's products into acc.s: mma.m16n8k16 atoms on ldmatrix fragments, or wgmmas on the staged tiles.
  Stmt scores_by_mma();
  Stmt scores_by_wgmma(const std::string &accumulator, const Halide::Expr &slot);
  // The registers a consumer thread keeps live across the tile's update: S's accumulators (twice with
  // FuncSchedule::overlap_producer), the column accumulators, P and the rows' states. A floor: the compiler
  // needs more (addresses, the elements being computed), never less.
  int live_registers() const;
  // The registers a thread of the block may have: the launch's share of the SM at min_blocks_per_sm, or the
  // consumers' setmaxnreg budget when the kernel is warp-specialized.
  int consumer_register_budget() const;
  // Refuses FuncSchedule::overlap_producer where the second set of S accumulators does not fit.
  void check_overlap_registers() const;
  // Refuses warp_specialize() budgets that the SM's register file, the launch or the consumers' live
  // registers rule out.
  void check_warp_specialization() const;
  // The column component's products P x V into acc.o, P the frag.p registers.
  Stmt column_products_by_mma();
  // On wgmma atoms, reading V from ring slot `slot`; committed, and waited for here unless the key loop
  // waits for them (ping-pong turns, FuncSchedule::delay_column_products).
  Stmt column_products_by_wgmma(const Halide::Expr &slot);
  // FuncSchedule::delay_column_products on the wgmma datapath.
  bool delays_column_products() const { return hopper_ && req_.schedule->delays_column_products(); }
  Stmt tile_selectors();
  Stmt move_reference();
  // acc.o *= rescale, the column component's rebase by its row factor.
  Stmt rescale_columns() const;
  Stmt contributions();
  // frag.p from the tile's weights, in the column atom's A layout.
  Stmt p_fragments() const;
  Stmt quad_reduce(const std::string &array, int count, RelativeForm::BaseOp op, const Type &t) const;
  Stmt epilogue();
  // The first key tile and the number of tiles a block visits.
  std::pair<Halide::Expr, Halide::Expr> key_tiles();

  // ---- The Hopper datapath (chained_hopper.cpp): the consumer's atom is MatrixAtom::wgmma ----
  // Checks the wgmma atom and the stages it needs; the column atom's N is the extent of its column loop.
  void plan_hopper();
  // The row and column, within the atom, of accumulator element e of the calling thread: rows g and g + 8
  // of its warp's 16 (of the 64 of a wgmma), columns 2q, 2q + 1 of 8 (of column group `group` of a wgmma).
  Halide::Expr atom_row_at(const Halide::Expr &e) const;
  Halide::Expr atom_col_at(const Halide::Expr &e) const;
  // The key loop over [first, first + count) on the TMA ring: Q once, K and V tiles in `depth` slots with
  // full and empty mbarriers, `tile()` building the tile's update after S (once ring_slot_ is set); S is
  // issued here, for this tile or, with FuncSchedule::overlap_producer, for the next. `states` (the rows'
  // initial states) runs before the loop and `finish` after it, on the threads that compute: with
  // warp_specialize(), a producer warpgroup issues every copy and the others compute; with persistent(), both
  // for each of the block's tiles, the first key tiles of the next issued while the consumers finish this
  // one.
  Stmt tma_key_loop(const Halide::Expr &first, const Halide::Expr &count, const std::function<Stmt()> &tile,
                    const Stmt &states, const Stmt &finish);
  bool specialized() const { return consumer_threads_ < mapping_.threads; }
  // FuncSchedule::persistent: block b takes the output tiles b, b + blocks, ... (make_grid_persistent), its
  // producer loading each tile's Q and key tiles while the consumers finish the tile before. The ring's
  // iterations run on from tile to tile: ring_base() counts those of the block's earlier tiles, in a register
  // of each thread, as a causal mask gives the tiles different key counts.
  void plan_persistent();
  bool persistent() const { return persistent_.has_value(); }
  Halide::Expr ring_base() const;
  // `per_tile` for each of the block's tiles under the block loops' values at the tile (tile.step its place
  // among them), after ring_base() starts at 0.
  Stmt over_block_tiles(const Stmt &per_tile) const;
  std::optional<PersistentTiles> persistent_;
  // WarpSpecialization::ping_pong: the consumer warpgroups take turns on the tensor cores. A warpgroup
  // takes its turn with bar.sync on its own barrier (named_barriers::kFirstTurn + w) and passes it to the
  // next warpgroup with bar.arrive on that one's; each barrier counts the warpgroup that waits and the one
  // that passes. The last warpgroup keeps its last turn (`last_turn`), which nobody would take (where the
  // turns go: tma_key_loop).
  bool ping_pong() const;
  Stmt take_turn() const;
  Stmt pass_turn(const Halide::Expr &last_turn) const;
  Halide::Expr is_last_consumer_warpgroup() const;
  // The descriptor of the atom tile of staged operand `input`, read at `coords` (in loop terms) where
  // `k_loop` is the atom's k and `atom_loops` (set to 0) are the atom's loops, in slot `slot`.
  intrinsic::WgmmaOperand staged_operand(const std::string &input, const std::vector<Halide::Expr> &coords,
                                         const std::string &k_loop,
                                         const std::vector<std::string> &atom_loops,
                                         const Halide::Expr &slot) const;
  const StagePlan &stage_of(const std::string &input) const;
  bool hopper_ = false;
  // In the ring's key loop: the tile's slot.
  Halide::Expr ring_slot_;
  static constexpr const char *kColumnGroup = "O.dn";  // 8-column groups of a wgmma's accumulators

  const ReductionKernelRequest &req_;
  const ChainedKernelRequest &chain_;
  const Definition &def_;
  const Monoid &monoid_;
  ExprLowering lowering_;
  LoopStructure loops_;
  ThreadMapping mapping_;
  int consumer_threads_ = 0;  // the threads the loops are bound to (a producer warpgroup's come after)
  std::optional<RelativeForm> form_;
  std::vector<StagePlan> stages_;
  std::vector<StagePlan> write_backs_;  // the outputs' tiles, written back through shared memory
  std::string summary_;

  // The consumer's atom over (rows, columns, keys) and the loops around it.
  std::string atom_row_, atom_col_, atom_key_;
  std::string key_loop_;                                // jo: one key tile per iteration
  std::string key_step_;                                // the consumer's k-steps inside a tile ("" if one)
  int key_steps_ = 1;                                   // atoms of 16 keys per tile
  std::vector<std::pair<std::string, int>> row_loops_;  // register loops over atoms of rows
  std::vector<std::pair<std::string, int>> col_loops_;  // register loops over atoms of columns
  int col_points_ = 1;                                  // product of col_loops_ extents
  std::string column_arg_;                              // the consumer's column variable (d)
  std::string key_var_;                                 // the consumer's RVar (j)
  Halide::Expr key_base_;                               // the first key of the tile, in loop terms

  // The producer S: its contraction and its synthetic loops.
  std::optional<Contraction> contraction_;
  ContractionOperand rows_operand_, keys_operand_;  // A(i, k) and B(j, k), in S's terms
  std::vector<Halide::Expr> q_coords_, k_coords_;   // their coordinates in loop terms
  std::vector<Halide::Expr> s_call_args_;           // the consumer's call of S, in its own variables
  int jn_extent_ = 0, dk_extent_ = 0;
  Type s_type_;

  // The consumer's elements and components.
  std::vector<int> row_elements_;  // elements evaluated at S points
  // Row elements that are S times a parameter required positive: elem.<k> holds S itself, and the scale is
  // applied where the element is used, except by a selector that picks the element, which picks among the
  // unscaled values and scales its pick (x -> c*x keeps the order for c > 0, rounding included). The
  // scale then fuses into the subtraction of the reference (one FFMA per point instead of FMUL and FADD).
  std::map<int, Halide::Expr> element_scales_;
  int column_element_ = -1;  // the element read at (j, d): V(j, d)
  ContractionOperand column_operand_;
  std::vector<Halide::Expr> v_coords_;
  int column_component_ = -1;        // the base component that depends on d
  Halide::Expr column_row_factor_;   // its relative lift with the column element as 1
  std::vector<int> row_components_;  // the others
  bool masked_ = true;               // the tile being built checks its points' masks
};

}  // namespace twist::chained
