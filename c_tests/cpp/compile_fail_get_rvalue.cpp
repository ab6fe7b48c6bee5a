// Compiled by ctest: get() on a temporary holder must not compile, because
// the DLTensor's shape would point into a destroyed object (spec 004). The
// positive control (no DLPX_EXPECT_ERROR) keeps the holder and must build.
#include <dlpx/dlpx.hpp>

int main() {
  float a[4] = {};
#if defined(DLPX_EXPECT_ERROR)
  DLTensor t = dlpx::to_dltensor(a, {4}).get();
#else
  auto holder = dlpx::to_dltensor(a, {4});
  DLTensor t = holder.get();
#endif
  return t.ndim == 1 ? 0 : 1;
}
