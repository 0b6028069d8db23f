#include "backends/reference/interpreter/interpreter.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <memory>
#include <numeric>
#include <random>
#include <sstream>

#include "backends/reference/interpreter/machine.h"
#include "backends/reference/interpreter/statement_compiler.h"
#include "lang/error.h"
#include "scheduler/arguments.h"
#include "scheduler/intrinsics.h"

namespace twist::reference {

using namespace interpreter;

namespace {

std::string show(const Halide::Expr &e) {
  std::ostringstream os;
  os << e;
  return os.str();
}

std::string declared_shape(const std::vector<Halide::Expr> &shape) {
  std::string s;
  for (const Halide::Expr &e : shape) s += (s.empty() ? "" : ", ") + show(e);
  return "[" + s + "]";
}

// The extents of a shape over the scalar arguments, with what the shape belongs to in the message if it
// cannot be evaluated.
std::vector<int64_t> extents_of(const std::vector<Halide::Expr> &shape, const Scalars &scalars,
                                const std::string &what) {
  std::vector<int64_t> extents;
  try {
    extents = evaluate_shape(shape, scalars);
  } catch (const Error &error) {
    fail("the shape {} of {} cannot be evaluated ({}); pass every size parameter it uses in `scalars`",
         declared_shape(shape), what, error.what());
  }
  for (int64_t extent : extents)
    if (extent < 0)
      fail("the shape {} of {} has the negative extent {}", declared_shape(shape), what, extent);
  return extents;
}

// A kernel's global buffers as interpreter arrays, read from their tensors before the kernel runs and
// written back once it has completed.
struct BoundBuffer {
  Array *array;
  HostTensor *tensor;
};

std::vector<BoundBuffer> bind_buffers(Machine &m, StatementCompiler &sc,
                                      std::map<std::string, HostTensor> &buffers,
                                      const std::map<std::string, double> &scalars) {
  std::vector<BoundBuffer> bound;
  for (const BufferArg &arg : m.kernel.buffers) {
    const std::string what = fmt::format("{} buffer '{}'", role_name(arg.role), arg.name);
    auto it = buffers.find(arg.name);
    if (it == buffers.end())
      fail("the kernel needs its {} ({}{}), and `buffers` holds no tensor of that name", what,
           type_name(arg.type), declared_shape(arg.shape));
    HostTensor &tensor = it->second;
    const std::vector<int64_t> shape = extents_of(arg.shape, scalars, what);
    if (tensor.type() != arg.type || tensor.shape() != shape)
      fail("the kernel's {} is {}{}, but the tensor passed for it is {}{}", what, type_name(arg.type),
           shape_string(shape), type_name(tensor.type()), shape_string(tensor.shape()));
    Array &array = m.add_array(
        Array(arg.name, arg.type, Space::global, tensor.size(), arg.role != BufferArg::Role::input));
    // A workspace element still holding the poison it was allocated with has not been written.
    if (arg.role == BufferArg::Role::workspace) {
      const Real unwritten = poison(arg.type);
      array.written.resize(array.size);
      for (int64_t i = 0; i < array.size; ++i) {
        const Real v = tensor.get_linear(i);
        array.written[i] = arg.type.is_float() ? !std::isnan(static_cast<double>(v)) : v != unwritten;
      }
    }
    sc.add_buffer(array);
    bound.push_back({&array, &tensor});
  }
  return bound;
}

// The slot and value of each scalar argument: floating-point values are rounded to the argument's type,
// integers must be ones the type holds.
std::vector<std::pair<int, Real>> bind_scalars(Machine &m, StatementCompiler &sc,
                                               const std::map<std::string, double> &scalars) {
  std::vector<std::pair<int, Real>> bound;
  for (const ScalarArg &arg : m.kernel.scalars) {
    auto it = scalars.find(arg.name);
    if (it == scalars.end())
      fail("the kernel needs the {} scalar '{}', and `scalars` holds no value of that name",
           type_name(arg.type), arg.name);
    const Real value = m.compiler.round(arg.type, it->second);
    if (!arg.type.is_float() && value != it->second)
      fail("the scalar '{}' is {}, which its type {} cannot hold", arg.name, it->second, type_name(arg.type));
    sc.add_variable(arg.name);
    bound.emplace_back(m.compiler.slot(arg.name), value);
  }
  return bound;
}

// Compiles the kernel's body for the block machine `m`, with its scalars at `scalar_slots`; `sc`, which has
// its buffers and variables, must outlive the compiled body.
Exec compile_block(Machine &m, StatementCompiler &sc, const std::vector<std::pair<int, Real>> &scalar_slots) {
  const Exec body = sc.compile(m.kernel.body);
  m.where = nullptr;
  // Slots are sized once every expression is compiled: compiling hands them out.
  m.slots.assign(m.threads, Slots(m.compiler.num_slots(), 0));
  const int thread_slot = m.compiler.slot(intrinsic::kThreadIndex);
  for (int t = 0; t < m.threads; ++t) {
    m.slots[t][thread_slot] = t;
    for (const auto &[slot, value] : scalar_slots) m.slots[t][slot] = value;
  }
  return body;
}

// Starts block `block` on machine `m`: its block index, and fresh per-block state.
void start_block(Machine &m, const std::array<int64_t, 3> &block) {
  m.block = block;
  for (int d = 0; d < 3; ++d) {
    const int slot = m.compiler.slot(intrinsic::kBlockIndex[d]);
    for (int t = 0; t < m.threads; ++t) m.slots[t][slot] = static_cast<Real>(block[d]);
  }
  m.epoch = 0;
  // Copies a block never waits for die with it, as on the GPU: nothing can read what they write.
  m.async.assign(m.threads, AsyncCopies{});
  m.wgmma_groups.assign(m.threads, HeldGroups{});
  m.bulk_store_groups.assign(m.threads, HeldGroups{});
  m.proxy_fences.assign(m.threads, 0);
  m.unfenced_global_write.assign(m.threads, nullptr);
  m.barriers.clear();
  m.exited = false;
}

// Runs the kernel with `m` as the first block of each cluster; the cluster's other blocks are made into
// `peers` (kept by the caller, as `cluster` is, so that an error's location can name every block).
void execute(Machine &m, Cluster &cluster, std::vector<std::unique_ptr<Machine>> &peers,
             std::map<std::string, HostTensor> &buffers, const std::map<std::string, double> &scalars) {
  const Kernel &kernel = m.kernel;
  if (kernel.threads < 1 || kernel.threads > 1024)
    fail("the kernel has {} threads per block; a block has 1 to 1024", kernel.threads);
  const std::vector<int64_t> grid =
      extents_of({kernel.grid.begin(), kernel.grid.end()}, scalars, "the kernel's grid");
  for (int64_t extent : grid)
    if (extent < 1)
      fail("the grid ({}, {}, {}) has no blocks; a launch needs at least one", grid[0], grid[1], grid[2]);
  for (int d = 0; d < 3; ++d)
    if (kernel.cluster[d] < 1 || grid[d] % kernel.cluster[d] != 0)
      fail(
          "the grid ({}, {}, {}) is not a whole number of clusters ({}, {}, {}) (Kernel::cluster): the "
          "launch would fail; round the grid up to whole clusters",
          grid[0], grid[1], grid[2], kernel.cluster[0], kernel.cluster[1], kernel.cluster[2]);
  // Each block of a cluster is a machine of its own, compiled from the same body; they share the global
  // buffers, and run together.
  const int ctas = kernel.cluster[0] * kernel.cluster[1] * kernel.cluster[2];
  cluster.ctas.push_back(&m);
  for (int r = 1; r < ctas; ++r)
    cluster.ctas.push_back(peers.emplace_back(new Machine(kernel, m.options, &m)).get());
  std::vector<std::unique_ptr<StatementCompiler>> compilers;
  std::vector<Exec> bodies;
  std::vector<BoundBuffer> bound;
  for (int r = 0; r < ctas; ++r) {
    Machine &cta = *cluster.ctas[r];
    cta.cluster = &cluster;
    cta.cluster_rank = r;
    StatementCompiler &sc = *compilers.emplace_back(new StatementCompiler(cta));
    sc.add_variable(intrinsic::kThreadIndex);
    for (const char *name : intrinsic::kBlockIndex) sc.add_variable(name);
    const std::vector<std::pair<int, Real>> scalar_slots = bind_scalars(cta, sc, scalars);
    if (r == 0)
      bound = bind_buffers(cta, sc, buffers, scalars);
    else
      for (const BoundBuffer &b : bound) sc.add_buffer(*b.array);
    bodies.push_back(compile_block(cta, sc, scalar_slots));
  }
  // Arrays in disjoint scopes share bytes on the GPU (shared_arrays); here each has its own.
  if (const int needed = shared_arrays(kernel.body).bytes; needed > kernel.shared_bytes)
    fail(
        "the body's shared allocations take {} bytes, but the kernel declares only {} "
        "(Kernel::shared_bytes): "
        "on a GPU the excess would be out of bounds",
        needed, kernel.shared_bytes);
  for (const BoundBuffer &b : bound) {
    b.array->values.resize(b.array->size);
    for (int64_t i = 0; i < b.array->size; ++i) b.array->values[i] = b.tensor->get_linear(i);
  }

  ActiveThreads all(m.threads);
  std::iota(all.begin(), all.end(), 0);
  // Clusters (one block each without clusters) run in the options' order: the blocks of a grid may run in
  // any.
  const std::array<int64_t, 3> dims = {kernel.cluster[0], kernel.cluster[1], kernel.cluster[2]};
  std::vector<std::array<int64_t, 3>> origins;
  for (int64_t z = 0; z < grid[2]; z += dims[2])
    for (int64_t y = 0; y < grid[1]; y += dims[1])
      for (int64_t x = 0; x < grid[0]; x += dims[0]) origins.push_back({x, y, z});
  using BlockOrder = InterpretOptions::BlockOrder;
  if (m.options.block_order == BlockOrder::reversed) std::reverse(origins.begin(), origins.end());
  if (m.options.block_order == BlockOrder::shuffled) {
    std::mt19937 random(20261203);
    std::shuffle(origins.begin(), origins.end(), random);
  }
  for (Machine *cta : cluster.ctas) cta->running = true;
  for (const auto &[x, y, z] : origins) {
    // The block of rank r in the cluster (%cluster_ctarank counts x fastest).
    for (int r = 0; r < ctas; ++r)
      start_block(*cluster.ctas[r],
                  {x + r % dims[0], y + r / dims[0] % dims[1], z + r / (dims[0] * dims[1])});
    cluster.arrived = 0;
    m.where = nullptr;
    if (ctas == 1) {
      bodies[0](all);
    } else {
      std::vector<std::function<void()>> blocks;
      for (int r = 0; r < ctas; ++r)
        blocks.push_back([&, r] {
          bodies[r](all);
          cluster.ctas[r]->exited = true;
        });
      m.groups.run_concurrently(blocks);
    }
    for (const Machine *cta : cluster.ctas)
      for (const auto &[id, b] : cta->barriers)
        if (b.arrived > 0)
          fail(
              "block ({}, {}, {}) ends with {} threads arrived at named barrier {} (of its {}): a "
              "bar.arrive that no bar.sync completed, so the threads it signals never took their turn; "
              "balance each barrier's bar.arrive and bar.sync",
              cta->block[0], cta->block[1], cta->block[2], b.arrived, id, b.threads);
  }
  for (Machine *cta : cluster.ctas) cta->running = false;
  m.where = nullptr;
  for (const BoundBuffer &b : bound) {
    if (!b.array->writable) continue;
    for (int64_t i = 0; i < b.array->size; ++i)
      b.tensor->set_linear(i, static_cast<double>(b.array->values[i]));
  }
}

}  // namespace

void run_kernel(const Kernel &kernel, std::map<std::string, HostTensor> &buffers,
                const std::map<std::string, double> &scalars, const InterpretOptions &options) {
  // The same check the GPU runtime makes before a launch: the lowering relied on these conditions.
  check_requirements(kernel, scalars);
  Machine m(kernel, options);
  Cluster cluster;
  std::vector<std::unique_ptr<Machine>> peers;
  try {
    execute(m, cluster, peers, buffers, scalars);
  } catch (const Error &error) {
    fail("{}: {}", m.location(), error.what());
  }
}

std::map<std::string, HostTensor> run_program(const LoweredProgram &program,
                                              const std::map<std::string, HostTensor> &inputs,
                                              const std::map<std::string, double> &scalars,
                                              const InterpretOptions &options) {
  // Size parameters come from the inputs' shapes, as on the GPU; the other scalars are as given.
  std::map<std::string, std::vector<int64_t>> input_shapes;
  for (const auto &[name, tensor] : inputs) input_shapes.emplace(name, tensor.shape());
  const Scalars bound = bind_arguments(program, input_shapes, scalars);
  std::map<std::string, HostTensor> buffers = inputs;
  auto allocate = [&](const std::string &name, const Type &type, const std::vector<Halide::Expr> &shape,
                      const char *role, bool zeroed = false) {
    if (buffers.count(name))
      fail("program '{}': its {} '{}' has the name of an input tensor; rename one of them", program.name,
           role, name);
    HostTensor tensor(type, extents_of(shape, bound, fmt::format("{} '{}'", role, name)));
    tensor.fill(zeroed ? 0.0 : static_cast<double>(poison(type)));
    buffers.emplace(name, std::move(tensor));
  };
  for (const BufferArg &output : program.outputs) allocate(output.name, output.type, output.shape, "output");
  for (const Workspace &workspace : program.workspaces)
    allocate(workspace.name, workspace.type, workspace.shape, "workspace", workspace.zeroed);
  // A kernel whose requirements these shapes break runs as its fallback, as on a GPU.
  for (const Kernel &kernel : program.kernels)
    run_kernel(select_variant(kernel, bound), buffers, bound, options);
  std::map<std::string, HostTensor> outputs;
  for (const BufferArg &output : program.outputs)
    outputs.emplace(output.name, std::move(buffers.at(output.name)));
  return outputs;
}

}  // namespace twist::reference
