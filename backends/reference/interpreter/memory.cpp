#include "backends/reference/interpreter/memory.h"

#include <cmath>
#include <limits>

#include "lang/error.h"

namespace twist::reference::interpreter {

const char *space_name(Space space) {
  switch (space) {
    case Space::global:
      return "global";
    case Space::shared:
      return "shared";
    case Space::registers:
      return "register";
  }
  return "?";
}

std::string Array::describe() const {
  return fmt::format("{} ({} {}[{}])", name, space_name(space), type_name(type), size);
}

Real poison(const Type &t) {
  if (t.is_float()) return std::numeric_limits<Real>::quiet_NaN();
  if (t.is_bool()) return 1;
  if (t.is_int()) return std::ldexp(Real(1), t.bits() - 1) - 1;
  if (t.is_uint()) return std::ldexp(Real(1), t.bits()) - 1;
  fail("cannot hold values of type {} in an interpreted array", type_name(t));
}

void reset(Array &a, int threads, bool track_accesses) {
  const int64_t copies = a.space == Space::registers ? threads : 1;
  a.values.assign(a.size * copies, poison(a.type));
  if (a.space == Space::shared && track_accesses) a.accesses.assign(a.size, SharedAccess{});
  a.origins.clear();
  a.mbarriers.clear();
  if (!a.wgmma_holds.empty()) a.wgmma_holds.assign(a.values.size(), 0);
}

}  // namespace twist::reference::interpreter
