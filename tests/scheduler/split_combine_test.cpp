// SplitCombine::last_block: the parts kernel's last block of each output tile folds the tile's parts. Run
// on the interpreter in three block orders against the oracle (decoding: grouped-query, odd lengths, a
// window, parts that do not divide the key tiles; GEMM split-K on the mma.sync and Hopper paths at odd
// shapes; a monoid that does not commute); the arrival counters left at zero for the next launch; a missing
// fence and a read of a part not yet written refused; the kernels compiled for sm_80 and sm_90a.
#include <doctest/doctest.h>

#include "algebra/builtins.h"
#include "apps/attention/attention.h"
#include "apps/gemm/gemm.h"
#include "backends/cuda/codegen/cuda_printer.h"
#include "backends/cuda/runtime/kernel_cache.h"
#include "backends/reference/interpreter/interpreter.h"
#include "scheduler/arguments.h"
#include "scheduler/intrinsics.h"
#include "scheduler/lower.h"
#include "tests/error_capture.h"
#include "tests/scheduler/attention_support.h"
#include "tests/scheduler/gemm_support.h"
#include "tests/scheduler/lowering_support.h"

using namespace twist;
using namespace twist::apps;
using twist::testing::affine_rows;
using twist::testing::AffineRows;
using twist::testing::attention_sizes;
using twist::testing::block_order_name;
using twist::testing::compile_for_both_targets;
using twist::testing::contains;
using twist::testing::error_of;
using twist::testing::gemm_sizes;
using twist::testing::in_block_order;
using twist::testing::kBlockOrders;
using twist::testing::lowered_error;
using twist::testing::random_inputs;
using BlockOrder = reference::InterpretOptions::BlockOrder;

namespace {

// One kernel, whose counters are a zeroed workspace and whose source fences, takes tickets and folds.
void check_one_kernel(const LoweredProgram &p) {
  REQUIRE(p.kernels.size() == 1);
  int zeroed = 0;
  for (const Workspace &w : p.workspaces) zeroed += w.zeroed;
  CHECK(zeroed == 1);
  CHECK(contains(p.kernels[0].schedule_summary, "the last of a tile's"));
  for (const std::string &source : compile_for_both_targets(p)) {
    CHECK(contains(source, "__threadfence();"));
    CHECK(contains(source, "= atomicAdd(&"));
  }
}

// The statements of a kernel body with `drop` removed, or with `change` applied to if-conditions.
struct Edit : Halide::Internal::IRMutator {
  std::function<bool(const Halide::Internal::Stmt &)> drop;
  std::function<Halide::Expr(const Halide::Expr &)> change;
  using IRMutator::visit;
  Halide::Internal::Stmt visit(const Halide::Internal::Evaluate *op) override {
    if (drop && drop(op)) return Halide::Internal::Evaluate::make(0);
    return IRMutator::visit(op);
  }
  Halide::Internal::Stmt visit(const Halide::Internal::IfThenElse *op) override {
    Halide::Internal::Stmt s = IRMutator::visit(op);
    const auto *i = s.as<Halide::Internal::IfThenElse>();
    if (!change || !i) return s;
    return Halide::Internal::IfThenElse::make(change(i->condition), i->then_case, i->else_case);
  }
};

}  // namespace

