#include "backend/runtime/cuda/dnn_graph.h"

namespace nns::backend::NNS_DEV::dnn_graph {

namespace {

// Device tensors are the caching allocator's blocks or offsets into them
// that the kernel wrapper keeps 16-byte aligned (heads of 8 bf16).
constexpr int64_t kAlignment = 16;

}  // namespace

Dims packed(const Dims& dims) {
  Dims s{};
  int64_t stride = 1;
  for (size_t k = 4; k-- > 0;) {
    s[k] = stride;
    stride *= dims[k];
  }
  return s;
}

Graph::~Graph() {
  for (cudnnBackendDescriptor_t d : held_) cudnnBackendDestroyDescriptor(d);
}

bool Graph::fail(cudnnStatus_t s, const char* what) {
  if (s == CUDNN_STATUS_SUCCESS) return false;
  if (error_.empty())
    error_ =
        std::string(what) + ": " + cudnnGetErrorString(s) + " (status " + std::to_string(static_cast<int>(s)) + ")";
  return true;
}

cudnnBackendDescriptor_t Graph::make(cudnnBackendDescriptorType_t type, const char* what) {
  if (!ok()) return nullptr;
  cudnnBackendDescriptor_t d = nullptr;
  if (fail(cudnnBackendCreateDescriptor(type, &d), what)) return nullptr;
  held_.push_back(d);
  return d;
}

void Graph::set(cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type,
                int64_t count, const void* values, const char* what) {
  if (!ok() || !d) return;
  fail(cudnnBackendSetAttribute(d, name, type, count, values), what);
}

void Graph::finalize(cudnnBackendDescriptor_t d, const char* what) {
  if (!ok() || !d) return;
  fail(cudnnBackendFinalize(d), what);
}

// Every tensor descriptor: type, dims, strides, uid and alignment, plus at
// most one flag (virtual, or by value), finalized. `kind` names it in a
// decline's reason.
Tensor Graph::describe_tensor(const Dims& dims, const Dims& strides, cudnnDataType_t type, const char* kind,
                              const cudnnBackendAttributeName_t* flag) {
  const std::string k = kind;
  Tensor t{make(CUDNN_BACKEND_TENSOR_DESCRIPTOR, (k + " descriptor").c_str()), next_uid_++, dims, strides};
  set(t.desc, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &type, (k + " data type").c_str());
  set(t.desc, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dims.data(), (k + " dims").c_str());
  set(t.desc, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, strides.data(), (k + " strides").c_str());
  set(t.desc, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &t.uid, (k + " uid").c_str());
  set(t.desc, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &kAlignment, (k + " alignment").c_str());
  if (flag) {
    const bool yes = true;
    set(t.desc, *flag, CUDNN_TYPE_BOOLEAN, 1, &yes, (k + " flag").c_str());
  }
  finalize(t.desc, (k + " finalize").c_str());
  return t;
}

Tensor Graph::tensor(const Dims& dims, const Dims& strides, cudnnDataType_t type) {
  return describe_tensor(dims, strides, type, "tensor", nullptr);
}

Tensor Graph::virtual_tensor(const Dims& dims, cudnnDataType_t type) {
  return virtual_tensor(dims, packed(dims), type);
}

Tensor Graph::virtual_tensor(const Dims& dims, const Dims& strides, cudnnDataType_t type) {
  const cudnnBackendAttributeName_t is_virtual = CUDNN_ATTR_TENSOR_IS_VIRTUAL;
  return describe_tensor(dims, strides, type, "virtual tensor", &is_virtual);
}

Tensor Graph::scalar_input() {
  const Dims one{1, 1, 1, 1};
  const cudnnBackendAttributeName_t by_value = CUDNN_ATTR_TENSOR_IS_BY_VALUE;
  return describe_tensor(one, one, CUDNN_DATA_FLOAT, "scalar", &by_value);
}

Tensor Graph::constant(float value) {
  Tensor t = scalar_input();
  constants_.push_back(value);
  constant_data_.emplace_back(t.uid, &constants_.back());
  return t;
}

void Graph::pointwise(cudnnPointwiseMode_t mode, const Tensor& x, const Tensor* b, const Tensor* t, const Tensor& y,
                      int64_t axis, cudnnDataType_t math) {
  cudnnBackendDescriptor_t pw = make(CUDNN_BACKEND_POINTWISE_DESCRIPTOR, "pointwise descriptor");
  set(pw, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode, "pointwise mode");
  set(pw, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &math, "pointwise math precision");
  if (axis >= 0) set(pw, CUDNN_ATTR_POINTWISE_AXIS, CUDNN_TYPE_INT64, 1, &axis, "pointwise axis");
  finalize(pw, "pointwise descriptor finalize");
  cudnnBackendDescriptor_t op = make(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR, "pointwise operation");
  set(op, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &pw, "pointwise op mode");
  set(op, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x.desc, "pointwise x");
  if (b) set(op, CUDNN_ATTR_OPERATION_POINTWISE_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &b->desc, "pointwise b");
  if (t) set(op, CUDNN_ATTR_OPERATION_POINTWISE_TDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &t->desc, "pointwise t");
  set(op, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y.desc, "pointwise y");
  finalize(op, "pointwise operation finalize");
  add_op(op);
}

Tensor Graph::pointwise(cudnnPointwiseMode_t mode, const Tensor& x, const Tensor* b, cudnnDataType_t y_type,
                        int64_t axis, cudnnDataType_t math) {
  Tensor y = virtual_tensor(x.dims, y_type);
  pointwise(mode, x, b, nullptr, y, axis, math);
  return y;
}

void Graph::matmul(const Tensor& a, const Tensor& b, const Tensor& c) {
  cudnnBackendDescriptor_t mm = make(CUDNN_BACKEND_MATMUL_DESCRIPTOR, "matmul descriptor");
  const cudnnDataType_t compute = CUDNN_DATA_FLOAT;  // fp32 accumulation of the bf16 products
  set(mm, CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &compute, "matmul compute type");
  finalize(mm, "matmul descriptor finalize");
  cudnnBackendDescriptor_t op = make(CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR, "matmul operation");
  set(op, CUDNN_ATTR_OPERATION_MATMUL_ADESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &a.desc, "matmul a");
  set(op, CUDNN_ATTR_OPERATION_MATMUL_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &b.desc, "matmul b");
  set(op, CUDNN_ATTR_OPERATION_MATMUL_CDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &c.desc, "matmul c");
  set(op, CUDNN_ATTR_OPERATION_MATMUL_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &mm, "matmul op descriptor");
  finalize(op, "matmul operation finalize");
  add_op(op);
}

void Graph::reduction(cudnnReduceTensorOp_t reduce, const Tensor& x, const Tensor& y) {
  cudnnBackendDescriptor_t rd = make(CUDNN_BACKEND_REDUCTION_DESCRIPTOR, "reduction descriptor");
  const cudnnDataType_t compute = CUDNN_DATA_FLOAT;
  set(rd, CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 1, &reduce, "reduction operator");
  set(rd, CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &compute, "reduction compute type");
  finalize(rd, "reduction descriptor finalize");
  cudnnBackendDescriptor_t op = make(CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR, "reduction operation");
  set(op, CUDNN_ATTR_OPERATION_REDUCTION_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x.desc, "reduction x");
  set(op, CUDNN_ATTR_OPERATION_REDUCTION_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y.desc, "reduction y");
  set(op, CUDNN_ATTR_OPERATION_REDUCTION_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &rd, "reduction op descriptor");
  finalize(op, "reduction operation finalize");
  add_op(op);
}

void Graph::reshape(const Tensor& x, const Tensor& y) {
  cudnnBackendDescriptor_t op = make(CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR, "reshape operation");
  set(op, CUDNN_ATTR_OPERATION_RESHAPE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x.desc, "reshape x");
  set(op, CUDNN_ATTR_OPERATION_RESHAPE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y.desc, "reshape y");
  finalize(op, "reshape operation finalize");
  add_op(op);
}

bool Graph::try_config(cudnnBackendDescriptor_t config, bool deterministic) {
  if (deterministic) {
    cudnnBackendDescriptor_t engine = nullptr;
    if (cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINE_DESCRIPTOR, &engine) != CUDNN_STATUS_SUCCESS) return false;
    held_.push_back(engine);
    int64_t got = 0;
    if (cudnnBackendGetAttribute(config, CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &got,
                                 &engine) != CUDNN_STATUS_SUCCESS)
      return false;
    cudnnBackendNumericalNote_t notes[CUDNN_NUMERICAL_NOTE_TYPE_COUNT];
    int64_t count = 0;
    if (cudnnBackendGetAttribute(engine, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE,
                                 CUDNN_NUMERICAL_NOTE_TYPE_COUNT, &count, notes) != CUDNN_STATUS_SUCCESS)
      return false;
    for (int64_t i = 0; i < count; ++i)
      if (notes[i] == CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC) return false;
  }
  cudnnBackendDescriptor_t plan = nullptr;
  if (cudnnBackendCreateDescriptor(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, &plan) != CUDNN_STATUS_SUCCESS)
    return false;
  held_.push_back(plan);
  if (cudnnBackendSetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle_) !=
          CUDNN_STATUS_SUCCESS ||
      cudnnBackendSetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
                               &config) != CUDNN_STATUS_SUCCESS ||
      cudnnBackendFinalize(plan) != CUDNN_STATUS_SUCCESS)
    return false;
  int64_t got = 0, bytes = 0;
  if (cudnnBackendGetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &got, &bytes) !=
      CUDNN_STATUS_SUCCESS)
    return false;
  plan_ = plan, workspace_ = bytes;
  return true;
}

