// --verify's condition of the parameter-gradient sums (docs/verify.md,
// "The bound", step 9). The summation bound is |fl(sum c_j) - sum c_j| <=
// gamma_n sum |c_j|: relative to the result it carries the condition
// sum |c_j| / |sum c_j|, about 1 for terms of one sign, large for terms that
// largely cancel (BatchNorm's parameter gradients, sums over the batch and
// the image, late in training). The reference Trainer computes, beside
// each parameter gradient g = sum_j c_j, its magnitude S = sum_j |c_j|
// (elementwise), and the verifier scales the tensor's derived bound by
// kappa = ||S||_2 / ||g||_2 >= 1 of that step.
//
// How S is computed: the backward node whose outputs are the sums (a
// matrix product's or convolution's weight gradient, add/sub/mul/div's
// reduction over broadcast dimensions, an embedding's scatter-add, the
// layer_norm kernel's bias gradient), each output a sum of monomials in
// the node's float inputs, is run a second time on its inputs' absolute
// values (|prod a| = prod |a|) and S is |result|. Layout nodes between it
// and the parameter's gradient (reshape, transpose, add_n of the
// parameter's uses...), linear with coefficients 0, 1 or 1/n, are run on the
// magnitudes. A gradient made by any other node keeps S = |g| (kappa 1).
//
// Only the last sum is measured: the terms c_j are taken with their
// computed values, so cancellation upstream of it (BatchNorm's dx = (dy -
// mean(dy) - x-hat mean(dy x-hat)) / sigma) is still assumed away. Carrying
// the magnitudes through the whole backward (the first-order bound gamma_L
// e-bar of Higham 3.5, e-bar the backward evaluated on absolute values)
// compounds every layer's worst case: measured on ResNet, kappa up to 2e13,
// a bound no wrong plan could exceed (docs/verify.md).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "backend/runtime/backend.h"
#include "semantics/autograd.h"
#include "semantics/graph.h"

namespace nns::backend {

class GradientMagnitudes {
 public:
  GradientMagnitudes(const sema::Graph& g, const sema::TrainingGraphInfo& info);

  // Called after the Trainer ran backward node `n` on `ins` (its inputs'
  // buffers): a node on a parameter gradient's path is run again on
  // magnitudes (above); its outputs' magnitudes are kept (host copies) until
  // forget() or the micro-batch's end.
  void after_node(Backend& be, const sema::OpNode& n, const std::vector<TensorView>& ins);
  // After a micro-batch's backward: adds each parameter gradient and its
  // magnitude, times `weight` (1/micro-batches), to the step's sums.
  void end_micro_batch(Backend& be, const std::vector<TensorView>& grads, double weight);
  void start_step();  // the step's sums from zero
  // kappa = ||S|| / ||g|| by parameter name (1 where g is 0), of the latest step.
  std::map<std::string, double> conditions() const;
  // ||g||_2 by parameter name, of the latest step (before clipping).
  std::map<std::string, double> norms() const;
  // How many parameters' gradients had a magnitude computed (the others have kappa = 1).
  size_t analysed() const { return analysed_; }

  // When the Trainer frees a tensor: its magnitude goes too.
  void forget(int tensor);

  // What a backward node is to the magnitude pass (exposed for the tests).
  enum class Role { None, Reduce, Pass };
  static Role role_of(const std::string& kind);

 private:
  const sema::Graph& g_;
  const sema::TrainingGraphInfo& info_;
  std::map<int, Role> nodes_;                       // backward nodes on a parameter gradient's path
  std::map<int, std::vector<float>> mag_;           // this micro-batch's magnitudes by tensor
  std::vector<std::vector<double>> sum_g_, sum_s_;  // by info.param_grads index
  size_t analysed_ = 0;
};

}  // namespace nns::backend
