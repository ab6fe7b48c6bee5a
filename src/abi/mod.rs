//! DLPack v1.3, spelled once. Everything else in dlpx uses these types.
//!
//! Enumerations that arrive from C are newtypes over their integer, never Rust `enum`s: a producer
//! built against a newer DLPack may send a device or dtype code this build does not know, and
//! decoding that into a Rust `enum` would be undefined behaviour. Their values, C names and
//! printed names are one table, `enums.rs`, which `build.rs` also reads to write the C enums.

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

/// One row of a DLPack enumeration (`src/abi/enums.rs`): the value, its C enumerator, the name
/// dlpx prints for it, the bit width a dtype code fixes (0: any), and whether DLPack 1.3 has it.
#[derive(Clone, Copy, Debug)]
pub struct EnumRow<T: 'static> {
    pub value: T,
    pub c_name: &'static str,
    pub name: &'static str,
    pub bits: u8,
    pub in_1_3: bool,
}

/// The number in a name dlpx reads (`int8`'s 8, `cuda:1`'s 1, `float32x4`'s 4): ASCII digits,
/// no sign, no leading zero, at most `u32::MAX`; None for anything else. Names are exact, so
/// `cuda:01`, `cuda:+1` and `cuda:` are no names.
pub fn name_number(text: &str) -> Option<u32> {
    let plain = !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()) && (text == "0" || !text.starts_with('0'));
    plain.then(|| text.parse().ok()).flatten()
}

/// Makes each enumeration a newtype over its integer (unknown values are legal input), with a
/// constant per value and its table of rows.
macro_rules! dlpack_enums {
    (@in_1_3) => { true };
    (@in_1_3 $since:literal) => { false };
    ($(
        $(#[doc = $doc:literal])*
        enum $c_enum:ident for $rust:ident($repr:ty) {
            $(
                $(#[doc = $row_doc:literal])*
                $konst:ident = $value:literal, $c_name:ident, $name:literal $(, bits $bits:literal)? $(, since $since:literal)?;
            )*
        }
    )*) => {$(
        $(#[doc = $doc])*
        #[doc = concat!("\n\nA `", stringify!($repr), "` newtype (C: `", stringify!($c_enum), "`): values this build does not name are legal input.")]
        #[repr(transparent)]
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub struct $rust(pub $repr);

        impl $rust {
            $(
                $(#[doc = $row_doc])*
                pub const $konst: Self = Self($value);
            )*

            /// Every value DLPack names, in order.
            pub const TABLE: &'static [EnumRow<Self>] = &[$(
                EnumRow {
                    value: Self($value),
                    c_name: stringify!($c_name),
                    name: $name,
                    bits: 0 $(+ $bits)?,
                    in_1_3: dlpack_enums!(@in_1_3 $($since)?),
                },
            )*];

            /// `TABLE`'s index of each value below 64 (u8::MAX: unnamed), so that `row`, which
            /// every import runs, indexes rather than searches. A value in `TABLE` that is
            /// negative, 64 or more, or named twice stops the build here.
            const BY_VALUE: [u8; 64] = {
                let mut index = [u8::MAX; 64];
                let mut i = 0;
                while i < Self::TABLE.len() {
                    let value = Self::TABLE[i].value.0 as usize;
                    assert!(index[value] == u8::MAX, "a value is named twice");
                    index[value] = i as u8;
                    i += 1;
                }
                index
            };

            /// The row of this value, if DLPack names it.
            #[inline]
            pub fn row(self) -> Option<&'static EnumRow<Self>> {
                let index = *Self::BY_VALUE.get(usize::try_from(self.0).ok()?)?;
                Self::TABLE.get(index as usize)
            }
        }
    )*};
}

include!("enums.rs");

/// A Device for Tensor and operator.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct DLDevice {
    /// The device type used in the device.
    pub device_type: DeviceType,
    /// The device index. For vanilla CPU memory, pinned memory, or managed memory, this is 0.
    pub device_id: i32,
}

impl DLDevice {
    /// The host's memory: device type CPU, and 0, the only id a CPU has. (Rust's alone: C spells
    /// it `(DLDevice){kDLCPU, 0}`.)
    ///
    /// cbindgen:ignore
    pub const CPU: DLDevice = DLDevice { device_type: DeviceType::CPU, device_id: 0 };

    /// The device as DLPack names it: CPU memory is device 0 ("for vanilla CPU memory ... this is
    /// set to 0"), whatever index a producer wrote (jax exports its second CPU device's arrays as
    /// CPU 1: the same host memory, which dlpx reads, copies and allocates as cpu:0).
    #[inline(always)]
    pub fn canonical(self) -> DLDevice {
        match self.device_type {
            DeviceType::CPU => DLDevice::CPU,
            _ => self,
        }
    }
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

impl DLTensor {
    /// No tensor: NULL data and dimensions, 0-d, on the CPU, a zero dtype (a slot before a view
    /// is written into it). (Rust's alone.)
    ///
    /// cbindgen:ignore
    pub const EMPTY: DLTensor = DLTensor {
        data: std::ptr::null_mut(),
        device: DLDevice::CPU,
        ndim: 0,
        dtype: DLDataType { code: 0, bits: 0, lanes: 0 },
        shape: std::ptr::null_mut(),
        strides: std::ptr::null_mut(),
        byte_offset: 0,
    };

    /// Whether two headers are the same (the same pointers to the same shape and strides),
    /// compared as the six words each is (`repr(C)`, no padding): or-ed differences, with no call
    /// (an array's `==` is a `bcmp` call, which costs more on a kernel call's path).
    #[inline(always)]
    pub fn same_header(&self, other: &DLTensor) -> bool {
        const _: () = assert!(std::mem::size_of::<DLTensor>() == 48);
        let words = |t: &DLTensor| (t as *const DLTensor).cast::<u64>();
        (0..6).fold(0u64, |differ, i| {
            // SAFETY: 48 bytes of plain fields with no padding (the layout DLPack fixes), read as
            // words.
            differ | unsafe { words(self).add(i).read_unaligned() ^ words(other).add(i).read_unaligned() }
        }) == 0
    }
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

// SAFETY: the tables are shared across threads by design: every field is immutable after static
// init, and the pointers are to process-lifetime tables and functions.
unsafe impl Sync for DLPackExchangeAPI {}
// SAFETY: as above.
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_row_is_found_by_its_value_and_only_named_values_have_one() {
        for row in DeviceType::TABLE {
            assert_eq!(row.value.row().map(|r| r.value), Some(row.value));
        }
        for row in DataTypeCode::TABLE {
            assert_eq!(row.value.row().map(|r| r.value), Some(row.value));
        }
        for unnamed in [-1, 0, 5, 6, 22, 63, 64, 1000, i32::MIN, i32::MAX] {
            assert!(DeviceType(unnamed).row().is_none(), "{unnamed}");
        }
        for unnamed in [19u8, 63, 64, 255] {
            assert!(DataTypeCode(unnamed).row().is_none(), "{unnamed}");
        }
    }
}
