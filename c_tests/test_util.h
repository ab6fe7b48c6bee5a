/* A tiny assertion kit for the C tests (C11 and C++17): CHECK records a failure with where and
 * what, then carries on; test_summary() prints the final "N passed, M failed" line and returns
 * the process exit status (0 only when nothing failed). CHECK may be called from any thread. */
#ifndef DLPX_C_TESTS_TEST_UTIL_H_
#define DLPX_C_TESTS_TEST_UTIL_H_

#include <stdio.h>
#include <string.h>

static int test_passed_count;
static int test_failed_count;

/* Counts one check; prints "file:line: FAILED: cond -- message" when it failed. */
static inline int test_record(int ok, const char *file, int line, const char *what) {
  if (ok) {
    __atomic_add_fetch(&test_passed_count, 1, __ATOMIC_RELAXED);
  } else {
    __atomic_add_fetch(&test_failed_count, 1, __ATOMIC_RELAXED);
    fprintf(stderr, "%s:%d: FAILED: %s -- ", file, line, what);
  }
  return ok;
}

/* CHECK(cond, fmt, ...): the message is printed (after the condition) only on failure. */
#define CHECK(cond, ...)                                              \
  do {                                                                \
    if (!test_record((cond) ? 1 : 0, __FILE__, __LINE__, #cond)) {    \
      fprintf(stderr, __VA_ARGS__);                                   \
      fputc('\n', stderr);                                            \
    }                                                                 \
  } while (0)

/* Strings: NULL-safe equality, containment and prefix tests for messages. */
static inline int test_streq(const char *a, const char *b) {
  return a != NULL && b != NULL && strcmp(a, b) == 0;
}
static inline int test_contains(const char *haystack, const char *needle) {
  return haystack != NULL && needle != NULL && strstr(haystack, needle) != NULL;
}
static inline int test_starts_with(const char *s, const char *prefix) {
  return s != NULL && prefix != NULL && strncmp(s, prefix, strlen(prefix)) == 0;
}
/* For printing a possibly NULL string. */
static inline const char *test_str(const char *s) { return s != NULL ? s : "(null)"; }

/* What a SetError callback received (pass the record as error_ctx to record_error). */
struct error_record {
  int calls;
  void *ctx;
  char kind[64];
  char message[512];
};

static inline void record_error(void *error_ctx, const char *kind, const char *message) {
  struct error_record *rec = (struct error_record *)error_ctx;
  rec->calls += 1;
  rec->ctx = error_ctx;
  snprintf(rec->kind, sizeof rec->kind, "%s", kind != NULL ? kind : "(null)");
  snprintf(rec->message, sizeof rec->message, "%s", message != NULL ? message : "(null)");
}

/* At file scope in a test that asks for more memory than exists (a MemoryError case): under
 * AddressSanitizer such an allocation must come back as a failure, not abort the process. Read
 * by ASan only when it is linked in. */
#ifdef __cplusplus
#define TEST_HUGE_ALLOCATIONS_MAY_FAIL                                                                       \
  extern "C" const char *__asan_default_options(void);                                                   \
  extern "C" __attribute__((used)) const char *__asan_default_options(void) { return "allocator_may_return_null=1"; }
#else
#define TEST_HUGE_ALLOCATIONS_MAY_FAIL                    \
  const char *__asan_default_options(void);               \
  __attribute__((used)) const char *__asan_default_options(void) { return "allocator_may_return_null=1"; }
#endif

/* An allocator prototype: a compact tensor of `ndim` extents in `shape`, one lane of
 * (`code`, `bits`), on (`device_type`, `device_id`). Needs dlpack.h (through dlpx.h) first. */
#ifdef DLPACK_DLPACK_H_
static inline DLTensor test_prototype(int32_t device_type, int32_t device_id, uint8_t code, uint8_t bits,
                                      int32_t ndim, int64_t *shape) {
  DLTensor p;
  memset(&p, 0, sizeof p);
  p.device.device_type = (DLDeviceType)device_type;
  p.device.device_id = device_id;
  p.ndim = ndim;
  p.dtype.code = code;
  p.dtype.bits = bits;
  p.dtype.lanes = 1;
  p.shape = shape;
  return p;
}
#endif

/* Prints "N passed, M failed" and returns the exit status. */
static inline int test_summary(void) {
  int passed = __atomic_load_n(&test_passed_count, __ATOMIC_SEQ_CST);
  int failed = __atomic_load_n(&test_failed_count, __ATOMIC_SEQ_CST);
  fflush(stderr);
  printf("%d passed, %d failed\n", passed, failed);
  fflush(stdout);
  return failed == 0 ? 0 : 1;
}

/* The exit status ctest counts as a skip: dlpx_c_test(... CAN_SKIP) sets it as SKIP_RETURN_CODE. */
#define TEST_SKIPPED 77

/* Prints "skipped: why" and returns TEST_SKIPPED, for a test with nothing to observe here. */
static inline int test_skip(const char *why) {
  printf("skipped: %s\n", why);
  fflush(stdout);
  return TEST_SKIPPED;
}

#endif /* DLPX_C_TESTS_TEST_UTIL_H_ */
