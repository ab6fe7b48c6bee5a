//! What every reader of a Python object goes through: the object's row (`cache`), its guard,
//! the faithful-import rule, then what the request asks for (docs/design.md, "Producers: one
//! seam").

use std::ptr::{self, NonNull};

use pyo3_ffi::PyObject;

use super::guard::State;
use super::{dlpack_method, entry_of, faithful, Entry, Guard, Request};
use crate::abi::*;
use crate::copy;
use crate::cpython::Python;
use crate::error::{Error, Result};
use crate::tensor::Tensor;

/// Imports `object` (a tensor of any DLPack producer, or a DLPack capsule) as a [`Tensor`]:
/// `from_dlpack`, `dlpx.Tensor(x)`. Its errors name `from_dlpack`, whichever entry point called.
pub fn import(py: Python<'_>, object: *mut PyObject, request: Request) -> Result<Tensor> {
    // An exact dlpx.Tensor (the `dlpx` row's share, answered by one comparison) is the hot case.
    let read = match crate::tensor_type::exact_tensor_of(py, object) {
        Some(tensor) => Ok(tensor.clone()),
        None => read(py, object, entry_of(py, object), request),
    };
    read.and_then(|t| finish(t, request)).map_err(|err| err.at("from_dlpack"))
}

#[inline]
fn read(py: Python<'_>, object: *mut PyObject, entry: Entry, request: Request) -> Result<Tensor> {
    let row = entry.row.producer;
    if let Some(guard) = entry.row.guard {
        match guard.state(py) {
            State::Off => return dlpack_method::import(py, object, request),
            State::Unverified | State::Unknown => return first_use(py, guard, object, entry, request),
            State::Trusted => {}
        }
    }
    match row.import(py, object, entry, request)? {
        Some(tensor) => faithful::admit_tensor(py, row, object, entry, tensor, request),
        None => dlpack_method::import(py, object, request),
    }
}

/// [`read`] on a guard's first use: the first-use check's answer, admitted as every read is.
#[cold]
#[inline(never)]
fn first_use(py: Python<'_>, guard: &Guard, object: *mut PyObject, entry: Entry, request: Request) -> Result<Tensor> {
    let row = entry.row.producer;
    // SAFETY: the first-use check's managed tensor, ours; a refused one is deleted there.
    let tensor = unsafe { Tensor::from_managed_or_delete(guard.verify(py, row, object, entry)?)? };
    faithful::admit_tensor(py, row, object, entry, tensor, request)
}

/// An owning managed tensor of `object` for C (`dlpx_import`, the synthetic tables, a view's
/// owner), checked as every import is.
pub fn managed(py: Python<'_>, object: *mut PyObject) -> Result<NonNull<DLManagedTensorVersioned>> {
    managed_of_entry(py, object, entry_of(py, object))
}

fn managed_of_entry(py: Python<'_>, object: *mut PyObject, entry: Entry) -> Result<NonNull<DLManagedTensorVersioned>> {
    let row = entry.row.producer;
    if let Some(guard) = entry.row.guard {
        match guard.state(py) {
            State::Off => return dlpack_method::managed_of(py, object),
            State::Unverified | State::Unknown => {
                let managed = guard.verify(py, row, object, entry)?;
                return faithful::admit_managed(py, row, object, managed);
            }
            State::Trusted => {}
        }
    }
    match row.managed(py, object, entry)? {
        Some(managed) => faithful::admit_managed(py, row, object, managed),
        None => dlpack_method::managed_of(py, object),
    }
}

