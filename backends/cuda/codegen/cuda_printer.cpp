#include "backends/cuda/codegen/cuda_printer.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>
#include <map>
#include <set>
#include <sstream>

#include "lang/error.h"
#include "lang/expr.h"
#include "lang/float_formats.h"
#include "scheduler/hopper_layouts.h"
#include "scheduler/intrinsics.h"

namespace twist::cuda {

using namespace Halide::Internal;

std::string c_name(const std::string &name) {
  if (name == intrinsic::kThreadIndex) return name;
  for (const char *b : intrinsic::kBlockIndex)
    if (name == b) return name;
  std::string out;
  for (char c : name) out += std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
  if (out.empty() || std::isdigit(static_cast<unsigned char>(out[0]))) out = "_" + out;
  static const std::set<std::string> reserved = {"int",   "float", "double", "char",    "bool",
                                                 "if",    "for",   "do",     "while",   "return",
                                                 "const", "auto",  "case",   "default", "half"};
  if (reserved.count(out)) out += "_";
  return out;
}

// The name of the 32-bit shared-memory address of shared array `name`'s first element.
std::string shared_base_name(const std::string &name) {
  return c_name(name) + "_address";
}

std::string c_type(const Type &t) {
  if (t.lanes() != 1) fail("the CUDA printer handles scalar types only, not {}", type_name(t));
  if (t.is_bfloat() && t.bits() == 16) return "__nv_bfloat16";
  if (t.is_float() && t.bits() == 16) return "__half";
  if (t.is_float() && t.bits() == 32) return "float";
  if (t.is_float() && t.bits() == 64) return "double";
  if (t.is_bool()) return "bool";
  if (t.is_int() && t.bits() == 32) return "int";
  if (t.is_int() && t.bits() == 64) return "long long";
  if (t.is_uint() && t.bits() == 32) return "unsigned";
  if (t.is_uint() && t.bits() == 64) return "unsigned long long";
  fail("the CUDA printer has no C type for {}", type_name(t));
}

namespace {

bool is_16bit_float(const Type &t) {
  return t.is_float() && t.bits() == 16;
}

std::optional<int> power_of_two(const Halide::Expr &e) {
  const auto *c = as_const_int(e);
  if (!c || *c <= 0 || (*c & (*c - 1)) != 0) return std::nullopt;
  int s = 0;
  while ((int64_t(1) << s) < *c) ++s;
  return s;
}

// mma.sync m16n8k16 with f32 accumulators and inputs of PTX type `in` (f16 or bf16), as twist_mma_f32_<in>.
// clang-format off
std::string mma_f32_helper(const std::string &in) {
  return fmt::format(
      "__device__ __forceinline__ void twist_mma_f32_{0}(float *d, const void *a, const void *b, const float *c) "
      "{{\n"
      "  const unsigned *A = reinterpret_cast<const unsigned *>(a), *B = reinterpret_cast<const unsigned *>(b);\n"
      "  asm volatile(\n"
      "      \"mma.sync.aligned.m16n8k16.row.col.f32.{0}.{0}.f32 {{%0, %1, %2, %3}}, {{%4, %5, %6, %7}}, {{%8, "
      "%9}}, \"\n"
      "      \"{{%10, %11, %12, %13}};\\n\"\n"
      "      : \"=f\"(d[0]), \"=f\"(d[1]), \"=f\"(d[2]), \"=f\"(d[3])\n"
      "      : \"r\"(A[0]), \"r\"(A[1]), \"r\"(A[2]), \"r\"(A[3]), \"r\"(B[0]), \"r\"(B[1]), \"f\"(c[0]), "
      "\"f\"(c[1]),\n"
      "        \"f\"(c[2]), \"f\"(c[3]));\n"
      "}}\n",
      in);
}
// clang-format on

// The device functions a kernel's intrinsics print as. Each kernel's unit defines only the ones it uses.
const std::map<std::string, std::string> &helper_definitions() {
  static const std::map<std::string, std::string> defs = {
      {"div",
       "// Halide's integer division and remainder: rounding towards negative infinity, a non-negative "
       "remainder, and\n"
       "// x / 0 == x % 0 == 0. Branch-free, so that the compiler hoists and shares them like any "
       "arithmetic.\n"
       "__device__ __forceinline__ int twist_div(int a, int b) {\n"
       "  const int d = b == 0 ? 1 : b, q = a / d, r = a - q * d;\n"
       "  return b == 0 ? 0 : q - ((r != 0) & ((r ^ d) < 0));\n"
       "}\n"
       "__device__ __forceinline__ int twist_mod(int a, int b) {\n"
       "  const int d = b == 0 ? 1 : b, r = a - (a / d) * d;\n"
       "  return b == 0 ? 0 : r + ((r < 0) ? (d < 0 ? -d : d) : 0);\n"
       "}\n"},
      {"shift",
       "// Halide's shifts: a negative amount shifts the other way, and shifting out every bit gives 0 (-1 "
       "for "
       "a negative\n"
       "// value shifted right), where C++ leaves both undefined.\n"
       "template <typename T>\n"
       "__device__ __forceinline__ T twist_shift(T a, T b, bool left) {\n"
       "  const bool reverse = b < T(0);\n"
       "  const unsigned long long n = static_cast<unsigned long long>(b), amount = reverse ? 0ull - n : n;\n"
       "  if (reverse) left = !left;\n"
       "  if (amount >= 8 * sizeof(T)) return left || !(a < T(0)) ? T(0) : T(-1);\n"
       "  return left ? static_cast<T>(static_cast<unsigned long long>(a) << amount) : static_cast<T>(a >> "
       "amount);\n"
       "}\n"},
      {"bf16",
       "// A bf16 is the upper half of its f32. As an asm statement, not a shift in C++, so that NVVM does "
       "not\n"
       "// share one widened value between a row's fold and its epilogue: the row stays packed two values to "
       "a\n"
       "// register between them, widened again where each use needs it, as __half2float's cvt does for "
       "f16.\n"
       "__device__ __forceinline__ float twist_bf16_to_float(__nv_bfloat16 v) {\n"
       "  float f;\n"
       "  asm(\"mov.b32 %0, {0, %1};\" : \"=f\"(f) : \"h\"(__bfloat16_as_ushort(v)));\n"
       "  return f;\n"
       "}\n"},
      {"bf16_rounded",
       "// A bf16 rounded where it is used, in no packed row: widened by a shift, which NVVM folds into the\n"
       "// rounding.\n"
       "__device__ __forceinline__ float twist_bf16_rounded_to_float(__nv_bfloat16 v) {\n"
       "  return __uint_as_float(static_cast<unsigned>(__bfloat16_as_ushort(v)) << 16);\n"
       "}\n"},
      {"copy",
       "template <int Bytes> struct twist_chunk;\n"
       "template <> struct twist_chunk<4> { using type = unsigned; };\n"
       "template <> struct twist_chunk<8> { using type = uint2; };\n"
       "template <> struct twist_chunk<16> { using type = uint4; };\n"
       "template <int Bytes>\n"
       "__device__ __forceinline__ void twist_copy_sync(void *dst, const void *src, int src_bytes) {\n"
       "  using T = typename twist_chunk<Bytes>::type;\n"
       "  *reinterpret_cast<T *>(dst) = src_bytes == Bytes ? *reinterpret_cast<const T *>(src) : T{};\n"
       "}\n"
       "template <int Bytes>\n"
       "__device__ __forceinline__ void twist_copy_async(unsigned d, const void *src, int src_bytes) {\n"
       "  if constexpr (Bytes == 16)\n"
       "    asm volatile(\"cp.async.cg.shared.global [%0], [%1], 16, %2;\\n\" ::\"r\"(d), \"l\"(src), "
       "\"r\"(src_bytes)\n"
       "                 : \"memory\");\n"
       "  else\n"
       "    asm volatile(\"cp.async.ca.shared.global [%0], [%1], %2, %3;\\n\" ::\"r\"(d), \"l\"(src), "
       "\"n\"(Bytes),\n"
       "                 \"r\"(src_bytes)\n"
       "                 : \"memory\");\n"
       "}\n"},
      {"ldmatrix",
       "template <int Matrices, bool Transpose>\n"
       "__device__ __forceinline__ void twist_ldmatrix(void *dst, unsigned s) {\n"
       "  unsigned *d = reinterpret_cast<unsigned *>(dst);\n"
       "  if constexpr (Matrices == 4 && !Transpose)\n"
       "    asm volatile(\"ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\\n\"\n"
       "                 : \"=r\"(d[0]), \"=r\"(d[1]), \"=r\"(d[2]), \"=r\"(d[3]) : \"r\"(s));\n"
       "  else if constexpr (Matrices == 4)\n"
       "    asm volatile(\"ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\\n\"\n"
       "                 : \"=r\"(d[0]), \"=r\"(d[1]), \"=r\"(d[2]), \"=r\"(d[3]) : \"r\"(s));\n"
       "  else if constexpr (Matrices == 2 && !Transpose)\n"
       "    asm volatile(\"ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0, %1}, [%2];\\n\" : \"=r\"(d[0]), "
       "\"=r\"(d[1]) : \"r\"(s));\n"
       "  else if constexpr (Matrices == 2)\n"
       "    asm volatile(\"ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0, %1}, [%2];\\n\"\n"
       "                 : \"=r\"(d[0]), \"=r\"(d[1]) : \"r\"(s));\n"
       "  else if constexpr (!Transpose)\n"
       "    asm volatile(\"ldmatrix.sync.aligned.m8n8.x1.shared.b16 {%0}, [%1];\\n\" : \"=r\"(d[0]) : "
       "\"r\"(s));\n"
       "  else\n"
       "    asm volatile(\"ldmatrix.sync.aligned.m8n8.x1.trans.shared.b16 {%0}, [%1];\\n\" : \"=r\"(d[0]) : "
       "\"r\"(s));\n"
       "}\n"},
      {"stmatrix",
       "template <int Matrices, bool Transpose>\n"
       "__device__ __forceinline__ void twist_stmatrix(unsigned d, const void *src) {\n"
       "  const unsigned *s = reinterpret_cast<const unsigned *>(src);\n"
       "  if constexpr (Matrices == 4 && !Transpose)\n"
       "    asm volatile(\"stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};\\n\"\n"
       "                 ::\"r\"(d), \"r\"(s[0]), \"r\"(s[1]), \"r\"(s[2]), \"r\"(s[3]) : \"memory\");\n"
       "  else if constexpr (Matrices == 4)\n"
       "    asm volatile(\"stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 [%0], {%1, %2, %3, %4};\\n\"\n"
       "                 ::\"r\"(d), \"r\"(s[0]), \"r\"(s[1]), \"r\"(s[2]), \"r\"(s[3]) : \"memory\");\n"
       "  else if constexpr (Matrices == 2 && !Transpose)\n"
       "    asm volatile(\"stmatrix.sync.aligned.m8n8.x2.shared.b16 [%0], {%1, %2};\\n\"\n"
       "                 ::\"r\"(d), \"r\"(s[0]), \"r\"(s[1]) : \"memory\");\n"
       "  else if constexpr (Matrices == 2)\n"
       "    asm volatile(\"stmatrix.sync.aligned.m8n8.x2.trans.shared.b16 [%0], {%1, %2};\\n\"\n"
       "                 ::\"r\"(d), \"r\"(s[0]), \"r\"(s[1]) : \"memory\");\n"
       "  else if constexpr (!Transpose)\n"
       "    asm volatile(\"stmatrix.sync.aligned.m8n8.x1.shared.b16 [%0], {%1};\\n\"\n"
       "                 ::\"r\"(d), \"r\"(s[0]) : \"memory\");\n"
       "  else\n"
       "    asm volatile(\"stmatrix.sync.aligned.m8n8.x1.trans.shared.b16 [%0], {%1};\\n\"\n"
       "                 ::\"r\"(d), \"r\"(s[0]) : \"memory\");\n"
       "}\n"},
      {"mma_f32_f16", mma_f32_helper("f16")},
      {"mma_f32_bf16", mma_f32_helper("bf16")},
      {"mma_f16_f16",
       "__device__ __forceinline__ void twist_mma_f16_f16(__half *d, const void *a, const void *b, const "
       "__half *c) {\n"
       "  const unsigned *A = reinterpret_cast<const unsigned *>(a), *B = reinterpret_cast<const unsigned "
       "*>(b);\n"
       "  const unsigned *C = reinterpret_cast<const unsigned *>(c);\n"
       "  unsigned *D = reinterpret_cast<unsigned *>(d);\n"
       "  asm volatile(\n"
       "      \"mma.sync.aligned.m16n8k16.row.col.f16.f16.f16.f16 {%0, %1}, {%2, %3, %4, %5}, {%6, %7}, {%8, "
       "%9};\\n\"\n"
       "      : \"=r\"(D[0]), \"=r\"(D[1])\n"
       "      : \"r\"(A[0]), \"r\"(A[1]), \"r\"(A[2]), \"r\"(A[3]), \"r\"(B[0]), \"r\"(B[1]), \"r\"(C[0]), "
       "\"r\"(C[1]));\n"
       "}\n"},
      {"mbarrier",
       "__device__ __forceinline__ void twist_mbarrier_init(unsigned bar, unsigned arrivals) {\n"
       "  asm volatile(\"mbarrier.init.shared::cta.b64 [%0], %1;\\n\" ::\"r\"(bar), \"r\"(arrivals) : "
       "\"memory\");\n"
       "}\n"
       "__device__ __forceinline__ void twist_mbarrier_arrive(unsigned bar) {\n"
       "  asm volatile(\"mbarrier.arrive.shared::cta.b64 _, [%0];\\n\" ::\"r\"(bar) : \"memory\");\n"
       "}\n"
       "__device__ __forceinline__ void twist_mbarrier_arrive_expect_tx(unsigned bar, unsigned bytes) {\n"
       "  asm volatile(\"mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\\n\" ::\"r\"(bar), "
       "\"r\"(bytes)\n"
       "               : \"memory\");\n"
       "}\n"
       "// Arrives on the barrier at shared address `bar` of cluster CTA `cta` (its own included),\n"
       "// with the arrive's default .release.cta semantics: a consumer releases a slot after\n"
       "// wgmma.wait_group has retired its reads, so nothing needs ordering at cluster scope.\n"
       "__device__ __forceinline__ void twist_mbarrier_arrive_cluster(unsigned bar, unsigned cta) {\n"
       "  asm volatile(\n"
       "      \"{\\n .reg .b32 remote;\\n mapa.shared::cluster.u32 remote, %0, %1;\\n"
       " mbarrier.arrive.shared::cluster.b64 _, [remote];\\n}\\n\"\n"
       "      ::\"r\"(bar), \"r\"(cta) : \"memory\");\n"
       "}\n"
       "__device__ __forceinline__ void twist_mbarrier_wait(unsigned bar, unsigned parity) {\n"
       "  unsigned done;\n"
       "  do {\n"
       "    asm volatile(\n"
       "        \"{\\n .reg .pred p;\\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\\n selp.u32 "
       "%0, 1, 0, "
       "p;\\n}\\n\"\n"
       "        : \"=r\"(done) : \"r\"(bar), \"r\"(parity) : \"memory\");\n"
       "  } while (!done);\n"
       "}\n"},
      {"matrix_descriptor",
       "// A wgmma matrix descriptor (PTX ISA, \"Matrix descriptor format\"): start address, leading and "
       "stride "
       "byte\n"
       "// offsets, each >> 4 in 14 bits, and the swizzle mode in bits 62-63.\n"
       "__device__ __forceinline__ unsigned long long twist_matrix_descriptor(unsigned address, unsigned "
       "lbo, "
       "unsigned sbo,\n"
       "                                                                    unsigned mode) {\n"
       "  return (unsigned long long)((address & 0x3FFFFu) >> 4) | (unsigned long long)((lbo >> 4) & "
       "0x3FFFu) << "
       "16 |\n"
       "         (unsigned long long)((sbo >> 4) & 0x3FFFu) << 32 | (unsigned long long)mode << 62;\n"
       "}\n"},
      {"ex2",
       "__device__ __forceinline__ float twist_ex2_approx(float x) {\n"
       "  float y;\n"
       "  asm(\"ex2.approx.ftz.f32 %0, %1;\\n\" : \"=f\"(y) : \"f\"(x));\n"
       "  return y;\n"
       "}\n"},
  };
  return defs;
}

class Printer {
 public:
  Printer(const Kernel &k, const CodegenOptions &o) : kernel_(k), options_(o) {}

