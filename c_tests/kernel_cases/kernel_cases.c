/*
 * The kernels dlpx's tests call through both callers (c_tests/test_kernel_library.c from C,
 * tests/python/kernels/test_kernel_library.py from Python): each pins one rule of the kernel ABI
 * (include/dlpx/kernel.h), its bad paths most of all. The example library
 * (examples/kernel_library) holds the kernels a user writes.
 */
#define _POSIX_C_SOURCE 200809L /* nanosleep */
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "dlpx/kernel.h"

/* scalars(n, x=1.0, *, flag=True, text="abc") -> (n + 1, 2 x, not flag, len(text)). */
static int scalars(DlpxCall *call) {
  int64_t n;
  double x;
  bool flag;
  const char *text;
  size_t size;
  if (dlpx_call_int(call, 0, &n) || dlpx_call_float(call, 1, &x) || dlpx_call_bool(call, 2, &flag) ||
      dlpx_call_str(call, 3, &text, &size))
    return -1;
  if (dlpx_call_return_int(call, n + 1) || dlpx_call_return_float(call, 2 * x) || dlpx_call_return_bool(call, !flag) ||
      dlpx_call_return_int(call, (int64_t)size))
    return -1;
  return 0;
}
DLPX_EXPORT_KERNEL(scalars, scalars, "scalars(n: int, x=1.0, *, flag=True, text=\"abc\") -> tuple: n + 1, 2 x, not flag, len(text).")

/* kinds(*values) -> the DLPX_VALUE_* kind of each argument, and their count first. */
static int describe(DlpxCall *call) {
  int32_t n = dlpx_call_argument_count(call);
  if (dlpx_call_return_int(call, n)) return -1;
  for (int32_t i = 0; i < n; ++i)
    if (dlpx_call_return_int(call, dlpx_call_argument_kind(call, i))) return -1;
  return 0;
}
DLPX_EXPORT_KERNEL(describe, describe, "describe(a, bias=None, *, scale: float | None = None) -> tuple: the count, then each kind.")
/* Tensors only: a call by position binds in the loader's tensor loop, one with a keyword or a
 * default in its general binding; tests compare the two. */
DLPX_EXPORT_KERNEL(describe_tensors, describe, "describe_tensors(a, bias=None, *rest) -> tuple: the count, then each kind.")

/* flags(a) -> a's DLPack flags (READ_ONLY for bytes, read-only arrays). */
static int flags(DlpxCall *call) {
  const DLTensor *a;
  uint64_t flags;
  if (dlpx_call_tensor(call, 0, &a, &flags)) return -1;
  return dlpx_call_return_int(call, (int64_t)flags);
}
DLPX_EXPORT_KERNEL_SHORT(flags, flags, "flags(a) -> int: a's DLPack flags.")

/* null_dims(a) -> which of a's shape (1) and strides (2) are NULL, read in place and through
 * dlpx_call_tensor: none ever are (kernel.h), a 0-d tensor's neither. */
static int null_dims(DlpxCall *call) {
  const DLTensor *a;
  if (dlpx_call_tensor(call, 0, &a, NULL)) return -1;
  const DLTensor *in_place = &call->arguments[0].value.tensor.tensor;
  const int64_t got = (a->shape == NULL) + 2 * (a->strides == NULL);
  return dlpx_call_return_int(call, got + 4 * ((in_place->shape == NULL) + 2 * (in_place->strides == NULL)));
}
DLPX_EXPORT_KERNEL_SHORT(null_dims, null_dims, "null_dims(a) -> int: 0 when a's shape and strides are not NULL.")

/* Asks for argument 9 of 1 (an IndexError); returns its -1. */
static int ninth(DlpxCall *call) {
  const DLTensor *t;
  return dlpx_call_tensor(call, 9, &t, NULL);
}
DLPX_EXPORT_KERNEL(ninth, ninth, "ninth(a): asks for argument 9.")

