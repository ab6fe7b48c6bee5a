/*
 * Embeds CPython (libpython is linked into this test only) and drives the exchange table's three
 * PyObject entry points and the kernel API the way a C extension does, including every failure.
 * Needs DLPX_PYTHONPATH (dlpx's Python package and site-packages) and DLPX_LIBRARY in the environment.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dlpx/dlpx.h"
#include "test_util.h"

static PyObject *run(const char *code) {
  PyObject *main_dict = PyModule_GetDict(PyImport_AddModule("__main__"));
  PyObject *r = PyRun_String(code, Py_file_input, main_dict, main_dict);
  if (!r) PyErr_Print();
  return r;
}

static PyObject *global(const char *name) {
  PyObject *main_dict = PyModule_GetDict(PyImport_AddModule("__main__"));
  PyObject *v = PyDict_GetItemString(main_dict, name);
  Py_XINCREF(v);
  return v;
}

/* The pending exception is of `type` and its message starts with `prefix`; clears it. */
static int raised(PyObject *type, const char *prefix) {
  PyObject *ptype, *pvalue, *ptb;
  if (!PyErr_Occurred()) return 0;
  int ok = PyErr_ExceptionMatches(type);
  PyErr_Fetch(&ptype, &pvalue, &ptb);
  PyObject *text = pvalue ? PyObject_Str(pvalue) : NULL;
  const char *s = text ? PyUnicode_AsUTF8(text) : "";
  if (strncmp(s, prefix, strlen(prefix)) != 0) {
    printf("    message was: %s\n", s);
    ok = 0;
  }
  Py_XDECREF(text);
  Py_XDECREF(ptype);
  Py_XDECREF(pvalue);
  Py_XDECREF(ptb);
  return ok;
}

static int deleted;
static void counting_deleter(DLManagedTensorVersioned *self) {
  (void)self;
  ++deleted;
}

