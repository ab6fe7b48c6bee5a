//! The Python face of dlpx: the `dlpx._native` module, the `dlpx.Tensor` type, the importer.
//! All of it runs against a CPython resolved at run time (see `capi`).
//!
//! Functions here take `PyObject*` as CPython's own API does: borrowed references, valid while
//! the caller holds the GIL — the contract of the whole module, so they are not each `unsafe`.
#![allow(clippy::not_unsafe_ptr_arg_deref)]

pub mod args;
pub mod array_api_strict_array;
pub mod capsule;
pub mod consumer;
pub mod dlpack_call;
pub mod dlpack_method;
pub mod fast_capsule;
pub mod held_object;
pub mod info;
pub mod jax_array;
pub mod kernel;
pub mod module;
pub mod numpy_array;
pub mod tensor_type;
pub mod tvm_ffi_tensor;

/// Lets blocking driver calls release the GIL (the core's hook, `memory::blocking`): installed
/// when Python first calls into dlpx (module import, the kernel API).
pub fn install_gil_release() {
    crate::memory::blocking::install(|run| crate::cpython::without_gil(run));
}
