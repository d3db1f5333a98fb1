// The Backend's data movement (backend.h: copy_box, fill, copy, and the
// counted host transfers) on the CPU backend, fast and reference: every
// box copy against an element-by-element oracle, raw copies that keep i32
// bit patterns, and the host-traffic counter that `nns run --stats` reads.
#include <cstring>
#include <memory>
#include <random>

#include "backend/runtime/backend.h"
#include "backend/runtime/device_buffer.h"
#include "backend_test_util.h"

namespace nns::backend::test {

namespace {

std::vector<std::unique_ptr<Backend>> cpu_backends() {
  std::vector<std::unique_ptr<Backend>> v;
  v.push_back(make_cpu_backend(false));
  v.push_back(make_cpu_backend(true));
  return v;
}

DeviceBuffer upload(Backend& be, const std::vector<float>& host) {
  DeviceBuffer b(be, host.size() * 4);
  be.copy_from_host(b.data(), host.data(), host.size() * 4);
  return b;
}

std::vector<float> download(Backend& be, const DeviceBuffer& b) {
  std::vector<float> host(static_cast<size_t>(b.numel()));
  be.copy_to_host(host.data(), b.data(), b.bytes());
  return host;
}

int64_t offset(const std::vector<int64_t>& dims, const std::vector<int64_t>& at, const std::vector<int64_t>& idx) {
  int64_t o = 0;
  for (size_t d = 0; d < dims.size(); ++d) o = o * dims[d] + at[d] + idx[d];
  return o;
}

// The oracle: one element at a time, in the order and arithmetic the
// contract names (dst + scale * src; scale * src; the raw value).
void oracle(std::vector<float>& dst, const std::vector<float>& src, const BoxCopy& b, bool add, float scale) {
  std::vector<int64_t> idx(b.length.size(), 0);
  for (int64_t l : b.length)
    if (l == 0) return;
  while (true) {
    float& d = dst[static_cast<size_t>(offset(b.dst_dims, b.dst_at, idx))];
    const float s = src[static_cast<size_t>(offset(b.src_dims, b.src_at, idx))];
    if (add) d = d + scale * s;
    else if (scale != 1.f) d = scale * s;
    else std::memcpy(&d, &s, 4);
    size_t k = idx.size();
    while (k-- > 0) {
      if (++idx[k] < b.length[k]) break;
      idx[k] = 0;
    }
    if (k == static_cast<size_t>(-1)) return;
  }
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * 4) == 0;
}

}  // namespace

TEST_CASE("data movement: copy_box equals the element-by-element oracle", "[backend][data-movement]") {
  std::mt19937 rng(11);
  auto pick = [&](int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); };
  for (auto& be : cpu_backends()) {
    int cases = 0, folded = 0;
    for (int trial = 0; trial < 400; ++trial) {
      const size_t rank = static_cast<size_t>(pick(0, 4));
      BoxCopy b;
      bool whole_inner = true;  // the box spans both buffers on every dimension but the first: one run
      for (size_t d = 0; d < rank; ++d) {
        // Some boxes span whole dimensions of both buffers (the folded path), most do not.
        bool whole = pick(0, 2) == 0;
        int64_t len = pick(1, 5);
        int64_t sdim = whole ? len : len + pick(0, 3), ddim = whole ? len : len + pick(0, 3);
        if (d > 0 && !(len == sdim && len == ddim)) whole_inner = false;
        b.length.push_back(len);
        b.src_dims.push_back(sdim);
        b.dst_dims.push_back(ddim);
        b.src_at.push_back(pick(0, sdim - len));
        b.dst_at.push_back(pick(0, ddim - len));
      }
      if (rank > 1 && whole_inner) ++folded;
      std::vector<float> src = random_buf(numel(b.src_dims), 100 + trial), dst0 = random_buf(numel(b.dst_dims), 900 + trial);
      for (int mode = 0; mode < 4; ++mode) {
        const bool add = mode >= 2;
        const float scale = mode % 2 ? 0.375f : 1.f;
        std::vector<float> want = dst0;
        oracle(want, src, b, add, scale);
        DeviceBuffer s = upload(*be, src), d = upload(*be, dst0);
        be->copy_box(d.data(), s.data(), b, add, scale);
        INFO(be->name() << " rank " << rank << " add " << add << " scale " << scale);
        REQUIRE(same_bits(download(*be, d), want));
        ++cases;
      }
    }
    CHECK(cases == 1600);
    CHECK(folded > 10);  // the runs merged across dimensions were exercised
  }
}

