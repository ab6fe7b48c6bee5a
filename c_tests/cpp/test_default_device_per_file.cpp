// Two files convert the same cuda::managed_mdspan type with to_dltensor(md), one with
// <cuda/mdspan> before dlpx, one after (default_device_*.cpp): each keeps the default device its
// own include order gives, whichever order they are linked in. One function name for both broke
// the one-definition rule, and the linker kept the first file's for both (built without
// inlining, which would hide it).
#include <dlpack/dlpack.h>

#include "check.hpp"

int default_device_after_cuda_mdspan(float* p);
int default_device_before_cuda_mdspan(float* p);

int main() {
  check::run("each_file_keeps_its_own_default_device", [] {
    static float data[6];
    CHECK_EQ(default_device_after_cuda_mdspan(data), int(kDLCUDAManaged));
    CHECK_EQ(default_device_before_cuda_mdspan(data), int(kDLCPU));
  });
  return check::finish();
}
