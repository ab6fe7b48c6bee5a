// Benchmark (not a test): nanoseconds per dlpx::to_dltensor + get() and per
// dlpx::as_mdspan for a rank-2 float tensor, the per-call cost a kernel pays
// to hand a view to C or to take a DLTensor argument. Prints one line each.
#include <dlpx/dlpx.hpp>

#include <chrono>
#include <cstdint>
#include <cstdio>

namespace {

// Keeps the optimiser from deleting the measured work.
template <class T>
void keep(const T& v) {
  asm volatile("" : : "g"(&v) : "memory");
}

template <class F>
double ns_per_call(F&& f) {
  using clock = std::chrono::steady_clock;
  double best = 1e30;
  for (int round = 0; round < 7; ++round) {
    constexpr int n = 2000000;
    const auto t0 = clock::now();
    for (int i = 0; i < n; ++i) f(i);
    const double ns = std::chrono::duration<double, std::nano>(clock::now() - t0).count() / n;
    best = ns < best ? ns : best;
  }
  return best;
}

}  // namespace

int main() {
  alignas(64) static float buf[64 * 64];
  dlpx::StridedView<float, 2> view(buf, {64, 64}, {64, 1});
  const double to = ns_per_call([&](int i) {
    auto h = dlpx::to_dltensor(view);
    DLTensor t = h.get();
    t.shape[0] += i & 1;  // depend on the loop so nothing is hoisted
    keep(t);
  });
  auto h = dlpx::to_dltensor(view);
  DLTensor t = h.get();
  const double as = ns_per_call([&](int) {
    keep(t);
    auto md = dlpx::as_mdspan<float, 2>(t);
    keep(md);
  });
  std::printf("to_dltensor + get(), rank-2 float: %.2f ns/call\n", to);
  std::printf("as_mdspan<float, 2>, rank-2 float:  %.2f ns/call\n", as);
  return 0;
}