static void test_entry_points(const DLPackExchangeAPI *api) {
  PyObject *t = run("t = dlpx.empty((2, 3), 'float32')") ? global("t") : NULL;
  CHECK(t != NULL, "dlpx.empty works");
  if (!t) return;

  DLManagedTensorVersioned *m = NULL;
  CHECK(api->managed_tensor_from_py_object_no_sync(t, &m) == 0, "from_py on a dlpx.Tensor");
  CHECK(m && m->version.major == 1 && m->version.minor == 3, "versioned 1.3");
  CHECK(m && m->dl_tensor.ndim == 2 && m->dl_tensor.shape[1] == 3 && m->dl_tensor.strides[0] == 3, "shape and strides");
  if (m) m->deleter(m);

  DLTensor view;
  memset(&view, 0, sizeof view);
  CHECK(api->dltensor_from_py_object_no_sync(t, &view) == 0, "view of a dlpx.Tensor");
  CHECK(view.ndim == 2 && view.shape[0] == 2 && view.dtype.bits == 32 && view.data != NULL, "view fields");

  Py_ssize_t before = Py_REFCNT(t);
  for (int i = 0; i < 100000; ++i) {
    DLManagedTensorVersioned *x = NULL;
    if (api->managed_tensor_from_py_object_no_sync(t, &x) != 0) break;
    x->deleter(x);
    if (api->dltensor_from_py_object_no_sync(t, &view) != 0) break;
  }
  CHECK(Py_REFCNT(t) == before, "exports take no Python reference (refcount %zd -> %zd)", before, Py_REFCNT(t));

  /* to_py of a fresh allocation, and of an export coming home */
  int64_t shape[1] = {5};
  DLTensor proto = test_prototype(kDLCPU, 0, kDLInt, 64, 1, shape);
  DLManagedTensorVersioned *fresh = NULL;
  CHECK(api->managed_tensor_allocator(&proto, &fresh, NULL, dlpx_set_error_python) == 0, "allocate");
  void *obj = NULL;
  CHECK(fresh && api->managed_tensor_to_py_object_no_sync(fresh, &obj) == 0, "to_py of an allocation");
  CHECK(obj && PyObject_IsInstance((PyObject *)obj, (PyObject *)Py_TYPE(t)) == 1, "to_py gives a dlpx.Tensor");
  PyObject *shape_attr = obj ? PyObject_GetAttrString((PyObject *)obj, "shape") : NULL;
  CHECK(shape_attr && PyTuple_Size(shape_attr) == 1 && PyLong_AsLong(PyTuple_GetItem(shape_attr, 0)) == 5, "its shape");
  Py_XDECREF(shape_attr);
  Py_XDECREF((PyObject *)obj);

  /* failures: -1, the right exception, nothing lost */
  PyObject *not_tensor = PyLong_FromLong(7);
  m = NULL;
  CHECK(api->managed_tensor_from_py_object_no_sync(not_tensor, &m) == -1 && m == NULL, "from_py(int) fails");
  CHECK(raised(PyExc_TypeError, "dlpx: managed_tensor_from_py_object_no_sync: expected a dlpx.Tensor, got int"),
        "from_py(int) raises TypeError naming the type");
  CHECK(api->managed_tensor_from_py_object_no_sync(NULL, &m) == -1 && raised(PyExc_ValueError, "dlpx:"), "from_py(NULL)");
  CHECK(api->managed_tensor_from_py_object_no_sync(t, NULL) == -1 && raised(PyExc_ValueError, "dlpx:"), "from_py(out NULL)");
  CHECK(api->dltensor_from_py_object_no_sync(not_tensor, &view) == -1 &&
            raised(PyExc_TypeError, "dlpx: dltensor_from_py_object_no_sync: expected a dlpx.Tensor"),
        "view(int) raises TypeError");
  CHECK(api->dltensor_from_py_object_no_sync(t, NULL) == -1 && raised(PyExc_ValueError, "dlpx:"), "view(out NULL)");
  Py_DECREF(not_tensor);

  CHECK(api->managed_tensor_to_py_object_no_sync(NULL, &obj) == -1 && raised(PyExc_ValueError, "dlpx:"), "to_py(NULL)");

  /* a foreign tensor of an unknown major version: refused, ownership stays with the caller */
  DLManagedTensorVersioned foreign;
  memset(&foreign, 0, sizeof foreign);
  foreign.version.major = 2;
  foreign.deleter = counting_deleter;
  deleted = 0;
  obj = NULL;
  CHECK(api->managed_tensor_to_py_object_no_sync(&foreign, &obj) == -1 && obj == NULL, "to_py(major 2) fails");
  CHECK(raised(PyExc_BufferError, "dlpx: managed_tensor_to_py_object_no_sync: unsupported DLPack major version 2"),
        "to_py(major 2) raises BufferError");
  CHECK(deleted == 0, "a failed to_py does not call the deleter (docs/design.md R4)");

  /* a foreign tensor with a negative extent: refused, not deleted */
  int64_t bad_shape[1] = {-1};
  int64_t bad_strides[1] = {1};
  float storage[4];
  foreign.version.major = 1;
  foreign.dl_tensor.data = storage;
  foreign.dl_tensor.device.device_type = kDLCPU;
  foreign.dl_tensor.ndim = 1;
  foreign.dl_tensor.dtype.code = kDLFloat;
  foreign.dl_tensor.dtype.bits = 32;
  foreign.dl_tensor.dtype.lanes = 1;
  foreign.dl_tensor.shape = bad_shape;
  foreign.dl_tensor.strides = bad_strides;
  CHECK(api->managed_tensor_to_py_object_no_sync(&foreign, &obj) == -1 &&
            raised(PyExc_BufferError, "dlpx: managed_tensor_to_py_object_no_sync: shape[0] = -1 is negative"),
        "to_py(negative extent) raises BufferError");
  CHECK(deleted == 0, "and leaves the tensor with the caller");
  /* a valid foreign tensor: adopted, deleted exactly once when the object dies */
  bad_shape[0] = 4;
  CHECK(api->managed_tensor_to_py_object_no_sync(&foreign, NULL) == -1 && raised(PyExc_ValueError, "dlpx:"), "to_py(out NULL)");
  CHECK(deleted == 0, "to_py(out NULL) does not delete");
  CHECK(api->managed_tensor_to_py_object_no_sync(&foreign, &obj) == 0, "to_py(foreign) adopts it");
  CHECK(deleted == 0, "not deleted while the object lives");
  Py_XDECREF((PyObject *)obj);
  CHECK(deleted == 1, "deleted exactly once when the object dies (%d)", deleted);

  /* the ready SetError raises the matching exception */
  dlpx_set_error_python(NULL, "MemoryError", "dlpx: test: out of memory");
  CHECK(raised(PyExc_MemoryError, "dlpx: test: out of memory"), "dlpx_set_error_python(MemoryError)");
  dlpx_set_error_python(NULL, "SomethingElse", "dlpx: test: other");
  CHECK(raised(PyExc_RuntimeError, "dlpx: test: other"), "unknown kinds raise RuntimeError");
  Py_DECREF(t);
}

