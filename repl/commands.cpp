// The REPL commands other than help (help.cpp).
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <ostream>
#include <sstream>
#include <unistd.h>

#include "repl/plan_text.h"
#include "repl/report.h"
#include "repl/runner.h"
#include "repl/session.h"
#include "backend/lowering/auto_order.h"
#include "backend/lowering/lower_plan.h"
#include "backend/lowering/schedule_view.h"
#include "semantics/op_registry.h"

namespace nns::repl {

namespace fs = std::filesystem;
using sema::Plan;

namespace {

bool parse_count(const std::string& s, long long& out) {
  if (s.empty() || s.size() > 9) return false;
  for (char c : s)
    if (c < '0' || c > '9') return false;
  out = std::atoll(s.c_str());
  return true;
}

std::string shapes_of(const sema::Graph& g, const std::vector<int>& tensors) {
  std::string s;
  for (size_t i = 0; i < tensors.size(); ++i) s += (i ? ", " : "") + sema::shape_to_string(g.tensor(tensors[i]).shape);
  return s;
}

std::string operand_list(const sema::Graph& g, const std::vector<int>& tensors) {
  std::string s;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const sema::TensorInfo& t = g.tensor(tensors[i]);
    s += (i ? ", " : "") + std::string("%") + std::to_string(t.id);
    if (t.kind != sema::TensorKind::Activation) s += "(" + t.name + ")";
    s += " " + std::string(sema::dtype_name(t.dtype)) + sema::shape_to_string(t.shape);
  }
  return s.empty() ? "-" : s;
}

std::string indent(const std::string& text, const std::string& pad) {
  std::string out;
  size_t start = 0;
  while (start < text.size()) {
    size_t nl = text.find('\n', start);
    if (nl == std::string::npos) nl = text.size();
    out += pad + text.substr(start, nl - start) + "\n";
    start = nl + 1;
  }
  return out;
}

}  // namespace

bool Session::run_command(const Command& c) {
  if (c.name == "help") return cmd_help(c);
  if (c.name == "ops") return cmd_ops(c);
  if (c.name == "show") return cmd_show(c);
  if (c.name == "status") return cmd_status(c);
  if (c.name == "comm") return cmd_comm(c);
  if (c.name == "schedule") return cmd_schedule(c);
  if (c.name == "plan") return cmd_plan(c);
  if (c.name == "undo") return cmd_undo(c);
  if (c.name == "reset") return cmd_reset(c);
  if (c.name == "gpus") return cmd_gpus(c);
  if (c.name == "config") return cmd_config(c);
  if (c.name == "save") return cmd_save(c);
  if (c.name == "run") return cmd_run(c);
  if (c.name == "quit") {
    if (!c.args.empty()) return usage("quit");
    quit_ = true;
    return true;
  }
  err_ << "nns: error: unknown command '" << c.name << "'\n";
  return false;
}

// ---- ops, show ------------------------------------------------------------------------

bool Session::cmd_ops(const Command& c) {
  if (c.args.size() > 1) return usage("ops");
  const sema::Graph& g = interp_->graph();
  std::vector<int> nodes;
  size_t total = 0;
  for (size_t n = 0; n < plan_.root_of_node.size(); ++n)
    if (plan_.root_of_node[n] >= 0) ++total;
  if (c.args.empty()) {
    for (size_t n = 0; n < plan_.root_of_node.size(); ++n)
      if (plan_.root_of_node[n] >= 0) nodes.push_back(static_cast<int>(n));
  } else {
    bool ok = false;
    nodes = select_ops(c.args[0], ok);
    if (!ok) return false;
  }
  if (nodes.empty()) {
    if (c.args.empty()) out_ << "(0 of 0 ops: " << (opts_.file.empty() ? "no model file" : "the model calls no ops") << ")\n";
    else out_ << "no op matches '" << c.args[0] << "' (" << total << " ops; 'ops' lists them all)\n";
    return true;
  }
  struct Row {
    std::string name, kind, anno, shapes, partition;
  };
  std::vector<Row> rows;
  size_t wn = 0, wk = 0, wa = 0, ws = 0;
  for (int n : nodes) {
    const sema::OpNode& node = g.node(n);
    Row r{node.name, node.kind, "\"" + node.anno.anno.to_string() + "\"",
          shapes_of(g, node.inputs) + " -> " + shapes_of(g, node.outputs), describe_partition(plan_, n, 4)};
    wn = std::max(wn, r.name.size());
    wk = std::max(wk, r.kind.size());
    wa = std::max(wa, r.anno.size());
    ws = std::max(ws, r.shapes.size());
    rows.push_back(std::move(r));
  }
  wa = std::min<size_t>(wa, 48);
  ws = std::min<size_t>(ws, 44);
  auto pad = [](std::string s, size_t w) {
    if (s.size() < w) s.resize(w, ' ');
    return s;
  };
  for (const Row& r : rows)
    out_ << pad(r.name, wn) << "  " << pad(r.kind, wk) << "  " << pad(r.anno, wa) << "  " << pad(r.shapes, ws) << "  " << r.partition << "\n";
  out_ << "(" << rows.size() << " of " << total << " ops)\n";
  return true;
}

