#include "lang/param.h"

#include "lang/error.h"

namespace twist {

using namespace Halide::Internal;

ScalarParam::ScalarParam(const std::string &name, const Type &type)
    : Expr(Variable::make(type, name, Parameter(type, /*is_buffer=*/false, 0, name))) {
  if (name.empty()) fail("a Param needs a non-empty name");
}

const std::string &ScalarParam::name() const {
  return as<Variable>()->name;
}

bool is_param(const Variable *v) {
  return v->param.defined() && !v->param.is_buffer();
}

}  // namespace twist
