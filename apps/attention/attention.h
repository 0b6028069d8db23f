#pragma once
// Attention as a twist program: the scores are a contraction over the head dimension, and the output a
// reduction over the keys with the online-softmax attention monoid, lifted from the scores and the values:
//   S(b, h, i, j) = sum over d of Q(b, h, i, d) * K(b, h / group, j, d)
//   O(b, h, i, d) = finalize(reduce(attention, over j, {s(S(b, h, i, j), i, j), V(b, h / group, j, d)}))
// s is the score in base-2 units (qk_scale = log2(e) / sqrt(D) folds the softmax scale and the change of base
// into one multiply), optionally soft-capped or biased; masks are predicates on the key domain.
#include <optional>
#include <string>

#include "lang/twist.h"
#include "scheduler/schedule.h"

namespace twist::apps {

// The attention monoid in base 2: (m, l, o) with l = sum 2^(s - m), o = sum 2^(s - m) v; a twist of
// (max, +, +) by psi(m, l, o; r) = (m, l 2^(m - r), o 2^(m - r)) with r = max(a.m, b.m). Defined here with
// TwistBuilder, as a user would: the algebra proves it by construction and derives its relative form.
Monoid attention_base2(const Type &t);

struct AttentionOptions {
  Type dtype = f16;
  int head_dim = 128;
  int group = 1;        // query heads per key/value head (grouped-query attention)
  bool causal = false;  // keys j <= i + (keys - queries), aligned at the bottom right as FlashAttention does
  std::optional<float> softcap{};  // s = c tanh(s / c), in the score's own units (Gemma 2)
  bool alibi = false;              // s += slope(h) * (j - i), slopes an input of H values
  std::optional<int> window{};     // keys within `window` of the diagonal: j > i + (keys - queries) - window
  bool decode = false;             // one query per head (the number of queries is the constant 1)
  std::string prefix = "";
};

struct Attention {
  AttentionOptions options;
  SizeParam batch, heads, queries, keys;  // `queries` is unused when decoding
  Expr query_count;                       // `queries`, or 1 when decoding
  Input Q, K, V;
  std::optional<Input> slopes;
  Param<float> qk_scale;
  RDom d, j;
  Func S, O, out;
};

Attention make_attention(const AttentionOptions &options = {});

struct AttentionTiling {
  // mma_m16n8k16: the FlashAttention-2 datapath (cp.async, ldmatrix, mma.sync; sm_80 and up). wgmma: the
  // Hopper datapath (sm_90a): Q, K and V by TMA, S = Q K^T and P V as wgmma atoms, a warpgroup per
  // `warp_rows` queries.
  MatrixAtom atom = MatrixAtom::mma_m16n8k16;
  int block_rows = 128;  // queries per block
  int warp_rows = 16;  // queries per warp (mma: 16 or a multiple) or per warpgroup (wgmma: a multiple of 64)
  int key_tile = 64;   // keys per iteration of the key loop
  // The output's columns (the head dimension) split across this many consumers over the same rows: warpgroups
  // (wgmma) or warps (mma, decode). Each computes S for its rows itself and keeps only its share of the P V
  // accumulators, so that a wide head fits the register budget (D = 512: 256 accumulators a thread, and an N
  // above the wgmma's 256); each K and V tile is still loaded once for the block.
  int column_parts = 1;
  int stages = 2;    // K and V pipeline depth
  int split_kv = 1;  // > 1: the key loop split across blocks (flash-decoding), combined by the monoid
  // in a second kernel, or by the last block of each tile to finish (SplitCombine::last_block)
  SplitCombine split_combine = SplitCombine::kernel;
  int min_blocks_per_sm = 1;  // blocks the compiler must fit on one SM (it caps registers accordingly)
  // wgmma: the next key tile's S = Q K^T in flight during this tile's softmax
  // (FuncSchedule::overlap_producer)
  bool overlap_scores = false;
  // wgmma: each key tile's P V issued after the next tile's S, in flight during that tile's softmax
  // (FuncSchedule::delay_column_products; FlashAttention-3's order); exclusive with overlap_scores
  bool delay_products = false;
  // wgmma: a producer warpgroup issues every TMA copy at `producer_registers` a thread
  // (FuncSchedule::warp_specialize), and the consumer warpgroups take the registers it leaves
  // (consumer_registers).
  bool warp_specialized = false;
  // wgmma, warp_specialized: the consumer warpgroups take turns on the tensor cores, one's softmax while the
  // other's matrix products run (WarpSpecialization::ping_pong); needs two or more warpgroups a block.
  bool ping_pong = false;
  int producer_registers = 24;
  // The order of the blocks: query tiles last first (FuncSchedule::reverse), in groups of `head_group` rows
  // of blocks along batch x heads (FuncSchedule::raster: a group's blocks take each query tile in turn).
  // Under a causal mask a block's keys grow with its query tile: the longest blocks start first and the
  // shortest fill the last wave, while a group's K and V stay in L2.
  bool longest_first = false;
  int head_group = 1;
  // wgmma, warp_specialized: a persistent grid of at most this many blocks (FuncSchedule::persistent; 0 for
  // a block per tile), each taking the output tiles b, b + blocks, ... in the block order above, its producer
  // loading the next tile's Q and key tiles during this tile's last updates and epilogue; resident_blocks()
  // to fill the machine.
  int persistent_blocks = 0;
  static constexpr int kSms = 132;  // the H200's
  int resident_blocks() const { return kSms * min_blocks_per_sm; }
  int consumer_registers() const;
  std::string name() const;
};

// The FlashAttention-style schedule: blocks over (batch x heads, query tiles), a warp per `warp_rows`
// queries, Q staged once (and kept in registers when a warp has one atom of 16 rows), K and V staged per key
// tile with cp.async, S computed at the key loop. With the wgmma atom: a warpgroup per `warp_rows` queries,
// Q, K and V staged by TMA (K and V in a ring of `stages` slots), the atoms 64 queries x all of D (P V) and
// 64 queries x the key tile (S); with grouped-query heads, the block's warpgroups take query heads of one
// group over the same queries (as many as divide both), so that each K and V tile feeds all of them.
Schedule schedule_attention(const Attention &a, const AttentionTiling &t);

// The Hopper tiling of a prefill problem by rule, on sm_90a (227 KB of shared memory, 65536 registers and
// 132 SMs), from the head dimension, the mask and the lengths; never from a table of problems. Measured on
// the H200 (bench/RESULTS.md, "Attention on the Hopper datapath"):
//   - rows: two warpgroups of 64 queries per block (each K and V tile feeds 128 rows; one warpgroup of 64
//     rows per block ran 20-25% slower at every size), or one when the problem has fewer blocks of 128 rows
//     than SMs (short sequences, few heads), so that every SM gets work;
//   - D <= 64: 64-key tiles and two blocks per SM (106 registers, 49 KB): the blocks hide each other's
//     softmax, 1.12-1.26x the one-block 128-key tiling;
//   - D = 128: 128-key tiles, one block per SM (208 registers, 251 causal; 160 KB). Two blocks of 64-key
//     tiles ran 3-5% faster but spill at the 128-register cap (local memory in the SASS);
//   - D = 256: 64-key tiles (Q 64 KB and a ring of 128 KB; the P V accumulators take 128 registers), 1.29x
//     32-key tiles;
//   - D > 256 (Gemma 4's full layers, D = 512): the output's columns over D / 256 consumer warpgroups of one
//     atom of 64 rows (column_parts; each computes S for the rows and holds 128 accumulators a thread, as at
//     D = 256; a wgmma's N is at most 256) and 32-key tiles: Q (64 KB) and two slots of K and V (64 KB each)
//     in 192 KB. Measured at B1 H32 GQA 8 bf16 causal: 229.6 TFLOP/s at S2048, 286.1 at S8192 (181
//     registers, no spill), where the mma.sync tiling took 2.97 and 39.9 ms (about 5x slower). S is computed
//     once per column warpgroup, so the tensor cores do 1.5x the useful products at D = 512;
//   - never a key tile above the keys rounded up to 16; 2 slots (a third measured within 2% at D = 128)
//     except with the overlapped S (below);
//   - causal masks change no tile size: the block skips the key tiles after its last row's diagonal and masks
//     only the tiles that cross it;
//   - causal masks order the blocks longest first (longest_first): the query tiles last first, in groups of
//     head_group rows of blocks, the fewest that divide the rows and hold two waves of resident blocks
//     (fewer, a short last group ends the grid with its long blocks; a greedy model of the block launch
//     puts the last wave at 0.86-0.93 of the average by the launch order and 0.98-1.0 this way), while the
//     group's K and V fit half the L2 (so that the query tiles of a group read them from L2);
//   - warp-specialized (a producer warpgroup at 24 registers; WarpSpecialization) where runs measured it
//     ahead, with two warpgroups of 64 rows: at D <= 64, 2.8-2.9% faster in three runs (B1 H8 S4096: 401.4
//     against 390.3 TFLOP/s, 399.3 against 388.2, 405.0 against 393.5 in "The ping-pong race settled");
//     at D = 128 where a block visits 27 x 128 keys or more on average (the keys, less half the queries
//     under a causal mask), with the next tile's S overlapped with this tile's softmax inside
//     each warpgroup (FuncSchedule::overlap_producer) on 112-key tiles (two sets of 128-key S spill) and a
//     ring of 3 slots: the overlap needs tile r + 1 when tile r starts, and with 2 slots its slot has only
//     just been released then, so every tile waited for a whole copy (0.64-0.78x before the third slot).
//     Measured with 3 slots (bench/results/attention_overlap2.json): 513.2 against 494.4 TFLOP/s for
//     ping-pong at B4 H16 S4096, 540.1 against 530.3 at B2 H16 S8192. The overlapped block starts later
//     and then runs each tile faster: in one run (2026-12-04 14:55, both longest first under the causal
//     mask), overlapped against plain 501.5 / 496.4 at B4 H16 S4096 (32 key tiles of 128 a block), 530.1
//     / 509.9 at B2 H16 S8192 (64), causal 531.3 / 511.4 at B1 H16 S16384 (64.5 on average), but 424.6 /
//     440.4 causal at B4 H16 S4096 (16.5); a block start and a cost per tile fitted to the four put the
//     crossing at 27 tiles. Not at D <= 64 (380.5 against 397.4 for two
//     blocks per SM of 64-key tiles, which the second S does not fit) nor at D = 256 (507.3 on 48-key tiles
//     against 545.3: 3 slots of 64-key tiles do not fit beside Q); ping-pong with the overlap is behind the
//     overlap alone at every problem measured;
//   - not the delayed column products in ping-pong (FlashAttention-3's full order; 128-key tiles on 3 slots
//     at D = 128, the best of its tilings): in one run (bench/RESULTS.md, "Ping-pong with the delayed column
//     products") within 2.2% of the rule's kernel without a causal mask (494.9 against 506.1 TFLOP/s at B4
//     H16 S4096, 533.7 against 539.0 at B2 H16 S8192, 523.3 against 521.6 in bf16) and on both sides of it
//     with one (517.1 against 494.5 at B1 H16 S16384, 452.1 against 442.4 at B4 H16 S4096 bf16, 405.0
//     against 432.2 in f16): no steadier than the run's spread; at D = 64 (one block per SM: 128-key tiles
//     do not fit two blocks' 104 registers) 0.60x the rule's, at D = 256 0.87x;
//   - not a persistent grid (persistent_blocks; bench/RESULTS.md, "A persistent grid for the chained
//     kernel"): in one run, the overlapped D = 128 kernel in a loop over tiles is serialized by ptxas (C7514,
//     every HGMMA waited for) and ran 0.73-0.89x; without the overlap it compiles like the one-block-a-tile
//     kernel and ran level with it without a causal mask (0.995 at B4 H16 S4096, 0.966 at B2 H16 S8192, 1.028
//     in bf16), at D = 64 (1.005, 0.997) and D = 256 (1.006), and 0.81-0.86x with one, whose blocks' fixed
//     tiles b, b + blocks, ... differ in their key counts where the hardware gives each freed SM the next
//     block.
struct AttentionProblemShape {
  int head_dim = 128;
  bool causal = false;
  int64_t batch_heads = 1;  // batch x query heads
  int64_t queries = 1, keys = 1;
  int group = 1;  // query heads per key/value head
  int element_bytes = 2;
};
AttentionTiling hopper_attention_tiling(const AttentionProblemShape &p);
// The rule's block order for tiling `t` of problem `p` (the rule's own under a causal mask): longest_first,
// head_group the fewest rows of blocks that divide the rows and hold two waves of the blocks an SM keeps
// (min_blocks_per_sm), or the most whose K and V fit half the L2.
void order_longest_first(AttentionTiling &t, const AttentionProblemShape &p);

// Decoding (one query per head): the `group` query heads that share a key/value head are packed into the rows
// of one block's atoms, and the key loop is split across blocks.
Schedule schedule_decode(const Attention &a, const AttentionTiling &t);

// The decode tiling by rule, on sm_90a (132 SMs, 228 KB of shared memory per SM), from the head dimension,
// the group and the lengths; never from a table of problems. Decoding reads K and V once and does 2 flops per
// byte: its time is bytes / bandwidth if the SMs keep enough bytes in flight, and one warp per block (16
// rows, one mma atom) spends little time computing. So:
//   - key tiles of 16 KB of K and V (32 keys at D = 128, 64 at D = 64, 16 at D = 256 and 512), never above
//     the keys rounded up to 16;
//   - a warp's accumulators hold at most 256 of the output's columns (128 registers a thread): wider heads
//     split their columns across D / 256 warps (column_parts), each computing S for the block's rows from Q
//     in shared memory, K and V staged once for them. Measured at D = 512, GQA 8, bf16 (B1 H32): 0.68 TB/s
//     at L4096 and 2.44 TB/s at L32768 (236 registers, no spill; no SDPA backend runs these problems);
//   - 4 blocks per SM or 2, each with the deepest cp.async ring that fits its share of the shared memory (3
//     slots at D = 128 on 4 blocks, 7 on 2): 128-192 KB in flight per SM, where Little's law at 33 GB/s per
//     SM (4.35 TB/s over 132 SMs) and 2-3 us of loaded latency asks for 66-100 KB; and a warp on each of the
//     SM's four schedulers: on 2 blocks, each splits its columns over 2 warps (while a warp keeps 32 columns
//     or more), which measured 0-12% faster than one warp a block (12% at B1 H8 L32768, where a block uses
//     one row of its atom);
//   - the blocks per SM and the parts of the keys that minimize, in tile times of one SM, waves x (blocks per
//     SM x tiles per part + 2) + 4 x the combine's rounds: the blocks an SM runs at once share its bandwidth
//     and overlap their fills (the 2: the ring's fill and the block's epilogue), and the combine kernel's
//     threads wait for memory once per round of its 16 chains (scheduler/split_combine.h). So one full wave
//     when there are few (batch, key/value head) pairs, no split (and no combine kernel) when they fill the
//     machine alone, and 2 blocks per SM where that halves the parts at the same wave (64 parts on 4 blocks
//     pay 2 rounds more than 32 on 2).
//   - the parts combined by a second kernel (SplitCombine::kernel), not by each tile's last block in the
//     parts kernel (SplitCombine::last_block): measured on the 8 problems (bench/RESULTS.md, "The split's
//     combine in the parts kernel's last block"), the last block is 0.96-0.99x the second kernel at 2-33
//     parts without grouped-query heads and 0.41-0.63x with them (one warp folds a tile of 4-8 rows x D
//     points, parts / 16 memory waits a point), so removing the second launch gains nothing.
// Measured on the H200 (bench/RESULTS.md, "Decode by rule"): on 4 blocks per SM, within 2% of the best of
// the earlier per-problem sweep (2 slots, 6 or 12 blocks per SM, 62-88 KB in flight) on 8 problems,
// 0.86-1.00x cuDNN: the ring was not what decoding lacked; the time fits 20 us + bytes / 4.5 TB/s for cuDNN
// and for these kernels at few parts alike, and these kernels paid 4-13 us more at 32-66 parts. Half the
// parts on 2 blocks per SM ("Decode: half the parts on two blocks per SM", 2026-12-04) gained 1.7-9% at 32-66
// parts (and 13-36% on D 512's 64-98 parts), level or slightly behind (1-2%) where the parts were already
// few, which the rounds term keeps on 4 blocks.
struct DecodeProblemShape {
  int head_dim = 128;
  int group = 1;               // query heads per key/value head, packed into a block's 16 rows
  int64_t batch_kv_heads = 1;  // batch x key/value heads
  int64_t keys = 1;
  int element_bytes = 2;  // f16, bf16
};
AttentionTiling decode_tiling(const DecodeProblemShape &p);
// The shared memory one block of schedule_decode stages, in bytes: the group's query rows once and the ring
// of K and V tiles.
int64_t decode_shared_bytes(const DecodeProblemShape &p, const AttentionTiling &t);

}  // namespace twist::apps
