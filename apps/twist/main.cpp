// twist: the command-line tool.
//   twist demo [--dump=funcs,schedule,realization,loopnest,cuda]
//       Defines a row softmax and a GEMM in the DSL, checks both on the CPU reference against plain loops,
//       lowers the GEMM with a tensor-core schedule, runs the lowered loop nest on the CPU interpreter,
//       compiles it for sm_80 and sm_90a, and (where there is a GPU) runs and checks it there.
//   twist export gemm --shape MxNxK [--dtype f16|bf16] [--output f16|bf16|f32] [--block 128x128x32] [--warp
//   64x64]
//                     [--stages 3] [--accumulation f32|f16|hybrid:N] [--split-k N] [--raster G] --out DIR
//       Writes the kernels, cubins (sm_90a) and a launch manifest for those shapes; the output type is
//       the input type unless --output says otherwise. --atom wgmma takes the Hopper schedule (--block,
//       --warpgroups, --stages, --split-k). --rule true takes the schedule from the GEMM's schedule rule
//       (apps/gemm/gemm_rule.h: the Hopper schedule where TMA can copy the operands, else mma.sync) instead
//       of the tiling flags.
//   twist export norms --op softmax|layernorm|rmsnorm|add_rmsnorm|swiglu --rows R --hidden H
//                      [--dtype f16|bf16] --out DIR
//       The same for a row-wise op of apps/norms (its manifest notes the bytes the op must move).
//   twist export gemma --config 31b|tiny --layer sliding|full --phase prefill|decode --batch B --tokens S
//                      [--kv-len L] [--layer-scalar X] [--wide-offsets true] --out DIR
//       Every kernel of one Gemma 4 decoder layer (apps/gemma) for B sequences of S new tokens (decode: S = 1
//       against L keys), one manifest each, labelled gemma_<config>_<layer>_<phase>_B<B>_S<S>[_L<L>]_<kernel>
//       and noted with op "gemma" and the kernel's name (python/twist/gemma.py reads them). A kernel whose
//       buffers pass 2^31 - 1 elements at this shape addresses them with 64-bit offsets (its manifest's
//       "wide_offsets"); --wide-offsets true does so for every buffer that could, to measure the cost.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <iostream>
#include <map>
#include <set>
#include <string>
#include <variant>
#include <vector>

#include "algebra/online.h"
#include "apps/attention/attention.h"
#include "apps/gemm/gemm.h"
#include "apps/gemm/gemm_rule.h"
#include "apps/gemma/gemma.h"
#include "apps/norms/norms.h"
#include "backends/cuda/codegen/cuda_printer.h"
#include "backends/cuda/program/export_program.h"
#include "backends/cuda/program/gpu_program.h"
#include "backends/cuda/runtime/driver_api.h"
#include "backends/reference/evaluate_funcs.h"
#include "backends/reference/interpreter/interpreter.h"
#include "lang/twist.h"
#include "scheduler/default_schedule.h"
#include "scheduler/lower.h"
#include "scheduler/realization.h"
#include "scheduler/wide_offsets.h"

