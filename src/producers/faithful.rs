//! The rule every handover goes through: dlpx never hands out data whose values differ from what
//! the producer's tensor means (docs/design.md, "Faithful import", R11).

use std::ptr::NonNull;

use pyo3_ffi::PyObject;

use super::guard::State;
use super::rows::dlpack;
use super::{Answer, Ask, Entry, Handover, Request};
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

impl Suspicion {
    /// The producer's verdict is taken (a row's read refused what its `__dlpack__` may not).
    pub const ASKED: Suspicion = Suspicion { ask_producer: true, negated: false };
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

/// The producer's own `__dlpack__` where the row hands nothing over (it does not cover the object,
/// or its guard is off): its answer is the handover. A direct read's row serves a `device=` or
/// `copy=` request itself, after the read: so does its fallback, whatever the producer's
/// `__dlpack__` can do (tvm_ffi's cannot copy); see [`guarded_export`].
#[cold]
#[inline(never)]
pub fn uncovered<'py>(py: Python<'py>, object: *mut PyObject, entry: Entry, ask: Ask<'_>) -> Answer<'py> {
    match entry.row.guard {
        Some(_) => guarded_export(py, object, ask),
        None => dlpack::export(py, object, ask.request),
    }
}

/// What a guarded row's producer exports for `ask`: the tensor as it is, or, where that is
/// refused (a BufferError: numpy's strides of no whole item) and a copy was asked, the
/// producer's copy, which it may make where the tensor cannot cross as it is (numpy can).
fn guarded_export<'py>(py: Python<'py>, object: *mut PyObject, ask: Ask<'_>) -> Answer<'py> {
    match dlpack::export(py, object, Request::PLAIN) {
        Err(err)
            if ask.request.copy == Some(true)
                && err.is_python_pending()
                && crate::cpython::pending_is(py, crate::ErrorKind::BufferError) =>
        {
            // SAFETY: the token proves the GIL is held; the refusal makes way for the copy's answer.
            unsafe { (py.PyErr_Clear)() };
            dlpack::export(py, object, Request { device: None, copy: Some(true) })
        }
        plain => plain,
    }
}

/// A guard's first use: the row's handover (`ours`, an owner) held against the producer's own
/// `__dlpack__`, the row's where the two agree (its view, where the entry point takes one), else
/// the producer's (`Guard::judge`).
#[cold]
#[inline(never)]
pub fn first_use<'py>(
    py: Python<'py>,
    object: *mut PyObject,
    entry: Entry,
    ask: Ask<'_>,
    ours: Handover<'py>,
) -> Answer<'py> {
    let theirs = guarded_export(py, object, ask);
    let guard = entry.row.guard.expect("a first use is a guard's");
    let answer = guard.judge(py, ours, theirs)?;
    // Once the check trusts the row, a view is the row's own, for this object as for every
    // later one (the agreed owner is dropped).
    if ask.view.is_some() && guard.state(py) == State::Trusted {
        if let view @ Handover::View = entry.row.producer.answer(py, object, entry, ask)? {
            return Ok(view);
        }
    }
    Ok(answer)
}

/// A handover the row suspects is not handed on: dropped, and the table's exception, if any,
/// makes way for the producer's own answer. What is left of it: nothing (`Handover::Uncovered`).
#[cold]
#[inline(never)]
pub fn set_aside<'py>(py: Python<'py>, ours: Handover<'py>) -> Handover<'py> {
    drop(ours);
    // SAFETY: the token proves the GIL is held.
    unsafe { (py.PyErr_Clear)() };
    Handover::Uncovered
}

/// A handover the row suspects (set aside): the producer's verdict, its refusal a BufferError
/// carrying its message (less a C++ backtrace); memory holding negated values refused,
/// or under `copy=True` the values the producer resolves (`resolved`).
#[cold]
#[inline(never)]
pub fn suspected<'py>(
    py: Python<'py>,
    object: *mut PyObject,
    entry: Entry,
    ask: Ask<'_>,
    suspicion: Suspicion,
) -> Answer<'py> {
    let theirs = match suspicion.ask_producer {
        true => dlpack::export(py, object, Request::PLAIN),
        false => Ok(Handover::Uncovered),
    };
    let theirs = theirs.map_err(|err| {
        let err = if err.is_python_pending() { take_pending(py) } else { err };
        let text = err.message();
        let said = crate::error::without_cpp_backtrace(&text).trim_end();
        Error::buffer(format!("{}.__dlpack__ refuses it: {said}", type_name(py, object)))
    })?;
    if !suspicion.negated {
        return Ok(theirs);
    }
    drop(theirs);
    resolved(py, object, entry, ask)
}

/// The values a tensor whose memory holds them negated means: under `copy=True`, a new object of
/// the producer's that the handover then holds alone (`Suspect::resolved`, read by the row);
/// refused otherwise, and where the producer cannot resolve them.
fn resolved<'py>(py: Python<'py>, object: *mut PyObject, entry: Entry, ask: Ask<'_>) -> Answer<'py> {
    let negated = || {
        Error::buffer(format!(
            "the {} has its negative bit set: its memory holds the negated values (pass copy=True for \
             its values, or call resolve_neg() first)",
            type_name(py, object)
        ))
    };
    let suspect = entry.row.suspect.expect("a suspicion is a suspect's");
    let resolved = match ask.request.copy {
        Some(true) => suspect.resolved(py, object)?,
        _ => None,
    };
    let Some(resolved) = resolved else { return Err(negated()) };
    let resolved = Owned::new(py, resolved.as_ptr())?;
    let handover = entry.row.producer.answer(py, resolved.as_ptr(), entry, ask)?;
    // `finish` copies it as `copy=True` asks: dlpx holds the result alone.
    match handover.dl_tensor(ask).map(|dl| suspect.suspicion(py, resolved.as_ptr(), dl)).transpose()? {
        Some(None) => Ok(handover),
        _ => Err(negated()),
    }
}
