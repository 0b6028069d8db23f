#include "lang/input.h"

#include "lang/error.h"
#include "lang/registry.h"

namespace twist {

using namespace Halide::Internal;

Input::Input(const std::string &name, const Type &type, std::vector<Expr> shape) {
  if (name.empty()) fail("an Input needs a non-empty name");
  if (!is_element_type(type))
    fail("input '{}' has element type {}; inputs hold f16, bf16, f32, f64 or i32", name, type_name(type));
  if (shape.empty()) fail("input '{}' needs at least one dimension", name);
  for (size_t d = 0; d < shape.size(); ++d) {
    if (!shape[d].defined() || shape[d].type() != i32)
      fail("input '{}': the extent of dimension {} must be an i32 constant or SizeParam expression", name, d);
    if (auto err = first_type_error(shape[d])) fail("input '{}', dimension {}: {}", name, d, *err);
  }
  auto contents = std::make_shared<InputContents>();
  contents->name = name;
  contents->type = type;
  contents->shape = std::move(shape);
  contents->parameter = Parameter(type, /*is_buffer=*/true, static_cast<int>(contents->shape.size()), name);
  register_input(contents);
  contents_ = std::move(contents);
}

Expr Input::call(const std::vector<Expr> &indices) const {
  if (static_cast<int>(indices.size()) != rank())
    return type_error(type(), fmt::format("input '{}' has rank {} but is called with {} index(es)", name(),
                                          rank(), indices.size()));
  for (size_t d = 0; d < indices.size(); ++d) {
    if (!indices[d].defined() || indices[d].type() != i32)
      return type_error(type(),
                        fmt::format("index {} of input '{}' must be i32, got {}", d, name(),
                                    indices[d].defined() ? type_name(indices[d].type()) : "undefined"));
    if (auto err = first_type_error(indices[d])) return type_error(type(), *err);
  }
  std::vector<Halide::Expr> args(indices.begin(), indices.end());
  return Expr(Call::make(type(), name(), args, Call::Image, FunctionPtr(), 0, Halide::Buffer<>(),
                         contents_->parameter));
}

}  // namespace twist
