//! dlpx: a DLPack v1.3 exchange runtime with a C ABI.
//!
//! One shared library is the C library and the Python extension module (`dlpx._native`). It
//! publishes a static `DLPackExchangeAPI` for its own tensor type and consumes every other
//! producer's tensors.

#![deny(clippy::undocumented_unsafe_blocks, clippy::missing_safety_doc)]

pub mod abi;
pub mod allocation;
pub mod array_formats;
pub mod chain;
pub mod copy;
pub mod cpython;
pub mod device;
pub mod devices;
pub mod dtype;
pub mod error;
pub mod exchange;
pub mod exports;
pub mod layout;
pub mod legacy;
pub mod memory;
pub mod python;
pub mod stream;
pub mod tensor;
pub mod validate;

pub use abi::{DLDataType, DLDevice, DLManagedTensorVersioned, DLTensor, DataTypeCode, DeviceType};
pub use error::{Error, ErrorKind};
pub use exchange::EXCHANGE_API;
pub use tensor::Tensor;
