#include <doctest/doctest.h>

#include <elf.h>

#include <cstddef>
#include <cstring>
#include <fstream>
#include <iterator>

#include "backends/cuda/runtime/cubin_elf.h"
#include "backends/cuda/runtime/nvrtc_compiler.h"
#include "lang/error.h"
#include "tests/cuda/test_kernels.h"

using namespace twist;
using namespace twist::cuda;

namespace {

std::string error_of(const std::vector<char> &bytes) {
  try {
    read_cubin_info(bytes);
  } catch (const Error &e) {
    return e.what();
  }
  return "";
}

std::vector<char> bytes_of(std::string_view text) {
  return {text.begin(), text.end()};
}

void set_u32(std::vector<char> &bytes, size_t offset, uint32_t value) {
  std::memcpy(bytes.data() + offset, &value, sizeof(value));
}

}  // namespace

TEST_CASE("read_cubin_info decodes the SM from both e_flags layouts") {
  std::vector<char> cubin = compile_to_cubin(test_kernels::kScaleAdd, "scale_add.cu", {.arch = "sm_80"});
  CubinInfo info = read_cubin_info(cubin);
  CHECK(info.sm == 80);
  CHECK(info.elf_abi_version == 8);  // what CUDA 13 writes: the SM in bits 8-15
  CHECK(info.has_section(".text.scale_add"));
  CHECK(!info.has_section(".text.no_such_kernel"));

  // The older layout (ABI version 7) keeps the SM in the low byte.
  std::vector<char> older = cubin;
  older[EI_ABIVERSION] = 7;
  set_u32(older, offsetof(Elf64_Ehdr, e_flags),
          0x00500550);  // low byte 0x50: sm_80, with the old addressing flags above it
  CHECK(read_cubin_info(older).sm == 80);
  older[EI_ABIVERSION] = 9;
  CHECK(error_of(older).find("ABI version 9") != std::string::npos);
}

TEST_CASE("read_cubin_info refuses what is not a whole CUDA ELF file, saying what it found") {
  CHECK(error_of({}).find("do not start with the ELF magic") != std::string::npos);
  CHECK(error_of(bytes_of(".version 8.8\n.target sm_90a\n")).find("ELF magic") != std::string::npos);

  std::ifstream self("/proc/self/exe", std::ios::binary);
  std::vector<char> host_elf((std::istreambuf_iterator<char>(self)), std::istreambuf_iterator<char>());
  CHECK(error_of(host_elf).find("not EM_CUDA") != std::string::npos);

  std::vector<char> cubin = compile_to_cubin(test_kernels::kScaleAdd, "scale_add.cu", {.arch = "sm_90a"});
  std::vector<char> header_only(cubin.begin(), cubin.begin() + 64);
  CHECK(error_of(header_only).find("truncated") != std::string::npos);
  std::vector<char> half_header(cubin.begin(), cubin.begin() + 40);
  CHECK(error_of(half_header).find("truncated") != std::string::npos);
}
