/* A kernel library's kernels called from C, with no Python in the process: dlpx_kernel_find and
 * dlpx_kernel_call over c_tests/kernel_cases (DLTensors and scalars in, managed tensors and
 * scalars out, dlpx's allocator), every bad path a clean -1 with the kind and the kernel's name
 * in the message, and nothing lost (the ASan and valgrind variants: every output a failing
 * kernel allocated is deleted once). kernel.h's structures have the layout the loader reads.
 *
 * argv: the kernel_cases library, the newer-ABI one, the one with no kernels, the one with a bad
 * signature, a file that is no library, and the library that finds its own kernels as it loads. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "dlpx/kernel.h"
#include "test_util.h"
#include "kernel_call_util.h"

/* `huge` asks for 128 TiB. */
TEST_HUGE_ALLOCATIONS_MAY_FAIL

static const char *newer_path, *empty_path, *bad_signature_path, *not_a_library, *self_finding_path;

/* The same numbers src/kernels/export.rs asserts of its mirrors (LP64). */
static void test_kernel_h_has_the_layout_the_loader_reads(void) {
  CHECK(DLPX_KERNEL_ABI_VERSION == 2, "version %d", DLPX_KERNEL_ABI_VERSION);
  CHECK(sizeof(DlpxKernelExport) == 40, "%zu", sizeof(DlpxKernelExport));
  CHECK(offsetof(DlpxKernelExport, flags) == 4 && offsetof(DlpxKernelExport, name) == 8, "name");
  CHECK(offsetof(DlpxKernelExport, signature) == 16 && offsetof(DlpxKernelExport, function) == 24, "function");
  CHECK(offsetof(DlpxKernelExport, next) == 32, "next");
  CHECK(sizeof(DlpxKernelLibrary) == 16 && offsetof(DlpxKernelLibrary, first) == 8, "record");
  /* What src/kernels/value.rs asserts of its enum (repr(C, i32)) and kernels/call.rs's head. */
  CHECK(sizeof(DlpxArgument) == 64 && offsetof(DlpxArgument, value) == 8, "%zu", sizeof(DlpxArgument));
  CHECK(offsetof(DlpxArgument, value.tensor.flags) == 56 && offsetof(DlpxArgument, value.str.size) == 16, "members");
  CHECK(offsetof(struct DlpxCall, arguments) == 0 && offsetof(struct DlpxCall, argument_count) == 8, "call");
}

static void check_fails(const char *name, const DlpxValue *args, size_t nargs, const char *kind, const char *needle);

/* Every argument a kernel reads in place is what the call functions give (the kernel `agree`
 * compares them), and the in-place readers refuse as the functions do. */
static void test_arguments_read_in_place_agree_with_the_functions(void) {
  float data[8] = {0};
  int64_t shape[1], strides[1];
  DLTensor a = strided(data, 32, shape, strides);
  DlpxValue args[4] = {tensor(&a), value(DLPX_VALUE_NONE), tensor(&a), tensor(&a)};
  args[2].flags = DLPACK_FLAG_BITMASK_READ_ONLY;
  DlpxValue results[1];
  size_t n = 0;
  for (size_t nargs = 1; nargs <= 4; ++nargs) {
    int rc = dlpx_kernel_call(find("agree"), args, nargs, results, 1, &n);
    /* a, bias, *rest (what is left over), then n, x, flag, text, none at their defaults. */
    const int64_t expected = (int64_t)(nargs < 2 ? 2 : nargs) + 5;
    CHECK(rc == 0 && n == 1 && results[0].int64 == expected, "%zu args: rc %d, %lld: %s", nargs, rc,
          (long long)results[0].int64, test_str(dlpx_last_error()));
  }
  DlpxValue one[1] = {tensor(&a)};
  check_fails("ninth_in_place", one, 1, "IndexError", "dlpx: ninth_in_place: argument 9 asked for; the call has 1");
  check_fails("wrong_kind_in_place", one, 1, "TypeError",
              "dlpx: wrong_kind_in_place: argument 0 ('a') is a tensor, not an int");
}

/* Expects dlpx_kernel_call to fail with `kind` and `needle` in the message, no result. */
static void check_fails(const char *name, const DlpxValue *args, size_t nargs, const char *kind, const char *needle) {
  const char *message = call_fails(name, args, nargs, kind);
  CHECK(test_contains(message, needle), "%s: \"%s\" lacks \"%s\"", name, test_str(message), needle);
}