/* Asks for argument 9, ignores the failure and returns 0: the error still stands. */
static int ninth_ignored(DlpxCall *call) {
  (void)dlpx_call_argument_kind(call, 9);
  return 0;
}
DLPX_EXPORT_KERNEL(ninth_ignored, ninth_ignored, "ninth_ignored(a): asks for argument 9, ignores the failure.")

/* The arguments read in place (`call->arguments`, kernel ABI 2) agree with what the dlpx_call_*
 * functions and the dlpx_argument_* readers give, argument by argument: returns how many. */
static int agree(DlpxCall *call) {
  if (call->argument_count != dlpx_call_argument_count(call)) return dlpx_call_error(call, "AssertionError", "count");
  for (int32_t i = 0; i < call->argument_count; ++i) {
    const DlpxArgument *arg = &call->arguments[i];
    int same = arg->kind == dlpx_call_argument_kind(call, i);
    const DLTensor *t = NULL, *u = NULL;
    uint64_t tf = 0, uf = 0;
    int64_t n = 0, m = 0;
    double x = 0, y = 0;
    bool f = false, g = false;
    const char *s = NULL, *r = NULL;
    size_t ns = 0, nr = 0;
    switch (arg->kind) {
      case DLPX_VALUE_TENSOR:
        same = same && !dlpx_call_tensor(call, i, &t, &tf) && !dlpx_argument_tensor(call, i, &u, &uf) &&
               t == &arg->value.tensor.tensor && u == t && tf == arg->value.tensor.flags && uf == tf;
        break;
      case DLPX_VALUE_INT:
        same = same && !dlpx_call_int(call, i, &n) && !dlpx_argument_int(call, i, &m) && n == arg->value.int64 && m == n;
        break;
      case DLPX_VALUE_FLOAT:
        same = same && !dlpx_call_float(call, i, &x) && !dlpx_argument_float(call, i, &y) && x == arg->value.float64 &&
               y == x;
        break;
      case DLPX_VALUE_BOOL:
        same = same && !dlpx_call_bool(call, i, &f) && !dlpx_argument_bool(call, i, &g) && f == arg->value.boolean &&
               g == f;
        break;
      case DLPX_VALUE_STR:
        same = same && !dlpx_call_str(call, i, &s, &ns) && !dlpx_argument_str(call, i, &r, &nr) &&
               s == arg->value.str.data && ns == arg->value.str.size && r == s && nr == ns;
        break;
      default:
        same = same && arg->kind == DLPX_VALUE_NONE;
    }
    if (!same) {
      char message[64];
      snprintf(message, sizeof message, "argument %d read in place disagrees", (int)i);
      return dlpx_call_error(call, "AssertionError", message);
    }
  }
  return dlpx_call_return_int(call, call->argument_count);
}
DLPX_EXPORT_KERNEL(agree, agree,
                   "agree(a, bias=None, *rest, n=7, x=1.5, flag=True, text=\"abc\", none: int | None = None) -> int: "
                   "the count of arguments read alike in place and by the call functions.")

/* The in-place reader's refusals are the call functions': argument 9 of 1, a tensor as an int. */
static int ninth_in_place(DlpxCall *call) {
  const DLTensor *t;
  return dlpx_argument_tensor(call, 9, &t, NULL);
}
DLPX_EXPORT_KERNEL(ninth_in_place, ninth_in_place, "ninth_in_place(a): asks dlpx_argument_tensor for argument 9.")

static int wrong_kind_in_place(DlpxCall *call) {
  int64_t n;
  return dlpx_argument_int(call, 0, &n);
}
DLPX_EXPORT_KERNEL(wrong_kind_in_place, wrong_kind_in_place, "wrong_kind_in_place(a): reads a tensor as an int in place.")

