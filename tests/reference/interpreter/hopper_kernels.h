#pragma once
// A one-warpgroup Hopper matrix product written by hand in the loop-nest IR: TMA loads of A (M x K, rows
// 128-byte swizzled) and B (K x N row-major, so MN-major, or N x K, K-major) completing on one mbarrier,
// then K / 16 chained wgmma m64nNk16 reading both through descriptors, and the accumulators stored with
// the PTX ISA's fragment layout. The interpreter tests run it; the CUDA tests compile it for sm_90a.
#include "backends/reference/host_tensor.h"
#include "lang/evaluate.h"
#include "scheduler/hopper_layouts.h"
#include "tests/reference/interpreter/kernel_builder.h"

namespace twist::reference::testing {

struct HopperProduct {
  int m = 64, n = 64, k = 64;   // the tensors' shapes: m <= 64 rows (the rest of the box reads as zero)
  bool b_k_major = false;       // B given as N x K (K-major) instead of K x N
  bool a_in_registers = false;  // A's fragments loaded from global memory into registers
  Type input = f16, accumulator = f32;
  // The accumulator array holds this many atoms' registers and the product lands in the last one, as a
  // warpgroup's later 64-row atoms do (a wgmma with d_index != 0).
  int accumulator_atoms = 1;
  // Deliberate mistakes, for the interpreter's refusals.
  TensorMap::Swizzle a_descriptor_swizzle = TensorMap::Swizzle::b128;
  bool skip_wait = false, wait_twice = false, skip_expect_tx = false, read_before_wait = false,
       touch_accumulator = false;
};

// One box of 64 columns (128 bytes of 16-bit elements) per swizzled row.
inline constexpr int kSwizzleColumns = 64;

inline Kernel hopper_product_kernel(const HopperProduct &p) {
  using hopper::Swizzle;
  const int n_boxes = (p.n + kSwizzleColumns - 1) / kSwizzleColumns;  // B's boxes along N (MN-major)
  const int b_box_elements = p.b_k_major ? p.n * p.k : p.k * kSwizzleColumns;
  const int b_elements = p.b_k_major ? b_box_elements : n_boxes * b_box_elements;
  const int a_bytes = 64 * p.k * 2, b_bytes = b_elements * 2;
  const Expr t = tid();
  const int atom_elements = p.n / 2, last_atom = (p.accumulator_atoms - 1) * atom_elements;
  const intrinsic::MbarrierRef bar{"bar", 0};
  std::vector<Stmt> body;
  body.push_back(if_then(t == 0, intrinsic::mbarrier_init(bar, 1)));
  body.push_back(intrinsic::barrier());
  std::vector<Stmt> issue;
  if (!p.skip_expect_tx)
    issue.push_back(intrinsic::mbarrier_arrive(bar, (p.a_in_registers ? 0 : a_bytes) + b_bytes));
  if (!p.a_in_registers) issue.push_back(intrinsic::tma_copy({true, "A_map", "As", 0, {0, 0}, bar}));
  if (p.b_k_major) {
    issue.push_back(intrinsic::tma_copy({true, "B_map", "Bs", 0, {0, 0}, bar}));
  } else {
    for (int j = 0; j < n_boxes; ++j)
      issue.push_back(
          intrinsic::tma_copy({true, "B_map", "Bs", j * b_box_elements, {0, j * kSwizzleColumns}, bar}));
  }
  body.push_back(if_then(t == 0, block(issue)));
  if (p.a_in_registers) {
    // Each k-step's 8 fragment elements, at hopper::register_a_position, zero below row m.
    const Expr i = i32_var("i"), ks = i32_var("ks");
    const Expr w = t / 32, g = (t % 32) / 4, q = t % 4;
    const Expr row = 16 * w + g + 8 * ((i / 2) % 2), col = ks * 16 + 2 * q + i % 2 + 8 * (i / 4);
    const Expr value = Halide::select(row < p.m, load(p.input, "A", Halide::min(row, p.m - 1) * p.k + col),
                                      Halide::Internal::make_zero(p.input));
    body.push_back(unrolled("ks", p.k / 16, unrolled("i", 8, store("a", value, ks * 8 + i))));
  }
  if (p.read_before_wait) body.push_back(store("D", Halide::cast(p.accumulator, load(p.input, "Bs", 0)), 0));
  if (!p.skip_wait) body.push_back(intrinsic::mbarrier_wait(bar, 0));
  if (p.wait_twice) body.push_back(intrinsic::mbarrier_wait(bar, 0));
  body.push_back(intrinsic::wgmma_fence());
  for (int ks = 0; ks < p.k / 16; ++ks) {
    intrinsic::Wgmma w;
    w.n = p.n;
    w.d = "d";
    w.d_index = last_atom;
    w.accumulate = ks > 0 ? 1 : 0;
    if (p.a_in_registers) {
      w.a_registers = "a";
      w.a_index = ks * 8;
    } else {
      // K-major, 128-byte rows: the k-step moves the start by 32 bytes; 8-row groups are 1024 bytes apart.
      w.a = intrinsic::WgmmaOperand{"As", ks * 16, 0, 1024, p.a_descriptor_swizzle, false};
    }
    if (p.b_k_major)
      w.b = intrinsic::WgmmaOperand{"Bs", ks * 16, 0, 1024, Swizzle::b128, false};
    else  // MN-major: 64-column boxes LBO apart, 8-row groups of k 1024 bytes apart; a k-step is 16 rows.
      w.b = intrinsic::WgmmaOperand{"Bs", ks * 16 * kSwizzleColumns, b_box_elements * 2, 1024, Swizzle::b128,
                                    true};
    body.push_back(intrinsic::wgmma(w));
  }
  body.push_back(intrinsic::wgmma_commit());
  if (p.touch_accumulator) body.push_back(store("D", load(p.accumulator, "d", last_atom), t));
  body.push_back(intrinsic::wgmma_wait(0));
  {
    const Expr i = i32_var("i");
    const Expr w = t / 32, g = (t % 32) / 4, q = t % 4;
    const Expr row = 16 * w + g + 8 * ((i % 4) / 2), col = 8 * (i / 4) + 2 * q + i % 2;
    body.push_back(
        unrolled("i", atom_elements,
                 if_then(row < p.m, store("D", load(p.accumulator, "d", last_atom + i), row * p.n + col))));
  }
  Stmt s = block(body);
  s = register_array("d", p.accumulator, p.accumulator_atoms * atom_elements, s);
  if (p.a_in_registers) s = register_array("a", p.input, p.k / 16 * 8, s);
  s = shared_array("bar", Halide::UInt(64), 1, s);
  s = shared_array("Bs", p.input, b_elements, s);
  if (!p.a_in_registers) s = shared_array("As", p.input, 64 * p.k, s);

  Kernel kernel;
  kernel.name = "hopper_product";
  kernel.buffers = {
      buffer("A", p.input, {p.m, p.k}, BufferArg::Role::input),
      buffer("B", p.input, p.b_k_major ? std::vector<Expr>{p.n, p.k} : std::vector<Expr>{p.k, p.n},
             BufferArg::Role::input),
      buffer("D", p.accumulator, {p.m, p.n}, BufferArg::Role::output)};
  if (!p.a_in_registers) kernel.tensor_maps.push_back({"A_map", "A", {p.m, p.k}, {64, p.k}, Swizzle::b128});
  if (p.b_k_major)
    kernel.tensor_maps.push_back({"B_map", "B", {p.n, p.k}, {p.n, p.k}, Swizzle::b128});
  else
    kernel.tensor_maps.push_back({"B_map", "B", {p.k, p.n}, {p.k, kSwizzleColumns}, Swizzle::b128});
  kernel.grid = {1, 1, 1};
  kernel.threads = hopper::kWarpgroupThreads;
  kernel.shared_bytes = shared_arrays(s).bytes;
  kernel.body = s;
  return kernel;
}

// The product as a program of one kernel, inputs A and B, output D.
inline LoweredProgram program_of(const HopperProduct &p) {
  LoweredProgram program;
  program.name = "hopper_product";
  program.kernels = {hopper_product_kernel(p)};
  program.inputs = {program.kernels[0].buffers[0], program.kernels[0].buffers[1]};
  program.outputs = {program.kernels[0].buffers[2]};
  return program;
}

// Multiples of 1/8 in [-4, 4]: every product and sum is exact, so D is the product rounded once per wgmma.
inline HostTensor dyadic(const Type &type, std::vector<int64_t> shape, uint64_t seed) {
  HostTensor t = random_uniform(i32, shape, seed, -32, 32);
  HostTensor out(type, shape);
  for (int64_t i = 0; i < t.size(); ++i) out.set_linear(i, t.get_linear(i) / 8.0);
  return out;
}

}  // namespace twist::reference::testing