static void test_scalars_in_and_out_with_defaults(void) {
  DlpxValue args[1] = {value(DLPX_VALUE_INT)};
  args[0].int64 = 41;
  DlpxValue results[4];
  size_t n = 0;
  int rc = dlpx_kernel_call(find("scalars"), args, 1, results, 4, &n);
  CHECK(rc == 0 && n == 4, "rc %d, n %zu: %s", rc, n, test_str(dlpx_last_error()));
  if (rc != 0 || n != 4) return;
  CHECK(results[0].kind == DLPX_VALUE_INT && results[0].int64 == 42, "n + 1: %lld", (long long)results[0].int64);
  CHECK(results[1].kind == DLPX_VALUE_FLOAT && results[1].float64 == 2.0, "2 x (x defaults to 1.0)");
  CHECK(results[2].kind == DLPX_VALUE_BOOL && results[2].boolean == false, "not flag (flag defaults to True)");
  CHECK(results[3].kind == DLPX_VALUE_INT && results[3].int64 == 3, "len(text) (text defaults to \"abc\")");
  /* An int is taken for a float parameter. */
  DlpxValue two[2] = {value(DLPX_VALUE_INT), value(DLPX_VALUE_INT)};
  two[1].int64 = 5;
  rc = dlpx_kernel_call(find("scalars"), two, 2, results, 4, &n);
  CHECK(rc == 0 && results[1].float64 == 10.0, "x = 5 as a float: %f", results[1].float64);
}

/* Keyword arguments, as vectorcall passes them: the keyword-only parameters of `scalars(n: int,
 * x=1.0, *, flag=True, text="abc")` are set from C only this way; Python's TypeErrors for the
 * rest. */
static void test_keyword_arguments(void) {
  DlpxValue args[4] = {value(DLPX_VALUE_INT), value(DLPX_VALUE_STR), value(DLPX_VALUE_BOOL), value(DLPX_VALUE_FLOAT)};
  args[0].int64 = 1;
  args[1].str_data = "abcdefg";
  args[1].str_size = 7;
  args[2].boolean = false;
  args[3].float64 = 4.0;
  const char *names[3] = {"text", "flag", "x"};
  DlpxValue results[4];
  size_t n = 0;
  int rc = dlpx_kernel_call_named(find("scalars"), args, 1, names, 3, results, 4, &n);
  CHECK(rc == 0 && n == 4, "rc %d, n %zu: %s", rc, n, test_str(dlpx_last_error()));
  if (rc != 0 || n != 4) return;
  CHECK(results[1].float64 == 8.0 && results[2].boolean == true && results[3].int64 == 7, "x, flag, text by name");
  /* Every parameter by name, and none: dlpx_kernel_call's answer. */
  DlpxValue all[1] = {value(DLPX_VALUE_INT)};
  all[0].int64 = 41;
  const char *n_only[1] = {"n"};
  rc = dlpx_kernel_call_named(find("scalars"), all, 0, n_only, 1, results, 4, &n);
  CHECK(rc == 0 && n == 4 && results[0].int64 == 42 && results[3].int64 == 3, "n by name: %s",
        test_str(dlpx_last_error()));
  rc = dlpx_kernel_call_named(find("scalars"), all, 1, NULL, 0, results, 4, &n);
  CHECK(rc == 0 && n == 4 && results[0].int64 == 42, "no names: %s", test_str(dlpx_last_error()));

  struct {
    size_t nargs, nnames;
    const char *names[3];
    const char *kind, *needle;
  } bad[] = {
      {1, 1, {"nope"}, "TypeError", "dlpx: scalars: got an unexpected keyword argument 'nope'"},
      {1, 1, {"n"}, "TypeError", "dlpx: scalars: got multiple values for argument 'n'"},
      {0, 2, {"n", "n"}, "TypeError", "dlpx: scalars: got multiple values for argument 'n'"},
      {1, 1, {"\xff"}, "TypeError", "got an unexpected keyword argument \"\\xff\" (not UTF-8)"},
      {1, 1, {NULL}, "ValueError", "names[0] is NULL"},
      {0, 1, {"flag"}, "TypeError", "dlpx: scalars: missing required argument 'n'"},
      /* `text` takes a str: the keyword's value is checked as a positional one is. */
      {1, 1, {"text"}, "TypeError", "dlpx: scalars: parameter 'text': takes str, got"},
  };
  DlpxValue values[3] = {value(DLPX_VALUE_INT), value(DLPX_VALUE_INT), value(DLPX_VALUE_INT)};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; ++i) {
    n = 99;
    rc = dlpx_kernel_call_named(find("scalars"), values, bad[i].nargs, bad[i].names, bad[i].nnames, results, 4, &n);
    CHECK(rc == -1 && n == 0, "case %zu: rc %d, nresults %zu", i, rc, n);
    CHECK(test_streq(dlpx_last_error_kind(), bad[i].kind), "case %zu: kind %s", i, test_str(dlpx_last_error_kind()));
    CHECK(test_contains(dlpx_last_error(), bad[i].needle), "case %zu: \"%s\" lacks \"%s\"", i,
          test_str(dlpx_last_error()), bad[i].needle);
  }
  /* A `*name` parameter takes no keyword; NULL names or args with a count are refused. */
  const char *rest[1] = {"rest"};
  rc = dlpx_kernel_call_named(find("describe_tensors"), values, 0, rest, 1, results, 4, &n);
  CHECK(rc == -1 && test_contains(dlpx_last_error(), "got an unexpected keyword argument 'rest'"), "%s",
        test_str(dlpx_last_error()));
  rc = dlpx_kernel_call_named(find("scalars"), values, 1, NULL, 1, results, 4, &n);
  CHECK(rc == -1 && test_contains(dlpx_last_error(), "names (with nnames > 0) is NULL"), "%s",
        test_str(dlpx_last_error()));
  rc = dlpx_kernel_call_named(find("scalars"), NULL, 0, n_only, 1, results, 4, &n);
  CHECK(rc == -1 && test_contains(dlpx_last_error(), "args (with nnames > 0) is NULL"), "%s",
        test_str(dlpx_last_error()));
  /* A hostile count reads no further than one name past the parameters (here: the repeat). */
  const char *repeated[3] = {"n", "x", "n"};
  rc = dlpx_kernel_call_named(find("scalars"), values, 0, repeated, SIZE_MAX, results, 4, &n);
  CHECK(rc == -1 && test_contains(dlpx_last_error(), "got multiple values for argument 'n'"), "%s",
        test_str(dlpx_last_error()));
}