  std::string expr(const Halide::Expr &e);
  void stmt(const Stmt &s, int indent);
  std::string body() const { return out_.str(); }
  const std::set<std::string> &helpers() const { return helpers_; }
  // A helper's text: a fixed one (helper_definitions) or one generated for an instruction's shape.
  const std::string &helper_text(const std::string &name) const {
    const auto generated = generated_helpers_.find(name);
    return generated != generated_helpers_.end() ? generated->second : helper_definitions().at(name);
  }
  // Whether the body addresses shared memory through TMA or wgmma descriptors, whose swizzle patterns
  // need the shared arrays at 1024-byte aligned addresses.
  bool uses_swizzled_tiles() const { return swizzled_tiles_; }
  // The shared arrays whose 32-bit addresses the body uses (see shared_address).
  const std::set<std::string> &shared_addressed() const { return shared_addressed_; }
  void declare_array(const std::string &name, const Type &t) { array_types_[name] = t; }

 private:
  std::string ind(int n) const { return std::string(2 * n, ' '); }
  std::string constant(const Type &t, double v);
  std::string cast(const Type &to, const Halide::Expr &value);
  std::string math(const MathCall &m, const Call *c);
  std::string address(const std::string &buffer, const Halide::Expr &index) {
    return "&" + c_name(buffer) + "[" + expr(index) + "]";
  }
  // The 32-bit shared-memory address of a shared array's element, for the instructions that take one
  // (ldmatrix, cp.async). Computed from the array's own 32-bit base rather than converted from a generic
  // pointer: NVRTC keeps generic pointer arithmetic in 64 bits, two registers per address in the key loops.
  std::string shared_address(const std::string &buffer, const Halide::Expr &index) {
    shared_addressed_.insert(buffer);
    return shared_base_name(buffer) + " + " + expr(index * array_type(buffer).bytes());
  }
  void intrinsic(const Stmt &s, int indent);
  Type array_type(const std::string &name) const {
    auto it = array_types_.find(name);
    TWIST_CHECK(it != array_types_.end(), "no array named '{}' in kernel {}", name, kernel_.name);
    return it->second;
  }

