// Checkpoints of a partitioned run: per-rank shards, their merge into one
// single-device checkpoint, and loading any single-device file into a plan.
#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "backend/runtime/comm/communicator.h"
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
    if (!parse_count(s.substr(i, j - i), n)) throw RuntimeError(what + ": '" + s + "' is not a list of non-negative integers");
    out.push_back(n);
    i = j + 1;
  }
  return out;
}

StTensor f32_tensor(const std::string& name, const std::vector<int64_t>& shape, const float* data, size_t n) {
  StTensor t;
  t.name = name;
  t.dtype = "F32";
  t.shape = shape;
  t.data.resize(n * 4);
  std::memcpy(t.data.data(), data, n * 4);
  return t;
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
  // One owner per element: replica 0, first copy of a replicated piece.
  if (m.P.replica == 0)
    for (size_t i = 0; i < m.P.params.size(); ++i) {
      const ParamSlot& slot = m.P.params[i];
      const Piece& pc = m.piece(slot.param);
      if (pc.replica_index != 0) continue;
      const sema::TensorInfo& t = m.g.tensor(slot.tensor);
      const std::vector<float>& data = m.bufs[static_cast<size_t>(slot.param)];
      std::string where = "full=" + ints_text(t.shape) + ";start=" + ints_text(pc.start);
      tensors.push_back(f32_tensor(t.name, pc.length, data.data(), data.size()));
      meta["piece:" + t.name] = where;
      for (size_t s = 0; s < m.opt[i].size(); ++s) {
        std::string name = std::string("optimizer.") + optimizer_slot_name(m.spec.optimizer.kind, s) + "." + t.name;
        tensors.push_back(f32_tensor(name, pc.length, m.opt[i][s].data(), m.opt[i][s].size()));
        meta["piece:" + name] = where;
      }
    }
  if (m.P.rank == 0) {
    if (::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) throw RuntimeError(dir + ": cannot create the shard folder");
  }
  if (m.comm) m.comm->barrier();
  write_safetensors_atomic(dir + "/rank-" + std::to_string(m.P.rank) + ".safetensors", tensors, meta);
  if (m.comm) m.comm->barrier();
}

void PlanTrainer::load(const std::string& path, bool checkpoint) {
  PlanExecutor& m = *x_;
  SafetensorsFile f = read_safetensors(path);
  if (checkpoint) {
    auto fmt = f.metadata.find("format");
    if (fmt == f.metadata.end() || fmt->second != "nns-checkpoint-1")
      throw RuntimeError(path + ": not an nns checkpoint (a folder of shards is merged first: nns ckpt merge DIR -o FILE)");
    auto opt = f.metadata.find("optimizer");
    if (opt == f.metadata.end() || opt->second != m.spec.optimizer.kind)
      throw RuntimeError(path + ": checkpoint optimizer '" + (opt == f.metadata.end() ? "?" : opt->second) + "' differs from the train block's '" +
                         m.spec.optimizer.kind + "'");
  }
  auto slice_into = [&](const std::string& name, const Shape& shape, const Piece& pc, std::vector<float>& dst) {
    std::vector<float> full = read_f32(f, name, shape, path);
    dst = m.extract(full, full_piece(shape), pc, 1.f);
  };
  for (size_t i = 0; i < m.P.params.size(); ++i) {
    const ParamSlot& slot = m.P.params[i];
    const sema::TensorInfo& t = m.g.tensor(slot.tensor);
    const Piece& pc = m.piece(slot.param);
    slice_into(t.name, t.shape, pc, m.bufs[static_cast<size_t>(slot.param)]);
    if (!checkpoint) continue;
    for (size_t s = 0; s < m.opt[i].size(); ++s)
      slice_into(std::string("optimizer.") + optimizer_slot_name(m.spec.optimizer.kind, s) + "." + t.name, t.shape, pc, m.opt[i][s]);
  }
  if (!checkpoint) {
    for (const StTensor& t : f.tensors) {
      bool known = false;
      for (int p : m.g.params()) known = known || m.g.tensor(p).name == t.name;
      if (!known) throw RuntimeError(path + ": tensor '" + t.name + "' is not a parameter of this model");
    }
    return;
  }
  step_ = metadata_count(f, "step", path);
}

