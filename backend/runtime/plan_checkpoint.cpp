// Checkpoints of a partitioned run: per-rank shards, their merge into one
// single-device checkpoint, and loading any single-device file into a plan.
#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>
#include <set>
#include <cerrno>
#include <cstring>

#include "backend/runtime/atomic_file.h"
#include "backend/runtime/checkpoint_store.h"
#include "backend/runtime/comm/communicator.h"
#include "backend/runtime/fault.h"
#include "backend/runtime/lr_horizon.h"
#include "backend/runtime/optimizer.h"
#include "backend/runtime/plan_executor.h"
#include "backend/runtime/plan_runtime.h"
#include "backend/runtime/safetensors.h"

namespace nns::backend {

using sema::Shape;

namespace {

std::string ints_text(const std::vector<int64_t>& v) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + std::to_string(v[i]);
  return s;
}

// "4,16,32" -> {4, 16, 32}; `what` names the field in the error. Only
// non-negative decimal numbers within 64 bits (stoll threw on "x" and let
// "4abc" and " 4" through).
std::vector<int64_t> parse_ints(const std::string& s, const std::string& what) {
  std::vector<int64_t> out;
  size_t i = 0;
  while (i < s.size()) {
    size_t j = s.find(',', i);
    if (j == std::string::npos) j = s.size();
    int64_t n = 0;
    if (!parse_count(s.substr(i, j - i), n)) throw SafetensorsError(what + ": '" + s + "' is not a list of non-negative integers");
    out.push_back(n);
    i = j + 1;
  }
  return out;
}

}  // namespace

void PlanTrainer::save_shards(const std::string& dir) {
  PlanExecutor& m = *x_;
  std::vector<StTensor> tensors;
  std::map<std::string, std::string> meta{{"format", "nns-shard-1"},
                                          {"step", std::to_string(step_)},
                                          {"optimizer", m.spec.optimizer.kind},
                                          {"rank", std::to_string(m.P.rank)},
                                          {"world", std::to_string(m.world)},
                                          {"plan", m.lowered.plan}};
  add_loss_scale_metadata(m.scaler, meta);  // fp16: the same on every rank
  add_horizon_metadata(m.spec.schedule, meta);
  if (m.source) m.source->add_metadata(step_, meta);  // the data stream's position, the same on every rank
  // One owner per element: replica 0, first copy of a replicated piece;
  // for optimizer state the distributed optimizer shards over the
  // replicas, every replica (each holds its own shard's).
  for (size_t i = 0; i < m.P.params.size(); ++i) {
    if (m.P.replica != 0 && !m.replica_sharded(i)) continue;
    const ParamSlot& slot = m.P.params[i];
    const Piece& pc = m.piece(slot.param);
    const sema::TensorInfo& t = m.g.tensor(slot.tensor);
    if (pc.replica_index == 0 && m.P.replica == 0) {
      const std::vector<float> data = m.download(m.bufs[static_cast<size_t>(slot.param)]);
      tensors.push_back(f32_tensor(t.name, pc.length, data.data(), data.size()));
      meta["piece:" + t.name] = "full=" + ints_text(t.shape) + ";start=" + ints_text(pc.start);
    }
    // The optimizer state covers the part this rank updates: under zero1
    // its shard (each member of the group writes its own), else the piece.
    const Piece& st = m.piece(slot.state());
    if (st.replica_index != 0) continue;
    for (size_t s = 0; s < m.opt[i].size(); ++s) {
      std::string name = std::string("optimizer.") + optimizer_slot_name(m.spec.optimizer.kind, s) + "." + t.name;
      const std::vector<float> state = m.download(m.opt[i][s]);
      tensors.push_back(f32_tensor(name, st.length, state.data(), state.size()));
      meta["piece:" + name] = "full=" + ints_text(t.shape) + ";start=" + ints_text(st.start);
    }
  }
  // Every rank names the new folder before rank 0 changes anything (the
  // name depends on DIR/latest), then writes its shard into it; rank 0
  // publishes once all are in place (checkpoint_store.h).
  const std::string folder = next_shard_folder(dir, step_);
  if (m.comm) m.comm->barrier();
  if (m.P.rank == 0) prepare_shard_folder(dir, folder);
  if (m.comm) m.comm->barrier();
  write_safetensors_atomic(dir + "/" + folder + "/rank-" + std::to_string(m.P.rank) + ".safetensors", tensors, meta);
  set_fault_context(m.P.rank, step_);
  fault_point("shard-written");
  if (m.comm) m.comm->barrier();
  if (m.P.rank == 0) {
    ShardManifest manifest;
    manifest.step = step_;
    manifest.world = m.world;
    manifest.optimizer = m.spec.optimizer.kind;
    manifest.plan = m.lowered.plan;
    publish_shards(dir, folder, manifest);
  }
  if (m.comm) m.comm->barrier();
}

