/* A plain C program with no Python in the process links and loads libdlpx and uses it: the
 * allocator and streams work, the three PyObject entry points fail cleanly (-1 and a message in
 * dlpx_last_error(), never a crash, never a fake success), the table's header is DLPack 1.3
 * with no older table behind it, and dlpx_exchange_api_select walks synthetic prev_api chains
 * (newer majors in front, cycles, chains without a major-1 table, NULL). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* RTLD_DEFAULT */
#endif
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "dlpx/dlpx.h"
#include "test_util.h"

static const DLPackExchangeAPI *api(void) { return dlpx_exchange_api(); }

static DLManagedTensorVersioned *allocate_float32(int64_t n) {
  int64_t shape[1] = {n};
  DLTensor p = test_prototype(kDLCPU, 0, kDLFloat, 32, 1, shape);
  DLManagedTensorVersioned *m = NULL;
  if (api()->managed_tensor_allocator(&p, &m, NULL, NULL) != 0) return NULL;
  return m;
}

/* The last error must say which entry point failed and that there is no Python; a panic that
 * the boundary caught is not a clean failure. */
static void check_clean_no_python_error(const char *entry_point) {
  char prefix[128];
  snprintf(prefix, sizeof prefix, "dlpx: %s: ", entry_point);
  const char *message = dlpx_last_error();
  CHECK(message != NULL && message[0] != '\0', "%s: no message in dlpx_last_error()", entry_point);
  CHECK(test_starts_with(message, prefix), "%s: message \"%s\" does not start with \"%s\"", entry_point,
        test_str(message), prefix);
  CHECK(test_contains(message, "no Python interpreter"), "%s: message \"%s\" does not say Python is missing",
        entry_point, test_str(message));
  CHECK(!test_contains(message, "panic"), "%s: failed through a caught panic, not cleanly: \"%s\"", entry_point,
        test_str(message));
  CHECK(dlpx_last_error_kind() != NULL, "%s: no error kind", entry_point);
}

/* ---- the premise ---------------------------------------------------------------------------- */

static void test_this_process_has_no_python(void) {
  CHECK(dlsym(RTLD_DEFAULT, "Py_IsInitialized") == NULL, "a CPython is loaded into this test process");
  CHECK(dlsym(RTLD_DEFAULT, "dlpx_exchange_api") != NULL, "libdlpx is loaded");
}

static void test_version_and_table_header(void) {
  const char *version = dlpx_version();
  CHECK(version != NULL && version[0] != '\0', "dlpx_version() is empty");
  printf("dlpx version %s\n", test_str(version));
  const DLPackExchangeAPI *table = api();
  CHECK(table != NULL, "dlpx_exchange_api() is NULL");
  if (table == NULL) return;
  CHECK(table == dlpx_exchange_api(), "the table pointer changes between calls");
  CHECK(table->header.version.major == 1 && table->header.version.minor == 3, "table version %u.%u, want 1.3",
        table->header.version.major, table->header.version.minor);
  CHECK(table->header.prev_api == NULL, "dlpx's v1 table has a prev_api (%p); no older major exists",
        (void *)table->header.prev_api);
  CHECK(table->managed_tensor_allocator != NULL, "managed_tensor_allocator is NULL");
  CHECK(table->managed_tensor_from_py_object_no_sync != NULL, "managed_tensor_from_py_object_no_sync is NULL");
  CHECK(table->managed_tensor_to_py_object_no_sync != NULL, "managed_tensor_to_py_object_no_sync is NULL");
  CHECK(table->dltensor_from_py_object_no_sync != NULL, "dltensor_from_py_object_no_sync is NULL");
  CHECK(table->current_work_stream != NULL, "current_work_stream is NULL");
}

/* ---- PyObject entry points without Python ----------------------------------------------------- */

/* No PyObject can exist in this process. The stand-in is readable memory shaped like an object
 * header (refcount, type pointer to a zeroed "type"), so an entry point that peeks at it before
 * noticing there is no interpreter cannot crash the test. */
static char fake_type[1024];
static struct {
  intptr_t ob_refcnt;
  void *ob_type;
  char rest[256];
} fake_object = {1, fake_type, {0}};

