// OpRow::backward_reads (semantics/op_registry.h): what a backward reads of
// its forward's tensors. A kernel drops the rest after its forward and the
// plan executor hands them to the backward as views with a shape and no
// data, so every backend's backward must give the same gradients, bit for
// bit, when those inputs have no data: here each listed op's backward runs
// on the reference and on every tested backend twice, with every input and
// with the unread ones null. A kernel that read one would fault here.
#include <catch2/catch.hpp>

#include <algorithm>
#include <set>

#include "node_conformance.h"
#include "semantics/op_registry.h"

namespace nns::backend::test {
namespace {

struct ReadsCase {
  NodeCase fwd;
  std::vector<int64_t> grad_mask;
};

std::vector<ReadsCase> reads_cases() {
  uint32_t seed = 9100;
  auto r = [&](sema::Shape s) { return f32(s, random_buf(sema::numel(s), ++seed)); };
  std::vector<ReadsCase> out;
  for (const char* k : {"add", "sub"}) out.push_back({{k, {}, {r({2, 3, 4}), r({4})}, {f32_zeros({2, 3, 4})}}, {1, 1}});
  out.push_back({{"add_scalar", {{"s", 0.25}}, {r({4, 6})}, {f32_zeros({4, 6})}}, {1}});
  out.push_back({{"mul_scalar", {{"s", -0.37}}, {r({4, 6})}, {f32_zeros({4, 6})}}, {1}});
  for (const char* k : {"reshape", "view"})
    out.push_back({{k, {{"shape", std::vector<int64_t>{6, 4}}}, {r({2, 3, 4})}, {f32_zeros({6, 4})}}, {1}});
  out.push_back({{"permute", {{"dims", std::vector<int64_t>{2, 0, 1}}}, {r({2, 3, 4})}, {f32_zeros({4, 2, 3})}}, {1}});
  out.push_back(
      {{"transpose", {{"dim0", int64_t{0}}, {"dim1", int64_t{-1}}}, {r({2, 3, 4})}, {f32_zeros({4, 3, 2})}}, {1}});
  out.push_back({{"linear", {}, {r({5, 8}), r({6, 8})}, {f32_zeros({5, 6})}}, {1, 1}});
  out.push_back({{"linear_bias", {}, {r({5, 8}), r({6, 8}), r({6})}, {f32_zeros({5, 6})}}, {1, 1, 1}});
  out.push_back({{"matmul", {}, {r({2, 3, 4}), r({2, 4, 5})}, {f32_zeros({2, 3, 5})}}, {1, 1}});
  out.push_back({{"bmm", {}, {r({2, 3, 4}), r({2, 4, 5})}, {f32_zeros({2, 3, 5})}}, {1, 1}});
  out.push_back({{"layer_norm", {{"eps", 1e-5}}, {r({4, 8}), r({8}), r({8})}, {f32_zeros({4, 8})}}, {1, 1, 1}});
  out.push_back({{"cross_entropy", {}, {r({6, 5}), i32({6}, {0, 4, 2, 1, 3, 4})}, {f32_zeros({1})}}, {1, 0}});
  for (const char* k : {"gelu", "gelu_tanh"}) out.push_back({{k, {}, {r({4, 6})}, {f32_zeros({4, 6})}}, {1}});
  out.push_back(
      {{"sdpa", {{"scale", 0.5}}, {r({2, 3, 4}), r({2, 4, 5}), r({2, 5, 4})}, {f32_zeros({2, 3, 4})}}, {1, 1, 1}});
  out.push_back(
      {{"sdpa_bias", {{"scale", 0.5}}, {r({2, 3, 4}), r({2, 4, 5}), r({2, 5, 4}), r({3, 5})}, {f32_zeros({2, 3, 4})}},
       {1, 1, 1, 1}});
  return out;
}

}  // namespace

TEST_CASE("backward_reads: a backward gives the same gradients without the inputs it does not read",
          "[backend][conformance]") {
  std::set<std::string> covered;
  for (const ReadsCase& rc : reads_cases()) {
    const sema::OpRow* row = sema::find_op_row(rc.fwd.kind);
    REQUIRE(row);
    INFO(rc.fwd.kind);
    REQUIRE(row->backward_reads.has_value());
    covered.insert(rc.fwd.kind);
    std::vector<HostTensor> y = run_case(reference_backend(), rc.fwd);
    std::vector<HostTensor> dys;
    uint32_t seed = 9500;
    for (const HostTensor& t : y) dys.push_back(f32(t.shape, random_buf(sema::numel(t.shape), ++seed)));
    NodeCase bwd = backward_case(rc.fwd, y, dys, rc.grad_mask);
    // The forward's operands the list leaves out: inputs, then outputs.
    std::set<size_t> nulls;
    const size_t forward_operands = rc.fwd.inputs.size() + rc.fwd.outputs.size();
    for (size_t k = 0; k < forward_operands; ++k)
      if (std::find(row->backward_reads->begin(), row->backward_reads->end(), k) == row->backward_reads->end())
        nulls.insert(k);
    CHECK(!nulls.empty());  // an op listed with everything read is not worth a list
    std::vector<Backend*> backends = tested_backends();
    backends.insert(backends.begin(), &reference_backend());
    for (Backend* b : backends) {
      if (kernel_pending(*b, bwd.kind)) continue;
      INFO(b->name());
      std::vector<HostTensor> whole = run_case(*b, bwd);
      std::vector<HostTensor> shaped = run_case(*b, bwd, false, nulls);
      REQUIRE(whole.size() == shaped.size());
      for (size_t k = 0; k < whole.size(); ++k) {
        int64_t differ = 0;
        for (size_t i = 0; i < whole[k].f.size(); ++i)
          differ += cpu::f32_bits(whole[k].f[i]) != cpu::f32_bits(shaped[k].f[i]) ? 1 : 0;
        INFO("gradient " << k << ": " << differ << " element(s) differ");
        CHECK(differ == 0);
      }
    }
  }
  // Every row with a list is covered here.
  for (const std::string& name : sema::op_row_names()) {
    const sema::OpRow* row = sema::find_op_row(name);
    if (row && row->backward_reads) {
      INFO(name << " has a backward_reads list but no case here");
      CHECK(covered.count(name) == 1);
    }
  }
}

}  // namespace nns::backend::test
