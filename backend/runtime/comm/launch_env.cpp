#include "backend/runtime/comm/launch_env.h"

#include "backend/runtime/comm/env_vars.h"

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <vector>

namespace nns::backend {

EnvLookup process_env() {
  return [](const char* name) -> const char* { return std::getenv(name); };
}

namespace {

const char* get(const EnvLookup& env, const char* name) {
  const char* v = env(name);
  return v && *v ? v : nullptr;
}

// A whole non-negative decimal number that fits an int: digits only, so
// RANK=" 1" or "1e3" is refused rather than read as a number.
bool to_int(const char* text, int& out) {
  int64_t v = 0;
  if (!parse_strict_int(text, v) || v < 0 || v > INT_MAX) return false;
  out = static_cast<int>(v);
  return true;
}

// The most ranks of one job (the launcher's --gpus allows the same).
constexpr int kMaxWorld = 65536;

// One launcher's names for the four numbers.
struct Names {
  const char* source;
  const char *rank, *world, *local_rank, *local_world;
};

// SLURM_TASKS_PER_NODE ("2(x3),1": 2 tasks on each of 3 nodes, then 1):
// the count of node `node`; -1 when malformed or out of range.
int slurm_tasks_on_node(const std::string& spec, int node) {
  size_t i = 0;
  int seen = 0;
  while (i < spec.size()) {
    size_t j = i;
    while (j < spec.size() && isdigit(static_cast<unsigned char>(spec[j]))) ++j;
    if (j == i) return -1;
    int count = std::atoi(spec.substr(i, j - i).c_str());
    int repeat = 1;
    if (j < spec.size() && spec[j] == '(') {
      if (spec.compare(j, 2, "(x") != 0) return -1;
      size_t k = j + 2, start = k;
      while (k < spec.size() && isdigit(static_cast<unsigned char>(spec[k]))) ++k;
      if (k == start || k >= spec.size() || spec[k] != ')') return -1;
      repeat = std::atoi(spec.substr(start, k - start).c_str());
      j = k + 1;
    }
    if (node < seen + repeat) return count;
    seen += repeat;
    if (j < spec.size() && spec[j] != ',') return -1;
    i = j + 1;
  }
  return -1;
}

}  // namespace

std::string slurm_first_host(const std::string& nodelist) {
  // The first host ends at the first comma outside brackets; inside it each
  // bracket group contributes its first number as written (zero padding kept).
  std::string host;
  size_t i = 0;
  while (i < nodelist.size() && nodelist[i] != ',') {
    char c = nodelist[i];
    if (c == '[') {
      size_t close = nodelist.find(']', i);
      if (close == std::string::npos) return "";
      std::string group = nodelist.substr(i + 1, close - i - 1);
      size_t k = 0;
      while (k < group.size() && isdigit(static_cast<unsigned char>(group[k]))) ++k;
      if (k == 0) return "";
      host += group.substr(0, k);
      i = close + 1;
    } else if (c == ']') {
      return "";
    } else {
      host += c;
      ++i;
    }
  }
  return host;
}

bool detect_launch_env(const EnvLookup& env, LaunchEnv& out, std::string& err) {
  out = LaunchEnv{};
  if (std::string bad = check_nns_variables(env); !bad.empty()) {
    err = bad;
    return false;
  }
  bool foreign = true;  // NNS_LAUNCHER=local: nns's own variables only
  if (const char* l = get(env, "NNS_LAUNCHER")) {
    if (std::string(l) != "local") {
      err = std::string("bad value for NNS_LAUNCHER: '") + l + "' (the only value is 'local')";
      return false;
    }
    foreign = false;
  }
  static const Names kSources[] = {
      {"nns", "NNS_RANK", "NNS_WORLD_SIZE", "NNS_LOCAL_RANK", "NNS_LOCAL_WORLD_SIZE"},
      {"torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"},
      {"slurm", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_NTASKS_PER_NODE"},
      {"openmpi", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
       "OMPI_COMM_WORLD_LOCAL_SIZE"},
  };
  const Names* src = nullptr;
  for (const Names& n : kSources) {
    if (!get(env, n.rank) || !get(env, n.world)) continue;
    if (!foreign && std::string(n.source) != "nns") continue;
    // A batch script has SLURM_PROCID=0 and the job's task count but is not
    // one of the tasks: only a job step's tasks are ranks.
    if (std::string(n.source) == "slurm" && !get(env, "SLURM_STEP_ID") && !get(env, "SLURM_STEPID")) continue;
    src = &n;
    break;
  }
  if (!src) return true;
  out.source = src->source;
  auto describe = [&](const char* name) {
    if (const char* v = get(env, name)) out.described += (out.described.empty() ? "" : " ") + std::string(name) + "=" + v;
  };
  auto number = [&](const char* name, int& value) {
    if (to_int(get(env, name), value)) return true;
    err = std::string(src->source) + " launch: " + name + "='" + env(name) +
          "' is not a non-negative integer (digits only)";
    return false;
  };
  for (const char* name : {src->rank, src->world, src->local_rank, src->local_world}) describe(name);
  if (!number(src->rank, out.rank) || !number(src->world, out.world_size)) return false;
  if (out.world_size > kMaxWorld) {
    err = std::string(src->source) + " launch: " + src->world + "=" + std::to_string(out.world_size) +
          " is more than the " + std::to_string(kMaxWorld) + " ranks nns runs (" + out.described + ")";
    return false;
  }
  if (out.world_size < 1 || out.rank >= out.world_size) {
    err = std::string(src->source) + " launch: rank " + std::to_string(out.rank) + " is outside a world of " +
          std::to_string(out.world_size) + " (" + out.described + ")";
    return false;
  }
  // Ranks on this host: the launcher's count, else (Slurm) this node's entry
  // of SLURM_TASKS_PER_NODE, else the whole world (one host).
  out.local_world_size = out.world_size;
  out.local_rank = out.rank;
  if (get(env, src->local_world)) {
    if (!number(src->local_world, out.local_world_size)) return false;
  } else if (out.source == "slurm" && get(env, "SLURM_TASKS_PER_NODE")) {
    int node = 0;
    if (const char* id = get(env, "SLURM_NODEID"); id && !to_int(id, node)) node = 0;
    int n = slurm_tasks_on_node(get(env, "SLURM_TASKS_PER_NODE"), node);
    if (n > 0) out.local_world_size = n;
    describe("SLURM_TASKS_PER_NODE");
  }
  if (get(env, src->local_rank) && !number(src->local_rank, out.local_rank)) return false;
  // Without a local rank variable the local rank defaults to the global one,
  // which may exceed this host's count on a multi-host launch: checked only
  // when the launcher named it.
  const bool local_rank_given = get(env, src->local_rank) != nullptr;
  if (out.local_world_size < 1 || out.local_world_size > out.world_size ||
      (local_rank_given && out.local_rank >= out.local_world_size)) {
    err = std::string(src->source) + " launch: local rank " + std::to_string(out.local_rank) + " of " +
          std::to_string(out.local_world_size) + " on this host does not fit a world of " +
          std::to_string(out.world_size) + " (" + out.described + ")";
    return false;
  }

  // The master: the rendezvous store rank 0 serves.
  const char* addr = get(env, "NNS_MASTER_ADDR");
  if (!addr && out.source != "nns") addr = get(env, "MASTER_ADDR");
  std::string first_host;
  if (!addr && out.source == "slurm") {
    const char* list = get(env, "SLURM_JOB_NODELIST");
    if (!list) list = get(env, "SLURM_NODELIST");
    if (list) first_host = slurm_first_host(list);
    if (first_host.empty()) {
      err = std::string("slurm launch: cannot find the first host of SLURM_JOB_NODELIST='") + (list ? list : "") +
            "'; set NNS_MASTER_ADDR to rank 0's host";
      return false;
    }
    addr = first_host.c_str();
  }
  if (addr) {
    out.master_addr = addr;
  } else if (out.local_world_size < out.world_size) {
    err = std::string(src->source) + " launch across hosts (" + out.described +
          ") needs the address of rank 0's host: set NNS_MASTER_ADDR (mpirun -x NNS_MASTER_ADDR=HOST)";
    return false;
  }
  const char* port = get(env, "NNS_MASTER_PORT");
  const char* port_name = "NNS_MASTER_PORT";
  if (!port && out.source != "nns") {
    port = get(env, "MASTER_PORT");
    port_name = "MASTER_PORT";
  }
  if (port) {
    int p = 0;
    if (!to_int(port, p) || p < 1 || p > 65535) {
      err = std::string(port_name) + "='" + port + "' is not a TCP port (1-65535)";
      return false;
    }
    out.master_port = p;
  }
  return true;
}

}  // namespace nns::backend
