//! The one path of the producer seam: every entry point — `from_dlpack`, `dlpx.Tensor(x)`, the
//! kernel API, the synthetic tables — asks [`answer_of`] for what an object's row hands over, and
//! the object's guard and the faithful-import rule are applied there, once (docs/design.md,
//! "Producers: one seam", "Faithful import"). What the entry point makes of the handover is said
//! once too: a
//! `Tensor` (`import`), an owning managed tensor (`managed`) or a view (`view`).

use std::cell::Cell;
use std::ptr::{self, NonNull};

use pyo3_ffi::PyObject;

use super::guard::State;
use super::{entry_of, entry_of_type, faithful, Answer, Ask, Handover, Request, Suspicion};
use crate::abi::*;
use crate::copy;
use crate::cpython::{type_of, Python};
use crate::error::{Error, Result};
use crate::layout::carried_flags;
use crate::tensor::Tensor;

/// `object` (a tensor of any DLPack producer, or a DLPack capsule) as a [`Tensor`]:
/// `from_dlpack`, `dlpx.Tensor(x)`. Its errors name `from_dlpack`, whichever entry point called.
pub fn import(py: Python<'_>, object: *mut PyObject, request: Request) -> Result<Tensor> {
    let tensor = answer_of(py, object, Ask::tensor(request)).and_then(|handover| handover.into_tensor(py));
    tensor.and_then(|t| finish(t, request)).map_err(|err| err.at("from_dlpack"))
}

/// An owning managed tensor of `object` for C (`dlpx_import`, the synthetic tables).
pub fn managed(py: Python<'_>, object: *mut PyObject) -> Result<NonNull<DLManagedTensorVersioned>> {
    answer_of(py, object, Ask::MANAGED)?.into_managed(py)
}

/// A view of `object` for a kernel: `out` filled, the managed tensor that keeps it valid (NULL
/// for a non-owning view, valid while the caller holds `object`), and the view's DLPack flags
/// (`layout::carried_flags`): READ_ONLY where the tensor may not be written (docs/design.md,
/// "Read-only"). A producer's non-owning view carries no flag (it is packed); dlpx's own tables
/// give none of a read-only tensor.
/// `read_only`: the kernel only reads (the flag is then always set, and a producer with a
/// read-only export gives that one: torch's const table).
pub fn view(
    py: Python<'_>,
    object: *mut PyObject,
    out: &mut DLTensor,
    read_only: bool,
) -> Result<(*mut DLManagedTensorVersioned, u64)> {
    let asked = if read_only { DLPACK_FLAG_BITMASK_READ_ONLY } else { 0 };
    let slot = Cell::from_mut(out);
    let ask = Ask::view(slot, read_only);
    let owner = match answer_of(py, object, ask)? {
        Handover::Own(tensor) => {
            slot.set(share(tensor));
            return Ok((ptr::null_mut(), asked | carried_flags(tensor.flags(), tensor.dl_tensor().dtype)));
        }
        Handover::View if view_is_whole(slot)? => {
            name_its_device(slot);
            return Ok((ptr::null_mut(), asked));
        }
        Handover::View => answer_of(py, object, ask.managed())?.into_managed(py)?,
        handover => handover.into_managed(py)?,
    };
    // SAFETY: a live managed tensor the caller owns until it releases the view.
    let owned = unsafe { owner.as_ref() };
    slot.set(owned.dl_tensor);
    name_its_device(slot);
    Ok((owner.as_ptr(), asked | carried_flags(owned.flags, owned.dl_tensor.dtype)))
}

/// A producer's view with its device named as DLPack names it (`DLDevice::canonical`): its
/// device alone read, and written only where it differs.
#[inline(always)]
fn name_its_device(view: &Cell<DLTensor>) {
    // SAFETY: the cell's value, read and written in place (no reference to it is held).
    unsafe {
        let device = std::ptr::addr_of_mut!((*view.as_ptr()).device);
        let named = (*device).canonical();
        if *device != named {
            *device = named;
        }
    }
}

/// The view of dlpx's own tensor for a kernel, which works on dlpx's current stream: recorded as
/// a user of the memory.
#[inline(always)]
fn share(tensor: &Tensor) -> DLTensor {
    tensor.record_current_stream();
    *tensor.dl_tensor()
}

