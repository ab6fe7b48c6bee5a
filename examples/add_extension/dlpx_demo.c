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

#include "dlpx/dlpx.h"
/* The arithmetic and its checks, shared with the kernel library written the newer way. */
#include "../kernel_library/strided_add.h"

/* Sets a Python exception and returns 0 when the arguments cannot be added. */
static int check_arguments(const DLTensor *a, const DLTensor *b) {
  char message[160];
  const char *refused = strided_add_refusal(a, b, message, sizeof message);
  if (refused) {
    PyErr_Format(strcmp(refused, "TypeError") == 0 ? PyExc_TypeError : PyExc_ValueError, "dlpx_demo.add: %s",
                 message);
    return 0;
  }
  return 1;
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
    strided_add(&a.tensor, &b.tensor, &out->dl_tensor);
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
