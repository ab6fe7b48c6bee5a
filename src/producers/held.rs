//! Managed tensors that describe a Python object's memory and hold what keeps it valid until
//! their deleter runs: a reference to the object (numpy's arrays, which dlpx reads directly
//! instead of through `__dlpack__`: docs/python.md, "What each direct read rests on"), or
//! whatever else a row's read must keep that may be moved, as a [`Hold`] (a `Py_buffer` may not:
//! `held_buffer` fills it in place). One block from the per-thread cache holds the managed tensor, its shape and strides
//! (copied, so the object may change its own afterwards) and the held value, after room for
//! the core of the `Tensor` made from it; the deleter lets
//! go of it with the GIL. No malloc, no capsule, no producer deleter.

use std::mem::{align_of, size_of};
use std::ptr::NonNull;

use pyo3_ffi::PyObject;

use crate::abi::*;
use crate::cpython::{ExceptionGuard, Python};
use crate::error::{guard, Error, Result};
use crate::layout::MAX_NDIM;
use crate::memory::cpu::{self, Capacity};
use crate::tensor::CORE_ROOM;

/// What a held managed tensor keeps until its deleter runs. `release` is called once, with the
/// GIL taken on whichever thread the deleter runs (an attached thread state, as
/// `PyBuffer_Release` needs); after the interpreter is gone it is not called and what is held is
/// left, as numpy's own deleter leaves its array. So that it can be left it is `Copy` (no drop
/// glue): letting go is `release` alone.
pub trait Hold: Copy + 'static {
    fn release(self, py: Python<'_>);
}

/// A strong reference to the object whose memory the tensor describes.
#[derive(Clone, Copy)]
pub struct Reference(NonNull<PyObject>);

impl Reference {
    /// A new reference to `object`.
    pub fn to(py: Python<'_>, object: NonNull<PyObject>) -> Reference {
        // SAFETY: the token proves the GIL is held; the caller's reference keeps `object` live.
        unsafe { (py.Py_IncRef)(object.as_ptr()) };
        Reference(object)
    }
}

impl Hold for Reference {
    fn release(self, py: Python<'_>) {
        py.decref(self.0.as_ptr());
    }
}

/// Where the held value sits in a block describing `ndim` dimensions: after the core's room
/// (`tensor::CORE_ROOM`), the struct, the shape and the strides, aligned for it.
const fn held_offset<H>(ndim: usize) -> usize {
    (CORE_ROOM + size_of::<DLManagedTensorVersioned>() + 2 * ndim * size_of::<i64>()).next_multiple_of(align_of::<H>())
}

/// Bytes of a block describing `ndim` dimensions and holding an `H`.
fn block_capacity<H>(ndim: usize) -> Capacity {
    cpu::capacity_for(held_offset::<H>(ndim) + size_of::<H>()).expect("MAX_NDIM dimensions fit a size class")
}

/// A managed tensor of `tensor` (its `shape` and `strides` are ignored: `dims` gives them,
/// `(extent, stride)` per dimension, `ndim` of them) that holds `held`, released by its deleter,
/// with the core's room in front of it (a `Handover::Made`), its reach checked
/// (`validate::check_made`). On failure `held` is released here.
///
/// # Safety
/// GIL held; `held` keeps `tensor.data` valid while it is held; `dims` yields `tensor.ndim` pairs
/// and `tensor.ndim <= MAX_NDIM`.
#[inline(always)]
pub unsafe fn managed_holding<H: Hold>(
    py: Python<'_>,
    held: H,
    tensor: DLTensor,
    dims: impl Iterator<Item = (i64, i64)>,
    readonly: bool,
) -> Result<NonNull<DLManagedTensorVersioned>> {
    // SAFETY: the caller's contract; its reach is checked below.
    let managed = unsafe { managed_holding_sound(py, held, tensor, dims, readonly) }?;
    // SAFETY: a block just filled: its shape and strides are `ndim` long.
    unsafe {
        let ndim = tensor.ndim as usize;
        let dl = &managed.as_ref().dl_tensor;
        let (shape, strides) = (slice(dl.shape, ndim), slice(dl.strides, ndim));
        if let Err(err) = crate::validate::check_made(dl, shape, strides, managed.as_ref().flags) {
            // Refused: its deleter frees the block and lets go of `held`, once.
            release::<H>(managed.as_ptr());
            return Err(err);
        }
    }
    Ok(managed)
}

/// [`managed_holding`] of a tensor that `validate::is_sound` passed with these dims (flags 0,
/// or READ_ONLY: the same bits an item), which checked its reach already: not checked again.
///
/// # Safety
/// As for [`managed_holding`], and `tensor`, its shape and strides `dims`, is sound.
#[inline(always)]
pub unsafe fn managed_holding_sound<H: Hold>(
    py: Python<'_>,
    held: H,
    tensor: DLTensor,
    dims: impl Iterator<Item = (i64, i64)>,
    readonly: bool,
) -> Result<NonNull<DLManagedTensorVersioned>> {
    let ndim = tensor.ndim as usize;
    debug_assert!(ndim <= MAX_NDIM);
    let Some(block) = cpu::alloc(block_capacity::<H>(ndim)) else {
        held.release(py);
        return Err(Error::memory("out of memory for a managed tensor"));
    };
    // SAFETY: the block holds the core's room, the struct, 2 × ndim i64s and an `H`, each
    // aligned; the caller's contract covers the held value and the data.
    unsafe {
        let managed = block.add(CORE_ROOM).cast::<DLManagedTensorVersioned>();
        let shape = managed.as_ptr().add(1).cast::<i64>();
        for (i, (extent, stride)) in dims.take(ndim).enumerate() {
            shape.add(i).write(extent);
            shape.add(ndim + i).write(stride);
        }
        let slot = block.as_ptr().add(held_offset::<H>(ndim)).cast::<H>();
        slot.write(held);
        managed.as_ptr().write(DLManagedTensorVersioned {
            version: DLPackVersion { major: DLPACK_MAJOR_VERSION, minor: DLPACK_MINOR_VERSION },
            manager_ctx: slot.cast(),
            deleter: Some(release::<H>),
            flags: if readonly { DLPACK_FLAG_BITMASK_READ_ONLY } else { 0 },
            dl_tensor: DLTensor { shape, strides: shape.add(ndim), ..tensor },
        });
        Ok(managed)
    }
}

/// `n` values at `ptr`, which a made block holds.
///
/// # Safety
/// `ptr` points to `n` values (any pointer when `n` is 0).
unsafe fn slice<'a>(ptr: *const i64, n: usize) -> &'a [i64] {
    match n {
        0 => &[],
        // SAFETY: per the contract.
        _ => unsafe { std::slice::from_raw_parts(ptr, n) },
    }
}

/// The deleter: frees the block, then lets go of the held value with the GIL (any thread may
/// release the last reference to a tensor); after the interpreter is gone, it is left.
unsafe extern "C" fn release<H: Hold>(managed: *mut DLManagedTensorVersioned) {
    guard("held object release", || {
        // SAFETY: a block `managed_holding` filled; it is freed once, here, by its only owner,
        // the held value read out of it first.
        let held = unsafe {
            let held = (*managed).manager_ctx.cast::<H>().read();
            let capacity = block_capacity::<H>((*managed).dl_tensor.ndim as usize);
            cpu::free(NonNull::new_unchecked(managed.cast::<u8>().sub(CORE_ROOM)), capacity);
            held
        };
        Python::with_gil(|py| {
            let _pending = ExceptionGuard::save_with_gil(py);
            held.release(py);
        });
    })
}
