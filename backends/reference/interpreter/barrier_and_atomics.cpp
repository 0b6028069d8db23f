// The block-wide barrier, atomic additions to global memory, and the fences and tickets by which blocks
// hand results to each other.
#include <cstdint>

#include "backends/reference/interpreter/intrinsic_statements.h"
#include "lang/error.h"

namespace twist::reference::interpreter {

Exec compile_barrier(StatementCompiler &sc, int id, int threads, Where where) {
  Machine *m = &sc.machine();
  if (threads > m->threads)
    fail("barrier {} waits for {} threads, but the block has {}", id, threads, m->threads);
  return [=](const ActiveThreads &active) {
    m->where = where;
    const int arriving = static_cast<int>(active.size());
    // Accesses before the barrier are ordered before those after it: a new epoch of the race checks.
    if (arriving == threads) {
      ++m->epoch;
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
          "named barrier {} reached by {} threads (threads {} to {} among them), but it waits for {}: on a "
          "GPU the threads would hang; give it the count of the threads that reach it",
          id, arrived, active.front(), active.back(), threads);
    };
    // A barrier reached by part of the block completes when other groups of threads (the other roles of a
    // warp-specialized kernel) bring the count up.
    Machine::BarrierState &b = m->barriers[id];
    b.arrived += arriving;
    if (b.arrived > threads) fail("{}", describe(b.arrived));
    if (b.arrived == threads) {
      b.arrived = 0;
      ++b.completed;
      ++m->epoch;
      return;
    }
    if (!m->groups.concurrent()) fail("{}", describe(arriving));
    const int64_t completed = b.completed;
    m->groups.wait_until([&b, completed] { return b.completed != completed; },
                         [&b, describe] { return describe(b.arrived); });
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
