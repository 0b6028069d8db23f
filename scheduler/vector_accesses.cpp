#include "scheduler/vector_accesses.h"

#include "lang/error.h"
#include "scheduler/intrinsics.h"
#include "scheduler/stmt_building.h"

namespace twist {

using namespace Halide::Internal;

Stmt vector_copies(const std::string &dst, const Halide::Expr &dst_index, const std::string &src,
                   const Halide::Expr &src_index, const Type &type, int width) {
  const int bytes = vector_copy_bytes(type, width);
  const int elements = bytes / type.bytes();
  std::vector<Stmt> out;
  for (int c = 0; c < width / elements; ++c)
    out.push_back(intrinsic::copy({dst, simplify(dst_index + c * elements), src,
                                   simplify(src_index + c * elements), bytes, Halide::Expr(bytes), false}));
  return stmt::block(out);
}

Halide::Expr VectorRun::lane_var() const {
  return stmt::var(lane);
}

int vector_copy_bytes(const Type &type, int width) {
  const int bytes = type.bytes() * width;
  if (bytes == 4 || bytes == 8) return bytes;
  return bytes % kVectorBytes == 0 ? kVectorBytes : 0;
}

Halide::Expr VectorReads::read(const Input &input, const std::vector<Halide::Expr> &coords) {
  const int bytes = vector_copy_bytes(input.type(), run_.width);
  const std::vector<Halide::Expr> shape = to_halide(input.shape());
  const Halide::Expr lane = run_.lane_var();
  bool moves = bytes > 0 && run_.width > 1;
  for (size_t d = 0; moves && d + 1 < coords.size(); ++d) moves = !expr_uses_var(coords[d], run_.lane);
  const Halide::Expr last = coords.empty() ? Halide::Expr() : simplify(coords.back());
  const Halide::Expr base = moves ? simplify(substitute(run_.lane, 0, last)) : Halide::Expr();
  moves = moves && can_prove(last == base + lane);
  const Halide::Expr offset = moves ? simplify(base - run_.first) : Halide::Expr();
  const int64_t *constant_offset = moves ? as_const_int(offset) : nullptr;
  const int elements = bytes / std::max(1, input.type().bytes());
  // The whole run inside the input's row, each copy aligned: then the copies read what the scalar loads read.
  if (!constant_offset || *constant_offset < 0 || *constant_offset % elements != 0 ||
      !can_prove(run_.extent + offset <= shape.back()))
    return clamped_input_load(input, coords);
  std::vector<Halide::Expr> at = clamped_coords(coords, shape);
  at.back() = base;
  const Halide::Expr source = simplify(flat_index(at, shape));
  const std::string key = fmt::format("{}", source);
  const Array *array = nullptr;
  for (const Array &a : arrays_)
    if (a.input == input.name() && a.key == key) array = &a;
  if (!array) {
    if (shape.size() > 1) {
      const Halide::Expr aligned_rows = simplify(shape.back() % elements == 0);
      if (is_const_zero(aligned_rows)) return clamped_input_load(input, coords);
      if (!is_const_one(aligned_rows)) conditions_.push_back(aligned_rows);
    }
    arrays_.push_back(
        {fmt::format("{}.v{}", input.name(), arrays_.size()), input.name(), key, input.type(), source});
    array = &arrays_.back();
  }
  return load(input.type(), array->name, lane);
}

void VectorReads::install(ExprLowering &lowering) {
  for (const Input &in : graph_.inputs)
    lowering.read_input_with(
        in.name(), [this, in](const std::vector<Halide::Expr> &coords) { return read(in, coords); });
}

Stmt VectorReads::around(const Stmt &body) const {
  std::vector<Stmt> fills;
  for (const Array &a : arrays_)
    fills.push_back(vector_copies(a.name, 0, a.input, a.source, a.type, run_.width));
  Stmt s = stmt::block({stmt::block(fills), body});
  for (const Array &a : arrays_)
    s = Allocate::make(a.name, a.type, Halide::MemoryType::Register, {run_.width}, const_true(), s);
  return s;
}

Stmt vector_store(const std::string &buffer, const Type &type, const Halide::Expr &value,
                  const Halide::Expr &index, const VectorRun &run) {
  const std::string values = buffer + ".out";
  const Stmt compute = stmt::unrolled(run.lane, run.width, stmt::store(values, value, run.lane_var()));
  const Stmt out = vector_copies(buffer, index, values, 0, type, run.width);
  return Allocate::make(values, type, Halide::MemoryType::Register, {run.width}, const_true(),
                        stmt::block({compute, out}));
}

}  // namespace twist
