#include "backends/reference/interpreter/machine.h"

#include "lang/error.h"

namespace twist::reference::interpreter {

namespace {

// Statement texts in messages are cut here: a whole loop body would drown the message.
constexpr size_t kMaxStatementText = 200;

std::string quoted(Where where) {
  return where ? fmt::format("`{}`", *where) : std::string("an unknown statement");
}

}  // namespace

Machine::Machine(const Kernel &kernel, const InterpretOptions &options, const Machine *peer)
    : kernel(kernel),
      options(options),
      compiler(options.arithmetic),
      threads(kernel.threads),
      shared_layout(shared_arrays(kernel.body)),
      position(peer ? peer->position : std::make_shared<Position>()),
      shared_groups(peer ? peer->shared_groups : std::make_shared<ThreadGroups>(where, thread)) {}

Machine &Machine::cta(int64_t rank) {
  if (!cluster || rank < 0 || rank >= static_cast<int64_t>(cluster->ctas.size()))
    fail(
        "the block reaches the shared memory of cluster CTA {}, but its cluster has {} block(s) "
        "(Kernel::cluster); address ranks 0 to {}",
        rank, cluster ? cluster->ctas.size() : 1, cluster ? cluster->ctas.size() - 1 : 0);
  Machine &peer = *cluster->ctas[rank];
  if (peer.exited)
    fail(
        "the block reaches the shared memory of cluster CTA {}, which has exited: on a GPU that memory is "
        "gone; end the kernel with cluster_sync so that no block exits while a peer may reach it",
        rank);
  return peer;
}

Array &Machine::shared_array(const std::string &name) {
  const auto found = shared_by_name.find(name);
  TWIST_CHECK(found != shared_by_name.end(), "no shared array {} in the block", name);
  return *found->second;
}

Where Machine::describe(std::string text) {
  if (text.size() > kMaxStatementText) {
    text.resize(kMaxStatementText - 3);
    text += "...";
  }
  return &texts_.emplace_back(std::move(text));
}

Array &Machine::add_array(Array array) {
  return arrays_.emplace_back(std::move(array));
}

std::string Machine::location() const {
  std::string s = fmt::format("kernel '{}'", kernel.name);
  if (running && cluster && cluster->ctas.size() > 1) {
    std::string blocks;
    for (const Machine *cta : cluster->ctas)
      blocks += fmt::format("{}({}, {}, {})", blocks.empty() ? "" : ", ", cta->block[0], cta->block[1],
                            cta->block[2]);
    s += fmt::format(", the cluster of blocks {}", blocks);
  } else if (running) {
    s += fmt::format(", block ({}, {}, {})", block[0], block[1], block[2]);
  }
  if (running && thread >= 0) s += fmt::format(", thread {}", thread);
  if (where) s += fmt::format(", at `{}`", *where);
  return s;
}

int64_t Machine::element(const Array &a, Real index, const char *access) const {
  if (!(index >= 0 && index < static_cast<Real>(a.size)))
    fail(
        "the {} {}[{}] is out of bounds: {} has {} elements (indices 0 to {}); guard the access or size the "
        "array to cover it",
        access, a.name, static_cast<double>(index), a.describe(), a.size, a.size - 1);
  return static_cast<int64_t>(index);
}

Real Machine::read(Array &a, int64_t e) {
  switch (a.space) {
    case Space::registers:
      if (!a.wgmma_holds.empty() && a.wgmma_holds[thread * a.size + e] > 0) held_register(a, e, "read of");
      return a.values[thread * a.size + e];
    case Space::shared:
      if (!a.accesses.empty()) check_read(a, e);
      return a.values[e];
    case Space::global:
      if (!a.written.empty() && !a.written[e])
        fail(
            "the read of {}[{}] reads an element that no block has written yet: with blocks in any order, "
            "a block may read another block's results only after that block's arrival ticket says they are "
            "there (intrinsic::arrival_ticket)",
            a.name, e);
      return a.values[e];
  }
  return 0;
}

void Machine::write(Array &a, int64_t e, Real value) {
  switch (a.space) {
    case Space::registers:
      if (!a.wgmma_holds.empty() && a.wgmma_holds[thread * a.size + e] > 0) held_register(a, e, "write of");
      a.values[thread * a.size + e] = value;
      return;
    case Space::shared:
      if (!a.accesses.empty()) {
        check_write(a, e, "write of");
        SharedAccess &access = a.accesses[e];
        access.write_epoch = epoch;
        access.writer = thread;
        access.written_at = where;
        access.writer_fences = proxy_fences.at(thread);
      }
      if (!a.origins.empty()) a.origins[e] = TmaOrigin{};
      a.values[e] = value;
      return;
    case Space::global:
      if (!a.written.empty()) a.written[e] = true;
      if (thread >= 0) unfenced_global_write[thread] = where;
      a.values[e] = value;
      return;
  }
}

void Machine::begin_copy_into(Array &a, int64_t e, bool by_tma) {
  if (a.accesses.empty()) return;
  check_write(a, e, by_tma ? "TMA load into" : "cp.async into");
  SharedAccess &access = a.accesses[e];
  ++access.copies_in_flight;
  access.copier = thread;
  access.copied_at = where;
  access.copied_by_tma = by_tma;
}

void Machine::land_copy(const PendingCopy &copy, int issuer) {
  Array &a = *copy.dst;
  for (int k = 0; k < copy.elements; ++k) {
    const int64_t e = copy.dst_index + k;
    a.values[e] = copy.values[k];
    if (a.accesses.empty()) continue;
    SharedAccess &access = a.accesses[e];
    --access.copies_in_flight;
    access.write_epoch = epoch;
    access.writer = issuer;
    access.written_at = copy.issued_at;
    access.writer_fences = proxy_fences.at(issuer);
  }
}

void Machine::in_flight(const Array &a, int64_t e, const char *access) const {
  const SharedAccess &s = a.accesses[e];
  if (s.copied_by_tma)
    fail(
        "{} {}[{}] by thread {} while a TMA load into it (issued by thread {} at {}) is in flight: missing "
        "mbarrier_wait on the barrier the load completes on",
        access, a.name, e, thread, s.copier, quoted(s.copied_at));
  fail(
      "{} {}[{}] by thread {} while a cp.async into it (issued by thread {} at {}) is in flight: missing "
      "async_wait/barrier",
      access, a.name, e, thread, s.copier, quoted(s.copied_at));
}

void Machine::held_register(const Array &a, int64_t e, const char *access) const {
  fail(
      "{} {}[{}] by thread {} while a wgmma that uses it is in flight: a wgmma's accumulators (and register "
      "A) may be touched only after the wgmma_wait that retires its group",
      access, a.name, e, thread);
}

void Machine::hold(HeldGroups &groups, Array &a, int64_t index) {
  if (a.space == Space::registers) {
    if (a.wgmma_holds.empty()) a.wgmma_holds.assign(a.values.size(), 0);
    ++a.wgmma_holds[index];
  } else if (!a.accesses.empty()) {
    SharedAccess &access = a.accesses[index];
    ++access.async_readers;
    access.async_read_at = where;
  } else {
    return;
  }
  groups.open.push_back({&a, index});
}

void Machine::release(const AsyncHold &h) {
  if (h.array->space == Space::registers)
    --h.array->wgmma_holds[h.index];
  else
    --h.array->accesses[h.index].async_readers;
}

void Machine::retire(HeldGroups &groups, int pending) {
  while (static_cast<int>(groups.committed.size()) > pending) {
    for (const AsyncHold &h : groups.committed.front()) release(h);
    groups.committed.pop_front();
  }
}

void Machine::land_tma(Array &a, int64_t e, Real value, const TmaOrigin &origin, int issuer,
                       Where issued_at) {
  a.values[e] = value;
  if (a.origins.empty()) a.origins.assign(a.size, TmaOrigin{});
  a.origins[e] = origin;
  if (a.accesses.empty()) return;
  SharedAccess &access = a.accesses[e];
  --access.copies_in_flight;
  // The wait that landed it orders it before every later access of the waiting threads; the interpreter
  // takes it as written before the current barrier interval.
  access.write_epoch = -1;
  access.writer = issuer;
  access.written_at = issued_at;
  access.writer_fences = -1;
}

void Machine::check_read(Array &a, int64_t e) {
  SharedAccess &s = a.accesses[e];
  if (s.copies_in_flight > 0) in_flight(a, e, "read of");
  if (s.write_epoch == epoch && s.writer != thread)
    fail(
        "race on {}[{}]: thread {} reads it after thread {} wrote it at {} with no barrier in between; add a "
        "barrier between the write and the read",
        a.name, e, thread, s.writer, quoted(s.written_at));
  if (s.read_epoch != epoch) {
    s.read_epoch = epoch;
    s.reader = thread;
    s.read_at = where;
    s.other_reader = -1;
  } else if (s.reader != thread && s.other_reader < 0) {
    s.other_reader = thread;
    s.other_read_at = where;
  }
}

void Machine::check_write(Array &a, int64_t e, const char *access) {
  const SharedAccess &s = a.accesses[e];
  if (s.copies_in_flight > 0) in_flight(a, e, access);
  if (s.async_readers > 0)
    fail(
        "{} {}[{}] by thread {} while an asynchronous read of it (a wgmma or TMA store at {}) is in flight: "
        "wait for it (wgmma_wait, tma_store_wait) before the tile is overwritten",
        access, a.name, e, thread, quoted(s.async_read_at));
  if (s.write_epoch == epoch && s.writer != thread)
    fail(
        "race on {}[{}]: thread {} writes it after thread {} wrote it at {} with no barrier in between; add "
        "a "
        "barrier between the two writes, or let one thread write it",
        a.name, e, thread, s.writer, quoted(s.written_at));
  if (s.read_epoch != epoch) return;
  const bool first_is_other = s.reader != thread;
  if (!first_is_other && s.other_reader < 0) return;
  fail(
      "race on {}[{}]: thread {} writes it after thread {} read it at {} with no barrier in between; add a "
      "barrier between the read and the write",
      a.name, e, thread, first_is_other ? s.reader : s.other_reader,
      quoted(first_is_other ? s.read_at : s.other_read_at));
}

}  // namespace twist::reference::interpreter
