// to_dltensor (+ get()) and as_mdspan must not touch the heap: global
// operator new is replaced, and (glibc, no ASan) so is malloc, each counting
// calls while a region is measured. Positive controls prove the counters
// really see allocations.
#include <dlpx/dlpx.hpp>

#include <array>
#include <cstdint>
#include <cstdlib>
#include <new>
#include <string>
#include <vector>

#include "check.hpp"

// GCC >= 11 sees free() in the replaced operator delete and, inlining it,
// calls that a mismatch with operator new; here both sides are ours.
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 11
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
#endif

namespace {
bool g_counting = false;
long g_news = 0;
long g_mallocs = 0;
}  // namespace

void* operator new(std::size_t n) {
  if (g_counting) ++g_news;
  if (void* p = std::malloc(n == 0 ? 1 : n)) return p;
  throw std::bad_alloc();
}
void* operator new[](std::size_t n) { return ::operator new(n); }
void* operator new(std::size_t n, std::align_val_t a) {
  if (g_counting) ++g_news;
  const std::size_t al = static_cast<std::size_t>(a);
  if (void* p = std::aligned_alloc(al, (n + al - 1) / al * al)) return p;
  throw std::bad_alloc();
}
void* operator new[](std::size_t n, std::align_val_t a) { return ::operator new(n, a); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }

// ASan owns malloc itself; elsewhere on glibc, interpose it to count C
// allocations too (a C++ library could call malloc directly).
#if defined(__GLIBC__) && !defined(__SANITIZE_ADDRESS__)
#define COUNTS_MALLOC 1
extern "C" {
void* __libc_malloc(std::size_t);
void* __libc_calloc(std::size_t, std::size_t);
void* __libc_realloc(void*, std::size_t);
void* malloc(std::size_t n) {
  if (g_counting) ++g_mallocs;
  return __libc_malloc(n);
}
void* calloc(std::size_t n, std::size_t m) {
  if (g_counting) ++g_mallocs;
  return __libc_calloc(n, m);
}
void* realloc(void* p, std::size_t n) {
  if (g_counting) ++g_mallocs;
  return __libc_realloc(p, n);
}
}
#else
#define COUNTS_MALLOC 0
#endif

namespace {

// Runs `f` with the counters on and returns how many allocations it made.
template <class F>
long allocations_in(F&& f) {
  g_news = 0;
  g_mallocs = 0;
  g_counting = true;
  f();
  g_counting = false;
  return g_news + g_mallocs;
}

template <std::size_t R>
struct PlainView {
  float* p;
  std::array<std::size_t, R> e;
  std::array<std::size_t, R> s;
  static constexpr std::size_t rank() { return R; }
  std::size_t extent(std::size_t i) const { return e[i]; }
  std::size_t stride(std::size_t i) const { return s[i]; }
  float* data_handle() const { return p; }
};

volatile int64_t g_sink = 0;

}  // namespace

int main() {
  alignas(64) static float buf[4096];

  check::run("counters_see_allocations", [] {
    CHECK(allocations_in([] { int* volatile p = new int(3); delete p; }) >= 1);
    CHECK(allocations_in([] { std::vector<double> v(100); g_sink = int64_t(v.size()); }) >= 1);
    CHECK(allocations_in([] { std::string s(200, 'x'); g_sink = int64_t(s.size()); }) >= 1);
#if COUNTS_MALLOC
    CHECK(allocations_in([] { void* volatile p = std::malloc(64); std::free(p); }) == 1);
#endif
  });
  check::run("to_dltensor_and_get_allocate_nothing", [] {
    const long n = allocations_in([] {
      for (int k = 0; k < 100; ++k) {
        auto h = dlpx::to_dltensor(buf, {16, 32});
        DLTensor t = h.get();
        auto h4 = dlpx::to_dltensor(buf, {2, 4, 8, 16}, {512, 128, 16, 1});
        DLTensor t4 = h4.get();
        PlainView<3> pv{buf, {4, 8, 16}, {128, 16, 1}};
        auto hp = dlpx::to_dltensor(pv);
        DLTensor tp = hp.get();
        dlpx::StridedView<float, 2> sv(buf, {16, 32}, {1, 16});
        auto hs = dlpx::to_dltensor(sv, DLDevice{kDLCUDA, 0});
        DLTensor ts = hs.get();
        g_sink = t.shape[1] + t4.strides[0] + tp.shape[2] + ts.strides[1];
      }
    });
    CHECK_EQ(n, 0L);
  });
  check::run("as_mdspan_allocates_nothing", [] {
    auto h = dlpx::to_dltensor(buf, {16, 32});
    const DLTensor t = h.get();
    auto h3 = dlpx::to_dltensor(buf, {4, 1, 16}, {16, 0, 1});  // normalised stride path
    const DLTensor t3 = h3.get();
    const long n = allocations_in([&] {
      for (int k = 0; k < 100; ++k) {
        auto md = dlpx::as_mdspan<float, 2>(t);
        auto m3 = dlpx::as_mdspan<const float, 3>(t3);
        g_sink = int64_t(md.extent(1)) + int64_t(m3.stride(1));
      }
    });
    CHECK_EQ(n, 0L);
  });
  check::run("tensor_view_queries_allocate_nothing", [] {
    auto h = dlpx::to_dltensor(buf, {16, 32});
    const DLTensor t = h.get();
    const long n = allocations_in([&] {
      dlpx::TensorView v(t);
      g_sink = v.numel() + v.nbytes() + v.is_contiguous() + (v.data<float>() == buf);
      g_sink = int64_t(dlpx::dtype_of<double>().bits);
    });
    CHECK_EQ(n, 0L);
  });
  check::run("errors_may_allocate", [] {
    // The contract is "nothing on success": an error message is a string.
    auto h = dlpx::to_dltensor(buf, {16, 32});
    const DLTensor t = h.get();
    const long n = allocations_in([&] {
      try {
        (void)dlpx::as_mdspan<double, 2>(t);
      } catch (const dlpx::Error&) {
      }
    });
    CHECK(n > 0);
  });
  return check::finish();
}
