//! What a kernel receives and returns besides tensors it allocates: the kinds of values (the
//! numbers C reads, in `dlpx.h`), an argument as the call holds it, a result as the kernel
//! hands it back.

use std::ptr::NonNull;

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

/// An argument as the kernel reads it. A tensor's shape and strides, and a string's bytes, are
/// the caller's: valid for the call.
#[derive(Clone, Copy)]
pub enum Value {
    None,
    /// The tensor and its DLPack flags (READ_ONLY where it may not be written).
    Tensor(DLTensor, u64),
    Int(i64),
    Float(f64),
    Bool(bool),
    Str(*const u8, usize),
}

impl Value {
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
        match self {
            Value::None => "None",
            Value::Tensor(..) => "a tensor",
            Value::Int(_) => "an int",
            Value::Float(_) => "a float",
            Value::Bool(_) => "a bool",
            Value::Str(..) => "a str",
        }
    }
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
