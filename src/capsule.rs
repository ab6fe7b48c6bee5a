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
    // SAFETY: GIL held; `capsule` is live. IsValid neither raises nor reads a wrong-typed object.
    unsafe {
        if (py.PyCapsule_IsValid)(capsule, VERSIONED.as_ptr()) != 0 {
            let managed = (py.PyCapsule_GetPointer)(capsule, VERSIONED.as_ptr()).cast::<DLManagedTensorVersioned>();
            let managed = NonNull::new(managed).ok_or_else(|| Error::buffer("capsule holds NULL"))?;
            // Only the stable prefix (version, deleter) may be read before the version check.
            if let Err(err) = crate::validate::check_major(crate::validate::major_of(managed.as_ptr())) {
                mark_used(py, capsule, USED_VERSIONED)?;
                delete_versioned(py, managed.as_ptr());
                return Err(err);
            }
            mark_used(py, capsule, USED_VERSIONED)?;
            // A tensor that fails validation goes back to the capsule, whose destructor frees it.
            return Tensor::from_managed(managed).inspect_err(|_| {
                let _ = mark_used(py, capsule, VERSIONED);
            });
        }
        if (py.PyCapsule_IsValid)(capsule, LEGACY.as_ptr()) != 0 {
            let managed = (py.PyCapsule_GetPointer)(capsule, LEGACY.as_ptr()).cast::<DLManagedTensor>();
            let managed = NonNull::new(managed).ok_or_else(|| Error::buffer("capsule holds NULL"))?;
            mark_used(py, capsule, USED_LEGACY)?;
            return Tensor::from_legacy(managed).inspect_err(|_| {
                let _ = mark_used(py, capsule, LEGACY);
            });
        }
    }
    Err(bad_capsule(py, capsule))
}

/// The versioned managed tensor in a `"dltensor_versioned"` capsule, taken out (the capsule
/// renamed) when it is one dlpx can hand on as it is: major version 1, valid, strides given.
/// None leaves the capsule as it was, for [`consume`] to import or refuse.
pub fn take_versioned(py: Python<'_>, capsule: *mut PyObject) -> Result<Option<NonNull<DLManagedTensorVersioned>>> {
    // SAFETY: GIL held; `capsule` is live; only the stable prefix is read before the version
    // check, and a major-1 tensor is read whole only after it.
    unsafe {
        if (py.PyCapsule_IsValid)(capsule, VERSIONED.as_ptr()) == 0 {
            return Ok(None);
        }
        let managed = (py.PyCapsule_GetPointer)(capsule, VERSIONED.as_ptr()).cast::<DLManagedTensorVersioned>();
        let Some(managed) = NonNull::new(managed) else { return Ok(None) };
        if crate::validate::major_of(managed.as_ptr()) != DLPACK_MAJOR_VERSION {
            return Ok(None);
        }
        let m = managed.as_ref();
        if !matches!(crate::validate::check_imported(&m.dl_tensor, m.flags), Ok(None)) {
            return Ok(None);
        }
        mark_used(py, capsule, USED_VERSIONED)?;
        Ok(Some(managed))
    }
}

/// The legacy managed tensor in a `"dltensor"` capsule, taken out (the capsule renamed) and
/// handed on in a versioned wrapper when it passes every import check and has strides
/// (`legacy::wrap`). None leaves the capsule as it was, for [`consume`] to import or refuse.
pub fn take_legacy(py: Python<'_>, capsule: *mut PyObject) -> Result<Option<NonNull<DLManagedTensorVersioned>>> {
    // SAFETY: GIL held; `capsule` is live; the tensor is the capsule's until renamed, and goes
    // back to it when it cannot be wrapped.
    unsafe {
        if (py.PyCapsule_IsValid)(capsule, LEGACY.as_ptr()) == 0 {
            return Ok(None);
        }
        let managed = (py.PyCapsule_GetPointer)(capsule, LEGACY.as_ptr()).cast::<DLManagedTensor>();
        let Some(managed) = NonNull::new(managed) else { return Ok(None) };
        mark_used(py, capsule, USED_LEGACY)?;
        let wrapped = crate::legacy::wrap(managed);
        if wrapped.is_none() {
            mark_used(py, capsule, LEGACY)?;
        }
        Ok(wrapped)
    }
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
