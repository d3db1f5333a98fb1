// Ranks started by torchrun, srun or mpirun: which variables nns reads, in
// which order, and what it says when they are malformed (launch_env.h).
#include <catch2/catch.hpp>

#include <map>
#include <string>

#include "backend/runtime/comm/launch_env.h"

using namespace nns::backend;

namespace {

struct FakeEnv {
  std::map<std::string, std::string> vars;
  EnvLookup lookup() const {
    return [this](const char* name) -> const char* {
      auto it = vars.find(name);
      return it == vars.end() ? nullptr : it->second.c_str();
    };
  }
};

LaunchEnv detect_ok(const FakeEnv& e) {
  LaunchEnv out;
  std::string err;
  INFO(err);
  REQUIRE(detect_launch_env(e.lookup(), out, err));
  return out;
}

std::string detect_err(const FakeEnv& e) {
  LaunchEnv out;
  std::string err;
  REQUIRE_FALSE(detect_launch_env(e.lookup(), out, err));
  return err;
}

}  // namespace

TEST_CASE("no launcher variables: one local rank", "[launch_env]") {
  LaunchEnv l = detect_ok(FakeEnv{});
  CHECK(l.source.empty());
  CHECK(l.rank == 0);
  CHECK(l.world_size == 1);
  CHECK(l.local_world_size == 1);
}

TEST_CASE("torchrun's variables", "[launch_env]") {
  FakeEnv e{{{"RANK", "5"}, {"WORLD_SIZE", "16"}, {"LOCAL_RANK", "1"}, {"LOCAL_WORLD_SIZE", "4"},
             {"MASTER_ADDR", "node0"}, {"MASTER_PORT", "1234"}}};
  LaunchEnv l = detect_ok(e);
  CHECK(l.source == "torchrun");
  CHECK(l.rank == 5);
  CHECK(l.world_size == 16);
  CHECK(l.local_rank == 1);
  CHECK(l.local_world_size == 4);
  CHECK(l.master_addr == "node0");
  CHECK(l.master_port == 1234);
  // nns's own variables win over torchrun's.
  e.vars["NNS_RANK"] = "2";
  e.vars["NNS_WORLD_SIZE"] = "3";
  e.vars["NNS_MASTER_ADDR"] = "other";
  l = detect_ok(e);
  CHECK(l.source == "nns");
  CHECK(l.rank == 2);
  CHECK(l.world_size == 3);
  CHECK(l.master_addr == "other");
  CHECK(l.master_port == 29500);  // MASTER_PORT is torchrun's, not read for nns's own launch
}

TEST_CASE("Slurm's variables inside a job step", "[launch_env]") {
  FakeEnv e{{{"SLURM_PROCID", "9"}, {"SLURM_NTASKS", "12"}, {"SLURM_LOCALID", "1"}, {"SLURM_STEP_ID", "0"},
             {"SLURM_NODEID", "2"}, {"SLURM_TASKS_PER_NODE", "4(x2),2(x2)"},
             {"SLURM_JOB_NODELIST", "gpu[007-010,012],login1"}}};
  LaunchEnv l = detect_ok(e);
  CHECK(l.source == "slurm");
  CHECK(l.rank == 9);
  CHECK(l.world_size == 12);
  CHECK(l.local_rank == 1);
  CHECK(l.local_world_size == 2);  // node 2 is the first of the "2(x2)" nodes
  CHECK(l.master_addr == "gpu007");
  CHECK(l.master_port == 29500);
  e.vars["SLURM_NTASKS_PER_NODE"] = "3";
  CHECK(detect_ok(e).local_world_size == 3);
  e.vars["MASTER_PORT"] = "40000";
  CHECK(detect_ok(e).master_port == 40000);
  e.vars["NNS_MASTER_ADDR"] = "10.0.0.7";
  CHECK(detect_ok(e).master_addr == "10.0.0.7");
}

TEST_CASE("a Slurm batch script is not a rank", "[launch_env]") {
  // sbatch runs the script with SLURM_PROCID=0 and the job's task count but
  // no job step: `nns run --gpus 4` there launches its own ranks.
  FakeEnv e{{{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "8"}, {"SLURM_JOB_NODELIST", "n[1-2]"}}};
  CHECK(detect_ok(e).source.empty());
}

TEST_CASE("Open MPI's variables", "[launch_env]") {
  FakeEnv e{{{"OMPI_COMM_WORLD_RANK", "3"}, {"OMPI_COMM_WORLD_SIZE", "4"}, {"OMPI_COMM_WORLD_LOCAL_RANK", "3"},
             {"OMPI_COMM_WORLD_LOCAL_SIZE", "4"}}};
  LaunchEnv l = detect_ok(e);
  CHECK(l.source == "openmpi");
  CHECK(l.rank == 3);
  CHECK(l.master_addr == "127.0.0.1");  // one host: rank 0 is here
  // Across hosts Open MPI names no master: the user must.
  e.vars["OMPI_COMM_WORLD_LOCAL_SIZE"] = "2";
  e.vars["OMPI_COMM_WORLD_LOCAL_RANK"] = "1";  // rank 3 is the second of its host's two
  CHECK(detect_err(e).find("set NNS_MASTER_ADDR") != std::string::npos);
  e.vars["NNS_MASTER_ADDR"] = "head";
  CHECK(detect_ok(e).master_addr == "head");
}

