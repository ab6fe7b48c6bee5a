//! DLPack capsules: `"dltensor_versioned"` / `"dltensor"` out, consumed ones renamed to
//! `"used_…"`, and a destructor that frees only what nobody consumed.

use std::ffi::CStr;
use std::ptr::NonNull;

use pyo3_ffi::PyObject;

use crate::abi::*;
use crate::cpython::{ExceptionGuard, Python};
use crate::error::{guard, Error, Result};
use crate::tensor::Tensor;

const VERSIONED: &CStr = c"dltensor_versioned";
const USED_VERSIONED: &CStr = c"used_dltensor_versioned";
const LEGACY: &CStr = c"dltensor";
const USED_LEGACY: &CStr = c"used_dltensor";

/// A `"dltensor_versioned"` capsule owning `managed`. On failure the tensor is deleted.
pub fn versioned(py: Python<'_>, managed: NonNull<DLManagedTensorVersioned>) -> Result<*mut PyObject> {
    // SAFETY: GIL held; the capsule takes ownership of `managed` through its destructor.
    let capsule =
        unsafe { (py.PyCapsule_New)(managed.as_ptr().cast(), VERSIONED.as_ptr(), Some(versioned_destructor)) };
    if capsule.is_null() {
        // SAFETY: nobody else owns it now.
        unsafe { delete_versioned(py, managed.as_ptr()) };
    }
    py.check(capsule)
}

/// A legacy `"dltensor"` capsule owning `managed`. On failure the tensor is deleted.
pub fn legacy(py: Python<'_>, managed: NonNull<DLManagedTensor>) -> Result<*mut PyObject> {
    // SAFETY: as in `versioned`.
    let capsule = unsafe { (py.PyCapsule_New)(managed.as_ptr().cast(), LEGACY.as_ptr(), Some(legacy_destructor)) };
    if capsule.is_null() {
        // SAFETY: nobody else owns it now.
        unsafe { delete_legacy(py, managed.as_ptr()) };
    }
    py.check(capsule)
}

unsafe extern "C" fn versioned_destructor(capsule: *mut PyObject) {
    guard("capsule destructor", || {
        // SAFETY: CPython calls a capsule's destructor with the GIL held.
        let Ok(py) = (unsafe { Python::assume_attached() }) else { return };
        // SAFETY: IsValid sets no exception on a name mismatch, so a consumed ("used_…") capsule
        // is left alone.
        unsafe {
            if (py.PyCapsule_IsValid)(capsule, VERSIONED.as_ptr()) != 0 {
                delete_versioned(py, (py.PyCapsule_GetPointer)(capsule, VERSIONED.as_ptr()).cast());
            }
        }
    })
}

unsafe extern "C" fn legacy_destructor(capsule: *mut PyObject) {
    guard("capsule destructor", || {
        // SAFETY: CPython calls a capsule's destructor with the GIL held.
        let Ok(py) = (unsafe { Python::assume_attached() }) else { return };
        // SAFETY: as in `versioned_destructor`.
        unsafe {
            if (py.PyCapsule_IsValid)(capsule, LEGACY.as_ptr()) != 0 {
                delete_legacy(py, (py.PyCapsule_GetPointer)(capsule, LEGACY.as_ptr()).cast());
            }
        }
    })
}

unsafe fn delete_versioned(py: Python<'_>, managed: *mut DLManagedTensorVersioned) {
    if managed.is_null() {
        return;
    }
    let _guard = ExceptionGuard::save_with_gil(py);
    // SAFETY: the caller owns `managed` and gives it up; the deleter sits in the prefix every
    // major version keeps; a NULL deleter means nothing to free.
    unsafe {
        if let Some(deleter) = std::ptr::addr_of!((*managed).deleter).read() {
            deleter(managed);
        }
    }
}

unsafe fn delete_legacy(py: Python<'_>, managed: *mut DLManagedTensor) {
    let _guard = ExceptionGuard::save_with_gil(py);
    // SAFETY: as above.
    unsafe {
        if let Some(deleter) = managed.as_ref().and_then(|m| m.deleter) {
            deleter(managed);
        }
    }
}

