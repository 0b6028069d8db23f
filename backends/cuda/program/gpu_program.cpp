#include "backends/cuda/program/gpu_program.h"

#include <algorithm>
#include <cstdlib>
#include <optional>

#include "backends/cuda/program/kernel_arguments.h"

#include "backends/cuda/runtime/kernel_cache.h"
#include "lang/error.h"

namespace twist::cuda {

CompiledKernel compile_kernel(const twist::Kernel &k, const std::string &arch,
                              const CodegenOptions &options) {
  CompiledKernel c{k, cuda_source(k, options), {}, {}};
  // TWIST_LINEINFO=1 asks for line tables, for compute-sanitizer and ncu to point at the generated source.
  const char *line_info = std::getenv("TWIST_LINEINFO");
  CompileResult r = default_kernel_cache().compile(
      c.source, k.name + ".cu", {arch, line_info != nullptr && std::string(line_info) == "1"});
  c.cubin = std::move(r.cubin);
  if (!r.resources.empty()) c.resources = r.resources.front();
  return c;
}

GpuProgram::GpuProgram(const LoweredProgram &program, const Device &device, const CodegenOptions &options)
    : program_(program), device_(device), options_(options) {
  for (const twist::Kernel &k : program_.kernels) load(k);
}

namespace {

// A variant's key among the compiled ones: its name, and the buffers it addresses in 64 bits (a variant with
// 64-bit offsets keeps its kernel's name).
std::string variant_key(const twist::Kernel &kernel) {
  std::string key = kernel.name;
  for (size_t i = 0; i < kernel.wide_offsets.size(); ++i)
    key += (i == 0 ? "@64:" : ",") + kernel.wide_offsets[i];
  return key;
}

}  // namespace

const GpuProgram::Loaded &GpuProgram::load(const twist::Kernel &kernel) {
  const std::string key = variant_key(kernel);
  auto it = loaded_.find(key);
  if (it == loaded_.end()) {
    CompiledKernel c = compile_kernel(kernel, device_.arch(), options_);
    Module m(device_, c.cubin, kernel.name);
    it = loaded_.emplace(key, std::make_unique<Loaded>(Loaded{std::move(c), std::move(m)})).first;
  }
  return *it->second;
}

const CompiledKernel &GpuProgram::compiled(const std::string &kernel) const {
  auto it = loaded_.find(kernel);
  if (it == loaded_.end()) fail("kernel {} has not been compiled by this program", kernel);
  return it->second->compiled;
}

namespace {

size_t bytes_of(const Type &t, const std::vector<int64_t> &shape) {
  size_t n = t.bytes();
  for (int64_t e : shape) n *= static_cast<size_t>(e);
  return n;
}

}  // namespace

GpuProgram::Bound GpuProgram::bind(const std::map<std::string, reference::HostTensor> &inputs,
                                   const Scalars &given) const {
  std::map<std::string, std::vector<int64_t>> shapes;
  for (const auto &[name, t] : inputs) shapes[name] = t.shape();
  Bound bound{bind_arguments(program_, shapes, given), {}, {}};
  for (const BufferArg &in : program_.inputs) {
    const reference::HostTensor &t = inputs.at(in.name);
    if (t.type() != in.type)
      fail("input '{}' of program '{}' is {}, but a {} tensor was given", in.name, program_.name,
           type_name(in.type), type_name(t.type()));
    DeviceBuffer b(device_, t.bytes().size());
    b.upload(t.bytes().data(), t.bytes().size());
    bound.buffers.emplace(in.name, std::move(b));
  }
  auto make = [&](const std::string &name, const Type &type, const std::vector<Halide::Expr> &shape,
                  bool zeroed) {
    const std::vector<int64_t> s = evaluate_shape(shape, bound.scalars);
    DeviceBuffer b(device_, std::max<size_t>(bytes_of(type, s), 1));
    b.fill(zeroed ? 0 : 0xff);
    bound.buffers.emplace(name, std::move(b));
    bound.output_shapes[name] = s;
  };
  for (const BufferArg &out : program_.outputs) make(out.name, out.type, out.shape, false);
  for (const Workspace &w : program_.workspaces) make(w.name, w.type, w.shape, w.zeroed);
  return bound;
}

void GpuProgram::launch_all(const Bound &bound, bool wait) {
  for (const twist::Kernel &planned : program_.kernels) {
    const twist::Kernel &ir = select_variant(planned, bound.scalars);
    const Loaded &loaded = load(ir);
    const Dim3 grid{static_cast<unsigned>(evaluate_int(ir.grid[0], bound.scalars)),
                    static_cast<unsigned>(evaluate_int(ir.grid[1], bound.scalars)),
                    static_cast<unsigned>(evaluate_int(ir.grid[2], bound.scalars))};
    if (grid.x == 0 || grid.y == 0 || grid.z == 0) continue;  // an empty output: nothing to compute
    std::map<std::string, CUdeviceptr> addresses;
    for (const auto &[name, buffer] : bound.buffers) addresses.emplace(name, buffer.address());
    KernelArguments args(ir, addresses, bound.scalars);
    Kernel kernel = loaded.module.kernel(cuda::c_name(ir.name));
    const Dim3 block{static_cast<unsigned>(ir.threads), 1, 1};
    const unsigned shared = static_cast<unsigned>(ir.shared_bytes);
    const Dim3 cluster{static_cast<unsigned>(ir.cluster[0]), static_cast<unsigned>(ir.cluster[1]),
                       static_cast<unsigned>(ir.cluster[2])};
    if (wait)
      kernel.launch_and_wait(grid, block, shared, args.pointers(), cluster, ir.dependent_launch);
    else
      kernel.launch(grid, block, shared, args.pointers(), cluster, ir.dependent_launch);
  }
}

std::map<std::string, reference::HostTensor> GpuProgram::run(
    const std::map<std::string, reference::HostTensor> &inputs, const Scalars &given) {
  const Bound bound = bind(inputs, given);
  launch_all(bound, /*wait=*/true);
  std::map<std::string, reference::HostTensor> outputs;
  for (const BufferArg &out : program_.outputs) {
    reference::HostTensor t(out.type, bound.output_shapes.at(out.name));
    if (t.size() > 0) bound.buffers.at(out.name).download(t.bytes().data(), t.bytes().size());
    outputs.emplace(out.name, std::move(t));
  }
  return outputs;
}

Timing GpuProgram::time(const std::map<std::string, reference::HostTensor> &inputs, const Scalars &given,
                        const TimingOptions &options) {
  if (options.repeats < 1 || options.warmup < 0)
    fail("timing {}: TimingOptions asks for {} warm-up and {} timed runs; give warmup >= 0 and repeats >= 1",
         program_.name, options.warmup, options.repeats);
  const Bound bound = bind(inputs, given);
  // Writing twice the L2's size evicts whatever the previous run left there.
  std::optional<DeviceBuffer> flush;
  if (options.flush_l2)
    flush.emplace(device_, 2 * static_cast<size_t>(std::max(device_.properties().l2_cache_bytes, 1)));
  // The first run waits for each kernel, so that a fault is reported with the kernel's name.
  launch_all(bound, /*wait=*/true);
  for (int w = 1; w < options.warmup; ++w) launch_all(bound, /*wait=*/false);
  Timer timer(device_);
  Timing timing;
  for (int r = 0; r < options.repeats; ++r) {
    if (flush) flush->fill(static_cast<uint8_t>(r));
    timer.start();
    launch_all(bound, /*wait=*/false);
    timer.stop();
    timing.samples_ms.push_back(timer.elapsed_ms());
  }
  device_.synchronize();
  std::vector<double> sorted = timing.samples_ms;
  std::sort(sorted.begin(), sorted.end());
  const size_t n = sorted.size();
  timing.median_ms = n % 2 ? sorted[n / 2] : (sorted[n / 2 - 1] + sorted[n / 2]) / 2;
  timing.min_ms = sorted.front();
  return timing;
}

}  // namespace twist::cuda