static void test_managed_tensor_from_py_object_fails_cleanly(void) {
  DLManagedTensorVersioned *sentinel = (DLManagedTensorVersioned *)&fake_type;
  DLManagedTensorVersioned *out = sentinel;
  dlpx_clear_last_error();
  int rc = api()->managed_tensor_from_py_object_no_sync(&fake_object, &out);
  CHECK(rc == -1, "managed_tensor_from_py_object_no_sync returned %d, want -1", rc);
  CHECK(out == sentinel, "managed_tensor_from_py_object_no_sync wrote *out on failure");
  check_clean_no_python_error("managed_tensor_from_py_object_no_sync");

  dlpx_clear_last_error();
  rc = api()->managed_tensor_from_py_object_no_sync(NULL, &out);
  CHECK(rc == -1, "managed_tensor_from_py_object_no_sync(NULL) returned %d, want -1", rc);
  CHECK(test_starts_with(dlpx_last_error(), "dlpx: managed_tensor_from_py_object_no_sync: "),
        "managed_tensor_from_py_object_no_sync(NULL): message \"%s\"", test_str(dlpx_last_error()));
}

static void test_dltensor_from_py_object_fails_cleanly(void) {
  DLTensor view;
  memset(&view, 0x5A, sizeof view);
  DLTensor before = view;
  dlpx_clear_last_error();
  int rc = api()->dltensor_from_py_object_no_sync(&fake_object, &view);
  CHECK(rc == -1, "dltensor_from_py_object_no_sync returned %d, want -1", rc);
  CHECK(memcmp(&view, &before, sizeof view) == 0, "dltensor_from_py_object_no_sync wrote *out on failure");
  check_clean_no_python_error("dltensor_from_py_object_no_sync");

  dlpx_clear_last_error();
  rc = api()->dltensor_from_py_object_no_sync(NULL, &view);
  CHECK(rc == -1, "dltensor_from_py_object_no_sync(NULL) returned %d, want -1", rc);
  CHECK(test_starts_with(dlpx_last_error(), "dlpx: dltensor_from_py_object_no_sync: "),
        "dltensor_from_py_object_no_sync(NULL): message \"%s\"", test_str(dlpx_last_error()));
}

static void test_managed_tensor_to_py_object_fails_and_leaves_the_tensor_to_the_caller(void) {
  DLManagedTensorVersioned *m = allocate_float32(8);
  CHECK(m != NULL, "allocation failed: %s", test_str(dlpx_last_error()));
  if (m == NULL) return;
  float *data = (float *)m->dl_tensor.data;
  for (int i = 0; i < 8; ++i) data[i] = (float)i + 0.5f;
  void *object = &fake_object;
  dlpx_clear_last_error();
  int rc = api()->managed_tensor_to_py_object_no_sync(m, &object);
  CHECK(rc == -1, "managed_tensor_to_py_object_no_sync returned %d, want -1", rc);
  CHECK(object == &fake_object, "managed_tensor_to_py_object_no_sync wrote *out_py_object on failure");
  check_clean_no_python_error("managed_tensor_to_py_object_no_sync");
  /* Ruling 4: failure leaves ownership with the caller. The tensor must still be whole (under
   * ASan a deleter run by the library would make these reads a use-after-free). */
  int intact = m->deleter != NULL && m->dl_tensor.ndim == 1 && m->dl_tensor.shape[0] == 8;
  for (int i = 0; i < 8; ++i) intact &= data[i] == (float)i + 0.5f;
  CHECK(intact, "the tensor changed after a failed managed_tensor_to_py_object_no_sync");
  m->deleter(m);

  dlpx_clear_last_error();
  rc = api()->managed_tensor_to_py_object_no_sync(NULL, &object);
  CHECK(rc == -1, "managed_tensor_to_py_object_no_sync(NULL) returned %d, want -1", rc);
  CHECK(test_starts_with(dlpx_last_error(), "dlpx: managed_tensor_to_py_object_no_sync: "),
        "managed_tensor_to_py_object_no_sync(NULL): message \"%s\"", test_str(dlpx_last_error()));
}

