//! DLPack v1.3, spelled once. Everything else in dlpx uses these types.
//!
//! Enumerations that arrive from C are newtypes over their integer, never Rust `enum`s: a producer
//! built against a newer DLPack may send a device or dtype code this build does not know, and
//! decoding that into a Rust `enum` would be undefined behaviour. The `DLDeviceType` and
//! `DLDataTypeCode` enums below exist only for the generated header (they are behind a `cfg` that
//! Rust never enables) so C sees the official `typedef enum`s.

use std::ffi::{c_char, c_int, c_void};
use std::mem::{offset_of, size_of};

/// The current major version of dlpack.
pub const DLPACK_MAJOR_VERSION: u32 = 1;
/// The current minor version of dlpack.
pub const DLPACK_MINOR_VERSION: u32 = 3;

/// Bit mask to indicate that the tensor is read only.
pub const DLPACK_FLAG_BITMASK_READ_ONLY: u64 = 1u64 << 0;
/// Bit mask to indicate that the tensor is a copy made by the producer.
///
/// If set, the tensor is considered solely owned throughout its lifetime by the consumer, until
/// the producer-provided deleter is invoked.
pub const DLPACK_FLAG_BITMASK_IS_COPIED: u64 = 1u64 << 1;
/// Bit mask to indicate whether a sub-byte type is packed or padded.
///
/// The default for sub-byte types (ex: fp4/fp6) is assumed packed. This flag can be set by the
/// producer to signal that a tensor of sub-byte type is padded.
pub const DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED: u64 = 1u64 << 2;

/// The DLPack version.
///
/// A change in major version indicates that the data layout of the ABI
/// (DLManagedTensorVersioned) changed. A change in minor version indicates added code, such as
/// a new device type, with the ABI kept the same. A consumer that sees a major version it does not
/// know must call the deleter and must not read any other field.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DLPackVersion {
    /// DLPack major version.
    pub major: u32,
    /// DLPack minor version.
    pub minor: u32,
}

/// The device type in DLDevice (an `int32_t`; values this build does not name are legal input).
#[repr(transparent)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct DeviceType(pub i32);

impl DeviceType {
    pub const CPU: Self = Self(1);
    pub const CUDA: Self = Self(2);
    pub const CUDA_HOST: Self = Self(3);
    pub const OPENCL: Self = Self(4);
    pub const VULKAN: Self = Self(7);
    pub const METAL: Self = Self(8);
    pub const VPI: Self = Self(9);
    pub const ROCM: Self = Self(10);
    pub const ROCM_HOST: Self = Self(11);
    pub const EXT_DEV: Self = Self(12);
    pub const CUDA_MANAGED: Self = Self(13);
    pub const ONEAPI: Self = Self(14);
    pub const WEBGPU: Self = Self(15);
    pub const HEXAGON: Self = Self(16);
    pub const MAIA: Self = Self(17);
    pub const TRN: Self = Self(18);
}

/// The type code options of DLDataType (a `uint8_t` in the struct; unknown values are legal input).
#[repr(transparent)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct DataTypeCode(pub u8);

impl DataTypeCode {
    pub const INT: Self = Self(0);
    pub const UINT: Self = Self(1);
    pub const FLOAT: Self = Self(2);
    pub const OPAQUE_HANDLE: Self = Self(3);
    pub const BFLOAT: Self = Self(4);
    pub const COMPLEX: Self = Self(5);
    pub const BOOL: Self = Self(6);
    pub const FLOAT8_E3M4: Self = Self(7);
    pub const FLOAT8_E4M3: Self = Self(8);
    pub const FLOAT8_E4M3B11FNUZ: Self = Self(9);
    pub const FLOAT8_E4M3FN: Self = Self(10);
    pub const FLOAT8_E4M3FNUZ: Self = Self(11);
    pub const FLOAT8_E5M2: Self = Self(12);
    pub const FLOAT8_E5M2FNUZ: Self = Self(13);
    pub const FLOAT8_E8M0FNU: Self = Self(14);
    pub const FLOAT6_E2M3FN: Self = Self(15);
    pub const FLOAT6_E3M2FN: Self = Self(16);
    pub const FLOAT4_E2M1FN: Self = Self(17);
    /// One past the largest code DLPack v1.3 defines.
    pub const END: Self = Self(18);
}

