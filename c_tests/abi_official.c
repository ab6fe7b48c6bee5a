/* The ABI of the official DLPack 1.3 header, <dlpack/dlpack.h> (from the apache-tvm-ffi wheel). */
#include <dlpack/dlpack.h>

#define ABI_ENTRIES_FN abi_official_entries
#include "abi_entries.inc"