bool Session::cmd_show(const Command& c) {
  if (c.args.size() != 1) return usage("show");
  const std::string& what = c.args[0];
  int node = find_op(what);
  if (node >= 0) return show_op(node);
  const sema::Graph& g = interp_->graph();
  for (const sema::TensorInfo& t : g.tensors())
    if (t.kind != sema::TensorKind::Activation && t.name == what) return show_tensor(t.id);
  // A pattern that picks one op will do.
  if (what.find_first_of("*?") != std::string::npos) {
    bool ok = false;
    std::vector<int> nodes = select_ops(what, ok);
    if (!ok) return false;
    if (nodes.size() == 1) return show_op(nodes[0]);
    if (nodes.size() > 1) {
      err_ << "nns: error: '" << what << "' matches " << nodes.size() << " ops; show takes one:";
      for (size_t i = 0; i < nodes.size() && i < 8; ++i) err_ << (i ? ", " : " ") << g.node(nodes[i]).name;
      err_ << (nodes.size() > 8 ? ", ..." : "") << "\n";
      return false;
    }
  }
  err_ << "nns: error: no op or parameter named '" << what << "' ('ops' lists the ops; Tab completes names)\n";
  return false;
}

bool Session::show_op(int node) {
  const sema::Graph& g = interp_->graph();
  const sema::OpNode& n = g.node(node);
  out_ << n.name << ": " << n.kind << (n.composite ? " (composite op)" : "");
  if (n.loc.valid()) {
    const front::SourceFile& f = sources_->file(n.loc.file);
    out_ << ", called at " << f.path << ":" << n.loc.line << ":" << n.loc.col;
  }
  out_ << "\n";
  out_ << "  annotation  \"" << n.anno.anno.to_string() << "\"\n";
  std::string sizes;
  for (const auto& [id, size] : n.anno.sizes)
    if (!id.empty() && !std::isdigit(static_cast<unsigned char>(id[0]))) sizes += (sizes.empty() ? "" : ", ") + id + " = " + std::to_string(size);
  if (!sizes.empty()) out_ << "  sizes       " << sizes << "\n";
  out_ << "  inputs      " << operand_list(g, n.inputs) << "\n";
  out_ << "  outputs     " << operand_list(g, n.outputs) << "\n";
  out_ << "  partition   " << describe_partition(plan_, node, 16) << "\n";

  const sema::OpRow* row = n.composite ? nullptr : sema::find_op_row(n.kind);
  std::vector<sema::TransformChoice> space = sema::transform_space(n.anno, row && row->value_split);
  if (space.empty()) {
    out_ << "  transform space: empty — the op cannot be split; replicate() or assign() it whole\n";
    return true;
  }
  int root = plan_.root_of_node[node];
  bool fresh = plan_.subops[root].leaf() && plan_.subops[root].devices.empty();
  Plan base = fresh ? plan_ : unpartitioned(plan_, node);
  PlanFacts base_facts = fresh ? facts_ : analyse(base);
  int64_t num = plan_.ngpus;
  out_ << "  transform space: " << space.size() << " choice(s); each tried as trans(op, dim = ..., num = " << num
       << ") with part i on device i" << (fresh ? "" : ", starting from the op unpartitioned") << ":\n";
  for (const sema::TransformChoice& choice : space) {
    out_ << "    " << choice.describe() << "\n";
    std::string id = choice.kind == sema::TransformChoice::Value ? "value" : choice.id;
    std::string n_text = std::to_string(num);
    std::string text = "{\n  let __parts = trans(select(\"" + n.name + "\")[0], dim = \"" + id + "\", num = " + n_text + ")\n  for __i in 0.." +
                       n_text + " { assign(__parts[__i], __i) }\n}";
    Plan trial = base;
    bool ok = interp_->run_session_input("<show:" + std::to_string(++internal_inputs_) + ">", text, &trial, nullptr);
    if (!ok) {
      std::string why = diags_->all().empty() ? "refused" : diags_->all().front().message;
      diags_->clear();
      out_ << "      not possible with " << num << " device(s): " << why << "\n";
      continue;
    }
    PlanFacts trial_facts = analyse(trial);
    if (trial_facts.check.verdict == sema::check::Verdict::Illegal) {
      std::string why = trial_facts.check.diagnostics.empty() ? "a conflict" : trial_facts.check.diagnostics.front().message;
      out_ << "      refused by the Z3 checker: " << why << "\n";
      continue;
    }
    ChangeReport r = report_change(g, base, base_facts, trial, trial_facts, opts_.colour, /*list_ops=*/false);
    out_ << indent(r.text.substr(0, r.text.size() - (r.text.empty() ? 0 : 1)), "    ");
  }
  return true;
}

