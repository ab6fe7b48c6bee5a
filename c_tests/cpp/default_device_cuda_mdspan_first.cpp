// One of two files that convert the same cuda::managed_mdspan with to_dltensor(md): this one
// includes <cuda/mdspan> before dlpx (as dlpx.hpp asks), so the default device is cuda_managed.
#include <dlpack/dlpack.h>  // the official header first: dlpx's shares its guard

#include <cuda/mdspan>

#include <dlpx/dlpx.hpp>

int default_device_after_cuda_mdspan(float* p) {
  using E = cuda::std::extents<int64_t, 2, 3>;
  cuda::managed_mdspan<float, E> md{p, E{}};
  auto h = dlpx::to_dltensor(md);
  return dlpx::device_type_of(h.get().device);
}