  const Kernel &kernel_;
  const CodegenOptions &options_;
  std::ostringstream out_;
  std::set<std::string> helpers_;
  std::map<std::string, std::string> generated_helpers_;
  bool swizzled_tiles_ = false;
  // The accumulator arrays of the wgmmas printed so far: fenced around the fences and waits that name none.
  std::set<std::string> wgmma_accumulators_;
  // The register arrays of constant extent (name -> elements).
  std::map<std::string, int> register_elements_;
  int register_elements(const std::string &name) const {
    auto it = register_elements_.find(name);
    TWIST_CHECK(it != register_elements_.end(),
                "kernel {}: the wgmma accumulator '{}' is not a register array of constant extent",
                kernel_.name, name);
    return it->second;
  }
  std::string tma_helper(bool load, size_t dims, bool multicast);
  std::string wgmma_helper(const intrinsic::Wgmma &w, const Type &in, const Type &acc);
  std::string descriptor(const intrinsic::WgmmaOperand &o);
  void fence_accumulators(int indent, const std::vector<std::string> &names);
  std::set<std::string> shared_addressed_;
  std::map<std::string, Type> array_types_;
};

std::string Printer::constant(const Type &t, double v) {
  if (t.is_bool()) return v != 0 ? "true" : "false";
  if (t.is_int() || t.is_uint()) {
    const auto i = static_cast<long long>(v);
    // An i64 constant (a 64-bit offset's, wide_offsets.h) is a long long, or min(offset, 7) is ambiguous.
    const char *suffix = t.is_int() && t.bits() == 64 ? "ll" : "";
    return i < 0 ? fmt::format("({}{})", i, suffix) : fmt::format("{}{}", i, suffix);
  }
  if (t.bits() == 16) {
    const bool bf = t.is_bfloat();
    return fmt::format("{}((unsigned short)0x{:04x})", bf ? "__ushort_as_bfloat16" : "__ushort_as_half",
                       bf ? bf16_bits(v) : f16_bits(v));
  }
  if (t.bits() == 32) {
    const float f = static_cast<float>(v);
    if (std::isfinite(f)) {
      std::string text = fmt::format("{:.9g}", f);
      if (text.find_first_of(".e") == std::string::npos) text += ".0";
      return text + "f";
    }
    uint32_t bits;
    std::memcpy(&bits, &f, 4);
    return fmt::format("__uint_as_float(0x{:08x}u)", bits);
  }
  if (std::isfinite(v)) {
    std::string text = fmt::format("{:.17g}", v);
    return text.find_first_of(".e") == std::string::npos ? text + ".0" : text;
  }
  uint64_t bits;
  std::memcpy(&bits, &v, 8);
  return fmt::format("__longlong_as_double(0x{:016x}ll)", bits);
}

std::string Printer::cast(const Type &to, const Halide::Expr &value) {
  const Type from = value.type();
  const std::string v = expr(value);
  if (from == to) return v;
  auto to_float = [&]() -> std::string {
    // A bf16 is the upper half of its f32 (twist_bf16_to_float): a move into the upper half, where
    // cvt.f32.bf16 unpacks each value into a register of its own, and a shift in C++ lets NVVM keep the
    // widened row alive from the fold to the epilogue (64 registers of bf16 rows spilled 104 bytes at 8
    // runs per thread that f16's kept packed without spilling). A value this expression rounds to bf16
    // is in no packed row: there the asm move hides the round trip from NVVM, and Gemma's gate_up epilogue
    // (the gate rounded, widened and used five times per output) spilled 56 bytes that the shift does not.
    if (from.is_bfloat()) {
      const bool rounded_here = value.as<Cast>() != nullptr;
      helpers_.insert(rounded_here ? "bf16_rounded" : "bf16");
      return (rounded_here ? "twist_bf16_rounded_to_float(" : "twist_bf16_to_float(") + v + ")";
    }
    if (is_16bit_float(from)) return "__half2float(" + v + ")";
    return "static_cast<float>(" + v + ")";
  };
  if (to.is_bfloat() && to.bits() == 16) return "__float2bfloat16_rn(" + to_float() + ")";
  if (is_16bit_float(to)) return "__float2half_rn(" + to_float() + ")";
  if (is_16bit_float(from)) {
    if (to.is_float() && to.bits() == 32) return to_float();
    return "static_cast<" + c_type(to) + ">(" + to_float() + ")";
  }
  return "static_cast<" + c_type(to) + ">(" + v + ")";
}

std::string Printer::math(const MathCall &m, const Call *c) {
  std::vector<std::string> args;
  const bool narrow = is_16bit_float(m.type);
  for (const Halide::Expr &a : c->args) args.push_back(narrow ? cast(Halide::Float(32), a) : expr(a));
  const bool f32 = narrow || m.type.bits() == 32;
  std::string call;
  if (f32 && (options_.fast_math || kernel_.fast_math) && m.function == "exp2") {
    helpers_.insert("ex2");
    call = "twist_ex2_approx(" + args[0] + ")";
  } else if (f32 && (options_.fast_math || kernel_.fast_math) && m.function == "exp") {
    // exp(x) = 2^(x log2 e): a multiply and ex2.approx.ftz, where __expf's ex2.approx without ftz adds a
    // compare and two multiplies per call to keep subnormal results.
    helpers_.insert("ex2");
    call = "twist_ex2_approx((" + args[0] + ") * 1.44269504f)";
  } else {
    call = m.function + (f32 ? "f(" : "(") + args[0] + (args.size() > 1 ? ", " + args[1] : "") + ")";
  }
  if (!narrow) return call;
  return m.type.is_bfloat() ? "__float2bfloat16_rn(" + call + ")" : "__float2half_rn(" + call + ")";
}

std::string Printer::expr(const Halide::Expr &e) {
  if (const auto *i = e.as<IntImm>()) return constant(i->type, static_cast<double>(i->value));
  if (const auto *u = e.as<UIntImm>()) return constant(u->type, static_cast<double>(u->value));
  if (const auto *f = e.as<FloatImm>()) return constant(f->type, f->value);
  if (const auto *v = e.as<Variable>()) {
    // CUDA's threadIdx and blockIdx are unsigned; the IR's are i32. Without the cast a difference such as
    // j - i turns into a huge unsigned number instead of a negative one.
    if (v->name == intrinsic::kThreadIndex) return "static_cast<int>(threadIdx.x)";
    for (const char *b : intrinsic::kBlockIndex)
      if (v->name == b) return "static_cast<int>(" + std::string(b) + ")";
    return c_name(v->name);
  }
  if (const auto *c = e.as<Cast>()) return cast(c->type, c->value);
  auto binary = [&](const Halide::Expr &a, const char *op, const Halide::Expr &b) {
    return "(" + expr(a) + " " + op + " " + expr(b) + ")";
  };
  if (const auto *o = e.as<Add>()) return binary(o->a, "+", o->b);
  if (const auto *o = e.as<Sub>()) return binary(o->a, "-", o->b);
  if (const auto *o = e.as<Mul>()) return binary(o->a, "*", o->b);
  if (const auto *o = e.as<Div>()) {
    if (o->type.is_float()) return binary(o->a, "/", o->b);
    if (auto s = power_of_two(o->b)) return "(" + expr(o->a) + " >> " + std::to_string(*s) + ")";
    helpers_.insert("div");
    return "twist_div(" + expr(o->a) + ", " + expr(o->b) + ")";
  }
  if (const auto *o = e.as<Mod>()) {
    if (o->type.is_float()) fail("the CUDA printer does not print floating-point remainders ({})", e);
    if (auto s = power_of_two(o->b)) return "(" + expr(o->a) + " & " + std::to_string((1 << *s) - 1) + ")";
    helpers_.insert("div");
    return "twist_mod(" + expr(o->a) + ", " + expr(o->b) + ")";
  }
  auto minmax = [&](const Halide::Expr &a, const Halide::Expr &b, bool is_max) {
    const Type &t = a.type();
    const char *fn = t.is_float() ? (is_16bit_float(t) ? (is_max ? "__hmax" : "__hmin")
                                     : t.bits() == 32  ? (is_max ? "fmaxf" : "fminf")
                                                       : (is_max ? "fmax" : "fmin"))
                                  : (is_max ? "max" : "min");
    return std::string(fn) + "(" + expr(a) + ", " + expr(b) + ")";
  };
  if (const auto *o = e.as<Min>()) return minmax(o->a, o->b, false);
  if (const auto *o = e.as<Max>()) return minmax(o->a, o->b, true);
  if (const auto *o = e.as<EQ>()) return binary(o->a, "==", o->b);
  if (const auto *o = e.as<NE>()) return binary(o->a, "!=", o->b);
  if (const auto *o = e.as<LT>()) return binary(o->a, "<", o->b);
  if (const auto *o = e.as<LE>()) return binary(o->a, "<=", o->b);
  if (const auto *o = e.as<GT>()) return binary(o->a, ">", o->b);
  if (const auto *o = e.as<GE>()) return binary(o->a, ">=", o->b);
  if (const auto *o = e.as<And>()) return binary(o->a, "&&", o->b);
  if (const auto *o = e.as<Or>()) return binary(o->a, "||", o->b);
  if (const auto *o = e.as<Not>()) return "(!" + expr(o->a) + ")";
  if (const auto *s = e.as<Select>())
    return "(" + expr(s->condition) + " ? " + expr(s->true_value) + " : " + expr(s->false_value) + ")";
  if (const auto *l = e.as<Load>()) return c_name(l->name) + "[" + expr(l->index) + "]";
  if (const auto *l = e.as<Let>())
    return "[&] { const " + c_type(l->value.type()) + " " + c_name(l->name) + " = " + expr(l->value) +
           "; return " + expr(l->body) + "; }()";
  if (const auto *c = e.as<Call>()) {
    if (auto m = as_math_call(c)) return math(*m, c);
    if (c->is_intrinsic(Call::likely) || c->is_intrinsic(Call::likely_if_innermost)) return expr(c->args[0]);
    if (c->is_intrinsic(Call::abs)) {
      const Type &t = c->args[0].type();
      if (is_16bit_float(t)) return "__habs(" + expr(c->args[0]) + ")";
      return std::string(t.is_float() ? (t.bits() == 32 ? "fabsf(" : "fabs(") : "abs(") + expr(c->args[0]) +
             ")";
    }
    if (c->is_intrinsic(Call::bitwise_and)) return binary(c->args[0], "&", c->args[1]);
    if (c->is_intrinsic(Call::bitwise_or)) return binary(c->args[0], "|", c->args[1]);
    if (c->is_intrinsic(Call::bitwise_xor)) return binary(c->args[0], "^", c->args[1]);
    if (c->is_intrinsic(Call::bitwise_not)) return "(~" + expr(c->args[0]) + ")";
    if (c->is_intrinsic({Call::shift_left, Call::shift_right})) {
      helpers_.insert("shift");
      return "twist_shift(" + expr(c->args[0]) + ", static_cast<" + c_type(c->type) + ">(" +
             expr(c->args[1]) + "), " + (c->is_intrinsic(Call::shift_left) ? "true" : "false") + ")";
    }
  }
  fail("the CUDA printer cannot print {} in kernel {}", e, kernel_.name);
}

void Printer::intrinsic(const Stmt &s, int n) {
  if (intrinsic::is_barrier(s)) {
    out_ << ind(n) << "__syncthreads();\n";
  } else if (auto b = intrinsic::as_named_barrier(s)) {
    // A constant id is written into the instruction; one computed per warpgroup is a register operand.
    const char *op = b->arrive ? "bar.arrive " : "bar.sync ";
    if (const int64_t *id = as_const_int(b->id))
      out_ << ind(n) << "asm volatile(\"" << op << *id << ", " << b->threads << ";\\n\" ::: \"memory\");\n";
    else
      out_ << ind(n) << "asm volatile(\"" << op << "%0, " << b->threads << ";\\n\" :: \"r\"(" << expr(b->id)
           << ") : \"memory\");\n";
  } else if (auto c = intrinsic::as_copy(s)) {
    helpers_.insert("copy");
    out_ << ind(n) << (c->async ? "twist_copy_async<" : "twist_copy_sync<") << c->bytes << ">("
         << (c->async ? shared_address(c->dst, c->dst_index) : address(c->dst, c->dst_index)) << ", "
         << address(c->src, c->src_index) << ", " << expr(c->src_bytes) << ");\n";
  } else if (intrinsic::is_async_commit(s)) {
    out_ << ind(n) << "asm volatile(\"cp.async.commit_group;\\n\" ::: \"memory\");\n";
  } else if (auto w = intrinsic::as_async_wait(s)) {
    out_ << ind(n) << "asm volatile(\"cp.async.wait_group " << *w << ";\\n\" ::: \"memory\");\n";
  } else if (auto mv = intrinsic::as_matrix_move(s)) {
    // The helpers take the destination first, as the instructions do.
    const bool load = mv->direction == intrinsic::MatrixMove::Direction::load;
    const std::string helper = load ? "ldmatrix" : "stmatrix";
    const std::string registers = address(mv->registers, mv->registers_index),
                      shared = shared_address(mv->shared, mv->shared_index);
    helpers_.insert(helper);
    out_ << ind(n) << "twist_" << helper << "<" << mv->matrices << ", " << (mv->transpose ? "true" : "false")
         << ">(" << (load ? registers + ", " + shared : shared + ", " + registers) << ");\n";
  } else if (auto m = intrinsic::as_mma(s)) {
    const Type in = array_type(m->a), acc = array_type(m->c);
    std::string helper;
    if (acc == Halide::Float(32))
      helper = in.is_bfloat() ? "mma_f32_bf16" : "mma_f32_f16";
    else if (acc == Halide::Float(16) && !in.is_bfloat())
      helper = "mma_f16_f16";
    else
      fail("kernel {}: no mma.sync atom multiplies {} with {} accumulation", kernel_.name, type_name(in),
           type_name(acc));
    helpers_.insert(helper);
    out_ << ind(n) << "twist_" << helper << "(" << address(m->d, m->d_index) << ", "
         << address(m->a, m->a_index) << ", " << address(m->b, m->b_index) << ", "
         << address(m->c, m->c_index) << ");\n";
  } else if (auto sh = intrinsic::as_shuffle_xor(s)) {
    out_ << ind(n) << c_name(sh->dst) << "[" << expr(sh->dst_index) << "] = __shfl_xor_sync(0xffffffffu, "
         << expr(sh->value) << ", " << sh->lane_mask << ");\n";
  } else if (auto a = intrinsic::as_atomic_add(s)) {
    out_ << ind(n) << "atomicAdd(" << address(a->buffer, a->index) << ", " << expr(a->value) << ");\n";
  } else if (intrinsic::is_threadfence(s)) {
    out_ << ind(n) << "__threadfence();\n";
  } else if (auto t = intrinsic::as_arrival_ticket(s)) {
    out_ << ind(n) << c_name(t->dst) << "[" << expr(t->dst_index) << "] = atomicAdd("
         << address(t->counter, t->counter_index) << ", 1);\n";
  } else if (auto b = intrinsic::as_mbarrier(s)) {
    helpers_.insert("mbarrier");
    const std::string bar = shared_address(b->barrier.array, b->barrier.index);
    using Kind = intrinsic::MbarrierOp::Kind;
    if (b->kind == Kind::init)
      out_ << ind(n) << "twist_mbarrier_init(" << bar << ", " << b->arrivals << ");\n";
    else if (b->kind == Kind::arrive && b->expect_tx_bytes.defined())
      out_ << ind(n) << "twist_mbarrier_arrive_expect_tx(" << bar << ", " << expr(b->expect_tx_bytes)
           << ");\n";
    else if (b->kind == Kind::arrive && b->cta.defined())
      out_ << ind(n) << "twist_mbarrier_arrive_cluster(" << bar << ", " << expr(b->cta) << ");\n";
    else if (b->kind == Kind::arrive)
      out_ << ind(n) << "twist_mbarrier_arrive(" << bar << ");\n";
    else
      out_ << ind(n) << "twist_mbarrier_wait(" << bar << ", " << expr(b->parity) << ");\n";
  } else if (auto t = intrinsic::as_tma_copy(s)) {
    swizzled_tiles_ = true;
    const std::string helper = tma_helper(t->load, t->coordinates.size(), t->multicast.defined());
    out_ << ind(n) << helper << "(" << shared_address(t->shared, t->shared_index) << ", &"
         << c_name(t->tensor_map);
    if (t->load) out_ << ", " << shared_address(t->barrier.array, t->barrier.index);
    if (t->multicast.defined()) out_ << ", " << expr(t->multicast);
    // PTX lists the coordinates innermost first.
    for (size_t d = t->coordinates.size(); d-- > 0;) out_ << ", " << expr(t->coordinates[d]);
    out_ << ");\n";
  } else if (intrinsic::is_tma_store_commit(s)) {
    out_ << ind(n) << "asm volatile(\"cp.async.bulk.commit_group;\\n\" ::: \"memory\");\n";
  } else if (auto w = intrinsic::as_tma_store_wait(s)) {
    out_ << ind(n) << "asm volatile(\"cp.async.bulk.wait_group.read " << *w << ";\\n\" ::: \"memory\");\n";
  } else if (intrinsic::is_cluster_sync(s)) {
    out_ << ind(n)
         << "asm "
            "volatile(\"barrier.cluster.arrive.release.aligned;\\nbarrier.cluster.wait.acquire.aligned;\\n\" "
            "::: \"memory\");\n";
  } else if (intrinsic::is_fence_mbarrier_init(s)) {
    out_ << ind(n) << "asm volatile(\"fence.mbarrier_init.release.cluster;\\n\" ::: \"memory\");\n";
  } else if (intrinsic::is_fence_proxy_async(s)) {
    out_ << ind(n) << "asm volatile(\"fence.proxy.async.shared::cta;\\n\" ::: \"memory\");\n";
  } else if (auto g = intrinsic::as_wgmma(s)) {
    swizzled_tiles_ = true;
    const Type acc = array_type(g->d), in = array_type(g->b.array);
    // A wgmma may write any atom of its accumulator array (d_index moves with the warpgroup's 64-row atoms),
    // so the whole array is pinned, not only the registers of one atom.
    wgmma_accumulators_.insert(g->d);
    out_ << ind(n) << wgmma_helper(*g, in, acc) << "(" << address(g->d, g->d_index) << ", "
         << (g->a ? descriptor(*g->a) : address(g->a_registers, g->a_index)) << ", " << descriptor(g->b)
         << ", " << expr(g->accumulate) << ");\n";
  } else if (intrinsic::is_wgmma_fence(s)) {
    fence_accumulators(n, intrinsic::wgmma_ordered_accumulators(s));
    out_ << ind(n) << "asm volatile(\"wgmma.fence.sync.aligned;\\n\" ::: \"memory\");\n";
  } else if (intrinsic::is_wgmma_commit(s)) {
    out_ << ind(n) << "asm volatile(\"wgmma.commit_group.sync.aligned;\\n\" ::: \"memory\");\n";
  } else if (auto w = intrinsic::as_wgmma_wait(s)) {
    out_ << ind(n) << "asm volatile(\"wgmma.wait_group.sync.aligned " << *w << ";\\n\" ::: \"memory\");\n";
    fence_accumulators(n, intrinsic::wgmma_ordered_accumulators(s));
  } else if (auto r = intrinsic::as_setmaxnreg(s)) {
    out_ << ind(n) << "asm volatile(\"setmaxnreg." << (r->increase ? "inc" : "dec") << ".sync.aligned.u32 "
         << r->registers << ";\\n\");\n";
  } else {
    fail("the CUDA printer does not know the intrinsic {}", s.as<Evaluate>()->value);
  }
}

std::string Printer::descriptor(const intrinsic::WgmmaOperand &o) {
  helpers_.insert("matrix_descriptor");
  return fmt::format("twist_matrix_descriptor({}, {}, {}, {})", shared_address(o.array, o.index),
                     o.leading_bytes, o.stride_bytes, hopper::swizzle_mode_code(o.swizzle));
}

// The compiler must not move the accumulators' reads and writes across a wgmma's fence or wait (the asm
// statements of wgmma name them, the fence and the wait do not): an empty asm that "changes" each one pins
// them there. Only `names` (all when empty): pinning the accumulators of a wgmma in flight would be a use of
// them, which ptxas answers by waiting for that wgmma.
// Named arrays are pinned even before the source has shown a wgmma on them: the fence before an array's
// first wgmma orders the writes just before it (a rescale the compiler would otherwise sink past the fence,
// which ptxas answers with a wait for every wgmma in flight, C7517).
void Printer::fence_accumulators(int n, const std::vector<std::string> &names) {
  for (const std::string &name :
       names.empty() ? std::vector<std::string>(wgmma_accumulators_.begin(), wgmma_accumulators_.end())
                     : names) {
    const bool f32 = array_type(name).bits() == 32;
    const int registers = f32 ? register_elements(name) : register_elements(name) / 2;
    out_ << ind(n) << "#pragma unroll\n"
         << ind(n) << "for (int r = 0; r < " << registers << "; ++r) asm volatile(\"\" : \"+"
         << (f32 ? "f" : "r") << "\"("
         << (f32 ? c_name(name) + "[r]" : "reinterpret_cast<unsigned *>(" + c_name(name) + ")[r]")
         << ")::\"memory\");\n";
  }
}

// twist_tma_{load,load_multicast,store}_<dims>d(shared address, tensor map, [mbarrier,] [CTA mask,]
// coordinates innermost first).
std::string Printer::tma_helper(bool load, size_t dims, bool multicast) {
  const std::string name = fmt::format("twist_tma_{}_{}d",
                                       multicast ? "load_multicast"
                                       : load    ? "load"
                                                 : "store",
                                       dims);
  if (generated_helpers_.count(name)) {
    helpers_.insert(name);
    return name;
  }
  std::string params = "unsigned dst, const CUtensorMap *map", coords, operands;
  if (!load) params = "unsigned src, const CUtensorMap *map";
  if (load) params += ", unsigned bar";
  if (multicast) params += ", unsigned short cta_mask";
  const size_t first = multicast ? 4 : load ? 3 : 2;
  for (size_t d = 0; d < dims; ++d) {
    params += fmt::format(", int c{}", d);
    coords += fmt::format("{}%{}", d ? ", " : "", first + d);
    operands += fmt::format(", \"r\"(c{})", d);
  }
  std::string text = "__device__ __forceinline__ void " + name + "(" + params + ") {\n";
  if (multicast)
    text += fmt::format(
        "  asm volatile(\"cp.async.bulk.tensor.{}d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
        ".multicast::cluster [%0], [%1, {{{}}}], [%2], %3;\\n\"\n"
        "               ::\"r\"(dst), \"l\"(map), \"r\"(bar), \"h\"(cta_mask){} : \"memory\");\n",
        dims, coords, operands);
  else if (load)
    text += fmt::format(
        "  asm volatile(\"cp.async.bulk.tensor.{}d.shared::cluster.global.tile.mbarrier::complete_tx::bytes "
        "[%0], [%1, {{{}}}], [%2];\\n\"\n"
        "               ::\"r\"(dst), \"l\"(map), \"r\"(bar){} : \"memory\");\n",
        dims, coords, operands);
  else
    text += fmt::format(
        "  asm volatile(\"cp.async.bulk.tensor.{}d.global.shared::cta.tile.bulk_group [%1, {{{}}}], "
        "[%0];\\n\"\n"
        "               ::\"r\"(src), \"l\"(map){} : \"memory\");\n",
        dims, coords, operands);
  text += "}\n";
  generated_helpers_[name] = text;
  helpers_.insert(name);
  return name;
}

// twist_wgmma_m64n<N>k16_<acc>_<in>_<ss|rs><transposes>(d, A descriptor or registers, B descriptor,
// accumulate): one asm statement naming each accumulator register.
std::string Printer::wgmma_helper(const intrinsic::Wgmma &w, const Type &in, const Type &acc) {
  const bool f32 = acc.bits() == 32, registers_a = !w.a.has_value();
  const std::string in_name = in.is_bfloat() ? "bf16" : "f16", acc_name = f32 ? "f32" : "f16";
  const int ta = w.a && w.a->mn_major ? 1 : 0, tb = w.b.mn_major ? 1 : 0;
  const std::string name = fmt::format("twist_wgmma_m64n{}k16_{}_{}_{}{}{}", w.n, acc_name, in_name,
                                       registers_a ? "rs" : "ss", ta, tb);
  helpers_.insert(name);
  if (generated_helpers_.count(name)) return name;
  const int d_registers = f32 ? w.n / 2 : w.n / 4;
  std::string d_list, d_operands;
  for (int r = 0; r < d_registers; ++r) {
    d_list += fmt::format("{}%{}", r ? ", " : "", r);
    d_operands += fmt::format("{}\"+{}\"(D[{}])", r ? ", " : "", f32 ? "f" : "r", r);
  }
  int next = d_registers;
  std::string a_text, a_operands;
  if (registers_a) {
    a_text = fmt::format("{{%{}, %{}, %{}, %{}}}", next, next + 1, next + 2, next + 3);
    a_operands = "\"r\"(A[0]), \"r\"(A[1]), \"r\"(A[2]), \"r\"(A[3]), ";
    next += 4;
  } else {
    a_text = fmt::format("%{}", next++);
    a_operands = "\"l\"(a), ";
  }
  const int b_operand = next++, accumulate_operand = next++;
  const std::string transposes = registers_a ? fmt::format("{}", tb) : fmt::format("{}, {}", ta, tb);
  std::string text = fmt::format(
      "__device__ __forceinline__ void {}({} *d, {}, unsigned long long b, int accumulate) {{\n", name,
      f32 ? "float" : "__half", registers_a ? "const void *a_registers" : "unsigned long long a");
  text += f32 ? "  float *D = d;\n" : "  unsigned *D = reinterpret_cast<unsigned *>(d);\n";
  if (registers_a) text += "  const unsigned *A = reinterpret_cast<const unsigned *>(a_registers);\n";
  text += fmt::format(
      "  asm volatile(\n"
      "      \"{{\\n .reg .pred p;\\n setp.ne.b32 p, %{}, 0;\\n\"\n"
      "      \" wgmma.mma_async.sync.aligned.m64n{}k16.{}.{}.{} {{{}}}, {}, %{}, p, 1, 1, {};\\n}}\\n\"\n"
      "      : {}\n"
      "      : {}\"l\"(b), \"r\"(accumulate)\n"
      "      : \"memory\");\n}}\n",
      accumulate_operand, w.n, acc_name, in_name, in_name, d_list, a_text, b_operand, transposes, d_operands,
      a_operands);
  generated_helpers_[name] = text;
  return name;
}

void Printer::stmt(const Stmt &s, int n) {
  if (!s.defined()) return;
  if (const auto *b = s.as<Block>()) {
    stmt(b->first, n);
    stmt(b->rest, n);
  } else if (s.as<LetStmt>()) {
    // A chain of lets shares one scope.
    out_ << ind(n) << "{\n";
    Stmt body = s;
    while (const auto *l = body.as<LetStmt>()) {
      out_ << ind(n + 1) << "const " << c_type(l->value.type()) << " " << c_name(l->name) << " = "
           << expr(l->value) << ";\n";
      body = l->body;
    }
    stmt(body, n + 1);
    out_ << ind(n) << "}\n";
  } else if (const auto *f = s.as<For>()) {
    if (f->for_type == ForType::Unrolled) out_ << ind(n) << "#pragma unroll\n";
    const std::string v = c_name(f->name);
    out_ << ind(n) << "for (int " << v << " = " << expr(f->min) << "; " << v << " < "
         << expr(simplify(f->min + f->extent)) << "; ++" << v << ") {\n";
    stmt(f->body, n + 1);
    out_ << ind(n) << "}\n";
  } else if (const auto *i = s.as<IfThenElse>()) {
    out_ << ind(n) << "if (" << expr(i->condition) << ") {\n";
    stmt(i->then_case, n + 1);
    if (i->else_case.defined()) {
      out_ << ind(n) << "} else {\n";
      stmt(i->else_case, n + 1);
    }
    out_ << ind(n) << "}\n";
  } else if (const auto *a = s.as<Allocate>()) {
    declare_array(a->name, a->type);
    if (a->memory_type == Halide::MemoryType::Register) {
      if (const int64_t *elements = Halide::Internal::as_const_int(a->extents[0]))
        register_elements_[a->name] = static_cast<int>(*elements);
      out_ << ind(n) << "__align__(16) " << c_type(a->type) << " " << c_name(a->name) << "["
           << expr(a->extents[0]) << "];\n";
    }
    stmt(a->body, n);
  } else if (const auto *st = s.as<Store>()) {
    out_ << ind(n) << c_name(st->name) << "[" << expr(st->index) << "] = " << expr(st->value) << ";\n";
  } else if (intrinsic::is_intrinsic(s)) {
    intrinsic(s, n);
  } else if (const auto *e = s.as<Evaluate>()) {
    // A constant is the empty statement (stmt::block of nothing); printed, nvcc warns it has no effect.
    if (!is_const(e->value)) out_ << ind(n) << expr(e->value) << ";\n";
  } else {
    std::ostringstream os;
    os << s;
    fail("the CUDA printer cannot print this statement of kernel {}:\n{}", kernel_.name, os.str());
  }
}

// Whether C++ `text` has the identifier `name` (not as part of a longer identifier such as name_address).
bool names_identifier(const std::string &text, const std::string &name) {
  auto identifier_char = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; };
  for (size_t at = text.find(name); at != std::string::npos; at = text.find(name, at + 1)) {
    const size_t end = at + name.size();
    if ((at == 0 || !identifier_char(text[at - 1])) && (end == text.size() || !identifier_char(text[end])))
      return true;
  }
  return false;
}

// The statement without the lets that nothing reads, which nvcc would warn of. A pass after a kernel's
// builder can take away a let's last use (share_address_bases turns an accumulator's column into an offset
// from a shared base); the body goes first, so that a let read only by such lets goes too.
class WithoutUnusedLets : public IRMutator {
  using IRMutator::visit;
  Stmt visit(const LetStmt *op) override {
    Stmt body = mutate(op->body);
    if (!stmt_uses_var(body, op->name)) return body;
    return body.same_as(op->body) ? Stmt(op) : LetStmt::make(op->name, op->value, body);
  }
};

}  // namespace