TEST_CASE("decoding with each tile's last block folding the parts matches the oracle in any block order") {
  struct Problem {
    const char *name;
    AttentionOptions options;
    int batch, heads, keys, parts;  // parts 0: the rule's
  };
  for (const Problem &c :
       {Problem{"D 64, 1000 keys",
                {.dtype = f16, .head_dim = 64, .decode = true, .prefix = "ld1"},
                1,
                2,
                1000,
                0},
        Problem{"D 128, GQA 4, 777 keys",
                {.dtype = bf16, .head_dim = 128, .group = 4, .decode = true, .prefix = "ld2"},
                1,
                8,
                777,
                0},
        Problem{"D 64, GQA 8, a window of 100 over 513 keys",
                {.dtype = f16, .head_dim = 64, .group = 8, .window = 100, .decode = true, .prefix = "ld3"},
                2,
                8,
                513,
                0},
        // 16 tiles of 64 keys in 5 parts of 4: the fifth part has no tile (its state is the identity).
        Problem{"D 64, GQA 2, 1000 keys in 5 parts",
                {.dtype = f16, .head_dim = 64, .group = 2, .decode = true, .prefix = "ld4"},
                1,
                4,
                1000,
                5}}) {
    Attention a = make_attention(c.options);
    AttentionTiling t = decode_tiling({.head_dim = c.options.head_dim,
                                       .group = c.options.group,
                                       .batch_kv_heads = int64_t(c.batch) * (c.heads / c.options.group),
                                       .keys = c.keys,
                                       .element_bytes = 2});
    if (c.parts) t.split_kv = c.parts;
    t.split_combine = SplitCombine::last_block;
    REQUIRE(t.split_kv > 1);
    const auto scalars = attention_sizes(a, c.batch, c.heads, 1, c.keys);
    const Schedule s = schedule_decode(a, t);
    const auto inputs = random_inputs(a.out, scalars, 31);
    for (BlockOrder order : kBlockOrders) {
      const double err = lowered_error(a.out, s, inputs, scalars, in_block_order(order));
      INFO(c.name, " (", t.name(), "), blocks ", block_order_name(order), ": error ", err);
      CHECK(err < (c.options.dtype == f16 ? 2e-3 : 1e-2));
    }
    if (c.parts) check_one_kernel(lower(a.out, s, Target::sm90a()));
  }
}

TEST_CASE("GEMM split-K with each tile's last block folding: mma.sync and Hopper, odd shapes, any order") {
  Gemm g = make_gemm({.input = f16, .output = f16});
  GemmTiling mma;
  mma.block_m = 64, mma.block_n = 64, mma.block_k = 32, mma.warp_m = 32, mma.warp_n = 32, mma.stages = 3;
  mma.split_k = 3;
  mma.split_combine = SplitCombine::last_block;
  // K = 200: 7 k-tiles in 3 parts of 3, the last of one; M = 1 and 16: the skinny shapes split-K is for.
  for (const auto &[m, n, k] : {std::tuple{70, 66, 200}, std::tuple{1, 40, 200}, std::tuple{16, 130, 96}}) {
    const auto scalars = gemm_sizes(g, m, n, k);
    const auto inputs = random_inputs(g.out, scalars, 41);
    for (BlockOrder order : kBlockOrders) {
      INFO("mma.sync ", m, "x", n, "x", k, ", blocks ", block_order_name(order));
      CHECK(lowered_error(g.out, schedule_tensor_core(g, mma), inputs, scalars, in_block_order(order)) <
            1e-3);
    }
  }
  check_one_kernel(lower(g.out, schedule_tensor_core(g, mma), Target::sm90a()));

  for (const bool specialized : {true, false}) {
    HopperTiling h;
    h.block_m = 128, h.block_n = 64, h.warpgroups = 2, h.stages = 2, h.persistent_blocks = 0;
    h.warp_specialized = specialized;
    h.split_k = 3;
    h.split_combine = SplitCombine::last_block;
    // 4 k-tiles of 64 in 3 parts of 2: the third part is empty (the identity).
    const auto scalars = gemm_sizes(g, 100, 72, 200);
    const auto inputs = random_inputs(g.out, scalars, 42);
    for (BlockOrder order : {BlockOrder::reversed, BlockOrder::shuffled}) {
      INFO("Hopper", specialized ? " warp-specialized" : "", ", blocks ", block_order_name(order));
      CHECK(lowered_error(g.out, schedule_hopper(g, h), inputs, scalars, in_block_order(order)) < 1e-3);
    }
    const LoweredProgram p = lower(g.out, schedule_hopper(g, h), Target::sm90a());
    REQUIRE(p.kernels.size() == 1);
    const std::string source = cuda::cuda_source(p.kernels[0]);
    CHECK(contains(source, "__threadfence();"));
    CHECK(contains(source, "= atomicAdd(&"));
    CHECK(!cuda::default_kernel_cache().compile(source, p.kernels[0].name + ".cu", {"sm_90a"}).cubin.empty());
  }
  // A persistent grid gives a block several tiles, so no block is one tile's part.
  HopperTiling persistent;
  persistent.split_k = 2;
  persistent.split_combine = SplitCombine::last_block;
  const std::string refused =
      error_of([&] { lower(g.out, schedule_hopper(g, persistent), Target::sm90a()); });
  CHECK(contains(refused, "persistent()"));
  CHECK(contains(refused, "SplitCombine::kernel"));
}