static void test_tensor_results_are_the_callers_to_delete(void) {
  float data[8] = {0, -1, 1, -1, 2, -1, 3, -1};
  int64_t shape[1], strides[1];
  DLTensor a = strided(data, 32, shape, strides);
  DlpxValue args[1] = {tensor(&a)};
  DlpxValue results[2];
  size_t n = 0;
  int rc = dlpx_kernel_call(find("pair"), args, 1, results, 2, &n);
  CHECK(rc == 0 && n == 2, "rc %d, n %zu: %s", rc, n, test_str(dlpx_last_error()));
  if (rc != 0 || n != 2) return;
  for (int r = 0; r < 2; ++r) {
    DLManagedTensorVersioned *m = results[r].managed;
    CHECK(results[r].kind == DLPX_VALUE_TENSOR && m != NULL, "result %d", r);
    CHECK(m->dl_tensor.ndim == 1 && m->dl_tensor.shape[0] == 4, "result %d shape", r);
    for (int i = 0; i < 4; ++i) {
      float expected = r == 0 ? (float)i + 1 : (float)i * 2;
      CHECK(((float *)m->dl_tensor.data)[i] == expected, "result %d [%d]", r, i);
    }
    m->deleter(m);
  }
}

static void test_kinds_of_optional_and_keyword_only_parameters(void) {
  float data[8] = {0};
  int64_t shape[1], strides[1];
  DLTensor a = strided(data, 32, shape, strides);
  DlpxValue args[1] = {tensor(&a)};
  DlpxValue results[4];
  size_t n = 0;
  int rc = dlpx_kernel_call(find("describe"), args, 1, results, 4, &n);
  CHECK(rc == 0 && n == 4, "rc %d, n %zu: %s", rc, n, test_str(dlpx_last_error()));
  CHECK(results[0].int64 == 3 && results[1].int64 == DLPX_VALUE_TENSOR, "count and a");
  CHECK(results[2].int64 == DLPX_VALUE_NONE && results[3].int64 == DLPX_VALUE_NONE, "bias and scale default to None");
  /* A read-only tensor says so. */
  args[0].flags = DLPACK_FLAG_BITMASK_READ_ONLY;
  rc = dlpx_kernel_call(find("flags"), args, 1, results, 4, &n);
  CHECK(rc == 0 && results[0].int64 == (int64_t)DLPACK_FLAG_BITMASK_READ_ONLY, "flags");
  /* Only READ_ONLY reaches the kernel of a float32 tensor (kernel.h: the other bits are 0; PADDED
   * only for a sub-byte dtype). */
  args[0].flags = ~(uint64_t)0;
  rc = dlpx_kernel_call(find("flags"), args, 1, results, 4, &n);
  CHECK(rc == 0 && results[0].int64 == (int64_t)DLPACK_FLAG_BITMASK_READ_ONLY, "a caller's other flags: %llx",
        (unsigned long long)results[0].int64);
  /* A 0-d tensor with NULL shape and strides (legal for ndim 0) reaches the kernel with neither
   * NULL, as kernel.h promises. */
  DLTensor scalar = a;
  scalar.ndim = 0;
  scalar.shape = NULL;
  scalar.strides = NULL;
  args[0] = tensor(&scalar);
  rc = dlpx_kernel_call(find("null_dims"), args, 1, results, 4, &n);
  CHECK(rc == 0 && n == 1 && results[0].int64 == 0, "a 0-d tensor's dims: rc %d, got %lld", rc,
        (long long)results[0].int64);
  CHECK(scalar.shape == NULL && scalar.strides == NULL, "the caller's tensor is left as it was");
}