void PlanTrainer::save_whole(const std::string& path) {
  PlanExecutor& m = *x_;
  if (m.P.rank == 0) {
    std::vector<StTensor> tensors;
    std::map<std::string, std::string> meta{{"format", "nns-checkpoint-1"}, {"step", std::to_string(step_)}, {"optimizer", m.spec.optimizer.kind}};
    add_loss_scale_metadata(m.scaler, meta);
    add_horizon_metadata(m.spec.schedule, meta);
    // Only a rank that holds every tensor whole can write the one file.
    auto whole = [&](const Piece& pc, const sema::TensorInfo& t) {
      if (pc.length != t.shape || std::any_of(pc.start.begin(), pc.start.end(), [](int64_t s) { return s != 0; }))
        throw RuntimeError("internal: one checkpoint file from a plan that splits " + t.name + " (save shards instead)");
    };
    for (size_t i = 0; i < m.P.params.size(); ++i) {
      const ParamSlot& slot = m.P.params[i];
      const sema::TensorInfo& t = m.g.tensor(slot.tensor);
      whole(m.piece(slot.param), t);
      const std::vector<float> data = m.download(m.bufs[static_cast<size_t>(slot.param)]);
      tensors.push_back(f32_tensor(t.name, t.shape, data.data(), data.size()));
      whole(m.piece(slot.state()), t);
      for (size_t s = 0; s < m.opt[i].size(); ++s) {
        const std::vector<float> state = m.download(m.opt[i][s]);
        tensors.push_back(f32_tensor(std::string("optimizer.") + optimizer_slot_name(m.spec.optimizer.kind, s) + "." + t.name, t.shape,
                                     state.data(), state.size()));
      }
    }
    write_safetensors_atomic(path, tensors, meta);
  }
  // The save is complete on return, on every rank.
  if (m.comm) m.comm->barrier();
}

void PlanTrainer::load(const std::string& path, bool checkpoint) { load_file(read_checkpoint(path), path, checkpoint); }

void PlanTrainer::set_parameters(const std::map<std::string, std::vector<float>>& weights) {
  SafetensorsFile f;
  for (const auto& [name, values] : weights) {
    auto shape = std::vector<int64_t>{static_cast<int64_t>(values.size())};
    for (int p : x_->g.params())
      if (x_->g.tensor(p).name == name) shape = x_->g.tensor(p).shape;
    f.tensors.push_back(f32_tensor(name, shape, values.data(), values.size()));
  }
  load_file(f, "the training run's weights", false);
}

