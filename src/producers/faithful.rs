//! The rule every path goes through: dlpx never hands out data whose values differ from what the
//! producer's tensor means (docs/design.md, "Faithful import", R11).

use std::ptr::NonNull;

use pyo3_ffi::PyObject;

use super::{dlpack_method, Entry, Producer, Request};
use crate::abi::*;
use crate::cpython::{take_pending, type_name, Owned, Python};
use crate::error::{Error, Result};
use crate::tensor::Tensor;

/// What a row's read let through that the producer's own `__dlpack__` would not.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Suspicion {
    /// The object has a property the producer's `__dlpack__` checks (torch: `requires_grad`, the
    /// conjugate bit): the producer's verdict is taken.
    pub ask_producer: bool,
    /// The memory holds other values than the object means (torch's negative bit): refused, or
    /// resolved by the producer under `copy=True`.
    pub negated: bool,
}

/// A row's tensor for `object`, once the rule admits it: as it is, or the producer's own
/// answer, or its values resolved by the producer (`copy=True`), or a refusal.
#[inline(always)]
pub fn admit_tensor(
    py: Python<'_>,
    row: &dyn Producer,
    object: *mut PyObject,
    entry: Entry,
    tensor: Tensor,
    request: Request,
) -> Result<Tensor> {
    match row.suspicion(py, object, tensor.dl_tensor())? {
        None => Ok(tensor),
        Some(suspicion) => {
            drop(tensor);
            admit_suspect(py, row, object, entry, request, suspicion)
        }
    }
}

/// [`admit_tensor`] for a tensor the row suspects (the row's tensor already dropped).
#[cold]
fn admit_suspect(
    py: Python<'_>,
    row: &dyn Producer,
    object: *mut PyObject,
    entry: Entry,
    request: Request,
    suspicion: Suspicion,
) -> Result<Tensor> {
    let tensor = match suspicion.ask_producer {
        true => ask_producer_tensor(py, object)?,
        false => return resolve_negated(py, row, object, entry, request),
    };
    match suspicion.negated {
        true => resolve_negated(py, row, object, entry, request),
        false => Ok(tensor),
    }
}

/// [`admit_tensor`] for a managed tensor handed to C (the kernel API asks for no copy).
#[inline(always)]
pub fn admit_managed(
    py: Python<'_>,
    row: &dyn Producer,
    object: *mut PyObject,
    managed: NonNull<DLManagedTensorVersioned>,
) -> Result<NonNull<DLManagedTensorVersioned>> {
    // SAFETY: a live, checked managed tensor the caller owns.
    match row.suspicion(py, object, unsafe { &managed.as_ref().dl_tensor }) {
        Ok(None) => Ok(managed),
        suspicion => admit_suspect_managed(py, object, managed, suspicion),
    }
}

/// [`admit_managed`] for a tensor the row suspects (or could not judge).
#[cold]
fn admit_suspect_managed(
    py: Python<'_>,
    object: *mut PyObject,
    managed: NonNull<DLManagedTensorVersioned>,
    suspicion: Result<Option<Suspicion>>,
) -> Result<NonNull<DLManagedTensorVersioned>> {
    // SAFETY: ours, not handed out: its deleter runs once, here.
    unsafe { crate::tensor::delete_managed(managed) };
    let Some(suspicion) = suspicion? else { unreachable!("admit_managed hands on an unsuspected tensor") };
    let theirs = match suspicion.ask_producer {
        true => ask_producer(py, object)?,
        false => return Err(negated(py, object)),
    };
    if suspicion.negated {
        // SAFETY: as above.
        unsafe { crate::tensor::delete_managed(theirs) };
        return Err(negated(py, object));
    }
    Ok(theirs)
}

/// [`admit_tensor`] for a non-owning view: Ok(true) when the view may be handed on as it is;
/// Ok(false) when the object needs the producer's verdict (the owning path asks it).
#[inline]
pub fn admit_view(py: Python<'_>, row: &dyn Producer, object: *mut PyObject, dl: &DLTensor) -> Result<bool> {
    match row.suspicion(py, object, dl)? {
        None => Ok(true),
        Some(Suspicion { ask_producer: true, .. }) => Ok(false),
        Some(_) => Err(negated(py, object)),
    }
}

/// The producer's own `__dlpack__` answer for `object`, as a managed tensor: its refusal is a
/// BufferError carrying its message (first line: no C++ backtrace).
pub fn ask_producer(py: Python<'_>, object: *mut PyObject) -> Result<NonNull<DLManagedTensorVersioned>> {
    // The table's exception, if any, is replaced by the producer's own answer.
    // SAFETY: the token proves the GIL is held.
    unsafe { (py.PyErr_Clear)() };
    dlpack_method::managed_of(py, object).map_err(|err| refusal(py, object, err))
}

/// [`ask_producer`] as a [`Tensor`].
pub fn ask_producer_tensor(py: Python<'_>, object: *mut PyObject) -> Result<Tensor> {
    // SAFETY: the token proves the GIL is held.
    unsafe { (py.PyErr_Clear)() };
    dlpack_method::import(py, object, Request::PLAIN).map_err(|err| refusal(py, object, err))
}

/// A producer's refusal as dlpx's BufferError: the producer's exception, its first line.
fn refusal(py: Python<'_>, object: *mut PyObject, err: Error) -> Error {
    let err = if err.is_python_pending() { take_pending(py) } else { err };
    let text = err.message();
    let first = text.lines().next().unwrap_or_default().trim_end();
    Error::buffer(format!("{}.__dlpack__ refuses it: {first}", type_name(py, object)))
}

/// The negative bit: refused, or (`copy=True`) the producer's resolved values, a new object of
/// its own that dlpx then holds alone.
fn resolve_negated(
    py: Python<'_>,
    row: &dyn Producer,
    object: *mut PyObject,
    entry: Entry,
    request: Request,
) -> Result<Tensor> {
    if request.copy != Some(true) {
        return Err(negated(py, object));
    }
    let Some(resolved) = row.resolved(py, object)? else { return Err(negated(py, object)) };
    let resolved = Owned::new(py, resolved.as_ptr())?;
    let tensor = row.import(py, resolved.as_ptr(), entry, request)?.ok_or_else(|| negated(py, object))?;
    // `finish` copies it as `copy=True` asks: dlpx holds the result alone.
    match row.suspicion(py, resolved.as_ptr(), tensor.dl_tensor())? {
        None => Ok(tensor),
        Some(_) => Err(negated(py, object)),
    }
}

#[cold]
fn negated(py: Python<'_>, object: *mut PyObject) -> Error {
    Error::buffer(format!(
        "the {} has its negative bit set: its memory holds the negated values (pass copy=True for its \
         values, or call resolve_neg() first)",
        type_name(py, object)
    ))
}
