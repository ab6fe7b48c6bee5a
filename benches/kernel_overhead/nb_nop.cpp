// nb_nop.nop1/nop3/nop8: nanobind functions taking 1, 3 or 8 nb::ndarray<> arguments (any
// framework, any dtype, any device) and doing nothing else.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

namespace nb = nanobind;
using A = nb::ndarray<>;

NB_MODULE(nb_nop, m) {
  m.def("nop1", [](A) {});
  m.def("nop3", [](A, A, A) {});
  m.def("nop8", [](A, A, A, A, A, A, A, A) {});
}
