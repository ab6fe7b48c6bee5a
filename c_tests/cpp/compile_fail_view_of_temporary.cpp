// Compiled by ctest: a view of a temporary must not compile, because it would
// outlive what it views. DLPX_EXPECT_ERROR=1: a TensorView of a temporary
// DLTensor; =2: the view() of a temporary ManagedTensor. The positive control
// (no DLPX_EXPECT_ERROR) views lvalues, as the docs do, and must build.
#include <dlpx/dlpx.hpp>

static DLTensor made() {
  DLTensor t{};
  t.ndim = 0;
  return t;
}

int main() {
  float a[4] = {};
  auto holder = dlpx::to_dltensor(a, {4});
#if DLPX_EXPECT_ERROR == 1
  dlpx::TensorView tv(made());
#elif DLPX_EXPECT_ERROR == 2
  dlpx::TensorView tv = dlpx::ManagedTensor::allocate({4}, dlpx::dtype_of<float>()).view();
#else
  dlpx::TensorView tv(holder.get());  // get() is the holder's own DLTensor
  const DLTensor t = made();
  dlpx::TensorView bare(t);
  auto owned = dlpx::ManagedTensor::allocate({4}, dlpx::dtype_of<float>());
  dlpx::TensorView of_owner = owned.view();
  if (bare.ndim() != 0 || of_owner.ndim() != 1) return 1;
#endif
  return tv.ndim() == 1 ? 0 : 1;
}
