#pragma once
// The element types a twist program computes in. They are Halide types; these names are the DSL's.
#include <Halide.h>

#include <string>

namespace twist {

using Type = Halide::Type;

inline const Type f16 = Halide::Float(16);
inline const Type bf16 = Halide::BFloat(16);
inline const Type f32 = Halide::Float(32);
inline const Type f64 = Halide::Float(64);
inline const Type i32 = Halide::Int(32);
inline const Type boolean = Halide::Bool();

// "f16", "bf16", "f32", "f64", "i32", "bool": the names used in messages and dumps.
std::string type_name(const Type &t);
// Parses a name produced by type_name; throws twist::Error naming the accepted spellings otherwise.
Type parse_type(const std::string &name);
// Whether t is one of the element types above (the ones inputs and funcs may hold).
bool is_element_type(const Type &t);

}  // namespace twist
