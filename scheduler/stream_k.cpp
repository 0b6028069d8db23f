#include "scheduler/stream_k.h"

#include <array>
#include <map>

#include "lang/error.h"
#include "scheduler/expr_lowering.h"
#include "scheduler/intrinsics.h"
#include "scheduler/stmt_building.h"

namespace twist {

using namespace Halide::Internal;
using stmt::var;

namespace {

// The stream-K unit's tile among the stream-K tiles, and the first and last blocks of its parts (lets of a
// stream-K unit's body, for the fixup).
constexpr const char *kSkTile = "unit.sk_tile";
constexpr const char *kFirstPart = "unit.first_part";
constexpr const char *kLastPart = "unit.last_part";

}  // namespace

PersistentUnits plan_persistent_units(const Halide::Expr &tiles, const Halide::Expr &k_tiles, int blocks,
                                      bool stream_k, StreamKTiles split_tiles) {
  PersistentUnits u;
  u.tiles = tiles, u.k_tiles = k_tiles, u.blocks = blocks, u.stream_k = stream_k, u.split_tiles = split_tiles;
  if (!stream_k) return u;
  // Whole waves: all of them (tail), or all but the last full one (tail_and_wave: the tail plus one full
  // wave are split, so each stream-K block runs at least a tile's k-tiles); none when the tiles are fewer
  // than the blocks. Where the waves are whole the ranges fall on the tiles' ends and every stream-K tile is
  // one block's; with the tail alone and no tail, nothing is split.
  u.dp_waves = split_tiles == StreamKTiles::tail ? simplify(tiles / blocks)
                                                 : simplify(Halide::max(tiles / blocks - 1, 0));
  u.sk_tiles = simplify(tiles - u.dp_waves * blocks);
  u.sk_iterations = simplify(u.sk_tiles * k_tiles);
  u.sk_blocks = simplify(Halide::min(blocks, u.sk_iterations));
  return u;
}

Halide::Expr stream_k_owner(const PersistentUnits &u, const Halide::Expr &i) {
  // (sk_iterations is 0 when there are no stream-K k-tiles: then no block enters the split.)
  return ((i + 1) * u.sk_blocks - 1) / Halide::max(u.sk_iterations, 1);
}

Halide::Expr persistent_grid(const Halide::Expr &tiles, int blocks, bool stream_k) {
  return stream_k ? Halide::Expr(blocks) : simplify(Halide::min(blocks, tiles));
}

PersistentTiles make_grid_persistent(ThreadMapping &mapping, int blocks, bool stream_k) {
  const std::array<Halide::Expr, 3> grid = mapping.grid;
  PersistentTiles tiles;
  tiles.count = simplify(grid[0] * grid[1] * grid[2]);
  const Halide::Expr tile = var(unit::kTile);
  const std::map<std::string, Halide::Expr> block_of_tile = {
      {intrinsic::kBlockIndex[0], tile % grid[0]},
      {intrinsic::kBlockIndex[1], (tile / grid[0]) % grid[1]},
      {intrinsic::kBlockIndex[2], tile / (grid[0] * grid[1])}};
  std::vector<std::pair<std::string, Halide::Expr>> per_thread;
  for (const auto &[name, value] : mapping.bound_values) {
    bool of_block = false;
    for (const char *b : intrinsic::kBlockIndex) of_block = of_block || expr_uses_var(value, b);
    if (of_block)
      tiles.coordinates.push_back({name, simplify(substitute(block_of_tile, value))});
    else
      per_thread.push_back({name, value});
  }
  mapping.bound_values = per_thread;
  mapping.grid = {persistent_grid(tiles.count, blocks, stream_k), 1, 1};
  return tiles;
}

Stmt over_units(const PersistentUnits &u, const std::function<Stmt(bool split)> &body,
                const Halide::Expr &team, int teams) {
  const Halide::Expr b = intrinsic::block_index(0), blocks = u.blocks, k = u.k_tiles;
  TWIST_CHECK(!(team.defined() && u.stream_k), "stream-K units are not dealt to ping-pong teams");
  // Whole tiles: b, b + blocks, ...; every k-tile of each.
  auto whole = [&](const Halide::Expr &waves) {
    const Halide::Expr step = var("tile.step");
    // (The first k-tile substituted: the k loop of a whole tile starts at 0.)
    const Stmt one =
        stmt::let_all({{unit::kTile, b + step * blocks}, {unit::kKCount, k}, {unit::kRingBase, step * k}},
                      substitute(unit::kFirstK, Halide::Expr(0), body(false)));
    if (!team.defined())
      return For::make("tile.step", 0, waves, ForType::Serial, Halide::DeviceAPI::None, one);
    const Halide::Expr turn = var("tile.turn");
    return For::make("tile.turn", 0, simplify((waves - team + teams - 1) / teams), ForType::Serial,
                     Halide::DeviceAPI::None, LetStmt::make("tile.step", turn * teams + team, one));
  };
  if (!u.stream_k) return whole(simplify((u.tiles - b + blocks - 1) / blocks));
  // Block b's range of the stream-K k-tiles: [start, end), cut at the tiles' ends into units.
  // (sk_blocks is 0 when there are no k-tiles, and no block enters the split.)
  const Halide::Expr iterations = Halide::max(u.sk_iterations, 1), sk_blocks = u.sk_blocks;
  const Halide::Expr start = var("sk.start"), end = var("sk.end"), n = var("sk.unit");
  const Halide::Expr safe_k = Halide::max(k, 1);
  auto owner = [&](const Halide::Expr &i) { return stream_k_owner(u, i); };
  const Halide::Expr tile = var(kSkTile), first = var("sk.first"), last = var("sk.last");
  const Stmt unit_body = stmt::let_all({{unit::kTile, u.dp_waves * blocks + tile},
                                        {unit::kFirstK, first - tile * k},
                                        {unit::kKCount, last - first},
                                        {unit::kRingBase, u.dp_waves * k + tile * k - start},
                                        {kFirstPart, owner(tile * k)},
                                        {kLastPart, owner(tile * k + k - 1)}},
                                       body(true));
  const Stmt each = stmt::let_all({{kSkTile, start / safe_k + n},
                                   {"sk.first", Halide::max(start, tile * k)},
                                   {"sk.last", Halide::min(end, tile * k + k)}},
                                  IfThenElse::make(first < last, unit_body));
  // A range of at most ceil(iterations / sk_blocks) k-tiles touches at most this many tiles.
  const Halide::Expr longest = (iterations + sk_blocks - 1) / sk_blocks;
  const Halide::Expr units = simplify((longest + safe_k - 2) / safe_k + 1);
  const Stmt split = IfThenElse::make(
      b < sk_blocks,
      stmt::let_all({{"sk.start", b * iterations / sk_blocks}, {"sk.end", (b + 1) * iterations / sk_blocks}},
                    For::make("sk.unit", 0, units, ForType::Serial, Halide::DeviceAPI::None, each)));
  return stmt::block({whole(u.dp_waves), split});
}

Stmt stream_k_fixup(const PersistentUnits &u, const TileStates &s, const Stmt &epilogue) {
  const Monoid &m = *s.monoid;
  const Halide::Expr b = intrinsic::block_index(0), thread = intrinsic::thread_index();
  const Halide::Expr tile = var(kSkTile), first = var(kFirstPart), last = var(kLastPart);
  const Halide::Expr parts = last - first + 1;
  // Slot of block p's part of this tile: p + the tile's index, distinct for every (block, tile) pair.
  // Consecutive threads take consecutive elements.
  auto element = [&](const Halide::Expr &block, const Halide::Expr &point) {
    return ((block + tile) * s.points + point) * s.threads + thread;
  };
  // state = combine(part p, state) (left) or combine(state, part p) (right), at every point.
  auto fold = [&](const Halide::Expr &p, bool left) {
    return s.for_each_point([&](const Halide::Expr &point) -> Stmt {
      const State a = m.lhs(), r = m.rhs();
      const std::vector<Halide::Expr> mine = s.state();
      std::vector<std::pair<std::string, Halide::Expr>> lets;
      for (size_t c = 0; c < m.state.size(); ++c) {
        const Halide::Expr part = load(m.state[c].type, s.partials[c], element(p, point));
        lets.push_back({a[c].as<Variable>()->name, left ? part : mine[c]});
        lets.push_back({r[c].as<Variable>()->name, left ? mine[c] : part});
      }
      return stmt::let_all(lets, s.set_state(to_halide(m.combine)));
    });
  };
  const std::string ticket = "stream_k.ticket", finishes = "stream_k.finishes";
  const Halide::Expr ticket_value = load(Halide::Int(32), ticket, 0);
  const Stmt fold_tile = stmt::block({
      intrinsic::threadfence(),
      For::make("sk.left", 0, b - first, ForType::Serial, Halide::DeviceAPI::None,
                fold(b - 1 - var("sk.left"), true)),
      For::make("sk.right", 0, last - b, ForType::Serial, Halide::DeviceAPI::None,
                fold(b + 1 + var("sk.right"), false)),
      stmt::guarded(thread == 0, stmt::store(s.counters, 0, tile)),
  });
  // Release: the part's stores are fenced by every thread before the block's ticket says they are there.
  // Acquire: the last part fences after its ticket, before it reads the others.
  const Stmt part = stmt::block({
      s.for_each_point([&](const Halide::Expr &point) -> Stmt {
        const std::vector<Halide::Expr> state = s.state();
        std::vector<Stmt> stores;
        for (size_t c = 0; c < m.state.size(); ++c)
          stores.push_back(stmt::store(s.partials[c], state[c], element(b, point)));
        return stmt::block(stores);
      }),
      intrinsic::threadfence(),
      s.sync,
      stmt::guarded(thread == 0, intrinsic::arrival_ticket({s.counters, tile, ticket, 0})),
      s.sync,
      stmt::store(finishes, Halide::cast(Halide::Int(32), ticket_value == parts - 1), 0),
      IfThenElse::make(ticket_value == parts - 1, fold_tile),
  });
  Stmt fixup = stmt::block({stmt::store(finishes, 1, 0), IfThenElse::make(parts > 1, part),
                            IfThenElse::make(load(Halide::Int(32), finishes, 0) != 0, epilogue)});
  fixup = Allocate::make(finishes, Halide::Int(32), Halide::MemoryType::Register, {1}, const_true(), fixup);
  return Allocate::make(ticket, Halide::Int(32), Halide::MemoryType::GPUShared, {1}, const_true(), fixup);
}

}  // namespace twist
