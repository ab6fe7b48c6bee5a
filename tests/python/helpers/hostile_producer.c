/* A hostile DLPack producer, built in C for the tests (hostile_producer.py compiles it).
 *
 * It sends whatever a caller asks for in every field a producer fills: the version, ndim,
 * shape and strides (or NULL), dtype, device, data (or NULL), flags, byte offset, and the
 * deleter (or NULL). A tensor goes out three ways, as a C producer's would:
 *
 *  - in a capsule (`hp_capsule`), named "dltensor_versioned" or "dltensor", whose destructor
 *    deletes the tensor only while the capsule is unconsumed (the spec's rule);
 *  - from an exchange table's `managed_tensor_from_py_object_no_sync` (`hp_table`), which
 *    hands out a fresh tensor made from the armed spec on every call;
 *  - from the same table's `dltensor_from_py_object_no_sync`, as a non-owning view.
 *
 * Every tensor gets an id; its deleter counts calls per id (the count outlives the tensor),
 * so a test can check that a consumer deleted each tensor exactly once, whatever it refused.
 * Loaded with ctypes.PyDLL: every function runs with the GIL held.
 */
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "dlpack.h"

/* Room for 80 dimensions: more than the 64 a consumer accepts, so "ndim 65" is a real shape. */
#define HP_DIMS 80
/* Ids handed out in one process; a test run makes a few hundred. */
#define HP_MAX_TENSORS 65536
/* Every tensor's data: zeroed bytes, enough for any shape a test reads. */
#define HP_DATA_BYTES 256

/* What a test asks for. Mirrored field by field in hostile_producer.py. */
typedef struct hp_spec {
  uint32_t major;
  uint32_t minor;
  int32_t ndim;
  int32_t shape_null;
  int32_t strides_null;
  int32_t data_null;
  int32_t deleter_null;
  int32_t reserved;
  int64_t shape[HP_DIMS];
  int64_t strides[HP_DIMS];
  DLDataType dtype;
  DLDevice device;
  uint64_t flags;
  uint64_t byte_offset;
} hp_spec;

/* One made tensor: both managed layouts share the shape, strides and data that follow. */
typedef struct hp_tensor {
  union {
    DLManagedTensorVersioned versioned;
    DLManagedTensor legacy;
  } managed;
  int versioned;
  int64_t shape[HP_DIMS];
  int64_t strides[HP_DIMS];
  unsigned char data[HP_DATA_BYTES];
} hp_tensor;

static int hp_deleter_calls_by_id[HP_MAX_TENSORS];
static hp_tensor *hp_live[HP_MAX_TENSORS]; /* NULL once deleted */
static int hp_made;

static void hp_delete(hp_tensor *tensor, intptr_t id) {
  if (id >= 0 && id < HP_MAX_TENSORS) {
    hp_deleter_calls_by_id[id] += 1;
    hp_live[id] = NULL;
  }
  /* A second call frees twice: the count lets the test see it, and a sanitizer or valgrind
   * sees the double free. */
  free(tensor);
}

static void hp_versioned_deleter(DLManagedTensorVersioned *self) {
  hp_delete((hp_tensor *)self, (intptr_t)self->manager_ctx);
}

static void hp_legacy_deleter(DLManagedTensor *self) {
  hp_delete((hp_tensor *)self, (intptr_t)self->manager_ctx);
}

static void hp_fill(DLTensor *out, hp_tensor *tensor, const hp_spec *spec) {
  memcpy(tensor->shape, spec->shape, sizeof tensor->shape);
  memcpy(tensor->strides, spec->strides, sizeof tensor->strides);
  out->data = spec->data_null ? NULL : tensor->data;
  out->device = spec->device;
  out->ndim = spec->ndim;
  out->dtype = spec->dtype;
  out->shape = spec->shape_null ? NULL : tensor->shape;
  out->strides = spec->strides_null ? NULL : tensor->strides;
  out->byte_offset = spec->byte_offset;
}