bool Session::show_tensor(int tensor) {
  const sema::Graph& g = interp_->graph();
  const sema::TensorInfo& t = g.tensor(tensor);
  out_ << t.name << ": " << (t.buffer ? "buffer" : t.kind == sema::TensorKind::Param ? "parameter" : "input") << " " << sema::dtype_name(t.dtype)
       << sema::shape_to_string(t.shape) << ", " << sema::format_bytes(t.bytes()) << ", init " << t.init.to_string() << "\n";
  Plan full = completed(plan_);
  std::string users;
  std::vector<std::vector<std::string>> held(static_cast<size_t>(plan_.ngpus));
  for (size_t n = 0; n < plan_.root_of_node.size(); ++n) {
    if (plan_.root_of_node[n] < 0) continue;
    const sema::OpNode& node = g.node(static_cast<int>(n));
    for (size_t k = 0; k < node.inputs.size(); ++k)
      if (node.inputs[k] == tensor) users += (users.empty() ? "" : ", ") + node.name;
  }
  for (int leaf : full.leaves()) {
    const sema::SubOp& s = full.subops[leaf];
    const sema::OpNode& node = g.node(s.node);
    for (size_t k = 0; k < node.inputs.size() && k < s.inputs.size(); ++k) {
      if (node.inputs[k] != tensor) continue;
      for (int d : s.devices) {
        if (d < 0 || d >= plan_.ngpus) continue;
        std::string slice = s.inputs[k].to_string();
        auto& list = held[static_cast<size_t>(d)];
        if (std::find(list.begin(), list.end(), slice) == list.end()) list.push_back(slice);
      }
    }
  }
  out_ << "  read by     " << (users.empty() ? "no op" : users) << "\n";
  for (size_t d = 0; d < held.size(); ++d) {
    out_ << "  device " << d << "    ";
    if (held[d].empty()) out_ << "-";
    for (size_t i = 0; i < held[d].size(); ++i) out_ << (i ? ", " : "") << held[d][i];
    out_ << "\n";
  }
  int unplaced = unplaced_leaves(plan_);
  if (unplaced) out_ << "  (sub-ops without a device counted as on every device)\n";
  return true;
}

// ---- status, comm ---------------------------------------------------------------------