static void test_kernel_api(const DLPackExchangeAPI *api) {
  const char *setup =
      "class CapsuleOnly:\n"
      "    __dlpack_c_exchange_api__ = dlpx.Tensor.__dlpack_c_exchange_api__\n"
      "class IntOnly:\n"
      "    __c_dlpack_exchange_api__ = dlpx.Tensor.__c_dlpack_exchange_api__\n"
      "class Neither:\n"
      "    def __init__(self, t): self.t = t\n"
      "    def __dlpack__(self, **kw): return self.t.__dlpack__(**kw)\n"
      "    def __dlpack_device__(self): return self.t.__dlpack_device__()\n"
      "class BadCapsule(Neither):\n"
      "    __dlpack_c_exchange_api__ = 42\n"
      "src = dlpx.empty((4,), 'int32')\n"
      "capsule_only, int_only, neither, bad = CapsuleOnly(), IntOnly(), Neither(src), BadCapsule(src)\n";
  PyObject *r = run(setup);
  CHECK(r != NULL, "kernel API fixtures");
  if (!r) return;
  Py_DECREF(r);
  PyObject *capsule_only = global("capsule_only"), *int_only = global("int_only"), *neither = global("neither");
  PyObject *src = global("src"), *bad = global("bad");

  CHECK(dlpx_exchange_api_of(src) == api, "a dlpx.Tensor maps to dlpx's table");
  CHECK(dlpx_exchange_api_of(capsule_only) == api, "a type with only the capsule attribute");
  CHECK(dlpx_exchange_api_of(int_only) == api, "a type with only the int attribute");
  const DLPackExchangeAPI *universal = dlpx_exchange_api_of(neither);
  CHECK(universal && universal != api && universal->dltensor_from_py_object_no_sync == NULL,
        "a type with neither gets the universal table (no non-owning view)");
  CHECK(dlpx_exchange_api_of(bad) == universal && !PyErr_Occurred(),
        "a malformed attribute is no table: the universal one serves (exchange_api_info says why)");
  CHECK(dlpx_exchange_api_of(NULL) == NULL && raised(PyExc_ValueError, "dlpx:"), "NULL raises ValueError");

  DlpxTensorView v;
  CHECK(dlpx_view_of(src, &v) == 0 && v.owner == NULL && v.tensor.shape[0] == 4, "view of a table producer owns nothing");
  dlpx_view_release(&v);
  CHECK(dlpx_view_of(neither, &v) == 0 && v.owner != NULL && v.tensor.shape[0] == 4, "view through __dlpack__ has an owner");
  dlpx_view_release(&v);
  CHECK(v.owner == NULL, "release clears the owner");
  dlpx_view_release(&v); /* idempotent */
  dlpx_view_release(NULL);
  PyObject *seven = PyLong_FromLong(7);
  CHECK(dlpx_view_of(seven, &v) == -1 && raised(PyExc_TypeError, "dlpx: view_of: int does not support DLPack"),
        "view of an int raises TypeError");

  DLManagedTensorVersioned *m = NULL;
  CHECK(dlpx_import(neither, &m) == 0 && m && m->dl_tensor.shape[0] == 4, "dlpx_import through __dlpack__");
  if (m) m->deleter(m);

  int64_t shape[2] = {2, 2};
  DLTensor proto = test_prototype(kDLCPU, 0, kDLFloat, 64, 2, shape);
  m = NULL;
  CHECK(dlpx_allocate_like(neither, &proto, &m, NULL, dlpx_set_error_python) == 0 && m, "allocate_like");
  void *out = NULL;
  CHECK(m && dlpx_to_py_like(neither, m, &out) == 0 && out, "to_py_like");
  Py_XDECREF((PyObject *)out);
  shape[0] = -2;
  m = NULL;
  CHECK(dlpx_allocate_like(src, &proto, &m, NULL, dlpx_set_error_python) == -1 && m == NULL, "allocate_like(bad shape) fails");
  CHECK(raised(PyExc_ValueError, "dlpx: allocator: shape[0] = -2 is negative"), "through SetError as ValueError");
  CHECK(dlpx_allocate_like(NULL, &proto, &m, NULL, dlpx_set_error_python) == -1 && raised(PyExc_ValueError, "dlpx: allocator:"),
        "allocate_like(NULL) is dlpx's allocator");
  void *stream = (void *)1;
  CHECK(dlpx_current_stream_of(src, kDLCPU, 0, &stream) == 0 && stream == NULL, "current_stream_of(cpu)");

  /* memory and references flat over many kernel-style calls */
  Py_ssize_t before = Py_REFCNT(src);
  for (int i = 0; i < 100000; ++i) {
    if (dlpx_view_of(src, &v) != 0) break;
    dlpx_view_release(&v);
    shape[0] = 2;
    if (dlpx_allocate_like(src, &proto, &m, NULL, NULL) != 0) break;
    if (dlpx_to_py_like(src, m, &out) != 0) break;
    Py_DECREF((PyObject *)out);
  }
  CHECK(Py_REFCNT(src) == before, "kernel calls leave reference counts unchanged");
  Py_DECREF(seven);
  Py_DECREF(capsule_only);
  Py_DECREF(int_only);
  Py_DECREF(neither);
  Py_DECREF(src);
  Py_DECREF(bad);
}

