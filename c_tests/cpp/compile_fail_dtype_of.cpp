// Compiled by ctest with DLPX_TRY_TYPE set: an element type without a dtype
// must stop the build with a diagnostic that names the type; the same file
// with a supported type (the positive control) must build.
#include <dlpx/dlpx.hpp>

struct NotAnElement {
  int x;
};

int main() {
  constexpr DLDataType d = dlpx::dtype_of<DLPX_TRY_TYPE>();
  return d.bits == 0;
}