TEST_CASE("the last block's fold keeps the order of a monoid that does not commute, in any block order") {
  const AffineRows affine = affine_rows("lb");
  const Func &f = affine.f;
  REQUIRE_FALSE(algebra::affine(f64).commutative);
  for (const int parts : {13, 40}) {
    Schedule s;
    s[f].split("i", "io", "it", 32)
        .bind("io", Binding::block_x)
        .bind("it", Binding::thread)
        .split_reduction("lb_r.x", parts, SplitCombine::last_block);
    const std::map<std::string, double> sizes = {{"lb_rows", 35}, {"lb_cols", 1000}};
    const auto inputs = random_inputs(f, sizes, 43);
    for (BlockOrder order : kBlockOrders) {
      INFO(parts, " parts, blocks ", block_order_name(order));
      CHECK(lowered_error(f, s, inputs, sizes, in_block_order(order)) < 1e-9);
    }
  }
}

TEST_CASE("the last block resets its tile's counter, so launches need no clearing between them") {
  Gemm g = make_gemm({.input = f16, .output = f32, .prefix = "rs"});
  GemmTiling t;
  t.block_m = 64, t.block_n = 64, t.block_k = 32, t.warp_m = 32, t.warp_n = 32, t.split_k = 4;
  t.split_combine = SplitCombine::last_block;
  const LoweredProgram p = lower(g.out, schedule_tensor_core(g, t), Target::sm90a());
  REQUIRE(p.kernels.size() == 1);
  const auto scalars = gemm_sizes(g, 100, 136, 256);
  std::map<std::string, reference::HostTensor> buffers = random_inputs(g.out, scalars, 44);
  std::map<std::string, std::vector<int64_t>> shapes;
  for (const auto &[name, tensor] : buffers) shapes[name] = tensor.shape();
  const Scalars bound = bind_arguments(p, shapes, scalars);
  std::string counters;
  for (const Workspace &w : p.workspaces) {
    reference::HostTensor tensor(w.type, evaluate_shape(w.shape, bound));
    tensor.fill(w.zeroed ? 0.0 : std::nan(""));
    if (w.zeroed) counters = w.name;
    buffers.emplace(w.name, std::move(tensor));
  }
  REQUIRE(!counters.empty());
  CHECK(buffers.at(counters).size() == 2 * 3);  // tiles of 64 x 64 over 100 x 136
  const BufferArg &out = p.outputs[0];
  buffers.emplace(out.name, reference::HostTensor(out.type, evaluate_shape(out.shape, bound)));
  reference::run_kernel(p.kernels[0], buffers, bound, in_block_order(BlockOrder::shuffled));
  const reference::HostTensor first = buffers.at(out.name);
  for (int64_t e = 0; e < buffers.at(counters).size(); ++e) CHECK(buffers.at(counters).get_linear(e) == 0);
  // A second launch on the same workspace: the same output, the counters zero again.
  buffers.at(out.name).fill(std::nan(""));
  reference::run_kernel(p.kernels[0], buffers, bound, in_block_order(BlockOrder::reversed));
  CHECK(reference::relative_l2_error(buffers.at(out.name), first) == 0);
  for (int64_t e = 0; e < buffers.at(counters).size(); ++e) CHECK(buffers.at(counters).get_linear(e) == 0);
}

