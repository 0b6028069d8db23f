#pragma once
// The definition of a monoid, as a program states it.
//
// A monoid is written as Halide expressions over symbolic states: `combine` over the two operands' components
// (variables "a.<name>" and "b.<name>"), `lift` over the element values ("x.<name>"), `finalize` over one
// state ("s.<name>"). This file is only the language: everything known *about* a monoid (the built-ins,
// twists, products, whether it is associative and why) lives in algebra/.
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "lang/expr.h"

namespace twist {

struct Component {
  std::string name;
  Type type;
};

// The values an element component takes in the program's data, where that is narrower than its type
// (weights that are never negative, say). The associativity checker draws and proves only inside it, and
// prints it with its verdict. An unset bound is the type's.
struct Domain {
  std::optional<double> lo, hi;  // inclusive
  bool integral = false;         // whole numbers only

  bool contains(double value) const;
  bool restricts() const { return lo || hi || integral; }
  std::string to_string(const std::string &component) const;  // "w in [0, +inf), whole numbers"
};

// The symbolic values of one state (or one element) that a monoid's expressions are written over.
class State {
 public:
  State(std::string prefix, std::vector<Component> components);
  Expr operator[](int k) const;
  Expr operator[](const std::string &name) const;
  int size() const { return static_cast<int>(vars_.size()); }
  const std::vector<Expr> &vars() const { return vars_; }

 private:
  std::vector<Component> components_;
  std::vector<Expr> vars_;
};

// The names of the free variables of e: neither Params nor bound by an enclosing Let.
std::set<std::string> free_variables(const Halide::Expr &e);

class Monoid {
 public:
  // How the monoid came to be, which is what the associativity checker starts from.
  enum class Origin {
    builtin,  // from algebra/'s library, associative by construction
    product,  // a componentwise product of `factors`
    twisted,  // transported from `twist->base` through a bijection
    derived,  // combine derived from a leftward and a rightward fold
    user,     // written by hand: the checker tests it, it does not trust it
  };
  struct Twist {
    std::shared_ptr<const Monoid> base;
    std::vector<Expr> to_base;    // psi, over this monoid's state ("s.<name>"), one per base component
    std::vector<Expr> from_base;  // psi^-1, over the base's state ("s.<base name>"), one per component
  };

  std::string name;
  std::vector<Component> state;         // the carrier
  std::vector<Component> elements;      // what lift takes
  std::vector<Domain> element_domains;  // one per element component, or none: every value of the types
  // The values the run-time Params read by its expressions (a temperature) take, where declared.
  std::map<std::string, Domain> parameter_domains;
  std::vector<Component> outputs;  // what finalize gives
  std::vector<Expr> identity;      // constants, one per state component
  std::vector<Expr> combine;       // one per state component
  std::vector<Expr> lift;          // one per state component
  std::vector<Expr> finalize;      // one per output
  // The user's own sequential step, if given: the next state from a state and an element, over "s.<name>"
  // and "x.<name>". The checker holds the combine to it: the user's fold must be a homomorphism,
  // fold(x ++ y) == combine(fold(x), fold(y)), and equal the rightward fold by the combine.
  std::vector<Expr> step;
  Origin origin = Origin::user;
  // a . b == b . a for every pair of states, known by construction (the library's monoids but the affine
  // maps, products of such, twists of such) or declared (MonoidBuilder::commutative, checked where a
  // lowering relies on it). A lowering may fold the points of a reduction out of order (threads dealt
  // points in turn) only when this holds; otherwise each thread folds a contiguous run.
  bool commutative = false;
  std::vector<std::shared_ptr<const Monoid>> factors;  // for a product
  std::optional<Twist> twist;

  State lhs() const { return State("a.", state); }
  State rhs() const { return State("b.", state); }
  State one() const { return State("s.", state); }
  State element() const { return State("x.", elements); }
  int state_index(const std::string &component) const;  // throws if absent
  // The run-time Params (lang/param.h) its expressions read, twist maps and base included, each once, in
  // order of first use: a temperature inside a twisted softmax. The program binds them when it runs; the
  // associativity checker reasons over them symbolically where it can, and samples them otherwise.
  std::vector<Component> parameters() const;

  // Checks counts, types and free variables; throws twist::Error naming the monoid and the component.
  void validate() const;
};

// Builds a user-defined monoid in a few lines:
//   Monoid m = MonoidBuilder("mean")
//                .state({{"n", f64}, {"sum", f64}})
//                .elements({{"x", f64}})
//                .identity({0.0, 0.0})
//                .combine([](const State &a, const State &b) { return std::vector<Expr>{a[0] + b[0], a[1] +
//                b[1]}; }) .lift([](const State &x) { return std::vector<Expr>{Expr(1.0), x[0]}; })
//                .finalize({{"mean", f64}}, [](const State &s) { return std::vector<Expr>{s[1] / s[0]}; })
//                .build();
// Without lift, elements are states; without finalize, the outputs are the state.
class MonoidBuilder {
 public:
  using Fn1 = std::function<std::vector<Expr>(const State &)>;
  using Fn2 = std::function<std::vector<Expr>(const State &, const State &)>;

  explicit MonoidBuilder(std::string name);
  MonoidBuilder &state(std::vector<Component> components);
  MonoidBuilder &elements(std::vector<Component> components);
  // Restricts the values of element component `component` (see Domain), or of a Param the expressions read
  // (Monoid::parameter_domains).
  MonoidBuilder &domain(const std::string &component, Domain domain);
  MonoidBuilder &identity(std::vector<Expr> values);
  MonoidBuilder &combine(const Fn2 &fn);
  MonoidBuilder &lift(const Fn1 &fn);
  MonoidBuilder &finalize(std::vector<Component> outputs, const Fn1 &fn);
  // The sequential step the combine must reproduce: (state, element) -> state (see Monoid::step).
  MonoidBuilder &step(const Fn2 &fn);
  MonoidBuilder &origin(Monoid::Origin origin);
  // Declares that the combine commutes, so that a cooperative tree may deal points to threads in turn
  // (coalesced loads) rather than in contiguous runs. The claim is checked where a lowering relies on it
  // (algebra::require_reorderable): a combine the checker does not accept as commutative is refused there
  // with a counterexample.
  MonoidBuilder &commutative(bool known = true);
  Monoid build() const;

 private:
  Monoid m_;
  Fn2 combine_, step_;
  Fn1 lift_, finalize_;
  std::vector<std::pair<std::string, Domain>> domains_;
  bool has_elements_ = false, has_outputs_ = false;
};

}  // namespace twist
