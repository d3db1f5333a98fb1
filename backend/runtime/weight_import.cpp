#include "backend/runtime/weight_import.h"

#include <sys/stat.h>

#include <algorithm>
#include <cstring>
#include <nlohmann/json.hpp>
#include <set>

#include "backend/runtime/cpu/half_bits.h"
#include "frontend/regular_file.h"
#include "frontend/suggest.h"
#include "semantics/graph.h"  // shape_to_string

namespace nns::backend {

namespace {

[[noreturn]] void fail(const std::string& path, const std::string& what) { throw SafetensorsError(path + ": " + what); }

bool is_directory(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

bool exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

std::string folder_of(const std::string& path) {
  size_t slash = path.rfind('/');
  return slash == std::string::npos ? "." : path.substr(0, slash);
}

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

// The shard files an index names, in first-use order; each must be a plain
// file name in the index's folder (no path: an index must not reach out).
std::vector<std::string> index_shards(const std::string& index_path) {
  std::string text, why;
  if (!front::read_regular_file(index_path, text, why, int64_t{64} << 20)) fail(index_path, why);
  nlohmann::json root;
  try {
    root = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    fail(index_path, std::string("not valid JSON: ") + e.what());
  }
  if (!root.is_object() || !root.contains("weight_map") || !root["weight_map"].is_object())
    fail(index_path, "a sharded checkpoint's index needs an object \"weight_map\": {tensor: file}");
  std::vector<std::string> files;
  for (const auto& [name, file] : root["weight_map"].items()) {
    if (!file.is_string()) fail(index_path, "weight_map entry '" + name + "' is not a file name");
    std::string f = file.get<std::string>();
    if (f.empty() || f.find('/') != std::string::npos || f == "." || f == "..")
      fail(index_path, "weight_map entry '" + name + "' names '" + f + "': shards must be files in the index's folder");
    if (std::find(files.begin(), files.end(), f) == files.end()) files.push_back(f);
  }
  if (files.empty()) fail(index_path, "weight_map is empty");
  return files;
}

std::vector<int64_t> transposed(const std::vector<int64_t>& s) { return {s[1], s[0]}; }

// src[axis in [start, end)] of a row-major tensor of `shape`.
std::vector<float> slice(const std::vector<float>& src, const std::vector<int64_t>& shape, int axis, int64_t start,
                         int64_t end) {
  int64_t outer = 1, inner = 1;
  for (int d = 0; d < axis; ++d) outer *= shape[static_cast<size_t>(d)];
  for (size_t d = static_cast<size_t>(axis) + 1; d < shape.size(); ++d) inner *= shape[d];
  const int64_t dim = shape[static_cast<size_t>(axis)], n = end - start;
  std::vector<float> out(static_cast<size_t>(outer * n * inner));
  for (int64_t o = 0; o < outer; ++o)
    std::memcpy(out.data() + o * n * inner, src.data() + (o * dim + start) * inner, static_cast<size_t>(n * inner) * 4);
  return out;
}

// The inverse: piece (of `piece_shape`) written into dst[axis in [start, ...)].
void place(std::vector<float>& dst, const std::vector<int64_t>& shape, const std::vector<float>& piece, int axis,
           int64_t start, int64_t n) {
  int64_t outer = 1, inner = 1;
  for (int d = 0; d < axis; ++d) outer *= shape[static_cast<size_t>(d)];
  for (size_t d = static_cast<size_t>(axis) + 1; d < shape.size(); ++d) inner *= shape[d];
  const int64_t dim = shape[static_cast<size_t>(axis)];
  for (int64_t o = 0; o < outer; ++o)
    std::memcpy(dst.data() + (o * dim + start) * inner, piece.data() + o * n * inner,
                static_cast<size_t>(n * inner) * 4);
}

std::vector<float> transpose2d(const std::vector<float>& src, int64_t rows, int64_t cols) {
  std::vector<float> out(src.size());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) out[static_cast<size_t>(c * rows + r)] = src[static_cast<size_t>(r * cols + c)];
  return out;
}

std::string list_text(const std::vector<std::string>& names, size_t shown = 8) {
  std::string s;
  for (size_t i = 0; i < names.size() && i < shown; ++i) s += (i ? ", " : "") + names[i];
  if (names.size() > shown) s += ", ... (" + std::to_string(names.size()) + " in all)";
  return s;
}

}  // namespace

bool wildcard_match(const std::string& pattern, const std::string& text) {
  // Greedy with one backtrack point (the last '*'): linear in practice,
  // never exponential.
  size_t p = 0, t = 0, star = std::string::npos, mark = 0;
  while (t < text.size()) {
    if (p < pattern.size() && (pattern[p] == '?' || pattern[p] == text[t])) {
      ++p, ++t;
    } else if (p < pattern.size() && pattern[p] == '*') {
      star = p++, mark = t;
    } else if (star != std::string::npos) {
      p = star + 1, t = ++mark;
    } else {
      return false;
    }
  }
  while (p < pattern.size() && pattern[p] == '*') ++p;
  return p == pattern.size();
}

ExternalCheckpoint::ExternalCheckpoint(const std::string& path) : path_(path) {
  std::string file = path;
  if (is_directory(path)) {
    if (exists(path + "/model.safetensors.index.json"))
      file = path + "/model.safetensors.index.json";
    else if (exists(path + "/model.safetensors"))
      file = path + "/model.safetensors";
    else
      fail(path, "a folder without model.safetensors.index.json or model.safetensors");
  }
  std::vector<std::string> files = {file};
  if (ends_with(file, ".json")) {
    files.clear();
    for (const std::string& f : index_shards(file)) files.push_back(folder_of(file) + "/" + f);
  }
  for (const std::string& f : files) {
    headers_.push_back(read_safetensors_header(f));
    const SafetensorsHeader& h = headers_.back();
    for (size_t e = 0; e < h.entries.size(); ++e) {
      auto [it, fresh] = where_.emplace(h.entries[e].name, std::make_pair(headers_.size() - 1, e));
      if (!fresh) fail(f, "tensor '" + h.entries[e].name + "' is also in " + headers_[it->second.first].path);
    }
  }
}

std::vector<std::string> ExternalCheckpoint::names() const {
  std::vector<std::string> out;
  for (const auto& [name, at] : where_) out.push_back(name);
  return out;
}

const StEntry* ExternalCheckpoint::find(const std::string& name) const {
  auto it = where_.find(name);
  return it == where_.end() ? nullptr : &headers_[it->second.first].entries[it->second.second];
}

std::vector<float> ExternalCheckpoint::read_f32(const std::string& name) const {
  auto it = where_.find(name);
  if (it == where_.end()) fail(path_, "missing tensor '" + name + "'");
  const SafetensorsHeader& h = headers_[it->second.first];
  const StEntry& e = h.entries[it->second.second];
  const std::vector<uint8_t> raw = read_tensor_data(h, e);
  const size_t elem = dtype_size(e.dtype);
  std::vector<float> out(elem ? raw.size() / elem : 0);
  for (size_t i = 0; i < out.size(); ++i) {
    const uint8_t* b = raw.data() + i * elem;
    if (e.dtype == "F32") {
      std::memcpy(&out[i], b, 4);
    } else if (e.dtype == "BF16" || e.dtype == "F16") {
      uint16_t bits = static_cast<uint16_t>(b[0] | b[1] << 8);
      out[i] = e.dtype == "BF16" ? cpu::bf16_to_float(bits) : cpu::fp16_to_float(bits);
    } else if (e.dtype == "F64") {
      double d;
      std::memcpy(&d, b, 8);
      out[i] = static_cast<float>(d);
    } else {
      fail(h.path, "tensor '" + name + "' is " + e.dtype + "; weights are read from F32, F16, BF16 or F64");
    }
  }
  return out;
}

namespace {

// The source tensor an entry names: as written, or under an optional prefix.
std::string resolve(const sema::WeightMapSpec& map, const ExternalCheckpoint& ckpt, const std::string& source) {
  if (ckpt.find(source)) return source;
  for (const std::string& p : map.prefixes)
    if (ckpt.find(p + source)) return p + source;
  return "";
}

bool ignored(const sema::WeightMapSpec& map, const std::string& name) {
  for (const std::string& pattern : map.ignored) {
    if (wildcard_match(pattern, name)) return true;
    for (const std::string& p : map.prefixes)
      if (name.rfind(p, 0) == 0 && wildcard_match(pattern, name.substr(p.size()))) return true;
  }
  return false;
}

}  // namespace

std::vector<WeightMapError> unknown_parameters(const sema::WeightMapSpec& map, const std::vector<ModelParam>& params) {
  std::set<std::string> known;
  std::vector<std::string> names;
  for (const ModelParam& p : params) {
    known.insert(p.name);
    names.push_back(p.name);
  }
  std::vector<WeightMapError> out;
  for (const sema::WeightTake& t : map.takes)
    if (!known.count(t.param))
      out.emplace_back(t.loc, "the model has no parameter '" + t.param + "'" + front::did_you_mean(t.param, names));
  return out;
}

ImportedWeights import_weights(const sema::WeightMapSpec& map, const ExternalCheckpoint& ckpt,
                               const std::vector<ModelParam>& params, bool partial) {
  if (std::vector<WeightMapError> unknown = unknown_parameters(map, params); !unknown.empty()) throw unknown[0];
  std::map<std::string, const ModelParam*> by_name;
  for (const ModelParam& p : params) by_name[p.name] = &p;
  const std::string where = ckpt.path();
  ImportedWeights out;
  std::set<std::string> used, given;
  std::string cached_name;  // q, k and v cut from one fused tensor read it once
  std::vector<float> cached;
  for (const sema::WeightTake& t : map.takes) {
    auto p = by_name.find(t.param);
    const std::string source = resolve(map, ckpt, t.source);
    if (source.empty()) {
      std::string also;
      for (const std::string& pre : map.prefixes) also += " nor '" + pre + t.source + "'";
      if (partial) {
        out.kept.push_back(t.param + " (no '" + t.source + "' in " + where + ")");
        given.insert(t.param);
        continue;
      }
      throw WeightMapError(t.loc, where + " has no tensor '" + t.source + "'" +
                                      (also.empty() ? "" : " (" + also.substr(1) + ")") + " for parameter '" + t.param +
                                      "' (--init-partial keeps its initializer instead)");
    }
    used.insert(source);
    const StEntry& e = *ckpt.find(source);
    std::vector<int64_t> shape = e.shape;
    if (cached_name != source) {
      cached = ckpt.read_f32(source);
      cached_name = source;
    }
    // A whole tensor is taken out of the cache (no copy of a 150 MB
    // embedding); a cut is read out of it, which stays for the next cut.
    std::vector<float> values;
    if (t.axis < 0) {
      values = std::move(cached);
      cached_name.clear();
    } else {
      if (t.axis >= static_cast<int>(shape.size()))
        throw WeightMapError(
            t.loc, "'" + source + "' " + sema::shape_to_string(shape) + " has no axis " + std::to_string(t.axis));
      if (t.end > shape[static_cast<size_t>(t.axis)])
        throw WeightMapError(t.loc, "slice [" + std::to_string(t.start) + ", " + std::to_string(t.end) + ") of axis " +
                                        std::to_string(t.axis) + " is outside '" + source + "' " +
                                        sema::shape_to_string(shape));
      values = slice(cached, shape, t.axis, t.start, t.end);
      shape[static_cast<size_t>(t.axis)] = t.end - t.start;
    }
    if (t.transpose) {
      if (shape.size() != 2)
        throw WeightMapError(
            t.loc, "transpose needs a 2-d tensor; '" + source + "' is " + sema::shape_to_string(shape) + " here");
      values = transpose2d(values, shape[0], shape[1]);
      shape = transposed(shape);
    }
    if (shape != p->second->shape)
      throw WeightMapError(t.loc, "'" + source + "' gives " + sema::shape_to_string(shape) + " but parameter '" +
                                      t.param + "' is " + sema::shape_to_string(p->second->shape) +
                                      (t.axis >= 0 || t.transpose ? " (after the slice/transpose)" : ""));
    out.tensors.tensors.push_back(f32_tensor(t.param, shape, values.data(), values.size()));
    given.insert(t.param);
  }
  std::vector<std::string> missing;
  for (const ModelParam& p : params)
    if (!given.count(p.name) && !p.buffer) missing.push_back(p.name);
  if (!missing.empty() && !partial)
    throw WeightMapError(map.loc, "weights '" + map.name + "' gives no tensor for " + std::to_string(missing.size()) +
                                      " parameter(s) of the model: " + list_text(missing) +
                                      " (--init-partial keeps their initializers)");
  for (const std::string& m : missing) out.kept.push_back(m);
  std::vector<std::string> unread;
  for (const std::string& n : ckpt.names()) {
    if (used.count(n)) continue;
    if (ignored(map, n))
      out.ignored.push_back(n);
    else
      unread.push_back(n);
  }
  if (!unread.empty())
    throw WeightMapError(map.loc, where + " holds " + std::to_string(unread.size()) + " tensor(s) that weights '" +
                                      map.name + "' reads nowhere: " + list_text(unread) +
                                      " (take them, or ignore(\"pattern\") them on purpose)");
  return out;
}

std::vector<StTensor> export_weights(const sema::WeightMapSpec& map, const SafetensorsFile& f, const std::string& path,
                                     std::vector<std::string>& notes) {
  struct Piece {
    const sema::WeightTake* take;
    std::vector<float> values;  // in the source's layout (transpose undone)
    std::vector<int64_t> shape;
  };
  std::map<std::string, std::vector<Piece>> by_source;
  std::vector<std::string> order;
  for (const sema::WeightTake& t : map.takes) {
    const StTensor* st = f.find(t.param);
    if (!st) throw WeightMapError(t.loc, path + " has no parameter '" + t.param + "'");
    std::vector<float> values = read_f32(f, t.param, st->shape, path);
    std::vector<int64_t> shape = st->shape;
    if (t.transpose) {
      if (shape.size() != 2)
        throw WeightMapError(t.loc,
                             "transpose needs a 2-d parameter; '" + t.param + "' is " + sema::shape_to_string(shape));
      values = transpose2d(values, shape[0], shape[1]);
      shape = transposed(shape);
    }
    if (t.axis >= static_cast<int>(shape.size()) ||
        (t.axis >= 0 && shape[static_cast<size_t>(t.axis)] != t.end - t.start))
      throw WeightMapError(t.loc, "'" + t.param + "' " + sema::shape_to_string(shape) +
                                      " does not fill the slice of axis " + std::to_string(t.axis));
    if (!by_source.count(t.source)) order.push_back(t.source);
    by_source[t.source].push_back(Piece{&t, std::move(values), std::move(shape)});
  }
  std::vector<StTensor> out;
  for (const std::string& source : order) {
    std::vector<Piece>& pieces = by_source[source];
    const sema::WeightTake& first = *pieces[0].take;
    if (first.axis < 0) {
      // Whole takes of one source (a tensor read by two parameters): they must agree.
      for (const Piece& p : pieces)
        if (p.take->axis >= 0 || p.values != pieces[0].values)
          throw WeightMapError(p.take->loc, "'" + source + "' is given by '" + first.param + "' and '" + p.take->param +
                                                "', which differ: the export cannot write both");
      out.push_back(f32_tensor(source, pieces[0].shape, pieces[0].values.data(), pieces[0].values.size()));
      continue;
    }
    // Sliced pieces along one axis must tile [0, extent) exactly.
    std::sort(pieces.begin(), pieces.end(),
              [](const Piece& a, const Piece& b) { return a.take->start < b.take->start; });
    std::vector<int64_t> shape = pieces[0].shape;
    int64_t at = 0;
    for (const Piece& p : pieces) {
      std::vector<int64_t> other = p.shape, base = pieces[0].shape;
      other[static_cast<size_t>(first.axis)] = base[static_cast<size_t>(first.axis)] = 0;
      if (p.take->axis != first.axis || other != base || p.take->start != at)
        throw WeightMapError(
            p.take->loc, "the pieces of '" + source + "' do not tile it along one axis from 0 (this one starts at " +
                             std::to_string(p.take->start) + ", the ones before end at " + std::to_string(at) + ")");
      at = p.take->end;
    }
    shape[static_cast<size_t>(first.axis)] = at;
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    std::vector<float> full(static_cast<size_t>(n));
    for (const Piece& p : pieces) place(full, shape, p.values, first.axis, p.take->start, p.take->end - p.take->start);
    if (pieces.size() == 1)
      notes.push_back("'" + source + "' is written with the model's " + std::to_string(at) + " along axis " +
                      std::to_string(first.axis) + " (the map cuts it; the original may have had more)");
    out.push_back(f32_tensor(source, shape, full.data(), full.size()));
  }
  std::set<std::string> taken;
  for (const sema::WeightTake& t : map.takes) taken.insert(t.param);
  std::vector<std::string> left;
  for (const StTensor& t : f.tensors)
    if (!taken.count(t.name) && t.name.rfind("optimizer.", 0) != 0) left.push_back(t.name);
  if (!left.empty()) notes.push_back("not in weights '" + map.name + "', not written: " + list_text(left));
  return out;
}

}  // namespace nns::backend
