//! The Python face of dlpx: the `dlpx._native` module, the `dlpx.Tensor` type, the importer.
//! All of it runs against a CPython resolved at run time (see `capi`).
//!
//! Functions here take `PyObject*` as CPython's own API does: borrowed references, valid while
//! the caller holds the GIL — the contract of the whole module, so they are not each `unsafe`.
#![allow(clippy::not_unsafe_ptr_arg_deref)]

pub mod args;
pub mod capi;
pub mod capsule;
pub mod consumer;
pub mod dlpack_method;
pub mod info;
pub mod kernel;
pub mod module;
pub mod tensor_type;

pub use capi::{raise, without_gil};
