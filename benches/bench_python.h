/* What the C benchmarks share: a monotonic clock, dying with the Python error, finding a type's
 * exchange table the way a consumer does, and evaluating Python with dlpx, torch and numpy
 * imported. Include after <Python.h> and "dlpx/dlpx.h". */
#ifndef DLPX_BENCHES_BENCH_PYTHON_H_
#define DLPX_BENCHES_BENCH_PYTHON_H_

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static void die(const char *what) {
  if (PyErr_Occurred()) PyErr_Print();
  fprintf(stderr, "bench: %s\n", what);
  exit(2);
}

/* The capsule __dlpack_c_exchange_api__, else the int __c_dlpack_exchange_api__; NULL (with
 * dlpx_last_error()) when the chain has no major-1 table. */
static const DLPackExchangeAPI *find_table(PyObject *type) {
  PyObject *capsule = PyObject_GetAttrString(type, "__dlpack_c_exchange_api__");
  if (capsule) {
    void *p = PyCapsule_GetPointer(capsule, "dlpack_exchange_api");
    Py_DECREF(capsule);
    if (!p) die("__dlpack_c_exchange_api__ is not a dlpack_exchange_api capsule");
    return dlpx_exchange_api_select((const DLPackExchangeAPIHeader *)p);
  }
  PyErr_Clear();
  PyObject *address = PyObject_GetAttrString(type, "__c_dlpack_exchange_api__");
  if (!address) die("the type publishes no exchange table");
  void *p = PyLong_AsVoidPtr(address);
  Py_DECREF(address);
  return dlpx_exchange_api_select((const DLPackExchangeAPIHeader *)p);
}

/* Evaluates a Python expression with dlpx, numpy and (where installed: not on a free-threaded
 * interpreter) torch imported; dies on error. */
static PyObject *eval(const char *expression) {
  static PyObject *globals = NULL;
  if (!globals) {
    globals = PyDict_New();
    PyDict_SetItemString(globals, "__builtins__", PyEval_GetBuiltins());
    PyObject *r = PyRun_String("import dlpx, numpy\ntry:\n    import torch\nexcept ImportError:\n    pass\n",
                               Py_file_input, globals, globals);
    if (!r) die("import dlpx, numpy");
    Py_DECREF(r);
  }
  PyObject *r = PyRun_String(expression, Py_eval_input, globals, globals);
  if (!r) die(expression);
  return r;
}

#endif /* DLPX_BENCHES_BENCH_PYTHON_H_ */
