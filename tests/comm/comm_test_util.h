// Helpers for tests that run inside forked ranks. Catch2 assertions cannot
// report from a child process, so rank code checks with RANK_CHECK (which
// throws; the launcher prints the message with the rank prefix and the
// rank exits 70) and the parent test REQUIREs the launcher's status.
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "backend/runtime/comm/communicator.h"
#include "backend/runtime/comm/launcher.h"

namespace nns::comm_test {

#define RANK_CHECK(cond, msg)                                                                           \
  do {                                                                                                  \
    if (!(cond)) {                                                                                      \
      std::ostringstream rank_check_os_;                                                                \
      rank_check_os_ << __FILE__ << ":" << __LINE__ << ": check failed: " #cond ": " << msg;          \
      throw std::runtime_error(rank_check_os_.str());                                                   \
    }                                                                                                   \
  } while (0)

// Small integers and halves: every sum the tests form is exact in fp32, so
// results are compared with ==.
inline float value(int rank, size_t i, int salt = 0) {
  return static_cast<float>((rank + 1) * 0.5 + static_cast<double>((i * 7 + salt) % 101));
}

inline std::vector<float> filled(int rank, size_t n, int salt = 0) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = value(rank, i, salt);
  return v;
}

inline void expect_equal(const std::vector<float>& got, const std::vector<float>& want, const std::string& what) {
  RANK_CHECK(got.size() == want.size(), what << ": size " << got.size() << " != " << want.size());
  for (size_t i = 0; i < got.size(); ++i)
    RANK_CHECK(got[i] == want[i], what << ": element " << i << " is " << got[i] << ", expected " << want[i]);
}

// A communicator configured by the launcher's environment.
inline std::unique_ptr<backend::Communicator> env_comm(std::chrono::milliseconds timeout = std::chrono::seconds(20)) {
  auto cfg = backend::CommConfig::from_env();
  cfg.timeout = timeout;
  return std::make_unique<backend::Communicator>(cfg);
}

inline double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

// Redirects this process's fd (1 or 2) to a file while alive; forked
// ranks inherit the redirection, so their output lands there too.
class CaptureFd {
 public:
  CaptureFd(int fd, const std::string& path) : fd_(fd), path_(path) {
    fflush(nullptr);
    saved_ = ::dup(fd);
    int f = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ::dup2(f, fd);
    ::close(f);
  }
  ~CaptureFd() { restore(); }
  std::string text() {
    restore();
    std::ifstream in(path_);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }

 private:
  void restore() {
    if (saved_ < 0) return;
    fflush(nullptr);
    ::dup2(saved_, fd_);
    ::close(saved_);
    saved_ = -1;
  }
  int fd_, saved_ = -1;
  std::string path_;
};

inline std::string make_temp_dir() {
  char tmpl[] = "/tmp/nns_comm_test_XXXXXX";
  const char* d = ::mkdtemp(tmpl);
  if (!d) throw std::runtime_error("mkdtemp failed");
  return d;
}

inline std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

inline void write_file(const std::string& path, const std::string& text) {
  std::ofstream(path) << text;
}

}  // namespace nns::comm_test