/* Reads a tensor as an int: a TypeError naming the parameter. */
static int wrong_kind(DlpxCall *call) {
  int64_t n;
  return dlpx_call_int(call, 0, &n);
}
DLPX_EXPORT_KERNEL(wrong_kind, wrong_kind, "wrong_kind(a): reads a tensor as an int.")

/* Returns -1 without saying why: a RuntimeError. */
static int silent(DlpxCall *call) {
  (void)call;
  return -1;
}
DLPX_EXPORT_KERNEL(silent, silent, "silent(): fails without reporting.")

/* raise_(kind: str, message: str): reports kind and message. */
static int raise_(DlpxCall *call) {
  const char *kind, *message;
  size_t kind_size, message_size;
  char k[64], m[256];
  if (dlpx_call_str(call, 0, &kind, &kind_size) || dlpx_call_str(call, 1, &message, &message_size)) return -1;
  snprintf(k, sizeof k, "%.*s", (int)kind_size, kind);
  snprintf(m, sizeof m, "%.*s", (int)message_size, message);
  return dlpx_call_error(call, k, m);
}
DLPX_EXPORT_KERNEL(raise_, raise_, "raise_(kind: str, message: str): reports the error kind(message).")

/* Allocates an output like a, then fails: the call deletes the output. */
static int allocate_then_fail(DlpxCall *call) {
  const DLTensor *a;
  DLTensor *out;
  if (dlpx_call_tensor(call, 0, &a, NULL)) return -1;
  if (dlpx_call_allocate(call, a->device, a->dtype, a->ndim, a->shape, &out)) return -1;
  return dlpx_call_error(call, "ValueError", "failed after allocating");
}
DLPX_EXPORT_KERNEL(allocate_then_fail, allocate_then_fail, "allocate_then_fail(a): allocates, then fails.")

/* Allocates an output like a and forgets it: the call deletes it, the result is None. */
static int allocate_and_drop(DlpxCall *call) {
  const DLTensor *a;
  DLTensor *out;
  if (dlpx_call_tensor(call, 0, &a, NULL)) return -1;
  return dlpx_call_allocate(call, a->device, a->dtype, a->ndim, a->shape, &out);
}
DLPX_EXPORT_KERNEL(allocate_and_drop, allocate_and_drop, "allocate_and_drop(a): allocates and never returns it.")

/* Asks for 2**45 float32s (128 TiB) in a's framework: a MemoryError. */
static int huge(DlpxCall *call) {
  const DLTensor *a;
  DLTensor *out;
  int64_t shape[1] = {INT64_C(1) << 45};
  if (dlpx_call_tensor(call, 0, &a, NULL)) return -1;
  return dlpx_call_allocate(call, a->device, a->dtype, 1, shape, &out);
}
DLPX_EXPORT_KERNEL(huge, huge, "huge(a): asks for 128 TiB.")

/* Asks a's framework for what no tensor can be: an extent of -5 (what 0), dtype code 99 (1),
 * 2**62 float32s, whose bytes overflow 64 bits (2), a negative ndim (3) or a NULL shape (4). */
static int impossible(DlpxCall *call) {
  const DLTensor *a;
  DLTensor *out;
  int64_t which;
  int64_t shape[1] = {-5};
  DLDataType dtype;
  if (dlpx_call_tensor(call, 0, &a, NULL) || dlpx_call_int(call, 1, &which)) return -1;
  dtype = a->dtype;
  if (which == 1) dtype.code = 99;
  if (which == 2) shape[0] = INT64_C(1) << 62;
  return dlpx_call_allocate(call, a->device, dtype, which == 3 ? -1 : 1, which == 4 ? NULL : shape, &out);
}
DLPX_EXPORT_KERNEL(impossible, impossible, "impossible(a, which: int): asks for what no tensor can be.")

/* Returns a bfloat16 tensor shaped like a (zeroed where the CPU holds it): a framework without
 * bfloat16 (numpy) cannot take it back. */
