#include "scheduler/loop_nest.h"

#include <sstream>

#include <fmt/format.h>

#include "lang/error.h"

namespace twist {

namespace {

std::string show(const Halide::Expr &e) {
  std::ostringstream os;
  os << e;
  return os.str();
}

}  // namespace

const char *role_name(BufferArg::Role r) {
  switch (r) {
    case BufferArg::Role::input:
      return "input";
    case BufferArg::Role::output:
      return "output";
    case BufferArg::Role::workspace:
      return "workspace";
  }
  return "?";
}

const char *swizzle_name(TensorMap::Swizzle s) {
  switch (s) {
    case TensorMap::Swizzle::none:
      return "none";
    case TensorMap::Swizzle::b32:
      return "32B";
    case TensorMap::Swizzle::b64:
      return "64B";
    case TensorMap::Swizzle::b128:
      return "128B";
  }
  return "?";
}

SharedArrays shared_arrays(const Stmt &body) {
  using namespace Halide::Internal;
  struct Collect : IRVisitor {
    SharedArrays layout;
    int top = 0;  // the end of the arrays whose scopes enclose the current statement
    using IRVisitor::visit;
    void visit(const Allocate *a) override {
      if (a->memory_type != Halide::MemoryType::GPUShared) return IRVisitor::visit(a);
      const auto *extent = as_const_int(a->extents[0]);
      TWIST_CHECK(extent, "shared array {} has a non-constant extent", a->name);
      const int bytes = static_cast<int>(*extent * a->type.bytes());
      layout.arrays.push_back({a, top, bytes});
      const int outer = top;
      top += (bytes + 127) / 128 * 128;
      layout.bytes = std::max(layout.bytes, top);
      IRVisitor::visit(a);
      top = outer;
    }
  } collect;
  body.accept(&collect);
  return collect.layout;
}

std::string to_string(const Kernel &k) {
  std::string s = fmt::format("kernel {} grid=({}, {}, {}) threads={} shared={}B\n", k.name, show(k.grid[0]),
                              show(k.grid[1]), show(k.grid[2]), k.threads, k.shared_bytes);
  for (const BufferArg &b : k.buffers) {
    std::string shape;
    for (const auto &e : b.shape) shape += (shape.empty() ? "" : ", ") + show(e);
    s += fmt::format("  {} {}: {}[{}]\n", role_name(b.role), b.name, type_name(b.type), shape);
  }
  for (const ScalarArg &a : k.scalars) s += fmt::format("  scalar {}: {}\n", a.name, type_name(a.type));
  for (const TensorMap &m : k.tensor_maps) {
    std::string extents, box;
    for (const auto &e : m.extents) extents += (extents.empty() ? "" : ", ") + show(e);
    for (int b : m.box) box += (box.empty() ? "" : ", ") + std::to_string(b);
    s += fmt::format("  tensor_map {}: {}[{}] box=[{}] swizzle={}\n", m.name, m.buffer, extents, box,
                     swizzle_name(m.swizzle));
  }
  if (!k.wide_offsets.empty()) {
    std::string names;
    for (const std::string &n : k.wide_offsets) names += (names.empty() ? "" : ", ") + n;
    s += fmt::format("  64-bit offsets: {}\n", names);
  }
  if (k.cluster != std::array<int, 3>{1, 1, 1})
    s += fmt::format("  cluster=({}, {}, {})\n", k.cluster[0], k.cluster[1], k.cluster[2]);
  if (k.dependent_launch) s += "  dependent launch\n";
  if (!k.schedule_summary.empty()) s += k.schedule_summary;
  std::ostringstream body;
  body << k.body;
  return s + body.str();
}

std::string to_string(const LoweredProgram &p) {
  std::string s;
  for (const Workspace &w : p.workspaces) {
    std::string shape;
    for (const auto &e : w.shape) shape += (shape.empty() ? "" : ", ") + show(e);
    s +=
        fmt::format("workspace {}: {}[{}]{}\n", w.name, type_name(w.type), shape, w.zeroed ? ", zeroed" : "");
  }
  for (const Kernel &k : p.kernels) s += to_string(k) + "\n";
  return s;
}

}  // namespace twist
