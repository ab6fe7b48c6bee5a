//! Kernel views of producers without an exchange table that dlpx does not read directly (jax,
//! cupy, …): the managed tensor `__dlpack__` put in its capsule (for a jax array,
//! the capsule of the jaxlib function `__dlpack__` ends in: `jax_array`) goes to the kernel as
//! the view's owner, as it is (a legacy one in a versioned wrapper from the per-thread cache,
//! `legacy::wrap`).
//! No `Tensor` is built and no export made for it, so dlpx makes no heap allocation of its own;
//! the kernel's `dlpx_view_release` calls the producer's deleter, once.

use std::ptr::NonNull;

use pyo3_ffi::PyObject;

use super::{capsule, consumer, jax_array};
use crate::abi::DLManagedTensorVersioned;
use crate::cpython::Python;
use crate::error::Result;

/// An owning managed tensor of `object` through `__dlpack__`. Where the capsule holds what
/// cannot be handed on as it is (NULL strides, an unknown major, an invalid
/// tensor), or a CUDA stream is current (the producer must be asked with it), the importer's
/// path decides and its `Tensor` is exported.
pub fn managed_of(py: &Python, object: *mut PyObject) -> Result<NonNull<DLManagedTensorVersioned>> {
    if crate::stream::any_set() {
        return consumer::import(object, None, None)?.export_versioned(0);
    }
    let capsule = jax_array::dlpack(py, object)?;
    if let Some(managed) = capsule::take_versioned(py, capsule.as_ptr())? {
        return Ok(managed);
    }
    if let Some(managed) = capsule::take_legacy(py, capsule.as_ptr())? {
        return Ok(managed);
    }
    capsule::consume(py, capsule.as_ptr())?.export_versioned(0)
}