void PlanTrainer::load_file(const SafetensorsFile& f, const std::string& path, bool checkpoint, bool partial) {
  PlanExecutor& m = *x_;
  if (auto fmt = f.metadata.find("format"); !checkpoint && fmt != f.metadata.end() && fmt->second == "nns-gradients-1")
    throw SafetensorsError(path + ": a gradients file (written by --dump-grads), not weights");
  if (checkpoint) {
    auto fmt = f.metadata.find("format");
    if (fmt == f.metadata.end() || fmt->second != "nns-checkpoint-1")
      throw SafetensorsError(path + ": not an nns checkpoint (no format metadata 'nns-checkpoint-1')");
    auto opt = f.metadata.find("optimizer");
    if (opt == f.metadata.end() || opt->second != m.spec.optimizer.kind)
      throw SafetensorsError(path + ": checkpoint optimizer '" + (opt == f.metadata.end() ? "?" : opt->second) + "' differs from the train block's '" +
                         m.spec.optimizer.kind + "'");
  }
  auto slice_into = [&](const std::string& name, const Shape& shape, const Piece& pc, DeviceBuffer& dst) {
    std::vector<float> full = read_f32(f, name, shape, path);
    m.upload(dst, m.extract(full, full_piece(shape), pc, 1.f));
  };
  for (size_t i = 0; i < m.P.params.size(); ++i) {
    const ParamSlot& slot = m.P.params[i];
    const sema::TensorInfo& t = m.g.tensor(slot.tensor);
    if (!checkpoint && (t.buffer || partial) && !f.find(t.name))
      continue;  // as on one device: an --init file may leave out a buffer
    slice_into(t.name, t.shape, m.piece(slot.param), m.bufs[static_cast<size_t>(slot.param)]);
    if (slot.shard >= 0) slice_into(t.name, t.shape, m.piece(slot.shard), m.bufs[static_cast<size_t>(slot.shard)]);
    if (!checkpoint) continue;
    for (size_t s = 0; s < m.opt[i].size(); ++s)
      slice_into(std::string("optimizer.") + optimizer_slot_name(m.spec.optimizer.kind, s) + "." + t.name, t.shape, m.piece(slot.state()), m.opt[i][s]);
  }
  // Every tensor of the file must be one this run reads (as on one device).
  std::set<std::string> expected;
  for (int p : m.g.params()) {
    expected.insert(m.g.tensor(p).name);
    if (checkpoint)
      for (size_t s = 0; s < optimizer_slots(m.spec.optimizer); ++s)
        expected.insert(std::string("optimizer.") + optimizer_slot_name(m.spec.optimizer.kind, s) + "." + m.g.tensor(p).name);
  }
  for (const StTensor& t : f.tensors)
    if (!expected.count(t.name))
      throw SafetensorsError(path + ": tensor '" + t.name + "' is not " + (checkpoint ? "a parameter or optimizer state" : "a parameter") + " of this model");
  if (!checkpoint) return;
  step_ = metadata_count(f, "step", path);
  read_loss_scale_metadata(f.metadata, path, m.scaler);
  if (m.source) m.source->resume(f.metadata, path, step_);
}

