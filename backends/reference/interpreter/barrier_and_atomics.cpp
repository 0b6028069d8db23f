// The block-wide barrier, named barriers (bar.sync, bar.arrive), atomic additions to global memory, and the
// fences and tickets by which blocks hand results to each other.
#include <cstdint>

#include "backends/reference/interpreter/intrinsic_statements.h"
#include "lang/error.h"
#include "lang/expr.h"

namespace twist::reference::interpreter {

namespace {

// Barrier `id` over `threads` threads reached by the active threads, which wait for it (bar.sync,
// __syncthreads) or only count towards it (bar.arrive).
void reach_barrier(Machine &m, int id, int threads, bool arrive, const ActiveThreads &active) {
  const char *instruction = id == 0 ? "barrier" : arrive ? "bar.arrive" : "bar.sync";
  const int arriving = static_cast<int>(active.size());
  Machine::BarrierState &b = m.barriers[id];
  if (b.arrived > 0 && b.threads != threads)
    fail(
        "{} {}, {} reached by threads {} to {} while {} threads wait at or arrived at it counting {}: every "
        "bar.sync and bar.arrive of one barrier must give the same count, or the GPU's count is undefined",
        instruction, id, threads, active.front(), active.back(), b.arrived, b.threads);
  // Accesses before the barrier are ordered before those after it: a new epoch of the race checks.
  if (b.arrived == 0 && arriving == threads) {
    ++m.epoch;
    return;
  }
  auto describe = [&](int arrived) {
    if (id == 0) {
      int missing = 0;
      while (missing < arriving && active[missing] == missing) ++missing;
      return fmt::format(
          "barrier reached by {} of the block's {} threads (thread {} is not among them): a barrier "
          "under a branch that threads of one block take differently hangs or corrupts on a GPU; move it "
          "out of the branch",
          arrived, threads, missing);
    }
    return fmt::format(
        "named barrier {} reached by {} threads ({} by threads {} to {}, {} {}), but it waits for {}: on a "
        "GPU the threads would hang; give it the count of the threads that reach it (bar.sync and bar.arrive "
        "together)",
        id, arrived, instruction, active.front(), active.back(), arriving, arrive ? "arriving" : "waiting",
        threads);
  };
  // A barrier reached by part of the block completes when other groups of threads (the other roles of a
  // warp-specialized kernel, or warpgroups that arrive) bring the count up.
  b.arrived += arriving;
  b.threads = threads;
  if (b.arrived > threads) fail("{}", describe(b.arrived));
  if (b.arrived == threads) {
    b.arrived = 0;
    ++b.completed;
    ++m.epoch;
    return;
  }
  if (arrive) return;
  if (!m.groups.concurrent()) fail("{}", describe(arriving));
  const int64_t completed = b.completed;
  m.groups.wait_until([&b, completed] { return b.completed != completed; },
                      [&b, describe] { return describe(b.arrived); });
}

}  // namespace

Exec compile_block_barrier(StatementCompiler &sc, Where where) {
  Machine *m = &sc.machine();
  return [=](const ActiveThreads &active) {
    m->where = where;
    reach_barrier(*m, 0, m->threads, false, active);
  };
}

Exec compile_named_barrier(StatementCompiler &sc, const intrinsic::NamedBarrier &op, Where where) {
  Machine *m = &sc.machine();
  const char *instruction = op.arrive ? "bar.arrive" : "bar.sync";
  if (op.threads > m->threads)
    fail("{}: barrier {} waits for {} threads, but the block has {}", instruction, op.id, op.threads,
         m->threads);
  const CompiledExpr id_of = sc.expr(op.id);
  const int threads = op.threads;
  const bool arrive = op.arrive;
  return [=](const ActiveThreads &active) {
    m->where = where;
    // The id is the same for the threads that run together here: the interpreter runs each warpgroup of a
    // role as a group of its own, and a GPU needs it uniform across each warp.
    const int first = m->thread = active.front();
    const Real id = id_of(m->slots[first]);
    for (int t : active) {
      m->thread = t;
      const Real other = id_of(m->slots[t]);
      if (other != id)
        fail(
            "{} reached by threads {} and {} with barrier ids {} and {}: the id must be the same for the "
            "threads of a warpgroup (computed from the warpgroup's index), so that each warpgroup names one "
            "barrier",
            instruction, first, t, static_cast<double>(id), static_cast<double>(other));
    }
    if (id < 1 || id > 15)
      fail("{} on barrier {}: named barriers are 1 to 15 (0 is the block-wide barrier)", instruction,
           static_cast<double>(id));
    m->thread = -1;
    reach_barrier(*m, static_cast<int>(id), threads, arrive, active);
  };
}

Exec compile_cluster_sync(StatementCompiler &sc, Where where) {
  Machine *m = &sc.machine();
  return [=](const ActiveThreads &active) {
    m->where = where;
    Cluster &c = *m->cluster;
    const int threads = m->threads * static_cast<int>(c.ctas.size());
    auto describe = [&c, threads] {
      return fmt::format(
          "cluster_sync reached by {} of the cluster's {} threads: barrier.cluster waits for every thread of "
          "every block of the cluster; move it out of branches, and let no block return before it",
          c.arrived, threads);
    };
    c.arrived += static_cast<int>(active.size());
    if (c.arrived == threads) {
      c.arrived = 0;
      ++c.completed;
      // Accesses before it are ordered before those after it, in every block of the cluster.
      for (Machine *cta : c.ctas) ++cta->epoch;
      return;
    }
    if (c.arrived > threads || !m->groups.concurrent()) fail("{}", describe());
    const int64_t completed = c.completed;
    m->groups.wait_until([&c, completed] { return c.completed != completed; }, describe);
  };
}

Exec compile_atomic_add(StatementCompiler &sc, const intrinsic::AtomicAdd &op, Where where) {
  Machine *m = &sc.machine();
  Array *a = &sc.writable_buffer(op.buffer, "atomic_add to");
  if (a->space != Space::global || (a->type != f32 && a->type != i32))
    fail("atomic_add adds to f32 or i32 global buffers; {} is neither", a->describe());
  if (op.value.type() != a->type)
    fail("atomic_add adds a {} value to {}: the types must match", type_name(op.value.type()), a->describe());
  CompiledExpr index = sc.expr(op.index), value = sc.expr(op.value);
  struct Addition {
    int thread;
    Real index, value;
  };
  std::vector<Addition> additions;
  return [=](const ActiveThreads &active) mutable {
    m->where = where;
    additions.resize(active.size());
    for (size_t k = 0; k < active.size(); ++k) {
      const int t = m->thread = active[k];
      additions[k] = {t, index(m->slots[t]), value(m->slots[t])};
    }
    // The hardware serializes the additions in some order; thread order is one of them.
    for (const Addition &add : additions) {
      m->thread = add.thread;
      const int64_t e = m->element(*a, add.index, "atomic_add to");
      const Real old = m->read(*a, e);
      // Outside extended arithmetic the sum of two f32 values is taken in double, which rounds correctly to
      // f32 afterwards.
      const Real sum = m->options.arithmetic == Arithmetic::extended
                           ? old + add.value
                           : static_cast<double>(old) + static_cast<double>(add.value);
      if (a->type == i32) {  // integer atomics wrap around
        const auto wrapped = static_cast<int32_t>(static_cast<uint32_t>(static_cast<int64_t>(sum)));
        m->write(*a, e, wrapped);
      } else {
        m->write(*a, e, m->compiler.round(a->type, sum));
      }
    }
    m->thread = -1;
  };
}

Exec compile_threadfence(StatementCompiler &sc, Where where) {
  Machine *m = &sc.machine();
  return [=](const ActiveThreads &active) {
    m->where = where;
    for (int t : active) m->unfenced_global_write[t] = nullptr;
  };
}

Exec compile_arrival_ticket(StatementCompiler &sc, const intrinsic::ArrivalTicket &op, Where where) {
  Machine *m = &sc.machine();
  Array *counter = &sc.writable_buffer(op.counter, "arrival ticket at");
  if (counter->space != Space::global || counter->type != i32)
    fail("an arrival ticket counts in an i32 global buffer; {} is not one", counter->describe());
  Array *dst = &sc.writable_buffer(op.dst, "arrival ticket into");
  CompiledExpr counter_index = sc.expr(op.counter_index), dst_index = sc.expr(op.dst_index);
  return [=](const ActiveThreads &active) {
    m->where = where;
    // The ticket tells the block that arrives last that this block's results are there: every thread's
    // global writes must have been fenced before it, or they may land after that block reads them.
    for (int t = 0; t < m->threads; ++t)
      if (Where unfenced = m->unfenced_global_write[t])
        fail(
            "arrival ticket taken while thread {} of the block has a global write not yet fenced (at `{}`): "
            "the block that arrives last may read it before it lands; put intrinsic::threadfence() after "
            "the writes and a barrier before the ticket",
            t, *unfenced);
    for (int t : active) {
      m->thread = t;
      const int64_t c = m->element(*counter, counter_index(m->slots[t]), "arrival ticket at");
      const Real before = m->read(*counter, c);
      m->write(*counter, c, before + 1);
      m->unfenced_global_write[t] = nullptr;  // the atomic is not a write the ticket publishes
      m->write(*dst, m->element(*dst, dst_index(m->slots[t]), "arrival ticket into"), before);
    }
    m->thread = -1;
  };
}

}  // namespace twist::reference::interpreter
