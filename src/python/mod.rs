//! The Python face of dlpx: the `dlpx._native` module, the `dlpx.Tensor` type, the importer
//! seam (`producers`), the kernel API's Python half. All of it runs against a CPython resolved at
//! run time, reached through a `Python` token (docs/design.md, "The GIL is a type").
//!
//! Functions here take `PyObject*` as CPython's own API does: borrowed references, valid while
//! the caller's token lives — the contract of the whole module, so they are not each `unsafe`.
#![allow(clippy::not_unsafe_ptr_arg_deref)]

pub mod args;
pub mod capsule;
pub mod device_class;
pub mod dlpack_call;
pub mod held_object;
pub mod info;
pub mod kernel;
pub mod module;
pub mod producers;
pub mod tensor;

/// Lets blocking driver calls release the GIL (the core's hook, `memory::blocking`): installed
/// when Python first calls into dlpx (module import, the kernel API).
pub fn install_gil_release() {
    crate::memory::blocking::install(|run| crate::cpython::without_gil(run));
}
