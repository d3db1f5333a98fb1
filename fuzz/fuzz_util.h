// Shared by the fuzz targets (fuzz/README.md): what counts as a finding.
// Bad input must end in the project's own diagnostics (a DiagnosticEngine
// error, a DimopError, a SafetensorsError: exit 64/65 in the CLI); anything
// the CLI would call an internal error (exit 70: an exception escaping to
// main) aborts here, so libFuzzer records the input as a crash.
#pragma once

#include <stdlib.h>

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <iostream>
#include <streambuf>
#include <string>

namespace nns::fuzz {

// Swallows what the stages print (diagnostics, print() of the language):
// writing it would cost more than running most inputs. NNS_FUZZ_VERBOSE=1
// keeps it, to see the diagnostics of one input being reproduced.
inline void silence_streams() {
  static struct Null : std::streambuf {
    int overflow(int c) override { return c == EOF ? 0 : c; }
    std::streamsize xsputn(const char*, std::streamsize n) override { return n; }
  } null;
  const char* v = std::getenv("NNS_FUZZ_VERBOSE");
  if (v && *v && std::string(v) != "0") return;
  std::cout.rdbuf(&null);
  std::cerr.rdbuf(&null);
}

[[noreturn]] inline void internal_error(const char* target, const std::string& what) {
  std::fprintf(stderr, "%s: internal error (exit 70 in the CLI): %s\n", target, what.c_str());
  std::fflush(stderr);
  std::abort();
}

// The one file a target hands its input to the code under test through
// (the readers take paths, as every caller gives them one): NAME in a
// private temporary folder under $TMPDIR, made once, removed at exit.
class InputFile {
 public:
  InputFile(const char* target, const char* name) : target_(target), name_(name) {}

  // Makes the folder; call from LLVMFuzzerInitialize.
  void create() {
    const char* tmp = std::getenv("TMPDIR");
    std::string pattern = std::string(tmp && *tmp ? tmp : "/tmp") + "/nns_" + target_ + ".XXXXXX";
    if (!::mkdtemp(pattern.data())) {
      std::perror((std::string(target_) + ": mkdtemp").c_str());
      std::abort();
    }
    dir() = pattern;
    path_ = pattern + "/" + name_;
    std::atexit([] {
      std::error_code ec;
      std::filesystem::remove_all(dir(), ec);
    });
  }

  // Replaces the file's content with `size` bytes at `data`.
  void write(const void* data, size_t size) const {
    std::FILE* f = std::fopen(path_.c_str(), "wb");
    if (!f || std::fwrite(data, 1, size, f) != size || std::fclose(f) != 0) {
      std::perror((std::string(target_) + ": writing the input").c_str());
      std::abort();
    }
  }

  const std::string& path() const { return path_; }

 private:
  // One folder per process (each target makes one InputFile), reachable
  // from the atexit handler, which cannot capture.
  static std::string& dir() {
    static std::string d;
    return d;
  }
  const char* target_;
  const char* name_;
  std::string path_;
};

// Runs `body`; an exception other than the expected kinds is a finding.
template <typename F>
void run_guarded(const char* target, F&& body) {
  try {
    body();
  } catch (const std::exception& e) {
    internal_error(target, e.what());
  } catch (...) {
    internal_error(target, "unknown exception");
  }
}

}  // namespace nns::fuzz
