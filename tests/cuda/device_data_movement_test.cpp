// The CUDA backend's data movement (Backend::copy_box, fill, copy: the plan
// executor's every slice, concatenation and zero-fill) against the CPU
// backend's, bit for bit: the box copy rounds the product before the add as
// the CPU computes it, and raw copies keep i32 bit patterns. On each tested
// backend (tested_backends(): the host emulation, forwards and reversed, or
// the GPU), so the kernel's indexing is checked without a GPU too.
#include <cstring>
#include <memory>
#include <random>

#include "backend/runtime/device_buffer.h"
#include "node_conformance.h"

namespace nns::backend::test {
namespace {

DeviceBuffer put(Backend& be, const std::vector<float>& host) {
  DeviceBuffer b(be, host.size() * 4);
  be.copy_from_host(b.data(), host.data(), host.size() * 4);
  return b;
}

std::vector<float> get(Backend& be, const DeviceBuffer& b) {
  std::vector<float> host(static_cast<size_t>(b.numel()));
  be.copy_to_host(host.data(), b.data(), b.bytes());
  return host;
}

}  // namespace

TEST_CASE("device data movement: copy_box equals the CPU backend's, bit for bit", "[cuda][data-movement]") {
  std::unique_ptr<Backend> cpu = make_cpu_backend(false);
  for (Backend* dev : tested_backends()) {
    CHECK_FALSE(dev->host_memory());
    std::mt19937 rng(5);
    auto pick = [&](int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); };
    for (int trial = 0; trial < 200; ++trial) {
      BoxCopy b;
      const size_t rank = static_cast<size_t>(pick(0, 5));
      for (size_t d = 0; d < rank; ++d) {
        // Some dimensions whole in both buffers (the CPU folds those), most not.
        bool whole = pick(0, 2) == 0;
        int64_t len = pick(1, 6), sdim = whole ? len : len + pick(0, 3), ddim = whole ? len : len + pick(0, 3);
        b.length.push_back(len);
        b.src_dims.push_back(sdim);
        b.dst_dims.push_back(ddim);
        b.src_at.push_back(pick(0, sdim - len));
        b.dst_at.push_back(pick(0, ddim - len));
      }
      std::vector<float> src = random_buf(numel(b.src_dims), 300 + trial), dst = random_buf(numel(b.dst_dims), 700 + trial);
      for (int mode = 0; mode < 4; ++mode) {
        const bool add = mode >= 2;
        const float scale = mode % 2 ? -0.625f : 1.f;
        DeviceBuffer cs = put(*cpu, src), cd = put(*cpu, dst), gs = put(*dev, src), gd = put(*dev, dst);
        cpu->copy_box(cd.data(), cs.data(), b, add, scale);
        dev->copy_box(gd.data(), gs.data(), b, add, scale);
        std::vector<float> want = get(*cpu, cd), got = get(*dev, gd);
        INFO(dev->name() << " trial " << trial << " rank " << rank << " add " << add << " scale " << scale);
        REQUIRE(std::memcmp(want.data(), got.data(), want.size() * 4) == 0);
      }
    }
  }
}

TEST_CASE("device data movement: raw copies keep i32 bit patterns; fill; copy; counted transfers", "[cuda][data-movement]") {
  const std::vector<int32_t> ids = {0x7fa00001, static_cast<int32_t>(0xffc00123), -1, 3, static_cast<int32_t>(0x80000000), 50257};
  for (Backend* dev : tested_backends()) {
    std::vector<float> host(ids.size());
    std::memcpy(host.data(), ids.data(), ids.size() * 4);
    const Backend::HostTraffic t0 = dev->host_traffic();
    DeviceBuffer src = put(*dev, host), dst(*dev, ids.size() * 4), other(*dev, ids.size() * 4);
    dev->copy_box(dst.data(), src.data(), BoxCopy{{2, 3}, {2, 3}, {0, 0}, {2, 3}, {0, 0}}, false, 1.f);
    dev->copy(other.data(), dst.data(), dst.bytes());
    std::vector<float> back = get(*dev, other);
    CHECK(std::memcmp(back.data(), ids.data(), ids.size() * 4) == 0);
    dev->fill(other.data(), 4, 2.5f);
    back = get(*dev, other);
    CHECK(back[3] == 2.5f);
    int32_t last = 0;
    std::memcpy(&last, &back[5], 4);
    CHECK(last == ids[5]);
    CHECK(dev->host_traffic().to_device - t0.to_device == 24);
    CHECK(dev->host_traffic().to_host - t0.to_host == 48);
  }
}

// bf16 activation storage: a kernel's bf16 output collected into an f32
// buffer (BoxCopy::src_bf16) is the f32 box copy of the widened values, bit
// for bit, in every mode; the CPU backend, which stores nothing in bf16,
// refuses such a box.
TEST_CASE("device data movement: a bf16 box source widens exactly", "[cuda][data-movement][bf16]") {
  std::unique_ptr<Backend> host = make_cpu_backend(false);
  CHECK_FALSE(host->bf16_storage());
  for (Backend* dev : tested_backends()) {
    CHECK(dev->bf16_storage());
    std::mt19937 rng(9);
    auto pick = [&](int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); };
    for (int trial = 0; trial < 100; ++trial) {
      BoxCopy b;
      const size_t rank = static_cast<size_t>(pick(0, 4));
      for (size_t d = 0; d < rank; ++d) {
        int64_t len = pick(1, 5), sdim = len + pick(0, 2), ddim = len + pick(0, 2);
        b.length.push_back(len);
        b.src_dims.push_back(sdim);
        b.dst_dims.push_back(ddim);
        b.src_at.push_back(pick(0, sdim - len));
        b.dst_at.push_back(pick(0, ddim - len));
      }
      std::vector<float> src = random_buf(numel(b.src_dims), 900 + trial),
                         dst = random_buf(numel(b.dst_dims), 1300 + trial);
      std::vector<uint16_t> bits;
      for (float& x : src) {
        bits.push_back(cpu::bf16_bits(x));
        x = cpu::bf16_to_float(bits.back());  // what the bf16 source holds
      }
      for (int mode = 0; mode < 4; ++mode) {
        const bool add = mode >= 2;
        const float scale = mode % 2 ? -0.625f : 1.f;
        DeviceBuffer cs = put(*host, src), cd = put(*host, dst), gd = put(*dev, dst);
        DeviceBuffer gs(*dev, bits.size() * 2);
        dev->copy_from_host(gs.data(), bits.data(), bits.size() * 2);
        host->copy_box(cd.data(), cs.data(), b, add, scale);
        BoxCopy half = b;
        half.src_bf16 = true;
        dev->copy_box(gd.data(), gs.data(), half, add, scale);
        std::vector<float> want = get(*host, cd), got = get(*dev, gd);
        INFO(dev->name() << " trial " << trial << " rank " << rank << " add " << add << " scale " << scale);
        REQUIRE(std::memcmp(want.data(), got.data(), want.size() * 4) == 0);
        if (trial == 0 && mode == 0) {
          half.length = b.length;
          CHECK_THROWS_AS(host->copy_box(cd.data(), cs.data(), half, add, scale), RuntimeError);
        }
      }
    }
  }
}

}  // namespace nns::backend::test