static void test_bad_calls_fail_cleanly_and_lose_nothing(void) {
  float data[8] = {0};
  int64_t shape[1], strides[1];
  DLTensor a = strided(data, 32, shape, strides);
  DlpxValue one[1] = {tensor(&a)};
  check_fails("ninth", one, 1, "IndexError", "dlpx: ninth: argument 9 asked for; the call has 1");
  check_fails("ninth_ignored", one, 1, "IndexError", "dlpx: ninth_ignored: argument 9");
  check_fails("wrong_kind", one, 1, "TypeError", "dlpx: wrong_kind: argument 0 ('a') is a tensor, not an int");
  check_fails("silent", NULL, 0, "RuntimeError", "dlpx: silent: the kernel returned -1 without reporting");
  DlpxValue kind_and_message[2] = {str("KeyError"), str("no such key")};
  check_fails("raise_", kind_and_message, 2, "KeyError", "dlpx: raise_: no such key");
  kind_and_message[0] = str("LinAlgError");
  check_fails("raise_", kind_and_message, 2, "RuntimeError", "dlpx: raise_: LinAlgError: no such key");
  check_fails("allocate_then_fail", one, 1, "ValueError", "dlpx: allocate_then_fail: failed after allocating");
  check_fails("huge", one, 1, "MemoryError", "dlpx: huge: output: allocator: out of memory");
  check_fails("return_twice", one, 1, "ValueError", "or returned it twice");
  check_fails("return_argument", one, 1, "ValueError", "did not allocate");
  /* A kernel that changes an output's header: an error, and the output deleted as it was made. */
  DlpxValue rewrite[2] = {tensor(&a), str("shape")};
  check_fails("rewrite_header", rewrite, 2, "RuntimeError", "dlpx: rewrite_header: the kernel changed output 0's shape");
  rewrite[1] = str("ndim");
  check_fails("rewrite_header", rewrite, 2, "RuntimeError", "changed output 0's ndim");
  rewrite[1] = str("unreturned");
  check_fails("rewrite_header", rewrite, 2, "RuntimeError", "changed output 0's shape");
  /* Binding: too many, too few, the wrong kind. */
  DlpxValue two[2] = {tensor(&a), tensor(&a)};
  check_fails("pair", two, 2, "TypeError", "dlpx: pair: takes at most 1 positional argument (2 given)");
  check_fails("pair", NULL, 0, "TypeError", "dlpx: pair: missing required argument 'a'");
  DlpxValue text[1] = {str("a")};
  check_fails("pair", text, 1, "TypeError", "dlpx: pair: parameter 'a': takes tensor, got a str (DLPX_VALUE_STR)");
  DlpxValue odd[1] = {value(99)};
  check_fails("pair", odd, 1, "TypeError", "got value kind 99, which is none of DLPX_VALUE_*");
  /* No device has a negative index: a C caller's cpu:-7 is refused, naming the parameter. */
  DLTensor negative = a;
  negative.device.device_id = -7;
  DlpxValue on_negative[1] = {tensor(&negative)};
  check_fails("pair", on_negative, 1, "TypeError", "dlpx: pair: parameter 'a': its device_id is -7 (negative)");
  /* A count past what a call holds is refused before anything is read or allocated for it (no
   * abort on a 64-byte value per argument). */
  check_fails("nop_released", one, (size_t)1 << 40, "TypeError", "1099511627776 arguments: a kernel takes at most");
  check_fails("nop_released", one, SIZE_MAX, "TypeError", "arguments: a kernel takes at most");
  /* A kernel's error with no kind and no message still says something. */
  DlpxValue blank[2] = {str(""), str("")};
  check_fails("raise_", blank, 2, "RuntimeError", "dlpx: raise_: the kernel reported an error without a message");
  /* An empty string may come as NULL: no slice is made of it (UB in Rust, an abort in a debug
   * build), and the kernel sees a pointer it may read 0 bytes from. */
  blank[0].str_data = NULL;
  blank[1].str_data = NULL;
  check_fails("raise_", blank, 2, "RuntimeError", "dlpx: raise_: the kernel reported an error without a message");
  /* No framework has a stream on a device DLPack does not name. */
  DlpxValue device[3] = {tensor(&a), value(DLPX_VALUE_INT), value(DLPX_VALUE_INT)};
  device[1].int64 = 9999;
  check_fails("stream_on_released", device, 3, "ValueError", "dlpx: stream_on_released: stream: unknown device type 9999");
  /* Nor on a negative index, which dlpx_set_current_stream refuses (the kernel got NULL). */
  device[1].int64 = 2;
  device[2].int64 = -1;
  check_fails("stream_on_released", device, 3, "ValueError", "dlpx: stream_on_released: stream: device_id = -1 is negative");
  /* No room for the results: both outputs are deleted. */
  DlpxValue results[1];
  size_t n = 12345; /* a failure leaves no count: 0, never what was there */
  int rc = dlpx_kernel_call(find("pair"), one, 1, results, 1, &n);
  CHECK(rc == -1 && test_contains(dlpx_last_error(), "returned 2 results; results has room for 1"), "%s",
        test_str(dlpx_last_error()));
  CHECK(n == 0, "no room: nresults %zu", n);
  /* A NULL pointer is named. */
  rc = dlpx_kernel_call(find("pair"), one, 1, results, 1, NULL);
  CHECK(rc == -1 && test_contains(dlpx_last_error(), "nresults is NULL"), "%s", test_str(dlpx_last_error()));
  n = 12345;
  rc = dlpx_kernel_call(find("pair"), one, 1, NULL, 1, &n);
  CHECK(rc == -1 && test_contains(dlpx_last_error(), "results (with capacity > 0) is NULL"), "%s",
        test_str(dlpx_last_error()));
  CHECK(n == 0, "NULL results: nresults %zu", n);
  n = 12345;
  rc = dlpx_kernel_call(find("pair"), NULL, 1, results, 1, &n);
  CHECK(rc == -1 && test_contains(dlpx_last_error(), "args (with nargs > 0) is NULL"), "%s",
        test_str(dlpx_last_error()));
  CHECK(n == 0, "NULL args: nresults %zu", n);
  /* An output allocated and never returned is deleted; the result is none. */
  rc = dlpx_kernel_call(find("allocate_and_drop"), one, 1, results, 1, &n);
  CHECK(rc == 0 && n == 0, "allocate_and_drop: rc %d, n %zu", rc, n);
  /* A padded sub-byte tensor (int4, one element per byte): the kernel is told so, and its size is
   * checked as padded; the caller's other flags are not the kernel's. */
  uint8_t nibbles[8] = {0};
  int64_t nibble_shape[1] = {8}, nibble_strides[1] = {1};
  DLTensor int4 = {nibbles, {kDLCPU, 0}, 1, {kDLInt, 4, 1}, nibble_shape, nibble_strides, 0};
  DlpxValue padded[1] = {tensor(&int4)};
  padded[0].flags = DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED | DLPACK_FLAG_BITMASK_IS_COPIED;
  rc = dlpx_kernel_call(find("flags"), padded, 1, results, 1, &n);
  CHECK(rc == 0 && n == 1 && results[0].int64 == (int64_t)DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED,
        "flags of a padded int4 argument: rc %d, %lld (%s)", rc, (long long)results[0].int64,
        test_str(dlpx_last_error()));
  /* The CPU has no stream: NULL. */
  rc = dlpx_kernel_call(find("stream"), one, 1, results, 1, &n);
  CHECK(rc == 0 && n == 1 && results[0].boolean, "stream");
}