static int bfloat16_like(DlpxCall *call) {
  const DLTensor *a;
  DLTensor *out;
  DLDataType bf16 = {kDLBfloat, 16, 1};
  if (dlpx_call_tensor(call, 0, &a, NULL) || dlpx_call_allocate(call, a->device, bf16, a->ndim, a->shape, &out))
    return -1;
  if (out->device.device_type == kDLCPU) {
    int64_t n = 1;
    for (int32_t i = 0; i < out->ndim; ++i) n *= out->shape[i];
    memset(out->data, 0, (size_t)n * 2);
  }
  return dlpx_call_return_tensor(call, out);
}
DLPX_EXPORT_KERNEL(bfloat16_like, bfloat16_like, "bfloat16_like(a) -> tensor: zeros of bfloat16 shaped like a.")

/* Allocates an output like a, then changes its header (a kernel's bug: the header is the
 * framework's) as `field` says, and returns it ("unreturned": changes its shape and keeps it).
 * dlpx finds it when the kernel returns and writes the header back for the framework. */
static int rewrite_header(DlpxCall *call) {
  const DLTensor *a;
  DLTensor *out;
  const char *field;
  size_t size;
  if (dlpx_call_tensor(call, 0, &a, NULL) || dlpx_call_str(call, 1, &field, &size) ||
      dlpx_call_allocate(call, a->device, a->dtype, a->ndim, a->shape, &out))
    return -1;
#define FIELD_IS(name) (size == strlen(name) && memcmp(field, name, size) == 0)
  if (FIELD_IS("ndim")) out->ndim = 3;
  if (FIELD_IS("shape") || FIELD_IS("unreturned")) out->shape[0] = INT64_C(1) << 40;
  if (FIELD_IS("data")) out->data = NULL;
  if (FIELD_IS("dtype")) out->dtype.bits = 64;
  if (FIELD_IS("unreturned")) return 0;
#undef FIELD_IS
  return dlpx_call_return_tensor(call, out);
}
DLPX_EXPORT_KERNEL(rewrite_header, rewrite_header, "rewrite_header(a, field: str) -> tensor: changes its output's header.")

/* Writes its call's argument_count (a kernel's bug), then asks dlpx for argument 3: dlpx reads
 * its own count (an IndexError), never the kernel's. */
static int overwrite_count(DlpxCall *call) {
  int64_t value = 0;
  call->argument_count = -1;
  if (dlpx_call_int(call, 3, &value)) return -1;
  return dlpx_call_return_int(call, value);
}
DLPX_EXPORT_KERNEL(overwrite_count, overwrite_count, "overwrite_count(n: int) -> int: overwrites its argument count.")

/* pair(a) -> (a + 1, a * 2) for float32 a, compact or not. */
static int pair(DlpxCall *call) {
  const DLTensor *a;
  DLTensor *plus, *twice;
  if (dlpx_call_tensor(call, 0, &a, NULL)) return -1;
  if (a->dtype.code != kDLFloat || a->dtype.bits != 32 || a->ndim != 1)
    return dlpx_call_error(call, "TypeError", "pair takes a 1-d float32 tensor");
  if (dlpx_call_allocate(call, a->device, a->dtype, 1, a->shape, &plus) ||
      dlpx_call_allocate(call, a->device, a->dtype, 1, a->shape, &twice))
    return -1;
  const float *x = (const float *)((const char *)a->data + a->byte_offset);
  for (int64_t i = 0; i < a->shape[0]; ++i) {
    ((float *)plus->data)[i] = x[i * a->strides[0]] + 1;
    ((float *)twice->data)[i] = x[i * a->strides[0]] * 2;
  }
  return dlpx_call_return_tensor(call, plus) || dlpx_call_return_tensor(call, twice) ? -1 : 0;
}
DLPX_EXPORT_KERNEL(pair, pair, "pair(a) -> tuple: a + 1 and 2 a (1-d float32).")