/// A view of `object` for a kernel: `out` filled, and the managed tensor that keeps it valid
/// (NULL for a non-owning view, valid while the caller holds `object`).
pub fn view(py: Python<'_>, object: *mut PyObject, out: &mut DLTensor) -> Result<*mut DLManagedTensorVersioned> {
    let entry = entry_of(py, object);
    match direct(py, object, entry)? {
        Direct::Theirs(theirs) => {
            // SAFETY: a live managed tensor the caller owns until it releases the view.
            *out = unsafe { theirs.as_ref().dl_tensor };
            return Ok(theirs.as_ptr());
        }
        Direct::Read if view_directly(py, object, entry, out)? => return Ok(ptr::null_mut()),
        Direct::Read | Direct::Dlpack => {}
    }
    let managed = managed_of_entry(py, object, entry)?;
    // SAFETY: a live managed tensor the caller owns until it releases the view.
    *out = unsafe { managed.as_ref().dl_tensor };
    Ok(managed.as_ptr())
}

/// A non-owning view of `object` in `out`, where its row has one; Ok(false) otherwise.
pub fn view_in_place(py: Python<'_>, object: *mut PyObject, out: &mut DLTensor) -> Result<bool> {
    let entry = entry_of(py, object);
    match direct(py, object, entry)? {
        Direct::Theirs(theirs) => {
            // SAFETY: ours, unused: its deleter runs once, here.
            unsafe { crate::tensor::delete_managed(theirs) };
            Ok(false)
        }
        Direct::Read => view_directly(py, object, entry, out),
        Direct::Dlpack => Ok(false),
    }
}

/// What a view may do with its row, its guard asked once.
enum Direct {
    /// Read the object directly (no guard, or a trusted one).
    Read,
    /// Go to `__dlpack__` (switched off, or the check found a difference).
    Dlpack,
    /// The first-use check did not trust the read: `__dlpack__`'s managed tensor, ours.
    Theirs(NonNull<DLManagedTensorVersioned>),
}

/// The row's guard, with its first-use check where it asks for one: the object read both ways
/// decides.
#[inline]
fn direct(py: Python<'_>, object: *mut PyObject, entry: Entry) -> Result<Direct> {
    let Some(guard) = entry.row.guard else { return Ok(Direct::Read) };
    match guard.state(py) {
        State::Trusted => Ok(Direct::Read),
        State::Off => Ok(Direct::Dlpack),
        State::Unverified | State::Unknown => {
            let theirs = guard.verify(py, entry.row.producer, object, entry)?;
            if guard.state(py) != State::Trusted {
                return Ok(Direct::Theirs(theirs));
            }
            // SAFETY: ours, unused: its deleter runs once, here.
            unsafe { crate::tensor::delete_managed(theirs) };
            Ok(Direct::Read)
        }
    }
}

/// The row's own view, where it has one and the faithful-import rule admits it.
#[inline]
fn view_directly(py: Python<'_>, object: *mut PyObject, entry: Entry, out: &mut DLTensor) -> Result<bool> {
    let row = entry.row.producer;
    Ok(row.view(py, object, entry, out)? && faithful::admit_view(py, row, object, out)?)
}

/// Applies what the producer may not have done: a copy that `copy=True` demands, a move to
/// the requested device, and the refusals of `copy=False`.
#[inline]
fn finish(tensor: Tensor, request: Request) -> Result<Tensor> {
    let here = tensor.dl_tensor().device;
    let moved = request.device.filter(|&d| d != here);
    let copied_already = tensor.flags() & DLPACK_FLAG_BITMASK_IS_COPIED != 0;
    match (moved, request.copy) {
        (Some(target), Some(false)) => Err(Error::buffer(format!(
            "the tensor is on {}; moving it to {} needs a copy, and copy=False forbids it",
            crate::device_names::name(here),
            crate::device_names::name(target)
        ))),
        (Some(DLDevice::CPU), _) => copy::to_new_cpu_tensor(&tensor),
        (Some(target), _) => {
            Err(Error::buffer(format!("dlpx cannot move a tensor to {}", crate::device_names::name(target))))
        }
        (None, Some(true)) if !copied_already => copy::duplicate(&tensor),
        _ => Ok(tensor),
    }
}