static void test_set_error_python_without_python_fills_last_error(void) {
  dlpx_clear_last_error();
  dlpx_set_error_python(NULL, "ValueError", "dlpx: test: hello");
  CHECK(test_streq(dlpx_last_error(), "dlpx: test: hello"), "last error \"%s\"", test_str(dlpx_last_error()));
  CHECK(test_streq(dlpx_last_error_kind(), "ValueError"), "last kind %s", test_str(dlpx_last_error_kind()));
  dlpx_set_error_python(NULL, "NoSuchError", "dlpx: test: unknown kind");
  CHECK(test_streq(dlpx_last_error_kind(), "RuntimeError"), "an unknown kind maps to RuntimeError, got %s",
        test_str(dlpx_last_error_kind()));
  dlpx_set_error_python(NULL, NULL, NULL); /* must not crash, and says there was no message */
  CHECK(test_contains(dlpx_last_error(), "with no message"), "a NULL message: \"%s\"", test_str(dlpx_last_error()));
  CHECK(test_streq(dlpx_last_error_kind(), "RuntimeError"), "a NULL kind: %s", test_str(dlpx_last_error_kind()));

  /* As the allocator's SetError, in a process without Python. */
  int64_t shape[1] = {-2};
  DLTensor p = test_prototype(kDLCPU, 0, kDLFloat, 32, 1, shape);
  DLManagedTensorVersioned *out = NULL;
  dlpx_clear_last_error();
  CHECK(api()->managed_tensor_allocator(&p, &out, NULL, dlpx_set_error_python) == -1, "bad shape accepted");
  CHECK(test_streq(dlpx_last_error(), "dlpx: allocator: shape[0] = -2 is negative"), "last error \"%s\"",
        test_str(dlpx_last_error()));
  CHECK(test_streq(dlpx_last_error_kind(), "ValueError"), "kind %s", test_str(dlpx_last_error_kind()));
}

static void test_allocator_works_without_python(void) {
  DLManagedTensorVersioned *m = allocate_float32(16);
  CHECK(m != NULL && m->dl_tensor.data != NULL, "allocation failed: %s", test_str(dlpx_last_error()));
  if (m != NULL) m->deleter(m);
}

/* ---- streams -------------------------------------------------------------------------------- */

static void *const STREAM_A = (void *)(uintptr_t)0xA000;
static void *const STREAM_B = (void *)(uintptr_t)0xB000;
static void *const STREAM_C = (void *)(uintptr_t)0xC000;

static void *table_stream(DLDeviceType type, int32_t id, int *rc) {
  void *stream = (void *)(uintptr_t)0xDEAD;
  *rc = api()->current_work_stream(type, id, &stream);
  return stream;
}

static void test_current_work_stream_defaults(void) {
  int rc = 1;
  CHECK(table_stream(kDLCPU, 0, &rc) == NULL && rc == 0, "CPU: want NULL and 0 (rc %d)", rc);
  CHECK(table_stream(kDLCUDA, 0, &rc) == NULL && rc == 0, "CUDA 0 with nothing set: want NULL and 0 (rc %d)", rc);
  CHECK(table_stream(kDLROCM, 2, &rc) == NULL && rc == 0, "ROCm 2 with nothing set: want NULL and 0 (rc %d)", rc);
  dlpx_clear_last_error();
  CHECK(api()->current_work_stream(kDLCUDA, 0, NULL) == -1, "a NULL out_current_stream is refused");
  CHECK(dlpx_last_error() != NULL, "a NULL out_current_stream leaves a message");
}

static void test_set_and_get_current_stream(void) {
  void *previous = STREAM_C;
  CHECK(dlpx_set_current_stream(kDLCUDA, 0, STREAM_A, &previous) == 0, "set CUDA 0 -> A: %s",
        test_str(dlpx_last_error()));
  CHECK(previous == NULL, "the previous stream of CUDA 0 was %p, want NULL", previous);
  void *got = NULL;
  CHECK(dlpx_get_current_stream(kDLCUDA, 0, &got) == 0 && got == STREAM_A, "get CUDA 0 = %p, want A", got);
  int rc = 1;
  CHECK(table_stream(kDLCUDA, 0, &rc) == STREAM_A && rc == 0, "the table's current_work_stream agrees");
  CHECK(table_stream(kDLCUDA, 1, &rc) == NULL, "CUDA 1 is unaffected");
  CHECK(table_stream(kDLROCM, 0, &rc) == NULL, "ROCm 0 is unaffected");
  CHECK(table_stream(kDLCPU, 0, &rc) == NULL, "CPU stays NULL");

  CHECK(dlpx_set_current_stream(kDLCUDA, 0, STREAM_B, &previous) == 0 && previous == STREAM_A,
        "replacing A by B returns A (got %p)", previous);
  CHECK(dlpx_set_current_stream(kDLCUDA, 1, STREAM_C, NULL) == 0, "a NULL previous is allowed");
  CHECK(table_stream(kDLCUDA, 1, &rc) == STREAM_C, "CUDA 1 = C");
  CHECK(table_stream(kDLCUDA, 0, &rc) == STREAM_B, "CUDA 0 still B");

  CHECK(dlpx_set_current_stream(kDLCUDA, 0, NULL, &previous) == 0 && previous == STREAM_B,
        "clearing returns B (got %p)", previous);
  CHECK(table_stream(kDLCUDA, 0, &rc) == NULL, "NULL clears CUDA 0");
  CHECK(dlpx_set_current_stream(kDLCUDA, 0, NULL, &previous) == 0 && previous == NULL,
        "clearing again returns NULL (got %p)", previous);
  CHECK(dlpx_set_current_stream(kDLCUDA, 1, NULL, NULL) == 0, "clear CUDA 1");
  CHECK(table_stream(kDLCUDA, 1, &rc) == NULL, "CUDA 1 cleared");
}

