// Token sources (backend/runtime/data/): the flat and Megatron readers, the
// window sampler's permutations, replicas' disjoint shares, and the
// position a checkpoint saves and a resumed run restores.
#include <catch2/catch.hpp>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <unistd.h>
#include <vector>

#include "backend/runtime/data/sampler.h"
#include "backend/runtime/data/token_corpus.h"
#include "backend/runtime/data/token_dataset.h"

using namespace nns;
using namespace nns::backend::data;

namespace {

std::string temp_path(const std::string& name) { return "/tmp/nns_token_data_" + std::to_string(::getpid()) + "_" + name; }

template <typename T>
void put(std::string& s, T v) { s.append(reinterpret_cast<const char*>(&v), sizeof v); }

void write_file(const std::string& path, const std::string& bytes) { std::ofstream(path, std::ios::binary) << bytes; }

// A flat uint16 file of `n` tokens, token i = i % 251.
std::string flat_file(const std::string& name, int64_t n) {
  std::string b;
  for (int64_t i = 0; i < n; ++i) put<uint16_t>(b, static_cast<uint16_t>(i % 251));
  std::string path = temp_path(name);
  write_file(path, b);
  return path;
}

// A Megatron index by hand (the tests' Python writer is the independent
// one; this is the same layout in a few lines): uint16 documents of the
// given sizes, token values counting up across them.
std::string megatron_files(const std::string& name, const std::vector<int32_t>& sizes, int64_t gap_bytes = 0) {
  std::string prefix = temp_path(name), bin, idx;
  std::vector<int64_t> pointers;
  uint16_t next = 0;
  for (int32_t n : sizes) {
    bin.append(static_cast<size_t>(gap_bytes), '\xff');  // pointers need not be contiguous
    pointers.push_back(static_cast<int64_t>(bin.size()));
    for (int32_t i = 0; i < n; ++i) put<uint16_t>(bin, next++);
  }
  idx.append("MMIDIDX\0\0", 9);
  put<uint64_t>(idx, 1);
  put<uint8_t>(idx, 8);
  put<uint64_t>(idx, sizes.size());
  put<uint64_t>(idx, sizes.size() + 1);
  for (int32_t n : sizes) put<int32_t>(idx, n);
  for (int64_t p : pointers) put<int64_t>(idx, p);
  for (size_t d = 0; d <= sizes.size(); ++d) put<int64_t>(idx, static_cast<int64_t>(d));
  write_file(prefix + ".bin", bin);
  write_file(prefix + ".idx", idx);
  return prefix;
}

// A graph with two [batch, seq] i32 token inputs of vocabulary `vocab`.
sema::Graph token_graph(int64_t batch, int64_t seq, int64_t vocab) {
  sema::Graph g;
  for (const char* name : {"ids", "targets"}) {
    sema::TensorInfo t;
    t.kind = sema::TensorKind::Input;
    t.name = name;
    t.shape = {batch, seq};
    t.dtype = sema::DType::I32;
    t.init = sema::InitSpec{"tokens", {static_cast<double>(vocab)}};
    g.add_tensor(t);
  }
  return g;
}

sema::DataSpec flat_spec(const std::string& path, int64_t seed) {
  sema::DataSpec d;
  d.kind = "token_file";
  d.path = path;
  d.seed = seed;
  return d;
}

}  // namespace

TEST_CASE("flat token file: ids read as written; a partial id is refused", "[data]") {
  std::string path = flat_file("flat.bin", 600);
  auto c = open_flat_tokens(path, "uint16");
  REQUIRE(c->size() == 600);
  std::vector<int64_t> out(5);
  c->read(500, 5, out.data());
  CHECK(out == std::vector<int64_t>{500 % 251, 501 % 251, 502 % 251, 503 % 251, 504 % 251});
  CHECK(open_flat_tokens(path, "uint32")->size() == 300);
  write_file(path, std::string(7, '\1'));
  CHECK_THROWS_WITH(open_flat_tokens(path, "uint16"), Catch::Contains("not a whole number of 16-bit tokens"));
  std::remove(path.c_str());
}