bool Session::cmd_status(const Command& c) {
  if (!c.args.empty()) return usage("status");
  const sema::Graph& g = interp_->graph();
  sema::GraphSummary s = sema::summarize(g);
  size_t split = 0, total = 0;
  for (size_t n = 0; n < plan_.root_of_node.size(); ++n) {
    if (plan_.root_of_node[n] < 0) continue;
    ++total;
    if (!plan_.subops[plan_.root_of_node[n]].leaf()) ++split;
  }
  out_ << "model   " << (opts_.file.empty() ? std::string("(no file)") : opts_.file);
  if (!interp_->config_name().empty()) out_ << " (config " << interp_->config_name() << ")";
  out_ << ": " << total << " ops, " << sema::format_count(static_cast<double>(s.param_count)) << " parameters ("
       << sema::format_bytes(s.param_bytes) << ")\n";
  out_ << "plan    " << plan_.ngpus << " device(s): " << split << " op(s) partitioned, " << plan_.leaves().size() << " sub-op(s), "
       << unplaced_leaves(plan_) << " without a device, " << plan_.orders.size() << " order constraint(s); " << undo_.size()
       << " change(s) to undo\n";
  const CommSummary& comm = facts_.comm;
  if (!comm.error.empty()) out_ << "comm    cannot be derived: " << comm.error << "\n";
  else out_ << "comm    " << comm.collectives.size() << " collective(s) per step, " << sema::format_bytes(comm.bytes()) << " by the volume model\n";
  const std::vector<DeviceMemory>& mem = facts_.memory;
  // Runs of devices holding the same share one line (32 devices of a
  // data-parallel plan are one line, not 32).
  for (size_t d = 0; d < mem.size();) {
    size_t e = d + 1;
    auto same = [&](const DeviceMemory& a, const DeviceMemory& b) {
      return a.weights == b.weights && a.gradients == b.gradients && a.optimizer == b.optimizer && a.activations == b.activations;
    };
    while (e < mem.size() && same(mem[e], mem[d])) ++e;
    std::string who = e - d == 1 ? "device " + std::to_string(d) : "devices " + std::to_string(d) + ".." + std::to_string(e - 1) + " each";
    out_ << (d ? "        " : "memory  ") << who << ": " << sema::format_bytes(mem[d].total()) << " = weights " << sema::format_bytes(mem[d].weights)
         << " + gradients " << sema::format_bytes(mem[d].gradients) << " + optimizer " << sema::format_bytes(mem[d].optimizer)
         << " + activations " << sema::format_bytes(mem[d].activations) << "\n";
    d = e;
  }
  if (mem.empty()) out_ << "memory  not known: " << facts_.memory_unknown << "\n";
  out_ << verdict(plan_, facts_).substr(2);
  return true;
}

bool Session::cmd_comm(const Command& c) {
  if (!c.args.empty()) return usage("comm");
  int unplaced = unplaced_leaves(plan_);
  try {
    out_ << backend::derive_communication(interp_->graph(), completed(plan_)).dump(interp_->graph());
  } catch (const std::exception& e) {
    err_ << "nns: error: the communication cannot be derived: " << e.what() << "\n";
    return false;
  }
  if (unplaced) out_ << "(" << unplaced << " sub-op(s) without a device counted as on every device)\n";
  return true;
}

bool Session::cmd_schedule(const Command& c) {
  if (!c.args.empty()) return usage("schedule");
  if (!interp_->train()) {
    err_ << "nns: error: a schedule orders micro-batches, which the train block defines; this file has none\n";
    return false;
  }
  try {
    Plan full = completed(plan_);
    backend::CommPlan comm = backend::derive_communication(interp_->graph(), full);
    backend::LowerOptions lo;
    lo.comm = &comm;
    lo.communication_only = true;
    out_ << backend::schedule_text(interp_->graph(), full, backend::lower_plan(interp_->graph(), full, *interp_->train(), lo));
  } catch (const std::exception& e) {
    err_ << "nns: error: the schedule cannot be shown: " << e.what() << "\n";
    return false;
  }
  return true;
}

// ---- plan state -----------------------------------------------------------------------

bool Session::cmd_plan(const Command& c) {
  if (!c.args.empty() && c.args[0] == "search") return cmd_plan_search(c);
  if (c.args.size() > 1) return usage("plan");
  if (c.args.empty()) {
    out_ << plan_text("session");
    return true;
  }
  Plan p;
  bool ok = interp_->evaluate_plan(c.args[0], plan_.ngpus, p);
  if (!ok) {
    print_diagnostics();
    out_ << "  refused: the plan is unchanged\n";
    return false;
  }
  print_diagnostics();
  backend::choose_auto_orders(interp_->graph(), p);  // as nns check does
  p.name = "session";
  return set_plan(std::move(p), true, "plan " + c.args[0] + " for " + std::to_string(plan_.ngpus) + " device(s)", /*refuse_illegal=*/true);
}

