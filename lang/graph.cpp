#include "lang/graph.h"

#include <algorithm>
#include <functional>
#include <map>
#include <set>
#include <sstream>

#include "lang/error.h"
#include "lang/registry.h"

namespace twist {

using namespace Halide::Internal;

std::vector<Expr> expressions(const Definition &d) {
  if (!d.reduction) return d.values;
  std::vector<Expr> all = d.reduction->elements;
  for (const Expr &p : d.reduction->domain.predicates()) all.push_back(p);
  for (int k = 0; k < d.reduction->domain.dimensions(); ++k) {
    all.push_back(d.reduction->domain[k].min());
    all.push_back(d.reduction->domain[k].extent());
  }
  return all;
}

namespace {

// A call of a func or an input: its name and the identity of what it calls (see lang/registry.h).
struct Callee {
  std::string name;
  Parameter identity;
};

struct Uses : IRVisitor {
  std::vector<Callee> calls;
  std::vector<ParamInfo> params;
  using IRVisitor::visit;
  void visit(const Call *c) override {
    if ((c->call_type == Call::Halide || c->call_type == Call::Image) &&
        std::none_of(calls.begin(), calls.end(),
                     [&](const Callee &k) { return k.name == c->name && k.identity.same_as(c->param); }))
      calls.push_back({c->name, c->param});
    IRVisitor::visit(c);
  }
  void visit(const Variable *v) override {
    if (is_param(v) && std::none_of(params.begin(), params.end(), [&](auto &p) { return p.name == v->name; }))
      params.push_back({v->name, v->type});
  }
};

}  // namespace

namespace {

std::vector<Callee> calls_of(const Definition &d) {
  Uses uses;
  for (const Expr &e : expressions(d)) e.accept(&uses);
  return uses.calls;
}

}  // namespace

std::vector<std::string> callees(const Definition &d) {
  std::vector<std::string> names;
  for (const Callee &c : calls_of(d))
    if (std::find(names.begin(), names.end(), c.name) == names.end()) names.push_back(c.name);
  return names;
}

const Func &FuncGraph::func(const std::string &name) const {
  for (const Func &f : funcs)
    if (f.name() == name) return f;
  fail("the program has no func named '{}'", name);
}

bool FuncGraph::has_func(const std::string &name) const {
  return std::any_of(funcs.begin(), funcs.end(), [&](const Func &f) { return f.name() == name; });
}

FuncGraph walk(const std::vector<Func> &outputs) {
  FuncGraph g;
  g.outputs = outputs;
  std::set<std::string> done, visiting, inputs_seen;
  Uses param_uses;
  auto add_params = [&](const Expr &e) { e.accept(&param_uses); };
  // Calls resolve by identity, so names may repeat across programs; within one they must not.
  std::map<std::string, const void *> named;
  auto claim = [&](const std::string &name, const void *what) {
    auto [it, fresh] = named.emplace(name, what);
    if (!fresh && it->second != what)
      fail(
          "the program reads two different funcs or inputs named '{}'; names must be unique within a program "
          "(rename one of them)",
          name);
  };
  std::function<void(const Func &)> visit = [&](const Func &f) {
    claim(f.name(), f.contents().get());
    if (done.count(f.name())) return;
    if (!visiting.insert(f.name()).second) fail("func '{}' depends on itself", f.name());
    const Definition &d = f.definition();
    for (const Callee &callee : calls_of(d)) {
      if (auto fc = find_func(callee.name, callee.identity)) {
        visit(Func(fc));
      } else if (auto in = find_input(callee.name, callee.identity)) {
        claim(callee.name, in.get());
        if (inputs_seen.insert(callee.name).second) {
          g.inputs.push_back(Input(in));
          for (const Expr &extent : in->shape) add_params(extent);
        }
      } else {
        fail("func '{}' calls '{}', which is neither a live func nor an input", f.name(), callee.name);
      }
    }
    for (const Expr &e : expressions(d)) add_params(e);
    // A monoid may read Params too (a temperature): the program binds them like any other.
    if (d.reduction)
      for (const Component &p : d.reduction->monoid->parameters())
        if (std::none_of(param_uses.params.begin(), param_uses.params.end(),
                         [&](const ParamInfo &known) { return known.name == p.name; }))
          param_uses.params.push_back({p.name, p.type});
    for (const Expr &e : f.shape()) add_params(e);
    visiting.erase(f.name());
    done.insert(f.name());
    g.funcs.push_back(f);
  };
  for (const Func &out : outputs) visit(out);
  g.params = param_uses.params;
  return g;
}

namespace {

std::string join_vars(const std::vector<Var> &vars) {
  std::string s;
  for (const Var &v : vars) s += (s.empty() ? "" : ", ") + v.name();
  return s;
}

std::string show(const Halide::Expr &e) {
  std::ostringstream os;
  os << e;
  return os.str();
}

}  // namespace

std::string to_string(const Func &f) {
  const Definition &d = f.definition();
  std::string lhs = fmt::format("{}({})", f.name(), join_vars(d.args));
  if (!d.reduction) {
    std::string rhs;
    for (const Expr &v : d.values) rhs += (rhs.empty() ? "" : ", ") + show(v);
    return fmt::format("{} = {}", lhs, d.values.size() == 1 ? rhs : "{" + rhs + "}");
  }
  const Reduction &r = *d.reduction;
  std::string domain;
  for (int k = 0; k < r.domain.dimensions(); ++k) {
    RVar v = r.domain[k];
    domain += fmt::format("{}{} in [{}, {} + {})", k ? ", " : "", v.name(), show(v.min()), show(v.min()),
                          show(v.extent()));
  }
  for (const Expr &p : r.domain.predicates()) domain += fmt::format(" where {}", show(p));
  std::string elements;
  for (const Expr &e : r.elements) elements += (elements.empty() ? "" : ", ") + show(e);
  return fmt::format("{} = reduce({}, {}, {})", lhs, r.monoid->name, domain, elements);
}

std::string to_string(const FuncGraph &g) {
  std::string s;
  for (const Input &in : g.inputs) {
    std::string shape;
    for (const Expr &e : in.shape()) shape += (shape.empty() ? "" : ", ") + show(e);
    s += fmt::format("input {}: {}[{}]\n", in.name(), type_name(in.type()), shape);
  }
  for (const ParamInfo &p : g.params) s += fmt::format("param {}: {}\n", p.name, type_name(p.type));
  for (const Func &f : g.funcs) s += to_string(f) + "\n";
  return s;
}

}  // namespace twist
