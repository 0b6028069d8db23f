#include "lang/registry.h"

#include <map>
#include <mutex>

#include "lang/error.h"
#include "lang/func.h"
#include "lang/input.h"

namespace twist {

namespace {

struct Table {
  std::mutex mutex;
  std::map<std::string, std::weak_ptr<FuncContents>> funcs;
  std::map<std::string, std::weak_ptr<InputContents>> inputs;
};

Table &table() {
  static Table t;
  return t;
}

template <typename M>
bool alive(M &map, const std::string &name) {
  auto it = map.find(name);
  return it != map.end() && !it->second.expired();
}

void claim(Table &t, const std::string &name, const char *kind) {
  if (alive(t.funcs, name) || alive(t.inputs, name))
    fail("a func or input named '{}' already exists; names of funcs and inputs must be unique (rename this "
         "{} or let the other one go out of scope)",
         name, kind);
}

}  // namespace

void register_func(const std::shared_ptr<FuncContents> &f) {
  Table &t = table();
  std::lock_guard lock(t.mutex);
  claim(t, f->name, "func");
  t.funcs[f->name] = f;
}

void register_input(const std::shared_ptr<InputContents> &in) {
  Table &t = table();
  std::lock_guard lock(t.mutex);
  claim(t, in->name, "input");
  t.inputs[in->name] = in;
}

std::shared_ptr<FuncContents> find_func(const std::string &name) {
  Table &t = table();
  std::lock_guard lock(t.mutex);
  auto it = t.funcs.find(name);
  return it == t.funcs.end() ? nullptr : it->second.lock();
}

std::shared_ptr<InputContents> find_input(const std::string &name) {
  Table &t = table();
  std::lock_guard lock(t.mutex);
  auto it = t.inputs.find(name);
  return it == t.inputs.end() ? nullptr : it->second.lock();
}

}  // namespace twist
