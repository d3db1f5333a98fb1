#include "backend/runtime/gradient_magnitude.h"

#include <algorithm>
#include <cmath>
#include <set>

namespace nns::backend {

namespace {

std::vector<float> host_abs(Backend& be, const TensorView& v) {
  std::vector<float> h(static_cast<size_t>(v.numel()));
  be.copy_to_host(h.data(), v.data, h.size() * sizeof(float));
  for (float& x : h) x = std::fabs(x);
  return h;
}

// The layer_norm kernel's weight gradient computes x-hat from x inside, so
// only its bias gradient (forward input 2: sum of dy) is a sum of
// monomials in its inputs.
bool output_is_monomial_sum(const sema::Graph& g, const sema::OpNode& n, int out) {
  if (n.kind != "layer_norm_backward") return true;
  const sema::OpNode& f = g.node(n.forward_of);
  return f.inputs.size() == 3 && g.tensor(out).grad_of == f.inputs[2];
}

}  // namespace

GradientMagnitudes::Role GradientMagnitudes::role_of(const std::string& kind) {
  // Each gradient output a sum of products of (powers of) the node's float
  // inputs times constants (-1 for sub and neg): run on the inputs'
  // absolute values, |result| is the sum of the terms' magnitudes.
  static const std::set<std::string> reduce = {"add_backward",       "sub_backward",          "mul_backward",
                                               "div_backward",       "neg_backward",          "mul_scalar_backward",
                                               "linear_backward",    "linear_bias_backward",  "matmul_backward",
                                               "bmm_backward",       "conv2d_backward",       "conv2d_bias_backward",
                                               "embedding_backward", "index_select_backward", "layer_norm_backward"};
  // Linear in the incoming gradients with coefficients 0, 1 or 1/n: they
  // carry magnitudes as they are.
  static const std::set<std::string> pass = {
      "add_n",        "reshape_backward", "view_backward",   "transpose_backward", "permute_backward",
      "sum_backward", "mean_backward",    "concat_backward", "split_backward",     "chunk_backward"};
  if (reduce.count(kind)) return Role::Reduce;
  if (pass.count(kind)) return Role::Pass;
  return Role::None;
}

GradientMagnitudes::GradientMagnitudes(const sema::Graph& g, const sema::TrainingGraphInfo& info) : g_(g), info_(info) {
  // The nodes between each parameter gradient and the sums it is made of:
  // layout nodes back to the reducing nodes, no further (see the header).
  std::map<int, int> producer;  // gradient tensor -> the backward node that writes it
  for (int id : info.backward)
    for (int out : g.node(id).outputs) producer[out] = id;
  std::vector<int> todo;
  for (const auto& [param, grad] : info.param_grads) todo.push_back(grad);
  while (!todo.empty()) {
    const int t = todo.back();
    todo.pop_back();
    auto p = producer.find(t);
    if (p == producer.end() || nodes_.count(p->second)) continue;
    const sema::OpNode& n = g.node(p->second);
    const Role r = role_of(n.kind);
    if (r == Role::None) continue;
    nodes_[p->second] = r;
    if (r == Role::Pass)
      for (int in : n.inputs)
        if (g.tensor(in).grad_of >= 0) todo.push_back(in);
  }
  sum_g_.resize(info.param_grads.size());
  sum_s_.resize(info.param_grads.size());
}

void GradientMagnitudes::after_node(Backend& be, const sema::OpNode& n, const std::vector<TensorView>& ins) {
  auto role = nodes_.find(n.id);
  if (role == nodes_.end()) return;
  std::vector<void*> owned;
  std::vector<size_t> sizes;
  auto upload = [&](const std::vector<float>& h, TensorView v) {
    v.data = be.allocate(h.size() * sizeof(float));
    be.copy_from_host(v.data, h.data(), h.size() * sizeof(float));
    owned.push_back(v.data);
    sizes.push_back(h.size() * sizeof(float));
    return v;
  };
  std::vector<TensorView> mins, mouts;
  for (size_t i = 0; i < ins.size(); ++i) {
    if (ins[i].dtype != sema::DType::F32) {
      mins.push_back(ins[i]);  // indices: used as they are
      continue;
    }
    // A layout node reads the magnitudes the nodes before it computed;
    // a reducing node the absolute values of the terms' factors.
    auto m = mag_.find(n.inputs[i]);
    mins.push_back(upload(role->second == Role::Pass && m != mag_.end() ? m->second : host_abs(be, ins[i]), ins[i]));
  }
  for (int out : n.outputs) {
    const sema::TensorInfo& t = g_.tensor(out);
    mouts.push_back(
        upload(std::vector<float>(static_cast<size_t>(sema::numel(t.shape))), TensorView{nullptr, t.dtype, t.shape}));
  }
  be.run_node(g_, n, mins, mouts);
  for (size_t i = 0; i < n.outputs.size(); ++i)
    if (mouts[i].dtype == sema::DType::F32 && output_is_monomial_sum(g_, n, n.outputs[i]))
      mag_[n.outputs[i]] = host_abs(be, mouts[i]);  // sub's and neg's signs: the magnitude is |result|
  for (size_t i = 0; i < owned.size(); ++i) be.release(owned[i], sizes[i]);
}

void GradientMagnitudes::forget(int tensor) {
  for (const auto& [p, grad] : info_.param_grads)
    if (grad == tensor) return;  // read at the micro-batch's end
  mag_.erase(tensor);
}

void GradientMagnitudes::start_step() {
  for (auto& v : sum_g_) v.clear();
  for (auto& v : sum_s_) v.clear();
  analysed_ = 0;
}

void GradientMagnitudes::end_micro_batch(Backend& be, const std::vector<TensorView>& grads, double weight) {
  analysed_ = 0;
  for (size_t i = 0; i < grads.size() && i < info_.param_grads.size(); ++i) {
    std::vector<float> g(static_cast<size_t>(grads[i].numel()));
    be.copy_to_host(g.data(), grads[i].data, g.size() * sizeof(float));
    auto m = mag_.find(info_.param_grads[i].second);
    const bool have = m != mag_.end() && m->second.size() == g.size();
    analysed_ += have ? 1 : 0;
    sum_g_[i].resize(g.size(), 0.0);
    sum_s_[i].resize(g.size(), 0.0);
    for (size_t k = 0; k < g.size(); ++k) {
      sum_g_[i][k] += weight * g[k];
      sum_s_[i][k] += weight * (have ? m->second[k] : std::fabs(g[k]));
    }
  }
  mag_.clear();
}

std::map<std::string, double> GradientMagnitudes::conditions() const {
  std::map<std::string, double> out;
  for (size_t i = 0; i < info_.param_grads.size(); ++i) {
    double gg = 0, ss = 0;
    for (double x : sum_g_[i]) gg += x * x;
    for (double x : sum_s_[i]) ss += x * x;
    // S >= |g| elementwise in exact arithmetic; rounding may put it a hair below.
    out[g_.tensor(info_.param_grads[i].first).name] = gg > 0 ? std::max(1.0, std::sqrt(ss / gg)) : 1.0;
  }
  return out;
}

std::map<std::string, double> GradientMagnitudes::norms() const {
  std::map<std::string, double> out;
  for (size_t i = 0; i < info_.param_grads.size(); ++i) {
    double gg = 0;
    for (double x : sum_g_[i]) gg += x * x;
    out[g_.tensor(info_.param_grads[i].first).name] = std::sqrt(gg);
  }
  return out;
}

}  // namespace nns::backend
