#pragma once
// The names of funcs and inputs. A call in an expression refers to its func or input by name, so names
// must be unique among the funcs and inputs alive at one time; this table enforces that and resolves names.
#include <memory>
#include <string>

namespace twist {

struct FuncContents;
struct InputContents;

void register_func(const std::shared_ptr<FuncContents> &f);
void register_input(const std::shared_ptr<InputContents> &in);
std::shared_ptr<FuncContents> find_func(const std::string &name);
std::shared_ptr<InputContents> find_input(const std::string &name);

}  // namespace twist
