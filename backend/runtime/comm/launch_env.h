// Where a rank started by someone else's launcher learns who it is.
//
// `nns run --gpus N` forks its own N ranks (launcher.h). On clusters users
// start one process per device with the launcher they already use for
// PyTorch, and nns reads the same variables those set:
//
//   source   rank                 world size            local rank / ranks on this host       master
//   nns      NNS_RANK             NNS_WORLD_SIZE        NNS_LOCAL_RANK / NNS_LOCAL_WORLD_SIZE  NNS_MASTER_ADDR, NNS_MASTER_PORT
//   torchrun RANK                 WORLD_SIZE            LOCAL_RANK / LOCAL_WORLD_SIZE          MASTER_ADDR, MASTER_PORT
//   slurm    SLURM_PROCID         SLURM_NTASKS          SLURM_LOCALID / SLURM_NTASKS_PER_NODE  first host of SLURM_JOB_NODELIST
//                                                        (or SLURM_TASKS_PER_NODE's first count)
//   openmpi  OMPI_COMM_WORLD_RANK OMPI_COMM_WORLD_SIZE  OMPI_COMM_WORLD_LOCAL_RANK / _LOCAL_SIZE (none: see below)
//
// The first source whose rank and world size are both set wins, in that
// order. Slurm counts only inside a job step (SLURM_STEP_ID set: a task of
// `srun`), so a batch script that calls `nns run --gpus 4` itself still
// launches locally. The master port is NNS_MASTER_PORT, else MASTER_PORT,
// else 29500, for every source. Open MPI has no master address: it is
// NNS_MASTER_ADDR or MASTER_ADDR, else 127.0.0.1 when every rank is on this
// host (local size = world size), else an error that says what to set
// (`mpirun -x NNS_MASTER_ADDR=<host of rank 0>`). NNS_LAUNCHER=local ignores
// torchrun's, Slurm's and Open MPI's variables (nns launches its own ranks).
#pragma once

#include <functional>
#include <string>

namespace nns::backend {

struct LaunchEnv {
  std::string source;  // "nns", "torchrun", "slurm", "openmpi"; empty: none found
  int rank = 0, world_size = 1;
  int local_rank = 0, local_world_size = 1;  // ranks sharing this host's cores
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  // The variables it was read from, for messages ("RANK=1 WORLD_SIZE=4 ...").
  std::string described;
};

// Reads a variable; returns nullptr when unset. Tests pass a map's lookup.
using EnvLookup = std::function<const char*(const char* name)>;
EnvLookup process_env();

// Fills `out` from the first launcher whose variables are present; returns
// false with `err` when they are present but malformed (a rank outside the
// world, a non-number, Open MPI across hosts without a master address).
// Without any launcher's variables: true, out.source empty, one rank.
bool detect_launch_env(const EnvLookup& env, LaunchEnv& out, std::string& err);

// The first host of a Slurm node list in its compressed form:
// "node[003-010,012],gpu7" -> "node003"; "a[1-2]-b[07-08]" -> "a1-b07";
// "host1,host2" -> "host1". Empty for an empty or malformed list.
std::string slurm_first_host(const std::string& nodelist);

}  // namespace nns::backend
