#include "algebra/fold_order.h"

#include "lang/error.h"

namespace twist::algebra {

std::string FoldOrder::name() const {
  switch (kind) {
    case Kind::sequential:
      return "sequential";
    case Kind::tiled:
      return fmt::format("tiled({})", size);
    case Kind::tree:
      return "tree";
    case Kind::split:
      return fmt::format("split({})", size);
  }
  return "?";
}

Values fold_in_order(const MonoidEvaluator &monoid, std::span<const Values> elements,
                     const FoldOrder &order) {
  using Kind = FoldOrder::Kind;
  if ((order.kind == Kind::tiled || order.kind == Kind::split) && order.size < 1)
    fail("fold order {}: the {} must be at least 1", order.name(),
         order.kind == Kind::tiled ? "tile" : "part count");
  const size_t n = elements.size();
  switch (order.kind) {
    case Kind::sequential:
      return monoid.fold(elements);
    case Kind::tiled: {
      Values state = monoid.identity();
      for (size_t begin = 0; begin < n; begin += order.size)
        state = monoid.combine(state,
                               monoid.fold(elements.subspan(begin, std::min<size_t>(order.size, n - begin))));
      return state;
    }
    case Kind::tree: {
      if (n == 0) return monoid.identity();
      std::vector<Values> level;
      for (const Values &x : elements) level.push_back(monoid.lift(x));
      while (level.size() > 1) {
        std::vector<Values> next;
        for (size_t i = 0; i + 1 < level.size(); i += 2)
          next.push_back(monoid.combine(level[i], level[i + 1]));
        if (level.size() % 2) next.push_back(level.back());
        level = std::move(next);
      }
      return level[0];
    }
    case Kind::split: {
      const size_t parts = static_cast<size_t>(order.size);
      Values state = monoid.identity();
      size_t begin = 0;
      for (size_t p = 0; p < parts; ++p) {
        const size_t length = n / parts + (p < n % parts ? 1 : 0);
        state = monoid.combine(state, monoid.fold(elements.subspan(begin, length)));
        begin += length;
      }
      return state;
    }
  }
  TWIST_CHECK(false, "unknown fold order");
}

}  // namespace twist::algebra
