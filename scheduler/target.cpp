#include "scheduler/target.h"

#include "lang/error.h"

namespace twist {

Target Target::named(const std::string &arch) {
  if (arch == "sm_80") return sm80();
  if (arch == "sm_90a") return sm90a();
  fail("unknown target '{}': twist lowers for sm_80 and sm_90a", arch);
}

}  // namespace twist