TEST_CASE("a ticket before the fence, and a fold that does not wait for the last ticket, are refused") {
  Gemm g = make_gemm({.input = f16, .output = f32, .prefix = "bad"});
  GemmTiling t;
  t.block_m = 64, t.block_n = 64, t.block_k = 32, t.warp_m = 32, t.warp_n = 32, t.split_k = 3;
  t.split_combine = SplitCombine::last_block;
  // (N a multiple of 8: the kernel itself runs, not its fallback for narrow rows)
  const auto scalars = gemm_sizes(g, 70, 72, 200);
  const auto inputs = random_inputs(g.out, scalars, 45);
  const LoweredProgram lowered = lower(g.out, schedule_tensor_core(g, t), Target::sm90a());
  std::map<std::string, std::vector<int64_t>> shapes;
  for (const auto &[name, tensor] : inputs) shapes[name] = tensor.shape();
  const Scalars bound = bind_arguments(lowered, shapes, scalars);
  {
    LoweredProgram p = lowered;
    Edit no_fence;
    no_fence.drop = [](const Halide::Internal::Stmt &s) { return intrinsic::is_threadfence(s); };
    p.kernels[0].body = no_fence.mutate(p.kernels[0].body);
    const std::string error = error_of([&] { reference::run_program(p, inputs, bound); });
    INFO(error);
    CHECK(contains(error, "not yet fenced"));
    CHECK(contains(error, "intrinsic::threadfence()"));
  }
  {
    // The first block to arrive folds: the parts of the blocks after it are not there yet.
    LoweredProgram p = lowered;
    Edit first_folds;
    first_folds.change = [](const Halide::Expr &c) -> Halide::Expr {
      const auto *eq = c.as<Halide::Internal::EQ>();
      const auto *ticket = eq ? eq->a.as<Halide::Internal::Load>() : nullptr;
      if (!ticket || ticket->name != "split.ticket") return c;
      return eq->a == 0;
    };
    p.kernels[0].body = first_folds.mutate(p.kernels[0].body);
    const std::string error = error_of([&] { reference::run_program(p, inputs, bound); });
    INFO(error);
    CHECK(contains(error, "no block has written yet"));
  }
}

TEST_CASE("kernels lowered for sm_90a wait for the grids before them and let the next one launch early") {
  // The split's parts kernel and its combine kernel: the combine reads the parts' states, so its first
  // instruction waits for the parts kernel to complete (griddepcontrol.wait); on sm_80 neither is there.
  Attention a = make_attention({.dtype = f16, .head_dim = 64, .decode = true, .prefix = "pdl"});
  AttentionTiling t = decode_tiling({.head_dim = 64, .batch_kv_heads = 2, .keys = 1000, .element_bytes = 2});
  t.split_kv = 4;
  const Schedule s = schedule_decode(a, t);
  const LoweredProgram hopper = lower(a.out, s, Target::sm90a());
  REQUIRE(hopper.kernels.size() == 2);
  for (const std::string &source : compile_for_both_targets(hopper)) {
    const size_t body = source.find(") {\n", source.find("__global__"));
    REQUIRE(body != std::string::npos);
    const std::string wait_first =
        "#if __CUDA_ARCH__ >= 900\n  asm volatile(\"griddepcontrol.wait;\" ::: \"memory\");\n";
    CHECK(source.compare(body + 4, wait_first.size(), wait_first) == 0);
    CHECK(contains(source, "griddepcontrol.launch_dependents;"));
  }
  for (const Kernel &k : hopper.kernels) {
    CHECK(k.dependent_launch);
    CHECK(contains(to_string(k), "  dependent launch\n"));
  }
  const LoweredProgram ampere = lower(a.out, s, Target::sm80());
  for (const Kernel &k : ampere.kernels) CHECK(!k.dependent_launch);
  for (const std::string &source : compile_for_both_targets(ampere))
    CHECK(!contains(source, "griddepcontrol"));
}