/* Makes a tensor as `spec` says; returns its id, or -1 when out of ids or memory. */
int hp_make(const hp_spec *spec, int versioned) {
  if (hp_made >= HP_MAX_TENSORS) return -1;
  hp_tensor *tensor = calloc(1, sizeof *tensor);
  if (tensor == NULL) return -1;
  intptr_t id = hp_made++;
  tensor->versioned = versioned;
  if (versioned) {
    DLManagedTensorVersioned *m = &tensor->managed.versioned;
    m->version.major = spec->major;
    m->version.minor = spec->minor;
    m->manager_ctx = (void *)id;
    m->deleter = spec->deleter_null ? NULL : hp_versioned_deleter;
    m->flags = spec->flags;
    hp_fill(&m->dl_tensor, tensor, spec);
  } else {
    DLManagedTensor *m = &tensor->managed.legacy;
    m->manager_ctx = (void *)id;
    m->deleter = spec->deleter_null ? NULL : hp_legacy_deleter;
    hp_fill(&m->dl_tensor, tensor, spec);
  }
  hp_live[id] = tensor;
  return (int)id;
}

/* How many times tensor `id`'s deleter ran (-1 for an id never made). */
int hp_deleter_calls(int id) {
  return id >= 0 && id < hp_made ? hp_deleter_calls_by_id[id] : -1;
}

/* The address of tensor `id`'s managed struct; NULL once it was deleted. */
void *hp_address(int id) { return id >= 0 && id < hp_made ? hp_live[id] : NULL; }

/* How many tensors were made so far: the next one gets this id. */
int hp_count(void) { return hp_made; }

/* ---- capsules ------------------------------------------------------------------------- */

static const char HP_VERSIONED_NAME[] = "dltensor_versioned";
static const char HP_LEGACY_NAME[] = "dltensor";

static void hp_capsule_destructor(PyObject *capsule) {
  const char *name = PyCapsule_GetName(capsule);
  if (name == NULL || (strcmp(name, HP_VERSIONED_NAME) != 0 && strcmp(name, HP_LEGACY_NAME) != 0)) {
    PyErr_Clear();
    return; /* consumed (renamed): the consumer owns the tensor now */
  }
  void *pointer = PyCapsule_GetPointer(capsule, name);
  if (pointer == NULL) {
    PyErr_Clear();
    return;
  }
  hp_tensor *tensor = pointer;
  if (tensor->versioned) {
    DLManagedTensorVersioned *m = &tensor->managed.versioned;
    if (m->deleter) m->deleter(m);
  } else {
    DLManagedTensor *m = &tensor->managed.legacy;
    if (m->deleter) m->deleter(m);
  }
}

/* Hands tensor `id` (made, not yet deleted) out in a capsule named for its layout; None for
 * an id with no live tensor. */
PyObject *hp_capsule(int id) {
  hp_tensor *tensor = hp_address(id);
  if (tensor == NULL) Py_RETURN_NONE;
  return PyCapsule_New(tensor, tensor->versioned ? HP_VERSIONED_NAME : HP_LEGACY_NAME, hp_capsule_destructor);
}

/* ---- the exchange table --------------------------------------------------------------- */

static hp_spec hp_armed;
static hp_tensor *hp_view; /* the storage behind the latest view; freed on the next */

/* How the two read entries break the table's contract (`hp_arm_entries`): not at all (0), a
 * failure that sets no exception (1), or a success that leaves one set (2). */
static int hp_entries_mode;

void hp_arm_entries(int mode) { hp_entries_mode = mode; }

/* A read entry's answer once it has filled its out: 0, unless the armed mode breaks it. */
static int hp_entry_answer(void) {
  if (hp_entries_mode == 2) PyErr_SetString(PyExc_RuntimeError, "the producer's own error");
  return hp_entries_mode == 1 ? -1 : 0;
}

static int hp_from_py_object(void *py_object, DLManagedTensorVersioned **out) {
  (void)py_object;
  if (hp_entries_mode == 1) return -1;
  int id = hp_make(&hp_armed, 1);
  if (id < 0) {
    PyErr_NoMemory();
    return -1;
  }
  *out = &hp_live[id]->managed.versioned;
  return hp_entry_answer();
}

