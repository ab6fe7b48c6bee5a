//! `dlpx.outputs_like(x)`: which framework a kernel's outputs are for, instead of the first tensor
//! argument's (docs/kernels.md, "Which argument decides"). The blocks entered are a Python
//! context variable's (each thread and asyncio task has its own), which the context manager sets
//! and a call reads once, while any block is entered anywhere.

use std::sync::atomic::{AtomicUsize, Ordering};

use once_cell::sync::OnceCell;
use pyo3_ffi::PyObject;

use crate::cpython::{Owned, Python};
use crate::error::{Error, Result};
use crate::producers::{self, Entry};

/// `get` of the `contextvars.ContextVar` holding the blocks entered (`dlpx.outputs_like`'s), a
/// reference kept for the process: a context variable, as `decimal.localcontext` keeps its
/// context, so that each asyncio task has its own and a thread starts with none.
static CHOICE_GET: OnceCell<usize> = OnceCell::new();

/// How many `outputs_like` blocks live, in any context (entered and not yet freed: a task or a
/// thread that inherited one keeps it): while none does, a call reads this and not the context
/// variable (a call into Python).
static BLOCKS_ENTERED: AtomicUsize = AtomicUsize::new(0);

/// The framework chosen for this call's context, if any.
#[inline]
pub fn chosen(py: Python<'_>) -> Result<Option<Entry>> {
    match BLOCKS_ENTERED.load(Ordering::Relaxed) {
        0 => Ok(None),
        _ => in_this_context(py),
    }
}

/// The framework of the innermost block entered in this context (None: the first tensor
/// argument's): the context variable holds `(framework, outer blocks, its entry's key)`, or None.
#[cold]
#[inline(never)]
fn in_this_context(py: Python<'_>) -> Result<Option<Entry>> {
    let Some(&get) = CHOICE_GET.get() else { return Ok(None) };
    // SAFETY: GIL held; `get` is a live bound method (kept); the result is a new reference.
    let blocks = Owned::new(py, unsafe { (py.PyObject_CallObject)(get as *mut PyObject, std::ptr::null_mut()) })?;
    if blocks.as_ptr() == py.none {
        return Ok(None);
    }
    // SAFETY: GIL held; dlpx's own tuple of three (a borrowed item, alive while `blocks` is held).
    let framework = py.check(unsafe { (py.PyTuple_GetItem)(blocks.as_ptr(), 0) })?;
    Ok(match framework == py.none {
        true => None,
        false => Some(producers::entry_of_object_or_type(py, framework)),
    })
}

/// `_outputs_like_context(get)`: the context variable's `get`, given once by `dlpx` at import.
pub fn set_context(py: Python<'_>, _module: *mut PyObject, get: *mut PyObject) -> Result<*mut PyObject> {
    CHOICE_GET.get_or_init(|| {
        // SAFETY: GIL held; the reference is kept for the process.
        unsafe { (py.Py_IncRef)(get) };
        get as usize
    });
    Ok(py.new_none())
}

/// `_outputs_like_exit()`: a block counted by [`enter`] is freed (no context holds it any more).
pub fn exit(py: Python<'_>, _module: *mut PyObject) -> Result<*mut PyObject> {
    // Never below zero: Python calls this once for each block made after an `enter` returned.
    let _ = BLOCKS_ENTERED.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1));
    Ok(py.new_none())
}

/// `_outputs_like_enter(x)`: a block choosing x's framework (x a tensor or its type; None: the
/// first tensor argument's) is entered; returns what the caller keeps in the context variable:
/// `x`, or the type that names its framework (`numpy.memmap`, `numpy.float32`: `numpy.ndarray`).
/// A TypeError for what is no framework's tensor, and then no block is counted.
pub fn enter(py: Python<'_>, _module: *mut PyObject, object: *mut PyObject) -> Result<*mut PyObject> {
    let framework = match object == py.none || producers::names_framework(py, object) {
        true => object,
        false => {
            let ty = match crate::cpython::is_type(py, object) {
                true => object,
                false => crate::cpython::type_of(py, object).cast(),
            };
            producers::framework_type_of(py, ty).ok_or_else(|| not_a_framework(py, object))?
        }
    };
    BLOCKS_ENTERED.fetch_add(1, Ordering::Relaxed);
    // SAFETY: GIL held; the new reference returned (`framework` is `object` or held by its type).
    unsafe { (py.Py_IncRef)(framework) };
    Ok(framework)
}

#[cold]
fn not_a_framework(py: Python<'_>, object: *mut PyObject) -> Error {
    // A type by its name, anything else by its type's: `memoryview`, `an instance of int`.
    let given = match crate::cpython::is_type(py, object) {
        true => crate::cpython::name_of_type(py, object),
        false => format!("an instance of {}", crate::cpython::type_name(py, object)),
    };
    Error::type_error(format!(
        "takes a tensor, or a tensor type, of a framework outputs go back to (torch, numpy, jax, cupy, tvm_ffi, \
         array_api_strict, dlpx); got {given}"
    ))
    .at("outputs_like")
}