bool Session::cmd_undo(const Command& c) {
  long long n = 1;
  if (c.args.size() > 1 || (c.args.size() == 1 && (!parse_count(c.args[0], n) || n < 1))) return usage("undo");
  if (undo_.empty()) {
    err_ << "nns: error: nothing to undo\n";
    return false;
  }
  n = std::min<long long>(n, static_cast<long long>(undo_.size()));
  Plan target = undo_[undo_.size() - static_cast<size_t>(n)];
  undo_.resize(undo_.size() - static_cast<size_t>(n));
  set_plan(std::move(target), false, "undone " + std::to_string(n) + " change(s); " + std::to_string(undo_.size()) + " left to undo");
  return true;
}

bool Session::cmd_reset(const Command& c) {
  if (!c.args.empty()) return usage("reset");
  set_plan(interp_->new_plan("session", plan_.ngpus), true, "reset: every op whole and without a device (undo brings the plan back)");
  return true;
}

bool Session::cmd_gpus(const Command& c) {
  if (c.args.size() > 1) return usage("gpus");
  if (c.args.empty()) {
    out_ << plan_.ngpus << " device(s)\n";
    return true;
  }
  long long n = 0;
  if (!parse_count(c.args[0], n) || n < 1 || n > 4096) return usage("gpus");
  if (n == plan_.ngpus) {
    out_ << "  the plan spreads over " << n << " device(s) already\n";
    return true;
  }
  set_plan(interp_->new_plan("session", n), true, "a new plan for " + std::to_string(n) + " device(s), ngpus = " + std::to_string(n) +
                                                       " (undo goes back)");
  return true;
}

// ---- save, run --------------------------------------------------------------------------

bool Session::write_runnable(const std::string& path, const std::string& plan_name, bool plan_only, std::string& error,
                             const std::string* body) const {
  std::string text;
  if (!plan_only && !opts_.file.empty()) {
    std::ifstream in(opts_.file, std::ios::binary);
    if (!in) {
      error = "cannot read the model file '" + opts_.file + "'";
      return false;
    }
    std::ostringstream buf;
    buf << in.rdbuf();
    text = buf.str();
    if (!text.empty() && text.back() != '\n') text += "\n";
    text += "\n# ---- plan " + plan_name + ": made in nns repl for " + std::to_string(plan_.ngpus) + " device(s)" +
            (interp_->config_name().empty() ? std::string() : ", config " + interp_->config_name()) + " ----\n";
  }
  text += body ? *body : plan_text(plan_name);
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out || !(out << text) || !(out.flush())) {
    error = "cannot write '" + path + "'";
    return false;
  }
  return true;
}

