#include "semantics/graph.h"

#include <cstdio>
#include <sstream>

namespace nns::sema {

const char* dtype_name(DType t) {
  switch (t) {
    case DType::F32: return "f32";
    case DType::F16: return "f16";
    case DType::BF16: return "bf16";
    case DType::I32: return "i32";
    case DType::I64: return "i64";
    case DType::Bool: return "bool";
  }
  return "?";
}

int64_t dtype_bytes(DType t) {
  switch (t) {
    case DType::F32: case DType::I32: return 4;
    case DType::F16: case DType::BF16: return 2;
    case DType::I64: return 8;
    case DType::Bool: return 1;
  }
  return 4;
}

bool dtype_from_name(const std::string& name, DType& out) {
  static const std::pair<const char*, DType> table[] = {
      {"f32", DType::F32}, {"f16", DType::F16}, {"bf16", DType::BF16},
      {"i32", DType::I32}, {"i64", DType::I64}, {"bool", DType::Bool}};
  for (const auto& [n, t] : table)
    if (name == n) { out = t; return true; }
  return false;
}

bool dtype_is_float(DType t) { return t == DType::F32 || t == DType::F16 || t == DType::BF16; }

std::string shape_to_string(const Shape& s) {
  std::string r = "[";
  for (size_t i = 0; i < s.size(); ++i) r += (i ? ", " : "") + std::to_string(s[i]);
  return r + "]";
}

int64_t numel(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

std::string shape_size_problem(const Shape& s, DType dtype) {
  if (s.size() > kMaxTensorRank)
    return "has rank " + std::to_string(s.size()) + "; at most " + std::to_string(kMaxTensorRank) +
           " dimensions are supported";
  int64_t bytes = dtype_bytes(dtype);
  for (int64_t d : s) {
    if (d <= 0) return "";  // non-positive dims are refused with their own message
    if (__builtin_mul_overflow(bytes, d, &bytes) || bytes > kMaxTensorBytes)
      return shape_to_string(s) + " of " + dtype_name(dtype) + " would hold more than " +
             std::to_string(kMaxTensorBytes >> 50) + " PiB, beyond any device";
  }
  return "";
}

static std::string fmt_g(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

std::string attr_to_string(const Attr& a) {
  if (auto* i = std::get_if<int64_t>(&a)) return std::to_string(*i);
  if (auto* d = std::get_if<double>(&a)) return fmt_g(*d);
  if (auto* b = std::get_if<bool>(&a)) return *b ? "true" : "false";
  if (auto* s = std::get_if<std::string>(&a)) return "\"" + *s + "\"";
  const auto& v = std::get<std::vector<int64_t>>(a);
  return shape_to_string(v);
}

std::string InitSpec::to_string() const {
  if (kind.empty()) return "";
  std::string s = kind + "(";
  for (size_t i = 0; i < args.size(); ++i) s += (i ? ", " : "") + fmt_g(args[i]);
  return s + ")";
}

int Graph::add_tensor(TensorInfo t) {
  t.id = static_cast<int>(tensors_.size());
  tensors_.push_back(std::move(t));
  return tensors_.back().id;
}

int Graph::add_node(OpNode n) {
  n.id = static_cast<int>(nodes_.size());
  nodes_.push_back(std::move(n));
  return nodes_.back().id;
}

std::vector<int> Graph::top_level_nodes() const {
  std::vector<int> out;
  for (const OpNode& n : nodes_)
    if (n.parent < 0) out.push_back(n.id);
  return out;
}

static void flatten_into(const Graph& g, int id, std::vector<int>& out) {
  const OpNode& n = g.node(id);
  if (!n.composite) {
    out.push_back(id);
    return;
  }
  for (int c : n.children) flatten_into(g, c, out);
}

std::vector<int> Graph::flat_forward() const {
  std::vector<int> out;
  for (const OpNode& n : nodes_)
    if (n.parent < 0 && n.phase == Phase::Forward) flatten_into(*this, n.id, out);
  return out;
}

std::vector<int> Graph::params() const {
  std::vector<int> out;
  for (const TensorInfo& t : tensors_)
    if (t.kind == TensorKind::Param) out.push_back(t.id);
  return out;
}

std::vector<int> Graph::inputs() const {
  std::vector<int> out;
  for (const TensorInfo& t : tensors_)
    if (t.kind == TensorKind::Input) out.push_back(t.id);
  return out;
}

// " {batch, seq, 64}" when some dim is symbolic (symbolic.h), else "".
static std::string sym_shape_text(const TensorInfo& t) {
  if (t.sym_shape.empty()) return "";
  std::string s = " {";
  for (size_t d = 0; d < t.sym_shape.size(); ++d) s += (d ? ", " : "") + sym_text(t.sym_shape[d]);
  return s + "}";
}

static std::string tensor_ref(const Graph& g, int id) {
  const TensorInfo& t = g.tensor(id);
  if (t.kind == TensorKind::Activation) return "%" + std::to_string(id);
  return "%" + std::to_string(id) + "(" + t.name + ")";
}

static void dump_node(const Graph& g, const OpNode& n, int depth, std::ostringstream& out) {
  std::string indent(2 * depth + 2, ' ');
  out << indent << "op" << n.id << " " << n.name << " = " << n.kind << "(";
  for (size_t i = 0; i < n.inputs.size(); ++i) out << (i ? ", " : "") << tensor_ref(g, n.inputs[i]);
  bool first_attr = n.inputs.empty();
  for (const auto& [k, v] : n.attrs) {
    out << (first_attr ? "" : ", ") << k << "=" << attr_to_string(v);
    first_attr = false;
  }
  out << ") -> ";
  for (size_t i = 0; i < n.outputs.size(); ++i) {
    const TensorInfo& t = g.tensor(n.outputs[i]);
    out << (i ? ", " : "") << "%" << t.id << ":" << dtype_name(t.dtype) << shape_to_string(t.shape) << sym_shape_text(t);
  }
  out << "\n" << indent << "    ";
  if (n.phase == Phase::Forward) out << "anno \"" << n.anno.anno.to_string() << "\"";
  else if (n.forward_of >= 0) out << "grad of op" << n.forward_of;
  else out << (n.phase == Phase::Backward ? "backward" : "optimizer");
  if (n.macs) out << "  macs " << n.macs;
  out << "  @" << n.loc.line << ":" << n.loc.col << "\n";
  for (int c : n.children) dump_node(g, g.node(c), depth + 1, out);
}

std::string Graph::dump() const {
  std::ostringstream out;
  out << "graph {\n";
  for (const SymbolDecl& d : symbols) {
    out << "  symbolic " << d.name << " = " << d.witness;
    for (const std::string& c : d.constraint_text) out << " \"" << c << "\"";
    out << "\n";
  }
  for (const TensorInfo& t : tensors_) {
    if (t.kind == TensorKind::Activation) continue;
    out << "  " << (t.buffer ? "buffer " : t.kind == TensorKind::Param ? "param " : "input ") << "%" << t.id << " " << t.name
        << ": " << dtype_name(t.dtype) << shape_to_string(t.shape) << sym_shape_text(t);
    if (!t.init.kind.empty()) out << " = " << t.init.to_string();
    out << "\n";
  }
  for (const OpNode& n : nodes_)
    if (n.parent < 0 && n.phase == Phase::Forward) dump_node(*this, n, 0, out);
  if (loss >= 0) out << "  loss %" << loss << "\n";
  bool header = false;
  for (const OpNode& n : nodes_) {
    if (n.phase == Phase::Forward) continue;
    if (!header) out << "  # training: backward and optimizer\n";
    header = true;
    dump_node(*this, n, 0, out);
  }
  out << "}\n";
  return out.str();
}

GraphSummary summarize(const Graph& g) {
  GraphSummary s;
  for (const TensorInfo& t : g.tensors()) {
    if (t.kind == TensorKind::Param && t.buffer) {  // state, not parameters
      s.buffer_count += numel(t.shape);
      s.buffer_bytes += t.bytes();
    } else if (t.kind == TensorKind::Param) {
      s.param_count += numel(t.shape);
      s.param_bytes += t.bytes();
    } else if (t.kind == TensorKind::Input) {
      s.input_bytes += t.bytes();
    }
  }
  for (const OpNode& n : g.nodes()) {
    if (n.phase != Phase::Forward) continue;
    ++s.all_ops;
    if (n.parent >= 0) {
      // Activations inside composite bodies are live during the forward too.
      for (int o : n.outputs)
        if (g.tensor(o).producer != g.node(n.parent).id) s.activation_bytes += g.tensor(o).bytes();
      continue;
    }
    ++s.top_level_ops;
    s.forward_macs += n.macs;
    for (int o : n.outputs) s.activation_bytes += g.tensor(o).bytes();
  }
  return s;
}

std::string format_count(double v) {
  const char* units[] = {"", "K", "M", "B", "T"};
  int u = 0;
  while (v >= 1000 && u < 4) { v /= 1000; ++u; }
  char buf[64];
  std::snprintf(buf, sizeof buf, u ? "%.2f%s" : "%.0f%s", v, units[u]);
  return buf;
}

std::string format_bytes(int64_t b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(b);
  int u = 0;
  while (v >= 1024 && u < 4) { v /= 1024; ++u; }
  char buf[64];
  std::snprintf(buf, sizeof buf, u ? "%.2f %s" : "%.0f %s", v, units[u]);
  return buf;
}

}  // namespace nns::sema
