#pragma once
// What the error tests of every layer share: the message a call throws as twist::Error, and a substring test.
#include <string>
#include <string_view>

#include "lang/error.h"

namespace twist::testing {

// The twist::Error message `f` throws, or "" when it throws none.
template <typename F>
std::string error_of(F &&f) {
  try {
    f();
  } catch (const Error &e) {
    return e.what();
  }
  return "";
}

inline bool contains(const std::string &text, std::string_view part) {
  return text.find(part) != std::string::npos;
}

}  // namespace twist::testing
