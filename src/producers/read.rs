//! The one path of the producer seam: every entry point — `from_dlpack`, `dlpx.Tensor(x)`, the
//! kernel API, the synthetic tables — asks [`read`] for an object's reading, and the object's
//! guard and the faithful-import rule are applied there, once (docs/design.md, "Producers: one
//! seam", "Faithful import"). What the entry point makes of the reading is said once too: a
//! `Tensor` (`import`), an owning managed tensor (`managed`) or a view (`view`).

use std::cell::Cell;
use std::ptr::{self, NonNull};

use pyo3_ffi::PyObject;

use super::guard::State;
use super::{dlpack_method, entry_of, faithful, Ask, Entry, Reading, Request};
use crate::abi::*;
use crate::copy;
use crate::cpython::Python;
use crate::error::{Error, Result};
use crate::tensor::Tensor;

/// `object` (a tensor of any DLPack producer, or a DLPack capsule) as a [`Tensor`]:
/// `from_dlpack`, `dlpx.Tensor(x)`. Its errors name `from_dlpack`, whichever entry point called.
pub fn import(py: Python<'_>, object: *mut PyObject, request: Request) -> Result<Tensor> {
    // An exact dlpx.Tensor (the `dlpx` row's share, answered by one comparison) is the hot case.
    let tensor = match crate::tensor_type::exact_tensor_of(py, object) {
        Some(tensor) => Ok(tensor.clone()),
        None => {
            let entry = entry_of(py, object);
            read(py, object, entry, Ask::tensor(request)).and_then(|reading| reading.into_tensor(py, entry.table))
        }
    };
    tensor.and_then(|t| finish(t, request)).map_err(|err| err.at("from_dlpack"))
}

/// An owning managed tensor of `object` for C (`dlpx_import`, the synthetic tables).
pub fn managed(py: Python<'_>, object: *mut PyObject) -> Result<NonNull<DLManagedTensorVersioned>> {
    read(py, object, entry_of(py, object), Ask::MANAGED)?.into_managed(py)
}

/// A view of `object` for a kernel: `out` filled, and the managed tensor that keeps it valid
/// (NULL for a non-owning view, valid while the caller holds `object`).
pub fn view(py: Python<'_>, object: *mut PyObject, out: &mut DLTensor) -> Result<*mut DLManagedTensorVersioned> {
    // An exact dlpx.Tensor (the `dlpx` row's share, answered by one comparison) is the hot case.
    if let Some(tensor) = crate::tensor_type::exact_tensor_of(py, object) {
        *out = share(tensor);
        return Ok(ptr::null_mut());
    }
    let entry = entry_of(py, object);
    let slot = Cell::from_mut(out);
    let owner = match read(py, object, entry, Ask::view(slot))? {
        Reading::Own(tensor) => {
            slot.set(share(tensor));
            return Ok(ptr::null_mut());
        }
        Reading::View if view_is_whole(slot)? => return Ok(ptr::null_mut()),
        Reading::View => read(py, object, entry, Ask::MANAGED)?.into_managed(py)?,
        reading => reading.into_managed(py)?,
    };
    // SAFETY: a live managed tensor the caller owns until it releases the view.
    slot.set(unsafe { owner.as_ref().dl_tensor });
    Ok(owner.as_ptr())
}

/// The view of dlpx's own tensor for a kernel, which works on dlpx's current stream: recorded as
/// a user of the memory.
#[inline(always)]
fn share(tensor: &Tensor) -> DLTensor {
    tensor.record_current_stream();
    *tensor.dl_tensor()
}

/// A non-owning view of `object` in `out`, where its row has one (its table has
/// `dltensor_from_py_object_no_sync`); Ok(false) otherwise.
pub fn view_in_place(py: Python<'_>, object: *mut PyObject, out: &mut DLTensor) -> Result<bool> {
    let entry = entry_of(py, object);
    if entry.table.dltensor_from_py_object_no_sync.is_none() {
        return Ok(false);
    }
    let slot = Cell::from_mut(out);
    match read(py, object, entry, Ask::view(slot))? {
        Reading::Own(tensor) => slot.set(*tensor.dl_tensor()),
        Reading::View if view_is_whole(slot)? => {}
        _ => return Ok(false),
    }
    Ok(true)
}

/// Whether a view a producer filled can be handed on (checked as hostile input): Ok(false) where
/// its strides are NULL, which only an owner can spell out.
#[inline(always)]
fn view_is_whole(view: &Cell<DLTensor>) -> Result<bool> {
    // SAFETY: the producer filled the view (nothing writes the cell meanwhile); its shape and
    // strides are `ndim` long.
    unsafe { crate::validate::check_view(&*view.as_ptr()) }
}

/// The reading of `object` (of the row `entry`) that the entry point's `ask` gets: the row's,
/// behind its guard, admitted by the faithful-import rule. A row that does not cover the object,
/// or whose guard is off, leaves it to the producer's own `__dlpack__`.
#[inline(always)]
fn read<'py>(py: Python<'py>, object: *mut PyObject, entry: Entry, ask: Ask<'_>) -> Result<Reading<'py>> {
    let row = entry.row.producer;
    let reading = match entry.row.guard.map_or(State::Trusted, |guard| guard.state(py)) {
        State::Trusted => match row.read(py, object, entry, ask)? {
            Reading::Uncovered => return dlpack_method::read(py, object, ask.request),
            reading => reading,
        },
        State::Off => return dlpack_method::read(py, object, ask.request),
        State::Unknown | State::Unverified => first_use(py, object, entry)?,
    };
    let Some(suspect) = entry.row.suspect else { return Ok(reading) };
    match faithful::suspicion(py, suspect, object, &reading, ask)? {
        None => Ok(reading),
        Some(suspicion) => {
            drop(reading);
            faithful::answer_suspect(py, suspect, object, entry, ask, suspicion)
        }
    }
}

/// The reading of `object` on its guard's first use: the first-use check's answer.
#[cold]
#[inline(never)]
fn first_use<'py>(py: Python<'py>, object: *mut PyObject, entry: Entry) -> Result<Reading<'py>> {
    let guard = entry.row.guard.expect("only a guarded row has a first use");
    guard.verify(py, entry.row.producer, object, entry)
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
