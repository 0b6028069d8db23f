#include "lang/func.h"

#include <set>

#include "lang/error.h"
#include "lang/param.h"
#include "lang/registry.h"

namespace twist {

using namespace Halide::Internal;

Reduction reduce(const Monoid &monoid, const RDom &domain, std::vector<Expr> elements) {
  monoid.validate();
  return Reduction{std::make_shared<const Monoid>(monoid), domain, std::move(elements)};
}

Func::Func(const std::string &name) {
  auto contents = std::make_shared<FuncContents>();
  contents->name = name.empty() ? fresh_name("f") : name;
  contents->identity = Halide::Internal::Parameter(Halide::Int(32), /*is_buffer=*/false, 0, contents->name);
  register_func(contents);
  contents_ = std::move(contents);
}

const Definition &Func::definition() const {
  if (!contents_->definition) fail("func '{}' is used before it is defined", name());
  return *contents_->definition;
}

Func &Func::set_shape(std::vector<Expr> extents) {
  if (defined() && extents.size() != definition().args.size())
    fail("func '{}' has {} dimension(s) but set_shape() was given {} extent(s)", name(), dimensions(),
         extents.size());
  for (size_t d = 0; d < extents.size(); ++d)
    if (!extents[d].defined() || extents[d].type() != i32)
      fail("func '{}': extent {} of set_shape() must be an i32 constant or SizeParam expression", name(), d);
  contents_->shape = std::move(extents);
  return *this;
}

FuncRef Func::operator()(const std::vector<Expr> &args) const {
  return FuncRef(contents_, args);
}

namespace {

Expr call_of(const FuncContents &f, const std::vector<Expr> &args, int value_index) {
  if (!f.definition) return type_error(f32, fmt::format("func '{}' is called before it is defined", f.name));
  if (args.size() != f.definition->args.size())
    return type_error(f.output_types[value_index],
                      fmt::format("func '{}' has {} dimension(s) but is called with {} argument(s)", f.name,
                                  f.definition->args.size(), args.size()));
  for (size_t d = 0; d < args.size(); ++d) {
    if (!args[d].defined() || args[d].type() != i32)
      return type_error(f.output_types[value_index],
                        fmt::format("argument {} of the call to func '{}' must be i32, got {}", d, f.name,
                                    args[d].defined() ? type_name(args[d].type()) : "undefined"));
    if (auto err = first_type_error(args[d])) return type_error(f.output_types[value_index], *err);
  }
  std::vector<Halide::Expr> halide_args(args.begin(), args.end());
  return Expr(Call::make(f.output_types[value_index], f.name, halide_args, Call::Halide, FunctionPtr(),
                         value_index, Halide::Buffer<>(), f.identity));
}

Expr single_value_call(const std::shared_ptr<FuncContents> &f, const std::vector<Expr> &args) {
  if (!f->definition) return Expr();  // the reference is only good as the left side of a definition
  if (f->output_types.size() != 1)
    return type_error(f->output_types[0], fmt::format("func '{}' has {} values; pick one with {}(...)[k]",
                                                      f->name, f->output_types.size(), f->name));
  return call_of(*f, args, 0);
}

// Names of variables in e: pure vars (not RVars, not params).
struct VariableUses : IRVisitor {
  std::set<std::string> pure;
  std::vector<const Variable *> rvars;
  std::set<std::string> called;
  using IRVisitor::visit;
  void visit(const Variable *v) override {
    if (is_rvar(v))
      rvars.push_back(v);
    else if (!is_param(v))
      pure.insert(v->name);
  }
  void visit(const Call *c) override {
    if (c->call_type == Call::Halide || c->call_type == Call::Image) called.insert(c->name);
    IRVisitor::visit(c);
  }
};

std::string join(const std::vector<Var> &vars) {
  std::string s;
  for (const Var &v : vars) s += (s.empty() ? "" : ", ") + v.name();
  return s;
}

}  // namespace

FuncRef::FuncRef(std::shared_ptr<FuncContents> func, std::vector<Expr> args)
    : Expr(single_value_call(func, args)), func_(std::move(func)), args_(std::move(args)) {}

Expr FuncRef::operator[](int value_index) const {
  if (!func_->definition)
    return type_error(f32, fmt::format("func '{}' is called before it is defined", func_->name));
  if (value_index < 0 || value_index >= static_cast<int>(func_->output_types.size()))
    return type_error(f32, fmt::format("func '{}' has {} value(s); there is no value {}", func_->name,
                                       func_->output_types.size(), value_index));
  return call_of(*func_, args_, value_index);
}

std::vector<Var> FuncRef::lhs_vars() const {
  const std::string &name = func_->name;
  if (func_->definition) fail("func '{}' is already defined; a func has exactly one definition", name);
  std::vector<Var> vars;
  std::set<std::string> seen;
  for (size_t d = 0; d < args_.size(); ++d) {
    const auto *v = args_[d].as<Variable>();
    if (!v || is_rvar(v) || is_param(v))
      fail("func '{}': argument {} of its definition must be a pure Var (got {})", name, d,
           args_[d].defined() ? fmt::format("{}", args_[d]) : "undefined");
    if (!seen.insert(v->name).second)
      fail("func '{}': the variable '{}' appears twice on the left of its definition", name, v->name);
    vars.push_back(Var(v->name));
  }
  return vars;
}

void FuncRef::define(Definition definition, std::vector<Type> output_types) {
  const std::string &name = func_->name;
  std::vector<Expr> all = definition.values;
  std::optional<RDom> rdom;
  if (definition.reduction) {
    all = definition.reduction->elements;
    rdom = definition.reduction->domain;
    for (const Expr &p : rdom->predicates()) all.push_back(p);
  }
  std::set<std::string> lhs;
  for (const Var &v : definition.args) lhs.insert(v.name());
  for (const Expr &e : all) {
    if (!e.defined()) fail("func '{}': its definition has an undefined value", name);
    if (auto err = first_type_error(e)) fail("in the definition of func '{}': {}", name, *err);
    VariableUses uses;
    e.accept(&uses);
    for (const std::string &v : uses.pure)
      if (!lhs.count(v))
        fail("func '{}' uses the variable '{}', which is not one of its arguments ({})", name, v,
             join(definition.args));
    for (const Variable *rv : uses.rvars) {
      if (!rdom)
        fail("func '{}' uses the RVar '{}' in a pure definition; an RDom may only appear inside reduce(...)",
             name, rv->name);
      if (!rv->reduction_domain.same_as(rdom->contents()->marker))
        fail("func '{}' reduces over RDom '{}' but uses '{}', a variable of another RDom", name, rdom->name(),
             rv->name);
    }
    if (uses.called.count(name)) fail("func '{}' calls itself; write a reduction with reduce(...)", name);
  }
  for (const Type &t : output_types)
    if (!is_element_type(t))
      fail("func '{}' would hold {}; funcs hold f16, bf16, f32, f64 or i32 (cast the value)", name,
           type_name(t));
  if (!func_->shape.empty() && func_->shape.size() != definition.args.size())
    fail("func '{}' has {} dimension(s) but its shape has {} extent(s)", name, definition.args.size(),
         func_->shape.size());
  func_->definition = std::move(definition);
  func_->output_types = std::move(output_types);
}

FuncRef &FuncRef::operator=(const std::vector<Expr> &values) {
  Definition d;
  d.args = lhs_vars();
  if (values.empty()) fail("func '{}' must be defined with at least one value", func_->name);
  d.values = values;
  std::vector<Type> types;
  for (const Expr &v : values) types.push_back(v.defined() ? v.type() : f32);
  define(std::move(d), std::move(types));
  return *this;
}

FuncRef &FuncRef::operator=(const Expr &value) {
  return *this = std::vector<Expr>{value};
}
FuncRef &FuncRef::operator=(const FuncRef &value) {
  return *this = static_cast<const Expr &>(value);
}

FuncRef &FuncRef::operator=(const Reduction &reduction) {
  const Monoid &m = *reduction.monoid;
  Definition d;
  d.args = lhs_vars();
  Reduction r = reduction;
  if (r.elements.size() != m.elements.size())
    fail("func '{}': reduce({}) takes {} element value(s) but was given {}", func_->name, m.name,
         m.elements.size(), r.elements.size());
  for (size_t e = 0; e < r.elements.size(); ++e) {
    Expr &x = r.elements[e];
    if (!x.defined()) fail("func '{}': element {} of reduce({}) is undefined", func_->name, e, m.name);
    if (auto err = first_type_error(x)) fail("in the definition of func '{}': {}", func_->name, *err);
    if (x.type() != m.elements[e].type) {
      if (x.as<IntImm>() || x.as<FloatImm>()) {
        x = constant(m.elements[e].type,
                     x.as<IntImm>() ? double(x.as<IntImm>()->value) : x.as<FloatImm>()->value, "reduce");
      } else {
        fail("func '{}': element '{}' of reduce({}) must be {} but is {}; cast it (cast({}, x))", func_->name,
             m.elements[e].name, m.name, type_name(m.elements[e].type), type_name(x.type()),
             type_name(m.elements[e].type));
      }
    }
  }
  d.reduction = std::move(r);
  std::vector<Type> types;
  for (const Component &c : m.outputs) types.push_back(c.type);
  define(std::move(d), std::move(types));
  return *this;
}

}  // namespace twist