std::string merge_checkpoint_shards(const std::string& dir, const std::string& out) {
  std::vector<std::string> files;
  if (DIR* d = ::opendir(dir.c_str())) {
    while (dirent* e = ::readdir(d)) {
      std::string n = e->d_name;
      if (n.rfind("rank-", 0) == 0 && n.size() > 12 && n.substr(n.size() - 12) == ".safetensors") files.push_back(dir + "/" + n);
    }
    ::closedir(d);
  } else {
    throw RuntimeError(dir + ": cannot open the shard folder");
  }
  if (files.empty()) throw RuntimeError(dir + ": no rank-*.safetensors shards");
  std::sort(files.begin(), files.end());
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
    if (fmt == f.metadata.end() || fmt->second != "nns-shard-1") throw RuntimeError(path + ": not an nns checkpoint shard");
    int64_t w = metadata_count(f, "world", path);
    metadata_count(f, "step", path);
    if (world < 0) {
      world = w;
      meta0 = f.metadata;
    }
    if (w != world || f.metadata.at("step") != meta0.at("step"))
      throw RuntimeError(path + ": shard from another run (world or step differs from " + files[0] + ")");
    for (const StTensor& t : f.tensors) {
      auto where = f.metadata.find("piece:" + t.name);
      if (where == f.metadata.end()) throw RuntimeError(path + ": tensor '" + t.name + "' has no piece metadata");
      size_t semi = where->second.find(";start=");
      if (where->second.rfind("full=", 0) != 0 || semi == std::string::npos) throw RuntimeError(path + ": bad piece metadata for '" + t.name + "'");
      const std::string what = path + ": piece metadata of '" + t.name + "'";
      std::vector<int64_t> shape = parse_ints(where->second.substr(5, semi - 5), what), start = parse_ints(where->second.substr(semi + 7), what);
      if (start.size() != shape.size() || t.shape.size() != shape.size()) throw RuntimeError(path + ": bad piece of '" + t.name + "'");
      if (t.dtype != "F32") throw RuntimeError(path + ": tensor '" + t.name + "' is " + t.dtype + ", shards hold F32");
      int64_t elements = 1;
      for (int64_t d : shape)
        if (__builtin_mul_overflow(elements, d, &elements) || elements > (int64_t{1} << 34))
          throw RuntimeError(what + ": the full shape is too large to assemble");
      Full& fl = full[t.name];
      if (fl.shape.empty() && fl.data.empty()) {
        fl.shape = shape;
        fl.data.assign(static_cast<size_t>(sema::numel(shape)), 0.f);
        fl.seen.assign(fl.data.size(), 0);
      }
      if (fl.shape != shape) throw RuntimeError(path + ": tensor '" + t.name + "' has another full shape in another shard");
      Piece src;
      src.start = start;
      src.length = t.shape;
      if (!contains(full_piece(shape), start, t.shape)) throw RuntimeError(path + ": piece of '" + t.name + "' lies outside the tensor");
      std::vector<float> vals(t.data.size() / 4);
      std::memcpy(vals.data(), t.data.data(), t.data.size());
      // Mark coverage, then copy.
      std::vector<float> ones(vals.size(), 1.f), cover(fl.data.size(), 0.f);
      copy_region(ones.data(), src, cover.data(), full_piece(shape), start, t.shape, false, 1.f);
      for (size_t i = 0; i < cover.size(); ++i)
        if (cover[i] != 0.f) {
          if (fl.seen[i]) throw RuntimeError(path + ": tensor '" + t.name + "' overlaps a piece of another shard");
          fl.seen[i] = 1;
        }
      copy_region(vals.data(), src, fl.data.data(), full_piece(shape), start, t.shape, false, 1.f);
    }
  }
  std::vector<StTensor> tensors;
  for (auto& [name, fl] : full) {
    for (char c : fl.seen)
      if (!c) throw RuntimeError(dir + ": tensor '" + name + "' is not covered by the shards (a rank's shard is missing?)");
    tensors.push_back(f32_tensor(name, fl.shape, fl.data.data(), fl.data.size()));
  }
  write_safetensors_atomic(out, tensors, {{"format", "nns-checkpoint-1"}, {"step", meta0.at("step")}, {"optimizer", meta0.at("optimizer")}});
  return "merged " + std::to_string(files.size()) + " shard(s) of " + std::to_string(world) + " rank(s), " + std::to_string(tensors.size()) +
         " tensors, step " + meta0.at("step") + " -> " + out;
}

}  // namespace nns::backend
