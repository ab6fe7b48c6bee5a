/* ABI equality between dlpx's generated include/dlpx/dlpack.h and the official DLPack 1.3
 * header: abi_official.c and abi_dlpx.c each describe one header as a table of named numbers
 * (sizes, alignments, offsets and sizes of every field, enum values, flags, version macros);
 * this file compares them entry by entry, by name in both directions. It also calls the two
 * include-order translation units, which compile dlpx.h after and before the official header. */
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "test_util.h"

#ifdef __cplusplus
extern "C" {
#endif
struct abi_entry {
  const char *name;
  unsigned long long value;
};
size_t abi_official_entries(const struct abi_entry **out);
size_t abi_dlpx_entries(const struct abi_entry **out);
int abi_order_official_first(void);
int abi_order_dlpx_first(void);
#ifdef __cplusplus
}
#endif

static const struct abi_entry *find_entry(const struct abi_entry *table, size_t n, const char *name) {
  for (size_t i = 0; i < n; ++i) {
    if (strcmp(table[i].name, name) == 0) return &table[i];
  }
  return NULL;
}

static void test_tables_are_equal_entry_by_entry(void) {
  const struct abi_entry *official = NULL;
  const struct abi_entry *dlpx = NULL;
  size_t n_official = abi_official_entries(&official);
  size_t n_dlpx = abi_dlpx_entries(&dlpx);
  /* 5 macros + 2 enum types (2 entries each) + 34 enumerators + 8 structs (2 each) + 30 fields
   * (2 each) + 5 callback types (2 each) = 129: a shorter table means an entry went missing. */
  CHECK(n_official >= 129, "the official table has only %zu entries", n_official);
  CHECK(n_official == n_dlpx, "official table has %zu entries, dlpx table %zu", n_official, n_dlpx);
  for (size_t i = 0; i < n_official; ++i) {
    const struct abi_entry *mine = find_entry(dlpx, n_dlpx, official[i].name);
    CHECK(mine != NULL, "%s: in the official header's table, missing from dlpx's", official[i].name);
    if (mine == NULL) continue;
    CHECK(mine->value == official[i].value, "%s: official %llu, dlpx %llu", official[i].name, official[i].value,
          mine->value);
  }
  for (size_t i = 0; i < n_dlpx; ++i) {
    CHECK(find_entry(official, n_official, dlpx[i].name) != NULL, "%s: in dlpx's table, missing from the official one",
          dlpx[i].name);
  }
}

static unsigned long long dlpx_value(const char *name) {
  const struct abi_entry *dlpx = NULL;
  size_t n = abi_dlpx_entries(&dlpx);
  const struct abi_entry *e = find_entry(dlpx, n, name);
  CHECK(e != NULL, "%s is not in dlpx's table", name);
  return e != NULL ? e->value : ~0ull;
}

/* The DLPack 1.3 facts, spelled independently of the official header. */
static void test_dlpx_header_matches_the_documented_facts(void) {
  CHECK(dlpx_value("DLPACK_MAJOR_VERSION") == 1, "major version");
  CHECK(dlpx_value("DLPACK_MINOR_VERSION") == 3, "minor version");
  CHECK(dlpx_value("DLPACK_FLAG_BITMASK_READ_ONLY") == 1ull, "READ_ONLY flag");
  CHECK(dlpx_value("DLPACK_FLAG_BITMASK_IS_COPIED") == 2ull, "IS_COPIED flag");
  CHECK(dlpx_value("DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED") == 4ull, "IS_SUBBYTE_TYPE_PADDED flag");
  CHECK(dlpx_value("kDLCPU") == 1 && dlpx_value("kDLCUDA") == 2 && dlpx_value("kDLTrn") == 18, "device types");
  CHECK(dlpx_value("kDLInt") == 0 && dlpx_value("kDLBool") == 6 && dlpx_value("kDLFloat4_e2m1fn") == 17,
        "dtype codes");
  CHECK(dlpx_value("sizeof(DLDeviceType)") == 4, "DLDeviceType is 32 bits");
  CHECK(dlpx_value("sizeof(DLDataType)") == 4, "DLDataType is 4 bytes");
  CHECK(dlpx_value("sizeof(DLDevice)") == 8, "DLDevice is 8 bytes");
  CHECK(dlpx_value("sizeof(DLPackVersion)") == 8, "DLPackVersion is 8 bytes");
#if defined(__x86_64__) || defined(__aarch64__)
  CHECK(dlpx_value("sizeof(DLTensor)") == 48, "sizeof(DLTensor) = %llu", dlpx_value("sizeof(DLTensor)"));
  CHECK(dlpx_value("sizeof(DLManagedTensor)") == 64, "sizeof(DLManagedTensor)");
  CHECK(dlpx_value("sizeof(DLManagedTensorVersioned)") == 80, "sizeof(DLManagedTensorVersioned)");
  CHECK(dlpx_value("offsetof(DLManagedTensorVersioned, dl_tensor)") == 32, "offset of dl_tensor");
  CHECK(dlpx_value("sizeof(DLPackExchangeAPIHeader)") == 16, "sizeof(DLPackExchangeAPIHeader)");
  CHECK(dlpx_value("sizeof(DLPackExchangeAPI)") == 56, "sizeof(DLPackExchangeAPI)");
#endif
}

static void test_both_include_orders_compile_link_and_run(void) {
  int official_first = abi_order_official_first();
  CHECK(official_first == 0, "official dlpack.h then dlpx.h: %d failed checks", official_first);
  int dlpx_first = abi_order_dlpx_first();
  CHECK(dlpx_first == 0, "dlpx.h then official dlpack.h: %d failed checks", dlpx_first);
}

int main(void) {
  test_tables_are_equal_entry_by_entry();
  test_dlpx_header_matches_the_documented_facts();
  test_both_include_orders_compile_link_and_run();
  return test_summary();
}
