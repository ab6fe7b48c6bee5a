//! The rule every reading goes through: dlpx never hands out data whose values differ from what
//! the producer's tensor means (docs/design.md, "Faithful import", R11).

use std::ptr::NonNull;

use pyo3_ffi::PyObject;

use super::{dlpack_method, Ask, Entry, Reading, Request};
use crate::abi::DLTensor;
use crate::cpython::{take_pending, type_name, Owned, Python};
use crate::error::{Error, Result};

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

/// What a row's fast path lets through that the producer's own `__dlpack__` checks: the row's
/// [`Row::suspect`](super::Row::suspect), where it has one.
pub trait Suspect: Sync {
    /// What the producer's own `__dlpack__` would refuse, or export as other values, that the
    /// row's read of `object` (described by `dl`) let through.
    fn suspicion(&self, py: Python<'_>, object: *mut PyObject, dl: &DLTensor) -> Result<Option<Suspicion>>;

    /// For [`Suspicion::negated`] under `copy=True`: a new object of the producer's holding the
    /// values the object means (torch's `resolve_neg()`).
    fn resolved(&self, py: Python<'_>, object: *mut PyObject) -> Result<Option<NonNull<PyObject>>>;
}

/// What the rule finds in a reading of `object` by a row that `suspect`s its reads: None where
/// it may be handed on as it is; otherwise the caller drops it and takes [`answer_suspect`]'s
/// answer instead.
#[inline(always)]
pub fn suspicion(
    py: Python<'_>,
    suspect: &dyn Suspect,
    object: *mut PyObject,
    reading: &Reading<'_>,
    ask: Ask<'_>,
) -> Result<Option<Suspicion>> {
    match reading.dl_tensor(ask) {
        Some(dl) => suspect.suspicion(py, object, dl),
        None => Ok(None),
    }
}

/// The answer for an object whose reading the rule suspects (the reading already dropped): the
/// producer's own answer, or its values resolved by the producer (`copy=True`), or a refusal.
#[cold]
pub fn answer_suspect<'py>(
    py: Python<'py>,
    suspect: &dyn Suspect,
    object: *mut PyObject,
    entry: Entry,
    ask: Ask<'_>,
    suspicion: Suspicion,
) -> Result<Reading<'py>> {
    let theirs = match suspicion.ask_producer {
        true => ask_producer(py, object)?,
        false => return resolve_negated(py, suspect, object, entry, ask),
    };
    match suspicion.negated {
        true => {
            drop(theirs);
            resolve_negated(py, suspect, object, entry, ask)
        }
        false => Ok(theirs),
    }
}

/// The producer's own `__dlpack__` answer for `object`: its refusal is a BufferError carrying
/// its message (first line: no C++ backtrace).
pub fn ask_producer<'py>(py: Python<'py>, object: *mut PyObject) -> Result<Reading<'py>> {
    // The table's exception, if any, is replaced by the producer's own answer.
    // SAFETY: the token proves the GIL is held.
    unsafe { (py.PyErr_Clear)() };
    dlpack_method::read(py, object, Request::PLAIN).map_err(|err| refusal(py, object, err))
}

/// A producer's refusal as dlpx's BufferError: the producer's exception, its first line.
fn refusal(py: Python<'_>, object: *mut PyObject, err: Error) -> Error {
    let err = if err.is_python_pending() { take_pending(py) } else { err };
    let text = err.message();
    let first = text.lines().next().unwrap_or_default().trim_end();
    Error::buffer(format!("{}.__dlpack__ refuses it: {first}", type_name(py, object)))
}

/// The negative bit: refused, or (`copy=True`) the producer's resolved values, a new object of
/// its own that the reading then holds alone.
fn resolve_negated<'py>(
    py: Python<'py>,
    suspect: &dyn Suspect,
    object: *mut PyObject,
    entry: Entry,
    ask: Ask<'_>,
) -> Result<Reading<'py>> {
    if ask.request.copy != Some(true) {
        return Err(negated(py, object));
    }
    let Some(resolved) = suspect.resolved(py, object)? else { return Err(negated(py, object)) };
    let resolved = Owned::new(py, resolved.as_ptr())?;
    let reading = match entry.row.producer.read(py, resolved.as_ptr(), entry, ask)? {
        Reading::Uncovered => return Err(negated(py, object)),
        reading => reading,
    };
    // `finish` copies it as `copy=True` asks: dlpx holds the result alone.
    match suspicion(py, suspect, resolved.as_ptr(), &reading, ask)? {
        None => Ok(reading),
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