static void test_set_current_stream_rejects_cpu_and_bad_arguments(void) {
  void *previous = STREAM_C;
  dlpx_clear_last_error();
  CHECK(dlpx_set_current_stream(kDLCPU, 0, STREAM_A, &previous) == -1, "CPU has no streams: want -1");
  CHECK(previous == STREAM_C, "*previous written on failure");
  CHECK(test_starts_with(dlpx_last_error(), "dlpx: "), "CPU set: message \"%s\"", test_str(dlpx_last_error()));
  CHECK(test_contains(dlpx_last_error(), "cpu"), "the message names cpu: \"%s\"", test_str(dlpx_last_error()));
  int rc = 1;
  CHECK(table_stream(kDLCPU, 0, &rc) == NULL, "CPU stays NULL after a refused set");
  dlpx_clear_last_error();
  CHECK(dlpx_set_current_stream(kDLCUDA, -1, STREAM_A, NULL) == -1, "a negative device_id is refused");
  CHECK(test_contains(dlpx_last_error(), "-1"), "the message names the id: \"%s\"", test_str(dlpx_last_error()));
  /* A type DLPack does not name has no stream either (the allocator refuses it alike). */
  int unnamed[] = {0, 5, 99};
  for (int i = 0; i < 3; i++) {
    dlpx_clear_last_error();
    CHECK(dlpx_set_current_stream((DLDeviceType)unnamed[i], 0, STREAM_A, NULL) == -1, "device type %d refused", unnamed[i]);
    CHECK(test_contains(dlpx_last_error(), "unknown device type"), "type %d: \"%s\"", unnamed[i],
          test_str(dlpx_last_error()));
    CHECK(table_stream((DLDeviceType)unnamed[i], 0, &rc) == NULL, "type %d keeps no stream", unnamed[i]);
  }
  dlpx_clear_last_error();
  CHECK(dlpx_get_current_stream(kDLCUDA, 0, NULL) == -1, "get with out NULL is refused");
  CHECK(dlpx_last_error() != NULL, "get with out NULL leaves a message");
}

struct stream_probe {
  void *seen_before;
  void *seen_after;
  int set_rc;
};

static void *other_thread(void *arg) {
  struct stream_probe *probe = (struct stream_probe *)arg;
  void *s = (void *)(uintptr_t)0xDEAD;
  api()->current_work_stream(kDLCUDA, 0, &s);
  probe->seen_before = s;
  probe->set_rc = dlpx_set_current_stream(kDLCUDA, 0, STREAM_C, NULL);
  api()->current_work_stream(kDLCUDA, 0, &s);
  probe->seen_after = s;
  return NULL;
}

static void test_current_stream_is_per_thread(void) {
  CHECK(dlpx_set_current_stream(kDLCUDA, 0, STREAM_A, NULL) == 0, "set A here");
  struct stream_probe probe = {NULL, NULL, -2};
  pthread_t thread;
  CHECK(pthread_create(&thread, NULL, other_thread, &probe) == 0, "pthread_create");
  pthread_join(thread, NULL);
  CHECK(probe.seen_before == NULL, "another thread sees this thread's stream (%p)", probe.seen_before);
  CHECK(probe.set_rc == 0 && probe.seen_after == STREAM_C, "the other thread sets its own (%p)", probe.seen_after);
  int rc = 1;
  CHECK(table_stream(kDLCUDA, 0, &rc) == STREAM_A, "this thread still sees A after the other set C");
  CHECK(dlpx_set_current_stream(kDLCUDA, 0, NULL, NULL) == 0, "clear");
}

/* ---- dlpx_exchange_api_select --------------------------------------------------------------- */

static DLPackExchangeAPIHeader *dlpx_header(void) {
  /* prev_api is a non-const pointer: synthetic chains link to dlpx's (const) table through it;
   * nothing writes through it. */
  return (DLPackExchangeAPIHeader *)&api()->header;
}

static DLPackExchangeAPIHeader header_of(uint32_t major, DLPackExchangeAPIHeader *prev) {
  DLPackExchangeAPIHeader h;
  h.version.major = major;
  h.version.minor = 0;
  h.prev_api = prev;
  return h;
}

