// Layouts as prime digits: the digit decomposition of a factor, every order
// of significance of a layout's split digits, and every layout of a group
// (what the transfers' variants and the exhaustive adapter tests enumerate).
#include <algorithm>
#include <map>
#include <string>

#include "backend/lowering/adapters.h"

namespace nns::backend {

std::vector<LayoutFactor> prime_digits(const LayoutFactor& f) {
  std::vector<LayoutFactor> digits;
  int64_t stride = f.stride * f.n;  // what the digits to come weigh together (D)
  for (int64_t n = f.n, p = 2; n > 1;) {
    if (n % p) {
      ++p;
      continue;
    }
    LayoutFactor d = f;
    d.n = p;
    stride /= p;
    d.stride = f.kind == LayoutFactor::D ? stride : 0;
    digits.push_back(d);
    n /= p;
  }
  return digits;
}

std::vector<std::vector<LayoutFactor>> significance_orders(const std::vector<LayoutFactor>& digits) {
  std::vector<size_t> ds;
  for (size_t i = 0; i < digits.size(); ++i)
    if (digits[i].kind == LayoutFactor::D) ds.push_back(i);
  std::vector<std::vector<LayoutFactor>> out;
  // rank_of orders all D digits; within a dim, a lower rank weighs less.
  std::vector<size_t> rank_of(ds.size());
  for (size_t i = 0; i < ds.size(); ++i) rank_of[i] = i;
  do {
    std::vector<LayoutFactor> g = digits;
    for (size_t i = 0; i < ds.size(); ++i) {
      int64_t w = 1;
      for (size_t j = 0; j < ds.size(); ++j)
        if (digits[ds[j]].dim == digits[ds[i]].dim && rank_of[j] < rank_of[i]) w *= digits[ds[j]].n;
      g[ds[i]].stride = w;
    }
    out.push_back(normalized_factors(g));
  } while (std::next_permutation(rank_of.begin(), rank_of.end()));
  return out;
}

std::vector<std::vector<LayoutFactor>> all_layouts(int64_t n, const sema::Shape& shape) {
  std::vector<int64_t> primes;
  for (int64_t p = 2, rest = n; rest > 1; ++p)
    while (rest % p == 0) {
      primes.push_back(p);
      rest /= p;
    }
  std::map<std::string, std::vector<LayoutFactor>> found;
  const int kinds = 2 + static_cast<int>(shape.size());  // R, V, D_0 ..
  std::sort(primes.begin(), primes.end());
  do {
    size_t combos = 1;
    for (size_t i = 0; i < primes.size(); ++i) combos *= static_cast<size_t>(kinds);
    for (size_t c = 0; c < combos; ++c) {
      std::vector<LayoutFactor> fs;
      size_t rest = c;
      for (int64_t p : primes) {
        int k = static_cast<int>(rest % static_cast<size_t>(kinds));
        rest /= static_cast<size_t>(kinds);
        fs.push_back(k == 0   ? LayoutFactor{LayoutFactor::R, -1, p, 0}
                     : k == 1 ? LayoutFactor{LayoutFactor::V, -1, p, 0}
                              : LayoutFactor{LayoutFactor::D, k - 2, p, 0});
      }
      bool divides = true;
      for (int d = 0; d < static_cast<int>(shape.size()); ++d)
        divides = divides && shape[static_cast<size_t>(d)] % layout_split(fs, d) == 0;
      if (!divides) continue;
      for (const auto& nf : significance_orders(fs))
        if (layout_strides_valid(nf)) found.emplace(layout_key(nf), nf);
    }
  } while (std::next_permutation(primes.begin(), primes.end()));
  std::vector<std::vector<LayoutFactor>> out;
  for (auto& [k, fs] : found) out.push_back(fs);
  return out;
}

}  // namespace nns::backend