static void *release_on_a_thread_without_python(void *view) {
  dlpx_view_release((DlpxTensorView *)view);
  return NULL;
}

/* Once a subinterpreter exists, PyGILState_Check answers 1 on every thread, even one Python has
 * never seen: releasing an owning view there must not touch Python (no thread state to use). */
static void test_release_without_a_thread_state_after_a_subinterpreter(void) {
  PyObject *r = run("class OnlyDunder:\n"
                    "    def __init__(self): self.t = dlpx.empty((4,), 'float32')\n"
                    "    def __dlpack__(self, **kw): return self.t.__dlpack__(**kw)\n"
                    "    def __dlpack_device__(self): return (1, 0)\n"
                    "only_dunder = OnlyDunder()\n");
  PyObject *object = r ? global("only_dunder") : NULL;
  Py_XDECREF(r);
  DlpxTensorView view;
  CHECK(object && dlpx_view_of(object, &view) == 0 && view.owner != NULL, "an owning view");
  PyThreadState *main_state = PyThreadState_Get();
  PyThreadState *sub = Py_NewInterpreter();
  CHECK(sub != NULL, "a subinterpreter");
  PyThreadState_Swap(main_state);
  pthread_t thread;
  Py_BEGIN_ALLOW_THREADS
  pthread_create(&thread, NULL, release_on_a_thread_without_python, &view);
  pthread_join(thread, NULL);
  Py_END_ALLOW_THREADS
  CHECK(view.owner == NULL, "released from a thread without a thread state");
  if (sub) {
    PyThreadState_Swap(sub);
    Py_EndInterpreter(sub);
    PyThreadState_Swap(main_state);
  }
  Py_XDECREF(object);
}