namespace twist::tool {

namespace {

using reference::HostTensor;

struct Options {
  std::map<std::string, std::string> values;
  std::set<std::string> dumps;
  std::string get(const std::string &key, const std::string &fallback) const {
    auto it = values.find(key);
    return it == values.end() ? fallback : it->second;
  }
  // A yes/no option: "true" or "false" (absent: false); anything else is refused rather than read as false.
  bool flag(const std::string &key) const {
    const std::string v = get(key, "false");
    if (v != "true" && v != "false") fail("--{} takes true or false, not '{}'", key, v);
    return v == "true";
  }
};

Options parse(int argc, char **argv, int first) {
  Options o;
  for (int a = first; a < argc; ++a) {
    std::string arg = argv[a];
    if (arg.rfind("--", 0) != 0) fail("unexpected argument '{}': options start with --", arg);
    std::string key = arg.substr(2), value;
    if (auto eq = key.find('='); eq != std::string::npos) {
      value = key.substr(eq + 1);
      key = key.substr(0, eq);
    } else if (a + 1 < argc && std::strncmp(argv[a + 1], "--", 2) != 0) {
      value = argv[++a];
    }
    if (key == "dump") {
      for (size_t start = 0; start <= value.size();) {
        size_t comma = value.find(',', start);
        if (comma == std::string::npos) comma = value.size();
        const std::string what = value.substr(start, comma - start);
        if (!std::set<std::string>{"funcs", "schedule", "realization", "loopnest", "cuda"}.count(what))
          fail("--dump={}: unknown stage '{}'; the stages are funcs, schedule, realization, loopnest, cuda",
               value, what);
        o.dumps.insert(what);
        start = comma + 1;
      }
    } else {
      o.values[key] = value;
    }
  }
  return o;
}

std::vector<int> parse_dims(const std::string &text, size_t count, const char *what) {
  std::vector<int> dims;
  size_t start = 0;
  while (start <= text.size()) {
    size_t x = text.find('x', start);
    if (x == std::string::npos) x = text.size();
    try {
      dims.push_back(std::stoi(text.substr(start, x - start)));
    } catch (const std::exception &) {
      fail("{} '{}' must be {} numbers joined by 'x'", what, text, count);
    }
    start = x + 1;
  }
  if (dims.size() != count) fail("{} '{}' must be {} numbers joined by 'x'", what, text, count);
  return dims;
}

Accumulation parse_accumulation(const std::string &text) {
  if (text == "f32") return Accumulation::fp32();
  if (text == "f16") return Accumulation::fp16();
  if (text.rfind("hybrid:", 0) == 0) return Accumulation::hybrid(std::stoi(text.substr(7)));
  fail("--accumulation {}: use f32, f16 or hybrid:N (f16 atoms promoted to f32 every N k-steps)", text);
}

// --split-combine: how the parts of a split (--split-k, --split-kv) are combined.
SplitCombine parse_split_combine(const std::string &text) {
  if (text == "kernel") return SplitCombine::kernel;
  if (text == "last_block") return SplitCombine::last_block;
  fail(
      "--split-combine {}: use kernel (a second kernel) or last_block (each tile's last block, in the same "
      "kernel)",
      text);
}

// --stream-k-tiles: which tiles stream-K splits (FuncSchedule::stream_k).
StreamKTiles parse_stream_k_tiles(const std::string &text) {
  if (text == "tail_and_wave") return StreamKTiles::tail_and_wave;
  if (text == "tail") return StreamKTiles::tail;
  fail(
      "--stream-k-tiles {}: use tail_and_wave (the partial wave plus one full wave) or tail (the partial "
      "wave)",
      text);
}

// The spelling parse_accumulation takes, so that a manifest's note can be read back by scripts and flags.
std::string accumulation_flag(const Accumulation &a) {
  if (a.kind == Accumulation::Kind::hybrid) return fmt::format("hybrid:{}", a.promote_every);
  return to_string(a);
}

// --atom wgmma: the Hopper schedule (TMA ring, wgmma atoms) with --block MxNxK, --warpgroups, --stages and
// --split-k; otherwise the mma.sync schedule with --block, --warp, --stages, --split-k and --transport.
std::variant<apps::GemmTiling, apps::HopperTiling> parse_tiling(const Options &o) {
  const std::string atom = o.get("atom", "mma");
  if (atom != "mma" && atom != "wgmma") fail("--atom {}: use mma (mma.sync) or wgmma (Hopper)", atom);
  if (atom == "wgmma") {
    for (const char *mma_only : {"warp", "min-blocks", "transport"})
      if (o.values.count(mma_only))
        fail("--{} is a flag of the mma.sync schedule (--atom mma), not of --atom wgmma", mma_only);
    // Flags not given keep HopperTiling's defaults (the fastest configuration measured).
    apps::HopperTiling h;
    const std::string default_block = fmt::format("{}x{}x{}", h.block_m, h.block_n, h.block_k);
    const std::vector<int> block = parse_dims(o.get("block", default_block), 3, "--block");
    h.block_m = block[0], h.block_n = block[1], h.block_k = block[2];
    h.warpgroups = std::stoi(o.get("warpgroups", std::to_string(h.warpgroups)));
    h.stages = std::stoi(o.get("stages", std::to_string(h.stages)));
    h.accumulation = parse_accumulation(o.get("accumulation", "f32"));
    h.raster_group = std::stoi(o.get("raster", std::to_string(h.raster_group)));
    h.split_k = std::stoi(o.get("split-k", "1"));
    h.split_combine = parse_split_combine(o.get("split-combine", "kernel"));
    if (o.values.count("warp-specialize")) h.warp_specialized = o.flag("warp-specialize");
    h.persistent_blocks = std::stoi(o.get("persistent", std::to_string(h.persistent_blocks)));
    h.cluster = std::stoi(o.get("cluster", std::to_string(h.cluster)));
    if (o.values.count("tma-store")) h.tma_store = o.flag("tma-store");
    if (o.values.count("stmatrix")) h.stmatrix = o.flag("stmatrix");
    h.output_sub_tile_buffers =
        std::stoi(o.get("output-sub-tiles", std::to_string(h.output_sub_tile_buffers)));
    if (o.values.count("ping-pong")) h.ping_pong = o.flag("ping-pong");
    if (o.values.count("stream-k")) h.stream_k = o.flag("stream-k");
    h.stream_k_tiles = parse_stream_k_tiles(o.get("stream-k-tiles", "tail_and_wave"));
    return h;
  }
  if (o.values.count("warpgroups"))
    fail("--warpgroups is a flag of --atom wgmma, not of the mma.sync schedule");
  apps::GemmTiling t;
  const std::vector<int> block = parse_dims(o.get("block", "128x128x32"), 3, "--block");
  const std::vector<int> warp = parse_dims(o.get("warp", "64x64"), 2, "--warp");
  t.block_m = block[0], t.block_n = block[1], t.block_k = block[2];
  t.warp_m = warp[0], t.warp_n = warp[1];
  t.stages = std::stoi(o.get("stages", "3"));
  t.accumulation = parse_accumulation(o.get("accumulation", "f32"));
  t.split_k = std::stoi(o.get("split-k", "1"));
  t.split_combine = parse_split_combine(o.get("split-combine", "kernel"));
  t.raster_group = std::stoi(o.get("raster", "8"));
  t.min_blocks_per_sm = std::stoi(o.get("min-blocks", "1"));
  const std::string transport = o.get("transport", "cp_async");
  if (transport != "cp_async" && transport != "plain")
    fail("--transport {}: use cp_async or plain", transport);
  t.transport = transport == "plain" ? Transport::plain : Transport::cp_async;
  return t;
}

void dump(const Options &o, const Func &out, const Schedule &s, const LoweredProgram &p) {
  if (o.dumps.count("funcs")) std::cout << "== funcs\n" << to_string(walk({out}));
  // The schedule as lower() completes it (scheduler/default_schedule.h), and where it places each func.
  const FuncGraph graph = walk({out});
  const Schedule completed = with_default_schedules(graph, s);
  if (o.dumps.count("schedule")) std::cout << "== schedule\n" << completed.to_string();
  if (o.dumps.count("realization"))
    std::cout << "== realization\n" << plan_realization(graph, completed).to_string();
  if (o.dumps.count("loopnest")) std::cout << "== loop nest\n" << to_string(p);
  if (o.dumps.count("cuda"))
    for (const Kernel &k : p.kernels) std::cout << "== cuda " << k.name << "\n" << cuda::cuda_source(k);
}

// --- demo -----------------------------------------------------------------------------------------------

struct Checks {
  int failed = 0;
  void report(const std::string &what, double error, double tolerance) {
    const bool ok = error <= tolerance;
    failed += ok ? 0 : 1;
    std::printf("  %-58s rel. L2 error %.3g (tolerance %.1g)  %s\n", what.c_str(), error, tolerance,
                ok ? "PASS" : "FAIL");
  }
};

HostTensor as_f64(const HostTensor &t) {
  HostTensor out(f64, t.shape());
  for (int64_t e = 0; e < t.size(); ++e) out.set_linear(e, t.get_linear(e));
  return out;
}

// C = A @ B by a plain loop in double, the demo's independent reference.
HostTensor gemm_loop(const HostTensor &a, const HostTensor &b) {
  const int64_t m = a.shape()[0], k = a.shape()[1], n = b.shape()[1];
  HostTensor c(f64, {m, n});
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double s = 0;
      for (int64_t r = 0; r < k; ++r) s += a.get({i, r}) * b.get({r, j});
      c.set({i, j}, s);
    }
  return c;
}

void demo_softmax(Checks &checks) {
  SizeParam rows("rows"), cols("cols");
  Input x("X", f32, {rows, cols});
  Var i("i"), j("j");
  RDom r({{0, cols}}, "r");
  Func lse("LSE"), y("Y");
  lse(i) = reduce(algebra::log_sum_exp(f32), r, x(i, r.x));
  y(i, j) = exp(x(i, j) - lse(i));
  y.set_shape({rows, cols});
  std::cout << "softmax over rows, in the DSL:\n" << to_string(walk({y}));
  const HostTensor input = reference::random_normal(f32, {33, 100}, 1, 0, 3);
  const HostTensor got = reference::evaluate(y, {{{"X", input}}, {}}, Arithmetic::exact)[0];
  HostTensor want(f64, {33, 100});
  for (int64_t a = 0; a < 33; ++a) {
    double m = -INFINITY, l = 0;
    for (int64_t b = 0; b < 100; ++b) m = std::max(m, input.get({a, b}));
    for (int64_t b = 0; b < 100; ++b) l += std::exp(input.get({a, b}) - m);
    for (int64_t b = 0; b < 100; ++b) want.set({a, b}, std::exp(input.get({a, b}) - m) / l);
  }
  checks.report("softmax 33x100 on the reference vs a C++ loop", reference::relative_l2_error(got, want),
                1e-12);
}

int demo(const Options &o) {
  Checks checks;
  demo_softmax(checks);

  apps::Gemm g = apps::make_gemm({.input = f16, .output = f32});
  std::cout << "\nGEMM, in the DSL:\n" << to_string(walk({g.out}));
  const int m = 127, n = 255, k = 61;
  const Scalars sizes = {{"M", m}, {"N", n}, {"K", k}};
  const std::map<std::string, HostTensor> inputs = {{"A", reference::random_normal(f16, {m, k}, 2)},
                                                    {"B", reference::random_normal(f16, {k, n}, 3)}};
  const HostTensor want = gemm_loop(inputs.at("A"), inputs.at("B"));
  checks.report(
      fmt::format("GEMM {}x{}x{} on the reference vs a C++ loop", m, n, k),
      reference::relative_l2_error(reference::evaluate(g.out, {inputs, {}}, Arithmetic::exact)[0], want),
      1e-12);

  apps::GemmTiling tiling;
  tiling.block_m = 64, tiling.block_n = 64, tiling.warp_m = 32, tiling.warp_n = 32;
  const Schedule s = apps::schedule_tensor_core(g, tiling);
  const LoweredProgram p = lower(g.out, s, Target::sm90a());
  std::cout << "\nlowered with the tensor-core schedule " << tiling.name() << ":\n"
            << p.kernels[0].schedule_summary;
  dump(o, g.out, s, p);
  const Scalars scalars = bind_arguments(p, {{"A", {m, k}}, {"B", {k, n}}}, {});
  checks.report(
      "the lowered loop nest on the CPU interpreter vs a C++ loop",
      reference::relative_l2_error(as_f64(reference::run_program(p, inputs, scalars).at("out")), want), 1e-5);
  for (const char *arch : {"sm_80", "sm_90a"}) {
    for (const Kernel &kernel : p.kernels)
      for (const Kernel *v = &kernel; v; v = v->fallback.get()) {
        const cuda::CompiledKernel c = cuda::compile_kernel(*v, arch);
        std::printf("  compiled %-22s for %-6s: %zu-byte cubin, %d registers, %d bytes spilled\n",
                    v->name.c_str(), arch, c.cubin.size(), c.resources.registers,
                    c.resources.spill_store_bytes);
      }
  }
  if (auto reason = cuda::gpu_unavailable_reason()) {
    std::cout << "  GPU run skipped: no GPU (" << *reason << ")\n";
  } else {
    cuda::Device device;
    std::cout << "  running on " << device.properties().name << "\n";
    cuda::GpuProgram gpu(p, device);
    checks.report(fmt::format("GEMM {}x{}x{} on the GPU vs a C++ loop", m, n, k),
                  reference::relative_l2_error(as_f64(gpu.run(inputs).at("out")), want), 1e-5);
    const int big = 512;
    const std::map<std::string, HostTensor> large = {{"A", reference::random_normal(f16, {big, big}, 4)},
                                                     {"B", reference::random_normal(f16, {big, big}, 5)}};
    checks.report("GEMM 512x512x512 on the GPU vs a C++ loop",
                  reference::relative_l2_error(as_f64(gpu.run(large).at("out")),
                                               gemm_loop(large.at("A"), large.at("B"))),
                  1e-5);
  }
  std::cout << (checks.failed ? fmt::format("\n{} check(s) FAILED\n", checks.failed)
                              : "\nall checks passed\n");
  return checks.failed ? 1 : 0;
}

// --- export ---------------------------------------------------------------------------------------------

int export_gemm(const Options &o) {
  const std::string out_dir = o.get("out", "");
  if (out_dir.empty()) fail("twist export gemm needs --out DIR");
  const std::vector<int> shape = parse_dims(o.get("shape", ""), 3, "--shape");
  const Type dtype = parse_type(o.get("dtype", "f16"));
  const Type output = parse_type(o.get("output", type_name(dtype)));
  if (output != f16 && output != bf16 && output != f32)
    fail("--output {}: use f16, bf16 or f32", type_name(output));
  apps::Gemm g = apps::make_gemm({.input = dtype, .output = output});
  const bool by_rule = o.flag("rule");
  if (by_rule)
    for (const char *chosen :
         {"atom", "block", "warp", "warpgroups", "stages", "split-k", "min-blocks", "transport"})
      if (o.values.count(chosen))
        fail("--rule true chooses the schedule (apps/gemm/gemm_rule.h), so --{} cannot be given with it",
             chosen);
  // --stream-k false with the rule: the rule without stream-K plans (as measured before them);
  // --stream-k-tail false: without stream-K of the partial wave alone among them.
  apps::GemmMachine machine;
  if (by_rule && o.values.count("stream-k")) machine.stream_k = o.flag("stream-k");
  if (by_rule && o.values.count("stream-k-tail")) machine.stream_k_tail = o.flag("stream-k-tail");
  apps::GemmPlan plan = by_rule ? apps::gemm_plan_by_rule({shape[0], shape[1], shape[2], 1, dtype}, machine)
                                : apps::GemmPlan{parse_tiling(o)};
  // The rule's tiling with the accumulation asked for (the accumulation study on the rule's schedules).
  if (by_rule && o.values.count("accumulation"))
    std::visit([&](auto &t) { t.accumulation = parse_accumulation(o.get("accumulation", "f32")); },
               plan.tiling);
  // The rule's split with the combine asked for (the rule's own choice when not given).
  if (by_rule && o.values.count("split-combine"))
    std::visit([&](auto &t) { t.split_combine = parse_split_combine(o.get("split-combine", "kernel")); },
               plan.tiling);
  const std::string schedule_name = plan.name();
  const Accumulation accumulation = plan.accumulation();
  const Schedule s = plan.schedule(g);
  const LoweredProgram p = lower(g.out, s, Target::sm90a());
  dump(o, g.out, s, p);
  const Scalars scalars = {{"M", shape[0]}, {"N", shape[1]}, {"K", shape[2]}};
  cuda::ExportRequest r;
  // An output type other than the input's is part of the default label, so both can share a directory.
  const std::string types =
      output == dtype ? type_name(dtype) : type_name(dtype) + "_" + type_name(output) + "out";
  r.label =
      o.get("label", fmt::format("gemm_{}_{}x{}x{}_{}", types, shape[0], shape[1], shape[2], schedule_name));
  r.scalars = scalars;
  r.notes = {{"op", "gemm"},
             {"dtype", type_name(dtype)},
             {"output", type_name(output)},
             {"schedule", schedule_name},
             {"shape", fmt::format("{}x{}x{}", shape[0], shape[1], shape[2])},
             {"accumulation", accumulation_flag(accumulation)},
             {"chosen_by", by_rule ? "rule" : "flags"}};
  // The rule's cost model beside the measurement (bench_gemm.py), wherever it describes the tiling.
  if (const auto *hopper = std::get_if<apps::HopperTiling>(&plan.tiling))
    if (const auto modeled = apps::hopper_plan_of({shape[0], shape[1], shape[2], 1, dtype}, *hopper))
      r.notes["modeled_us"] = fmt::format("{:.1f}", modeled->seconds() * 1e6);
  std::cout << cuda::export_program(p, r, out_dir).string() << "\n";
  return 0;
}

int export_attention(const Options &o) {
  const std::string out_dir = o.get("out", "");
  if (out_dir.empty()) fail("twist export attention needs --out DIR");
  // --shape BxHxSxLxD: batch, query heads, queries, keys, head dimension.
  const std::vector<int> shape = parse_dims(o.get("shape", ""), 5, "--shape");
  const Type dtype = parse_type(o.get("dtype", "f16"));
  const bool decode = o.flag("decode");
  const bool causal = o.flag("causal");
  const int group = std::stoi(o.get("group", "1"));
  if (shape[1] % group != 0) fail("--group {} must divide the {} query heads", group, shape[1]);
  // --window W: a sliding window, keys within W of the diagonal (Gemma's sliding layers: 1024).
  std::optional<int> window;
  if (o.values.count("window")) window = std::stoi(o.get("window", ""));
  if (window && *window < 1) fail("--window {}: a sliding window keeps at least one key", *window);
  if (decode && shape[2] != 1) fail("--decode true needs one query per head (the S of --shape must be 1)");
  apps::Attention a = apps::make_attention({.dtype = dtype,
                                            .head_dim = shape[4],
                                            .group = group,
                                            .causal = causal,
                                            .window = window,
                                            .decode = decode});
  apps::AttentionTiling t;
  // --atom wgmma: the Hopper datapath (TMA, wgmma), a warpgroup per --warp-rows queries (64 by default).
  const std::string atom = o.get("atom", "mma");
  if (atom != "mma" && atom != "wgmma") fail("--atom {}: use mma or wgmma", atom);
  if (atom == "wgmma") t.atom = MatrixAtom::wgmma;
  t.block_rows = std::stoi(o.get("block-rows", "128"));
  t.key_tile = std::stoi(o.get("key-tile", "64"));
  t.stages = std::stoi(o.get("stages", "2"));
  t.split_kv = std::stoi(o.get("split-kv", "1"));
  t.min_blocks_per_sm = std::stoi(o.get("min-blocks", "1"));
  t.warp_rows = std::stoi(o.get("warp-rows", atom == "wgmma" ? "64" : "16"));
  t.column_parts = std::stoi(o.get("column-parts", "1"));
  const apps::AttentionProblemShape prefill_shape{.head_dim = shape[4],
                                                  .causal = causal,
                                                  .batch_heads = int64_t(shape[0]) * shape[1],
                                                  .queries = shape[2],
                                                  .keys = shape[3],
                                                  .group = group,
                                                  .element_bytes = dtype.bytes()};
  // --rule true: the tiling of apps::decode_tiling (decode) or apps::hopper_attention_tiling (prefill).
  if (o.flag("rule") && decode) {
    t = apps::decode_tiling({.head_dim = shape[4],
                             .group = group,
                             .batch_kv_heads = int64_t(shape[0]) * (shape[1] / group),
                             .keys = shape[3],
                             .element_bytes = dtype.bytes()});
  } else if (o.flag("rule")) {
    t = apps::hopper_attention_tiling(prefill_shape);
  }
  // --overlap true|false: the next key tile's S in flight during this tile's softmax; --delay-products
  // true|false: each tile's P V in flight during the next tile's softmax; --warp-specialize true|false: a
  // producer warpgroup issues the TMA copies; --ping-pong true|false: the consumer warpgroups take turns on
  // the tensor cores (wgmma; each overrides the rule's choice).
  if (o.values.count("overlap")) t.overlap_scores = o.flag("overlap");
  if (o.values.count("delay-products")) t.delay_products = o.flag("delay-products");
  if (o.values.count("warp-specialize")) t.warp_specialized = o.flag("warp-specialize");
  if (o.values.count("ping-pong")) t.ping_pong = o.flag("ping-pong");
  // --longest-first true|false: the blocks take the query tiles last first, in groups of --head-group rows
  // of blocks, by default the rule's (apps::order_longest_first; overrides the rule's choice).
  if (o.values.count("longest-first")) {
    t.longest_first = false;
    if (o.flag("longest-first")) apps::order_longest_first(t, prefill_shape);
  }
  if (o.values.count("head-group")) t.head_group = std::stoi(o.get("head-group", "1"));
  // --persistent true|false: a persistent grid of the blocks the SMs keep resident
  // (AttentionTiling::persistent_blocks; overrides the rule's choice).
  if (o.values.count("persistent")) t.persistent_blocks = o.flag("persistent") ? t.resident_blocks() : 0;
  if (o.values.count("split-combine"))
    t.split_combine = parse_split_combine(o.get("split-combine", "kernel"));
  const Schedule s = decode ? apps::schedule_decode(a, t) : apps::schedule_attention(a, t);
  const LoweredProgram p = lower(a.out, s, Target::sm90a());
  dump(o, a.out, s, p);
  cuda::ExportRequest r;
  const std::string shape_text =
      fmt::format("B{}_H{}_S{}_L{}_D{}", shape[0], shape[1], shape[2], shape[3], shape[4]);
  r.label = o.get(
      "label", fmt::format("{}_{}_{}{}{}{}_{}", decode ? "decode" : "attention", type_name(dtype), shape_text,
                           causal ? "_causal" : "", window ? fmt::format("_window{}", *window) : "",
                           group > 1 ? fmt::format("_gqa{}", group) : "", t.name()));
  r.scalars = {{"B", shape[0]},
               {"H", shape[1]},
               {"L", shape[3]},
               {"qk_scale", std::log2(std::exp(1.0)) / std::sqrt(static_cast<double>(shape[4]))}};
  if (!decode) r.scalars["S"] = shape[2];
  r.notes = {{"op", decode ? "decode" : "attention"},
             {"dtype", type_name(dtype)},
             {"schedule", t.name()},
             {"shape", shape_text},
             {"causal", causal ? "true" : "false"},
             {"group", std::to_string(group)}};
  if (window) r.notes["window"] = std::to_string(*window);
  std::cout << cuda::export_program(p, r, out_dir).string() << "\n";
  return 0;
}

int export_norms(const Options &o) {
  const std::string out_dir = o.get("out", "");
  if (out_dir.empty()) fail("twist export norms needs --out DIR");
  const std::string op = o.get("op", "");
  const std::optional<apps::NormKind> kind = apps::parse_norm_kind(op);
  if (!kind) fail("--op '{}': use softmax, layernorm, rmsnorm, add_rmsnorm or swiglu", op);
  const Type dtype = parse_type(o.get("dtype", "f16"));
  if (dtype != f16 && dtype != bf16) fail("--dtype {}: use f16 or bf16", type_name(dtype));
  const int rows = std::stoi(o.get("rows", "")), hidden = std::stoi(o.get("hidden", ""));
  const std::string statistics = o.get("layernorm", "two_pass");
  const std::optional<apps::LayerNormStatistics> layernorm = apps::parse_layernorm_statistics(statistics);
  if (!layernorm)
    fail(
        "--layernorm {}: use two_pass (a mean, then the deviations around it), welford (one fold of the "
        "Welford monoid) or shifted_sums (one fold of the sums of x - x[0] and its square)",
        statistics);
  const apps::Norm n = apps::make_norm(
      *kind, {.dtype = dtype, .hidden = hidden, .eps = 1e-6f, .prefix = "", .layernorm = *layernorm});
  Schedule s = apps::schedule_norm(n);
  // Schedule choices of the row kernel, to measure them against the rule (docs/pipelines.md, "Rows read
  // again"): where the row is kept, and a floor on the blocks per SM asked of the compiler.
  const std::string form = o.get("row-form", "chosen");
  const int row_threads = std::stoi(o.get("row-threads", "0"));
  if (form != "chosen" && form != "registers" && form != "reread")
    fail("--row-form {}: use chosen (the rule), registers or reread", form);
  if (form != "chosen" || row_threads)
    s[n.out].row_form(form == "reread"      ? RowForm::reread
                      : form == "registers" ? RowForm::registers
                                            : RowForm::chosen,
                      row_threads);
  const int min_blocks = std::stoi(o.get("min-blocks", "1"));
  if (min_blocks > 1) s[n.out].min_blocks_per_sm(min_blocks);
  const LoweredProgram p = lower(n.out, s, Target::sm90a());
  dump(o, n.out, s, p);
  cuda::ExportRequest r;
  r.label = o.get(
      "label",
      fmt::format("{}_{}_{}x{}{}{}{}{}", op, type_name(dtype), rows, hidden,
                  statistics != "two_pass" && *kind == apps::NormKind::layernorm ? "_" + statistics : "",
                  form != "chosen" ? "_" + form : "", row_threads ? fmt::format("_t{}", row_threads) : "",
                  min_blocks > 1 ? fmt::format("_mb{}", min_blocks) : ""));
  r.scalars = {{n.rows.name(), rows}};
  r.notes = {{"op", op},
             {"dtype", type_name(dtype)},
             {"rows", std::to_string(rows)},
             {"hidden", std::to_string(hidden)},
             {"bytes", fmt::format("{:.0f}", apps::norm_bytes(n, rows))}};
  std::cout << cuda::export_program(p, r, out_dir).string() << "\n";
  return 0;
}

// The kernels of one Gemma 4 decoder layer, each lowered with the schedule apps/gemma chooses and exported.
int export_gemma(const Options &o) {
  namespace gm = apps::gemma;
  const std::string out_dir = o.get("out", "");
  if (out_dir.empty()) fail("twist export gemma needs --out DIR");
  const std::optional<gm::Config> config = gm::config_by_name(o.get("config", "31b"));
  if (!config) fail("--config {}: use 31b or tiny (apps/gemma/gemma.h)", o.get("config", ""));
  const std::optional<gm::LayerType> layer = gm::parse_layer_type(o.get("layer", ""));
  if (!layer) fail("--layer '{}': use sliding or full", o.get("layer", ""));
  const std::string phase = o.get("phase", "prefill");
  if (phase != "prefill" && phase != "decode") fail("--phase {}: use prefill or decode", phase);
  const bool decode = phase == "decode";
  const int batch = std::stoi(o.get("batch", "1")), tokens = std::stoi(o.get("tokens", decode ? "1" : ""));
  if (decode && tokens != 1)
    fail("--phase decode takes one new token per sequence (--tokens 1), not {}", tokens);
  const int keys = decode ? std::stoi(o.get("kv-len", "")) : tokens;
  const double layer_scalar = std::stod(o.get("layer-scalar", "1"));
  const gm::Config &c = *config;
  const gm::LayerAttention la = gm::layer_attention(c, *layer);
  const int rows = batch * tokens;
  const std::string label = fmt::format("gemma_{}_{}_{}_B{}_S{}{}", c.name, gm::to_string(*layer), phase,
                                        batch, tokens, decode ? fmt::format("_L{}", keys) : "");
  auto write = [&](const std::string &kernel, const Func &out, const Schedule &s, const Scalars &scalars,
                   const std::string &schedule_name, std::optional<apps::GemmShape> gemm = std::nullopt,
                   const apps::GemmPlan *plan = nullptr) {
    const LoweredProgram lowered = lower(out, s, Target::sm90a());
    // --wide-offsets true: 64-bit offsets into every buffer that can pass 2^31 - 1 elements, at any shape
    // (what they cost where 32-bit ones would do).
    const LoweredProgram p = o.flag("wide-offsets") ? force_wide_offsets(lowered) : lowered;
    dump(o, out, s, p);
    cuda::ExportRequest r;
    r.label = label + "_" + kernel;
    r.scalars = scalars;
    r.notes = {{"op", "gemma"},
               {"kernel", kernel},
               {"config", c.name},
               {"layer", gm::to_string(*layer)},
               {"phase", phase},
               {"batch", std::to_string(batch)},
               {"tokens", std::to_string(tokens)},
               {"keys", std::to_string(keys)},
               {"schedule", schedule_name},
               {"dtype", "bf16"}};
    // The GEMM rule's modeled time beside the measurement (apps/gemma/bench_gemma.py), as in export gemm.
    if (gemm && plan)
      if (const auto *hopper = std::get_if<apps::HopperTiling>(&plan->tiling))
        if (const auto modeled = apps::hopper_plan_of(*gemm, *hopper))
          r.notes["modeled_us"] = fmt::format("{:.1f}", modeled->seconds() * 1e6);
    std::cout << cuda::export_program(p, r, out_dir).string() << "\n";
  };
  auto projection = [&](const std::string &kernel, int n, int k) {
    const apps::Gemm g = apps::make_gemm({.input = bf16, .output = bf16});
    const apps::GemmPlan plan = gm::projection_plan(rows, n, k);
    write(kernel, g.out, plan.schedule(g), {{"M", rows}, {"N", n}, {"K", k}}, plan.name(),
          apps::GemmShape{rows, n, k, 1, bf16}, &plan);
  };
  auto head_norm = [&](const std::string &kernel, int heads, int first_column, bool weight, bool rope) {
    const gm::HeadNorm n = gm::make_head_norm({.dtype = bf16,
                                               .heads = heads,
                                               .head_dim = la.head_dim,
                                               .columns = la.qkv_columns(c.heads),
                                               .first_column = first_column,
                                               .weight = weight,
                                               .rope = rope,
                                               .eps = c.eps,
                                               .prefix = ""});
    write(kernel, n.out, gm::schedule_head_norm(n), {{"B", batch}, {"S", tokens}}, "row");
  };
  auto residual_norm = [&](const std::string &kernel, double scalar) {
    const gm::ResidualNorm n = gm::make_residual_norm(bf16, c.hidden, c.eps);
    write(kernel, n.out, gm::schedule_residual_norm(n), {{"rows", rows}, {"layer_scalar", scalar}}, "row");
  };
  // In the order the layer runs them.
  const apps::Norm input_norm =
      apps::make_norm(apps::NormKind::rmsnorm, {.dtype = bf16, .hidden = c.hidden, .eps = c.eps});
  write("input_norm", input_norm.out, apps::schedule_norm(input_norm), {{"rows", rows}}, "row");
  projection("qkv", la.qkv_columns(c.heads), c.hidden);
  head_norm("q_norm_rope", c.heads, 0, true, true);
  head_norm("k_norm_rope", la.kv_heads, la.k_first_column(c.heads), true, true);
  head_norm("v_norm", la.kv_heads, la.v_first_column(c.heads), false, false);
  // The projection with the three head norms in its epilogue, where its plan is one head wide (sliding layers
  // at prefill): [heads + 2 kv_heads, rows, D], what the four kernels above give (apps/gemma/README.md).
  const gm::QkvNormRope fused_norms = gm::make_qkv_norm_rope(c, *layer);
  const apps::GemmPlan qkv_plan = gm::projection_plan(rows, la.qkv_columns(c.heads), c.hidden);
  if (gm::qkv_norms_fuse(fused_norms, qkv_plan))
    write("qkv_norm_rope", fused_norms.out, gm::schedule_qkv_norm_rope(fused_norms, qkv_plan),
          {{"rows", rows}, {"hidden", c.hidden}}, qkv_plan.name() + "_norms_in_epilogue");
  const apps::Attention a = gm::make_layer_attention(c, *layer, decode);
  Scalars attention_scalars = {{"B", batch}, {"H", c.heads}, {"L", keys}, {"qk_scale", gm::qk_scale()}};
  if (!decode) attention_scalars["S"] = tokens;
  const gm::LayerAttentionShape attention_shape = {
      .batch = batch, .heads = c.heads, .queries = tokens, .keys = keys};
  write("attention", a.out, gm::schedule_layer_attention(a, attention_shape), attention_scalars,
        gm::attention_tiling(a, attention_shape).name());
  projection("o_proj", c.hidden, c.heads * la.head_dim);
  residual_norm("post_attention_norm", 1.0);
  const gm::GatedUp g = gm::make_gated_up(bf16, c.hidden, c.intermediate);
  const apps::GemmPlan gate_up_plan = gm::projection_plan(rows, 2 * c.intermediate, c.hidden);
  write("gate_up", g.out, gm::schedule_gated_up(g, gate_up_plan),
        {{"M", rows}, {"N", 2 * c.intermediate}, {"K", c.hidden}}, gate_up_plan.name() + "_gate_in_epilogue",
        apps::GemmShape{rows, 2 * c.intermediate, c.hidden, 1, bf16}, &gate_up_plan);
  projection("down_proj", c.hidden, c.intermediate);
  residual_norm("post_feedforward_norm", layer_scalar);
  return 0;
}

int usage() {
  // One literal per line of the usage text.
  // clang-format off
  std::cerr << "usage: twist demo [--dump=funcs,schedule,loopnest,cuda]\n"
               "       twist export gemm --shape MxNxK --out DIR [--dtype f16|bf16] [--output f16|bf16|f32]\n"
               "                         [--block 128x128x32] [--warp 64x64] [--stages 3] [--accumulation f32|f16|hybrid:N]\n"
               "                         [--split-k N [--split-combine kernel|last_block]] [--raster G]\n"
               "                         [--transport cp_async|plain] [--label NAME]\n"
               "                         [--rule true (the schedule by apps/gemm/gemm_rule.h: Hopper or mma.sync)\n"
               "                          [--stream-k false] [--stream-k-tail false]]\n"
               "                         [--atom wgmma [--block 128x256x64] [--warpgroups 2] [--stages 3] [--split-k N]\n"
               "                          [--warp-specialize true|false] [--persistent 132] [--cluster 1|2]\n"
               "                          [--tma-store true|false] [--stmatrix true|false] [--stream-k true|false\n"
               "                           [--stream-k-tiles tail_and_wave|tail]]\n"
               "                          [--output-sub-tiles 0|2 (buffers of the TMA-store epilogue's boxes)]\n"
               "                          [--ping-pong true|false (with --warpgroups 1)] (Hopper)]\n"
               "                         [--dump=...]\n"
               "       twist export attention --shape BxHxSxLxD --out DIR [--dtype f16|bf16] [--causal true]\n"
               "                         [--decode true] [--group G] [--window W] [--block-rows 128] [--key-tile 64]\n"
               "                         [--stages 2] [--column-parts 1 (the head dimension over warps or warpgroups)]\n"
               "                         [--split-kv N] [--split-combine kernel|last_block] [--min-blocks N]\n"
               "                         [--warp-rows 16] [--label NAME] [--dump=...]\n"
               "                         [--atom wgmma [--warp-rows 64] [--overlap true|false]\n"
               "                          [--delay-products true|false]\n"
               "                          [--warp-specialize true|false [--ping-pong true|false]]\n"
               "                          [--longest-first true|false [--head-group G]]\n"
               "                          [--persistent true|false] (Hopper: TMA, wgmma)]\n"
               "                         [--rule true (the tiling by apps::hopper_attention_tiling, or with --decode\n"
               "                          true by apps::decode_tiling)]\n"
               "       twist export norms --op softmax|layernorm|rmsnorm|add_rmsnorm|swiglu --rows R --hidden H --out DIR\n"
               "                         [--dtype f16|bf16] [--layernorm two_pass|welford|shifted_sums] [--label NAME]\n"
               "                         [--row-form chosen|registers|reread] [--row-threads T] [--min-blocks N]\n"
               "                         [--dump=funcs,schedule,realization,loopnest,cuda]\n"
               "       twist export gemma --layer sliding|full --batch B --tokens S --out DIR [--config 31b|tiny]\n"
               "                         [--phase prefill|decode [--kv-len L]] [--layer-scalar X] [--wide-offsets true]\n"
               "                         [--dump=...]\n";
  // clang-format on
  return 2;
}

}  // namespace

}  // namespace twist::tool

int main(int argc, char **argv) {
  using namespace twist::tool;
  if (argc < 2) return usage();
  const std::string command = argv[1];
  try {
    if (command == "demo") return demo(parse(argc, argv, 2));
    if (command == "export" && argc >= 3 && std::string(argv[2]) == "gemm")
      return export_gemm(parse(argc, argv, 3));
    if (command == "export" && argc >= 3 && std::string(argv[2]) == "attention")
      return export_attention(parse(argc, argv, 3));
    if (command == "export" && argc >= 3 && std::string(argv[2]) == "norms")
      return export_norms(parse(argc, argv, 3));
    if (command == "export" && argc >= 3 && std::string(argv[2]) == "gemma")
      return export_gemma(parse(argc, argv, 3));
  } catch (const twist::Error &e) {
    std::cerr << "twist: " << e.what() << "\n";
    return 1;
  }
  return usage();
}
