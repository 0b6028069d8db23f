#include "lang/var.h"

#include <atomic>

#include "lang/error.h"

namespace twist {

using namespace Halide::Internal;

std::string fresh_name(const std::string &prefix) {
  static std::atomic<int> counter{0};
  return fmt::format("{}{}", prefix, counter++);
}

Var::Var() : Var(fresh_name("v")) {}

Var::Var(const std::string &name) : Expr(Variable::make(i32, name)) {
  if (name.empty()) fail("a Var needs a non-empty name");
}

const std::string &Var::name() const {
  return as<Variable>()->name;
}

RVar::RVar(std::shared_ptr<const RDomContents> domain, int index)
    : Expr(Variable::make(i32, domain->dims.at(index).var_name, domain->marker)),
      domain_(std::move(domain)),
      index_(index) {}

const std::string &RVar::name() const {
  return domain_->dims[index_].var_name;
}
Expr RVar::min() const {
  return domain_->dims[index_].min;
}
Expr RVar::extent() const {
  return domain_->dims[index_].extent;
}

RDom::RDom(const std::vector<std::pair<Expr, Expr>> &ranges, const std::string &name) {
  auto contents = std::make_shared<RDomContents>();
  contents->name = name.empty() ? fresh_name("r") : name;
  if (ranges.empty()) fail("RDom '{}' needs at least one (min, extent) range", contents->name);
  static const char *const suffixes[] = {"x", "y", "z", "w"};
  std::vector<ReductionVariable> halide_vars;
  for (size_t d = 0; d < ranges.size(); ++d) {
    const auto &[min, extent] = ranges[d];
    for (const Expr *bound : {&min, &extent}) {
      if (!bound->defined() || bound->type() != i32)
        fail("RDom '{}': bounds of dimension {} must be i32 expressions (constants or size params)",
             contents->name, d);
      if (auto err = first_type_error(*bound)) fail("RDom '{}': {}", contents->name, *err);
    }
    std::string var_name = contents->name + "." + (d < 4 ? suffixes[d] : std::to_string(d));
    contents->dims.push_back({var_name, min, extent});
    halide_vars.push_back({var_name, min, extent});
  }
  contents->marker = ReductionDomain(halide_vars);
  contents_ = std::move(contents);
  RVar *named[] = {&x, &y, &z, &w};
  for (int d = 0; d < dimensions() && d < 4; ++d) *named[d] = RVar(contents_, d);
}

RVar RDom::operator[](int i) const {
  if (i < 0 || i >= dimensions())
    fail("RDom '{}' has {} dimension(s); there is no dimension {}", name(), dimensions(), i);
  return RVar(contents_, i);
}

RDom RDom::where(const Expr &predicate) const {
  if (!predicate.defined() || !predicate.type().is_bool())
    fail("RDom '{}'.where() needs a bool predicate", name());
  if (auto err = first_type_error(predicate)) fail("RDom '{}'.where(): {}", name(), *err);
  RDom restricted = *this;
  restricted.predicates_.push_back(predicate);
  return restricted;
}

bool is_rvar(const Variable *v) {
  return v->reduction_domain.defined();
}

}  // namespace twist
