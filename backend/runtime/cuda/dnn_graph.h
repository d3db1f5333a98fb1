// A small builder over cuDNN 9's graph (backend) API, for the fused
// attention graphs of dnn_sdpa.cpp: tensors, pointwise / matmul / reduction /
// reshape operations, an operation graph, an execution plan chosen by
// cuDNN's heuristics, and its execution. No cudnn-frontend: the attribute
// sequences are the ones cudnn_graph.h documents.
//
// Every cuDNN call is checked. The first failure is kept, as text naming the
// call and cuDNN's status, and every later call does nothing: a graph that
// cannot be built is a decline with a reason (Dnn::describe / the trace),
// never a crash.
#pragma once

#include <cudnn.h>

#include <array>
#include <cstdint>
#include <deque>
#include <string>
#include <utility>
#include <vector>

namespace nns::backend::NNS_DEV::dnn_graph {

using Dims = std::array<int64_t, 4>;

struct Tensor {
  cudnnBackendDescriptor_t desc = nullptr;
  int64_t uid = 0;
  Dims dims{};
  Dims strides{};
};

// Row-major strides of `dims`.
Dims packed(const Dims& dims);

class Graph {
 public:
  explicit Graph(cudnnHandle_t handle) : handle_(handle) {}
  ~Graph();
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;

  bool ok() const { return error_.empty(); }
  const std::string& error() const { return error_; }
  size_t operations() const { return ops_.size(); }

  // A tensor in device memory, bound at execute() by its uid.
  Tensor tensor(const Dims& dims, const Dims& strides, cudnnDataType_t type);
  // A tensor inside the fused kernel (no memory), row-major.
  Tensor virtual_tensor(const Dims& dims, cudnnDataType_t type = CUDNN_DATA_FLOAT);
  // ... with strides of its own (a transposed view for a reshape).
  Tensor virtual_tensor(const Dims& dims, const Dims& strides, cudnnDataType_t type);
  // A by-value scalar [1, 1, 1, 1] whose value the graph keeps (constants:
  // the mask's -inf, one) ...
  Tensor constant(float value);
  // ... or whose host pointer execute() is given (the attention scale).
  Tensor scalar_input();

  // y = mode(x[, b][, t]); axis: GEN_INDEX's.
  void pointwise(cudnnPointwiseMode_t mode, const Tensor& x, const Tensor* b, const Tensor* t, const Tensor& y,
                 int64_t axis = -1, cudnnDataType_t math = CUDNN_DATA_FLOAT);
  // A virtual y of x's dims and the given type.
  Tensor pointwise(cudnnPointwiseMode_t mode, const Tensor& x, const Tensor* b = nullptr,
                   cudnnDataType_t y_type = CUDNN_DATA_FLOAT, int64_t axis = -1,
                   cudnnDataType_t math = CUDNN_DATA_FLOAT);
  void matmul(const Tensor& a, const Tensor& b, const Tensor& c);
  void reduction(cudnnReduceTensorOp_t op, const Tensor& x, const Tensor& y);
  void reshape(const Tensor& x, const Tensor& y);

  // The operation graph and its first execution plan that finalizes, among
  // heuristics mode A's then the fallback's engine configurations; with
  // `deterministic`, configurations noted non-deterministic are skipped.
  bool build(bool deterministic);
  int64_t workspace_bytes() const { return workspace_; }
  // Runs the plan with `data` (uid, device pointer; scalar inputs: host
  // pointers) and the constants. False (and error()) when cuDNN refuses.
  bool execute(const std::vector<std::pair<int64_t, void*>>& data, void* workspace);

 private:
  cudnnBackendDescriptor_t make(cudnnBackendDescriptorType_t type, const char* what);
  void set(cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type,
           int64_t count, const void* values, const char* what);
  void finalize(cudnnBackendDescriptor_t d, const char* what);
  Tensor describe_tensor(const Dims& dims, const Dims& strides, cudnnDataType_t type, const char* kind,
                         const cudnnBackendAttributeName_t* flag);
  bool fail(cudnnStatus_t s, const char* what);
  void add_op(cudnnBackendDescriptor_t op) { ops_.push_back(op); }
  bool try_config(cudnnBackendDescriptor_t config, bool deterministic);

  cudnnHandle_t handle_;
  std::string error_;
  std::vector<cudnnBackendDescriptor_t> held_;  // destroyed with the graph
  std::vector<cudnnBackendDescriptor_t> ops_;
  std::deque<float> constants_;  // stable addresses for the variant pack
  std::vector<std::pair<int64_t, void*>> constant_data_;
  cudnnBackendDescriptor_t plan_ = nullptr;
  int64_t workspace_ = 0;
  int64_t next_uid_ = 1;
};

}  // namespace nns::backend::NNS_DEV::dnn_graph
