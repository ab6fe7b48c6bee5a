/* LLVM's ThreadSanitizer instrumentation (nightly rustc) calls __tsan_memcpy, __tsan_memmove and
 * __tsan_memset; GCC 12's libtsan, the runtime this machine has, predates them. Its own memcpy,
 * memmove and memset interceptors check the same ranges. */
#include <stddef.h>
#include <string.h>

void *__tsan_memcpy(void *dst, const void *src, size_t n) { return memcpy(dst, src, n); }
void *__tsan_memmove(void *dst, const void *src, size_t n) { return memmove(dst, src, n); }
void *__tsan_memset(void *dst, int c, size_t n) { return memset(dst, c, n); }
