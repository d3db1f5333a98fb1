#include "backend/runtime/trainer.h"

#include <algorithm>
#include <set>
#include <chrono>
#include <cmath>
#include <cstring>

#include "backend/lowering/bf16_storage.h"
#include "backend/runtime/checkpoint_store.h"
#include "backend/runtime/cpu/half_bits.h"
#include "backend/runtime/gradient_magnitude.h"
#include "backend/runtime/lr_horizon.h"
#include "backend/runtime/optimizer.h"
#include "backend/runtime/safetensors.h"
#include "backend/runtime/splitmix.h"
#include "backend/runtime/trace.h"

namespace nns::backend {

namespace {

// Counter-based random numbers: a pure function of (key, index), so a
// tensor's values never depend on thread count, allocation order or which
// rank holds which slice.
uint64_t mix(uint64_t x) { return splitmix64(x); }
uint64_t name_key(const std::string& s) {
  uint64_t h = 1469598103934665603ULL;  // FNV-1a
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ULL;
  return h;
}
double uniform01(uint64_t key, uint64_t i) { return (static_cast<double>(mix(key ^ mix(i)) >> 11) + 0.5) * (1.0 / 9007199254740992.0); }
double normal01(uint64_t key, uint64_t i) {
  double u1 = uniform01(key, 2 * i), u2 = uniform01(key, 2 * i + 1);
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
}

}  // namespace

uint64_t init_key(uint64_t seed, const std::string& name) { return mix(seed) ^ name_key(name); }

uint64_t data_key(int64_t data_seed, const std::string& name, int64_t index) {
  return mix(static_cast<uint64_t>(data_seed)) ^ name_key(name) ^ mix(static_cast<uint64_t>(index) + 77);
}

void fill_init(const sema::InitSpec& init, uint64_t key, sema::DType dtype, void* data, const sema::Shape& shape) {
  const int64_t n = sema::numel(shape);
  auto arg = [&](size_t i, double fallback) { return i < init.args.size() ? init.args[i] : fallback; };
  if (dtype == sema::DType::I32) {
    int32_t* p = static_cast<int32_t*>(data);
    int64_t range = static_cast<int64_t>(arg(0, 1));
    for (int64_t i = 0; i < n; ++i)
      p[i] = init.kind == "zeros" ? 0 : static_cast<int32_t>(mix(key ^ mix(static_cast<uint64_t>(i))) % static_cast<uint64_t>(range));
    return;
  }
  if (dtype != sema::DType::F32) throw RuntimeError(std::string("the CPU backend trains f32 tensors only, not ") + sema::dtype_name(dtype));
  float* p = static_cast<float*>(data);
  const std::string& k = init.kind;
  for (int64_t i = 0; i < n; ++i) {
    double v = 0;
    if (k == "zeros") v = 0;
    else if (k == "ones") v = 1;
    else if (k == "normal" || k == "randn") v = arg(0, 1) * normal01(key, i);
    else if (k == "trunc_normal") {
      // Redraw outside two standard deviations (timm's trunc_normal_ default).
      uint64_t j = static_cast<uint64_t>(i);
      do { v = normal01(key, j); j += 0x100000000ULL; } while (std::fabs(v) > 2.0);
      v *= arg(0, 0.02);
    } else if (k == "uniform") v = arg(0, -1) + (arg(1, 1) - arg(0, -1)) * uniform01(key, i);
    else if (k == "rotary") {
      // The interpreter checked: rank >= 2, an even last dim.
      int64_t d = shape.back(), s = shape[shape.size() - 2], half = d / 2;
      int64_t pos = (i / d) % s, j = (i % d) % half;
      v = static_cast<double>(pos) * std::pow(arg(0, 10000.0), -2.0 * static_cast<double>(j) / static_cast<double>(d));
    }
    else throw RuntimeError("unknown initializer '" + k + "'");
    p[i] = static_cast<float>(v);
  }
}

namespace {

const char* st_dtype(sema::DType t) {
  switch (t) {
    case sema::DType::F32: return "F32";
    case sema::DType::I32: return "I32";
    case sema::DType::I64: return "I64";
    case sema::DType::F16: return "F16";
    case sema::DType::BF16: return "BF16";
    case sema::DType::Bool: return "BOOL";
  }
  return "F32";
}

}  // namespace

Trainer::Trainer(const sema::Graph& g, const sema::TrainingGraphInfo& info, const sema::TrainSpec& spec, Backend& backend,
                 TrainOptions opts)
    : g_(g), info_(info), spec_(spec), be_(backend), opts_(std::move(opts)), scaler_(spec.loss_scale, spec.precision == "fp16") {
  program_ = lower_single_device(g_, info_);
  if (spec_.precision == "bf16" && be_.bf16_storage()) bf16_ = bf16_graph_tensors(g_, opts_.keep_f32);
  // A constructor that throws (a bad --init/--resume file) runs no
  // destructor: give back what was allocated before rethrowing.
  try {
    buffers_.assign(g_.tensors().size(), nullptr);
    for (int p : g_.params()) {
      ensure(p);
      init_parameter(p);
    }
    for (const auto& [param, grad] : info_.param_grads) {
      size_t slots = optimizer_slots(spec_.optimizer);
      std::vector<TensorView> bufs;
      for (size_t s = 0; s < slots; ++s) {
        TensorView v = view(param);
        v.data = be_.allocate(static_cast<size_t>(v.numel()) * 4);
        bufs.push_back(v);
      }
      state_[param] = OptimizerState{bufs};
      if (spec_.micro_batches > 1) {
        TensorView v = view(param);
        v.data = be_.allocate(static_cast<size_t>(v.numel()) * 4);
        accum_[param] = v;
      }
    }
    std::vector<int> inputs = g_.inputs();
    for (int in : inputs) ensure(in);
    if (!inputs.empty()) {
      const sema::TensorInfo& first = g_.tensor(inputs[0]);
      counts_tokens_ = first.dtype == sema::DType::I32 && first.shape.size() >= 2;
      samples_per_step_ = (counts_tokens_ ? sema::numel(first.shape) : first.shape[0]) * spec_.micro_batches;
    }
    if (std::string path = data_file(opts_.data_path, spec_); !path.empty()) data_ = read_input_data(path, g_, inputs);
    else
      source_ = data::make_input_source(spec_.data, g_, spec_.micro_batches);
    if (opts_.init_weights)
      load_weights(*opts_.init_weights, opts_.init_path, false);
    else if (!opts_.init_path.empty())
      load_weights(read_checkpoint(opts_.init_path), opts_.init_path, false);
    if (!opts_.resume_path.empty()) load_weights(read_checkpoint(opts_.resume_path), opts_.resume_path, true);
  } catch (...) {
    release_all();
    throw;
  }
}

Trainer::~Trainer() { release_all(); }

void Trainer::track_gradient_magnitudes() {
  if (!magnitudes_) magnitudes_ = std::make_unique<GradientMagnitudes>(g_, info_);
}

std::map<std::string, double> Trainer::gradient_conditions() const {
  return magnitudes_ ? magnitudes_->conditions() : std::map<std::string, double>{};
}

std::map<std::string, double> Trainer::gradient_norms() const {
  return magnitudes_ ? magnitudes_->norms() : std::map<std::string, double>{};
}

void Trainer::release_all() {
  for (size_t t = 0; t < buffers_.size(); ++t)
    if (buffers_[t]) release(static_cast<int>(t));
  for (auto& [p, st] : state_)
    for (TensorView& v : st.buffers) be_.release(v.data, static_cast<size_t>(v.numel()) * 4);
  for (auto& [p, v] : accum_) be_.release(v.data, static_cast<size_t>(v.numel()) * 4);
  state_.clear();
  accum_.clear();
}

TensorView Trainer::view(int tensor) const {
  const sema::TensorInfo& t = g_.tensor(tensor);
  return TensorView{buffers_[tensor], stored_bf16(tensor) ? sema::DType::BF16 : t.dtype, t.shape};
}

size_t Trainer::stored_bytes(int tensor) const {
  const sema::TensorInfo& t = g_.tensor(tensor);
  return static_cast<size_t>(stored_bf16(tensor) ? sema::numel(t.shape) * 2 : t.bytes());
}

void* Trainer::ensure(int tensor) {
  if (!buffers_[tensor]) buffers_[tensor] = be_.allocate(stored_bytes(tensor));
  return buffers_[tensor];
}

void Trainer::release(int tensor) {
  be_.release(buffers_[tensor], stored_bytes(tensor));
  buffers_[tensor] = nullptr;
}

void Trainer::init_parameter(int p) {
  const sema::TensorInfo& t = g_.tensor(p);
  std::vector<uint8_t> host(static_cast<size_t>(t.bytes()));
  fill_init(t.init, init_key(opts_.seed, t.name), t.dtype, host.data(), t.shape);
  be_.copy_from_host(buffers_[p], host.data(), host.size());
}

// Micro-batch k of the data stream: synthetic data is a fixed set of
// micro-batches (a memorisation task: the loss must fall); file data walks
// through the file's rows.
void Trainer::load_inputs(int64_t k) {
  std::vector<int> inputs = g_.inputs();
  for (size_t i = 0; i < inputs.size(); ++i) {
    const sema::TensorInfo& t = g_.tensor(inputs[i]);
    size_t bytes = static_cast<size_t>(t.bytes());
    if (source_) {
      std::vector<uint8_t> host(bytes);
      source_->fill(inputs[i], k, host.data());
      be_.copy_from_host(buffers_[inputs[i]], host.data(), bytes);
      continue;
    }
    if (!data_.empty()) {
      size_t rows_in_file = data_[i].size() / bytes;
      size_t offset = static_cast<size_t>(k) % rows_in_file * bytes;
      be_.copy_from_host(buffers_[inputs[i]], data_[i].data() + offset, bytes);
      continue;
    }
    std::vector<uint8_t> host(bytes);
    uint64_t key = data_key(spec_.data.seed, t.name, k % spec_.micro_batches);
    fill_init(t.init, key, t.dtype, host.data(), t.shape);
    be_.copy_from_host(buffers_[inputs[i]], host.data(), bytes);
  }
}

// Runs the program for one micro-batch (forward only, or forward and
// backward), leaving parameter gradients in place; returns the loss.
double Trainer::run_micro_batch(int64_t k, bool backward) {
  int64_t t0 = tracer_ ? TraceRecorder::now_ns() : 0;
  load_inputs(k);
  if (tracer_) tracer_->record_key(trace_base_, t0, TraceRecorder::now_ns(), trace_mb_, step_);
  for (size_t i = 0; i < program_.instrs.size(); ++i) {
    const Instr& in = program_.instrs[i];
    if (in.kind == Instr::Update) continue;
    if (in.kind == Instr::Free) {
      // Parameter gradients stay until the update (or accumulation).
      if (g_.tensor(in.tensor).grad_of >= 0 && g_.tensor(g_.tensor(in.tensor).grad_of).kind == sema::TensorKind::Param) continue;
      if (buffers_[in.tensor] && !kept_.count(in.tensor)) release(in.tensor);
      if (magnitudes_) magnitudes_->forget(in.tensor);
      continue;
    }
    const sema::OpNode& n = g_.node(in.node);
    if (!backward && n.phase != sema::Phase::Forward) continue;
    std::vector<TensorView> ins, outs;
    for (int t : n.inputs) {
      if (!buffers_[t]) throw RuntimeError("internal: node " + n.name + " reads tensor %" + std::to_string(t) + " before it is computed");
      ins.push_back(view(t));
    }
    for (int t : n.outputs) {
      ensure(t);
      outs.push_back(view(t));
    }
    if (tracer_) {
      int64_t b = TraceRecorder::now_ns();
      be_.run_node(g_, n, ins, outs);
      tracer_->record_key(in.node, b, TraceRecorder::now_ns(), trace_mb_, step_);
    } else {
      be_.run_node(g_, n, ins, outs);
    }
    if (magnitudes_ && n.phase == sema::Phase::Backward) magnitudes_->after_node(be_, n, ins);
    // The backward starts from the loss gradient: its "fill" node's seed,
    // times the fp16 loss scale (loss_scale.h).
    if (n.kind == "fill" && g_.tensor(n.outputs[0]).grad_of == g_.loss)
      scaler_.seed_loss_gradient(be_, outs[0].data, outs[0].numel());
  }
  float loss = 0;
  be_.copy_to_host(&loss, buffers_[g_.loss], sizeof(float));
  return loss;
}

double Trainer::forward_loss() { return run_micro_batch(0, false); }

std::vector<float> Trainer::tensor_values(int tensor) const {
  const sema::TensorInfo& t = g_.tensor(tensor);
  if (!buffers_[tensor] || t.dtype != sema::DType::F32)
    throw RuntimeError("internal: tensor " + t.name + " is not a kept f32 tensor");
  std::vector<float> out(static_cast<size_t>(sema::numel(t.shape)));
  if (stored_bf16(tensor)) {  // a bf16 activation: its values widened (exact)
    std::vector<uint16_t> half(out.size());
    be_.copy_to_host(half.data(), buffers_[tensor], half.size() * 2);
    for (size_t i = 0; i < half.size(); ++i) out[i] = cpu::bf16_to_float(half[i]);
    return out;
  }
  be_.copy_to_host(out.data(), buffers_[tensor], out.size() * 4);
  return out;
}

void Trainer::compute_gradients() {
  run_micro_batch(0, true);
  // fp16: the backward ran from the scaled loss gradient; report the true one.
  if (scaler_.enabled())
    for (const auto& [p, grad] : info_.param_grads) be_.scale(view(grad), 1.0f / scaler_.scale());
}

void Trainer::set_parameter(const std::string& name, const std::vector<float>& values) {
  for (int p : g_.params()) {
    if (g_.tensor(p).name != name) continue;
    if (static_cast<int64_t>(values.size()) != sema::numel(g_.tensor(p).shape)) throw RuntimeError("set_parameter: wrong size for " + name);
    be_.copy_from_host(buffers_[p], values.data(), values.size() * 4);
    return;
  }
  throw RuntimeError("set_parameter: no parameter '" + name + "'");
}

void Trainer::set_tracer(TraceRecorder* tracer, int64_t steps) {
  tracer_ = tracer;
  if (!tracer) return;
  const std::vector<sema::OpNode>& nodes = g_.nodes();
  size_t runs = 0;
  for (const Instr& in : program_.instrs) {
    if (in.kind != Instr::Run) continue;
    const sema::OpNode& n = g_.node(in.node);
    const sema::OpNode& named = n.forward_of >= 0 ? g_.node(n.forward_of) : n;
    tracer->set_key(in.node, tracer->add_label(TraceTrack::Compute, named.name + (n.phase == sema::Phase::Forward ? " F" : " B"),
                                               "\"node\":" + std::to_string(in.node) + ",\"op\":\"" + json_escape(n.kind) + "\""));
    ++runs;
  }
  trace_base_ = static_cast<int>(nodes.size());
  tracer->set_key(trace_base_, tracer->add_label(TraceTrack::Local, "LoadInput"));
  for (size_t i = 0; i < info_.param_grads.size(); ++i)
    tracer->set_key(trace_base_ + 1 + static_cast<int>(i), tracer->add_label(TraceTrack::Local, "Update " + g_.tensor(info_.param_grads[i].first).name));
  size_t per_step = static_cast<size_t>(spec_.micro_batches) * (runs + 1) + info_.param_grads.size() + 1;
  tracer->reserve(static_cast<size_t>(std::max<int64_t>(steps, 1)) * per_step);
}

StepStats Trainer::step() {
  auto t0 = std::chrono::steady_clock::now();
  int64_t trace_s0 = tracer_ ? TraceRecorder::now_ns() : 0;
  const Backend::HostTraffic traffic0 = be_.host_traffic();
  StepStats st;
  st.step = ++step_;
  be_.set_step(step_);
  int64_t m = spec_.micro_batches;
  double loss_sum = 0;
  for (auto& [p, v] : accum_) be_.scale(v, 0.f);  // a new step accumulates from zero
  if (magnitudes_) magnitudes_->start_step();
  for (int64_t mb = 0; mb < m; ++mb) {
    trace_mb_ = static_cast<int>(mb);
    loss_sum += run_micro_batch((step_ - 1) * m + mb, true);
    if (magnitudes_) {
      std::vector<TensorView> own;
      for (const auto& [p, grad] : info_.param_grads) own.push_back(view(grad));
      magnitudes_->end_micro_batch(be_, own, 1.0 / static_cast<double>(m));
    }
    if (m > 1)
      for (const auto& [p, grad] : info_.param_grads) {
        be_.axpy(accum_.at(p), view(grad), 1.0f / static_cast<float>(m));
        if (mb + 1 < m) release(grad);
      }
  }
  st.loss = loss_sum / static_cast<double>(m);
  // The gradient each parameter is updated with: accumulated over micro-batches or the step's own.
  std::vector<TensorView> grads(info_.param_grads.size());
  for (size_t i = 0; i < grads.size(); ++i) grads[i] = m > 1 ? accum_.at(info_.param_grads[i].first) : view(info_.param_grads[i].second);
  // The gradients are scaled by the loss scale (1 without fp16): the norm
  // is of the unscaled ones, and one pass divides by the scale and clips.
  const double sum_sq = be_.sum_of_squares(grads);
  const float scale = scaler_.scale();
  st.grad_norm = std::sqrt(sum_sq) / scale;
  st.skipped = !scaler_.finish_step(sum_sq);
  if (scaler_.enabled()) {
    st.loss_scale = scale;
    st.skipped_total = scaler_.skipped();
  }
  st.lr = learning_rate(spec_.schedule, spec_.optimizer.lr, spec_.schedule.steps, step_);
  if (!st.skipped) {
    if (float factor = clip_factor(spec_.clip, st.grad_norm) / scale; factor != 1.0f)
      for (TensorView& gv : grads) be_.scale(gv, factor);
    if (gradient_hook_) replace_gradients(grads);
    for (size_t i = 0; i < info_.param_grads.size(); ++i) {
      int p = info_.param_grads[i].first;
      int64_t b = tracer_ ? TraceRecorder::now_ns() : 0;
      apply_update(be_, spec_.optimizer, view(p), grads[i], state_.at(p), static_cast<float>(st.lr), step_ - scaler_.skipped());
      if (tracer_) tracer_->record_key(trace_base_ + 1 + static_cast<int>(i), b, TraceRecorder::now_ns(), -1, step_);
    }
  }
  if (tracer_) tracer_->record_step(step_, trace_s0, TraceRecorder::now_ns());
  st.to_device = be_.host_traffic().to_device - traffic0.to_device;
  st.to_host = be_.host_traffic().to_host - traffic0.to_host;
  st.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return st;
}

void Trainer::replace_gradients(const std::vector<TensorView>& grads) {
  // Called after clipping, which also divided out the fp16 loss scale: the
  // gradients here are the ones the update reads, as the run reports its own.
  const TensorMap use = gradient_hook_(last_gradients());
  for (size_t i = 0; i < grads.size(); ++i) {
    auto it = use.find(g_.tensor(info_.param_grads[i].first).name);
    if (it == use.end() || static_cast<int64_t>(it->second.size()) != grads[i].numel()) continue;
    be_.copy_from_host(grads[i].data, it->second.data(), it->second.size() * 4);
  }
}

std::map<std::string, std::vector<float>> Trainer::parameters() const {
  std::map<std::string, std::vector<float>> out;
  for (int p : g_.params()) {
    std::vector<float> host(static_cast<size_t>(sema::numel(g_.tensor(p).shape)));
    be_.copy_to_host(host.data(), buffers_[p], host.size() * 4);
    out[g_.tensor(p).name] = std::move(host);
  }
  return out;
}

std::map<std::string, std::vector<float>> Trainer::last_gradients() const {
  std::map<std::string, std::vector<float>> out;
  for (const auto& [p, grad] : info_.param_grads) {
    const TensorView src = spec_.micro_batches > 1 ? accum_.at(p) : view(grad);
    std::vector<float> host(static_cast<size_t>(src.numel()));
    be_.copy_to_host(host.data(), src.data, host.size() * 4);
    out[g_.tensor(p).name] = std::move(host);
  }
  return out;
}

static StTensor to_st(const std::string& name, const sema::Shape& shape, const std::vector<float>& v) {
  StTensor t;
  t.name = name;
  t.dtype = "F32";
  t.shape = shape;
  t.data.resize(v.size() * 4);
  std::memcpy(t.data.data(), v.data(), t.data.size());
  return t;
}

void Trainer::save_checkpoint(const std::string& path) const {
  std::vector<StTensor> tensors;
  std::map<std::string, sema::Shape> shapes;
  for (int p : g_.params()) shapes[g_.tensor(p).name] = g_.tensor(p).shape;
  for (auto& [name, values] : parameters()) tensors.push_back(to_st(name, shapes[name], values));
  for (const auto& [p, st] : state_) {
    const std::vector<TensorView>& bufs = st.buffers;
    for (size_t s = 0; s < bufs.size(); ++s) {
      std::vector<float> host(static_cast<size_t>(bufs[s].numel()));
      be_.copy_to_host(host.data(), bufs[s].data, host.size() * 4);
      std::string slot = optimizer_slot_name(spec_.optimizer.kind, s);
      tensors.push_back(to_st("optimizer." + slot + "." + g_.tensor(p).name, g_.tensor(p).shape, host));
    }
  }
  std::map<std::string, std::string> meta = {{"format", "nns-checkpoint-1"}, {"step", std::to_string(step_)}, {"optimizer", spec_.optimizer.kind}};
  add_loss_scale_metadata(scaler_, meta);  // fp16: the scale and skipped steps go on
  add_horizon_metadata(spec_.schedule, meta);
  if (source_) source_->add_metadata(step_, meta);  // where the data stream stands
  write_safetensors_atomic(path, tensors, meta);
}

void Trainer::save_gradients(const std::string& path) const { write_gradients(path, g_, last_gradients(), step_); }

void write_gradients(const std::string& path, const sema::Graph& g, const std::map<std::string, std::vector<float>>& grads, int64_t step) {
  std::vector<StTensor> tensors;
  std::map<std::string, sema::Shape> shapes;
  for (int p : g.params()) shapes[g.tensor(p).name] = g.tensor(p).shape;
  for (auto& [name, values] : grads) tensors.push_back(to_st(name, shapes[name], values));
  write_safetensors_atomic(path, tensors, {{"format", "nns-gradients-1"}, {"step", std::to_string(step)}});
}

std::string data_file(const std::string& data_flag, const sema::TrainSpec& spec) {
  if (!data_flag.empty()) return data_flag;
  return spec.data.kind == "safetensors" ? spec.data.path : "";
}

std::vector<std::vector<uint8_t>> read_input_data(const std::string& path, const sema::Graph& g, const std::vector<int>& inputs) {
  SafetensorsFile f = read_safetensors(path);
  std::vector<std::vector<uint8_t>> data;
  for (int in : inputs) {
    const sema::TensorInfo& t = g.tensor(in);
    const StTensor* st = f.find(t.name);
    if (!st) throw SafetensorsError(path + ": no tensor '" + t.name + "' for input '" + t.name + "'");
    if (st->dtype != st_dtype(t.dtype))
      throw SafetensorsError(path + ": tensor '" + t.name + "' is " + st->dtype + " but the input is " + st_dtype(t.dtype));
    bool ok = st->shape.size() == t.shape.size() && !st->shape.empty() && st->shape[0] >= t.shape[0] && st->shape[0] % t.shape[0] == 0;
    for (size_t d = 1; ok && d < t.shape.size(); ++d) ok = st->shape[d] == t.shape[d];
    if (!ok)
    {
      std::string want = "[k*" + std::to_string(t.shape[0]);
      for (size_t d = 1; d < t.shape.size(); ++d) want += ", " + std::to_string(t.shape[d]);
      throw SafetensorsError(path + ": tensor '" + t.name + "' has shape " + sema::shape_to_string(st->shape) + "; expected " + want +
                             "] (k >= 1 micro-batches of the input " + sema::shape_to_string(t.shape) + ")");
    }
    // Token ids and class labels are checked here, at load, against the
    // range their declaration gives (tokens(vocab), labels(classes)), not
    // found mid-step by the embedding that cannot index them.
    if (t.dtype == sema::DType::I32 && (t.init.kind == "tokens" || t.init.kind == "labels") && !t.init.args.empty()) {
      const int64_t bound = static_cast<int64_t>(t.init.args[0]);
      const size_t n = st->data.size() / sizeof(int32_t);
      for (size_t i = 0; i < n; ++i) {
        int32_t v;
        std::memcpy(&v, st->data.data() + i * sizeof(int32_t), sizeof v);
        if (v < 0 || v >= bound)
          throw SafetensorsError(path + ": tensor '" + t.name + "': element " + std::to_string(i) + " is " +
                                 std::to_string(v) + ", outside [0, " + std::to_string(bound) + ") (the input is " +
                                 t.init.kind + "(" + std::to_string(bound) + "))");
      }
    }
    data.push_back(st->data);
  }
  // A data file holds the inputs and nothing else: another tensor means a
  // file for another model (or a misspelt input).
  for (const StTensor& st : f.tensors) {
    bool input = false;
    for (int in : inputs) input = input || g.tensor(in).name == st.name;
    if (!input) throw SafetensorsError(path + ": tensor '" + st.name + "' is not an input of this model (a data file holds exactly its inputs)");
  }
  return data;
}

// Weights (and, for a checkpoint, optimizer state and step) from a file;
// every mismatch names the tensor.
// `f`: a file, or the last complete save of a shard folder (read_checkpoint).
void Trainer::load_weights(const SafetensorsFile& f, const std::string& path, bool checkpoint) {
  auto load = [&](const std::string& name, const sema::Shape& shape, void* dst) {
    std::vector<float> values = read_f32(f, name, shape, path);
    be_.copy_from_host(dst, values.data(), values.size() * 4);
  };
  if (auto fmt = f.metadata.find("format"); !checkpoint && fmt != f.metadata.end() && fmt->second == "nns-gradients-1")
    throw SafetensorsError(path + ": a gradients file (written by --dump-grads), not weights");
  for (int p : g_.params()) {
    // A weights file (--init, e.g. converted from another framework) may
    // leave out a buffer: it keeps its initializer. A checkpoint has them all.
    // --init-partial lets it leave out parameters too (the driver lists them).
    if (!checkpoint && (g_.tensor(p).buffer || opts_.init_partial) && !f.find(g_.tensor(p).name)) continue;
    load(g_.tensor(p).name, g_.tensor(p).shape, buffers_[p]);
  }
  // Every tensor of the file must be one this run reads: an extra or
  // misnamed one means the file is not for this model (or this optimizer).
  std::set<std::string> expected;
  for (int p : g_.params()) expected.insert(g_.tensor(p).name);
  // A checkpoint's optimizer state: of every parameter (an --eval run, whose
  // graph trains nothing, reads none of it).
  if (checkpoint)
    for (int p : g_.params())
      if (!g_.tensor(p).buffer)
        for (size_t s = 0; s < optimizer_slots(spec_.optimizer); ++s)
          expected.insert(std::string("optimizer.") + optimizer_slot_name(spec_.optimizer.kind, s) + "." + g_.tensor(p).name);
  for (const StTensor& t : f.tensors)
    if (!expected.count(t.name))
      throw SafetensorsError(path + ": tensor '" + t.name + "' is not " + (checkpoint ? "a parameter or optimizer state" : "a parameter") + " of this model");
  if (!checkpoint) return;
  auto fmt = f.metadata.find("format");
  if (fmt == f.metadata.end() || fmt->second != "nns-checkpoint-1") throw SafetensorsError(path + ": not an nns checkpoint (no format metadata 'nns-checkpoint-1')");
  auto opt = f.metadata.find("optimizer");
  if (opt == f.metadata.end() || opt->second != spec_.optimizer.kind)
    throw SafetensorsError(path + ": checkpoint optimizer '" + (opt == f.metadata.end() ? "?" : opt->second) + "' differs from the train block's '" +
                           spec_.optimizer.kind + "'");
  for (auto& [p, st] : state_)
    for (size_t s = 0; s < st.buffers.size(); ++s) {
      std::string slot = optimizer_slot_name(spec_.optimizer.kind, s);
      load("optimizer." + slot + "." + g_.tensor(p).name, g_.tensor(p).shape, st.buffers[s].data);
    }
  step_ = metadata_count(f, "step", path);
  if (source_) source_->resume(f.metadata, path, step_);
  read_loss_scale_metadata(f.metadata, path, scaler_);
}

}  // namespace nns::backend