/* Every call of PyBuffer_Release that dlpx makes comes here: dlpx resolves CPython's functions
 * with dlsym(RTLD_DEFAULT), which finds this executable's definition first (CMake exports the
 * embedding tests' symbols), and this one counts, then calls CPython's. */
static int buffer_releases;
void PyBuffer_Release(Py_buffer *view) {
  static void (*cpython_release)(Py_buffer *);
  if (!cpython_release) {
    void *symbol = dlsym(RTLD_NEXT, "PyBuffer_Release");
    memcpy(&cpython_release, &symbol, sizeof symbol);
  }
  ++buffer_releases;
  cpython_release(view);
}

/* Imports of buffers whose deleters run after Py_Finalize: each deleter must leave the view as
 * it is (the finalised interpreter is not touched: PyBuffer_Release would need it) and free only
 * dlpx's block. A release while the interpreter runs is counted first, so that the count is
 * known to see dlpx's calls. */
static DLManagedTensorVersioned *past_finalize[3];

static void import_buffers_to_release_after_finalize(void) {
  PyObject *control = PyByteArray_FromStringAndSize("control", 7);
  DLManagedTensorVersioned *managed = NULL;
  CHECK(control && dlpx_import(control, &managed) == 0 && managed, "a bytearray imported");
  int before = buffer_releases;
  if (managed) managed->deleter(managed);
  CHECK(buffer_releases == before + 1, "its deleter, the interpreter running, releases the view (counted)");
  Py_XDECREF(control);

  PyObject *r = run("past_bytes = b'0123456789abcdef'\n"
                    "past_bytearray = bytearray(16)\n"
                    "past_view = memoryview(bytearray(32)).cast('i')\n");
  Py_XDECREF(r);
  const char *names[3] = {"past_bytes", "past_bytearray", "past_view"};
  for (int i = 0; i < 3; ++i) {
    PyObject *object = global(names[i]);
    CHECK(object && dlpx_import(object, &past_finalize[i]) == 0 && past_finalize[i] != NULL,
          "a buffer imported, to be released after Py_Finalize");
    Py_XDECREF(object);
  }
  CHECK(past_finalize[2] && past_finalize[2]->dl_tensor.dtype.bits == 32 && past_finalize[2]->dl_tensor.shape[0] == 8,
        "the memoryview's cast is read (8 int32)");
}

static void release_buffers_after_finalize(void) {
  int released = 0, before = buffer_releases;
  for (int i = 0; i < 3; ++i) {
    if (past_finalize[i] && past_finalize[i]->deleter) {
      past_finalize[i]->deleter(past_finalize[i]);
      ++released;
    }
  }
  CHECK(released == 3 && buffer_releases == before,
        "buffer imports released after Py_Finalize leave their views: no PyBuffer_Release");
}

int main(void) {
  Py_Initialize();
  PyObject *r = run("import os, sys\nsys.path[:0] = os.environ['DLPX_PYTHONPATH'].split(os.pathsep)\nimport dlpx\n");
  CHECK(r != NULL, "import dlpx in an embedded interpreter");
  if (!r) return test_summary();
  Py_DECREF(r);

  const DLPackExchangeAPI *api = dlpx_exchange_api();
  PyObject *type = global("dlpx");
  PyObject *tensor_type = type ? PyObject_GetAttrString(type, "Tensor") : NULL;
  PyObject *capsule = tensor_type ? PyObject_GetAttrString(tensor_type, "__dlpack_c_exchange_api__") : NULL;
  CHECK(capsule && PyCapsule_GetPointer(capsule, "dlpack_exchange_api") == (void *)api,
        "import dlpx and this program share one libdlpx (one table)");
  PyErr_Clear();
  Py_XDECREF(capsule);
  Py_XDECREF(tensor_type);
  Py_XDECREF(type);

  test_entry_points(api);
  test_kernel_api(api);
  test_release_without_a_thread_state_after_a_subinterpreter();
  import_buffers_to_release_after_finalize();
  CHECK(!PyErr_Occurred(), "no exception left pending");
  Py_Finalize();
  release_buffers_after_finalize();
  return test_summary();
}
