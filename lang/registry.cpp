#include "lang/registry.h"

#include <map>
#include <mutex>

#include "lang/func.h"
#include "lang/input.h"

namespace twist {

namespace {

struct Table {
  std::mutex mutex;
  std::multimap<std::string, std::weak_ptr<FuncContents>> funcs;
  std::multimap<std::string, std::weak_ptr<InputContents>> inputs;
};

Table &table() {
  static Table t;
  return t;
}

// Registers `entry` under its name, dropping the entries of that name that have died.
template <typename M, typename P>
void add(M &map, const std::shared_ptr<P> &entry) {
  auto [begin, end] = map.equal_range(entry->name);
  for (auto it = begin; it != end;) it = it->second.expired() ? map.erase(it) : std::next(it);
  map.emplace(entry->name, entry);
}

template <typename P, typename M, typename Identity>
std::shared_ptr<P> find(M &map, const std::string &name, const Halide::Internal::Parameter &identity,
                        Identity identity_of) {
  auto [begin, end] = map.equal_range(name);
  for (auto it = begin; it != end; ++it)
    if (auto p = it->second.lock(); p && identity_of(*p).same_as(identity)) return p;
  return nullptr;
}

}  // namespace

void register_func(const std::shared_ptr<FuncContents> &f) {
  Table &t = table();
  std::lock_guard lock(t.mutex);
  add(t.funcs, f);
}

void register_input(const std::shared_ptr<InputContents> &in) {
  Table &t = table();
  std::lock_guard lock(t.mutex);
  add(t.inputs, in);
}

std::shared_ptr<FuncContents> find_func(const std::string &name,
                                        const Halide::Internal::Parameter &identity) {
  Table &t = table();
  std::lock_guard lock(t.mutex);
  return find<FuncContents>(t.funcs, name, identity, [](const FuncContents &f) { return f.identity; });
}

std::shared_ptr<InputContents> find_input(const std::string &name,
                                          const Halide::Internal::Parameter &identity) {
  Table &t = table();
  std::lock_guard lock(t.mutex);
  return find<InputContents>(t.inputs, name, identity, [](const InputContents &in) { return in.parameter; });
}

}  // namespace twist
