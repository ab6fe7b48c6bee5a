/* The ABI of the official DLPack 1.3 header, <dlpack/dlpack.h> (from the apache-tvm-ffi wheel),
 * as a table of named numbers: every size, alignment, field offset and field size, enum value,
 * flag and version macro. abi_dlpx.c fills the same table from dlpx's generated header; the two
 * headers share the include guard, so each needs a translation unit of its own. test_abi.c
 * compares the tables entry by entry (and by name in both directions). Keep the ABI_ENTRIES list
 * identical in both files. */
#include <stddef.h>

#include <dlpack/dlpack.h>

#ifdef __cplusplus
#define ABI_ALIGNOF(T) alignof(T)
extern "C" {
#else
#define ABI_ALIGNOF(T) _Alignof(T)
#endif

struct abi_entry {
  const char *name;
  unsigned long long value;
};

size_t abi_official_entries(const struct abi_entry **out);

#ifdef __cplusplus
}
#endif

#define ABI_TYPE(T) {"sizeof(" #T ")", sizeof(T)}, {"alignof(" #T ")", ABI_ALIGNOF(T)}
#define ABI_FIELD(T, f) {"offsetof(" #T ", " #f ")", offsetof(T, f)}, {"sizeof(" #T "." #f ")", sizeof(((T *)0)->f)}
#define ABI_VALUE(v) {#v, (unsigned long long)(v)}

#define ABI_ENTRIES                                                 \
  ABI_VALUE(DLPACK_MAJOR_VERSION),                                  \
  ABI_VALUE(DLPACK_MINOR_VERSION),                                  \
  ABI_VALUE(DLPACK_FLAG_BITMASK_READ_ONLY),                         \
  ABI_VALUE(DLPACK_FLAG_BITMASK_IS_COPIED),                         \
  ABI_VALUE(DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED),            \
  /* DLDeviceType */                                                \
  ABI_TYPE(DLDeviceType),                                           \
  ABI_VALUE(kDLCPU),                                                \
  ABI_VALUE(kDLCUDA),                                               \
  ABI_VALUE(kDLCUDAHost),                                           \
  ABI_VALUE(kDLOpenCL),                                             \
  ABI_VALUE(kDLVulkan),                                             \
  ABI_VALUE(kDLMetal),                                              \
  ABI_VALUE(kDLVPI),                                                \
  ABI_VALUE(kDLROCM),                                               \
  ABI_VALUE(kDLROCMHost),                                           \
  ABI_VALUE(kDLExtDev),                                             \
  ABI_VALUE(kDLCUDAManaged),                                        \
  ABI_VALUE(kDLOneAPI),                                             \
  ABI_VALUE(kDLWebGPU),                                             \
  ABI_VALUE(kDLHexagon),                                            \
  ABI_VALUE(kDLMAIA),                                               \
  ABI_VALUE(kDLTrn),                                                \
  /* DLDataTypeCode */                                              \
  ABI_TYPE(DLDataTypeCode),                                         \
  ABI_VALUE(kDLInt),                                                \
  ABI_VALUE(kDLUInt),                                               \
  ABI_VALUE(kDLFloat),                                              \
  ABI_VALUE(kDLOpaqueHandle),                                       \
  ABI_VALUE(kDLBfloat),                                             \
  ABI_VALUE(kDLComplex),                                            \
  ABI_VALUE(kDLBool),                                               \
  ABI_VALUE(kDLFloat8_e3m4),                                        \
  ABI_VALUE(kDLFloat8_e4m3),                                        \
  ABI_VALUE(kDLFloat8_e4m3b11fnuz),                                 \
  ABI_VALUE(kDLFloat8_e4m3fn),                                      \
  ABI_VALUE(kDLFloat8_e4m3fnuz),                                    \
  ABI_VALUE(kDLFloat8_e5m2),                                        \
  ABI_VALUE(kDLFloat8_e5m2fnuz),                                    \
  ABI_VALUE(kDLFloat8_e8m0fnu),                                     \
  ABI_VALUE(kDLFloat6_e2m3fn),                                      \
  ABI_VALUE(kDLFloat6_e3m2fn),                                      \
  ABI_VALUE(kDLFloat4_e2m1fn),                                      \
  /* structs */                                                     \
  ABI_TYPE(DLPackVersion),                                          \
  ABI_FIELD(DLPackVersion, major),                                  \
  ABI_FIELD(DLPackVersion, minor),                                  \
  ABI_TYPE(DLDevice),                                               \
  ABI_FIELD(DLDevice, device_type),                                 \
  ABI_FIELD(DLDevice, device_id),                                   \
  ABI_TYPE(DLDataType),                                             \
  ABI_FIELD(DLDataType, code),                                      \
  ABI_FIELD(DLDataType, bits),                                      \
  ABI_FIELD(DLDataType, lanes),                                     \
  ABI_TYPE(DLTensor),                                               \
  ABI_FIELD(DLTensor, data),                                        \
  ABI_FIELD(DLTensor, device),                                      \
  ABI_FIELD(DLTensor, ndim),                                        \
  ABI_FIELD(DLTensor, dtype),                                       \
  ABI_FIELD(DLTensor, shape),                                       \
  ABI_FIELD(DLTensor, strides),                                     \
  ABI_FIELD(DLTensor, byte_offset),                                 \
  ABI_TYPE(DLManagedTensor),                                        \
  ABI_FIELD(DLManagedTensor, dl_tensor),                            \
  ABI_FIELD(DLManagedTensor, manager_ctx),                          \
  ABI_FIELD(DLManagedTensor, deleter),                              \
  ABI_TYPE(DLManagedTensorVersioned),                               \
  ABI_FIELD(DLManagedTensorVersioned, version),                     \
  ABI_FIELD(DLManagedTensorVersioned, manager_ctx),                 \
  ABI_FIELD(DLManagedTensorVersioned, deleter),                     \
  ABI_FIELD(DLManagedTensorVersioned, flags),                       \
  ABI_FIELD(DLManagedTensorVersioned, dl_tensor),                   \
  /* the exchange table */                                          \
  ABI_TYPE(DLPackManagedTensorAllocator),                           \
  ABI_TYPE(DLPackManagedTensorFromPyObjectNoSync),                  \
  ABI_TYPE(DLPackManagedTensorToPyObjectNoSync),                    \
  ABI_TYPE(DLPackDLTensorFromPyObjectNoSync),                       \
  ABI_TYPE(DLPackCurrentWorkStream),                                \
  ABI_TYPE(DLPackExchangeAPIHeader),                                \
  ABI_FIELD(DLPackExchangeAPIHeader, version),                      \
  ABI_FIELD(DLPackExchangeAPIHeader, prev_api),                     \
  ABI_TYPE(DLPackExchangeAPI),                                      \
  ABI_FIELD(DLPackExchangeAPI, header),                             \
  ABI_FIELD(DLPackExchangeAPI, managed_tensor_allocator),           \
  ABI_FIELD(DLPackExchangeAPI, managed_tensor_from_py_object_no_sync), \
  ABI_FIELD(DLPackExchangeAPI, managed_tensor_to_py_object_no_sync), \
  ABI_FIELD(DLPackExchangeAPI, dltensor_from_py_object_no_sync),    \
  ABI_FIELD(DLPackExchangeAPI, current_work_stream)

static const struct abi_entry abi_official_table[] = {ABI_ENTRIES};

size_t abi_official_entries(const struct abi_entry **out) {
  *out = abi_official_table;
  return sizeof(abi_official_table) / sizeof(abi_official_table[0]);
}
