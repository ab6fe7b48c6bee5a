//! Managed tensors that describe a Python object's memory and hold a reference to the object.
//!
//! This is how dlpx imports numpy arrays, which it reads directly instead of through
//! `__dlpack__` (docs/design.md, "What each direct read rests on"): one block from
//! the per-thread cache holds the managed tensor, its shape and its strides (copied, so the
//! object may change its own afterwards), and the deleter drops the object's reference with
//! the GIL. No malloc, no capsule, no producer deleter.

use std::mem::size_of;
use std::ptr::NonNull;

use pyo3_ffi::PyObject;

use crate::abi::*;
use crate::cpython::{ExceptionGuard, Python};
use crate::error::{guard, Error, Result};
use crate::layout::MAX_NDIM;
use crate::memory::cpu::{self, Capacity};

/// Bytes of a managed tensor describing `ndim` dimensions: the struct, then shape and strides.
fn block_capacity(ndim: usize) -> Capacity {
    cpu::capacity_for(size_of::<DLManagedTensorVersioned>() + 2 * ndim * size_of::<i64>())
        .expect("MAX_NDIM dimensions fit a size class")
}

/// A managed tensor of `tensor` (its `shape` and `strides` are ignored: `dims` gives them,
/// `(extent, stride)` per dimension, `ndim` of them) that holds a new reference to `object`.
///
/// # Safety
/// GIL held; `object` is live and keeps `tensor.data` valid while it lives; `dims` yields
/// `tensor.ndim` pairs and `tensor.ndim <= MAX_NDIM`.
#[inline(always)]
pub unsafe fn managed_holding(
    py: Python<'_>,
    object: *mut PyObject,
    tensor: DLTensor,
    dims: impl Iterator<Item = (i64, i64)>,
    readonly: bool,
) -> Result<NonNull<DLManagedTensorVersioned>> {
    let ndim = tensor.ndim as usize;
    debug_assert!(ndim <= MAX_NDIM);
    let capacity = block_capacity(ndim);
    let block = cpu::alloc(capacity).ok_or_else(|| Error::memory("out of memory for a managed tensor"))?;
    let managed = block.cast::<DLManagedTensorVersioned>();
    // SAFETY: the block holds the struct and 2 × ndim i64s, aligned for both; the caller's
    // contract covers the reference and the data.
    unsafe {
        let shape = block.as_ptr().add(size_of::<DLManagedTensorVersioned>()).cast::<i64>();
        for (i, (extent, stride)) in dims.take(ndim).enumerate() {
            shape.add(i).write(extent);
            shape.add(ndim + i).write(stride);
        }
        (py.Py_IncRef)(object);
        managed.as_ptr().write(DLManagedTensorVersioned {
            version: DLPackVersion { major: DLPACK_MAJOR_VERSION, minor: DLPACK_MINOR_VERSION },
            manager_ctx: object.cast(),
            deleter: Some(release),
            flags: if readonly { DLPACK_FLAG_BITMASK_READ_ONLY } else { 0 },
            dl_tensor: DLTensor { shape, strides: shape.add(ndim), ..tensor },
        });
    }
    Ok(managed)
}

/// The deleter: frees the block and drops the object's reference, with the GIL (any thread may
/// release the last reference to a tensor). After the interpreter is gone the reference is
/// left, as numpy's own deleter does.
unsafe extern "C" fn release(managed: *mut DLManagedTensorVersioned) {
    guard("held object release", || {
        // SAFETY: a block `managed_holding` filled; it is freed once, here, by its only owner.
        let object = unsafe {
            let object = (*managed).manager_ctx.cast::<PyObject>();
            let capacity = block_capacity((*managed).dl_tensor.ndim as usize);
            cpu::free(NonNull::new_unchecked(managed).cast(), capacity);
            object
        };
        Python::with_gil(|py| {
            let _pending = ExceptionGuard::save_with_gil(py);
            py.decref(object);
        });
    })
}