bool Graph::build(bool deterministic) {
  cudnnBackendDescriptor_t graph = make(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, "operation graph");
  set(graph, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, static_cast<int64_t>(ops_.size()),
      ops_.data(), "operation graph ops");
  set(graph, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle_, "operation graph handle");
  finalize(graph, "operation graph finalize");
  if (!ok()) return false;
  std::string tried;
  for (cudnnBackendHeurMode_t mode : {CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_FALLBACK}) {
    const char* name = mode == CUDNN_HEUR_MODE_A ? "heuristics A" : "fallback";
    cudnnBackendDescriptor_t heur = nullptr;
    if (cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, &heur) != CUDNN_STATUS_SUCCESS) continue;
    held_.push_back(heur);
    int64_t count = 0;
    cudnnStatus_t s =
        cudnnBackendSetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &graph);
    if (s == CUDNN_STATUS_SUCCESS)
      s = cudnnBackendSetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode);
    if (s == CUDNN_STATUS_SUCCESS) s = cudnnBackendFinalize(heur);
    if (s == CUDNN_STATUS_SUCCESS)
      s = cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &count,
                                   nullptr);
    std::vector<cudnnBackendDescriptor_t> configs(static_cast<size_t>(count > 0 ? count : 0), nullptr);
    for (auto& c : configs)
      if (s == CUDNN_STATUS_SUCCESS) {
        s = cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, &c);
        if (s == CUDNN_STATUS_SUCCESS) held_.push_back(c);
      }
    if (s == CUDNN_STATUS_SUCCESS && count > 0)
      s = cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, count, &count,
                                   configs.data());
    if (s != CUDNN_STATUS_SUCCESS) {
      tried += std::string(tried.empty() ? "" : "; ") + name + ": " + cudnnGetErrorString(s);
      continue;
    }
    for (int64_t i = 0; i < count; ++i)
      if (try_config(configs[static_cast<size_t>(i)], deterministic)) return true;
    tried += std::string(tried.empty() ? "" : "; ") + name + ": " + std::to_string(count) + " engine config(s), none" +
             (deterministic ? " deterministic and" : "") + " finalized";
  }
  error_ = "no execution plan (" + tried + ")";
  return false;
}

