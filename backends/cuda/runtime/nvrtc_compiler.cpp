#include "backends/cuda/runtime/nvrtc_compiler.h"

#include <dlfcn.h>
#include <nvrtc.h>

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <memory>
#include <set>

#include "lang/error.h"

namespace twist::cuda {

namespace {

void check_nvrtc(nvrtcResult result, const char *call, const std::string &name) {
  if (result != NVRTC_SUCCESS)
    fail(
        "{} failed for program '{}': {} ({}); NVRTC could not do its job, see its documentation for this "
        "code",
        call, name, nvrtcGetErrorString(result), static_cast<int>(result));
}

struct ProgramDeleter {
  void operator()(nvrtcProgram program) const { nvrtcDestroyProgram(&program); }
};
using Program = std::unique_ptr<std::remove_pointer_t<nvrtcProgram>, ProgramDeleter>;

std::string program_log(nvrtcProgram program, const std::string &name) {
  size_t size = 0;
  check_nvrtc(nvrtcGetProgramLogSize(program, &size), "nvrtcGetProgramLogSize", name);
  std::string log(size, '\0');
  check_nvrtc(nvrtcGetProgramLog(program, log.data()), "nvrtcGetProgramLog", name);
  while (!log.empty() && (log.back() == '\0' || log.back() == '\n')) log.pop_back();
  return log;
}

// NVRTC writes front-end diagnostics as "<name>(<line>): error: ...". Quotes each line the log points at,
// with the line before it (a syntax error is often reported at the token after the mistake).
std::string quote_lines_in_log(const std::string &log, const std::string &source, const std::string &name) {
  std::set<int> lines;
  std::string marker = name + "(";
  for (size_t at = log.find(marker); at != std::string::npos; at = log.find(marker, at + 1)) {
    const char *digits = log.data() + at + marker.size();
    int line = 0;
    auto [end, ec] = std::from_chars(digits, log.data() + log.size(), line);
    if (ec == std::errc() && *end == ')') lines.insert(line);
  }
  if (lines.empty()) return "";
  std::vector<std::string_view> source_lines;
  for (size_t start = 0; start <= source.size();) {
    size_t end = source.find('\n', start);
    if (end == std::string::npos) end = source.size();
    source_lines.emplace_back(source.data() + start, end - start);
    start = end + 1;
  }
  std::string quoted = "\nThe source lines the log points at:";
  int last_quoted = 0;
  for (int line : lines) {
    for (int shown = std::max({1, line - 1, last_quoted + 1}); shown <= line; ++shown) {
      if (shown > static_cast<int>(source_lines.size())) break;
      quoted += fmt::format("\n{} {:>5} | {}", shown == line ? '>' : ' ', shown, source_lines[shown - 1]);
      last_quoted = shown;
    }
  }
  return quoted;
}

bool holds_fp16_headers(const std::filesystem::path &dir) {
  std::error_code ec;
  return std::filesystem::exists(dir / "cuda_fp16.h", ec) && std::filesystem::exists(dir / "cuda_bf16.h", ec);
}

std::filesystem::path find_cuda_include_directory() {
  if (const char *chosen = std::getenv("TWIST_CUDA_INCLUDE")) {
    if (!holds_fp16_headers(chosen))
      fail(
          "TWIST_CUDA_INCLUDE is '{}', which holds no cuda_fp16.h and cuda_bf16.h; point it at the CUDA "
          "toolkit's include directory (e.g. /usr/local/cuda/include) or unset it",
          chosen);
    return chosen;
  }
  std::vector<std::filesystem::path> candidates;
  Dl_info library{};
  if (dladdr(reinterpret_cast<void *>(&nvrtcVersion), &library) != 0 && library.dli_fname) {
    // lib64/libnvrtc.so.13 -> include; through the symlinks as written first, then resolved.
    std::filesystem::path as_loaded(library.dli_fname);
    candidates.push_back(as_loaded.parent_path().parent_path() / "include");
    std::error_code ec;
    std::filesystem::path resolved = std::filesystem::canonical(as_loaded, ec);
    if (!ec) candidates.push_back(resolved.parent_path().parent_path() / "include");
  }
  candidates.emplace_back(TWIST_BUILD_CUDA_INCLUDE);
  for (const auto &dir : candidates)
    if (holds_fp16_headers(dir)) return dir.lexically_normal();
  std::string looked;
  for (const auto &dir : candidates) looked += fmt::format("\n  {}", dir.string());
  fail(
      "NVRTC needs cuda_fp16.h and cuda_bf16.h from the CUDA toolkit, and none of these directories has "
      "them:{}\nInstall the toolkit's headers or set TWIST_CUDA_INCLUDE to the directory that holds them",
      looked);
}

std::string supported_architectures() {
  int count = 0;
  if (nvrtcGetNumSupportedArchs(&count) != NVRTC_SUCCESS) return "(NVRTC would not list them)";
  std::vector<int> archs(count);
  if (nvrtcGetSupportedArchs(archs.data()) != NVRTC_SUCCESS) return "(NVRTC would not list them)";
  std::string list;
  for (int sm : archs) list += fmt::format("{}sm_{}", list.empty() ? "" : ", ", sm);
  return list;
}

}  // namespace

int sm_number(std::string_view arch) {
  constexpr std::string_view prefix = "sm_";
  int sm = 0;
  if (arch.starts_with(prefix)) {
    std::string_view rest = arch.substr(prefix.size());
    auto [end, ec] = std::from_chars(rest.data(), rest.data() + rest.size(), sm);
    std::string_view suffix(end, rest.data() + rest.size() - end);
    if (ec == std::errc() && sm > 0 && (suffix.empty() || suffix == "a" || suffix == "f")) return sm;
  }
  fail(
      "'{}' is not a real GPU architecture; a cubin needs one such as sm_80 or sm_90a (virtual "
      "architectures like compute_90 only give PTX)",
      arch);
}

std::filesystem::path cuda_include_directory() {
  static const std::filesystem::path dir = find_cuda_include_directory();
  return dir;
}

std::string nvrtc_version() {
  int major = 0, minor = 0;
  check_nvrtc(nvrtcVersion(&major, &minor), "nvrtcVersion", "(none)");
  return fmt::format("{}.{}", major, minor);
}

std::vector<std::string> nvrtc_options(const CompileOptions &options) {
  if (options.arch.empty())
    fail("CompileOptions.arch is empty; name the GPU architecture to compile for, such as sm_80 or sm_90a");
  sm_number(options.arch);
  std::vector<std::string> list = {
      "--gpu-architecture=" + options.arch,
      "-std=c++17",
      "--include-path=" + cuda_include_directory().string(),
      "--ptxas-options=-v",
      // Where a driver is installed, NVRTC (12.9 and later) keeps its own cache in the driver's compute
      // cache, and a hit there returns the cubin without ptxas' report. The kernel cache stores the report
      // with the cubin, so NVRTC's cache is turned off and every real compile reports its resources.
      "--no-cache",
  };
  if (options.line_info) list.push_back("-lineinfo");
  list.insert(list.end(), options.extra.begin(), options.extra.end());
  return list;
}

CompileResult compile(const std::string &source, const std::string &name, const CompileOptions &options) {
  std::vector<std::string> option_list = nvrtc_options(options);
  nvrtcProgram raw = nullptr;
  check_nvrtc(nvrtcCreateProgram(&raw, source.c_str(), name.c_str(), 0, nullptr, nullptr),
              "nvrtcCreateProgram", name);
  Program program(raw);
  std::vector<const char *> argv;
  for (const std::string &option : option_list) argv.push_back(option.c_str());
  nvrtcResult compiled = nvrtcCompileProgram(raw, static_cast<int>(argv.size()), argv.data());
  std::string log = program_log(raw, name);
  if (compiled != NVRTC_SUCCESS) {
    std::string options_text;
    for (const std::string &option : option_list) options_text += " " + option;
    std::string hint =
        compiled == NVRTC_ERROR_INVALID_OPTION
            ? fmt::format("check the options; this NVRTC compiles for {}", supported_architectures())
            : "fix the source at the lines the log names (for a generated kernel this is a bug "
              "in the code generator: report it with this message)";
    fail("NVRTC {} could not compile '{}' for {}: {}\nOptions:{}\nLog:\n{}{}\nWhat to do: {}",
         nvrtc_version(), name, options.arch, nvrtcGetErrorString(compiled), options_text, log,
         quote_lines_in_log(log, source, name), hint);
  }
  CompileResult result;
  size_t size = 0;
  check_nvrtc(nvrtcGetCUBINSize(raw, &size), "nvrtcGetCUBINSize", name);
  if (size == 0)
    fail("NVRTC compiled '{}' for {} but returned no cubin; the architecture must be a real one (sm_XX)",
         name, options.arch);
  result.cubin.resize(size);
  check_nvrtc(nvrtcGetCUBIN(raw, result.cubin.data()), "nvrtcGetCUBIN", name);
  result.resources = parse_ptxas_report(log);
  result.log = std::move(log);
  return result;
}

std::vector<char> compile_to_cubin(const std::string &source, const std::string &name,
                                   const CompileOptions &options) {
  return compile(source, name, options).cubin;
}

}  // namespace twist::cuda