/// Header-only mirrors: they give C the official `typedef enum`s. Never compiled into Rust.
#[cfg(dlpx_header_only)]
mod header_enums {
    /// The device type in DLDevice.
    #[repr(i32)]
    pub enum DLDeviceType {
        /// CPU device.
        kDLCPU = 1,
        /// CUDA GPU device.
        kDLCUDA = 2,
        /// Pinned CUDA CPU memory by cudaMallocHost.
        kDLCUDAHost = 3,
        /// OpenCL devices.
        kDLOpenCL = 4,
        /// Vulkan buffer for next generation graphics.
        kDLVulkan = 7,
        /// Metal for Apple GPU.
        kDLMetal = 8,
        /// Verilog simulator buffer.
        kDLVPI = 9,
        /// ROCm GPUs for AMD GPUs.
        kDLROCM = 10,
        /// Pinned ROCm CPU memory allocated by hipMallocHost.
        kDLROCMHost = 11,
        /// Reserved extension device type, used for quickly testing extension devices.
        kDLExtDev = 12,
        /// CUDA managed/unified memory allocated by cudaMallocManaged.
        kDLCUDAManaged = 13,
        /// Unified shared memory allocated on a oneAPI non-partitioned device.
        kDLOneAPI = 14,
        /// GPU support for next generation WebGPU standard.
        kDLWebGPU = 15,
        /// Qualcomm Hexagon DSP.
        kDLHexagon = 16,
        /// Microsoft MAIA devices.
        kDLMAIA = 17,
        /// AWS Trainium.
        kDLTrn = 18,
    }

    /// The type code options of DLDataType.
    #[repr(C)]
    pub enum DLDataTypeCode {
        /// Signed integer.
        kDLInt = 0,
        /// Unsigned integer.
        kDLUInt = 1,
        /// IEEE floating point.
        kDLFloat = 2,
        /// Opaque handle type, reserved for testing purposes.
        kDLOpaqueHandle = 3,
        /// bfloat16.
        kDLBfloat = 4,
        /// Complex number (C/C++/Python layout: compact struct per complex number).
        kDLComplex = 5,
        /// Boolean.
        kDLBool = 6,
        /// FP8 data types.
        kDLFloat8_e3m4 = 7,
        kDLFloat8_e4m3 = 8,
        kDLFloat8_e4m3b11fnuz = 9,
        kDLFloat8_e4m3fn = 10,
        kDLFloat8_e4m3fnuz = 11,
        kDLFloat8_e5m2 = 12,
        kDLFloat8_e5m2fnuz = 13,
        kDLFloat8_e8m0fnu = 14,
        /// FP6 data types; bits must be 6.
        kDLFloat6_e2m3fn = 15,
        kDLFloat6_e3m2fn = 16,
        /// FP4 data types; bits must be 4.
        kDLFloat4_e2m1fn = 17,
    }
}

/// A Device for Tensor and operator.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct DLDevice {
    /// The device type used in the device.
    pub device_type: DeviceType,
    /// The device index. For vanilla CPU memory, pinned memory, or managed memory, this is 0.
    pub device_id: i32,
}

/// The data type the tensor can hold, in native endianness.
///
/// Examples: float: code 2, bits 32, lanes 1; float4 (vectorized 4 float): code 2, bits 32,
/// lanes 4; bool: code 6, bits 8, lanes 1; float4_e2m1fn: code 17, bits 4, lanes 1 (packed).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct DLDataType {
    /// Type code of base types (a DLDataTypeCode value).
    pub code: u8,
    /// Number of bits, common choices are 8, 16, 32.
    pub bits: u8,
    /// Number of lanes in the type, used for vector types.
    pub lanes: u16,
}

