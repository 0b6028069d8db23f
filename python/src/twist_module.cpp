// twist._twist: the C++ library as a Python extension module (nanobind). The DSL (types, expressions,
// inputs, funcs, reductions), monoids (built in, built with MonoidBuilder, twisted with TwistBuilder), the
// associativity checker's verdicts, schedules, lowering and each stage's printout, the CPU oracle and the
// loop-nest interpreter over NumPy arrays, and compiling and exporting kernels. python/twist/__init__.py
// is the public face; it re-exports these names.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/function.h>
#include <nanobind/stl/map.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <set>

#include "algebra/builtins.h"
#include "algebra/check.h"
#include "algebra/derive.h"
#include "algebra/online.h"
#include "algebra/twist.h"
#include "apps/attention/attention.h"
#include "apps/gemm/gemm.h"
#include "apps/norms/norms.h"
#include "backends/cuda/codegen/cuda_printer.h"
#include "backends/cuda/program/export_program.h"
#include "backends/cuda/program/gpu_program.h"
#include "backends/reference/evaluate_funcs.h"
#include "backends/reference/interpreter/interpreter.h"
#include "lang/registry.h"
#include "lang/twist.h"
#include "scheduler/default_schedule.h"
#include "scheduler/lower.h"
#include "scheduler/realization.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace twist::python {