/// Takes the tensor out of a DLPack capsule, renaming it to `"used_…"` so its destructor no
/// longer frees it. A tensor of an unknown major version is deleted and refused (BufferError);
/// one that fails validation stays in the capsule, whose destructor frees it.
pub fn consume(py: Python<'_>, capsule: *mut PyObject) -> Result<Tensor> {
    if let Some(managed) = claim::<DLManagedTensorVersioned>(py, capsule, VERSIONED, USED_VERSIONED, |_| true)? {
        // Only the stable prefix (version, deleter) may be read before the version check.
        // SAFETY: the capsule's live managed tensor, now the caller's.
        if let Err(err) = crate::validate::check_major(unsafe { crate::validate::major_of(managed.as_ptr()) }) {
            // SAFETY: taken above; deleted once, here.
            unsafe { delete_versioned(py, managed.as_ptr()) };
            return Err(err);
        }
        // A tensor that fails validation goes back to the capsule, whose destructor frees it.
        // SAFETY: a major-1 managed tensor the capsule held.
        return unsafe { Tensor::from_managed(managed) }.inspect_err(|_| {
            let _ = mark_used(py, capsule, VERSIONED);
        });
    }
    if let Some(managed) = claim::<DLManagedTensor>(py, capsule, LEGACY, USED_LEGACY, |_| true)? {
        // SAFETY: the legacy managed tensor the capsule held.
        return unsafe { Tensor::from_legacy(managed) }.inspect_err(|_| {
            let _ = mark_used(py, capsule, LEGACY);
        });
    }
    Err(bad_capsule(py, capsule))
}

/// The versioned managed tensor in a `"dltensor_versioned"` capsule, taken out (the capsule
/// renamed) when it is one dlpx can hand on as it is: major version 1, valid, strides given.
/// None leaves the capsule as it was, for [`consume`] to import or refuse.
pub fn take_versioned(py: Python<'_>, capsule: *mut PyObject) -> Result<Option<NonNull<DLManagedTensorVersioned>>> {
    claim::<DLManagedTensorVersioned>(py, capsule, VERSIONED, USED_VERSIONED, |managed| {
        // SAFETY: the capsule's live managed tensor; only the stable prefix is read before the
        // version check, and a major-1 tensor is read whole only after it.
        unsafe {
            crate::validate::major_of(managed.as_ptr()) == DLPACK_MAJOR_VERSION && {
                let m = managed.as_ref();
                matches!(crate::validate::check_imported(&m.dl_tensor, m.flags), Ok(None))
            }
        }
    })
}

/// The legacy managed tensor in a `"dltensor"` capsule, taken out (the capsule renamed) and
/// handed on in a versioned wrapper when it passes every import check and has strides
/// (`legacy::wrap`). None leaves the capsule as it was, for [`consume`] to import or refuse.
pub fn take_legacy(py: Python<'_>, capsule: *mut PyObject) -> Result<Option<NonNull<DLManagedTensorVersioned>>> {
    let Some(managed) = claim::<DLManagedTensor>(py, capsule, LEGACY, USED_LEGACY, |_| true)? else {
        return Ok(None);
    };
    // SAFETY: the capsule's live legacy tensor, taken; it goes back to the capsule when it
    // cannot be wrapped.
    let wrapped = unsafe { crate::legacy::wrap(managed) };
    if wrapped.is_none() {
        mark_used(py, capsule, LEGACY)?;
    }
    Ok(wrapped)
}

/// The tensor of a capsule named `name`, taken out: the capsule renamed `used` (its destructor
/// no longer frees it) where `accept` takes the tensor. None where the capsule is not named
/// `name` (consumed already, here or by another thread; another kind) or `accept` declines,
/// the capsule left as it was. The check and the rename are one step, however many threads
/// consume the capsule at once (`with_object_locked`): one of them takes the tensor, and its
/// deleter runs once. `accept` runs no Python code.
fn claim<T>(
    py: Python<'_>,
    capsule: *mut PyObject,
    name: &CStr,
    used: &'static CStr,
    accept: impl FnOnce(NonNull<T>) -> bool,
) -> Result<Option<NonNull<T>>> {
    crate::cpython::with_object_locked(py, capsule, || {
        // SAFETY: GIL held (or the capsule locked: this thread attached); `capsule` is live.
        // IsValid neither raises nor reads a wrong-typed object, and is false for a NULL pointer.
        unsafe {
            if (py.PyCapsule_IsValid)(capsule, name.as_ptr()) == 0 {
                return Ok(None);
            }
            let Some(tensor) = NonNull::new((py.PyCapsule_GetPointer)(capsule, name.as_ptr()).cast::<T>()) else {
                return Ok(None);
            };
            if !accept(tensor) {
                return Ok(None);
            }
            mark_used(py, capsule, used)?;
            Ok(Some(tensor))
        }
    })
}

