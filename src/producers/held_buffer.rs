//! Managed tensors over a Python buffer (a PEP 3118 view, docs/design.md R12): one block from
//! the per-thread cache holds the managed tensor, the `Py_buffer`, then the shape and strides.
//! The view is filled in the block and never moves: an exporter may point its `shape` or
//! `strides` into the view itself (`PyBuffer_FillInfo` does, for `bytes` and `bytearray`). It is
//! held until the deleter runs (a `bytearray` cannot resize, an `mmap` cannot close meanwhile),
//! which releases it with an attached thread state (`PyBuffer_Release` needs one: a deleter on a
//! C thread without the GIL takes it); after the interpreter's finalisation the view is left as it
//! is — the exporter's memory stays mapped, nothing touches the interpreter — and the block freed.

use std::ffi::c_int;
use std::mem::{size_of, MaybeUninit};
use std::ptr::NonNull;

use pyo3_ffi::PyObject;

use crate::abi::*;
use crate::cpython::buffer::PyBuffer;
use crate::cpython::{ExceptionGuard, Python};
use crate::error::{guard, Error, Result};
use crate::layout::MAX_NDIM;
use crate::memory::cpu::{self, Capacity};
use crate::tensor::CORE_ROOM;

/// The block: room for the core of the `Tensor` made from it (`tensor::CORE_ROOM`), the managed
/// tensor, the view, then the dimensions.
#[repr(C)]
struct Block {
    core_room: [MaybeUninit<u8>; CORE_ROOM],
    managed: DLManagedTensorVersioned,
    view: PyBuffer,
}

/// Room for the most dimensions: the view is taken before its `ndim` is known.
fn block_capacity() -> Capacity {
    cpu::capacity_for(size_of::<Block>() + 2 * MAX_NDIM * size_of::<i64>()).expect("a block fits a size class")
}

/// An exporter's view, filled in place in a block of its own; dropped unused, it is released.
/// Lives within the GIL token's lifetime.
pub struct HeldView<'py> {
    block: NonNull<Block>,
    py: Python<'py>,
}

impl<'py> HeldView<'py> {
    /// `PyObject_GetBuffer(object, flags)` into a new block; None when the object exports no
    /// buffer (TypeError, cleared); the exporter's own refusal (a BufferError) otherwise.
    pub fn take(py: Python<'py>, object: *mut PyObject, flags: c_int) -> Result<Option<HeldView<'py>>> {
        let block = cpu::alloc(block_capacity())
            .ok_or_else(|| Error::memory("out of memory for a buffer view"))?
            .cast::<Block>();
        // SAFETY: GIL held; a live object; the block's view is writable and stays where it is.
        let got = unsafe {
            let view = std::ptr::addr_of_mut!((*block.as_ptr()).view);
            view.write(PyBuffer::zeroed());
            (py.PyObject_GetBuffer)(object, view, flags)
        };
        if got == 0 {
            return Ok(Some(HeldView { block, py }));
        }
        // SAFETY: the block is ours and nothing was taken into it.
        unsafe { cpu::free(block.cast(), block_capacity()) };
        // SAFETY: GIL held; the failed call left an exception.
        unsafe {
            if crate::cpython::pending_is(py, crate::error::ErrorKind::TypeError) {
                (py.PyErr_Clear)();
                return Ok(None);
            }
        }
        Err(Error::python_pending())
    }

    pub fn view(&self) -> &PyBuffer {
        // SAFETY: the block holds a filled view while `self` lives.
        unsafe { &(*self.block.as_ptr()).view }
    }

    /// The view, and where the tensor's dimensions go: `ndim` extents, then `ndim` element
    /// strides (room for `MAX_NDIM` of each), written in place rather than gathered and copied.
    pub fn parts(&mut self) -> (&PyBuffer, &mut [i64; 2 * MAX_NDIM]) {
        // SAFETY: the block holds the view, and room for 2 × MAX_NDIM i64s after the `Block`,
        // aligned (blocks are 16-aligned; `Block` is a multiple of 8 bytes): disjoint, and only
        // `self` reaches them.
        unsafe {
            let dims = self.block.as_ptr().cast::<u8>().add(size_of::<Block>()).cast::<[i64; 2 * MAX_NDIM]>();
            (&(*self.block.as_ptr()).view, &mut *dims)
        }
    }

    /// A managed tensor of `tensor` (its `shape` and `strides` are ignored: the first `2 × ndim`
    /// of [`HeldView::parts`]' dimensions give them) that owns the view and releases it when
    /// deleted, with the core's room in front of it (a `Handover::Made`).
    /// A layout whose byte offsets overflow is refused (`validate::check_made`), the view released.
    ///
    /// # Safety
    /// `tensor.data` points into the view's memory; `tensor.ndim <= MAX_NDIM` and its dimensions
    /// were written to [`HeldView::parts`]' dimensions.
    pub unsafe fn into_managed(
        mut self,
        tensor: DLTensor,
        readonly: bool,
    ) -> Result<NonNull<DLManagedTensorVersioned>> {
        let ndim = tensor.ndim as usize;
        debug_assert!(ndim <= MAX_NDIM);
        let shape = self.parts().1.as_mut_ptr();
        let block = std::mem::ManuallyDrop::new(self).block;
        // SAFETY: the block holds a filled view and the dimensions; the view stays in place.
        unsafe {
            let (shape, strides) = match ndim {
                0 => (std::ptr::null_mut(), std::ptr::null_mut()),
                _ => (shape, shape.add(ndim)),
            };
            let managed = std::ptr::addr_of_mut!((*block.as_ptr()).managed);
            managed.write(DLManagedTensorVersioned {
                version: DLPackVersion { major: DLPACK_MAJOR_VERSION, minor: DLPACK_MINOR_VERSION },
                manager_ctx: block.as_ptr().cast(),
                deleter: Some(release),
                flags: if readonly { DLPACK_FLAG_BITMASK_READ_ONLY } else { 0 },
                dl_tensor: DLTensor { shape, strides, ..tensor },
            });
            let dims: &[i64] = if ndim == 0 { &[] } else { std::slice::from_raw_parts(shape, 2 * ndim) };
            let (shape, strides) = dims.split_at(ndim);
            if let Err(err) = crate::validate::check_made(&(*managed).dl_tensor, shape, strides, (*managed).flags) {
                // Refused: its deleter releases the view and frees the block, once.
                release(managed);
                return Err(err);
            }
            Ok(NonNull::new_unchecked(managed))
        }
    }
}

impl Drop for HeldView<'_> {
    fn drop(&mut self) {
        // SAFETY: GIL held (the token's lifetime); the view is filled and released once, then
        // the block is freed.
        unsafe {
            (self.py.PyBuffer_Release)(std::ptr::addr_of_mut!((*self.block.as_ptr()).view));
            cpu::free(self.block.cast(), block_capacity());
        }
    }
}

/// The deleter: releases the view (with the GIL, taken when this thread lacks it), then frees
/// the block. Once the interpreter is finalising on another thread, the view is left.
unsafe extern "C" fn release(managed: *mut DLManagedTensorVersioned) {
    guard("buffer release", || {
        // SAFETY: a block `into_managed` filled (its `manager_ctx`); it is freed once, here, by
        // its only owner.
        unsafe {
            let block = (*managed).manager_ctx.cast::<Block>();
            Python::with_gil(|py| {
                let _pending = ExceptionGuard::save_with_gil(py);
                (py.PyBuffer_Release)(std::ptr::addr_of_mut!((*block).view));
            });
            cpu::free(NonNull::new_unchecked(block.cast()), block_capacity());
        }
    })
}