/// A non-owning view of `object` in `out`, where its row has one (its table has
/// `dltensor_from_py_object_no_sync`); Ok(false) otherwise, and for a dlpx tensor a view cannot
/// describe (read-only, padded: `Tensor::has_bare_view`).
pub fn view_in_place(py: Python<'_>, object: *mut PyObject, out: &mut DLTensor) -> Result<bool> {
    if entry_of(py, object).table.dltensor_from_py_object_no_sync.is_none() {
        return Ok(false);
    }
    let slot = Cell::from_mut(out);
    match answer_of(py, object, Ask::view(slot, false))? {
        Handover::Own(tensor) if !tensor.has_bare_view() => return Ok(false),
        Handover::Own(tensor) => slot.set(share(tensor)),
        Handover::View if view_is_whole(slot)? => {}
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
    unsafe { crate::validate::check_view(&*view.as_ptr(), 0) }
}

/// The answer for `object` that the entry point's `ask` gets: dlpx's own tensor for an exact
/// `dlpx.Tensor` (the `dlpx` row's share, answered by one comparison: the hot case), else its
/// row's, behind the row's guard, admitted by the faithful-import rule. Where the handover cannot
/// stand alone — the row does not cover the object, its guard is off or on its first use, or
/// the row suspects its read — the producer's own `__dlpack__` decides, one question each
/// (`faithful::uncovered`, `faithful::first_use`, `faithful::suspected`).
#[inline(always)]
fn answer_of<'py>(py: Python<'py>, object: *mut PyObject, ask: Ask<'_>) -> Answer<'py> {
    if let Some(tensor) = crate::tensor_type::exact_tensor_of(py, object) {
        return Ok(Handover::Own(tensor));
    }
    // Not an exact dlpx.Tensor: the type's row is the cache's answer.
    let entry = entry_of_type(py, type_of(py, object));
    let row = entry.row;
    let state = row.guard.map_or(State::Trusted, |guard| guard.state(py));
    let ours = match state {
        State::Trusted => row.producer.answer(py, object, entry, ask)?,
        State::Off => row.producer.refuse_before_dlpack(py, object).map(|()| Handover::Uncovered)?,
        // The first-use check holds an owner against the one `__dlpack__` exports.
        State::Unknown | State::Unverified => row.producer.answer(py, object, entry, Ask::MANAGED)?,
    };
    let suspicion = match (row.suspect, &ours) {
        (_, Handover::Refused) => Some(Suspicion::ASKED),
        (Some(suspect), ours) => match ours.dl_tensor(ask) {
            Some(dl) => suspect.suspicion(py, object, dl)?,
            None => None,
        },
        (None, _) => None,
    };
    let first_use = matches!(state, State::Unknown | State::Unverified);
    match (&ours, first_use, suspicion) {
        (_, true, None) => faithful::first_use(py, object, entry, ask, ours),
        (_, true, Some(_)) => faithful::first_use(py, object, entry, ask, faithful::set_aside(py, ours)),
        (_, false, Some(suspicion)) => {
            faithful::set_aside(py, ours);
            faithful::suspected(py, object, entry, ask, suspicion)
        }
        (Handover::Uncovered, false, None) => faithful::uncovered(py, object, entry, ask),
        _ => {
            if let Some(guard) = row.guard {
                guard.served(py);
            }
            Ok(ours)
        }
    }
}

/// Applies what the producer may not have done: a copy that `copy=True` demands, a move to
/// the requested device, and the refusals of `copy=False`.
#[inline]
fn finish(tensor: Tensor, request: Request) -> Result<Tensor> {
    let here = tensor.dl_tensor().device;
    let moved = request.device.filter(|&d| d != here);
    // A producer's copy made for this import serves `copy=True` where it is what dlpx's copy is:
    // compact and writable (numpy's `__dlpack__(copy=True)` of an F-ordered array copies it
    // F-ordered; a producer may flag its copy read-only).
    let copied_already = tensor.is_private_copy() && !tensor.is_readonly() && tensor.is_contiguous();
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
