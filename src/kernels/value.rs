//! What a kernel receives and returns besides tensors it allocates: the kinds of values (the
//! numbers C reads, in `dlpx.h`), an argument as the call holds it, a result as the kernel
//! hands it back.

use std::mem::MaybeUninit;
use std::ptr::{self, NonNull};

use super::signature::Default;
use crate::abi::{DLManagedTensorVersioned, DLTensor};

/// The kind of a kernel's argument or result (`DLPX_VALUE_*`).
pub type DlpxValueKind = i32;
/// None (an optional parameter left at None).
pub const DLPX_VALUE_NONE: DlpxValueKind = 0;
/// A tensor: a `DLTensor` with DLPack flags.
pub const DLPX_VALUE_TENSOR: DlpxValueKind = 1;
/// An `int64_t`.
pub const DLPX_VALUE_INT: DlpxValueKind = 2;
/// A `double`.
pub const DLPX_VALUE_FLOAT: DlpxValueKind = 3;
/// A `bool`.
pub const DLPX_VALUE_BOOL: DlpxValueKind = 4;
/// A string: UTF-8 bytes and their length (not NUL-terminated).
pub const DLPX_VALUE_STR: DlpxValueKind = 5;

/// An argument as the kernel reads it, in place: kernel.h's `DlpxArgument` (kernel ABI 2), whose
/// layout is this enum's. `repr(C, i32)` fixes it (RFC 2195): an `int32_t` kind (the
/// discriminant, `DLPX_VALUE_*`), then a union of each variant's fields as a C struct, at
/// offset 8; 64 bytes in all. A tensor's shape and strides, and a string's bytes, are the
/// caller's: valid for the call.
#[derive(Clone, Copy)]
#[repr(C, i32)]
pub enum Value {
    None = DLPX_VALUE_NONE,
    /// The tensor and its DLPack flags (READ_ONLY where it may not be written).
    Tensor(DLTensor, u64) = DLPX_VALUE_TENSOR,
    Int(i64) = DLPX_VALUE_INT,
    Float(f64) = DLPX_VALUE_FLOAT,
    Bool(bool) = DLPX_VALUE_BOOL,
    Str(*const u8, usize) = DLPX_VALUE_STR,
}

/// `Value::Tensor` as `repr(C, i32)` lays it out: the kind, then the variant's fields at offset 8.
#[repr(C)]
struct TensorArgument {
    kind: DlpxValueKind,
    tensor: DLTensor,
    flags: u64,
}

// The same bytes as `Value::Tensor` on every target (the test below reads them on this one).
const _: () = assert!(
    std::mem::size_of::<TensorArgument>() == std::mem::size_of::<Value>()
        && std::mem::offset_of!(TensorArgument, tensor) == 8
        && std::mem::offset_of!(TensorArgument, flags) == 56
);

/// What a 0-d tensor argument's shape and strides point to where its producer left them NULL
/// (dlpx's own, jax's, tvm-ffi's, capsules): kernel.h promises a kernel they never are. One
/// element, so a kernel that reads `shape[0]` of a 0-d tensor by mistake reads a number.
static NO_DIMS: [i64; 1] = [0];

/// `tensor`, a validated argument, with its NULL shape and strides (a 0-d tensor's: validation
/// refuses them where `ndim` > 0) pointing to [`NO_DIMS`]. Never written through: an argument
/// is the caller's, read-only to the kernel.
#[inline(always)]
pub fn with_dims(tensor: &mut DLTensor) {
    // One test on the hot path: only a 0-d tensor may have them NULL.
    if tensor.ndim == 0 {
        if tensor.shape.is_null() {
            tensor.shape = NO_DIMS.as_ptr().cast_mut();
        }
        if tensor.strides.is_null() {
            tensor.strides = NO_DIMS.as_ptr().cast_mut();
        }
    }
}

impl Value {
    /// Writes an empty tensor argument (no flags) into `slot`, field by field, and gives back
    /// its tensor and flags to fill. Built whole and moved there, the 64-byte value went
    /// through the stack, and the move's wide loads of the narrower stores just made stalled
    /// twice an argument (about 6 ns of a nop kernel's call, per tensor).
    #[inline(always)]
    pub fn empty_tensor_in(slot: &mut MaybeUninit<Value>) -> (&mut DLTensor, &mut u64) {
        let argument = slot.as_mut_ptr().cast::<TensorArgument>();
        // SAFETY: `TensorArgument` is `Value::Tensor`'s layout (`repr(C, i32)`, pinned by the
        // test below), in the slot's memory; every field is written before the slot is used.
        unsafe {
            ptr::addr_of_mut!((*argument).kind).write(DLPX_VALUE_TENSOR);
            ptr::addr_of_mut!((*argument).tensor).write(DLTensor::EMPTY);
            ptr::addr_of_mut!((*argument).flags).write(0);
            (&mut (*argument).tensor, &mut (*argument).flags)
        }
    }

    /// A parameter's default as the kernel receives it (a string default lives with its kernel,
    /// for the process).
    pub fn of_default(default: &'static Default) -> Value {
        match default {
            Default::None => Value::None,
            Default::Int(i) => Value::Int(*i),
            Default::Float(f) => Value::Float(*f),
            Default::Bool(b) => Value::Bool(*b),
            Default::Str(s) => Value::Str(s.as_ptr(), s.len()),
        }
    }