namespace {

using reference::HostTensor;
using Array = nb::ndarray<const double, nb::c_contig, nb::device::cpu>;
using OwnedArray = nb::ndarray<nb::numpy, double>;

// The Python side converts every array to contiguous float64 first (python/twist/__init__.py), so that each
// element type's rounding happens here, in HostTensor, exactly as the C++ tests round.
HostTensor to_host_tensor(const Type &type, const Array &a) {
  std::vector<int64_t> shape(a.shape_ptr(), a.shape_ptr() + a.ndim());
  HostTensor t(type, shape);
  const double *data = a.data();
  for (int64_t e = 0; e < t.size(); ++e) t.set_linear(e, data[e]);
  return t;
}

OwnedArray to_array(const HostTensor &t) {
  auto *values = new std::vector<double>(static_cast<size_t>(t.size()));
  for (int64_t e = 0; e < t.size(); ++e) (*values)[static_cast<size_t>(e)] = t.get_linear(e);
  nb::capsule owner(values, [](void *p) noexcept { delete static_cast<std::vector<double> *>(p); });
  std::vector<size_t> shape(t.shape().begin(), t.shape().end());
  return OwnedArray(values->data(), shape.size(), shape.data(), owner);
}

// A func's index list from a subscript: f[i, j] gives a tuple, f[i] one expression.
std::vector<Expr> subscript(nb::handle key) {
  std::vector<Expr> indices;
  if (nb::isinstance<nb::tuple>(key)) {
    for (nb::handle k : nb::borrow<nb::tuple>(key)) indices.push_back(nb::cast<Expr>(k));
  } else {
    indices.push_back(nb::cast<Expr>(key));
  }
  return indices;
}

std::vector<Component> components(const std::vector<std::pair<std::string, Type>> &named) {
  std::vector<Component> out;
  for (const auto &[name, type] : named) out.push_back({name, type});
  return out;
}

// What a Python function returned for a monoid's components: a list of expressions and numbers. A number
// becomes a constant of its component's type (Python's 0.0 would otherwise be an f64 constant where an f32
// state is meant).
std::vector<Expr> component_values(nb::handle result, const std::vector<Component> &types,
                                   const std::string &what) {
  if (!nb::isinstance<nb::list>(result) && !nb::isinstance<nb::tuple>(result))
    fail("{} must return a list with one expression per component ({}), not {}", what, types.size(),
         nb::cast<std::string>(nb::str(result.type())));
  std::vector<Expr> values;
  size_t k = 0;
  for (nb::handle item : result) {
    if ((nb::isinstance<nb::float_>(item) || nb::isinstance<nb::int_>(item)) && k < types.size())
      values.push_back(constant(types[k].type, nb::cast<double>(item), what.c_str()));
    else
      values.push_back(nb::cast<Expr>(item));
    ++k;
  }
  return values;
}

// MonoidBuilder and TwistBuilder with the component types at hand, for component_values.
struct PyMonoidBuilder {
  MonoidBuilder builder;
  std::vector<Component> state, outputs;
};

struct PyTwistBuilder {
  algebra::TwistBuilder builder;
  std::vector<Component> state, base_state, outputs;
};

Arithmetic parse_arithmetic(const std::string &name) {
  if (name == "exact") return Arithmetic::exact;
  if (name == "extended") return Arithmetic::extended;
  if (name == "typed") return Arithmetic::typed;
  fail("arithmetic '{}': use 'exact', 'extended' or 'typed'", name);
}

std::map<std::string, OwnedArray> to_arrays(const std::map<std::string, HostTensor> &tensors) {
  std::map<std::string, OwnedArray> out;
  for (const auto &[name, t] : tensors) out.emplace(name, to_array(t));
  return out;
}

void bind_expressions(nb::module_ &m) {
  nb::class_<Type>(m, "Type")
      .def("__repr__", [](const Type &t) { return type_name(t); })
      .def("__eq__", [](const Type &a, const Type &b) { return a == b; })
      .def_prop_ro("bits", [](const Type &t) { return t.bits(); });
  m.attr("f16") = f16;
  m.attr("bf16") = bf16;
  m.attr("f32") = f32;
  m.attr("f64") = f64;
  m.attr("i32") = i32;
  m.attr("boolean") = boolean;
  m.def("parse_type", &parse_type, "name"_a);

  nb::class_<Expr>(m, "Expr")
      .def(nb::init_implicit<int>())
      .def(nb::init_implicit<double>())
      .def_prop_ro("type", [](const Expr &e) { return e.type(); })
      .def("__repr__", [](const Expr &e) { return fmt::format("{}", e); })
      .def("__add__", [](const Expr &a, const Expr &b) { return add(a, b); })
      .def("__radd__", [](const Expr &a, const Expr &b) { return add(b, a); })
      .def("__sub__", [](const Expr &a, const Expr &b) { return sub(a, b); })
      .def("__rsub__", [](const Expr &a, const Expr &b) { return sub(b, a); })
      .def("__mul__", [](const Expr &a, const Expr &b) { return mul(a, b); })
      .def("__rmul__", [](const Expr &a, const Expr &b) { return mul(b, a); })
      .def("__truediv__", [](const Expr &a, const Expr &b) { return div(a, b); })
      .def("__rtruediv__", [](const Expr &a, const Expr &b) { return div(b, a); })
      .def("__mod__", [](const Expr &a, const Expr &b) { return mod(a, b); })
      .def("__lt__", [](const Expr &a, const Expr &b) { return lt(a, b); })
      .def("__le__", [](const Expr &a, const Expr &b) { return le(a, b); })
      .def("__gt__", [](const Expr &a, const Expr &b) { return gt(a, b); })
      .def("__ge__", [](const Expr &a, const Expr &b) { return ge(a, b); })
      .def("__eq__", [](const Expr &a, const Expr &b) { return eq(a, b); })
      .def("__ne__", [](const Expr &a, const Expr &b) { return ne(a, b); })
      // & and | are logical on bools and bitwise on integers, as in C++.
      .def("__and__",
           [](const Expr &a, const Expr &b) {
             return a.type().is_bool() ? logical_and(a, b) : bitwise_and(a, b);
           })
      .def("__or__", [](const Expr &a,
                        const Expr &b) { return a.type().is_bool() ? logical_or(a, b) : bitwise_or(a, b); })
      .def("__xor__", [](const Expr &a, const Expr &b) { return bitwise_xor(a, b); })
      .def("__lshift__", [](const Expr &a, const Expr &b) { return shift_left(a, b); })
      .def("__rshift__", [](const Expr &a, const Expr &b) { return shift_right(a, b); })
      .def("__invert__", [](const Expr &a) { return ~a; })
      .def("__neg__", [](const Expr &a) { return -a; })
      .def("__invert__", [](const Expr &a) { return !a; });

  m.def("min", [](const Expr &a, const Expr &b) { return min_of(a, b); });
  m.def("max", [](const Expr &a, const Expr &b) { return max_of(a, b); });
  m.def("pow", [](const Expr &a, const Expr &b) { return pow_of(a, b); });
  m.def("select", [](const Expr &c, const Expr &t, const Expr &f) { return select(c, t, f); });
  m.def("clamp", [](const Expr &x, const Expr &lo, const Expr &hi) { return clamp(x, lo, hi); });
  m.def(
      "cast", [](const Type &t, const Expr &x) { return cast(t, x); }, "type"_a, "x"_a);
  for (auto [name, fn] :
       std::initializer_list<std::pair<const char *, Expr (*)(const Expr &)>>{{"abs", &abs},
                                                                              {"exp", &exp},
                                                                              {"exp2", &exp2},
                                                                              {"log", &log},
                                                                              {"log2", &log2},
                                                                              {"sqrt", &sqrt},
                                                                              {"rsqrt", &rsqrt},
                                                                              {"tanh", &tanh},
                                                                              {"floor", &floor},
                                                                              {"ceil", &ceil}})
    m.def(name, fn, "x"_a);
  m.def("infinity", &infinity, "type"_a);
  m.def("neg_infinity", &neg_infinity, "type"_a);

  nb::class_<Var, Expr>(m, "Var")
      .def(nb::init<const std::string &>(), "name"_a)
      .def_prop_ro("name", &Var::name);
  nb::class_<RVar, Expr>(m, "RVar").def_prop_ro("name", &RVar::name);
  nb::class_<ScalarParam, Expr>(m, "Param")
      .def(nb::init<const std::string &, const Type &>(), "name"_a, "type"_a)
      .def_prop_ro("name", &ScalarParam::name);
  nb::class_<SizeParam, ScalarParam>(m, "SizeParam").def(nb::init<const std::string &>(), "name"_a);
  nb::class_<RDom>(m, "RDom")
      .def(nb::init<const std::vector<std::pair<Expr, Expr>> &, const std::string &>(), "ranges"_a,
           "name"_a = "")
      .def_ro("x", &RDom::x)
      .def_ro("y", &RDom::y)
      .def_ro("z", &RDom::z)
      .def_ro("w", &RDom::w)
      .def("__getitem__", &RDom::operator[])
      .def("where", &RDom::where, "predicate"_a)
      .def_prop_ro("name", &RDom::name)
      .def_prop_ro("dimensions", &RDom::dimensions);
  nb::class_<Input>(m, "Input")
      .def(nb::init<const std::string &, const Type &, std::vector<Expr>>(), "name"_a, "type"_a, "shape"_a)
      .def("__getitem__", [](const Input &in, nb::handle key) { return in.call(subscript(key)); })
      .def_prop_ro("name", &Input::name)
      .def_prop_ro("type", &Input::type);
}

void bind_monoids(nb::module_ &m) {
  nb::class_<State>(m, "State")
      .def("__getitem__", [](const State &s, int k) { return s[k]; })
      .def("__getitem__", [](const State &s, const std::string &name) { return s[name]; })
      .def("__len__", &State::size);
  nb::class_<Monoid>(m, "Monoid")
      .def_ro("name", &Monoid::name)
      .def_prop_ro("state",
                   [](const Monoid &mo) {
                     std::vector<std::pair<std::string, Type>> out;
                     for (const Component &c : mo.state) out.push_back({c.name, c.type});
                     return out;
                   })
      .def_prop_ro("outputs",
                   [](const Monoid &mo) {
                     std::vector<std::string> out;
                     for (const Component &c : mo.outputs) out.push_back(c.name);
                     return out;
                   })
      .def_prop_ro("twisted", [](const Monoid &mo) { return mo.twist.has_value(); })
      .def("__repr__", [](const Monoid &mo) { return "<twist.Monoid " + mo.name + ">"; });

  using Named = std::vector<std::pair<std::string, Type>>;
  nb::class_<PyMonoidBuilder>(
      m, "MonoidBuilder",
      "A monoid of one's own; the checker tests it (check_associativity) rather than trusting it.")
      .def("__init__",
           [](PyMonoidBuilder *b, const std::string &name) {
             new (b) PyMonoidBuilder{MonoidBuilder(name), {}, {}};
           })
      .def(
          "state",
          [](PyMonoidBuilder &b, const Named &c) -> PyMonoidBuilder & {
            b.state = components(c);
            b.builder.state(b.state);
            return b;
          },
          nb::rv_policy::reference)
      .def(
          "elements",
          [](PyMonoidBuilder &b, const Named &c) -> PyMonoidBuilder & {
            b.builder.elements(components(c));
            return b;
          },
          nb::rv_policy::reference)
      .def(
          "identity",
          [](PyMonoidBuilder &b, nb::list values) -> PyMonoidBuilder & {
            b.builder.identity(component_values(values, b.state, "the identity"));
            return b;
          },
          nb::rv_policy::reference)
      .def(
          "combine",
          [](PyMonoidBuilder &b, nb::callable fn) -> PyMonoidBuilder & {
            b.builder.combine([fn, &b](const State &x, const State &y) {
              return component_values(fn(x, y), b.state, "combine");
            });
            return b;
          },
          nb::rv_policy::reference)
      .def(
          "lift",
          [](PyMonoidBuilder &b, nb::callable fn) -> PyMonoidBuilder & {
            b.builder.lift([fn, &b](const State &x) { return component_values(fn(x), b.state, "lift"); });
            return b;
          },
          nb::rv_policy::reference)
      .def(
          "finalize",
          [](PyMonoidBuilder &b, const Named &outputs, nb::callable fn) -> PyMonoidBuilder & {
            b.outputs = components(outputs);
            b.builder.finalize(b.outputs, [fn, &b](const State &s) {
              return component_values(fn(s), b.outputs, "finalize");
            });
            return b;
          },
          nb::rv_policy::reference)
      .def("build", [](const PyMonoidBuilder &b) { return b.builder.build(); });

  nb::class_<PyTwistBuilder>(m, "TwistBuilder",
                             "A monoid transported from a plainly associative base through a bijection psi "
                             "(algebra/twist.h): combine(a, b) = psi^-1(psi(a; r) + psi(b; r); r).")
      .def("__init__",
           [](PyTwistBuilder *b, const std::string &name, const Monoid &base) {
             new (b) PyTwistBuilder{algebra::TwistBuilder(name, base), {}, base.state, {}};
           })
      .def(
          "state",
          [](PyTwistBuilder &b, const Named &c) -> PyTwistBuilder & {
            b.state = components(c);
            b.builder.state(b.state);
            return b;
          },
          nb::rv_policy::reference)
      .def(
          "elements",
          [](PyTwistBuilder &b, const Named &c) -> PyTwistBuilder & {
            b.builder.elements(components(c));
            return b;
          },
          nb::rv_policy::reference)
      .def(
          "identity",
          [](PyTwistBuilder &b, nb::list values) -> PyTwistBuilder & {
            b.builder.identity(component_values(values, b.state, "the identity"));
            return b;
          },
          nb::rv_policy::reference)
      .def(
          "lift",
          [](PyTwistBuilder &b, nb::callable fn) -> PyTwistBuilder & {
            b.builder.lift([fn, &b](const State &x) { return component_values(fn(x), b.state, "lift"); });
            return b;
          },
          nb::rv_policy::reference)
      .def(
          "finalize",
          [](PyTwistBuilder &b, const Named &outputs, nb::callable fn) -> PyTwistBuilder & {
            b.outputs = components(outputs);
            b.builder.finalize(b.outputs, [fn, &b](const State &s) {
              return component_values(fn(s), b.outputs, "finalize");
            });
            return b;
          },
          nb::rv_policy::reference)
      .def(
          "to_base",
          [](PyTwistBuilder &b, nb::callable fn) -> PyTwistBuilder & {
            b.builder.to_base([fn, &b](const State &s, const Expr &ref) {
              return component_values(fn(s, ref), b.base_state, "to_base (psi)");
            });
            return b;
          },
          nb::rv_policy::reference)
      .def(
          "from_base",
          [](PyTwistBuilder &b, nb::callable fn) -> PyTwistBuilder & {
            b.builder.from_base([fn, &b](const State &s, const Expr &ref) {
              return component_values(fn(s, ref), b.state, "from_base (psi^-1)");
            });
            return b;
          },
          nb::rv_policy::reference)
      .def(
          "reference",
          [](PyTwistBuilder &b, const Type &t, nb::callable rule) -> PyTwistBuilder & {
            b.builder.reference(
                t, [rule](const State &x, const State &y) { return nb::cast<Expr>(rule(x, y)); });
            return b;
          },
          nb::rv_policy::reference)
      .def("build", [](const PyTwistBuilder &b) { return b.builder.build(); });

  nb::module_ algebra =
      m.def_submodule("algebra", "The library's monoids (algebra/builtins.h, algebra/online.h)");
  algebra.def("sum", &algebra::sum, "type"_a);
  algebra.def("product", nb::overload_cast<const Type &>(&algebra::product), "type"_a);
  algebra.def("max", &algebra::max, "type"_a);
  algebra.def("min", &algebra::min, "type"_a);
  algebra.def("argmax", &algebra::argmax, "value_type"_a);
  algebra.def("argmin", &algebra::argmin, "value_type"_a);
  algebra.def(
      "product_of",
      nb::overload_cast<const std::vector<Monoid> &, const std::vector<std::string> &>(&algebra::product),
      "factors"_a, "state_names"_a = std::vector<std::string>{});
  algebra.def("softmax", &algebra::softmax, "type"_a);
  algebra.def("log_sum_exp", &algebra::log_sum_exp, "type"_a);
  algebra.def("attention", &algebra::attention, "type"_a, "width"_a);
  algebra.def("welford", &algebra::welford, "type"_a);
  algebra.def("twisted_softmax", &algebra::twisted_softmax, "type"_a);
  algebra.def("twisted_log_sum_exp", &algebra::twisted_log_sum_exp, "type"_a);
  algebra.def("twisted_welford", &algebra::twisted_welford, "type"_a);
  algebra.def("twisted_attention", &algebra::twisted_attention, "type"_a, "width"_a);

  nb::class_<algebra::Verdict>(m, "Verdict")
      .def_ro("accepted", &algebra::Verdict::accepted)
      // 1 construction, 2 Halide's prover, 3 tested, 4 derived, 5 the user's override (algebra/verdict.h)
      .def_prop_ro("level", [](const algebra::Verdict &v) { return static_cast<int>(v.level); })
      .def_prop_ro("level_name", [](const algebra::Verdict &v) { return algebra::level_name(v.level); })
      .def_ro("monoid", &algebra::Verdict::monoid)
      .def_ro("reason", &algebra::Verdict::reason)
      .def_ro("notes", &algebra::Verdict::notes)
      .def_prop_ro("counterexample",
                   [](const algebra::Verdict &v) -> std::optional<std::string> {
                     if (!v.counterexample) return std::nullopt;
                     return v.counterexample->to_string();
                   })
      .def("__str__", &algebra::Verdict::to_string)
      .def("__bool__", [](const algebra::Verdict &v) { return v.accepted; });
  m.def(
      "check_associativity",
      [](const Monoid &mo, uint64_t seed, int trials) {
        return algebra::check_associativity(mo, {.seed = seed, .trials = trials});
      },
      "monoid"_a, "seed"_a = algebra::CheckOptions{}.seed, "trials"_a = algebra::CheckOptions{}.trials);
  m.def(
      "check_commutativity",
      [](const Monoid &mo, uint64_t seed, int trials) {
        return algebra::check_commutativity(mo, {.seed = seed, .trials = trials});
      },
      "monoid"_a, "seed"_a = algebra::CheckOptions{}.seed, "trials"_a = algebra::CheckOptions{}.trials);

  nb::class_<algebra::Derivation>(m, "Derivation")
      .def_ro("monoid", &algebra::Derivation::monoid)
      .def_ro("verdict", &algebra::Derivation::verdict);
  m.def(
      "derive_monoid",
      [](const std::string &name, const Named &state, const Named &elements, nb::list initial,
         nb::callable step, std::optional<nb::callable> weak_right_inverse, uint64_t seed, int trials) {
        algebra::LeftFold fold{name, components(state), components(elements), {}, {}, {}};
        fold.initial = component_values(initial, fold.state, "the initial state");
        fold.step = component_values(step(fold.current(), fold.element()), fold.state, "step");
        if (weak_right_inverse)
          for (nb::handle element : (*weak_right_inverse)(fold.current()))
            fold.weak_right_inverse.push_back(
                component_values(element, fold.elements, "each element of weak_right_inverse"));
        return algebra::derive_monoid(fold, {.seed = seed, .trials = trials});
      },
      "name"_a, "state"_a, "elements"_a, "initial"_a, "step"_a, "weak_right_inverse"_a = nb::none(),
      "seed"_a = algebra::CheckOptions{}.seed, "trials"_a = algebra::CheckOptions{}.trials,
      "Level 4 of the checker (algebra/derive.h): a monoid derived from the leftward fold state = step(s, x) "
      "from `initial`, by Bird's third homomorphism theorem. A step affine in the state needs nothing more; "
      "otherwise `weak_right_inverse(s)` returns a short list of elements whose fold from `initial` gives s "
      "back. The derived combine is then checked like any other; the Derivation's verdict says what held.");
}

// Defines self[key] = value. A call in a definition names its func or input, which must stay alive while the
// func does (lang/registry.h); in C++ the caller's variables keep them, in Python the func keeps them, in an
// attribute, so that `f[i] = g[i] + x[i]` inside a function outlives g and x going out of scope.
template <typename Value>
void define(nb::handle self, nb::handle key, const Value &value) {
  const Func &f = nb::cast<const Func &>(self);
  f(subscript(key)) = value;
  // Everything the definition reaches, transitively: a producer's own inputs are named only in its
  // definition.
  nb::list alive;
  const FuncGraph reached = walk({f});
  for (const Input &in : reached.inputs) alive.append(nb::cast(in));
  for (const Func &g : reached.funcs)
    if (g.contents() != f.contents()) alive.append(nb::cast(g));
  nb::setattr(self, "_callees", alive);
}

void bind_funcs(nb::module_ &m) {
  nb::class_<Reduction>(m, "Reduction");
  m.def(
      "reduce",
      [](const Monoid &mo, const RDom &r, const std::vector<Expr> &elements) {
        return reduce(mo, r, elements);
      },
      "monoid"_a, "domain"_a, "elements"_a);
  m.def(
      "reduce", [](const Monoid &mo, const RDom &r, const Expr &element) { return reduce(mo, r, element); },
      "monoid"_a, "domain"_a, "element"_a);
  nb::class_<Func>(m, "Func", nb::dynamic_attr())
      .def(nb::init<const std::string &>(), "name"_a)
      // f[i, j] is a call of f's single value; f.value([i, j], k) calls the k-th of several.
      .def("__getitem__", [](const Func &f, nb::handle key) { return Expr(f(subscript(key))); })
      .def(
          "value", [](const Func &f, const std::vector<Expr> &indices, int k) { return f(indices)[k]; },
          "indices"_a, "value_index"_a)
      .def("__setitem__", [](nb::handle self, nb::handle key, const Reduction &r) { define(self, key, r); })
      .def("__setitem__",
           [](nb::handle self, nb::handle key, const std::vector<Expr> &v) { define(self, key, v); })
      .def("__setitem__", [](nb::handle self, nb::handle key, const Expr &v) { define(self, key, v); })
      .def(
          "set_shape",
          [](Func &f, std::vector<Expr> extents) -> Func & { return f.set_shape(std::move(extents)); },
          "extents"_a, nb::rv_policy::reference)
      .def_prop_ro("name", &Func::name)
      .def_prop_ro("output_types", &Func::output_types)
      .def(
          "describe", [](const Func &f) { return to_string(walk({f})); },
          "Every func this one depends on, as the DSL defines it (the 'funcs' stage of the printout).");
}

void bind_schedules(nb::module_ &m) {
  nb::class_<LoopVar>(m, "LoopVar")
      .def(nb::init_implicit<std::string>())
      .def(nb::init_implicit<Var>())
      .def(nb::init_implicit<RVar>());

  nb::enum_<Binding>(m, "Binding")
      .value("serial", Binding::serial)
      .value("unrolled", Binding::unrolled)
      .value("block_x", Binding::block_x)
      .value("block_y", Binding::block_y)
      .value("block_z", Binding::block_z)
      .value("warp", Binding::warp)
      .value("thread", Binding::thread);
  nb::enum_<Transport>(m, "Transport")
      .value("plain", Transport::plain)
      .value("cp_async", Transport::cp_async)
      .value("tma", Transport::tma);
  nb::enum_<SharedLayout>(m, "SharedLayout")
      .value("row_major", SharedLayout::row_major)
      .value("padded", SharedLayout::padded)
      .value("swizzled", SharedLayout::swizzled);
  nb::enum_<SplitCombine>(m, "SplitCombine")
      .value("kernel", SplitCombine::kernel)
      .value("atomic", SplitCombine::atomic)
      .value("last_block", SplitCombine::last_block);
  nb::enum_<MatrixAtom>(m, "MatrixAtom").value("mma_m16n8k16", MatrixAtom::mma_m16n8k16);
  nb::class_<Accumulation>(m, "Accumulation")
      .def_static("fp32", &Accumulation::fp32)
      .def_static("fp16", &Accumulation::fp16)
      .def_static("hybrid", &Accumulation::hybrid, "promote_every"_a)
      .def("__repr__", [](const Accumulation &a) { return to_string(a); });

  constexpr auto ref = nb::rv_policy::reference;
  nb::class_<FuncSchedule>(m, "FuncSchedule")
      .def("split", &FuncSchedule::split, "var"_a, "outer"_a, "inner"_a, "factor"_a, ref)
      .def("tile", &FuncSchedule::tile, "i"_a, "j"_a, "io"_a, "jo"_a, "ii"_a, "ji"_a, "i_factor"_a,
           "j_factor"_a, ref)
      .def("reorder", &FuncSchedule::reorder, "innermost_first"_a, ref)
      .def("fuse", &FuncSchedule::fuse, "inner"_a, "outer"_a, "fused"_a, ref)
      .def("bind", &FuncSchedule::bind, "var"_a, "binding"_a, ref)
      .def("unroll", &FuncSchedule::unroll, "var"_a, ref)
      .def("split_reduction", &FuncSchedule::split_reduction, "var"_a, "parts"_a,
           "combine"_a = SplitCombine::kernel, ref)
      .def("stage", &FuncSchedule::stage, "input"_a, "at"_a, "transport"_a, "depth"_a = 1,
           "layout"_a = SharedLayout::swizzled, ref)
      .def("accumulate", &FuncSchedule::accumulate, "accumulation"_a, ref)
      .def("matrix_atom", &FuncSchedule::matrix_atom, "atom"_a, "i"_a, "j"_a, "k"_a, ref)
      .def("raster", &FuncSchedule::raster, "group"_a, ref)
      .def("reverse", &FuncSchedule::reverse, "var"_a, ref)
      .def("assume_associative", &FuncSchedule::assume_associative, "reason"_a, ref)
      .def("min_blocks_per_sm", &FuncSchedule::min_blocks_per_sm, "blocks"_a, ref)
      .def("approximate_math", &FuncSchedule::approximate_math, "on"_a = true, ref)
      .def("overlap_producer", &FuncSchedule::overlap_producer, "on"_a = true, ref)
      .def("compute_at", nb::overload_cast<const Func &, const LoopVar &>(&FuncSchedule::compute_at),
           "consumer"_a, "at"_a, ref)
      .def("compute_root", &FuncSchedule::compute_root, ref)
      .def("__str__", &FuncSchedule::to_string);
  nb::class_<Schedule>(m, "Schedule")
      .def(nb::init<>())
      .def("__getitem__", &Schedule::operator[], nb::rv_policy::reference_internal)
      .def("set_like", &Schedule::set_like, "func"_a, "like"_a, nb::rv_policy::reference_internal)
      .def(
          "find",
          [](const Schedule &s, const std::string &func) -> std::optional<FuncSchedule> {
            const FuncSchedule *found = s.find(func);
            if (!found) return std::nullopt;
            return *found;
          },
          "func"_a, "A copy of the schedule of the func of this name, or None.")
      .def("__str__", &Schedule::to_string);

  nb::class_<Target>(m, "Target")
      .def_static("sm80", &Target::sm80)
      .def_static("sm90a", &Target::sm90a)
      .def_static("named", &Target::named, "arch"_a)
      .def_ro("arch", &Target::arch);
}

void bind_programs(nb::module_ &m) {
  nb::class_<Kernel>(m, "Kernel")
      .def_ro("name", &Kernel::name)
      .def_ro("threads", &Kernel::threads)
      .def_ro("shared_bytes", &Kernel::shared_bytes)
      .def_ro("schedule_summary", &Kernel::schedule_summary)
      .def("cuda_source", [](const Kernel &k) { return cuda::cuda_source(k); })
      .def("__str__", [](const Kernel &k) { return to_string(k); });
  nb::class_<LoweredProgram>(m, "LoweredProgram")
      .def_ro("name", &LoweredProgram::name)
      .def_ro("kernels", &LoweredProgram::kernels)
      .def("loop_nest", [](const LoweredProgram &p) { return to_string(p); })
      .def("cuda_sources",
           [](const LoweredProgram &p) {
             std::map<std::string, std::string> sources;
             for (const Kernel &k : p.kernels) sources[k.name] = cuda::cuda_source(k);
             return sources;
           })
      .def("__str__", [](const LoweredProgram &p) { return to_string(p); });
  m.def("lower", &lower, "output"_a, "schedule"_a, "target"_a);
  m.def(
      "realization",
      [](const Func &output, const Schedule &schedule) {
        const FuncGraph graph = walk({output});
        return plan_realization(graph, with_default_schedules(graph, schedule)).to_string();
      },
      "output"_a, "schedule"_a,
      "Where each func of the program is computed under the schedule (inlined, at a loop of its consumer, or "
      "as "
      "a stage of its own), one line per func: the stage `twist demo --dump=realization` prints.");

  m.def("_evaluate", [](const Func &output, const std::map<std::string, Array> &inputs,
                        const std::map<std::string, double> &scalars, const std::string &arithmetic) {
    reference::Arguments args{{}, scalars};
    for (const Input &in : walk({output}).inputs) {
      auto it = inputs.find(in.name());
      if (it == inputs.end()) fail("evaluate({}): input '{}' was not given", output.name(), in.name());
      args.inputs.emplace(in.name(), to_host_tensor(in.type(), it->second));
    }
    std::vector<OwnedArray> out;
    for (const HostTensor &t : reference::evaluate(output, args, parse_arithmetic(arithmetic)))
      out.push_back(to_array(t));
    return out;
  });
  m.def("_interpret", [](const LoweredProgram &p, const std::map<std::string, Array> &inputs,
                         const std::map<std::string, double> &scalars, bool check_races) {
    std::map<std::string, HostTensor> tensors;
    for (const BufferArg &in : p.inputs) {
      auto it = inputs.find(in.name);
      if (it == inputs.end()) fail("interpret({}): input '{}' was not given", p.name, in.name);
      tensors.emplace(in.name, to_host_tensor(in.type, it->second));
    }
    return to_arrays(reference::run_program(p, tensors, scalars, {Arithmetic::typed, check_races}));
  });

  nb::class_<cuda::CompiledKernel>(m, "CompiledKernel")
      .def_ro("source", &cuda::CompiledKernel::source)
      .def_prop_ro("cubin",
                   [](const cuda::CompiledKernel &c) { return nb::bytes(c.cubin.data(), c.cubin.size()); })
      .def_prop_ro("registers", [](const cuda::CompiledKernel &c) { return c.resources.registers; })
      .def_prop_ro("spill_bytes",
                   [](const cuda::CompiledKernel &c) { return c.resources.spill_store_bytes; });
  m.def(
      "compile_kernel",
      [](const Kernel &k, const std::string &arch) { return cuda::compile_kernel(k, arch); }, "kernel"_a,
      "arch"_a = "sm_90a", "CUDA source and an NVRTC-compiled cubin (no GPU needed).");
  m.def(
      "export_program",
      [](const LoweredProgram &p, const std::string &label, const std::string &directory,
         const std::string &arch, const std::map<std::string, double> &scalars,
         const std::map<std::string, std::string> &notes) {
        return cuda::export_program(p, {label, arch, scalars, notes}, directory).string();
      },
      "program"_a, "label"_a, "directory"_a, "arch"_a = "sm_90a",
      "scalars"_a = std::map<std::string, double>{}, "notes"_a = std::map<std::string, std::string>{},
      "Writes <directory>/<label>.json (the launch manifest twist.runtime loads) and each kernel's .cu, .h "
      "and "
      ".cubin; returns the manifest's path.");
}

// The library's GEMM and its schedules (apps/gemm/gemm.h), whose schedules Schedule.set_like moves onto a
// contraction of one's own.
void bind_apps(nb::module_ &m) {
  nb::module_ apps = m.def_submodule(
      "apps", "The library's programs and their schedules (apps/gemm, apps/attention, apps/norms)");
  nb::enum_<apps::Epilogue>(apps, "Epilogue")
      .value("none", apps::Epilogue::none)
      .value("bias_relu", apps::Epilogue::bias_relu)
      .value("bias_gelu", apps::Epilogue::bias_gelu)
      .value("bias_silu", apps::Epilogue::bias_silu);
  nb::class_<apps::Gemm>(apps, "Gemm")
      .def_ro("A", &apps::Gemm::A)
      .def_ro("B", &apps::Gemm::B)
      .def_ro("k", &apps::Gemm::k)
      .def_ro("C", &apps::Gemm::C)
      .def_ro("out", &apps::Gemm::out);
  apps.def(
      "make_gemm",
      [](const Type &input, const Type &output, apps::Epilogue epilogue, bool batched,
         const std::string &prefix) {
        return apps::make_gemm({input, output, epilogue, batched, prefix});
      },
      "input"_a = f16, "output"_a = f16, "epilogue"_a = apps::Epilogue::none, "batched"_a = false,
      "prefix"_a = "",
      "C = A @ B in the DSL (A: M x K, B: K x N, C the f32 sums, out what is stored); `prefix` starts every "
      "name, "
      "so that several GEMMs can be alive at once.");
  nb::class_<apps::GemmTiling>(apps, "GemmTiling")
      .def(nb::init<>())
      .def_rw("block_m", &apps::GemmTiling::block_m)
      .def_rw("block_n", &apps::GemmTiling::block_n)
      .def_rw("block_k", &apps::GemmTiling::block_k)
      .def_rw("warp_m", &apps::GemmTiling::warp_m)
      .def_rw("warp_n", &apps::GemmTiling::warp_n)
      .def_rw("stages", &apps::GemmTiling::stages)
      .def_rw("transport", &apps::GemmTiling::transport)
      .def_rw("layout", &apps::GemmTiling::layout)
      .def_rw("accumulation", &apps::GemmTiling::accumulation)
      .def_rw("split_k", &apps::GemmTiling::split_k)
      .def_rw("split_combine", &apps::GemmTiling::split_combine)
      .def_rw("raster_group", &apps::GemmTiling::raster_group)
      .def_rw("min_blocks_per_sm", &apps::GemmTiling::min_blocks_per_sm)
      .def("name", &apps::GemmTiling::name);
  apps.def("schedule_tensor_core", &apps::schedule_tensor_core, "gemm"_a, "tiling"_a);
  apps.def("schedule_simt", &apps::schedule_simt, "gemm"_a, "block"_a = 64, "thread_tile"_a = 4,
           "block_k"_a = 16);

  nb::class_<apps::Attention>(apps, "Attention")
      .def_ro("Q", &apps::Attention::Q)
      .def_ro("K", &apps::Attention::K)
      .def_ro("V", &apps::Attention::V)
      .def_ro("S", &apps::Attention::S)
      .def_ro("O", &apps::Attention::O)
      .def_ro("out", &apps::Attention::out)
      .def_prop_ro("qk_scale", [](const apps::Attention &a) { return a.qk_scale.name(); });
  apps.def(
      "make_attention",
      [](const Type &dtype, int head_dim, int group, bool causal, bool decode, const std::string &prefix) {
        return apps::make_attention({.dtype = dtype,
                                     .head_dim = head_dim,
                                     .group = group,
                                     .causal = causal,
                                     .decode = decode,
                                     .prefix = prefix});
      },
      "dtype"_a = f16, "head_dim"_a = 128, "group"_a = 1, "causal"_a = false, "decode"_a = false,
      "prefix"_a = "",
      "Attention (apps/attention/attention.h): Q (B, H, S, D), K and V (B, H / group, L, D), the scores S in "
      "base-2 units scaled by the scalar qk_scale = log2(e) / sqrt(D), and O reduced over the keys with the "
      "attention monoid.");
  apps.def("attention_base2", &apps::attention_base2, "type"_a);
  nb::class_<apps::AttentionTiling>(apps, "AttentionTiling")
      .def(nb::init<>())
      .def_rw("block_rows", &apps::AttentionTiling::block_rows)
      .def_rw("warp_rows", &apps::AttentionTiling::warp_rows)
      .def_rw("key_tile", &apps::AttentionTiling::key_tile)
      .def_rw("stages", &apps::AttentionTiling::stages)
      .def_rw("split_kv", &apps::AttentionTiling::split_kv)
      .def_rw("min_blocks_per_sm", &apps::AttentionTiling::min_blocks_per_sm)
      .def("name", &apps::AttentionTiling::name);
  apps.def("schedule_attention", &apps::schedule_attention, "attention"_a, "tiling"_a);
  apps.def("schedule_decode", &apps::schedule_decode, "attention"_a, "tiling"_a);

  nb::class_<apps::Norm>(apps, "Norm")
      .def_prop_ro("kind", [](const apps::Norm &n) { return std::string(apps::to_string(n.kind)); })
      .def_ro("inputs", &apps::Norm::inputs)
      .def_ro("reductions", &apps::Norm::reductions)
      .def_ro("out", &apps::Norm::out);
  apps.def(
      "make_norm",
      [](const std::string &kind, const Type &dtype, int hidden, float eps, const std::string &prefix) {
        const std::optional<apps::NormKind> k = apps::parse_norm_kind(kind);
        if (!k) fail("make_norm: kind '{}': use softmax, layernorm, rmsnorm, add_rmsnorm or swiglu", kind);
        return apps::make_norm(*k, {.dtype = dtype, .hidden = hidden, .eps = eps, .prefix = prefix});
      },
      "kind"_a, "dtype"_a = f16, "hidden"_a = 4096, "eps"_a = 1e-6f, "prefix"_a = "",
      "A row-wise op of apps/norms/norms.h over rows of `hidden` elements (the number of rows is the size "
      "parameter `rows`).");
  apps.def("schedule_norm", &apps::schedule_norm, "norm"_a);
  apps.def("norm_bytes", &apps::norm_bytes, "norm"_a, "rows"_a);
}

}  // namespace

}  // namespace twist::python

NB_MODULE(_twist, m) {
  nb::exception<twist::Error>(m, "Error", PyExc_RuntimeError);
  twist::python::bind_expressions(m);
  twist::python::bind_monoids(m);
  twist::python::bind_funcs(m);
  twist::python::bind_schedules(m);
  twist::python::bind_programs(m);
  twist::python::bind_apps(m);
}
