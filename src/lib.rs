//! dlpx: a DLPack v1.3 exchange runtime with a C ABI.
//!
//! One shared library is the C library and the Python extension module (`dlpx._native`). It
//! publishes a static `DLPackExchangeAPI` for its own tensor type and consumes every other
//! producer's tensors.

#![deny(clippy::undocumented_unsafe_blocks, clippy::missing_safety_doc)]

// The modules, bottom up: which layer each is in is declared once, in `layers.txt`
// (docs/design.md, "Layers"); scripts/check_layers.sh holds these lines to its order.
pub mod abi;
pub mod array_formats;
pub mod chain;
pub mod device_names;
pub mod dtype;
pub mod error;
pub mod layout;
pub mod validate;

pub mod cpython;

pub mod allocation;
pub mod copy;
pub mod devices;
pub mod kernels;
pub mod legacy;
pub mod memory;
pub mod stream;
pub mod tensor;

// The Python layer's functions take `PyObject*` as CPython's own API does: borrowed references,
// valid while the caller's `Python` token lives. That is the contract of the whole layer, so they
// are not each `unsafe`.
#[allow(clippy::not_unsafe_ptr_arg_deref)]
pub mod args;
#[allow(clippy::not_unsafe_ptr_arg_deref)]
pub mod capsule;
#[allow(clippy::not_unsafe_ptr_arg_deref)]
pub mod shell;
#[allow(clippy::not_unsafe_ptr_arg_deref)]
pub mod tensor_type;

#[allow(clippy::not_unsafe_ptr_arg_deref)]
pub mod producers;

#[allow(clippy::not_unsafe_ptr_arg_deref)]
pub mod kernel_loader;

#[allow(clippy::not_unsafe_ptr_arg_deref)]
pub mod module;

pub mod exports;

pub use abi::{DLDataType, DLDevice, DLManagedTensorVersioned, DLTensor, DataTypeCode, DeviceType};
pub use error::{Error, ErrorKind};
pub use exports::exchange::EXCHANGE_API;
pub use tensor::Tensor;
