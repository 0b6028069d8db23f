#include "scheduler/staging.h"

#include "lang/error.h"
#include "scheduler/expr_lowering.h"
#include "scheduler/intrinsics.h"
#include "scheduler/linear_sums.h"

namespace twist {

using namespace Halide::Internal;

namespace {

int log2_floor(int x) {
  int l = 0;
  while ((1 << (l + 1)) <= x) ++l;
  return l;
}

bool provably_multiple(const Halide::Expr &e, int m) {
  ModulusRemainder mr = modulus_remainder(simplify(e));
  return mr.remainder % m == 0 && mr.modulus % m == 0;
}

}  // namespace

std::vector<std::vector<Halide::Expr>> reads_of(const Halide::Expr &e, const std::string &name) {
  struct Collect : IRVisitor {
    const std::string &name;
    std::vector<std::vector<Halide::Expr>> reads;
    explicit Collect(const std::string &n) : name(n) {}
    using IRVisitor::visit;
    void visit(const Call *c) override {
      IRVisitor::visit(c);
      if (c->call_type == Call::Image && c->name == name) reads.push_back(c->args);
    }
  } collect(name);
  e.accept(&collect);
  return collect.reads;
}

namespace {

// The plan of a stage of tensor `name`, read (or with `write_back` written) at `accesses` (lowered
// coordinates, one tuple each).
StagePlan plan_tile(const StageDirective &d, const std::string &name, const Type &type,
                    const std::vector<Halide::Expr> &shape, const LoopStructure &loops,
                    const std::vector<std::vector<Halide::Expr>> &accesses, bool element_copies,
                    bool write_back) {
  StagePlan p;
  p.directive = d;
  p.write_back = write_back;
  p.input = name;
  p.type = type;
  p.shape = shape;
  p.buffer = name + "_smem";
  p.elem_bytes = type.bytes();
  // An empty `at` stages once per block, before every loop (an input that no reduction loop moves through).
  p.at = d.at.empty() ? -1 : loops.index(d.at);
  if (p.at < 0 && !d.at.empty()) loops.dim(d.at);
  if (p.at >= 0 && loops.dims[p.at].binding != Binding::serial &&
      loops.dims[p.at].binding != Binding::unrolled)
    fail("schedule of '{}': input '{}' is staged at loop '{}', which is bound to {}; stage at a serial loop",
         loops.func, name, d.at, to_string(loops.dims[p.at].binding));
  if (accesses.empty())
    fail("schedule of '{}': input '{}' is staged, but '{}' does not read it", loops.func, name, loops.func);

  // Every thread of the block shares the box, and loops inside the stage's loop sweep it.
  Scope<Interval> inside;
  for (size_t k = 0; k < loops.dims.size(); ++k) {
    const LoopDim &dim = loops.dims[k];
    const bool parallel =
        dim.binding == Binding::warp || dim.binding == Binding::thread || dim.binding == Binding::warpgroup;
    const bool serial_inside = static_cast<int>(k) > p.at && !parallel && dim.binding != Binding::block_x &&
                               dim.binding != Binding::block_y && dim.binding != Binding::block_z;
    if (parallel || serial_inside) inside.push(dim.name, Interval(0, simplify(dim.extent - 1)));
  }
  const int rank = static_cast<int>(shape.size());
  for (int c = 0; c < rank; ++c) {
    Interval box = Interval::nothing();
    for (const auto &coords : accesses) box.include(bounds_of_expr_in_scope(coords[c], inside));
    if (!box.is_bounded())
      fail("schedule of '{}': the part of '{}' read in one iteration of '{}' is unbounded in dimension {}",
           loops.func, name, d.at, c);
    Halide::Expr extent = simplify(box.max - box.min + 1);
    const auto *e = as_const_int(extent);
    if (!e)
      fail(
          "schedule of '{}': staging '{}' at '{}' needs a box of constant size, but dimension {} spans {} "
          "elements; stage at a loop whose inner loops have constant extents",
          loops.func, name, d.at, c, extent);
    p.box_min.push_back(simplify(box.min));
    p.box_extent.push_back(static_cast<int>(*e));
  }
  p.cols = p.box_extent.back();
  for (int c = 0; c + 1 < rank; ++c) p.rows *= p.box_extent[c];

  // The widest copy that stays aligned: the box's rows start at multiples of it in global memory when the
  // box's first column and the tensor's row pitch are multiples of it.
  p.copy_bytes = p.elem_bytes;
  for (int bytes : {16, 8, 4}) {
    if (element_copies) break;
    const int elems = bytes / p.elem_bytes;
    if (elems < 1 || (p.cols * p.elem_bytes) % bytes != 0 || !provably_multiple(p.box_min.back(), elems))
      continue;
    const Halide::Expr pitch = p.shape.back();
    if (const std::optional<int64_t> c = constant_value(pitch)) {
      if (*c % elems != 0) continue;
    } else if (rank > 1) {
      p.requirements.push_back(
          {pitch % elems == 0,
           fmt::format("the last extent of '{}' ({}) must be a multiple of {} for {}-byte copies "
                       "of its staged tiles; schedule a narrower transport for other shapes",
                       name, pitch, elems, bytes)});
    }
    p.copy_bytes = bytes;
    break;
  }

  if (d.transport == Transport::tma) {
    plan_tma_boxes(p, loops.func);
    return p;
  }
  const int chunk16 = 16 / p.elem_bytes;
  p.layout = d.layout;
  if (p.layout == SharedLayout::swizzled && (p.cols % chunk16 != 0 || (p.rows * p.cols / chunk16) % 8 != 0))
    p.layout = SharedLayout::padded;
  if (p.layout == SharedLayout::padded && p.cols % chunk16 != 0) p.layout = SharedLayout::row_major;
  p.row_pitch = p.cols + (p.layout == SharedLayout::padded ? chunk16 : 0);
  p.slot_elems = p.rows * p.row_pitch;
  return p;
}

}  // namespace

StagePlan plan_stage(const StageDirective &d, const Input &input, const LoopStructure &loops,
                     const std::vector<std::vector<Halide::Expr>> &reads, bool element_copies) {
  return plan_tile(d, input.name(), input.type(), to_halide(input.shape()), loops, reads, element_copies,
                   false);
}

StagePlan plan_write_back(const std::string &name, const Type &type, const std::vector<Halide::Expr> &shape,
                          const LoopStructure &loops, const std::vector<Halide::Expr> &coords,
                          bool element_copies, Transport transport) {
  return plan_tile({name, "", transport, 1, SharedLayout::swizzled}, name, type, shape, loops, {coords},
                   element_copies, true);
}

Stmt with_shared_arrays(const std::vector<StagePlan> &plans, Stmt body) {
  for (const StagePlan &p : plans)
    body = Allocate::make(p.buffer, p.type, Halide::MemoryType::GPUShared, {p.slot_elems * p.directive.depth},
                          const_true(), body);
  return body;
}

Halide::Expr StagePlan::index_of_cell(const Halide::Expr &row, const Halide::Expr &col,
                                      const Halide::Expr &slot) const {
  Halide::Expr base = slot * slot_elems;
  // TMA boxes of box_cols columns one after another, each row-major: the address before the hardware's
  // swizzle, which TMA copies and wgmma descriptors both apply.
  if (directive.transport == Transport::tma)
    return base + buffer_of_box(col / box_cols) * (rows * box_cols) + row * box_cols + col % box_cols;
  if (layout != SharedLayout::swizzled) return base + row * row_pitch + col;
  // XOR-swizzle 16-byte chunks: within each aligned group of 8 chunks, chunk c of a line moves to c ^ (line
  // bits), so the 8 rows an ldmatrix phase reads land in 8 different bank groups.
  const int chunk = 16 / elem_bytes;
  const int chunks_per_row = cols / chunk;
  // With a power-of-two row of at least 8 chunks, linear >> shift is the row and the XOR stays inside the
  // row's chunks: the same permutation is written row * chunks + (chunk ^ (row & 7)), in which a fragment's
  // offset in rows (an unrolled atom 16 rows further) is a constant added outside the XOR, so the compiler
  // folds it into the address instead of recomputing the XOR per fragment.
  const bool row_aligned = chunks_per_row >= 8 && (chunks_per_row & (chunks_per_row - 1)) == 0;
  const Halide::Expr linear = row * chunks_per_row + col / chunk;
  const int shift = std::max(3, log2_floor(chunks_per_row));
  const Halide::Expr swizzled =
      row_aligned ? row * chunks_per_row + ((col / chunk) ^ (row & 7)) : linear ^ ((linear >> shift) & 7);
  return base + swizzled * chunk + col % chunk;
}

Halide::Expr StagePlan::buffer_of_box(const Halide::Expr &box) const {
  return sub_tile_buffers ? box % sub_tile_buffers : box;
}

Halide::Expr StagePlan::box_of(const std::vector<Halide::Expr> &coords) const {
  return simplify(canonical_sum(coords.back() - box_min.back()) / box_cols);
}

Halide::Expr StagePlan::index_of(const std::vector<Halide::Expr> &coords, const Halide::Expr &slot) const {
  Halide::Expr row = 0;
  // Inside the box, the box's origin cancels: the tile-local coordinates do not depend on the stage loop.
  auto local = [&](size_t c) { return simplify(canonical_sum(coords[c] - box_min[c])); };
  for (size_t c = 0; c + 1 < coords.size(); ++c) row = row * box_extent[c] + local(c);
  return index_of_cell(row, local(coords.size() - 1), slot);
}

Halide::Expr StagePlan::thread_index_of(const std::vector<Halide::Expr> &coords,
                                        const Halide::Expr &slot) const {
  if (directive.transport != Transport::tma) return index_of(coords, slot);
  Halide::Expr row = 0;
  auto local = [&](size_t c) { return simplify(canonical_sum(coords[c] - box_min[c])); };
  for (size_t c = 0; c + 1 < coords.size(); ++c) row = row * box_extent[c] + local(c);
  const Halide::Expr col = local(coords.size() - 1);
  // Each box starts at a multiple of its swizzle pattern, so the pattern's row is the box row's 128-byte
  // line (hopper::swizzled_address): the 16-byte chunk of the row is XORed with that line's low bits.
  const int width = box_cols * elem_bytes, chunk = 16 / elem_bytes, mask = width / 16 - 1;
  const Halide::Expr in_box = col % box_cols;
  const Halide::Expr line = row * width / 128;
  const Halide::Expr swizzled_chunk = (in_box / chunk) ^ (line & mask);
  return simplify(slot * slot_elems + buffer_of_box(col / box_cols) * (rows * box_cols) + row * box_cols +
                  swizzled_chunk * chunk + in_box % chunk);
}

Stmt StagePlan::copy(const Halide::Expr &iteration, const Halide::Expr &slot, int threads,
                     Guards guards) const {
  if (directive.transport == Transport::tma)
    fail(
        "the TMA stage of '{}' is read by threads here, but TMA stages are lowered only as the operands of a "
        "wgmma atom (MatrixAtom::wgmma, whose main loop issues the copies); use Transport::cp_async",
        input);
  if (guards != Guards::by_tile) return copy_chunks(iteration, slot, threads, guards == Guards::all);
  // Inside the input, a box needs no guard per chunk: a tile whose whole box is in bounds (every tile but
  // the last along a dimension the tiles do not divide) copies with constant sizes and addresses affine in
  // the stage loop, which the compiler strength-reduces; only tiles that cross an edge pay for the guards.
  Halide::Expr inside = const_true();
  for (size_t c = 0; c < box_extent.size(); ++c)
    inside = inside && box_min_at(iteration, c) + box_extent[c] <= shape[c];
  inside = simplify(inside);
  if (is_const_one(inside)) return copy_chunks(iteration, slot, threads, false);
  const Stmt guarded = copy_chunks(iteration, slot, threads, true);
  if (is_const_zero(inside)) return guarded;
  return IfThenElse::make(inside, copy_chunks(iteration, slot, threads, false), guarded);
}

Halide::Expr StagePlan::box_min_at(const Halide::Expr &iteration, size_t c) const {
  // The box's origin depends on the stage loop's variable: take it at `iteration`.
  return directive.at.empty() ? box_min[c] : substitute(directive.at, iteration, box_min[c]);
}

Stmt StagePlan::copy_chunks(const Halide::Expr &iteration, const Halide::Expr &slot, int threads,
                            bool guarded) const {
  const int elems = copy_bytes / elem_bytes;
  const int chunks_per_row = cols / elems;
  const int chunks = rows * chunks_per_row;
  const int rounds = (chunks + threads - 1) / threads;
  const std::string round_var = buffer + ".copy";
  const Halide::Expr chunk = Variable::make(Halide::Int(32), round_var) * threads + intrinsic::thread_index();
  const Halide::Expr row = chunk / chunks_per_row, col = (chunk % chunks_per_row) * elems;
  // The box coordinates of the chunk's first element, and the tensor coordinates they stand for.
  std::vector<Halide::Expr> coords(box_extent.size());
  Halide::Expr rest = row;
  for (int c = static_cast<int>(box_extent.size()) - 2; c >= 0; --c) {
    coords[c] = rest % box_extent[c];
    rest = rest / box_extent[c];
  }
  coords.back() = col;
  std::vector<Halide::Expr> global;
  Halide::Expr valid = const_true();
  for (size_t c = 0; c < coords.size(); ++c) {
    global.push_back(box_min_at(iteration, c) + coords[c]);
    if (guarded) valid = valid && global.back() < shape[c];
  }
  // With the thread index and the round bounded, the simplifier drops the wrap-arounds (% extent) of
  // coordinates that stay in the box, which would otherwise hide their affine form from the compiler.
  Scope<Interval> bounds;
  bounds.push(intrinsic::kThreadIndex, Interval(0, threads - 1));
  bounds.push(round_var, Interval(0, rounds - 1));
  auto bounded = [&](const Halide::Expr &e) { return simplify(e, true, bounds); };
  valid = bounded(valid);
  const Halide::Expr flat = bounded(flat_index(global, shape));
  const Halide::Expr dst = bounded(index_of_cell(row, col, slot));
  Stmt one;
  if (write_back) {
    // Out of shared memory: a chunk outside the output is not written at all.
    one = copy_bytes >= 4 ? intrinsic::copy({input, flat, buffer, dst, copy_bytes, copy_bytes, false})
                          : Store::make(input, load(type, buffer, dst), flat, Parameter(), const_true(),
                                        ModulusRemainder());
    if (guarded) one = IfThenElse::make(valid, one);
  } else {
    const Halide::Expr src = guarded ? Halide::select(valid, flat, 0) : flat;
    const Halide::Expr bytes = guarded ? Halide::select(valid, copy_bytes, 0) : Halide::Expr(copy_bytes);
    if (copy_bytes >= 4) {
      one = intrinsic::copy(
          {buffer, dst, input, src, copy_bytes, bytes, directive.transport == Transport::cp_async});
    } else {
      const Halide::Expr value = load(type, input, src);
      one = Store::make(buffer, guarded ? Halide::select(valid, value, make_zero(type)) : value, dst,
                        Parameter(), const_true(), ModulusRemainder());
    }
  }
  if (chunks % threads != 0) one = IfThenElse::make(chunk < chunks, one);
  return For::make(round_var, 0, rounds, ForType::Unrolled, Halide::DeviceAPI::None, one);
}

Halide::Expr first_guarded_prefetch(const std::vector<const StagePlan *> &plans, const Halide::Expr &min,
                                    const Halide::Expr &extent, int ahead) {
  const Halide::Expr end = min + extent;
  Halide::Expr split = end - ahead, invariant = const_true();
  for (const StagePlan *p : plans) {
    const Halide::Expr x = Variable::make(Halide::Int(32), p->directive.at);
    for (size_t c = 0; c < p->box_extent.size(); ++c) {
      // The box's origin as first + step * x; an origin of another form gets guards everywhere.
      const Halide::Expr first = simplify(p->box_min_at(0, c));
      const Halide::Expr step_expr = simplify(p->box_min_at(1, c) - first);
      const auto *step = as_const_int(step_expr);
      if (!step || *step < 0 || !can_prove(p->box_min_at(x, c) == first + static_cast<int>(*step) * x))
        return min;
      // The box of iteration i is inside while step * i <= room.
      const Halide::Expr room = p->shape[c] - p->box_extent[c] - first;
      if (*step == 0)
        invariant = invariant && 0 <= room;
      else
        split = Halide::min(split, room / static_cast<int>(*step) - ahead + 1);
    }
  }
  return simplify(Halide::select(invariant, Halide::max(split, min), min));
}

Stmt partitioned_loop(const std::string &name, const Halide::Expr &min, const Halide::Expr &extent,
                      const Halide::Expr &split, const std::function<Stmt(bool guarded)> &body) {
  const Halide::Expr end = simplify(min + extent);
  if (can_prove(split <= min))
    return For::make(name, min, extent, ForType::Serial, Halide::DeviceAPI::None, body(true));
  return Block::make(
      For::make(name, min, split - min, ForType::Serial, Halide::DeviceAPI::None, body(false)),
      For::make(name, split, end - split, ForType::Serial, Halide::DeviceAPI::None, body(true)));
}

std::string StagePlan::summary() const {
  std::string box;
  for (int e : box_extent) box += (box.empty() ? "" : " x ") + std::to_string(e);
  if (write_back && directive.transport == Transport::tma)
    return fmt::format(
        "  {} <- shared {} [{}] in {} TMA box(es) of {} columns, {} swizzle, {} B{}, stored by TMA{}\n",
        input, buffer, box, cols / box_cols, box_cols, swizzle_name(swizzle), slot_elems * elem_bytes,
        sub_tile_buffers ? fmt::format(" in {} buffers of one box", slot_elems / (rows * box_cols)) : "",
        sub_tile_buffers ? " box by box" : "");
  if (write_back)
    return fmt::format("  {} <- shared {} [{}] {}, {} B, written back with {}-byte stores of whole rows\n",
                       input, buffer, box, to_string(layout), slot_elems * elem_bytes, copy_bytes);
  if (directive.transport == Transport::tma)
    return fmt::format(
        "  {} -> shared {} [{}] in {} TMA box(es) of {} columns, {} swizzle, {} B per slot x {} slot(s)\n",
        input, buffer, box, cols / box_cols, box_cols, swizzle_name(swizzle), slot_elems * elem_bytes,
        directive.depth);
  return fmt::format("  {} -> shared {} [{}] {}, {} B per slot x {} slot(s), {}-byte {} copies\n", input,
                     buffer, box, to_string(layout), slot_elems * elem_bytes, directive.depth, copy_bytes,
                     directive.transport == Transport::cp_async ? "cp.async" : "plain");
}

}  // namespace twist