bool Graph::execute(const std::vector<std::pair<int64_t, void*>>& data, void* workspace) {
  if (!plan_) return false;
  std::vector<int64_t> uids;
  std::vector<void*> pointers;
  for (const auto& [uid, p] : data) uids.push_back(uid), pointers.push_back(p);
  for (const auto& [uid, p] : constant_data_) uids.push_back(uid), pointers.push_back(p);
  cudnnBackendDescriptor_t pack = nullptr;
  if (fail(cudnnBackendCreateDescriptor(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, &pack), "variant pack")) return false;
  const int64_t n = static_cast<int64_t>(uids.size());
  cudnnStatus_t s =
      cudnnBackendSetAttribute(pack, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, n, uids.data());
  if (s == CUDNN_STATUS_SUCCESS)
    s = cudnnBackendSetAttribute(pack, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, n, pointers.data());
  if (s == CUDNN_STATUS_SUCCESS)
    s = cudnnBackendSetAttribute(pack, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &workspace);
  if (s == CUDNN_STATUS_SUCCESS) s = cudnnBackendFinalize(pack);
  if (s == CUDNN_STATUS_SUCCESS) s = cudnnBackendExecute(handle_, plan_, pack);
  cudnnBackendDestroyDescriptor(pack);
  return !fail(s, "execute");
}

}  // namespace nns::backend::NNS_DEV::dnn_graph
