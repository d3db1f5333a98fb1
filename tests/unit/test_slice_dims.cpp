// Unit tests for semantics/slice_dims.h: the dims of an operand slice, held
// inline up to SliceDims::kInline and on the heap beyond, behave like the
// std::vector<int64_t> they replaced (values, copies, moves, growth,
// comparison, conversion), and a split made in a plan gives its parts the
// slices a split of vectors gave.
#include <catch2/catch.hpp>

#include <utility>
#include <vector>

#include "semantics/plan.h"

using nns::sema::SliceDims;

namespace {
std::vector<int64_t> iota(size_t n, int64_t first) {
  std::vector<int64_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = first + static_cast<int64_t>(i) * 3;
  return v;
}
}  // namespace

TEST_CASE("slice dims: inline and heap sizes keep their values", "[plan][slice_dims]") {
  for (size_t n : {size_t{0}, size_t{1}, size_t{SliceDims::kInline}, size_t{SliceDims::kInline + 1}, size_t{9}}) {
    INFO("rank " << n);
    const std::vector<int64_t> v = iota(n, 7);
    SliceDims d = v;
    REQUIRE(d.size() == n);
    CHECK(d.empty() == (n == 0));
    CHECK(std::vector<int64_t>(d) == v);
    CHECK(d == v);
    CHECK(v == d);
    SliceDims copy = d;
    CHECK(copy == d);
    if (n > 0) {
      copy[n - 1] += 1;
      CHECK(copy != d);  // a deep copy: the original keeps its value
      CHECK(d.back() == v.back());
    }
    SliceDims moved = std::move(copy);
    CHECK(moved.size() == n);
    CHECK(copy.empty());  // NOLINT: moved-from is empty by design
    SliceDims assigned = {1, 2};
    assigned = moved;
    CHECK(assigned == moved);
    assigned = d;
    CHECK(assigned == v);
  }
}

TEST_CASE("slice dims: growth, resize and assign across the inline size", "[plan][slice_dims]") {
  SliceDims d;
  std::vector<int64_t> v;
  for (int64_t i = 0; i < 11; ++i) {
    d.push_back(i * i);
    v.push_back(i * i);
    REQUIRE(d == v);
  }
  d.resize(2);
  CHECK(d == std::vector<int64_t>{0, 1});
  d.resize(6, -1);
  CHECK(d == std::vector<int64_t>{0, 1, -1, -1, -1, -1});
  d.assign(3, 5);
  CHECK(d == std::vector<int64_t>{5, 5, 5});
  SliceDims small = {4, 4};
  small = d;  // an inline object takes a heap-sized value and back
  CHECK(small == d);
  small = SliceDims{1};
  CHECK(small == std::vector<int64_t>{1});
  CHECK(SliceDims{1, 2} < SliceDims{1, 3});
  CHECK_FALSE(SliceDims{1, 3} < SliceDims{1, 2});
  CHECK(SliceDims{1} < SliceDims{1, 0});
}

TEST_CASE("slice dims: a split in a plan narrows the slices it should", "[plan][slice_dims]") {
  nns::sema::Plan plan;
  nns::sema::SubOp whole;
  whole.node = 0;
  nns::sema::OperandSlice x, w, y;
  x.start = {0, 0, 0, 0, 0};  // five dims: on the heap
  x.length = {2, 8, 4, 4, 6};
  w.start = {0, 0};
  w.length = std::vector<int64_t>{6, 10};
  y.start = {0, 0};
  y.length = {2, 10};
  whole.inputs = {x, w};
  whole.outputs = {y};
  plan.subops.push_back(whole);
  plan.root_of_node = {0};
  nns::sema::TransformChoice c;
  c.id = "n";
  c.size = 10;
  c.inputs = {{nns::sema::PartitionEffect::Replicated, -1}, {nns::sema::PartitionEffect::Split, 1}};
  c.outputs = {{nns::sema::PartitionEffect::Split, 1}};
  std::vector<int> parts = nns::sema::split_in_plan(plan, 0, c, 2, {});
  REQUIRE(parts.size() == 2);
  const nns::sema::SubOp& second = plan.subops[static_cast<size_t>(parts[1])];
  CHECK(second.inputs[0].start == x.start);
  CHECK(second.inputs[0].length == x.length);
  CHECK(second.inputs[1].start == std::vector<int64_t>{0, 5});
  CHECK(second.inputs[1].length == std::vector<int64_t>{6, 5});
  CHECK(second.outputs[0].to_string() == "[0:2, 5:10]");
  CHECK(plan.subops[static_cast<size_t>(parts[0])].inputs[0].to_string() == "[0:2, 0:8, 0:4, 0:4, 0:6]");
}