    pub fn kind(&self) -> DlpxValueKind {
        match self {
            Value::None => DLPX_VALUE_NONE,
            Value::Tensor(..) => DLPX_VALUE_TENSOR,
            Value::Int(_) => DLPX_VALUE_INT,
            Value::Float(_) => DLPX_VALUE_FLOAT,
            Value::Bool(_) => DLPX_VALUE_BOOL,
            Value::Str(..) => DLPX_VALUE_STR,
        }
    }

    /// The kind's name, for messages.
    pub fn kind_name(&self) -> &'static str {
        kind_names(self.kind()).map_or("a value", |(name, _)| name)
    }
}

/// A kind's name for messages and its constant's (`("an int", "DLPX_VALUE_INT")`); None for a
/// number no `DLPX_VALUE_*` names (a C caller's).
pub fn kind_names(kind: DlpxValueKind) -> Option<(&'static str, &'static str)> {
    Some(match kind {
        DLPX_VALUE_NONE => ("None", "DLPX_VALUE_NONE"),
        DLPX_VALUE_TENSOR => ("a tensor", "DLPX_VALUE_TENSOR"),
        DLPX_VALUE_INT => ("an int", "DLPX_VALUE_INT"),
        DLPX_VALUE_FLOAT => ("a float", "DLPX_VALUE_FLOAT"),
        DLPX_VALUE_BOOL => ("a bool", "DLPX_VALUE_BOOL"),
        DLPX_VALUE_STR => ("a str", "DLPX_VALUE_STR"),
        _ => return None,
    })
}

/// A result the kernel returned: a tensor it allocated through the call (now the caller's to
/// own), or a scalar. Copy, to live in a call's [`super::inline::Inline`]: whoever holds one
/// hands it over or discards it, once.
#[derive(Clone, Copy)]
pub enum Returned {
    Tensor(NonNull<DLManagedTensorVersioned>),
    Int(i64),
    Float(f64),
    Bool(bool),
}

impl Returned {
    /// Deletes a tensor result that will not reach the caller (a later result failed).
    pub fn discard(self) {
        if let Returned::Tensor(managed) = self {
            // SAFETY: the result owns `managed` and gives it up here, once.
            unsafe { crate::tensor::delete_managed(managed) }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::size_of;

    /// The bytes of `value` at `offset`, as a `T` (what a C kernel reads of `DlpxArgument`).
    fn at<T: Copy>(value: &Value, offset: usize) -> T {
        // SAFETY: within the 64-byte value; read unaligned, as the test asks any offset.
        unsafe { (value as *const Value).cast::<u8>().add(offset).cast::<T>().read_unaligned() }
    }

    #[test]
    fn values_have_kernel_h_s_dlpx_argument_layout() {
        // The same numbers as c_tests/test_kernel_library.c asserts of DlpxArgument.
        assert_eq!(size_of::<Value>(), 64);
        let shape = [4i64];
        let tensor = DLTensor {
            data: 0x1000 as *mut _,
            device: crate::abi::DLDevice::CPU,
            ndim: 1,
            dtype: crate::abi::DLDataType { code: 2, bits: 32, lanes: 1 },
            shape: shape.as_ptr().cast_mut(),
            strides: std::ptr::null_mut(),
            byte_offset: 24,
        };
        let value = Value::Tensor(tensor, 7);
        assert_eq!(at::<i32>(&value, 0), DLPX_VALUE_TENSOR);
        assert_eq!((at::<usize>(&value, 8), at::<u64>(&value, 8 + 40), at::<u64>(&value, 56)), (0x1000, 24, 7));
        assert_eq!(at::<i32>(&Value::None, 0), DLPX_VALUE_NONE);
        assert_eq!((at::<i32>(&Value::Int(-3), 0), at::<i64>(&Value::Int(-3), 8)), (DLPX_VALUE_INT, -3));
        assert_eq!((at::<i32>(&Value::Float(2.5), 0), at::<f64>(&Value::Float(2.5), 8)), (DLPX_VALUE_FLOAT, 2.5));
        assert_eq!((at::<i32>(&Value::Bool(true), 0), at::<u8>(&Value::Bool(true), 8)), (DLPX_VALUE_BOOL, 1));
        let text = "abc";
        let s = Value::Str(text.as_ptr(), 3);
        assert_eq!(
            (at::<i32>(&s, 0), at::<usize>(&s, 8), at::<usize>(&s, 16)),
            (DLPX_VALUE_STR, text.as_ptr() as usize, 3)
        );
    }

    #[test]
    fn a_tensor_written_in_place_is_the_tensor_value() {
        let mut slot = MaybeUninit::<Value>::uninit();
        let (view, flags) = Value::empty_tensor_in(&mut slot);
        view.ndim = 2;
        view.byte_offset = 24;
        *flags = 1;
        // SAFETY: written whole by `empty_tensor_in`.
        let value = unsafe { slot.assume_init() };
        let Value::Tensor(tensor, read_flags) = value else { panic!("not a tensor") };
        assert_eq!((tensor.ndim, tensor.byte_offset, tensor.data, read_flags), (2, 24, ptr::null_mut(), 1));
        assert_eq!((at::<i32>(&value, 0), at::<i32>(&value, 8 + 16), at::<u64>(&value, 56)), (DLPX_VALUE_TENSOR, 2, 1));
    }
}