TEST_CASE("megatron index: documents read as one stream, across boundaries and pointer gaps", "[data]") {
  std::string prefix = megatron_files("mm", {3, 0, 5, 2}, 6);
  MegatronIndex ix = read_megatron_index(prefix + ".idx");
  CHECK(ix.sizes == std::vector<int32_t>{3, 0, 5, 2});
  CHECK(ix.pointers == std::vector<int64_t>{6, 18, 24, 40});
  auto c = open_megatron_tokens(prefix);
  REQUIRE(c->size() == 10);
  std::vector<int64_t> out(8);
  c->read(1, 8, out.data());  // spans the 1st, the empty 2nd, the 3rd and the 4th sequence
  CHECK(out == std::vector<int64_t>{1, 2, 3, 4, 5, 6, 7, 8});

  // Damaged indexes: each a DataError naming the file and the fault.
  std::string idx;
  { std::ifstream f(prefix + ".idx", std::ios::binary); idx.assign(std::istreambuf_iterator<char>(f), {}); }
  write_file(prefix + ".idx", "MMIDIDY" + idx.substr(7));
  CHECK_THROWS_WITH(read_megatron_index(prefix + ".idx"), Catch::Contains("wrong magic"));
  write_file(prefix + ".idx", idx.substr(0, 45));
  CHECK_THROWS_WITH(read_megatron_index(prefix + ".idx"), Catch::Contains("truncated index"));
  std::string bad_version = idx;
  bad_version[9] = 2;
  write_file(prefix + ".idx", bad_version);
  CHECK_THROWS_WITH(read_megatron_index(prefix + ".idx"), Catch::Contains("version 2"));
  write_file(prefix + ".idx", idx);
  write_file(prefix + ".bin", std::string(20, '\0'));
  CHECK_THROWS_WITH(open_megatron_tokens(prefix), Catch::Contains(".bin: sequence 2"));
  for (const char* ext : {".idx", ".bin"}) std::remove((prefix + ext).c_str());
}

TEST_CASE("sampler: each epoch a permutation, seeded, different from the last", "[data]") {
  const int64_t n = 97;
  auto p0 = WindowSampler::permutation(n, 5, 0), p1 = WindowSampler::permutation(n, 5, 1);
  CHECK(std::set<int64_t>(p0.begin(), p0.end()).size() == static_cast<size_t>(n));
  CHECK(std::set<int64_t>(p1.begin(), p1.end()).size() == static_cast<size_t>(n));
  CHECK(p0 != p1);
  CHECK(p0 == WindowSampler::permutation(n, 5, 0));
  CHECK(p0 != WindowSampler::permutation(n, 6, 0));
  WindowSampler s(n, 5);
  CHECK(s.window(n + 3) == p1[3]);
  CHECK(s.window(2) == p0[2]);
  DataPosition pos = s.position(2 * n + 7);
  CHECK(pos.epoch == 2);
  CHECK(pos.index == 7);
  CHECK(pos.samples() == 2 * n + 7);
}

