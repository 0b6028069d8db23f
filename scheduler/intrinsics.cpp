#include "scheduler/intrinsics.h"

#include "lang/error.h"
#include "lang/expr.h"
#include "lang/types.h"

namespace twist::intrinsic {

using namespace Halide::Internal;

namespace {

Stmt make(const std::string &op, const std::vector<Expr> &args) {
  return Evaluate::make(Call::make(Halide::Int(32), "twist." + op, args, Call::Extern));
}

const Call *match(const Stmt &s, const std::string &op) {
  const auto *e = s.as<Evaluate>();
  if (!e) return nullptr;
  const auto *c = e->value.as<Call>();
  return c && c->call_type == Call::Extern && c->name == "twist." + op ? c : nullptr;
}

Expr name(const std::string &s) {
  return StringImm::make(s);
}
std::string name_of(const Expr &e) {
  return e.as<StringImm>()->value;
}
int int_of(const Expr &e) {
  return static_cast<int>(e.as<IntImm>()->value);
}

}  // namespace

Stmt barrier() {
  return make("barrier", {});
}
bool is_barrier(const Stmt &s) {
  return match(s, "barrier") != nullptr;
}

namespace {

Stmt named_barrier_op(const char *op, const Expr &id, int threads) {
  const int64_t *constant_id = as_const_int(id);
  TWIST_CHECK(threads > 0 && threads % 32 == 0 && (!constant_id || (*constant_id >= 1 && *constant_id < 16)),
              "named barrier {} over {} threads: ids are 1 to 15, counts multiples of 32", id, threads);
  return make(op, {Halide::cast(Halide::Int(32), id), threads});
}

}  // namespace

Stmt named_barrier(const Expr &id, int threads) {
  return named_barrier_op("named_barrier", id, threads);
}

Stmt named_barrier_arrive(const Expr &id, int threads) {
  return named_barrier_op("named_barrier_arrive", id, threads);
}

std::optional<NamedBarrier> as_named_barrier(const Stmt &s) {
  for (const bool arrive : {false, true})
    if (const Call *c = match(s, arrive ? "named_barrier_arrive" : "named_barrier"))
      return NamedBarrier{c->args[0], int_of(c->args[1]), arrive};
  return std::nullopt;
}

Stmt copy(const Copy &c) {
  TWIST_CHECK(c.bytes == 4 || c.bytes == 8 || c.bytes == 16, "copy of {} bytes", c.bytes);
  return make("copy", {name(c.dst), c.dst_index, name(c.src), c.src_index, c.bytes, c.src_bytes,
                       Halide::Expr(c.async ? 1 : 0)});
}

std::optional<Copy> as_copy(const Stmt &s) {
  const Call *c = match(s, "copy");
  if (!c) return std::nullopt;
  return Copy{name_of(c->args[0]), c->args[1], name_of(c->args[2]),    c->args[3],
              int_of(c->args[4]),  c->args[5], int_of(c->args[6]) != 0};
}

Stmt async_commit() {
  return make("async_commit", {});
}
bool is_async_commit(const Stmt &s) {
  return match(s, "async_commit") != nullptr;
}

Stmt async_wait(int pending) {
  return make("async_wait", {pending});
}
std::optional<int> as_async_wait(const Stmt &s) {
  const Call *c = match(s, "async_wait");
  if (!c) return std::nullopt;
  return int_of(c->args[0]);
}

// Printed as the instruction it is (twist.ldmatrix or twist.stmatrix), its destination first.
Stmt matrix_move(const MatrixMove &m) {
  const bool load = m.direction == MatrixMove::Direction::load;
  TWIST_CHECK(m.matrices == 1 || m.matrices == 2 || m.matrices == 4, "{} of {} matrices",
              load ? "ldmatrix" : "stmatrix", m.matrices);
  const Expr registers = name(m.registers), shared = name(m.shared), transpose = m.transpose ? 1 : 0;
  if (load)
    return make("ldmatrix", {registers, m.registers_index, m.matrices, transpose, shared, m.shared_index});
  return make("stmatrix", {shared, m.shared_index, m.matrices, transpose, registers, m.registers_index});
}

std::optional<MatrixMove> as_matrix_move(const Stmt &s) {
  const Call *load = match(s, "ldmatrix"), *c = load ? load : match(s, "stmatrix");
  if (!c) return std::nullopt;
  const int registers = load ? 0 : 4, shared = load ? 4 : 0;  // the destination's arguments come first
  return MatrixMove{.direction = load ? MatrixMove::Direction::load : MatrixMove::Direction::store,
                    .registers = name_of(c->args[registers]),
                    .registers_index = c->args[registers + 1],
                    .shared = name_of(c->args[shared]),
                    .shared_index = c->args[shared + 1],
                    .matrices = int_of(c->args[2]),
                    .transpose = int_of(c->args[3]) != 0};
}

Stmt mma(const Mma &m) {
  return make("mma",
              {name(m.d), m.d_index, name(m.a), m.a_index, name(m.b), m.b_index, name(m.c), m.c_index});
}

std::optional<Mma> as_mma(const Stmt &s) {
  const Call *c = match(s, "mma");
  if (!c) return std::nullopt;
  return Mma{name_of(c->args[0]), name_of(c->args[2]), name_of(c->args[4]), name_of(c->args[6]),
             c->args[1],          c->args[3],          c->args[5],          c->args[7]};
}

Stmt shuffle_xor(const ShuffleXor &s) {
  return make("shuffle_xor", {name(s.dst), s.dst_index, s.value, s.lane_mask});
}

std::optional<ShuffleXor> as_shuffle_xor(const Stmt &s) {
  const Call *c = match(s, "shuffle_xor");
  if (!c) return std::nullopt;
  return ShuffleXor{name_of(c->args[0]), c->args[1], c->args[2], int_of(c->args[3])};
}

Stmt atomic_add(const AtomicAdd &a) {
  return make("atomic_add", {name(a.buffer), a.index, a.value});
}

std::optional<AtomicAdd> as_atomic_add(const Stmt &s) {
  const Call *c = match(s, "atomic_add");
  if (!c) return std::nullopt;
  return AtomicAdd{name_of(c->args[0]), c->args[1], c->args[2]};
}

Stmt threadfence() {
  return make("threadfence", {});
}
bool is_threadfence(const Stmt &s) {
  return match(s, "threadfence") != nullptr;
}

Stmt arrival_ticket(const ArrivalTicket &t) {
  return make("arrival_ticket", {name(t.counter), t.counter_index, name(t.dst), t.dst_index});
}

std::optional<ArrivalTicket> as_arrival_ticket(const Stmt &s) {
  const Call *c = match(s, "arrival_ticket");
  if (!c) return std::nullopt;
  return ArrivalTicket{name_of(c->args[0]), c->args[1], name_of(c->args[2]), c->args[3]};
}

Stmt mbarrier_init(const MbarrierRef &b, int arrivals) {
  TWIST_CHECK(arrivals > 0, "an mbarrier expects at least one arrival, not {}", arrivals);
  return make("mbarrier_init", {name(b.array), b.index, arrivals});
}

Stmt mbarrier_arrive(const MbarrierRef &b, Expr expect_tx_bytes) {
  if (!expect_tx_bytes.defined()) return make("mbarrier_arrive", {name(b.array), b.index});
  return make("mbarrier_arrive_expect_tx", {name(b.array), b.index, std::move(expect_tx_bytes)});
}

Stmt mbarrier_wait(const MbarrierRef &b, Expr parity) {
  return make("mbarrier_wait", {name(b.array), b.index, std::move(parity)});
}

Stmt mbarrier_arrive_cluster(const MbarrierRef &b, Expr cta) {
  return make("mbarrier_arrive_cluster", {name(b.array), b.index, std::move(cta)});
}

std::optional<MbarrierOp> as_mbarrier(const Stmt &s) {
  using Kind = MbarrierOp::Kind;
  if (const Call *c = match(s, "mbarrier_init"))
    return MbarrierOp{Kind::init, {name_of(c->args[0]), c->args[1]}, int_of(c->args[2]), Expr(), Expr(),
                      Expr()};
  if (const Call *c = match(s, "mbarrier_arrive"))
    return MbarrierOp{Kind::arrive, {name_of(c->args[0]), c->args[1]}, 0, Expr(), Expr(), Expr()};
  if (const Call *c = match(s, "mbarrier_arrive_expect_tx"))
    return MbarrierOp{Kind::arrive, {name_of(c->args[0]), c->args[1]}, 0, c->args[2], Expr(), Expr()};
  if (const Call *c = match(s, "mbarrier_arrive_cluster"))
    return MbarrierOp{Kind::arrive, {name_of(c->args[0]), c->args[1]}, 0, Expr(), Expr(), c->args[2]};
  if (const Call *c = match(s, "mbarrier_wait"))
    return MbarrierOp{Kind::wait, {name_of(c->args[0]), c->args[1]}, 0, Expr(), c->args[2], Expr()};
  return std::nullopt;
}

Stmt tma_copy(const TmaCopy &c) {
  const size_t dims = c.coordinates.size();
  TWIST_CHECK(dims >= 1 && dims <= 5, "a TMA copy has 1 to 5 coordinates, not {}", dims);
  TWIST_CHECK(c.load == !c.barrier.array.empty(), "a TMA load names an mbarrier and a store does not");
  TWIST_CHECK(c.load || !c.multicast.defined(), "a TMA store does not multicast");
  std::vector<Expr> args = {name(c.tensor_map), name(c.shared), c.shared_index};
  if (c.load) {
    args.push_back(name(c.barrier.array));
    args.push_back(c.barrier.index);
  }
  if (c.multicast.defined()) args.push_back(c.multicast);
  args.insert(args.end(), c.coordinates.begin(), c.coordinates.end());
  return make(c.multicast.defined() ? "tma_load_multicast" : c.load ? "tma_load" : "tma_store", args);
}

// Arguments: the map, the shared array and index, then a load's barrier and index, a multicast's CTA mask,
// then the coordinates.
std::optional<TmaCopy> as_tma_copy(const Stmt &s) {
  const Call *c = match(s, "tma_load");
  const Call *multicast = c ? nullptr : match(s, "tma_load_multicast");
  if (multicast) c = multicast;
  const bool load = c != nullptr;
  if (!c) c = match(s, "tma_store");
  if (!c) return std::nullopt;
  TmaCopy copy{load, name_of(c->args[0]), name_of(c->args[1]), c->args[2], {}, {}, {}};
  size_t first = 3;
  if (load) {
    copy.barrier = {name_of(c->args[3]), c->args[4]};
    first = 5;
  }
  if (multicast) copy.multicast = c->args[first++];
  copy.coordinates.assign(c->args.begin() + static_cast<std::ptrdiff_t>(first), c->args.end());
  return copy;
}

Stmt tma_store_commit() {
  return make("tma_store_commit", {});
}
Stmt tma_store_wait(int pending) {
  return make("tma_store_wait", {pending});
}
bool is_tma_store_commit(const Stmt &s) {
  return match(s, "tma_store_commit") != nullptr;
}
std::optional<int> as_tma_store_wait(const Stmt &s) {
  const Call *c = match(s, "tma_store_wait");
  if (!c) return std::nullopt;
  return int_of(c->args[0]);
}

Stmt fence_proxy_async() {
  return make("fence_proxy_async", {});
}
bool is_fence_proxy_async(const Stmt &s) {
  return match(s, "fence_proxy_async") != nullptr;
}

Stmt cluster_sync() {
  return make("cluster_sync", {});
}
bool is_cluster_sync(const Stmt &s) {
  return match(s, "cluster_sync") != nullptr;
}

Stmt fence_mbarrier_init() {
  return make("fence_mbarrier_init", {});
}
bool is_fence_mbarrier_init(const Stmt &s) {
  return match(s, "fence_mbarrier_init") != nullptr;
}

namespace {

void push_operand(std::vector<Expr> &args, const WgmmaOperand &o) {
  args.insert(args.end(), {name(o.array), o.index, o.leading_bytes, o.stride_bytes,
                           static_cast<int>(o.swizzle), Expr(o.mn_major ? 1 : 0)});
}

WgmmaOperand operand_at(const Call *c, size_t first) {
  const auto &a = c->args;
  return {name_of(a[first]),
          a[first + 1],
          int_of(a[first + 2]),
          int_of(a[first + 3]),
          static_cast<TensorMap::Swizzle>(int_of(a[first + 4])),
          int_of(a[first + 5]) != 0};
}

constexpr size_t kOperandArgs = 6;

}  // namespace

// Arguments: n, d, d_index, accumulate, then B's operand, then A's: either its operand or the register
// array and index.
Stmt wgmma(const Wgmma &w) {
  TWIST_CHECK(w.a.has_value() == w.a_registers.empty(), "a wgmma's A is in shared memory or in registers");
  std::vector<Expr> args = {w.n, name(w.d), w.d_index, w.accumulate};
  push_operand(args, w.b);
  if (w.a) {
    push_operand(args, *w.a);
  } else {
    args.push_back(name(w.a_registers));
    args.push_back(w.a_index);
  }
  return make("wgmma", args);
}

std::optional<Wgmma> as_wgmma(const Stmt &s) {
  const Call *c = match(s, "wgmma");
  if (!c) return std::nullopt;
  Wgmma w;
  w.n = int_of(c->args[0]);
  w.d = name_of(c->args[1]);
  w.d_index = c->args[2];
  w.accumulate = c->args[3];
  w.b = operand_at(c, 4);
  const size_t a_first = 4 + kOperandArgs;
  if (c->args.size() == a_first + kOperandArgs) {
    w.a = operand_at(c, a_first);
  } else {
    w.a_registers = name_of(c->args[a_first]);
    w.a_index = c->args[a_first + 1];
  }
  return w;
}

Stmt wgmma_fence(const std::vector<std::string> &accumulators) {
  std::vector<Expr> args;
  for (const std::string &a : accumulators) args.push_back(name(a));
  return make("wgmma_fence", args);
}
Stmt wgmma_commit() {
  return make("wgmma_commit", {});
}
Stmt wgmma_wait(int pending, const std::vector<std::string> &accumulators) {
  std::vector<Expr> args = {pending};
  for (const std::string &a : accumulators) args.push_back(name(a));
  return make("wgmma_wait", args);
}
bool is_wgmma_fence(const Stmt &s) {
  return match(s, "wgmma_fence") != nullptr;
}
bool is_wgmma_commit(const Stmt &s) {
  return match(s, "wgmma_commit") != nullptr;
}
std::optional<int> as_wgmma_wait(const Stmt &s) {
  const Call *c = match(s, "wgmma_wait");
  if (!c) return std::nullopt;
  return int_of(c->args[0]);
}
std::vector<std::string> wgmma_ordered_accumulators(const Stmt &s) {
  const Call *c = match(s, "wgmma_fence");
  const size_t first = c ? 0 : 1;
  if (!c) c = match(s, "wgmma_wait");
  TWIST_CHECK(c, "the statement is neither a wgmma_fence nor a wgmma_wait");
  std::vector<std::string> names;
  for (size_t i = first; i < c->args.size(); ++i) names.push_back(name_of(c->args[i]));
  return names;
}

Stmt setmaxnreg(int registers, bool increase) {
  TWIST_CHECK(registers >= 24 && registers <= 256 && registers % 8 == 0,
              "setmaxnreg takes 24 to 256 registers in steps of 8, not {}", registers);
  return make("setmaxnreg", {registers, Expr(increase ? 1 : 0)});
}

std::optional<SetMaxNreg> as_setmaxnreg(const Stmt &s) {
  const Call *c = match(s, "setmaxnreg");
  if (!c) return std::nullopt;
  return SetMaxNreg{int_of(c->args[0]), int_of(c->args[1]) != 0};
}

bool is_intrinsic(const Stmt &s) {
  const auto *e = s.as<Evaluate>();
  const auto *c = e ? e->value.as<Call>() : nullptr;
  return c && c->call_type == Call::Extern && c->name.rfind("twist.", 0) == 0;
}

Expr thread_index() {
  return Variable::make(Halide::Int(32), kThreadIndex);
}
Expr block_index(int dim) {
  return Variable::make(Halide::Int(32), kBlockIndex[dim]);
}

}  // namespace twist::intrinsic
