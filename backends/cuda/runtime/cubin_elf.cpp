#include "backends/cuda/runtime/cubin_elf.h"

#include <elf.h>

#include <algorithm>
#include <cstring>

#include "lang/error.h"

namespace twist::cuda {

namespace {

// The two layouts of e_flags (ELFABIVERSION_CUDA_V1 and _V2 in LLVM's ELF.h).
constexpr int kCudaElfAbiLowByteSm = 7;
constexpr int kCudaElfAbiSecondByteSm = 8;

template <typename T>
T read_at(std::span<const char> bytes, uint64_t offset, const char *what) {
  if (offset > bytes.size() || bytes.size() - offset < sizeof(T))
    fail("the cubin ({} bytes) is truncated: its {} at byte {} runs past the end; recompile it", bytes.size(),
         what, offset);
  T value;
  std::memcpy(&value, bytes.data() + offset, sizeof(T));
  return value;
}

}  // namespace

bool CubinInfo::has_section(std::string_view name) const {
  return std::find(section_names.begin(), section_names.end(), name) != section_names.end();
}

CubinInfo read_cubin_info(std::span<const char> cubin) {
  if (cubin.size() < SELFMAG || std::memcmp(cubin.data(), ELFMAG, SELFMAG) != 0)
    fail(
        "the bytes given as a cubin ({} bytes) do not start with the ELF magic \\x7fELF; pass the output of "
        "nvrtcGetCUBIN (not PTX or a fatbinary)",
        cubin.size());
  auto header = read_at<Elf64_Ehdr>(cubin, 0, "ELF header");
  if (header.e_ident[EI_CLASS] != ELFCLASS64 || header.e_ident[EI_DATA] != ELFDATA2LSB)
    fail("the cubin is not a 64-bit little-endian ELF file (class {}, data {}); it was not produced by NVRTC",
         header.e_ident[EI_CLASS], header.e_ident[EI_DATA]);
  if (header.e_machine != EM_CUDA)
    fail("the ELF file is for machine {}, not EM_CUDA ({}); it is not a cubin", header.e_machine, EM_CUDA);

  CubinInfo info;
  info.elf_abi_version = header.e_ident[EI_ABIVERSION];
  if (info.elf_abi_version == kCudaElfAbiLowByteSm)
    info.sm = header.e_flags & 0xff;
  else if (info.elf_abi_version == kCudaElfAbiSecondByteSm)
    info.sm = (header.e_flags >> 8) & 0xff;
  else
    fail(
        "the cubin has CUDA ELF ABI version {}, which twist cannot decode (it knows {} and {}); the toolkit "
        "that wrote it is newer than this code",
        info.elf_abi_version, kCudaElfAbiLowByteSm, kCudaElfAbiSecondByteSm);

  if (header.e_shnum == 0) return info;
  if (header.e_shentsize != sizeof(Elf64_Shdr) || header.e_shstrndx >= header.e_shnum)
    fail("the cubin's section table is malformed (entry size {}, {} sections, names in section {})",
         header.e_shentsize, header.e_shnum, header.e_shstrndx);
  auto section = [&](unsigned index) {
    return read_at<Elf64_Shdr>(cubin, header.e_shoff + uint64_t{index} * sizeof(Elf64_Shdr),
                               "section header");
  };
  Elf64_Shdr names = section(header.e_shstrndx);
  if (names.sh_offset > cubin.size() || cubin.size() - names.sh_offset < names.sh_size)
    fail("the cubin's section name table (bytes {}..{}) runs past its end ({} bytes); recompile it",
         names.sh_offset, names.sh_offset + names.sh_size, cubin.size());
  std::string_view name_table(cubin.data() + names.sh_offset, names.sh_size);
  for (unsigned i = 0; i < header.e_shnum; ++i) {
    uint32_t name_offset = section(i).sh_name;
    if (name_offset >= name_table.size())
      fail("section {} of the cubin names itself at offset {}, outside the name table ({} bytes)", i,
           name_offset, name_table.size());
    std::string_view rest = name_table.substr(name_offset);
    info.section_names.emplace_back(rest.substr(0, rest.find('\0')));
  }
  return info;
}

}  // namespace twist::cuda
