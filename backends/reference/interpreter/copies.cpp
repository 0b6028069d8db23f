// The copy intrinsic, synchronous and asynchronous (cp.async), and the commit and wait of async groups.
#include "backends/reference/interpreter/intrinsic_statements.h"
#include "lang/error.h"

namespace twist::reference::interpreter {

namespace {

// What one thread's copy reads and where it writes, gathered before anything is written.
struct CopyByThread {
  int thread = 0;
  PendingCopy copy;
};

}  // namespace

Exec compile_copy(StatementCompiler &sc, const intrinsic::Copy &op, Where where) {
  Machine *m = &sc.machine();
  Array *dst = &sc.writable_buffer(op.dst, "copy into");
  Array *src = &sc.buffer(op.src, "copy from");
  if (dst->type != src->type)
    fail(
        "the copy from {} into {} changes the element type; a copy moves bytes, so both buffers must hold "
        "the "
        "same type",
        src->describe(), dst->describe());
  const int element_bytes = dst->type.bytes();
  if (op.bytes % element_bytes != 0 || op.bytes / element_bytes > PendingCopy::kMaxElements)
    fail("a copy of {} bytes does not move whole {} elements", op.bytes, type_name(dst->type));
  if (op.async && (dst->space != Space::shared || src->space != Space::global))
    fail("the cp.async copies from {} into {}; cp.async copies from global into shared memory",
         src->describe(), dst->describe());
  const int elements = op.bytes / element_bytes;
  const int bytes = op.bytes;
  const bool async = op.async;
  CompiledExpr dst_index = sc.expr(op.dst_index), src_index = sc.expr(op.src_index),
               src_bytes = sc.expr(op.src_bytes);

  // Both addresses must be aligned to the copy's size; every array starts at an address aligned to at least
  // 16 bytes (cudaMalloc and the shared-memory layout both guarantee it), so the offset decides.
  auto check_aligned = [=](const Array &a, int64_t e, const char *side) {
    if ((e * element_bytes) % bytes != 0)
      fail(
          "the {}-byte copy {} {}[{}] is not {}-byte aligned (its byte offset in {} is {}); copies need "
          "addresses aligned to their size, so align the rows of the tile or copy fewer bytes at a time",
          bytes, side, a.name, e, bytes, a.name, e * element_bytes);
  };

  std::vector<CopyByThread> issued;
  return [=](const ActiveThreads &active) mutable {
    m->where = where;
    issued.resize(active.size());
    for (size_t k = 0; k < active.size(); ++k) {
      const int t = m->thread = active[k];
      const Real read_bytes = src_bytes(m->slots[t]);
      const auto whole_bytes = static_cast<int64_t>(read_bytes);
      if (read_bytes != whole_bytes || whole_bytes < 0 || whole_bytes > bytes ||
          whole_bytes % element_bytes != 0)
        fail(
            "the copy reads {} source bytes; that must be a whole number of {} elements between 0 and the "
            "copy's {} bytes",
            static_cast<double>(read_bytes), type_name(src->type), bytes);
      const int read = static_cast<int>(whole_bytes) / element_bytes;
      const auto d = static_cast<int64_t>(dst_index(m->slots[t]));
      for (int j = 0; j < elements; ++j) m->element(*dst, static_cast<Real>(d + j), "copy into");
      check_aligned(*dst, d, "into");
      const auto s = static_cast<int64_t>(src_index(m->slots[t]));
      check_aligned(*src, s, "from");
      PendingCopy &copy = issued[k].copy;
      issued[k].thread = t;
      copy = PendingCopy{dst, d, elements, {}, where};
      // Only the bytes actually read must be in bounds: that is how copies at a tensor's edge stay legal.
      for (int j = 0; j < read; ++j)
        copy.values[j] = m->read(*src, m->element(*src, static_cast<Real>(s + j), "copy from"));
      for (int j = read; j < elements; ++j) copy.values[j] = 0;
    }
    for (const CopyByThread &c : issued) {
      m->thread = c.thread;
      if (async) {
        for (int j = 0; j < elements; ++j) m->begin_copy_into(*dst, c.copy.dst_index + j);
        m->async[c.thread].uncommitted.push_back(c.copy);
      } else {
        for (int j = 0; j < elements; ++j) m->write(*dst, c.copy.dst_index + j, c.copy.values[j]);
      }
    }
    m->thread = -1;
  };
}

Exec compile_async_commit(StatementCompiler &sc, Where where) {
  Machine *m = &sc.machine();
  return [=](const ActiveThreads &active) {
    m->where = where;
    // A commit with no copies since the last one still closes a group (an empty one), as on the GPU: waits
    // count groups, not copies.
    for (int t : active) {
      AsyncCopies &copies = m->async[t];
      copies.committed.push_back(std::move(copies.uncommitted));
      copies.uncommitted.clear();
    }
  };
}

Exec compile_async_wait(StatementCompiler &sc, int pending, Where where) {
  Machine *m = &sc.machine();
  if (pending < 0) fail("async_wait({}) waits for a negative number of groups", pending);
  return [=](const ActiveThreads &active) {
    m->where = where;
    // Copies not yet committed belong to no group, so a wait does not complete them.
    for (int t : active) {
      m->thread = t;
      AsyncCopies &copies = m->async[t];
      while (static_cast<int>(copies.committed.size()) > pending) {
        for (const PendingCopy &copy : copies.committed.front()) m->land_copy(copy, t);
        copies.committed.pop_front();
      }
    }
    m->thread = -1;
  };
}

}  // namespace twist::reference::interpreter