namespace twist {

Stmt staged_loop(const std::string &name, const Halide::Expr &min, const Halide::Expr &extent, ForType type,
                 const std::vector<const StagePlan *> &here, int threads, const Stmt &body,
                 const std::string &func, PrefetchGuards guards) {
  if (here.empty()) return For::make(name, min, extent, type, Halide::DeviceAPI::None, body);
  const int depth = here[0]->directive.depth;
  bool async = false;
  for (const StagePlan *p : here) {
    if (p->directive.depth != depth)
      fail("schedule of '{}': inputs staged at the same loop '{}' must have the same pipeline depth", func,
           name);
    async = async || p->directive.transport == Transport::cp_async;
  }
  using Guards = StagePlan::Guards;
  auto copies = [&](const Halide::Expr &iteration, const Halide::Expr &slot, Guards g) {
    std::vector<Stmt> s;
    for (const StagePlan *p : here) s.push_back(p->copy(iteration, slot, threads, g));
    return Block::make(s);
  };
  // The steady state, whose iterations copy the boxes of iteration x + ahead with `body(guards)`.
  auto loop = [&](int ahead, const std::function<Stmt(Guards)> &body) {
    if (guards == PrefetchGuards::by_tile)
      return For::make(name, min, extent, ForType::Serial, Halide::DeviceAPI::None, body(Guards::by_tile));
    return partitioned_loop(name, min, extent, first_guarded_prefetch(here, min, extent, ahead),
                            [&](bool guarded) { return body(guarded ? Guards::all : Guards::none); });
  };
  const Halide::Expr x = Variable::make(Halide::Int(32), name);
  if (depth == 1) {
    return loop(0, [&](Guards g) {
      Stmt fill = copies(x, 0, g);
      if (async) fill = Block::make({fill, intrinsic::async_commit(), intrinsic::async_wait(0)});
      return Block::make({intrinsic::barrier(), fill, intrinsic::barrier(), body});
    });
  }
  std::vector<Stmt> prologue;
  for (int s = 0; s < depth - 1; ++s) {
    const Halide::Expr iteration = simplify(min + s);
    Stmt fill = copies(iteration, iteration % depth, Guards::by_tile);
    if (!is_const_one(simplify(s < extent))) fill = IfThenElse::make(s < extent, fill);
    prologue.push_back(Block::make(fill, intrinsic::async_commit()));
  }
  const Halide::Expr ahead = x + (depth - 1);
  const Stmt steady = loop(depth - 1, [&](Guards g) {
    const Stmt fill = copies(ahead, ahead % depth, g);
    return Block::make({intrinsic::async_wait(depth - 2), intrinsic::barrier(),
                        g == Guards::none ? fill : IfThenElse::make(ahead < min + extent, fill),
                        intrinsic::async_commit(), body});
  });
  return Block::make({Block::make(prologue), steady, intrinsic::async_wait(0)});
}

}  // namespace twist