fn mark_used(py: Python<'_>, capsule: *mut PyObject, name: &'static CStr) -> Result<()> {
    // SAFETY: GIL held; the name is 'static, as CPython keeps the pointer.
    if unsafe { (py.PyCapsule_SetName)(capsule, name.as_ptr()) } != 0 {
        return Err(Error::python_pending());
    }
    Ok(())
}

#[cold]
fn bad_capsule(py: Python<'_>, object: *mut PyObject) -> Error {
    // SAFETY: GIL held; GetName raises on non-capsules, which we clear.
    let name = unsafe {
        let name = (py.PyCapsule_GetName)(object);
        if name.is_null() {
            (py.PyErr_Clear)();
            None
        } else {
            Some(CStr::from_ptr(name).to_string_lossy().into_owned())
        }
    };
    match name.as_deref() {
        Some("used_dltensor_versioned") | Some("used_dltensor") => {
            Error::buffer("the DLPack capsule was already consumed")
        }
        Some(name) => {
            Error::type_error(format!("expected a capsule named 'dltensor_versioned' or 'dltensor', got '{name}'"))
        }
        None => Error::type_error(format!("expected a DLPack capsule, got {}", crate::cpython::type_name(py, object))),
    }
}

/// The device and flags (0 for a legacy tensor, which has none) of the tensor in an unconsumed
/// capsule, read in place (nothing is taken); None for anything else, or a versioned tensor of a
/// major whose layout dlpx cannot read.
pub fn device_and_flags(py: Python<'_>, capsule: *mut PyObject) -> Option<(DLDevice, u64)> {
    // SAFETY: GIL held; `capsule` is live; IsValid sets no exception and is false for a NULL
    // pointer; a valid capsule's pointer is its producer's live tensor, of the layout its name
    // says, read whole only at a major dlpx reads.
    unsafe {
        if (py.PyCapsule_IsValid)(capsule, VERSIONED.as_ptr()) != 0 {
            let managed = (py.PyCapsule_GetPointer)(capsule, VERSIONED.as_ptr()).cast::<DLManagedTensorVersioned>();
            return (crate::validate::major_of(managed) == DLPACK_MAJOR_VERSION)
                .then(|| ((*managed).dl_tensor.device, (*managed).flags));
        }
        if (py.PyCapsule_IsValid)(capsule, LEGACY.as_ptr()) != 0 {
            let managed = (py.PyCapsule_GetPointer)(capsule, LEGACY.as_ptr()).cast::<DLManagedTensor>();
            return Some(((*managed).dl_tensor.device, 0));
        }
    }
    None
}

/// Whether `capsule` is an unconsumed legacy (`"dltensor"`) capsule: its tensor says nothing
/// of writability (dlpx imports it read-only, `validate::LEGACY_FLAGS`, by assumption).
pub fn is_legacy(py: Python<'_>, capsule: *mut PyObject) -> bool {
    // SAFETY: GIL held; `capsule` is live; IsValid sets no exception.
    unsafe { (py.PyCapsule_IsValid)(capsule, LEGACY.as_ptr()) != 0 }
}

/// Whether `object` is a capsule (of any name). An exact type check: `PyCapsule_Type` cannot be
/// subclassed, and asking a non-capsule for its name would raise (and cost) an exception.
pub fn is_capsule(py: Python<'_>, object: *mut PyObject) -> bool {
    crate::cpython::type_of(py, object).cast::<PyObject>() == py.capsule_type
}
