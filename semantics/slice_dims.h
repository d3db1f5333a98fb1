// The per-dimension numbers of an operand slice (plan.h: OperandSlice's
// start and length). A plan at scale holds hundreds of thousands of sub-ops
// with a few operands each (AlphaFold2 `dap` on 32 devices: 400k sub-ops,
// 1.6M slices); as std::vector<int64_t> each slice cost two allocations, and
// building, copying and freeing them was a quarter of plan evaluation. Up
// to kInline dims (every operand of the shipped models) live inside the
// object; more go to the heap. It reads like the vector it replaces: size,
// indexing, iteration, comparison, and conversion to and from
// std::vector<int64_t> (Shape), so that code reading slices is unchanged.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <vector>

namespace nns::sema {

class SliceDims {
 public:
  static constexpr uint32_t kInline = 4;

  SliceDims() = default;
  SliceDims(const std::vector<int64_t>& v) { set(v.data(), v.size()); }  // NOLINT: a Shape is a slice's dims
  SliceDims(std::initializer_list<int64_t> v) { set(v.begin(), v.size()); }
  SliceDims(const SliceDims& o) { set(o.data(), o.size_); }
  SliceDims(SliceDims&& o) noexcept { take(o); }
  SliceDims& operator=(const SliceDims& o) {
    if (this != &o) set(o.data(), o.size_);
    return *this;
  }
  SliceDims& operator=(SliceDims&& o) noexcept {
    if (this != &o) {
      release();
      take(o);
    }
    return *this;
  }
  ~SliceDims() { release(); }

  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  int64_t* data() { return heap() ? heap_ : inline_; }
  const int64_t* data() const { return heap() ? heap_ : inline_; }
  int64_t& operator[](size_t i) { return data()[i]; }
  int64_t operator[](size_t i) const { return data()[i]; }
  int64_t& back() { return data()[size_ - 1]; }
  int64_t back() const { return data()[size_ - 1]; }
  int64_t* begin() { return data(); }
  int64_t* end() { return data() + size_; }
  const int64_t* begin() const { return data(); }
  const int64_t* end() const { return data() + size_; }

  void assign(size_t n, int64_t v) {
    reserve(n);
    size_ = static_cast<uint32_t>(n);
    std::fill(begin(), end(), v);
  }
  void resize(size_t n, int64_t v = 0) {
    reserve(n);
    if (n > size_) std::fill(data() + size_, data() + n, v);
    size_ = static_cast<uint32_t>(n);
  }
  void push_back(int64_t v) {
    if (size_ == cap_) reserve(2 * static_cast<size_t>(cap_));
    data()[size_++] = v;
  }
  void clear() { size_ = 0; }

  operator std::vector<int64_t>() const { return std::vector<int64_t>(begin(), end()); }  // NOLINT

  friend bool operator==(const SliceDims& a, const SliceDims& b) {
    return equal(a.data(), a.size(), b.data(), b.size());
  }
  friend bool operator!=(const SliceDims& a, const SliceDims& b) { return !(a == b); }
  friend bool operator==(const SliceDims& a, const std::vector<int64_t>& b) {
    return equal(a.data(), a.size(), b.data(), b.size());
  }
  friend bool operator==(const std::vector<int64_t>& a, const SliceDims& b) { return b == a; }
  friend bool operator!=(const SliceDims& a, const std::vector<int64_t>& b) { return !(a == b); }
  friend bool operator!=(const std::vector<int64_t>& a, const SliceDims& b) { return !(b == a); }
  friend bool operator<(const SliceDims& a, const SliceDims& b) {
    return std::lexicographical_compare(a.begin(), a.end(), b.begin(), b.end());
  }

 private:
  bool heap() const { return cap_ > kInline; }
  static bool equal(const int64_t* a, size_t na, const int64_t* b, size_t nb) {
    return na == nb && (na == 0 || std::memcmp(a, b, na * sizeof(int64_t)) == 0);
  }
  void set(const int64_t* v, size_t n) {
    if (n > cap_) {
      release();
      heap_ = new int64_t[n];
      cap_ = static_cast<uint32_t>(n);
    }
    size_ = static_cast<uint32_t>(n);
    if (n) std::memcpy(data(), v, n * sizeof(int64_t));
  }
  void reserve(size_t n) {
    if (n <= cap_) return;
    int64_t* grown = new int64_t[n];
    if (size_) std::memcpy(grown, data(), size_ * sizeof(int64_t));
    release();
    heap_ = grown;
    cap_ = static_cast<uint32_t>(n);
  }
  void release() {
    if (heap()) delete[] heap_;
    cap_ = kInline;
  }
  void take(SliceDims& o) {
    size_ = o.size_;
    cap_ = o.cap_;
    if (o.heap())
      heap_ = o.heap_;
    else
      std::memcpy(inline_, o.inline_, size_ * sizeof(int64_t));
    o.size_ = 0;
    o.cap_ = kInline;
  }

  uint32_t size_ = 0, cap_ = kInline;
  union {
    int64_t inline_[kInline];
    int64_t* heap_;
  };
};

}  // namespace nns::sema
