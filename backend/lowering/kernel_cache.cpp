// The kernel cache (kernel_cache.h): templates cut from a program's local
// graph and pasted into another's with ids shifted, and the text that shows
// every field of a program's kernel bodies.
#include "backend/lowering/kernel_cache.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>

#include "backend/lowering/lower_plan.h"

namespace nns::backend {

namespace detail {

const KernelCache::Positioned* KernelCache::positioned(const std::string& elaboration_key) const {
  auto it = positioned_.find(elaboration_key);
  return it == positioned_.end() ? nullptr : &it->second;
}

void KernelCache::set_positioned(const std::string& elaboration_key, Positioned nodes) {
  positioned_.emplace(elaboration_key, std::move(nodes));
}

const KernelTemplate* KernelCache::find(const std::string& kernel_key) const {
  auto it = kernels_.find(kernel_key);
  return it == kernels_.end() ? nullptr : &it->second;
}

void KernelCache::add(const std::string& kernel_key, KernelTemplate t) { kernels_.emplace(kernel_key, std::move(t)); }

bool kernel_cache_wanted(const LowerOptions& opts) {
  if (!opts.elaborate || !opts.elaboration_key || !opts.kernel_cache) return false;
  const char* env = std::getenv("NNS_KERNEL_CACHE");
  return !(env && std::strcmp(env, "0") == 0);
}

namespace {

template <class T>
void put(std::string& key, T v) {
  key.append(reinterpret_cast<const char*>(&v), sizeof v);
}

bool same_loc(const front::SourceLoc& a, const front::SourceLoc& b) {
  return a.file == b.file && a.line == b.line && a.col == b.col && a.length == b.length;
}

// Checks and shifts the ids of one template: tensors and nodes in their
// ranges, -1 kept where it means none.
struct Ids {
  int tensor_base, tensor_count, node_base, node_count;
  int tensor_shift = 0, node_shift = 0;
  std::string what;  // for the message
  int tensor(int id, bool none_ok = false) const {
    if (none_ok && id < 0) return id;
    if (id < tensor_base || id >= tensor_base + tensor_count)
      throw LoweringError("internal: the kernel body of " + what + " refers to local tensor %" + std::to_string(id) +
                          ", which it did not make (it cannot be cached)");
    return id + tensor_shift;
  }
  int node(int id, bool none_ok = false) const {
    if (none_ok && id < 0) return id;
    if (id < node_base || id >= node_base + node_count)
      throw LoweringError("internal: the kernel body of " + what + " refers to local node " + std::to_string(id) +
                          ", which it did not make (it cannot be cached)");
    return id + node_shift;
  }
  void tensors(std::vector<int>& v) const {
    for (int& t : v) t = tensor(t);
  }
  void nodes(std::vector<int>& v) const {
    for (int& n : v) n = node(n);
  }
};

// Applies `ids` to every id a tensor, a node or a kernel holds (cut_template
// checks with zero shifts; paste_template shifts).
void map_tensor(const Ids& ids, sema::TensorInfo& t) {
  t.id = ids.tensor(t.id);
  t.producer = ids.node(t.producer, true);
  t.grad_of = ids.tensor(t.grad_of, true);
}

void map_node(const Ids& ids, sema::OpNode& n) {
  n.id = ids.node(n.id);
  n.forward_of = ids.node(n.forward_of, true);
  n.parent = ids.node(n.parent, true);
  ids.nodes(n.children);
  ids.tensors(n.inputs);
  ids.tensors(n.outputs);
}

void map_kernel(const Ids& ids, SubOpKernel& k) {
  ids.tensors(k.inst.inputs);
  ids.tensors(k.inst.outputs);
  ids.nodes(k.inst.nodes);
  for (int& t : k.dy) t = ids.tensor(t, true);
  ids.nodes(k.bwd.nodes);
  std::map<int, int> grads;
  for (const auto& [input, grad] : k.bwd.grads) grads[ids.tensor(input)] = ids.tensor(grad, true);
  k.bwd.grads = std::move(grads);
  ids.nodes(k.wgrad_nodes);
  for (auto& v : k.fwd_release) ids.tensors(v);
  for (auto& v : k.bwd_release) ids.tensors(v);
}

}  // namespace

std::string attrs_key(const std::vector<const sema::OpNode*>& nodes) {
  std::string key;
  for (const sema::OpNode* n : nodes) {
    put(key, n->attrs.size());
    for (const auto& [name, a] : n->attrs) {
      put(key, name.size());
      key += name;
      put(key, a.index());
      if (auto i = std::get_if<int64_t>(&a)) put(key, *i);
      if (auto d = std::get_if<double>(&a)) put(key, *d);
      if (auto b = std::get_if<bool>(&a)) put(key, *b);
      if (auto s = std::get_if<std::string>(&a)) {
        put(key, s->size());
        key += *s;
      }
      if (auto l = std::get_if<std::vector<int64_t>>(&a)) {
        put(key, l->size());
        for (int64_t v : *l) put(key, v);
      }
    }
  }
  return key;
}

KernelTemplate cut_template(const sema::Graph& local, int tensor_base, int node_base, const SubOpKernel& kn,
                            front::SourceLoc loc) {
  KernelTemplate t;
  t.tensor_base = tensor_base;
  t.node_base = node_base;
  t.loc = loc;
  t.tensors.assign(local.tensors().begin() + tensor_base, local.tensors().end());
  t.nodes.assign(local.nodes().begin() + node_base, local.nodes().end());
  t.body = kn;
  // Nothing outside the ranges: a copy shifts every id by one amount.
  Ids ids{tensor_base, static_cast<int>(t.tensors.size()), node_base, static_cast<int>(t.nodes.size())};
  ids.what = "sub-op #" + std::to_string(kn.subop);
  for (sema::TensorInfo x : t.tensors) map_tensor(ids, x);
  for (sema::OpNode x : t.nodes) map_node(ids, x);
  SubOpKernel k = kn;
  map_kernel(ids, k);
  return t;
}

void paste_template(const KernelTemplate& t, sema::Graph& local, SubOpKernel& kn, front::SourceLoc loc) {
  const int tensors = static_cast<int>(t.tensors.size());
  Ids ids{t.tensor_base, tensors, t.node_base, static_cast<int>(t.nodes.size())};
  ids.tensor_shift = static_cast<int>(local.tensors().size()) - t.tensor_base;
  ids.node_shift = static_cast<int>(local.nodes().size()) - t.node_base;
  ids.what = "sub-op #" + std::to_string(kn.subop);
  for (sema::TensorInfo x : t.tensors) {
    map_tensor(ids, x);
    x.name = shift_name(x.name, t.tensor_base, tensors, ids.tensor_shift);
    if (same_loc(x.loc, t.loc)) x.loc = loc;
    local.add_tensor(std::move(x));
  }
  for (sema::OpNode x : t.nodes) {
    map_node(ids, x);
    x.name = shift_name(x.name, t.tensor_base, tensors, ids.tensor_shift);
    if (same_loc(x.loc, t.loc)) x.loc = loc;
    local.add_node(std::move(x));
  }
  SubOpKernel k = t.body;
  map_kernel(ids, k);
  set_body(kn, std::move(k));
}

void set_body(SubOpKernel& kn, SubOpKernel body) {
  kn.inst = std::move(body.inst);
  kn.dy = std::move(body.dy);
  kn.bwd = std::move(body.bwd);
  kn.wgrad_nodes = std::move(body.wgrad_nodes);
  kn.fwd_release = std::move(body.fwd_release);
  kn.bwd_release = std::move(body.bwd_release);
  kn.drop_after_collect = std::move(body.drop_after_collect);
  kn.elaborated = true;
}

std::string shift_name(const std::string& name, int base, int count, int shift) {
  std::string out;
  out.reserve(name.size() + 4);
  size_t i = 0;
  while (i <= name.size()) {
    size_t end = name.find('.', i);
    if (end == std::string::npos) end = name.size();
    const std::string part = name.substr(i, end - i);
    size_t digits = part.rfind("grad_", 0) == 0 ? 5 : part.rfind('t', 0) == 0 ? 1 : part.size();
    bool id = digits < part.size() && part.size() - digits <= 9 &&
              part.find_first_not_of("0123456789", digits) == std::string::npos;
    int v = id ? std::atoi(part.c_str() + digits) : -1;
    if (id && v >= base && v < base + count)
      out += part.substr(0, digits) + std::to_string(v + shift);
    else
      out += part;
    if (end < name.size()) out += '.';
    i = end + 1;
  }
  return out;
}

}  // namespace detail

namespace {

std::string loc_text(const front::SourceLoc& l) {
  return std::to_string(l.file) + ":" + std::to_string(l.line) + ":" + std::to_string(l.col) + "+" +
         std::to_string(l.length);
}

std::string list_text(const std::vector<int>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + std::to_string(v[i]);
  return s + "]";
}

// Exact: doubles with every digit they have.
std::string exact_attr(const sema::Attr& a) {
  if (auto d = std::get_if<double>(&a)) {
    char buf[40];
    std::snprintf(buf, sizeof buf, "%.17g", *d);
    return std::string("f") + buf;
  }
  return std::to_string(a.index()) + sema::attr_to_string(a);
}

}  // namespace

std::string kernel_bodies_text(const RankProgram& p) {
  std::ostringstream o;
  const sema::Graph& L = p.local;
  o << "local symbols " << L.symbols.size() << " obligations " << L.sym_obligations.size() << "\n";
  for (const sema::TensorInfo& t : L.tensors()) {
    o << "t" << t.id << " " << static_cast<int>(t.kind) << " " << t.name << " " << sema::shape_to_string(t.shape) << " "
      << sema::dtype_name(t.dtype) << " producer " << t.producer << " grad_of " << t.grad_of << " init "
      << t.init.to_string() << (t.buffer ? " buffer" : "") << " at " << loc_text(t.loc) << " sym " << t.sym_shape.size()
      << "\n";
  }
  for (const sema::OpNode& n : L.nodes()) {
    o << "n" << n.id << " " << static_cast<int>(n.phase) << " " << n.kind << " " << n.name
      << (n.composite ? " composite" : "") << " forward_of " << n.forward_of << " parent " << n.parent << " children "
      << list_text(n.children) << " in " << list_text(n.inputs) << " out " << list_text(n.outputs) << " macs " << n.macs
      << " at " << loc_text(n.loc) << " sym " << n.sym_sizes.size() << "/" << n.sym_attrs.size() << " attrs";
    for (const auto& [name, a] : n.attrs) o << " " << name << "=" << exact_attr(a);
    o << " anno";
    for (const auto& [id, size] : n.anno.sizes) o << " " << id << "=" << size;
    for (const auto& s : n.anno.output_shapes) o << " " << sema::shape_to_string(s);
    o << "\n";
  }
  for (size_t i = 0; i < p.kernels.size(); ++i) {
    const SubOpKernel& k = p.kernels[i];
    o << "k" << i << " subop " << k.subop << " node " << k.node << (k.elaborated ? " elaborated" : "") << " in "
      << list_text(k.inst.inputs) << " out " << list_text(k.inst.outputs) << " nodes " << list_text(k.inst.nodes)
      << " dy " << list_text(k.dy) << " bwd " << list_text(k.bwd.nodes) << " grads";
    for (const auto& [t, gr] : k.bwd.grads) o << " " << t << ":" << gr;
    o << " wgrad " << list_text(k.wgrad_nodes) << " scale " << exact_attr(static_cast<double>(k.scale))
      << (k.row_strided_inputs ? " row-strided" : "") << (k.recompute ? " recompute" : "") << " regather";
    for (char c : k.regather_inputs) o << " " << static_cast<int>(c);
    o << " fwd_release";
    for (const auto& v : k.fwd_release) o << " " << list_text(v);
    o << " bwd_release";
    for (const auto& v : k.bwd_release) o << " " << list_text(v);
    o << " drop";
    for (char c : k.drop_after_collect) o << " " << static_cast<int>(c);
    o << "\n";
  }
  return o.str();
}

}  // namespace nns::backend
