/* The ABI of dlpx's generated header, "dlpx/dlpack.h". */
#include "dlpx/dlpack.h"

#define ABI_ENTRIES_FN abi_dlpx_entries
#include "abi_entries.inc"