TEST_CASE("malformed launcher variables are errors that name them", "[launch_env]") {
  CHECK(detect_err(FakeEnv{{{"RANK", "x"}, {"WORLD_SIZE", "2"}}}).find("RANK='x'") != std::string::npos);
  CHECK(detect_err(FakeEnv{{{"RANK", "2"}, {"WORLD_SIZE", "2"}}}).find("rank 2 is outside a world of 2") !=
        std::string::npos);
  CHECK(detect_err(FakeEnv{{{"RANK", "-1"}, {"WORLD_SIZE", "2"}}}).find("not a non-negative integer") !=
        std::string::npos);
  CHECK(detect_err(FakeEnv{{{"NNS_RANK", "0"}, {"NNS_WORLD_SIZE", "2"}, {"NNS_MASTER_PORT", "70000"}}})
            .find("not a TCP port") != std::string::npos);
  CHECK(detect_err(FakeEnv{{{"NNS_LAUNCHER", "slurm"}}}).find("NNS_LAUNCHER") != std::string::npos);
  CHECK(detect_err(FakeEnv{{{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}, {"SLURM_STEP_ID", "0"},
                            {"SLURM_JOB_NODELIST", "n[x]"}}})
            .find("first host") != std::string::npos);
}

TEST_CASE("NNS_LAUNCHER=local ignores the foreign launchers only", "[launch_env]") {
  FakeEnv e{{{"NNS_LAUNCHER", "local"}, {"RANK", "1"}, {"WORLD_SIZE", "2"}}};
  CHECK(detect_ok(e).source.empty());
  // The ranks nns forks itself still read their NNS_* variables.
  e.vars["NNS_RANK"] = "1";
  e.vars["NNS_WORLD_SIZE"] = "2";
  CHECK(detect_ok(e).source == "nns");
}

TEST_CASE("first host of a Slurm node list", "[launch_env]") {
  CHECK(slurm_first_host("node[003-010,012],gpu7") == "node003");
  CHECK(slurm_first_host("a[1-2]-b[07-08]") == "a1-b07");
  CHECK(slurm_first_host("host1,host2") == "host1");
  CHECK(slurm_first_host("solo") == "solo");
  CHECK(slurm_first_host("") == "");
  CHECK(slurm_first_host("n[") == "");
  CHECK(slurm_first_host("n]") == "");
}

TEST_CASE("launch numbers are digits only and consistent; NNS_* values in range", "[launch_env]") {
  CHECK(detect_err(FakeEnv{{{"RANK", " 1"}, {"WORLD_SIZE", "2"}}}).find("RANK=' 1' is not a non-negative integer") !=
        std::string::npos);
  CHECK(detect_err(FakeEnv{{{"RANK", "0"}, {"WORLD_SIZE", "100000"}}}).find("more than the 65536 ranks") !=
        std::string::npos);
  CHECK(detect_err(FakeEnv{{{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", "99"}, {"LOCAL_WORLD_SIZE", "2"}}})
            .find("local rank 99 of 2") != std::string::npos);
  CHECK(
      detect_err(FakeEnv{{{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"LOCAL_WORLD_SIZE", "0"}}}).find("local rank 0 of 0") !=
      std::string::npos);
  CHECK(detect_err(FakeEnv{{{"NNS_BIND", "2"}}}).find("NNS_BIND='2': expected 0 or 1") != std::string::npos);
  CHECK(detect_err(FakeEnv{{{"NNS_COMM_SPIN_US", "abc"}}}).find("NNS_COMM_SPIN_US='abc'") != std::string::npos);
  CHECK(detect_err(FakeEnv{{{"NNS_THREADS", "-1"}}}).find("NNS_THREADS='-1'") != std::string::npos);
  CHECK(detect_err(FakeEnv{{{"NNS_COMM_TIMEOUT", "nan"}}}).find("NNS_COMM_TIMEOUT='nan'") != std::string::npos);
  // Multi-host without a local rank variable: the global rank is not checked against the host's count.
  CHECK(
      detect_ok(FakeEnv{{{"RANK", "5"}, {"WORLD_SIZE", "8"}, {"LOCAL_WORLD_SIZE", "4"}, {"MASTER_ADDR", "h"}}}).rank ==
      5);
  CHECK(detect_ok(FakeEnv{{{"NNS_THREADS", "4"}, {"NNS_BIND", "0"}, {"NNS_COMM_TIMEOUT", "2.5"}}}).source.empty());
}
