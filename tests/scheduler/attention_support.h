// What the attention lowering tests share: a problem's size parameters and the softmax scale in base 2.
#pragma once

#include <cmath>
#include <map>
#include <string>

#include "apps/attention/attention.h"

namespace twist::testing {

inline std::map<std::string, double> attention_sizes(const apps::Attention &a, int batch, int heads,
                                                     int queries, int keys) {
  return {{a.batch.name(), batch},
          {a.heads.name(), heads},
          {a.queries.name(), queries},
          {a.keys.name(), keys},
          {a.qk_scale.name(), std::log2(std::exp(1.0)) / std::sqrt(double(a.options.head_dim))}};
}

}  // namespace twist::testing