static void test_select_finds_dlpx_itself(void) {
  CHECK(dlpx_exchange_api_select(&api()->header) == api(), "dlpx's own table selects itself");
}

static void test_select_skips_newer_and_older_majors_in_front(void) {
  DLPackExchangeAPIHeader v2 = header_of(2, dlpx_header());
  CHECK(dlpx_exchange_api_select(&v2) == api(), "a major-2 head in front of dlpx's table leads to it");
  DLPackExchangeAPIHeader v3 = header_of(3, &v2);
  CHECK(dlpx_exchange_api_select(&v3) == api(), "3 -> 2 -> dlpx leads to dlpx");
  DLPackExchangeAPIHeader v0 = header_of(0, dlpx_header());
  CHECK(dlpx_exchange_api_select(&v0) == api(), "a major-0 head in front of dlpx's table leads to it");
  /* 15 headers in front: dlpx's table is the 16th link, the last one walked. */
  DLPackExchangeAPIHeader chain[15];
  for (int i = 0; i < 15; ++i) chain[i] = header_of(2, i + 1 < 15 ? &chain[i + 1] : dlpx_header());
  CHECK(dlpx_exchange_api_select(&chain[0]) == api(), "dlpx's table as the 16th link is found");
}

static void test_select_refuses_cycles(void) {
  DLPackExchangeAPIHeader a = header_of(2, NULL);
  DLPackExchangeAPIHeader b = header_of(2, &a);
  a.prev_api = &b;
  dlpx_clear_last_error();
  CHECK(dlpx_exchange_api_select(&a) == NULL, "a cycle of two major-2 headers gives NULL");
  CHECK(test_contains(dlpx_last_error(), "cycle"), "the message mentions the cycle: \"%s\"",
        test_str(dlpx_last_error()));
  DLPackExchangeAPIHeader self = header_of(3, NULL);
  self.prev_api = &self;
  dlpx_clear_last_error();
  CHECK(dlpx_exchange_api_select(&self) == NULL, "a header that is its own prev_api gives NULL");
  CHECK(test_contains(dlpx_last_error(), "cycle"), "self-cycle message: \"%s\"", test_str(dlpx_last_error()));
}

static void test_select_refuses_chains_without_major_one(void) {
  DLPackExchangeAPIHeader v2 = header_of(2, NULL);
  DLPackExchangeAPIHeader v3 = header_of(3, &v2);
  dlpx_clear_last_error();
  CHECK(dlpx_exchange_api_select(&v3) == NULL, "a chain of majors 3 and 2 gives NULL");
  const char *message = dlpx_last_error();
  CHECK(test_starts_with(message, "dlpx: "), "message \"%s\"", test_str(message));
  CHECK(test_contains(message, "major version 1"), "the message says no major-1 table was found: \"%s\"",
        test_str(message));
  CHECK(dlpx_last_error_kind() != NULL, "an error kind is set");

  DLPackExchangeAPIHeader long_chain[20];
  for (int i = 0; i < 20; ++i) long_chain[i] = header_of(2, i + 1 < 20 ? &long_chain[i + 1] : dlpx_header());
  dlpx_clear_last_error();
  CHECK(dlpx_exchange_api_select(&long_chain[0]) == NULL, "a chain longer than 16 links gives NULL");
  CHECK(test_contains(dlpx_last_error(), "16"), "the message gives the bound: \"%s\"", test_str(dlpx_last_error()));
}

static void test_select_refuses_null(void) {
  dlpx_clear_last_error();
  CHECK(dlpx_exchange_api_select(NULL) == NULL, "NULL gives NULL");
  CHECK(test_contains(dlpx_last_error(), "NULL"), "the message says NULL: \"%s\"", test_str(dlpx_last_error()));
}

int main(void) {
  test_this_process_has_no_python();
  test_version_and_table_header();
  test_allocator_works_without_python();
  test_managed_tensor_from_py_object_fails_cleanly();
  test_dltensor_from_py_object_fails_cleanly();
  test_managed_tensor_to_py_object_fails_and_leaves_the_tensor_to_the_caller();
  test_set_error_python_without_python_fills_last_error();
  test_current_work_stream_defaults();
  test_set_and_get_current_stream();
  test_set_current_stream_rejects_cpu_and_bad_arguments();
  test_current_stream_is_per_thread();
  test_select_finds_dlpx_itself();
  test_select_skips_newer_and_older_majors_in_front();
  test_select_refuses_cycles();
  test_select_refuses_chains_without_major_one();
  test_select_refuses_null();
  return test_summary();
}
