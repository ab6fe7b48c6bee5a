/*
 * dlpx_nop.nop(*tensors): takes each argument as a kernel would (dlpx_view_of), touches its
 * DLTensor, releases every view and returns None. At most 8 arguments.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "dlpx/dlpx.h"

enum { MAX_ARGS = 8 };

static PyObject *nop(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
  (void)self;
  if (nargs > MAX_ARGS) {
    PyErr_SetString(PyExc_TypeError, "dlpx_nop.nop: at most 8 arguments");
    return NULL;
  }
  DlpxTensorView views[MAX_ARGS];
  Py_ssize_t taken = 0;
  int64_t sink = 0;
  for (; taken < nargs; ++taken) {
    if (dlpx_view_of(args[taken], &views[taken]) != 0) break;
    /* What every kernel reads first: rank and data pointer. */
    sink += views[taken].tensor.ndim + (int64_t)(intptr_t)views[taken].tensor.data;
  }
  for (Py_ssize_t i = taken; i-- > 0;) dlpx_view_release(&views[i]);
  if (taken < nargs) return NULL;
  /* One store the compiler must keep, so the reads stay, as the kernel library's nop does. */
  volatile int64_t kept = sink;
  (void)kept;
  Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"nop", (PyCFunction)(void (*)(void))nop, METH_FASTCALL, "Views each argument, releases it, returns None."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "dlpx_nop", NULL, -1, methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit_dlpx_nop(void) { return PyModule_Create(&module); }
