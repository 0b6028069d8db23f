#include "apps/attention/attention.h"

#include <algorithm>
#include <numeric>

#include "algebra/builtins.h"
#include "algebra/twist.h"
#include "scheduler/hopper_layouts.h"
#include "scheduler/split_combine.h"
#include "scheduler/target.h"

namespace twist::apps {

Monoid attention_base2(const Type &t) {
  const Expr none = neg_infinity(t);
  // 2^(m - r), and 0 for an empty state (m = -inf), whose l and o are 0 anyway: no 2^(-inf - -inf).
  auto weight = [&](const Expr &m, const Expr &r, bool inverse) {
    return select(m == none, cast(t, 0), exp2(inverse ? r - m : m - r));
  };
  return algebra::TwistBuilder(
             "attention_base2_" + type_name(t),
             algebra::product({algebra::max(t), algebra::sum(t), algebra::sum(t)}, {"m", "l", "o"}))
      .state({{"m", t}, {"l", t}, {"o", t}})
      .elements({{"s", t}, {"v", t}})
      .identity({none, cast(t, 0), cast(t, 0)})
      .lift([&](const State &x) {
        return std::vector<Expr>{x["s"], cast(t, 1), x["v"]};
      })
      .reference(t, [](const State &a, const State &b) { return max(a["m"], b["m"]); })
      .to_base([&](const State &s, const Expr &r) {
        const Expr w = weight(s["m"], r, false);
        return std::vector<Expr>{s["m"], s["l"] * w, s["o"] * w};
      })
      .from_base([&](const State &b, const Expr &r) {
        const Expr w = weight(b["m"], r, true);
        return std::vector<Expr>{b["m"], b["l"] * w, b["o"] * w};
      })
      .finalize({{"out", t}},
                [&](const State &s) {
                  return std::vector<Expr>{select(s["l"] == cast(t, 0), cast(t, 0), s["o"] / s["l"])};
                })
      .build();
}

Attention make_attention(const AttentionOptions &o) {
  const std::string &p = o.prefix;
  SizeParam batch(p + "B"), heads(p + "H"), queries(p + "S"), keys(p + "L");
  const Expr kv_heads = heads / o.group;
  const int D = o.head_dim;
  const Expr query_count = o.decode ? Expr(1) : Expr(queries);
  Attention a{o,
              batch,
              heads,
              queries,
              keys,
              query_count,
              Input(p + "Q", o.dtype, {batch, heads, query_count, D}),
              Input(p + "K", o.dtype, {batch, kv_heads, keys, D}),
              Input(p + "V", o.dtype, {batch, kv_heads, keys, D}),
              std::nullopt,
              Param<float>(p + "qk_scale"),
              RDom({{0, D}}, p + "d"),
              RDom({{0, keys}}, p + "j"),
              Func(p + "S"),
              Func(p + "O"),
              Func(p + "out")};
  Var b("b"), h("h"), i("i"), j("j"), d("d");
  const RVar dd = a.d.x, kv = a.j.x;
  a.S(b, h, i, j) =
      reduce(algebra::sum(f32), a.d, cast(f32, a.Q(b, h, i, dd)) * cast(f32, a.K(b, h / o.group, j, dd)));
  Expr s = a.S(b, h, i, kv) * a.qk_scale;
  if (o.softcap) s = *o.softcap * tanh(s / *o.softcap);
  if (o.alibi) {
    a.slopes.emplace(p + "slopes", f32, std::vector<Expr>{heads});
    s = s + (*a.slopes)(h)*cast(f32, kv - i);
  }
  RDom keys_seen = a.j;
  const Expr diagonal = i + (keys - query_count);
  if (o.causal) keys_seen = keys_seen.where(kv <= diagonal);
  if (o.window) keys_seen = keys_seen.where(kv > diagonal - *o.window);
  a.O(b, h, i, d) = reduce(attention_base2(f32), keys_seen, {s, cast(f32, a.V(b, h / o.group, kv, d))});
  a.out(b, h, i, d) = cast(o.dtype, a.O(b, h, i, d));
  a.out.set_shape({batch, heads, query_count, D});
  return a;
}

std::string AttentionTiling::name() const {
  std::string s = fmt::format("flash_{}x{}_s{}", block_rows, key_tile, stages);
  if (column_parts > 1) s += fmt::format("_dp{}", column_parts);
  if (split_kv > 1) s += fmt::format("_splitkv{}", split_kv);
  if (split_kv > 1 && split_combine == SplitCombine::last_block) s += "_lastblock";
  if (warp_rows != 16) s += fmt::format("_w{}", warp_rows);
  if (min_blocks_per_sm > 1) s += fmt::format("_b{}", min_blocks_per_sm);
  if (atom == MatrixAtom::wgmma) s += "_wgmma";
  if (overlap_scores) s += "_ovl";
  if (delay_products) s += "_dpv";
  if (warp_specialized) s += "_ws";
  if (ping_pong) s += "_pp";
  if (longest_first) s += fmt::format("_lf{}", head_group);
  if (persistent_blocks == resident_blocks()) s += "_pers";
  if (persistent_blocks > 0 && persistent_blocks != resident_blocks())
    s += fmt::format("_pers{}", persistent_blocks);
  return s;
}

int AttentionTiling::consumer_registers() const {
  // A block starts with its share of the SM's registers at min_blocks_per_sm (in steps of 8 a thread), and
  // setmaxnreg only moves them between its warpgroups: the consumers take what the producer gives back.
  const Target target = Target::sm90a();
  const int consumers = block_rows / warp_rows * column_parts * hopper::kWarpgroupThreads;
  const int threads = consumers + hopper::kWarpgroupThreads;
  const int at_launch =
      std::min(target.max_registers_per_thread, target.registers_per_sm / (threads * min_blocks_per_sm)) / 8 *
      8;
  const int left = (at_launch * threads - producer_registers * hopper::kWarpgroupThreads) / consumers;
  return std::min(left, target.max_registers_per_thread) / 8 * 8;
}

namespace {

void check_column_parts(const Attention &a, const AttentionTiling &t) {
  if (t.column_parts < 1 || a.options.head_dim % t.column_parts != 0)
    fail("attention tiling {}: AttentionTiling::column_parts ({}) must divide the head dimension ({})",
         t.name(), t.column_parts, a.options.head_dim);
}

// The output's columns: "d", or with AttentionTiling::column_parts its inner loop "dc", the outer one "dp"
// bound to `consumers` (warps or warpgroups).
std::string split_columns(Schedule &s, const Attention &a, const AttentionTiling &t, Binding consumers) {
  const int D = a.options.head_dim;
  if (t.column_parts == 1) return "d";
  s[a.O].split("d", "dp", "dc", D / t.column_parts).bind("dp", consumers);
  return "dc";
}

// Loops innermost first, with the column parts' loop "dp" after `after` where the tiling splits the columns.
std::vector<LoopVar> loop_order(const AttentionTiling &t, std::vector<LoopVar> order,
                                const std::string &after) {
  if (t.column_parts > 1) {
    const auto at =
        std::find_if(order.begin(), order.end(), [&](const LoopVar &v) { return v.name() == after; });
    order.insert(at + 1, "dp");
  }
  return order;
}

// What both schedules share: heads x batch on block.y, the head dimension in register atoms (over warps
// with column parts), the key loop in tiles of 16-key steps, the consumer's atom, and the producer computed
// at the key loop with its operands staged.
void schedule_common(Schedule &s, const Attention &a, const AttentionTiling &t) {
  check_column_parts(a, t);
  const std::string kv = a.j.x.name();
  const std::string column = split_columns(s, a, t, Binding::warp);
  FuncSchedule &o = s[a.O];
  o.split(column, "dn", "da", 8)
      .split(kv, "jo", "jj", t.key_tile)
      .split("jj", "jk", "jka", 16)
      .unroll("dn")
      .unroll("jk")
      .matrix_atom(MatrixAtom::mma_m16n8k16, "ia", "da", "jka")
      .stage(a.V, "jo", Transport::cp_async, t.stages)
      .approximate_math()
      .overlap_producer(t.overlap_scores)
      .delay_column_products(t.delay_products)
      .min_blocks_per_sm(t.min_blocks_per_sm);
  if (t.split_kv > 1) o.split_reduction("jo", t.split_kv, t.split_combine);
  s[a.S]
      .compute_at(a.O, "jo")
      .stage(a.Q, "", Transport::cp_async)
      .stage(a.K, "jo", Transport::cp_async, t.stages);
}

}  // namespace

namespace {

// Grouped-query heads share K and V: a block's warpgroups take this many query heads of one group over the
// same queries, so that each K and V tile is loaded once for all of them.
int packed_heads(int group, const AttentionTiling &t) {
  return std::gcd(group, t.block_rows / t.warp_rows);
}

// The Hopper datapath: a warpgroup per warp_rows queries in atoms of 64 rows, each wgmma spanning all of D
// (P V) or the key tile (S), every operand through TMA.
Schedule schedule_attention_wgmma(const Attention &a, const AttentionTiling &t) {
  if (t.warp_rows % 64 != 0 || t.block_rows % t.warp_rows != 0)
    fail(
        "attention tiling {}: a warpgroup's rows ({}) must be a multiple of 64 (the wgmma atom's rows) that "
        "divides the block's rows ({})",
        t.name(), t.warp_rows, t.block_rows);
  check_column_parts(a, t);
  const int columns = a.options.head_dim / t.column_parts;
  if (!hopper::is_wgmma_n(columns))
    fail(
        "attention tiling {}: a wgmma atom's N is 8 to 256 in steps of 8, and head dimension {} over {} "
        "column "
        "part(s) gives each {} columns; set AttentionTiling::column_parts to a divisor of the head dimension "
        "that leaves each at most 256 (D / 256 for D > 256)",
        t.name(), a.options.head_dim, t.column_parts,
        static_cast<double>(a.options.head_dim) / t.column_parts);
  const std::string kv = a.j.x.name();
  const int packed = packed_heads(a.options.group, t);
  Schedule s;
  if (packed > 1) {
    s[a.O]
        .split("h", "hk", "hg", a.options.group)
        .split("hg", "hgb", "hgw", packed)
        .fuse("hgb", "hk", "hkb")
        .fuse("hkb", "b", "bh")
        .bind("hgw", Binding::warpgroup);
  } else {
    s[a.O].fuse("h", "b", "bh");
  }
  s[a.O]
      .bind("bh", Binding::block_y)
      .split("i", "io", "ii", t.block_rows / packed)
      .bind("io", Binding::block_x)
      .split("ii", "iw", "ir", t.warp_rows)
      .bind("iw", Binding::warpgroup)
      .split("ir", "im", "ia", 64)
      .unroll("im")
      .split(kv, "jo", "jj", t.key_tile)
      .split("jj", "jk", "jka", 16)
      .unroll("jk");
  const std::string column = split_columns(s, a, t, Binding::warpgroup);
  s[a.O]
      .matrix_atom(MatrixAtom::wgmma, "ia", column, "jka")
      .stage(a.V, "jo", Transport::tma, t.stages)
      .approximate_math()
      .overlap_producer(t.overlap_scores)
      .delay_column_products(t.delay_products)
      .min_blocks_per_sm(t.min_blocks_per_sm)
      .reorder(loop_order(t, {"jka", column, "ia", "im", "jk", "jo", "iw", "io", "bh"}, "jo"));
  if (t.split_kv > 1) s[a.O].split_reduction("jo", t.split_kv, t.split_combine);
  if (t.ping_pong && !t.warp_specialized)
    fail(
        "attention tiling {}: ping-pong hands the consumer warpgroups turns between themselves, which a "
        "warp-specialized block has (a producer warpgroup issuing the copies); set warp_specialized too",
        t.name());
  if (t.warp_specialized) s[a.O].warp_specialize({t.producer_registers, t.consumer_registers(), t.ping_pong});
  if (t.longest_first) s[a.O].reverse("io").raster(t.head_group);
  if (t.persistent_blocks > 0) s[a.O].persistent(t.persistent_blocks);
  s[a.S].compute_at(a.O, "jo").stage(a.Q, "", Transport::tma).stage(a.K, "jo", Transport::tma, t.stages);
  return s;
}

}  // namespace

Schedule schedule_attention(const Attention &a, const AttentionTiling &t) {
  if (t.atom == MatrixAtom::wgmma) return schedule_attention_wgmma(a, t);
  if (t.warp_rows % 16 != 0 || t.block_rows % t.warp_rows != 0)
    fail(
        "attention tiling {}: a warp's rows ({}) must be a multiple of 16 (the atom's rows) that divides the "
        "block's rows ({})",
        t.name(), t.warp_rows, t.block_rows);
  Schedule s;
  s[a.O]
      .fuse("h", "b", "bh")
      .bind("bh", Binding::block_y)
      .split("i", "io", "ii", t.block_rows)
      .bind("io", Binding::block_x)
      .split("ii", "iw", "ir", t.warp_rows)
      .bind("iw", Binding::warp)
      .split("ir", "im", "ia", 16)
      .unroll("im");
  schedule_common(s, a, t);
  s[a.O].reorder(loop_order(t, {"jka", "da", "ia", "dn", "im", "jk", "jo", "iw", "io", "bh"}, "jo"));
  return s;
}

namespace {

// Heads wider than a wgmma's N of 256: the columns over D / 256 warpgroups of the block's one atom of 64 rows
// (each holds 128 accumulators a thread, as at D = 256), and key tiles of 32 so that Q (64 KB at D = 512) and
// two slots of K and V (64 KB each) fit the 227 KB of shared memory.
void wide_head_tiling(AttentionTiling &t, int head_dim) {
  t.column_parts = head_dim / 256;
  t.block_rows = 64;
  t.key_tile = std::min(t.key_tile, 32);
}

}  // namespace

namespace {

constexpr int kSms = AttentionTiling::kSms;  // which the rules fill
// H200: 50 MB of L2, half of it for the K and V of a group of block rows (the rest for Q, O and the other
// groups' blocks still running).
constexpr int64_t kAttentionL2Budget = 25ll << 20;
// The keys a block visits on average (under a causal mask, about the keys less half the queries) from which
// the overlapped S pays at D = 128: its block starts later (a producer warpgroup, a third slot to fill, a
// first S not overlapped) and then runs each tile faster. Fitted to one run's three causal and
// non-causal pairs (attention.h): about 27 key tiles of 128.
constexpr int64_t kOverlapMinMeanKeys = 27 * 128;

}  // namespace

void order_longest_first(AttentionTiling &t, const AttentionProblemShape &p) {
  const int64_t rows = p.batch_heads / packed_heads(p.group, t);
  const int64_t query_tiles = (p.queries + t.block_rows - 1) / t.block_rows;
  const int64_t wanted = (2 * int64_t(t.resident_blocks()) + query_tiles - 1) / query_tiles;
  const int64_t kv_bytes_per_row = p.keys * p.head_dim * 2 * p.element_bytes;
  t.longest_first = true;
  t.head_group = 1;
  for (int64_t g = 1; g <= rows; ++g) {
    if (rows % g != 0) continue;
    if (g > 1 && g * kv_bytes_per_row > kAttentionL2Budget) break;
    t.head_group = static_cast<int>(g);
    if (g >= wanted) break;
  }
}

AttentionTiling hopper_attention_tiling(const AttentionProblemShape &p) {
  AttentionTiling t;
  t.atom = MatrixAtom::wgmma;
  t.warp_rows = 64;
  t.block_rows = p.batch_heads * ((p.queries + 127) / 128) < kSms ? 64 : 128;
  t.key_tile = p.head_dim == 128 ? 128 : 64;
  t.key_tile =
      static_cast<int>(std::min<int64_t>(t.key_tile, std::max<int64_t>(16, (p.keys + 15) / 16 * 16)));
  t.stages = 2;
  if (p.head_dim <= 64) t.min_blocks_per_sm = 2;
  if (p.head_dim > 256) wide_head_tiling(t, p.head_dim);
  // A producer warpgroup where runs measured it ahead (with two warpgroups of 64 rows, as measured): D <= 64,
  // and D = 128 where a block visits kOverlapMinMeanKeys keys or more on average, with the next tile's S
  // overlapped with this tile's softmax, on 112-key tiles (two sets of 128-key S spill) and a ring of 3 slots
  // (the overlap needs tile r + 1 at the start of tile r, when 2 slots have only just released its slot)
  // (attention.h).
  const bool two_warpgroups = t.block_rows == 128;
  const int64_t mean_keys = p.causal ? std::max<int64_t>(p.keys - p.queries / 2, 1) : p.keys;
  t.warp_specialized =
      two_warpgroups && (p.head_dim <= 64 || (p.head_dim == 128 && mean_keys >= kOverlapMinMeanKeys));
  t.overlap_scores = t.warp_specialized && p.head_dim == 128;
  if (t.overlap_scores) {
    t.key_tile = std::min(t.key_tile, 112);
    t.stages = 3;
  }
  if (p.causal) order_longest_first(t, p);
  return t;
}

namespace {

// sm_90a's budgets the decode rule fills (the schedule's kernel is checked against them by lower()).
constexpr int64_t kSharedBytesPerSm = 228 * 1024;
constexpr int64_t kSharedBytesReservedPerBlock = 1024;  // kept by the CUDA runtime in each block
constexpr int kDecodeRows = 16;                         // one mma atom of rows per block
// Blocks per SM: four, or two with rings twice as deep (the same bytes in flight, half the parts to combine);
// either way a warp on each of the SM's four schedulers, two blocks splitting their columns over two warps
// each while a warp keeps at least kDecodeMinColumnsPerWarp of them.
constexpr int kDecodeBlocksPerSmChoices[] = {4, 2};
constexpr int kDecodeWarpsPerSm = 4;
constexpr int kDecodeMinColumnsPerWarp = 32;
constexpr int64_t kDecodeTileBytes = 16 * 1024;  // K and V of one key tile
constexpr int kDecodeMaxColumnsPerWarp = 256;    // output columns a warp's accumulators hold
constexpr int kDecodeFillTiles = 2;  // a block's ring fill and epilogue, in tile times (the split's cost)
// A round of the combine kernel's chains (kSplitCombineChains parts folded side by side), in tile times (a
// tile: 16 KB through one SM at its 33 GB/s share, 0.5 us): halving the parts at the same bytes in flight
// saved 1.2-3.8 us a round (bench/RESULTS.md, "Decode: half the parts on two blocks per SM").
constexpr int64_t kDecodeCombineRoundTiles = 4;

int64_t row_bytes(const DecodeProblemShape &p) {
  return int64_t(p.head_dim) * p.element_bytes;
}
// The query rows a block stages: its group's heads, as many as its atom holds.
int64_t query_rows(const DecodeProblemShape &p) {
  return std::min(p.group, kDecodeRows);
}

}  // namespace

int64_t decode_shared_bytes(const DecodeProblemShape &p, const AttentionTiling &t) {
  return query_rows(p) * row_bytes(p) + int64_t(t.stages) * 2 * t.key_tile * row_bytes(p);
}

AttentionTiling decode_tiling(const DecodeProblemShape &p) {
  AttentionTiling base;
  base.block_rows = kDecodeRows;  // what schedule_decode's blocks hold, so that the tiling's name says it
  base.key_tile =
      static_cast<int>(std::clamp<int64_t>(kDecodeTileBytes / (2 * row_bytes(p)) / 16 * 16, 16, 64));
  base.key_tile = static_cast<int>(std::min<int64_t>(base.key_tile, (p.keys + 15) / 16 * 16));
  // A warp's accumulators hold its rows x columns of the output: 128 registers a thread at 256 columns; wider
  // heads split their columns across warps (each computing S for the block's rows, K and V loaded once).
  base.column_parts = std::max(1, p.head_dim / kDecodeMaxColumnsPerWarp);
  const int64_t units = p.batch_kv_heads * ((p.group + kDecodeRows - 1) / kDecodeRows);
  const int64_t tiles = (p.keys + base.key_tile - 1) / base.key_tile;
  const int64_t tile_bytes = 2 * base.key_tile * row_bytes(p);
  AttentionTiling best = base;
  int64_t best_cost = -1;
  for (const int blocks_per_sm : kDecodeBlocksPerSmChoices) {
    AttentionTiling t = base;
    // The deepest ring that leaves room for the blocks, at least double-buffered; then the blocks that fit
    // (fewer only where two slots of a wide head's tiles are already over their share).
    const int64_t share = kSharedBytesPerSm / blocks_per_sm - kSharedBytesReservedPerBlock;
    t.stages =
        static_cast<int>(std::clamp<int64_t>((share - query_rows(p) * row_bytes(p)) / tile_bytes, 2, 8));
    t.min_blocks_per_sm = static_cast<int>(std::clamp<int64_t>(
        kSharedBytesPerSm / (decode_shared_bytes(p, t) + kSharedBytesReservedPerBlock), 1, blocks_per_sm));
    // A warp on each of the SM's four schedulers: fewer blocks split their columns over more warps (each
    // computes S for the rows and holds its share of the output), while a share stays 32 columns or more.
    const int warps = (kDecodeWarpsPerSm + t.min_blocks_per_sm - 1) / t.min_blocks_per_sm;
    if (warps > t.column_parts && p.head_dim % (warps * kDecodeMinColumnsPerWarp) == 0)
      t.column_parts = warps;
    // In tile times of one SM: the blocks an SM runs at once share its bandwidth, so a wave takes their
    // tiles one after another, and one fill (their fills overlap); then the combine kernel, whose threads
    // wait for memory once per round of its chains.
    const int64_t slots = int64_t(kSms) * t.min_blocks_per_sm;
    for (int64_t parts = 1; parts <= tiles; ++parts) {
      const int64_t waves = (units * parts + slots - 1) / slots;
      const int64_t rounds = parts > 1 ? (parts + kSplitCombineChains - 1) / kSplitCombineChains : 0;
      const int64_t cost = waves * (t.min_blocks_per_sm * ((tiles + parts - 1) / parts) + kDecodeFillTiles) +
                           kDecodeCombineRoundTiles * rounds;
      if (best_cost < 0 || cost < best_cost) {
        best_cost = cost;
        best = t;
        best.split_kv = static_cast<int>(parts);
      }
    }
  }
  return best;
}

Schedule schedule_decode(const Attention &a, const AttentionTiling &t) {
  Schedule s;
  // Rows are (query head within its group, query): one atom of 16 rows per block.
  s[a.O]
      .split("h", "hk", "hg", a.options.group)
      .fuse("hk", "b", "bh")
      .bind("bh", Binding::block_y)
      .fuse("i", "hg", "r")
      .split("r", "ro", "ia", 16)
      .bind("ro", Binding::block_x);
  schedule_common(s, a, t);
  s[a.O].reorder(loop_order(t, {"jka", "da", "ia", "dn", "jk", "jo", "ro", "bh"}, "jo"));
  return s;
}

}  // namespace twist::apps
