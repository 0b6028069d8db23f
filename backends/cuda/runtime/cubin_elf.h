#pragma once
// What a cubin's ELF headers say about it: which GPU architecture its SASS is for, and which sections it
// has. Used to check compiler output and cache entries, and to explain a module that a device refuses.
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace twist::cuda {

struct CubinInfo {
  // The SASS architecture as major*10 + minor: 80 for sm_80, 90 for both sm_90 and sm_90a. The header
  // does not record the "a" (arch-specific) variant: ptxas leaves EF_CUDA_ACCELERATORS clear for sm_90a.
  int sm = 0;
  // e_ident[EI_ABIVERSION]. 7 keeps the SM in the low byte of e_flags; 8 (CUDA 12.8 and later, and
  // everything CUDA 13 writes) keeps it in bits 8-15.
  int elf_abi_version = 0;
  std::vector<std::string> section_names;

  bool has_section(std::string_view name) const;
};

// Reads the ELF header and section names of a cubin. Throws twist::Error saying what is malformed when
// the bytes are not a 64-bit little-endian CUDA ELF file (truncated, another machine, a PTX text, ...).
CubinInfo read_cubin_info(std::span<const char> cubin);

}  // namespace twist::cuda
