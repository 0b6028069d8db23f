#include "backends/cuda/runtime/ptxas_report.h"

#include <algorithm>
#include <regex>
#include <string>

namespace twist::cuda {

namespace {

// The line shapes of ptxas -v (CUDA 12 and 13). "ptxas info    :" starts a message; "ptxas         ."
// continues the message above it.
const std::regex kEntryLine(R"(^ptxas info\s*: Compiling entry function '([^']+)' for '[^']+')");
const std::regex kPropertiesLine(R"(^ptxas info\s*: Function properties for (\S+))");
const std::regex kStackLine(
    R"(^ptxas\s+\.\s+(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads)");
const std::regex kUsageLine(R"(^ptxas info\s*: Used (\d+) registers(.*))");
// The items after "Used N registers": "used 1 barriers", "4000 bytes smem", "360 bytes cmem[0]", ...
const std::regex kUsageItem(R"((\d+) bytes smem|(\d+) bytes cmem\[0\]|used (\d+) barriers)");

int to_int(const std::ssub_match &m) {
  return std::stoi(m.str());
}

template <typename Kernels>
auto find_named(Kernels &kernels, std::string_view name) {
  return std::find_if(kernels.begin(), kernels.end(),
                      [&](const KernelResources &k) { return k.kernel == name; });
}

}  // namespace

std::vector<KernelResources> parse_ptxas_report(std::string_view log) {
  std::vector<KernelResources> kernels;
  // "Used N registers" belongs to the entry being compiled; the stack line to the function whose
  // properties are being listed, which may be a device function rather than a kernel.
  std::string properties_of;
  size_t start = 0;
  while (start < log.size()) {
    size_t end = log.find('\n', start);
    if (end == std::string_view::npos) end = log.size();
    std::string line(log.substr(start, end - start));
    start = end + 1;
    std::smatch m;
    if (std::regex_search(line, m, kEntryLine)) {
      kernels.push_back({.kernel = m[1].str()});
    } else if (std::regex_search(line, m, kPropertiesLine)) {
      properties_of = m[1].str();
    } else if (std::regex_search(line, m, kStackLine)) {
      auto k = find_named(kernels, properties_of);
      if (k != kernels.end()) {
        k->stack_frame_bytes = to_int(m[1]);
        k->spill_store_bytes = to_int(m[2]);
        k->spill_load_bytes = to_int(m[3]);
      }
    } else if (std::regex_search(line, m, kUsageLine) && !kernels.empty()) {
      KernelResources &k = kernels.back();
      k.registers = to_int(m[1]);
      std::string items = m[2].str();
      for (std::sregex_iterator it(items.begin(), items.end(), kUsageItem), done; it != done; ++it) {
        const std::smatch &item = *it;
        if (item[1].matched) k.shared_bytes = to_int(item[1]);
        if (item[2].matched) k.constant_bytes = to_int(item[2]);
        if (item[3].matched) k.barriers = to_int(item[3]);
      }
    }
  }
  return kernels;
}

std::optional<KernelResources> find_kernel(const std::vector<KernelResources> &report,
                                           std::string_view kernel) {
  auto it = find_named(report, kernel);
  if (it == report.end()) return std::nullopt;
  return *it;
}

}  // namespace twist::cuda