TEST_CASE("data movement: a raw box copy keeps i32 bit patterns", "[backend][data-movement]") {
  // Token ids travel in 4-byte slots: patterns that are NaNs, signalling
  // NaNs, denormals or negative zero as floats must arrive unchanged.
  const std::vector<int32_t> ids = {0x7fa00001, static_cast<int32_t>(0xffc00123), 1, -1, 0x00000003, static_cast<int32_t>(0x80000000),
                                    50257, 0x7f800001, -50257, 0x7fffffff, 42, 7};
  for (auto& be : cpu_backends()) {
    std::vector<float> host(ids.size());
    std::memcpy(host.data(), ids.data(), ids.size() * 4);
    DeviceBuffer src = upload(*be, host);
    // A [3, 4] piece: its columns 1..3 into a [3, 3] piece.
    BoxCopy b{{3, 3}, {3, 4}, {0, 1}, {3, 3}, {0, 0}};
    DeviceBuffer dst(*be, 9 * 4);
    be->copy_box(dst.data(), src.data(), b, false, 1.f);
    std::vector<float> got = download(*be, dst);
    for (int r = 0; r < 3; ++r)
      for (int c = 0; c < 3; ++c) {
        int32_t v = 0;
        std::memcpy(&v, &got[static_cast<size_t>(r * 3 + c)], 4);
        INFO(be->name() << " [" << r << "," << c << "]");
        CHECK(v == ids[static_cast<size_t>(r * 4 + c + 1)]);
      }
    // Rank 0: one element, raw.
    DeviceBuffer one(*be, 4);
    be->copy_box(one.data(), src.data(), BoxCopy{}, false, 1.f);
    int32_t v = 0;
    be->copy_to_host(&v, one.data(), 4);
    CHECK(v == ids[0]);
  }
}

TEST_CASE("data movement: fill and copy", "[backend][data-movement]") {
  for (auto& be : cpu_backends()) {
    std::vector<float> host = random_buf(37, 5);
    DeviceBuffer a = upload(*be, host), b(*be, 37 * 4);
    be->copy(b.data(), a.data(), a.bytes());
    CHECK(same_bits(download(*be, b), host));
    be->fill(b.data(), 37, 1.f);
    CHECK(download(*be, b) == std::vector<float>(37, 1.f));
    be->fill(b.data(), 36, 0.f);  // a count shorter than the buffer leaves the rest
    std::vector<float> want(37, 0.f);
    want[36] = 1.f;
    CHECK(download(*be, b) == want);
    CHECK(be->host_memory());
  }
}

TEST_CASE("data movement: host traffic counts the host transfers only", "[backend][data-movement]") {
  for (auto& be : cpu_backends()) {
    const Backend::HostTraffic t0 = be->host_traffic();
    CHECK(t0.to_device == 0);
    CHECK(t0.to_host == 0);
    std::vector<float> host = random_buf(10, 9);
    DeviceBuffer a = upload(*be, host), b(*be, 40);
    be->copy(b.data(), a.data(), 40);
    be->fill(b.data(), 10, 2.f);
    be->copy_box(b.data(), a.data(), BoxCopy{{4}, {10}, {2}, {10}, {0}}, true, 0.5f);
    be->axpy(TensorView{b.data(), sema::DType::F32, {10}}, TensorView{a.data(), sema::DType::F32, {10}}, 1.f);
    CHECK(be->host_traffic().to_device == 40);  // the upload only
    CHECK(be->host_traffic().to_host == 0);
    float x = 0;
    be->copy_to_host(&x, b.data(), 4);
    CHECK(be->host_traffic().to_host == 4);
    CHECK(x == 2.f + 0.5f * host[2] + host[0]);
  }
}

}  // namespace nns::backend::test
