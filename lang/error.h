#pragma once
// User-facing errors. Every error twist reports says what was wrong, where, and what to do about it.
#include <fmt/format.h>

#include <stdexcept>
#include <string>

namespace twist {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string &message) : std::runtime_error(message) {}
};

template <typename... Args>
[[noreturn]] void fail(fmt::format_string<Args...> format, Args &&...args) {
  throw Error(fmt::format(format, std::forward<Args>(args)...));
}

// An internal invariant: a failure is a bug in twist, not in the user's program.
#define TWIST_CHECK(cond, ...)                                                                             \
  do {                                                                                                     \
    if (!(cond))                                                                                           \
      throw ::twist::Error(                                                                                \
          fmt::format("twist internal error at {}:{}: {}", __FILE__, __LINE__, fmt::format(__VA_ARGS__))); \
  } while (0)

}  // namespace twist