bool Session::cmd_save(const Command& c) {
  if (c.args.empty() || c.args.size() > 2) return usage("save");
  bool plan_only = false;
  std::string path;
  for (const std::string& a : c.args) {
    if (a == "--plan-only") plan_only = true;
    else if (path.empty() && !a.empty() && a[0] != '-') path = a;
    else return usage("save");
  }
  if (path.empty()) return usage("save");
  std::string name = unique_plan_name(), error, why_pinned;
  int unplaced = unplaced_leaves(plan_);
  // Parametric in ngpus where the plan's directives allow it (checked by
  // evaluating it again); else pinned, saying which directive pins it.
  std::string parametric = unplaced ? std::string() : parametric_plan(name, why_pinned);
  if (!write_runnable(path, name, plan_only, error, parametric.empty() ? nullptr : &parametric)) {
    err_ << "nns: error: " << error << "\n";
    return false;
  }
  if (!parametric.empty())
    out_ << "saved plan " << name << " for any device count (parametric in ngpus; checked at " << plan_.ngpus << " and "
         << (plan_.ngpus == 2 ? 4 : 2) << ") to " << path;
  else
    out_ << "saved plan " << name << " for " << plan_.ngpus << " device(s) to " << path;
  if (plan_only || opts_.file.empty()) {
    out_ << " (the plan block only)\n";
  } else {
    out_ << " (" << opts_.file << " with the plan appended)\n  check it: nns check " << path
         << (interp_->config_name().empty() ? "" : " --config " + interp_->config_name()) << " --plan " << name << " --gpus "
         << plan_.ngpus << " --emit=comm\n";
    std::error_code ec;
    bool same_dir = fs::equivalent(fs::absolute(path).parent_path(), fs::absolute(opts_.file).parent_path(), ec);
    std::ifstream in(opts_.file);
    std::string src((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (!same_dir && (src.find("import \"./") != std::string::npos || src.find("import \"../") != std::string::npos))
      out_ << "  note: " << opts_.file << " imports files by relative path; keep " << path << " in its folder\n";
  }
  if (!why_pinned.empty()) out_ << "  note: pinned to " << plan_.ngpus << " device(s): " << why_pinned << "\n";
  if (unplaced)
    out_ << "  note: " << unplaced << " sub-op(s) have no device yet: the saved plan is refused until they do "
         << "(e.g. replicate(unassigned(), 0..ngpus))\n";
  return true;
}

bool Session::cmd_run(const Command& c) {
  long long steps = 0;
  bool verify = false;
  bool have_steps = false;
  for (const std::string& a : c.args) {
    if (a == "--verify") verify = true;
    else if (!have_steps && parse_count(a, steps) && steps >= 1) have_steps = true;
    else return usage("run");
  }
  if (!have_steps) return usage("run");
  if (opts_.file.empty() || !interp_->train()) {
    err_ << "nns: error: run trains the model file's train block; " << (opts_.file.empty() ? "this session has no model file" : opts_.file + " has none")
         << "\n";
    return false;
  }
  int unplaced = unplaced_leaves(plan_);
  if (unplaced) {
    err_ << "nns: error: the plan leaves " << unplaced << " sub-op(s) without a device; place them first (e.g. replicate(unassigned(), 0..ngpus))\n";
    return false;
  }
  std::string gpus = std::to_string(plan_.ngpus);
  std::vector<std::string> config;
  if (!interp_->config_name().empty()) config = {"--config", interp_->config_name()};
  // The runnable copy (model + plan) lives beside the model file so its
  // imports resolve as the original's do; the temp folder if that is not writable.
  std::string plan_name = unique_plan_name(), error;
  static int runs = 0;
  std::string leaf = ".nns_repl_" + std::to_string(getpid()) + "_" + std::to_string(++runs) + ".nns";
  std::string temp = (fs::absolute(opts_.file).parent_path() / leaf).string();
  if (!write_runnable(temp, plan_name, false, error)) {
    temp = (fs::temp_directory_path() / leaf).string();
    if (!write_runnable(temp, plan_name, false, error)) {
      err_ << "nns: error: " << error << "\n";
      return false;
    }
  }
  struct Remove {
    std::string path;
    ~Remove() { std::remove(path.c_str()); }
  } remove{temp};

  std::vector<std::string> argv = {opts_.nns_binary, "run", temp, "--plan", plan_name};
  out_ << "running the session plan on " << gpus << " CPU rank(s), " << steps << " step(s)" << (verify ? ", verified against one device" : "")
       << ": nns run " << opts_.file << " --plan <session plan> --gpus " << gpus << " --steps " << steps << (verify ? " --verify" : "") << "\n";
  argv.insert(argv.end(), {"--gpus", gpus, "--steps", std::to_string(steps)});
  argv.insert(argv.end(), config.begin(), config.end());
  if (verify) argv.push_back("--verify");
  out_.flush();
  ChildResult r = run_child(argv, "", /*capture=*/false);
  if (!r.started) {
    err_ << "nns: error: cannot start " << opts_.nns_binary << ": " << r.captured << "\n";
    return false;
  }
  if (r.interrupted) {
    out_ << "  run interrupted (Ctrl-C); the session goes on\n";
    return false;
  }
  if (r.exit_code != 0) {
    err_ << "nns: error: the run failed (exit " << r.exit_code << ")\n";
    return false;
  }
  return true;
}

}  // namespace nns::repl
