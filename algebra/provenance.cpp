#include "algebra/provenance.h"

#include <map>
#include <mutex>
#include <set>

#include "algebra/structural_key.h"

namespace twist::algebra {

namespace {

struct Registry {
  std::mutex mutex;
  std::set<std::string> library_monoids;
  std::map<std::string, ReferenceRule> reference_rules;
};

Registry &registry() {
  static Registry r;
  return r;
}

// The rule is written over the state's component names, so unlike the structural key this one keeps them.
std::string rule_key(const Monoid &m) {
  std::string key = structural_key(m);
  for (const Component &c : m.state) key += c.name + ";";
  return key;
}

}  // namespace

Monoid register_library_monoid(Monoid m) {
  std::string key = structural_key(m);
  std::lock_guard lock(registry().mutex);
  registry().library_monoids.insert(std::move(key));
  return m;
}

bool is_library_monoid(const Monoid &m) {
  std::string key = structural_key(m);
  std::lock_guard lock(registry().mutex);
  return registry().library_monoids.count(key) > 0;
}

void register_reference_rule(const Monoid &m, const ReferenceRule &rule) {
  std::string key = rule_key(m);
  std::lock_guard lock(registry().mutex);
  registry().reference_rules.insert_or_assign(std::move(key), rule);
}

std::optional<ReferenceRule> reference_rule(const Monoid &m) {
  std::string key = rule_key(m);
  std::lock_guard lock(registry().mutex);
  auto it = registry().reference_rules.find(key);
  if (it == registry().reference_rules.end()) return std::nullopt;
  return it->second;
}

}  // namespace twist::algebra