static void check_find_fails(const char *path, const char *name, const char *kind, const char *needle) {
  const DlpxKernel *kernel = NULL;
  int rc = dlpx_kernel_find(path, name, &kernel);
  CHECK(rc == -1 && kernel == NULL, "%s: rc %d", path, rc);
  CHECK(test_streq(dlpx_last_error_kind(), kind), "%s: kind %s", path, test_str(dlpx_last_error_kind()));
  CHECK(test_contains(dlpx_last_error(), needle), "%s: \"%s\" lacks \"%s\"", path, test_str(dlpx_last_error()), needle);
}

static void test_libraries_that_cannot_serve_are_refused(void) {
  check_find_fails(not_a_library, "f", "OSError", "dlpx: kernel_find: cannot load");
  check_find_fails("", "f", "OSError", "an empty path names no library"); /* dlopen(""): the program itself */
  check_find_fails(empty_path, "f", "ImportError", "holds no dlpx kernels");
  check_find_fails(newer_path, "f", "ImportError", "built for dlpx kernel ABI 3; this libdlpx");
  check_find_fails(newer_path, "f", "ImportError", "reads kernel ABI 2 and older");
  check_find_fails(bad_signature_path, "f", "ImportError", "kernel 'f': signature:");
  check_find_fails(cases_path, "no_such_kernel", "ImportError", "has no kernel 'no_such_kernel'");
  /* A kernel name that is not UTF-8 is no kernel's: ImportError, as an unknown name (it was an
   * OSError about opening libraries). */
  check_find_fails(cases_path, "no\xff", "ImportError", "has no kernel \"no\\xff\" (not UTF-8) (it has ");
  /* Read lossily, a path that is not UTF-8 named another file (U+FFFD for its bad byte). */
  check_find_fails("/tmp/no\xff.so", "f", "OSError", "is not UTF-8: dlpx opens libraries by UTF-8 names");
}