/* Returns its output twice: the second is refused (and the first is not lost). */
static int return_twice(DlpxCall *call) {
  const DLTensor *a;
  DLTensor *out;
  if (dlpx_call_tensor(call, 0, &a, NULL)) return -1;
  if (dlpx_call_allocate(call, a->device, a->dtype, a->ndim, a->shape, &out)) return -1;
  if (dlpx_call_return_tensor(call, out)) return -1;
  return dlpx_call_return_tensor(call, out);
}
DLPX_EXPORT_KERNEL(return_twice, return_twice, "return_twice(a): returns one output twice.")

/* Returns its argument, which it did not allocate: refused. */
static int return_argument(DlpxCall *call) {
  const DLTensor *a;
  if (dlpx_call_tensor(call, 0, &a, NULL)) return -1;
  return dlpx_call_return_tensor(call, a);
}
DLPX_EXPORT_KERNEL(return_argument, return_argument, "return_argument(a): returns its argument.")

/* stream(a) -> whether the caller's stream on a's device is NULL (always, on the CPU). */
static int stream(DlpxCall *call) {
  const DLTensor *a;
  void *s = (void *)1;
  if (dlpx_call_tensor(call, 0, &a, NULL) || dlpx_call_stream(call, a->device, &s)) return -1;
  return dlpx_call_return_bool(call, s == NULL);
}
DLPX_EXPORT_KERNEL(stream, stream, "stream(a) -> bool: whether the stream on a's device is NULL.")

/* stream_on(a, device_type, device_id) -> int: the stream a's framework gives on that device, as
 * an address; short (asked with the GIL the call holds) and released (the GIL taken to ask). */
static int stream_on(DlpxCall *call) {
  int64_t type, id;
  void *s = NULL;
  if (dlpx_argument_int(call, 1, &type) || dlpx_argument_int(call, 2, &id)) return -1;
  DLDevice device = {(DLDeviceType)type, (int32_t)id};
  if (dlpx_call_stream(call, device, &s)) return -1;
  return dlpx_call_return_int(call, (int64_t)(intptr_t)s);
}
DLPX_EXPORT_KERNEL(stream_on_released, stream_on,
                   "stream_on_released(a, device_type: int, device_id: int) -> int: a's framework's stream there.")
DLPX_EXPORT_KERNEL_SHORT(stream_on_short, stream_on,
                         "stream_on_short(a, device_type: int, device_id: int) -> int: a's framework's stream there.")

static void sleep_ms(int64_t ms) {
  struct timespec t = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};
  nanosleep(&t, NULL);
}

/* Sleeps: without the GIL, another Python thread runs meanwhile. */
static int sleep_released(DlpxCall *call) {
  int64_t ms;
  if (dlpx_call_int(call, 0, &ms)) return -1;
  sleep_ms(ms);
  return 0;
}
DLPX_EXPORT_KERNEL(sleep_released, sleep_released, "sleep_released(ms: int): sleeps without the GIL.")

/* Sleeps holding the GIL (short: what a short kernel keeps). */
static int sleep_held(DlpxCall *call) { return sleep_released(call); }
DLPX_EXPORT_KERNEL_SHORT(sleep_held, sleep_held, "sleep_held(ms: int): sleeps with the GIL held.")

/* nop_released(*tensors): the example's nop, releasing the GIL (what short saves). */
static int nop_released(DlpxCall *call) {
  int64_t sum = 0;
  for (int32_t i = 0; i < call->argument_count; ++i) {
    const DLTensor *t = &call->arguments[i].value.tensor.tensor;
    sum += t->ndim + (int64_t)(intptr_t)t->data;
  }
  volatile int64_t sink = sum; /* as the example's nop keeps its reads */
  (void)sink;
  return 0;
}
DLPX_EXPORT_KERNEL(nop_released, nop_released, "nop_released(*tensors): views each tensor, returns None, without the GIL.")
