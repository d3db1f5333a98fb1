// The files nns reads and writes, against a hostile folder: a FIFO or a
// device where a regular file belongs (refused at once, never waited on), a
// symlink planted under a temporary's name (never written through), a
// device node as an output (never replaced), a symlinked step-* folder in a
// save folder (its target never cleaned).
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "backend/runtime/atomic_file.h"
#include "backend/runtime/checkpoint_store.h"
#include "backend/runtime/safetensors.h"
#include "frontend/regular_file.h"
#include "temp_dir.h"

using namespace nns::backend;
namespace fs = std::filesystem;

using nns::backend::test::slurp;
using nns::backend::test::TempDir;

TEST_CASE("file safety: FIFOs and devices are refused without blocking", "[backend][file_safety]") {
  TempDir dir;
  const std::string fifo = dir.file("pipe");
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);  // no writer: a blocking open would hang here
  std::string why, text;
  CHECK(nns::front::open_regular_file(fifo, why) == -1);
  CHECK(why == "not a regular file (a FIFO)");
  CHECK_FALSE(nns::front::read_regular_file("/dev/zero", text, why));
  CHECK(why.find("character device") != std::string::npos);
  CHECK_THROWS_WITH(read_safetensors(fifo), Catch::Contains("not a regular file (a FIFO)"));
  // A shard linked to /dev/urandom counts as unreadable, not as endless data.
  fs::create_symlink("/dev/urandom", dir.file("shard"));
  int64_t bytes = 0;
  file_checksum(dir.file("shard"), bytes);
  CHECK(bytes == -1);
  // Bounded: a file larger than the caller allows is refused before reading.
  std::ofstream(dir.file("big")) << std::string(100, 'x');
  CHECK_FALSE(nns::front::read_regular_file(dir.file("big"), text, why, 10));
  CHECK(nns::front::read_regular_file(dir.file("big"), text, why, 100));
  CHECK(text.size() == 100);
}

TEST_CASE("file safety: a planted symlink under a temporary's name is never written through",
          "[backend][file_safety]") {
  TempDir dir;
  const std::string target = dir.file("victim"), out = dir.file("out.txt");
  std::ofstream(target) << "precious";
  // The old predictable name, and a guess at the new one: neither is used.
  fs::create_symlink(target, out + ".tmp." + std::to_string(::getpid()));
  write_text_atomic(out, "new content");
  CHECK(slurp(out) == "new content");
  CHECK(slurp(target) == "precious");
  CHECK(fs::is_symlink(out + ".tmp." + std::to_string(::getpid())));  // a live pid's entry is left alone
}

TEST_CASE("file safety: special files are refused as outputs", "[backend][file_safety]") {
  TempDir dir;
  const std::string fifo = dir.file("pipe");
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  CHECK_THROWS_WITH(write_text_atomic(fifo, "x"), Catch::Contains("not a regular file"));
  CHECK(fs::is_fifo(fifo));
  CHECK_THROWS_WITH(write_text_atomic("/dev/null", "x"), Catch::Contains("not a regular file"));
  // A regular file and a symlink (replaced, its target untouched) are fine.
  std::ofstream(dir.file("target")) << "keep";
  fs::create_symlink(dir.file("target"), dir.file("link"));
  write_text_atomic(dir.file("link"), "replaced");
  CHECK(slurp(dir.file("target")) == "keep");
  CHECK(slurp(dir.file("link")) == "replaced");
  CHECK_FALSE(fs::is_symlink(dir.file("link")));
}

TEST_CASE("file safety: a symlinked step-* folder is never cleaned through", "[backend][file_safety]") {
  TempDir save, elsewhere;
  std::ofstream(elsewhere.file("manifest")) << "someone else's";
  std::ofstream(elsewhere.file("rank-0.safetensors")) << "someone else's";
  fs::create_directories(save.path);
  fs::create_directory_symlink(elsewhere.path, save.file("step-7"));
  prepare_shard_folder(save.path.string(), "step-8");
  CHECK(fs::exists(elsewhere.file("manifest")));
  CHECK(fs::exists(elsewhere.file("rank-0.safetensors")));
  // A save folder that is a file is refused, not written into.
  std::ofstream(save.file("plain")) << "x";
  CHECK_THROWS_WITH(prepare_shard_folder(save.file("plain"), "step-1"), Catch::Contains("not a folder"));
}
