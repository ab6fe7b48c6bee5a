// The other file: dlpx before <cuda/mdspan> (another header pulled it in later), so dlpx does
// not know the managed accessor here and the default device is the CPU.
#include <dlpack/dlpack.h>

#include <dlpx/dlpx.hpp>

#include <cuda/mdspan>

int default_device_before_cuda_mdspan(float* p) {
  using E = cuda::std::extents<int64_t, 2, 3>;
  cuda::managed_mdspan<float, E> md{p, E{}};
  auto h = dlpx::to_dltensor(md);
  return dlpx::device_type_of(h.get().device);
}
