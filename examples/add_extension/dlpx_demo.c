/*
 * dlpx_demo.add(a, b): elementwise a + b for tensors of any DLPack framework, computed on the
 * CPU, allocated by a's framework and returned as a's framework's tensor (torch in -> torch
 * out; a framework without an exchange table -> dlpx.Tensor out).
 *
 * The whole interop is four dlpx calls: dlpx_view_of (arguments), dlpx_allocate_like (output),
 * dlpx_to_py_like (result), dlpx_view_release.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdio.h>
#include <string.h>

#include "dlpx/dlpx.h"

static int same_dtype(DLDataType x, DLDataType y) {
  return x.code == y.code && x.bits == y.bits && x.lanes == y.lanes;
}

static const char *dtype_name(DLDataType t) {
  if (t.lanes != 1) return "a vector dtype";
  if (t.code == kDLFloat && t.bits == 32) return "float32";
  if (t.code == kDLFloat && t.bits == 64) return "float64";
  if (t.code == kDLInt && t.bits == 32) return "int32";
  if (t.code == kDLInt && t.bits == 64) return "int64";
  return NULL;
}

/* Sets a Python exception and returns 0 when the arguments cannot be added. */
static int check_arguments(const DLTensor *a, const DLTensor *b) {
  if (a->device.device_type != kDLCPU || b->device.device_type != kDLCPU) {
    PyErr_Format(PyExc_ValueError, "dlpx_demo.add: tensors must be on the CPU, got device types %d and %d",
                 (int)a->device.device_type, (int)b->device.device_type);
    return 0;
  }
  if (!same_dtype(a->dtype, b->dtype)) {
    PyErr_Format(PyExc_TypeError, "dlpx_demo.add: dtypes differ: (code %d, bits %d) and (code %d, bits %d)",
                 a->dtype.code, a->dtype.bits, b->dtype.code, b->dtype.bits);
    return 0;
  }
  if (!dtype_name(a->dtype)) {
    PyErr_Format(PyExc_TypeError, "dlpx_demo.add: unsupported dtype (code %d, bits %d, lanes %d); "
                 "expected float32, float64, int32 or int64", a->dtype.code, a->dtype.bits, a->dtype.lanes);
    return 0;
  }
  if (a->ndim != b->ndim || (a->ndim > 0 && memcmp(a->shape, b->shape, sizeof(int64_t) * (size_t)a->ndim) != 0)) {
    PyErr_SetString(PyExc_ValueError, "dlpx_demo.add: shapes differ");
    return 0;
  }
  return 1;
}

/* out[i] = a[i] + b[i] over any strides; out is compact (written in order). */
#define DEFINE_ADD(T)                                                                          \
  static void add_##T(const DLTensor *a, const DLTensor *b, T *out, int64_t numel) {          \
    const char *pa = (const char *)a->data + a->byte_offset;                                  \
    const char *pb = (const char *)b->data + b->byte_offset;                                  \
    int64_t index[64] = {0};                                                                  \
    for (int64_t n = 0; n < numel; ++n) {                                                     \
      int64_t oa = 0, ob = 0;                                                                 \
      for (int d = 0; d < a->ndim; ++d) {                                                     \
        oa += index[d] * a->strides[d];                                                       \
        ob += index[d] * b->strides[d];                                                       \
      }                                                                                       \
      out[n] = ((const T *)pa)[oa] + ((const T *)pb)[ob];                                     \
      for (int d = a->ndim - 1; d >= 0; --d) {                                                \
        if (++index[d] < a->shape[d]) break;                                                  \
        index[d] = 0;                                                                         \
      }                                                                                       \
    }                                                                                         \
  }
DEFINE_ADD(float)
DEFINE_ADD(double)
DEFINE_ADD(int32_t)
DEFINE_ADD(int64_t)

static void compute(const DLTensor *a, const DLTensor *b, DLTensor *out) {
  int64_t numel = 1;
  for (int d = 0; d < a->ndim; ++d) numel *= a->shape[d];
  if (numel == 0) return;
  void *o = (char *)out->data + out->byte_offset;
  if (a->dtype.code == kDLFloat && a->dtype.bits == 32) add_float(a, b, (float *)o, numel);
  else if (a->dtype.code == kDLFloat) add_double(a, b, (double *)o, numel);
  else if (a->dtype.bits == 32) add_int32_t(a, b, (int32_t *)o, numel);
  else add_int64_t(a, b, (int64_t *)o, numel);
}

static PyObject *add(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
  (void)self;
  if (nargs != 2) {
    PyErr_SetString(PyExc_TypeError, "dlpx_demo.add(a, b) takes exactly two tensors");
    return NULL;
  }
  DlpxTensorView a, b;
  if (dlpx_view_of(args[0], &a) != 0) return NULL;
  if (dlpx_view_of(args[1], &b) != 0) {
    dlpx_view_release(&a);
    return NULL;
  }
  PyObject *result = NULL;
  DLManagedTensorVersioned *out = NULL;
  if (check_arguments(&a.tensor, &b.tensor) &&
      dlpx_allocate_like(args[0], &a.tensor, &out, NULL, dlpx_set_error_python) == 0) {
    compute(&a.tensor, &b.tensor, &out->dl_tensor);
    void *object = NULL;
    if (dlpx_to_py_like(args[0], out, &object) == 0) {
      result = (PyObject *)object;
    } else {
      out->deleter(out); /* a failed hand-over leaves the tensor with us */
    }
  }
  dlpx_view_release(&b);
  dlpx_view_release(&a);
  return result;
}

static PyObject *table_address(PyObject *self, PyObject *unused) {
  (void)self;
  (void)unused;
  return PyLong_FromVoidPtr((void *)dlpx_exchange_api());
}

static PyMethodDef methods[] = {
    {"add", (PyCFunction)(void (*)(void))add, METH_FASTCALL,
     "add(a, b): a + b for CPU tensors of any DLPack framework, returned in a's framework."},
    {"table_address", table_address, METH_NOARGS,
     "Address of the dlpx exchange table this extension links (equal to dlpx's own: one library)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "dlpx_demo", "A dlpx kernel extension.", -1, methods,
                                    NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit_dlpx_demo(void) { return PyModule_Create(&module); }