/// Plain C Tensor object, does not manage memory.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct DLTensor {
    /// The data pointer; NULL when the tensor has no elements. Use byte_offset to reach the
    /// first element.
    pub data: *mut c_void,
    /// The device of the tensor.
    pub device: DLDevice,
    /// Number of dimensions.
    pub ndim: i32,
    /// The data type of the pointer.
    pub dtype: DLDataType,
    /// The shape of the tensor; may be NULL when ndim == 0.
    pub shape: *mut i64,
    /// Strides in elements, not bytes; never NULL when ndim != 0 (since v1.2).
    pub strides: *mut i64,
    /// The offset in bytes to the beginning pointer to data.
    pub byte_offset: u64,
}

/// Legacy managed tensor (deprecated since DLPack v0.8; use DLManagedTensorVersioned).
#[repr(C)]
pub struct DLManagedTensor {
    /// DLTensor which is being memory managed.
    pub dl_tensor: DLTensor,
    /// The context of the original host framework; may be NULL.
    pub manager_ctx: *mut c_void,
    /// Destructor of manager_ctx; deletes the argument as well. May be NULL.
    pub deleter: Option<unsafe extern "C" fn(*mut DLManagedTensor)>,
}

/// A versioned and managed C Tensor object, manages memory of DLTensor.
///
/// When the borrowing framework does not need the tensor, it calls the deleter to notify the
/// host that the resource is no longer needed.
#[repr(C)]
pub struct DLManagedTensorVersioned {
    /// The API and ABI version of the current managed Tensor.
    pub version: DLPackVersion,
    /// The context of the original host framework; may be NULL.
    pub manager_ctx: *mut c_void,
    /// Destructor of manager_ctx; deletes the argument as well. May be NULL.
    pub deleter: Option<unsafe extern "C" fn(*mut DLManagedTensorVersioned)>,
    /// Bitmask flags (DLPACK_FLAG_BITMASK_*); 0 by default. Everything up to here stays stable
    /// across ABI changes so the deleter can always be called.
    pub flags: u64,
    /// DLTensor which is being memory managed.
    pub dl_tensor: DLTensor,
}

#[allow(non_snake_case)] // the parameter keeps the official header's name
/// Request a producer library to create a new tensor from a prototype (dtype, ndim, shape and
/// device are used). Returns 0 and an owning tensor in `*out`, or -1 after calling `SetError`
/// exactly once.
pub type DLPackManagedTensorAllocator = Option<
    unsafe extern "C" fn(
        prototype: *mut DLTensor,
        out: *mut *mut DLManagedTensorVersioned,
        error_ctx: *mut c_void,
        SetError: Option<unsafe extern "C" fn(error_ctx: *mut c_void, kind: *const c_char, message: *const c_char)>,
    ) -> c_int,
>;

/// Exports a PyObject* tensor to an owning DLManagedTensorVersioned, without stream
/// synchronization. 0 on success, -1 with a Python exception set.
pub type DLPackManagedTensorFromPyObjectNoSync =
    Option<unsafe extern "C" fn(py_object: *mut c_void, out: *mut *mut DLManagedTensorVersioned) -> c_int>;

/// Imports an owning DLManagedTensorVersioned into a PyObject* tensor of the producer; ownership
/// is stolen on success. 0 on success, -1 with a Python exception set.
pub type DLPackManagedTensorToPyObjectNoSync =
    Option<unsafe extern "C" fn(tensor: *mut DLManagedTensorVersioned, out_py_object: *mut *mut c_void) -> c_int>;

/// Exports a PyObject* tensor to a caller-provided, non-owning DLTensor, valid until control
/// returns to the producer. 0 on success, -1 with a Python exception set.
pub type DLPackDLTensorFromPyObjectNoSync =
    Option<unsafe extern "C" fn(py_object: *mut c_void, out: *mut DLTensor) -> c_int>;

