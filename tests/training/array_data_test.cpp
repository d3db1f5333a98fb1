// .npy arrays as input data (backend/runtime/data/npy.h, array_dataset.h):
// the header parser, dtype conversion, rows as samples, and bad headers.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <unistd.h>
#include <vector>

#include "backend/runtime/data/array_dataset.h"
#include "backend/runtime/data/npy.h"

using namespace nns;
using namespace nns::backend::data;

namespace {

std::string temp_path(const std::string& name) { return "/tmp/nns_array_data_" + std::to_string(::getpid()) + "_" + name; }

// A version 1.0 .npy file: header dict text, padded, then `data`.
std::string npy(const std::string& dict, const std::string& data) {
  std::string header = dict;
  while ((10 + header.size() + 1) % 64) header += ' ';
  header += '\n';
  std::string out = std::string("\x93NUMPY\x01\x00", 8);
  out += static_cast<char>(header.size() & 0xff);
  out += static_cast<char>(header.size() >> 8);
  return out + header + data;
}

template <typename T>
std::string raw(const std::vector<T>& v) { return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T)); }

std::string write(const std::string& name, const std::string& bytes) {
  std::string path = temp_path(name);
  std::ofstream(path, std::ios::binary) << bytes;
  return path;
}

}  // namespace

TEST_CASE("npy: dtypes decode, shapes parse", "[data]") {
  NpyArray f(write("f.npy", npy("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", raw<float>({1, 2, 3, 4, 5, 6.5f}))));
  CHECK(f.shape() == std::vector<int64_t>{2, 3});
  CHECK(f.row_elements() == 3);
  CHECK(f.at(5) == 6.5);
  NpyArray h(write("h.npy", npy("{'descr': '<f2', 'fortran_order': False, 'shape': (3,), }", raw<uint16_t>({0x3c00, 0xc000, 0x3555}))));
  CHECK(h.at(0) == 1.0);
  CHECK(h.at(1) == -2.0);
  CHECK(h.at(2) == Approx(0.33325).epsilon(1e-4));
  NpyArray u(write("u.npy", npy("{'descr': '|u1', 'fortran_order': False, 'shape': (4,), }", std::string("\x01\x02\xfe\xff", 4))));
  CHECK(u.at(3) == 255);
  NpyArray i(write("i.npy", npy("{'descr': '<i8', 'fortran_order': False, 'shape': (2,), }", raw<int64_t>({-5, 1LL << 40}))));
  CHECK(i.at(0) == -5);
  CHECK(i.at(1) == static_cast<double>(1LL << 40));
}

TEST_CASE("npy: bad files are refused by name", "[data]") {
  auto refuses = [](const std::string& name, const std::string& bytes, const std::string& why) {
    std::string path = write(name, bytes);
    CHECK_THROWS_WITH(NpyArray(path), Catch::Contains(path) && Catch::Contains(why));
    std::remove(path.c_str());
  };
  refuses("magic.npy", "PK\x03\x04 not numpy at all", "wrong magic");
  refuses("f8.npy", npy("{'descr': '<f8', 'fortran_order': False, 'shape': (1,), }", raw<double>({1})), "dtype '<f8'");
  refuses("be.npy", npy("{'descr': '>f4', 'fortran_order': False, 'shape': (1,), }", raw<float>({1})), "dtype '>f4'");
  refuses("fortran.npy", npy("{'descr': '<f4', 'fortran_order': True, 'shape': (1, 1), }", raw<float>({1})), "Fortran-order");
  refuses("short.npy", npy("{'descr': '<f4', 'fortran_order': False, 'shape': (4,), }", raw<float>({1, 2})), "8 data bytes");
  refuses("noshape.npy", npy("{'descr': '<f4', 'fortran_order': False, }", raw<float>({1})), "no 'shape'");
  refuses("header.npy", std::string("\x93NUMPY\x01\x00\xff\x00{'descr'", 17), "truncated .npy header");
}

TEST_CASE("arrays: rows are samples, read in a permutation, converted to the input dtype", "[data]") {
  std::vector<float> xs;
  std::vector<int32_t> ys;
  for (int r = 0; r < 6; ++r) {
    xs.push_back(static_cast<float>(r));
    xs.push_back(static_cast<float>(10 * r));
    ys.push_back(r);
  }
  std::string x = write("x.npy", npy("{'descr': '<f4', 'fortran_order': False, 'shape': (6, 2), }", raw(xs)));
  std::string y = write("y.npy", npy("{'descr': '<i4', 'fortran_order': False, 'shape': (6,), }", raw(ys)));
  sema::Graph g;
  sema::TensorInfo tx;
  tx.kind = sema::TensorKind::Input;
  tx.name = "x";
  tx.shape = {3, 2};
  tx.dtype = sema::DType::F32;
  int xt = g.add_tensor(tx);
  sema::TensorInfo ty = tx;
  ty.name = "y";
  ty.shape = {3};
  ty.dtype = sema::DType::I32;
  int yt = g.add_tensor(ty);
  sema::DataSpec spec;
  spec.kind = "arrays";
  spec.seed = 9;
  spec.arrays = {{"x", x}, {"y", y}};
  ArrayDataset ds(spec, g, 1);
  CHECK(ds.samples_per_epoch() == 6);
  std::vector<int32_t> seen;
  for (int64_t k = 0; k < 2; ++k) {  // one epoch: two micro-batches of 3 rows
    std::vector<float> bx(6);
    std::vector<int32_t> by(3);
    ds.fill(xt, k, bx.data());
    ds.fill(yt, k, by.data());
    for (int r = 0; r < 3; ++r) {
      CHECK(bx[2 * r] == static_cast<float>(by[r]));  // x and y rows stay paired
      CHECK(bx[2 * r + 1] == 10.f * by[r]);
      seen.push_back(by[r]);
    }
  }
  std::sort(seen.begin(), seen.end());
  CHECK(seen == std::vector<int32_t>{0, 1, 2, 3, 4, 5});
  // A file for a name the model lacks, or a shape that does not fit.
  spec.arrays = {{"x", x}, {"y", y}, {"z", y}};
  CHECK_THROWS_WITH(ArrayDataset(spec, g, 1), Catch::Contains("'z'") && Catch::Contains("not an input of this model"));
  spec.arrays = {{"x", y}, {"y", y}};
  CHECK_THROWS_WITH(ArrayDataset(spec, g, 1), Catch::Contains("does not fit input 'x'"));
  std::remove(x.c_str());
  std::remove(y.c_str());
}