static int hp_view_from_py_object(void *py_object, DLTensor *out) {
  (void)py_object;
  if (hp_entries_mode == 1) return -1;
  hp_tensor *storage = calloc(1, sizeof *storage);
  if (storage == NULL) {
    PyErr_NoMemory();
    return -1;
  }
  free(hp_view);
  hp_view = storage;
  hp_fill(out, storage, &hp_armed);
  return hp_entry_answer();
}

/* The allocator's answer, armed apart from the other entries' (`hp_arm_allocator`): the tensor
 * `hp_allocated` says whatever was asked (mode 0), a failure it does not report (1), a success
 * without a tensor (2), or two reports and a failure (3). */
static hp_spec hp_allocated;
static int hp_allocator_mode;

static int hp_allocate(DLTensor *prototype, DLManagedTensorVersioned **out, void *error_ctx,
                       void (*SetError)(void *error_ctx, const char *kind, const char *message)) {
  (void)prototype;
  switch (hp_allocator_mode) {
    case 1:
      return -1;
    case 2:
      *out = NULL;
      return 0;
    case 3:
      SetError(error_ctx, "ValueError", "the first report");
      SetError(error_ctx, "TypeError", "the second report");
      return -1;
    default:
      break;
  }
  int id = hp_make(&hp_allocated, 1);
  if (id < 0) {
    SetError(error_ctx, "MemoryError", "the C producer ran out of ids or memory");
    return -1;
  }
  *out = &hp_live[id]->managed.versioned;
  return 0;
}

void hp_arm_allocator(int mode, const hp_spec *spec) {
  hp_allocator_mode = mode;
  if (spec != NULL) hp_allocated = *spec;
}

/* A `to_py` that reports success and gives no object (and keeps nothing). */
static int hp_to_py_gives_nothing(DLManagedTensorVersioned *managed, void **out) {
  (void)managed;
  *out = NULL;
  return 0;
}

/* A `to_py` that hands the tensor out in a capsule (whose destructor deletes it), breaking the
 * table's contract as `hp_arm_to_py` says: not at all (0), a failure that sets no exception (1),
 * or a capsule made with an exception set (2). */
static int hp_to_py_mode;

void hp_arm_to_py(int mode) { hp_to_py_mode = mode; }

static int hp_to_py_capsule(DLManagedTensorVersioned *managed, void **out) {
  if (hp_to_py_mode == 1) return -1;
  PyObject *capsule = PyCapsule_New(managed, HP_VERSIONED_NAME, hp_capsule_destructor);
  if (capsule == NULL) return -1;
  *out = capsule;
  if (hp_to_py_mode == 2) PyErr_SetString(PyExc_RuntimeError, "the producer's own error");
  return 0;
}

static DLPackExchangeAPI hp_tables[4];

/* Arms the tables: every later call of their entries makes a tensor as `spec` says. */
void hp_arm(const hp_spec *spec) { hp_armed = *spec; }

/* A table whose managed entry makes tensors; with `view`, it also fills non-owning views
 * (else that entry is NULL, as for a producer without one). */
const DLPackExchangeAPI *hp_table(int view) {
  DLPackExchangeAPI *table = &hp_tables[view ? 1 : 0];
  table->header.version.major = DLPACK_MAJOR_VERSION;
  table->header.version.minor = DLPACK_MINOR_VERSION;
  table->header.prev_api = NULL;
  table->managed_tensor_allocator = hp_allocate;
  table->managed_tensor_from_py_object_no_sync = hp_from_py_object;
  table->dltensor_from_py_object_no_sync = view ? hp_view_from_py_object : NULL;
  return table;
}

/* The first table, with a `to_py` that reports success and gives no object. */
const DLPackExchangeAPI *hp_table_to_py_gives_nothing(void) {
  hp_tables[2] = *hp_table(0);
  hp_tables[2].managed_tensor_to_py_object_no_sync = hp_to_py_gives_nothing;
  return &hp_tables[2];
}

/* The first table, with a `to_py` that hands out capsules (`hp_arm_to_py`). */
const DLPackExchangeAPI *hp_table_to_py_capsule(void) {
  hp_tables[3] = *hp_table(0);
  hp_tables[3].managed_tensor_to_py_object_no_sync = hp_to_py_capsule;
  return &hp_tables[3];
}
