// The Hopper asynchronous datapath: mbarriers with phases, TMA tile copies with the hardware's swizzle, and
// wgmma reading shared memory through matrix descriptors, with the checks for what the hardware does not
// forgive (see scheduler/intrinsics.h).
#include <algorithm>

#include "backends/reference/interpreter/intrinsic_statements.h"
#include "lang/error.h"
#include "scheduler/hopper_layouts.h"

namespace twist::reference::interpreter {

namespace {

std::string quoted(Where where) {
  return where ? fmt::format("`{}`", *where) : std::string("an unknown statement");
}

Array &mbarrier_array(StatementCompiler &sc, const std::string &name) {
  Array &a = sc.writable_buffer(name, "mbarrier");
  if (a.space != Space::shared || a.type != Halide::UInt(64))
    fail("mbarriers are elements of a shared u64 array; {} is not one", a.describe());
  return a;
}

// Calls run(first thread) for every warpgroup with an active thread, after checking that all 128 of its
// threads are active: warpgroup instructions are undefined on a GPU otherwise.
template <typename Run>
void for_each_warpgroup(Machine &m, const ActiveThreads &active, const char *instruction, Run run) {
  for (size_t k = 0; k < active.size(); k += hopper::kWarpgroupThreads) {
    const int group = active[k] / hopper::kWarpgroupThreads, first = group * hopper::kWarpgroupThreads;
    for (int t = 0; t < hopper::kWarpgroupThreads; ++t)
      if (k + t >= active.size() || active[k + t] != first + t)
        fail(
            "{} by warpgroup {} with thread {} inactive (or the block has only {} threads): warpgroup "
            "instructions need all 128 threads of the warpgroup, so keep them out of branches that split one",
            instruction, group, first + t, m.threads);
    run(first);
  }
  m.thread = -1;
}

HeldGroups &groups_of(Machine &m, HeldKind kind, int thread) {
  return kind == HeldKind::wgmma ? m.wgmma_groups[thread] : m.bulk_store_groups[thread];
}

// A block's use of the barrier `name`[index] of cluster CTA `rank` needs a cluster barrier between the
// barrier's init and the use (another block's init is not otherwise ordered before it).
void check_cluster_ordered_init(const Machine &m, const Mbarrier &b, int64_t rank, const std::string &name,
                                int64_t index, const char *use) {
  if (rank == m.cluster_rank || b.cluster_syncs_at_init < m.cluster->completed) return;
  fail(
      "block {} {} {}[{}] of cluster CTA {} with no cluster_sync since that block initialized it: on a GPU "
      "the init need not be done or visible yet; fence_mbarrier_init and cluster_sync after the inits, "
      "before any block reaches a peer's barriers",
      m.cluster_rank, use, name, index, rank);
}

void complete_phase_if_done(Mbarrier &b) {
  if (b.pending > 0 || b.tx != 0) return;
  for (TmaLanding &landing : b.in_flight) b.unlanded.push_back(std::move(landing));
  b.in_flight.clear();
  ++b.completed;
  b.pending = b.expected;
}

}  // namespace

Exec compile_mbarrier(StatementCompiler &sc, const intrinsic::MbarrierOp &op, Where where) {
  using Kind = intrinsic::MbarrierOp::Kind;
  Machine *m = &sc.machine();
  Array *a = &mbarrier_array(sc, op.barrier.array);
  CompiledExpr index = sc.expr(op.barrier.index);
  const Kind kind = op.kind;
  const int arrivals = op.arrivals;
  CompiledExpr tx = sc.expr(op.expect_tx_bytes.defined() ? op.expect_tx_bytes : Halide::Expr(0));
  CompiledExpr parity = sc.expr(op.parity.defined() ? op.parity : Halide::Expr(0));
  // A remote arrive's CTA rank; -1 for the thread's own block.
  CompiledExpr cta = sc.expr(op.cta.defined() ? op.cta : Halide::Expr(-1));
  return [=](const ActiveThreads &active) {
    m->where = where;
    if (kind == Kind::init && active.size() != 1)
      fail("mbarrier_init by {} threads: one thread initializes a barrier (guard it with threadIdx.x == 0)",
           active.size());
    for (int t : active) {
      m->thread = t;
      const int64_t e = m->element(*a, index(m->slots[t]), "mbarrier");
      if (kind == Kind::init) {
        a->mbarriers[e] = Mbarrier{arrivals, arrivals, 0, 0, {}, {}, {}, m->cluster->completed};
        continue;
      }
      const auto rank = static_cast<int64_t>(cta(m->slots[t]));
      Array &barriers = rank < 0 ? *a : m->cta(rank).shared_array(a->name);
      const auto found = barriers.mbarriers.find(e);
      if (found == barriers.mbarriers.end()) {
        if (rank >= 0)
          fail(
              "{}[{}] of cluster CTA {} is used as an mbarrier before mbarrier_init initialized it: "
              "initialize the barriers, fence_mbarrier_init and cluster_sync before any block arrives on "
              "a peer's barrier",
              a->name, e, rank);
        fail("{}[{}] is used as an mbarrier before mbarrier_init initialized it", a->name, e);
      }
      if (rank >= 0) check_cluster_ordered_init(*m, found->second, rank, a->name, e, "arrives on");
      Mbarrier &b = found->second;
      if (kind == Kind::arrive) {
        b.tx += static_cast<int64_t>(tx(m->slots[t]));
        --b.pending;
        complete_phase_if_done(b);
        continue;
      }
      const auto p = static_cast<int64_t>(parity(m->slots[t]));
      if (p != 0 && p != 1) fail("mbarrier_wait on parity {}: a phase parity is 0 or 1", p);
      // A phase that has not completed may still be completed by another group of threads (the producer
      // or the consumers of a warp-specialized kernel); the wait blocks until then.
      if (b.completed % 2 == p)
        m->groups.wait_until(
            [&b, p] { return b.completed % 2 != p; },
            [&b, t, p, a, e] {
              return fmt::format(
                  "thread {} waits for the phase of parity {} of mbarrier {}[{}], which has not "
                  "completed (phase {} still waits for {} of {} arrivals and {} transaction "
                  "bytes) and no thread of the block can complete it: on the GPU the thread "
                  "would hang. Arrive (or issue the TMA loads it counts) before waiting, or "
                  "wait on the parity of a phase that was started",
                  t, p, a->name, e, b.completed, b.pending, b.expected, b.tx);
            });
      // The phase the wait observes: the newest completed one of parity p (phase -1 is the one before
      // phase 0, which a fresh barrier reports complete for parity 1).
      const int64_t observed = b.completed - 1;
      const auto last = b.last_waited.find(t);
      if (last != b.last_waited.end() && observed <= last->second)
        fail(
            "thread {} waits on parity {} of mbarrier {}[{}] and observes phase {} again, which it already "
            "waited for: the wait is on the wrong phase (flip the parity after every wait)",
            t, p, a->name, e, observed);
      b.last_waited[t] = observed;
      auto landed = std::stable_partition(b.unlanded.begin(), b.unlanded.end(),
                                          [&](const TmaLanding &l) { return l.phase > observed; });
      for (auto it = landed; it != b.unlanded.end(); ++it)
        for (size_t j = 0; j < it->elements.size(); ++j)
          m->land_tma(*it->dst, it->elements[j], it->values[j], it->origins[j], it->issuer, it->issued_at);
      b.unlanded.erase(landed, b.unlanded.end());
    }
    m->thread = -1;
  };
}

Exec compile_tma_copy(StatementCompiler &sc, const intrinsic::TmaCopy &op, Where where) {
  Machine *m = &sc.machine();
  const std::vector<TensorMap> &maps = m->kernel.tensor_maps;
  const auto map_it =
      std::find_if(maps.begin(), maps.end(), [&](const TensorMap &t) { return t.name == op.tensor_map; });
  if (map_it == maps.end())
    fail("the TMA copy names tensor map '{}', which is not one of the kernel's Kernel::tensor_maps",
         op.tensor_map);
  const TensorMap map = *map_it;
  const int map_index = static_cast<int>(map_it - maps.begin());
  Array *global =
      op.load ? &sc.buffer(map.buffer, "TMA load from") : &sc.writable_buffer(map.buffer, "TMA store to");
  Array *shared =
      op.load ? &sc.writable_buffer(op.shared, "TMA load into") : &sc.buffer(op.shared, "TMA store from");
  if (global->space != Space::global || shared->space != Space::shared || global->type != shared->type)
    fail(
        "a TMA copy moves elements of one type between a global tensor and shared memory, not between {} and "
        "{}",
        global->describe(), shared->describe());
  const size_t dims = map.extents.size();
  if (dims < 1 || dims > 5 || map.box.size() != dims || op.coordinates.size() != dims)
    fail(
        "tensor map '{}' has {} extents and {} box dimensions and the copy gives {} coordinates; TMA copies "
        "have 1 to 5 dimensions, the same number for each",
        map.name, dims, map.box.size(), op.coordinates.size());
  const int element_bytes = global->type.bytes();
  int64_t box_elements = 1;
  for (int b : map.box) {
    if (b < 1 || b > 256)
      fail(
          "tensor map '{}' has a box dimension of {} elements; TMA boxes have 1 to 256 elements per "
          "dimension",
          map.name, b);
    box_elements *= b;
  }
  const int row_bytes = map.box.back() * element_bytes;
  const int swizzle = hopper::swizzle_bytes(map.swizzle);
  if (row_bytes % 16 != 0)
    fail("tensor map '{}' has box rows of {} bytes; TMA box rows are a multiple of 16 bytes", map.name,
         row_bytes);
  if (swizzle > 0 && row_bytes != swizzle)
    fail(
        "tensor map '{}' swizzles {} bytes but its box rows are {} bytes: the {}-byte swizzle needs rows of "
        "exactly {} bytes (make the box's innermost dimension {} elements)",
        map.name, swizzle, row_bytes, swizzle, swizzle, swizzle / element_bytes);
  const int alignment = std::max(128, hopper::swizzle_alignment(map.swizzle));
  std::vector<CompiledExpr> extents, coordinates;
  for (const Halide::Expr &e : map.extents) extents.push_back(sc.expr(e));
  for (const Halide::Expr &e : op.coordinates) coordinates.push_back(sc.expr(e));
  CompiledExpr shared_index = sc.expr(op.shared_index);
  const bool load = op.load;
  Array *barrier = load ? &mbarrier_array(sc, op.barrier.array) : nullptr;
  CompiledExpr barrier_index = sc.expr(load ? op.barrier.index : Halide::Expr(0));
  const bool multicast = op.multicast.defined();
  CompiledExpr mask_of = sc.expr(multicast ? op.multicast : Halide::Expr(0));

  return [=](const ActiveThreads &active) {
    m->where = where;
    for (int t : active) {
      m->thread = t;
      std::vector<int64_t> extent(dims), first(dims);
      for (size_t d = 0; d < dims; ++d) {
        extent[d] = static_cast<int64_t>(extents[d](m->slots[t]));
        first[d] = static_cast<int64_t>(coordinates[d](m->slots[t]));
      }
      const int64_t start =
          m->element(*shared, shared_index(m->slots[t]), load ? "TMA load into" : "TMA store from");
      const int64_t start_address = shared->base_address + start * element_bytes;
      if (start_address % alignment != 0)
        fail(
            "the TMA box at {}[{}] starts at shared address {}, which is not {}-byte aligned: TMA copies "
            "need "
            "128-byte aligned boxes, and swizzled ones start at a multiple of the 8-row pattern",
            shared->name, start, start_address, alignment);
      TmaLanding landing{shared, {}, {}, {}, t, where, 0};
      std::vector<int64_t> box_index(dims, 0);
      for (int64_t l = 0; l < box_elements; ++l) {
        bool inside = true;
        int64_t linear = 0, row = 0;
        for (size_t d = 0; d < dims; ++d) {
          const int64_t c = first[d] + box_index[d];
          inside = inside && c >= 0 && c < extent[d];
          linear = linear * extent[d] + c;
          if (d + 1 < dims) row = row * extent[d] + c;
        }
        const int64_t address = hopper::swizzled_address(start_address + l * element_bytes, map.swizzle);
        const int64_t e = (address - shared->base_address) / element_bytes;
        m->element(*shared, static_cast<Real>(e), load ? "TMA load into" : "TMA store from");
        if (load) {
          landing.elements.push_back(e);
          landing.values.push_back(inside ? m->read(*global, linear) : Real(0));
          landing.origins.push_back({map_index, row, first[dims - 1] + box_index[dims - 1]});
        } else {
          if (!shared->accesses.empty()) {
            const SharedAccess &s = shared->accesses[e];
            if (s.copies_in_flight > 0 || (s.write_epoch == m->epoch && s.writer != t))
              fail(
                  "the TMA store reads {}[{}], which {} at {} with no barrier before the store: write the "
                  "tile, "
                  "fence_proxy_async, barrier, then store",
                  shared->name, e,
                  s.copies_in_flight > 0 ? "a copy in flight writes" : "another thread wrote",
                  quoted(s.copies_in_flight > 0 ? s.copied_at : s.written_at));
            if (s.writer_fences >= 0 && m->proxy_fences[s.writer] == s.writer_fences)
              fail(
                  "the TMA store reads {}[{}], which thread {} wrote at {} and has not passed a "
                  "fence_proxy_async since: the store reads through the async proxy, which may not see the "
                  "write; write the tile, fence_proxy_async, barrier, then store",
                  shared->name, e, s.writer, quoted(s.written_at));
          }
          // Only in-bounds elements are written: that is how a store clips a tile at the tensor's edge.
          if (inside) m->write(*global, linear, shared->values[e]);
          m->hold(m->bulk_store_groups[t], *shared, e);
        }
        for (size_t d = dims; d-- > 0;) {
          if (++box_index[d] < map.box[d]) break;
          box_index[d] = 0;
        }
      }
      if (!load) continue;
      const int64_t b = m->element(*barrier, barrier_index(m->slots[t]), "mbarrier");
      // The blocks the box lands in: the issuing one (rank -1), or every block of the multicast mask, at
      // the same shared offsets, completing on each one's barrier.
      std::vector<int64_t> ranks = {-1};
      if (multicast) {
        const auto mask = static_cast<int64_t>(mask_of(m->slots[t]));
        if (mask <= 0 || mask >= (1 << 16))
          fail("the TMA multicast's CTA mask is {}; it is 16 bits with at least one set", mask);
        ranks.clear();
        for (int64_t r = 0; r < 16; ++r)
          if ((mask >> r) & 1) ranks.push_back(r);
      }
      for (const int64_t rank : ranks) {
        Machine &cta = rank < 0 ? *m : m->cta(rank);
        Array &dst = rank < 0 ? *shared : cta.shared_array(shared->name);
        Array &barriers = rank < 0 ? *barrier : cta.shared_array(barrier->name);
        const auto found = barriers.mbarriers.find(b);
        if (found == barriers.mbarriers.end()) {
          if (rank >= 0)
            fail(
                "the TMA multicast completes on {}[{}] of cluster CTA {}, which mbarrier_init has not "
                "initialized: initialize the barriers, fence_mbarrier_init and cluster_sync before any "
                "block multicasts",
                barrier->name, b, rank);
          fail("the TMA load completes on {}[{}], which mbarrier_init has not initialized", barrier->name, b);
        }
        if (rank >= 0)
          check_cluster_ordered_init(*m, found->second, rank, barriers.name, b, "multicasts onto");
        // A box written into a slot whose reads (a wgmma in flight) the block has not retired is refused
        // here, for a peer's slot as for the issuer's own.
        for (int64_t e : landing.elements) cta.begin_copy_into(dst, e, true);
        Mbarrier &bar = found->second;
        TmaLanding copy = landing;
        copy.dst = &dst;
        copy.phase = bar.completed;
        bar.in_flight.push_back(std::move(copy));
        bar.tx -= box_elements * element_bytes;
        complete_phase_if_done(bar);
      }
    }
    m->thread = -1;
  };
}

Exec compile_held_commit(StatementCompiler &sc, HeldKind kind, Where where) {
  Machine *m = &sc.machine();
  return [=](const ActiveThreads &active) {
    m->where = where;
    for (int t : active) {
      HeldGroups &g = groups_of(*m, kind, t);
      g.committed.push_back(std::move(g.open));
      g.open.clear();
    }
  };
}

Exec compile_held_wait(StatementCompiler &sc, HeldKind kind, int pending, Where where) {
  Machine *m = &sc.machine();
  if (pending < 0) fail("a wait for a negative number ({}) of groups", pending);
  return [=](const ActiveThreads &active) {
    m->where = where;
    for (int t : active) Machine::retire(groups_of(*m, kind, t), pending);
  };
}

Exec compile_warpgroup_sync(StatementCompiler &sc, const char *instruction, Where where) {
  Machine *m = &sc.machine();
  return [=](const ActiveThreads &active) {
    m->where = where;
    for_each_warpgroup(*m, active, instruction, [](int) {});
  };
}

namespace {

// A wgmma operand read from shared memory through its descriptor: element (row, k) of the tile.
struct SharedOperand {
  Array *array;
  hopper::MatrixDescriptor descriptor;
  hopper::Major major;
  CompiledExpr index;
  int rows;
  const char *name;
};

SharedOperand shared_operand(StatementCompiler &sc, const intrinsic::WgmmaOperand &o, int rows,
                             const char *name) {
  Array *a = &sc.buffer(o.array, "wgmma from");
  if (a->space != Space::shared)
    fail("the wgmma's {} operand {} is not in shared memory", name, a->describe());
  return {a,
          {0, o.leading_bytes, o.stride_bytes, o.swizzle},
          o.mn_major ? hopper::Major::mn : hopper::Major::k,
          sc.expr(o.index),
          rows,
          name};
}

// Reads the operand's tile, checking that it was written before (no copy in flight, no unordered write) and
// that the descriptor meets the layout a TMA load wrote: element (row, k) must be the tensor element at the
// same offset from the one element (0, 0) holds.
void read_operand(Machine &m, const SharedOperand &o, int thread, int k_extent, std::vector<double> &out,
                  HeldGroups &holds) {
  Array &a = *o.array;
  const int64_t first = m.element(a, o.index(m.slots[thread]), "wgmma from");
  hopper::MatrixDescriptor d = o.descriptor;
  d.start_address = a.base_address + first * 2;
  // The 64-bit descriptor the instruction gets; the layout is read back from its fields.
  d = hopper::decode(hopper::encode(d));
  const TmaOrigin *corner = nullptr;
  out.assign(static_cast<size_t>(o.rows) * k_extent, 0);
  for (int r = 0; r < o.rows; ++r) {
    for (int k = 0; k < k_extent; ++k) {
      const int64_t address = hopper::element_address(d, o.major, r, k);
      const int64_t e = (address - a.base_address) / 2;
      m.element(a, static_cast<Real>(e), "wgmma read of");
      if (!a.accesses.empty()) {
        const SharedAccess &s = a.accesses[e];
        if (s.copies_in_flight > 0)
          fail(
              "the wgmma reads {} element ({}, {}) at {}[{}] while the copy into it (at {}) is in flight: "
              "wait "
              "on the stage's mbarrier before the wgmma",
              o.name, r, k, a.name, e, quoted(s.copied_at));
        if (s.write_epoch == m.epoch)
          fail(
              "the wgmma reads {}[{}], written at {} with no barrier before the wgmma: write the tile, "
              "fence_proxy_async, barrier, then wgmma",
              a.name, e, quoted(s.written_at));
      }
      if (!a.origins.empty()) {
        const TmaOrigin &origin = a.origins[e];
        if (!corner) corner = &a.origins[(hopper::element_address(d, o.major, 0, 0) - a.base_address) / 2];
        const int64_t want_row = o.major == hopper::Major::k ? r : k,
                      want_col = o.major == hopper::Major::k ? k : r;
        if (origin.tensor_map != corner->tensor_map || origin.row - corner->row != want_row ||
            origin.col - corner->col != want_col)
          fail(
              "the wgmma's {} descriptor (LBO {}, SBO {}, swizzle {}, {}-major) reads element ({}, {}) at "
              "{}[{}], but the TMA load put tensor element (row {}, column {}) there, not the one {} rows "
              "and "
              "{} columns from the tile's first (row {}, column {}): the descriptor does not describe the "
              "layout the copy wrote (its swizzle, or its byte offsets)",
              o.name, d.leading_bytes, d.stride_bytes, swizzle_name(d.swizzle),
              o.major == hopper::Major::k ? "K" : "MN", r, k, a.name, e, origin.row, origin.col, want_row,
              want_col, corner->row, corner->col);
      }
      out[static_cast<size_t>(r) * k_extent + k] = static_cast<double>(a.values[e]);
      m.hold(holds, a, e);
    }
  }
}

}  // namespace

Exec compile_wgmma(StatementCompiler &sc, const intrinsic::Wgmma &op, Where where) {
  constexpr int kM = 64, kK = 16, kRegisterA = 8;
  Machine *m = &sc.machine();
  if (!hopper::is_wgmma_n(op.n)) fail("wgmma m64n{}k16 does not exist: N is 8 to 256 in steps of 8", op.n);
  const int n = op.n, accumulators = op.n / 2;
  Array *d = &sc.writable_buffer(op.d, "wgmma into");
  if (d->space != Space::registers) fail("the wgmma's accumulators {} are not registers", d->describe());
  const SharedOperand b = shared_operand(sc, op.b, n, "B");
  std::optional<SharedOperand> a_shared;
  Array *a_registers = nullptr;
  if (op.a) {
    a_shared = shared_operand(sc, *op.a, kM, "A");
  } else {
    a_registers = &sc.buffer(op.a_registers, "wgmma from");
    if (a_registers->space != Space::registers)
      fail("the wgmma's register A {} is not in registers", a_registers->describe());
  }
  const Type input = b.array->type;
  const Type a_type = a_shared ? a_shared->array->type : a_registers->type;
  if (a_type != input || (input != f16 && input != bf16) ||
      (d->type != f32 && !(d->type == f16 && input == f16)))
    fail(
        "wgmma multiplies f16 or bf16 A and B of one type into f32 accumulators (or f16 ones for f16 "
        "inputs); "
        "this one has A {}, B {}, D {}",
        type_name(a_type), type_name(input), d->describe());
  CompiledExpr d_index = sc.expr(op.d_index), accumulate = sc.expr(op.accumulate);
  CompiledExpr a_index = sc.expr(op.a_index.defined() ? op.a_index : Halide::Expr(0));
  return [=](const ActiveThreads &active) {
    m->where = where;
    for_each_warpgroup(*m, active, "wgmma", [&](int first) {
      // The shared operands are read once, by the warpgroup's first thread (the hardware reads them for the
      // warpgroup); every thread holds them until its wait.
      std::vector<double> A, B;
      m->thread = first;
      HeldGroups &first_holds = m->wgmma_groups[first];
      read_operand(*m, b, first, kK, B, first_holds);
      if (a_shared) {
        read_operand(*m, *a_shared, first, kK, A, first_holds);
      } else {
        A.assign(kM * kK, 0);
        for (int t = first; t < first + hopper::kWarpgroupThreads; ++t) {
          m->thread = t;
          const int64_t ai = m->element(*a_registers, a_index(m->slots[t]), "wgmma read of A from");
          m->element(*a_registers, static_cast<Real>(ai + kRegisterA - 1), "wgmma read of A from");
          for (int i = 0; i < kRegisterA; ++i) {
            const hopper::FragmentPosition p = hopper::register_a_position(t - first, i);
            A[p.row * kK + p.col] = static_cast<double>(m->read(*a_registers, ai + i));
            m->hold(m->wgmma_groups[t], *a_registers, t * a_registers->size + ai + i);
          }
        }
      }
      for (int t = first; t < first + hopper::kWarpgroupThreads; ++t) {
        m->thread = t;
        const bool add = accumulate(m->slots[t]) != 0;
        const int64_t di = m->element(*d, d_index(m->slots[t]), "wgmma into");
        m->element(*d, static_cast<Real>(di + accumulators - 1), "wgmma into");
        for (int i = 0; i < accumulators; ++i) {
          const hopper::FragmentPosition p = hopper::accumulator_position(t - first, i);
          // Chained wgmmas on one accumulator are ordered by the hardware: the value the previous one left
          // is read directly, not through the checks for the thread's own accesses.
          double sum = add ? static_cast<double>(d->values[t * d->size + di + i]) : 0;
          for (int k = 0; k < kK; ++k) sum += A[p.row * kK + k] * B[static_cast<size_t>(p.col) * kK + k];
          d->values[t * d->size + di + i] = m->compiler.round(d->type, sum);
          m->hold(m->wgmma_groups[t], *d, t * d->size + di + i);
        }
      }
    });
  };
}

}  // namespace twist::reference::interpreter
