// What a backend's kernel wrapper reads of one graph node: its attributes
// and, for a backward node, its operands as autograd lays them out
// (inputs = forward inputs (k), forward outputs (m), output gradients (m);
// outputs = the gradients of the forward inputs whose grad_mask entry is 1).
// The CPU and CUDA backends both build on it.
#pragma once

#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "backend/runtime/backend.h"

namespace nns::backend {

// A negative axis counts from the end.
inline int64_t norm_axis(int64_t a, size_t rank) { return a < 0 ? a + static_cast<int64_t>(rank) : a; }

struct NodeCall {
  const sema::OpNode& node;
  const std::vector<TensorView>& in;
  const std::vector<TensorView>& out;

  int64_t attr_int(const std::string& k) const {
    auto it = node.attrs.find(k);
    if (it == node.attrs.end()) throw RuntimeError("node " + node.name + ": missing attribute '" + k + "'");
    if (auto* i = std::get_if<int64_t>(&it->second)) return *i;
    if (auto* b = std::get_if<bool>(&it->second)) return *b;
    throw RuntimeError("node " + node.name + ": attribute '" + k + "' is not an int");
  }
  // A bool (or int) attribute, false when absent.
  bool attr_flag(const std::string& k) const { return node.attrs.count(k) && attr_int(k) != 0; }
  int64_t attr_int_or(const std::string& k, int64_t fallback) const {
    auto it = node.attrs.find(k);
    return it != node.attrs.end() && std::holds_alternative<int64_t>(it->second) ? std::get<int64_t>(it->second) : fallback;
  }
  double attr_float(const std::string& k, double fallback) const {
    auto it = node.attrs.find(k);
    if (it == node.attrs.end()) return fallback;
    if (auto* d = std::get_if<double>(&it->second)) return *d;
    if (auto* i = std::get_if<int64_t>(&it->second)) return static_cast<double>(*i);
    return fallback;
  }
  std::vector<int64_t> attr_ints(const std::string& k) const {
    auto it = node.attrs.find(k);
    if (it == node.attrs.end()) throw RuntimeError("node " + node.name + ": missing attribute '" + k + "'");
    if (auto* v = std::get_if<std::vector<int64_t>>(&it->second)) return *v;
    if (auto* i = std::get_if<int64_t>(&it->second)) return {*i};
    throw RuntimeError("node " + node.name + ": attribute '" + k + "' is not a list of ints");
  }
  // The forward kind of a backward node ("softmax" of "softmax_backward"); a forward node's own kind.
  std::string base_kind() const {
    const std::string suffix = "_backward";
    const std::string& k = node.kind;
    if (k.size() > suffix.size() && k.compare(k.size() - suffix.size(), suffix.size(), suffix) == 0)
      return k.substr(0, k.size() - suffix.size());
    return k;
  }
  // The permutation of permute (attr dims) or transpose (dim0 <-> dim1), forward or backward:
  // y's dim k is x's dim perm[k].
  std::vector<int> permutation(size_t rank) const {
    std::vector<int> perm(rank);
    if (base_kind() == "transpose") {
      for (size_t i = 0; i < rank; ++i) perm[i] = static_cast<int>(i);
      std::swap(perm[norm_axis(attr_int("dim0"), rank)], perm[norm_axis(attr_int("dim1"), rank)]);
    } else {
      std::vector<int64_t> dims = attr_ints("dims");
      for (size_t i = 0; i < rank; ++i) perm[i] = static_cast<int>(norm_axis(dims[i], rank));
    }
    return perm;
  }
  // Backward nodes.
  size_t fwd_inputs() const { return attr_ints("grad_mask").size(); }
  size_t fwd_outputs() const { return (in.size() - fwd_inputs()) / 2; }
  const TensorView& x(size_t i) const { return in[i]; }
  const TensorView& y(size_t j) const { return in[fwd_inputs() + j]; }
  const TensorView& dy(size_t j) const { return in[fwd_inputs() + fwd_outputs() + j]; }
  // Gradient output of forward input i, or null when it is not wanted.
  float* dx(size_t i) const {
    std::vector<int64_t> mask = attr_ints("grad_mask");
    if (!mask[i]) return nullptr;
    size_t slot = 0;
    for (size_t j = 0; j < i; ++j) slot += mask[j] ? 1 : 0;
    return out[slot].f32();
  }
};

}  // namespace nns::backend
