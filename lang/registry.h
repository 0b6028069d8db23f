#pragma once
// The funcs and inputs alive, for resolving the calls in expressions. A call names its func or input and
// carries its identity (FuncContents::identity, InputContents::parameter), so two programs, or two instances
// of one op, may use the same names; within one program names must differ (lang/graph.h's walk checks).
#include <memory>
#include <string>

#include <Halide.h>

namespace twist {

struct FuncContents;
struct InputContents;

void register_func(const std::shared_ptr<FuncContents> &f);
void register_input(const std::shared_ptr<InputContents> &in);
// The live func or input called `name` whose identity is `identity`, or null.
std::shared_ptr<FuncContents> find_func(const std::string &name, const Halide::Internal::Parameter &identity);
std::shared_ptr<InputContents> find_input(const std::string &name,
                                          const Halide::Internal::Parameter &identity);

}  // namespace twist
