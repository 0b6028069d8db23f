// The AOT manifest's launch description: each kernel's thread-block cluster, whether it is launched
// dependently (programmatic stream serialization), and its TMA tensor maps (with
// evaluated extents), and the tensor maps' places among the kernel's arguments. Needs no GPU (NVRTC only).
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "backends/cuda/program/export_program.h"

using namespace twist;
using Halide::Expr;

namespace {

std::string read(const std::filesystem::path &path) {
  std::ifstream f(path);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

}  // namespace

TEST_CASE(
    "the manifest gives each kernel its cluster, its tensor maps and their places among the arguments") {
  const Expr m = Halide::Internal::Variable::make(Halide::Int(32), "M");
  const Expr k = Halide::Internal::Variable::make(Halide::Int(32), "K");
  Kernel kernel;
  kernel.name = "copy";
  kernel.grid = {Expr(2), Expr(1), Expr(1)};
  kernel.threads = 128;
  kernel.buffers = {{"C", f32, {m, k}, BufferArg::Role::output},
                    {"A", bf16, {Expr(2), m, k}, BufferArg::Role::input}};
  kernel.scalars = {{"M", i32}};
  kernel.tensor_maps = {{"A_map", "A", {Expr(2) * m, k}, {64, 64}, TensorMap::Swizzle::b128},
                        {"C_map", "C", {m, k}, {32, 16}, TensorMap::Swizzle::none}};
  kernel.cluster = {2, 1, 1};
  kernel.dependent_launch = true;
  kernel.body = Halide::Internal::Evaluate::make(0);
  LoweredProgram program;
  program.name = "copy";
  program.kernels = {kernel};
  program.inputs = {kernel.buffers[1]};
  program.outputs = {kernel.buffers[0]};
  program.scalars = {{"M", i32}, {"K", i32}};
  cuda::ExportRequest request;
  request.label = "copy";
  request.scalars = {{"M", 100}, {"K", 64}};
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / "twist_export_program_test";
  const std::string manifest = read(cuda::export_program(program, request, dir));
  INFO(manifest);
  CHECK(manifest.find("\"cluster\": [2, 1, 1], \"dependent_launch\": true") != std::string::npos);
  CHECK(manifest.find(
            "\"args\": [{\"buffer\": \"C\"}, {\"buffer\": \"A\"}, {\"scalar\": \"M\", \"dtype\": \"i32\", "
            "\"value\": 100}, {\"tensor_map\": \"A_map\"}, {\"tensor_map\": \"C_map\"}]") !=
        std::string::npos);
  CHECK(manifest.find("{\"name\": \"A_map\", \"buffer\": \"A\", \"dtype\": \"bf16\", \"extents\": [200, 64], "
                      "\"strides\": [64, 1], \"box\": [64, 64], \"swizzle\": 128}") != std::string::npos);
  CHECK(manifest.find("{\"name\": \"C_map\", \"buffer\": \"C\", \"dtype\": \"f32\", \"extents\": [100, 64], "
                      "\"strides\": [64, 1], \"box\": [32, 16], \"swizzle\": 0}") != std::string::npos);
  const std::string header = read(dir / "copy.copy.h");
  CHECK(header.find("#include <cuda.h>") != std::string::npos);
  CHECK(header.find("in clusters of (2, 1, 1) blocks") != std::string::npos);
  CHECK(header.find("cudaLaunchAttributeProgrammaticStreamSerialization") != std::string::npos);
  CHECK(header.find("const __grid_constant__ CUtensorMap A_map") != std::string::npos);
}
