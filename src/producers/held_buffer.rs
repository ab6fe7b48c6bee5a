//! Managed tensors over a Python buffer (a PEP 3118 view, docs/design.md R12): one block from
//! the per-thread cache holds the managed tensor, the `Py_buffer` (the exporter's export, held
//! until the deleter runs: a `bytearray` cannot resize, an `mmap` cannot close meanwhile), then
//! the shape and strides. The deleter releases the view with an attached thread state
//! (`PyBuffer_Release` needs one): a deleter on a C thread without the GIL takes it; after the
//! interpreter's finalisation the view is left as it is — the exporter's memory stays mapped,
//! nothing touches the interpreter — and the block is freed.

use std::mem::size_of;
use std::ptr::NonNull;

use crate::abi::*;
use crate::cpython::buffer::PyBuffer;
use crate::cpython::{ExceptionGuard, Python};
use crate::error::{guard, Error, Result};
use crate::layout::MAX_NDIM;
use crate::memory::cpu::{self, Capacity};

/// The block: the managed tensor first (its address is the block's), the view after it.
#[repr(C)]
struct Block {
    managed: DLManagedTensorVersioned,
    view: PyBuffer,
}

fn block_capacity(ndim: usize) -> Capacity {
    cpu::capacity_for(size_of::<Block>() + 2 * ndim * size_of::<i64>()).expect("MAX_NDIM dimensions fit a size class")
}

/// A managed tensor of `tensor` (its `shape` and `strides` are ignored: `dims` gives them,
/// `(extent, element stride)` per dimension) that owns `view` and releases it when deleted.
///
/// # Safety
/// GIL held; `view` is a filled view whose memory `tensor.data` points into; `dims` yields
/// `tensor.ndim` pairs and `tensor.ndim <= MAX_NDIM`. On error the view is released here.
pub unsafe fn managed_over(
    py: Python<'_>,
    mut view: PyBuffer,
    tensor: DLTensor,
    dims: impl Iterator<Item = (i64, i64)>,
    readonly: bool,
) -> Result<NonNull<DLManagedTensorVersioned>> {
    let ndim = tensor.ndim as usize;
    debug_assert!(ndim <= MAX_NDIM);
    let Some(block) = cpu::alloc(block_capacity(ndim)) else {
        // SAFETY: the caller's filled view, released once.
        unsafe { (py.PyBuffer_Release)(&mut view) };
        return Err(Error::memory("out of memory for a managed tensor"));
    };
    let managed = block.cast::<DLManagedTensorVersioned>();
    // SAFETY: the block holds a `Block` and 2 × ndim i64s after it, aligned for both (blocks are
    // 16-aligned; `Block` is a multiple of 8 bytes).
    unsafe {
        let shape = block.as_ptr().add(size_of::<Block>()).cast::<i64>();
        for (i, (extent, stride)) in dims.take(ndim).enumerate() {
            shape.add(i).write(extent);
            shape.add(ndim + i).write(stride);
        }
        block.cast::<Block>().as_ptr().write(Block {
            managed: DLManagedTensorVersioned {
                version: DLPackVersion { major: DLPACK_MAJOR_VERSION, minor: DLPACK_MINOR_VERSION },
                manager_ctx: block.as_ptr().cast(),
                deleter: Some(release),
                flags: if readonly { DLPACK_FLAG_BITMASK_READ_ONLY } else { 0 },
                dl_tensor: DLTensor { shape: if ndim == 0 { std::ptr::null_mut() } else { shape }, strides: if ndim == 0 { std::ptr::null_mut() } else { shape.add(ndim) }, ..tensor },
            },
            view,
        });
    }
    Ok(managed)
}

/// The deleter: releases the view (with the GIL, taken when this thread lacks it), then frees
/// the block. Once the interpreter is finalising on another thread, the view is left.
unsafe extern "C" fn release(managed: *mut DLManagedTensorVersioned) {
    guard("buffer release", || {
        // SAFETY: a block `managed_over` filled; it is freed once, here, by its only owner.
        unsafe {
            let block = managed.cast::<Block>();
            let ndim = (*managed).dl_tensor.ndim as usize;
            Python::with_gil(|py| {
                let _pending = ExceptionGuard::save_with_gil(py);
                (py.PyBuffer_Release)(&mut (*block).view);
            });
            cpu::free(NonNull::new_unchecked(block.cast()), block_capacity(ndim));
        }
    })
}