std::string cuda_source(const Kernel &k, const CodegenOptions &options) {
  Printer printer(k, options);
  const Stmt kernel_body = WithoutUnusedLets().mutate(k.body);
  const SharedArrays shared = shared_arrays(kernel_body);
  if (shared.bytes > k.shared_bytes)
    fail("kernel {}: its shared arrays take {} bytes but it was lowered for {}", k.name, shared.bytes,
         k.shared_bytes);
  std::ostringstream params;
  for (const BufferArg &b : k.buffers) {
    printer.declare_array(b.name, b.type);
    params << (params.tellp() ? ", " : "") << (b.role == BufferArg::Role::input ? "const " : "")
           << c_type(b.type) << " *__restrict__ " << c_name(b.name);
  }
  for (const ScalarArg &s : k.scalars)
    params << (params.tellp() ? ", " : "") << c_type(s.type) << " " << c_name(s.name);
  for (const TensorMap &m : k.tensor_maps)
    params << (params.tellp() ? ", " : "") << "const __grid_constant__ CUtensorMap " << c_name(m.name);

  printer.stmt(kernel_body, 1);
  // The shared arrays, and the 32-bit addresses of those that ldmatrix or cp.async address.
  std::ostringstream body;
  if (!shared.arrays.empty())
    body << "  extern __shared__ __align__(" << (printer.uses_swizzled_tiles() ? 1024 : 128)
         << ") unsigned char twist_smem[];\n";
  if (!printer.shared_addressed().empty())
    body << "  const unsigned twist_smem_base = "
            "static_cast<unsigned>(__cvta_generic_to_shared(twist_smem));\n";
  for (const SharedArray &a : shared.arrays) {
    // A typed pointer where the body names the array: arrays that only TMA, wgmma or mbarriers use go by
    // their 32-bit address, and nvcc warns of a pointer never referenced.
    if (names_identifier(printer.body(), c_name(a.allocate->name)))
      body << "  " << c_type(a.allocate->type) << " *" << c_name(a.allocate->name) << " = reinterpret_cast<"
           << c_type(a.allocate->type) << " *>(twist_smem + " << a.offset << ");\n";
    if (printer.shared_addressed().count(a.allocate->name))
      body << "  const unsigned " << shared_base_name(a.allocate->name) << " = twist_smem_base + " << a.offset
           << ";\n";
  }

  std::ostringstream unit;
  unit << "// Generated by twist from the schedule below; do not edit.\n";
  std::istringstream summary(k.schedule_summary);
  for (std::string line; std::getline(summary, line);) unit << "//" << line << "\n";
  unit << "#include <cuda_fp16.h>\n#include <cuda_bf16.h>\n\n";
  // The driver's opaque TMA descriptor as cuda.h declares it (NVRTC does not ship cuda.h): passed by value
  // and read by cp.async.bulk.tensor through its parameter-space address.
  if (!k.tensor_maps.empty())
    unit << "struct alignas(128) CUtensorMap {\n  unsigned long long opaque[16];\n};\n\n";
  for (const std::string &h : printer.helpers()) unit << printer.helper_text(h) << "\n";
  unit << "extern \"C\" __global__ void __launch_bounds__(" << k.threads << ", " << k.min_blocks_per_sm
       << ") " << c_name(k.name) << "(" << params.str() << ") {\n";
  // Kernel::dependent_launch: the grids before this one in the stream complete (and their writes become
  // visible) before anything here reads memory; the next kernel may launch once every block has started.
  // sm_90 instructions, so that the same source still compiles for sm_80.
  if (k.dependent_launch)
    unit << "#if __CUDA_ARCH__ >= 900\n"
            "  asm volatile(\"griddepcontrol.wait;\" ::: \"memory\");\n"
            "  asm volatile(\"griddepcontrol.launch_dependents;\" :::);\n"
            "#endif\n";
  unit << body.str() << printer.body() << "}\n";
  return unit.str();
}

}  // namespace twist::cuda