SafetensorsFile assemble_shards(const std::string& dir) {
  const ShardManifest manifest = read_latest_shards(dir);
  std::vector<std::string> files;
  for (const ShardFile& f : manifest.files) files.push_back(manifest.folder + "/" + f.name);
  struct Full {
    std::vector<int64_t> shape;
    std::vector<float> data;
    std::vector<char> seen;
  };
  std::map<std::string, Full> full;
  std::map<std::string, std::string> meta0;
  int64_t world = -1;
  for (const std::string& path : files) {
    SafetensorsFile f = read_safetensors(path);
    auto fmt = f.metadata.find("format");
    if (fmt == f.metadata.end() || fmt->second != "nns-shard-1") throw SafetensorsError(path + ": not an nns checkpoint shard");
    int64_t w = metadata_count(f, "world", path);
    metadata_count(f, "step", path);
    if (world < 0) {
      world = w;
      meta0 = f.metadata;
    }
    if (w != world || f.metadata.at("step") != meta0.at("step"))
      throw SafetensorsError(path + ": shard from another save (world or step differs from " + files[0] + ")");
    for (const StTensor& t : f.tensors) {
      auto where = f.metadata.find("piece:" + t.name);
      if (where == f.metadata.end()) throw SafetensorsError(path + ": tensor '" + t.name + "' has no piece metadata");
      size_t semi = where->second.find(";start=");
      if (where->second.rfind("full=", 0) != 0 || semi == std::string::npos) throw SafetensorsError(path + ": bad piece metadata for '" + t.name + "'");
      const std::string what = path + ": piece metadata of '" + t.name + "'";
      std::vector<int64_t> shape = parse_ints(where->second.substr(5, semi - 5), what), start = parse_ints(where->second.substr(semi + 7), what);
      if (start.size() != shape.size() || t.shape.size() != shape.size()) throw SafetensorsError(path + ": bad piece of '" + t.name + "'");
      if (t.dtype != "F32") throw SafetensorsError(path + ": tensor '" + t.name + "' is " + t.dtype + ", shards hold F32");
      int64_t elements = 1;
      for (int64_t d : shape)
        if (__builtin_mul_overflow(elements, d, &elements) || elements > (int64_t{1} << 34))
          throw SafetensorsError(what + ": the full shape is too large to assemble");
      Full& fl = full[t.name];
      if (fl.shape.empty() && fl.data.empty()) {
        fl.shape = shape;
        fl.data.assign(static_cast<size_t>(sema::numel(shape)), 0.f);
        fl.seen.assign(fl.data.size(), 0);
      }
      if (fl.shape != shape) throw SafetensorsError(path + ": tensor '" + t.name + "' has another full shape in another shard");
      Piece src;
      src.start = start;
      src.length = t.shape;
      if (!contains(full_piece(shape), start, t.shape)) throw SafetensorsError(path + ": piece of '" + t.name + "' lies outside the tensor");
      std::vector<float> vals(t.data.size() / 4);
      std::memcpy(vals.data(), t.data.data(), t.data.size());
      // Mark coverage, then copy.
      std::vector<float> ones(vals.size(), 1.f), cover(fl.data.size(), 0.f);
      copy_region(ones.data(), src, cover.data(), full_piece(shape), start, t.shape, false, 1.f);
      for (size_t i = 0; i < cover.size(); ++i)
        if (cover[i] != 0.f) {
          if (fl.seen[i]) throw SafetensorsError(path + ": tensor '" + t.name + "' overlaps a piece of another shard");
          fl.seen[i] = 1;
        }
      copy_region(vals.data(), src, fl.data.data(), full_piece(shape), start, t.shape, false, 1.f);
    }
  }
  if (world != manifest.world || meta0.at("step") != std::to_string(manifest.step))
    throw SafetensorsError(manifest.folder + ": the shards' world or step differs from the manifest's");
  SafetensorsFile out;
  for (auto& [name, fl] : full) {
    for (char c : fl.seen)
      if (!c) throw SafetensorsError(manifest.folder + ": tensor '" + name + "' is not covered by the shards");
    out.tensors.push_back(f32_tensor(name, fl.shape, fl.data.data(), fl.data.size()));
  }
  out.metadata = {{"format", "nns-checkpoint-1"}, {"step", meta0.at("step")}, {"optimizer", meta0.at("optimizer")}};
  for (const char* key :
       {"loss_scale", "loss_scale_good_steps", "skipped_steps",   // fp16 loss scaling's state, when saved
        "data_seed", "data_windows", "data_epoch", "data_index",  // a data source's position, when saved
        "lr_horizon"})                                            // the schedule's horizon (lr_horizon.h)
    if (auto it = meta0.find(key); it != meta0.end()) out.metadata[key] = it->second;
  return out;
}

SafetensorsFile read_checkpoint(const std::string& path) { return is_directory(path) ? assemble_shards(path) : read_safetensors(path); }

std::map<std::string, std::string> checkpoint_metadata(const std::string& path) {
  if (!is_directory(path)) return read_safetensors(path).metadata;
  const ShardManifest manifest = read_latest_shards(path);  // every rank's metadata is the same but its rank's
  if (manifest.files.empty()) throw SafetensorsError(path + ": the checkpoint has no shards");
  return read_safetensors(manifest.folder + "/" + manifest.files.front().name).metadata;
}

std::string merge_checkpoint_shards(const std::string& dir, const std::string& out) {
  SafetensorsFile f = assemble_shards(dir);
  const ShardManifest manifest = read_latest_shards(dir);
  write_safetensors_atomic(out, f.tensors, f.metadata);
  return "merged " + std::to_string(manifest.world) + " shard(s) of " + manifest.folder + ", " + std::to_string(f.tensors.size()) + " tensors, step " +
         f.metadata.at("step") + " -> " + out;
}

}  // namespace nns::backend