TEST_CASE("token dataset: targets are inputs shifted by one; replicas read disjoint windows", "[data]") {
  const int64_t batch = 2, seq = 4, replicas = 3;
  std::string path = flat_file("ds.bin", 4 * 25 + 1);  // 25 windows
  sema::Graph g = token_graph(batch, seq, 251);
  TokenDataset ds(flat_spec(path, 11), g, /*microbatches_per_step=*/replicas);
  REQUIRE(ds.windows() == 25);
  std::vector<int32_t> ids(batch * seq), tg(batch * seq);
  ds.fill(0, 0, ids.data());
  ds.fill(1, 0, tg.data());
  for (int64_t r = 0; r < batch; ++r)
    for (int64_t i = 0; i + 1 < seq; ++i) CHECK(tg[r * seq + i] == ids[r * seq + i + 1]);
  // An epoch of 25 windows: 12 micro-batches of 2 rows (24 samples), the
  // replicas interleaved (micro-batch k belongs to replica k % 3). Every
  // window's first token (window w starts at token 4w) is read once.
  std::set<int32_t> seen;
  std::vector<std::set<int32_t>> by_replica(replicas);
  for (int64_t k = 0; k < 12; ++k) {
    ds.fill(0, k, ids.data());
    for (int64_t r = 0; r < batch; ++r) {
      CHECK(seen.insert(ids[r * seq]).second);
      by_replica[k % replicas].insert(ids[r * seq]);
    }
  }
  CHECK(seen.size() == 24);
  for (int a = 0; a < replicas; ++a)
    for (int b = a + 1; b < replicas; ++b)
      for (int32_t x : by_replica[a]) CHECK(!by_replica[b].count(x));
  // A rank holding rows [1, 2) reads those rows only.
  std::vector<int32_t> part(batch * seq, -7);
  ds.fill(0, 3, part.data(), 1, 2);
  ds.fill(0, 3, ids.data());
  CHECK(part[0] == -7);
  CHECK(std::vector<int32_t>(part.begin() + seq, part.end()) == std::vector<int32_t>(ids.begin() + seq, ids.end()));
  std::remove(path.c_str());
}

TEST_CASE("token dataset: a resumed dataset reads what an unbroken one reads", "[data]") {
  const int64_t batch = 2, seq = 4, per_step = 2;
  std::string path = flat_file("resume.bin", 4 * 9 + 1);  // 9 windows: epochs end inside steps
  sema::Graph g = token_graph(batch, seq, 251);
  TokenDataset unbroken(flat_spec(path, 3), g, per_step);
  std::map<std::string, std::string> meta;
  unbroken.add_metadata(5, meta);  // 5 steps x 2 micro-batches x 2 rows = 20 samples: epoch 2, index 2
  CHECK(meta.at("data_epoch") == "2");
  CHECK(meta.at("data_index") == "2");
  CHECK(meta.at("data_windows") == "9");
  CHECK(meta.at("data_seed") == "3");
  // Resumed with the checkpoint's position under another batch split
  // (one micro-batch per step): it continues at sample 20 all the same.
  TokenDataset resumed(flat_spec(path, 3), g, 1);
  resumed.resume(meta, "ck", 5);
  std::vector<int32_t> a(batch * seq), b(batch * seq);
  for (int64_t k = 0; k < 6; ++k) {
    unbroken.fill(0, 10 + k, a.data());
    resumed.fill(0, 5 + k, b.data());
    CHECK(a == b);
  }
  // Another seed, or another corpus, is refused.
  TokenDataset other(flat_spec(path, 4), g, per_step);
  CHECK_THROWS_WITH(other.resume(meta, "ck", 5), Catch::Contains("a resumed run must read the same data"));
  std::remove(path.c_str());
}

TEST_CASE("token dataset: short files and foreign tokens are refused by name", "[data]") {
  sema::Graph g = token_graph(1, 8, 100);
  std::string path = flat_file("short.bin", 8);
  CHECK_THROWS_WITH(TokenDataset(flat_spec(path, 0), g, 1), Catch::Contains("shorter than one window of seq + 1 = 9 tokens"));
  path = flat_file("vocab.bin", 200);  // tokens up to 199 in a vocabulary of 100
  TokenDataset ds(flat_spec(path, 0), g, 1);
  std::vector<int32_t> out(8);
  bool refused = false;
  for (int64_t k = 0; k < ds.windows() && !refused; ++k) {
    try {
      ds.fill(0, k, out.data());
    } catch (const DataError& e) {
      refused = std::string(e.what()).find("outside the model's vocabulary [0, 100)") != std::string::npos;
    }
  }
  CHECK(refused);
  std::remove(path.c_str());
}