static void test_a_library_is_opened_once(void) {
  const DlpxKernel *a = find("pair"), *b = find("pair");
  CHECK(a == b, "two finds, two kernels");
  CHECK(test_starts_with(dlpx_kernel_signature(a), "pair(a: tensor) -> tuple\n\na + 1 and 2 a"), "%s",
        test_str(dlpx_kernel_signature(a)));
}

/* The library's constructor found `early` (linked) and not `late` (not yet); loaded, it has both:
 * what was read while dlopen ran its constructors was not kept as the library. */
static void test_a_library_finding_its_own_kernels_as_it_loads_is_read_whole_afterwards(void) {
  const DlpxKernel *late = NULL, *early = NULL;
  int rc = dlpx_kernel_find(self_finding_path, "late", &late);
  CHECK(rc == 0 && late != NULL, "late: %s", test_str(dlpx_last_error()));
  rc = dlpx_kernel_find(self_finding_path, "early", &early);
  CHECK(rc == 0 && early != NULL, "early: %s", test_str(dlpx_last_error()));
  if (late == NULL) return;
  DlpxValue result;
  size_t n = 0;
  rc = dlpx_kernel_call(late, NULL, 0, &result, 1, &n);
  CHECK(rc == 0 && n == 1 && result.kind == DLPX_VALUE_INT, "late(): rc %d, %zu results", rc, n);
  CHECK(result.int64 == -1, "the constructor's finds returned 10 * early + late = %lld", (long long)result.int64);
  const DlpxKernel *again = NULL;
  CHECK(dlpx_kernel_find(self_finding_path, "late", &again) == 0 && again == late, "opened once");
}

int main(int argc, char **argv) {
  if (argc != 7) {
    fprintf(stderr, "usage: %s CASES NEWER_ABI NO_KERNELS BAD_SIGNATURE NOT_A_LIBRARY SELF_FINDING\n", argv[0]);
    return 2;
  }
  cases_path = argv[1];
  newer_path = argv[2];
  empty_path = argv[3];
  bad_signature_path = argv[4];
  not_a_library = argv[5];
  self_finding_path = argv[6];
  test_kernel_h_has_the_layout_the_loader_reads();
  test_arguments_read_in_place_agree_with_the_functions();
  test_scalars_in_and_out_with_defaults();
  test_keyword_arguments();
  test_tensor_results_are_the_callers_to_delete();
  test_kinds_of_optional_and_keyword_only_parameters();
  test_bad_calls_fail_cleanly_and_lose_nothing();
  test_libraries_that_cannot_serve_are_refused();
  test_a_library_is_opened_once();
  test_a_library_finding_its_own_kernels_as_it_loads_is_read_whole_afterwards();
  return test_summary();
}