/// The allocator's error callback (`kind` is a Python exception name). Rust-side only: the C
/// header spells the pointer type inline, as the official header does.
pub type SetErrorFn = Option<unsafe extern "C" fn(error_ctx: *mut c_void, kind: *const c_char, message: *const c_char)>;

/// Obtains the current work stream of a device (NULL for CPU). 0 on success, -1 with a Python
/// exception set.
pub type DLPackCurrentWorkStream = Option<
    unsafe extern "C" fn(device_type: DeviceType, device_id: i32, out_current_stream: *mut *mut c_void) -> c_int,
>;

/// DLPackExchangeAPI stable header.
#[repr(C)]
pub struct DLPackExchangeAPIHeader {
    /// The provided DLPack version; a consumer checks the major version before using the table.
    pub version: DLPackVersion,
    /// Optional pointer to an older DLPackExchangeAPI in the chain; NULL if there is none.
    pub prev_api: *mut DLPackExchangeAPIHeader,
}

/// Framework-specific function pointer table for DLPack exchange, published on the Python type
/// as the PyCapsule `__dlpack_c_exchange_api__` named "dlpack_exchange_api". It lives for the
/// whole process.
#[repr(C)]
pub struct DLPackExchangeAPI {
    /// The header that remains stable across versions.
    pub header: DLPackExchangeAPIHeader,
    /// Allocates a tensor in the producer's framework; never NULL.
    pub managed_tensor_allocator: DLPackManagedTensorAllocator,
    /// PyObject -> owning managed tensor; never NULL.
    pub managed_tensor_from_py_object_no_sync: DLPackManagedTensorFromPyObjectNoSync,
    /// Owning managed tensor -> PyObject; never NULL.
    pub managed_tensor_to_py_object_no_sync: DLPackManagedTensorToPyObjectNoSync,
    /// PyObject -> non-owning DLTensor; may be NULL.
    pub dltensor_from_py_object_no_sync: DLPackDLTensorFromPyObjectNoSync,
    /// Current work stream of a device; never NULL.
    pub current_work_stream: DLPackCurrentWorkStream,
}

// The tables are shared across threads by design: every field is immutable after static init.
unsafe impl Sync for DLPackExchangeAPI {}
unsafe impl Sync for DLPackExchangeAPIHeader {}

// The layout facts of the x86-64 / aarch64 ABI; a mismatch here is a build error, not a crash.
const _: () = {
    assert!(size_of::<DLPackVersion>() == 8);
    assert!(size_of::<DLDevice>() == 8);
    assert!(size_of::<DLDataType>() == 4);
    assert!(size_of::<DLTensor>() == 48);
    assert!(offset_of!(DLTensor, device) == 8);
    assert!(offset_of!(DLTensor, ndim) == 16);
    assert!(offset_of!(DLTensor, dtype) == 20);
    assert!(offset_of!(DLTensor, shape) == 24);
    assert!(offset_of!(DLTensor, strides) == 32);
    assert!(offset_of!(DLTensor, byte_offset) == 40);
    assert!(size_of::<DLManagedTensor>() == 64);
    assert!(offset_of!(DLManagedTensor, manager_ctx) == 48);
    assert!(offset_of!(DLManagedTensor, deleter) == 56);
    assert!(size_of::<DLManagedTensorVersioned>() == 80);
    assert!(offset_of!(DLManagedTensorVersioned, manager_ctx) == 8);
    assert!(offset_of!(DLManagedTensorVersioned, deleter) == 16);
    assert!(offset_of!(DLManagedTensorVersioned, flags) == 24);
    assert!(offset_of!(DLManagedTensorVersioned, dl_tensor) == 32);
    assert!(size_of::<DLPackExchangeAPIHeader>() == 16);
    assert!(size_of::<DLPackExchangeAPI>() == 56);
    assert!(offset_of!(DLPackExchangeAPI, current_work_stream) == 48);
};
