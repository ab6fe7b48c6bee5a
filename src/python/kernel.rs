//! The kernel API's Python half: what a C/C++ kernel library needs to take any framework's
//! tensors and return its outputs there (DLPack's "N0" use). The exported `dlpx_*` functions
//! and the universal table on top (`exports.rs`, `exchange.rs`) are thin shells over these.
//!
//! An object maps to its type's own exchange table (walked to major 1), or to none. Without
//! one, numpy arrays, tvm_ffi tensors and array-api-strict arrays are read directly
//! (docs/design.md, "Producers read directly") and other objects go through `__dlpack__` (a jax
//! array through the jaxlib function it ends in); outputs for them are `dlpx.Tensor`s.

use std::ffi::{c_int, c_void};
use std::ptr::{self, NonNull};

use pyo3_ffi::PyObject;

use super::{consumer, tensor_type};
use crate::abi::*;
use crate::cpython::{python, Raise};
use crate::error::{boundary, Error, Result};
use crate::tensor::{self, Tensor};

/// `managed_tensor_from_py_object_no_sync` of the universal table: imports anything that
/// speaks `__dlpack__`.
///
/// # Safety
/// The GIL is held; `object` is NULL or live; `out` is NULL or writable.
pub unsafe extern "C" fn universal_from_py(object: *mut c_void, out: *mut *mut DLManagedTensorVersioned) -> c_int {
    boundary(Raise, "managed_tensor_from_py_object_no_sync", || {
        let out = NonNull::new(out).ok_or_else(|| Error::null("out"))?;
        let managed = import_managed(object.cast())?;
        // SAFETY: non-NULL and writable by the caller's contract.
        unsafe { out.as_ptr().write(managed.as_ptr()) };
        Ok(0)
    })
}

/// The exchange table `object`'s type publishes (major 1), or None when it has none dlpx can use.
pub fn published_api(object: *mut PyObject) -> Result<Option<&'static DLPackExchangeAPI>> {
    if object.is_null() {
        return Err(Error::null("py_object"));
    }
    let py = python()?;
    super::install_gil_release();
    // SAFETY: GIL held by the caller; `object` is live.
    let ty = unsafe { (*object).ob_type };
    consumer::exchange_api_of_type(py, ty)
}

/// An owning managed tensor for any object (its table's fast path, else `__dlpack__`).
pub fn import_managed(object: *mut PyObject) -> Result<NonNull<DLManagedTensorVersioned>> {
    import_managed_through(object, published_api(object)?)
}

/// [`import_managed`] for a caller that has already looked up `object`'s table.
fn import_managed_through(
    object: *mut PyObject,
    api: Option<&'static DLPackExchangeAPI>,
) -> Result<NonNull<DLManagedTensorVersioned>> {
    let Some(api) = api else {
        let py = crate::cpython::py();
        if let Some(managed) = super::numpy_array::managed_of(py, object)? {
            return Ok(managed);
        }
        if let Some(managed) = super::tvm_ffi_tensor::managed_of(py, object)? {
            return Ok(managed);
        }
        if let Some(managed) = super::array_api_strict_array::managed_of(py, object)? {
            return Ok(managed);
        }
        // SAFETY: GIL held; `object` is live.
        if unsafe { tensor_type::tensor_of(object) }.is_some() || super::capsule::is_capsule(py, object) {
            return consumer::import(object, None, None)?.export_versioned(0);
        }
        return super::fast_capsule::managed_of(py, object);
    };
    let from_py = api
        .managed_tensor_from_py_object_no_sync
        .ok_or_else(|| Error::buffer("the producer's table has no managed_tensor_from_py_object_no_sync"))?;
    let mut out = ptr::null_mut();
    // SAFETY: the producer's contract: GIL held, an object of its type.
    if unsafe { from_py(object.cast(), &mut out) } != 0 {
        return Err(Error::python_pending());
    }
    let out = NonNull::new(out).ok_or_else(|| Error::buffer("the producer returned success and NULL"))?;
    // The C caller gets the producer's tensor itself: refuse what `from_dlpack` refuses, and
    // give NULL strides (compact row-major) an owner that spells them out.
    // SAFETY: we own `out`; a refused tensor is deleted there.
    if unsafe { tensor::check_managed_or_delete(out)? } {
        return Ok(out);
    }
    // SAFETY: checked and owned; a failure deletes it.
    unsafe { Tensor::from_managed_or_delete(out)? }.export_versioned(0)
}

/// A DLTensor view of `object` and, when the producer has no non-owning view, the managed
/// tensor that keeps it valid (the caller releases it with `dlpx_view_release`).
pub fn view(object: *mut PyObject, out: &mut DLTensor) -> Result<*mut DLManagedTensorVersioned> {
    let api = published_api(object)?;
    if api.is_none() {
        // A tvm_ffi tensor is its own non-owning view: the caller's reference keeps it valid.
        if let Some(handle) = super::tvm_ffi_tensor::handle_of(crate::cpython::py(), object)? {
            // SAFETY: the object's DLTensor; its shape and strides are `ndim` long and live in it.
            *out = unsafe { handle.dl_tensor().read() };
            // SAFETY: as above.
            if unsafe { crate::validate::check_view(out)? } {
                return Ok(ptr::null_mut());
            }
            // NULL strides: an owning import spells them out (below).
        }
    }
    if let Some(view) = api.and_then(|api| api.dltensor_from_py_object_no_sync) {
        // SAFETY: the producer's contract: GIL held, an object of its type, a writable DLTensor.
        if unsafe { view(object.cast(), out) } != 0 {
            return Err(Error::python_pending());
        }
        // SAFETY: the producer filled `out`; its shape and strides are `ndim` long.
        if unsafe { crate::validate::check_view(out)? } {
            return Ok(ptr::null_mut());
        }
        // NULL strides: an owning import spells them out (below).
    }
    let managed = import_managed_through(object, api)?;
    // SAFETY: a live managed tensor we own until the caller releases the view.
    *out = unsafe { managed.as_ref().dl_tensor };
    Ok(managed.as_ptr())
}

/// Makes `managed` a Python object of `like`'s framework (dlpx.Tensor when it has no table or
/// `like` is NULL). On failure the caller keeps ownership of `managed` (docs/design.md, "Rulings").
pub fn to_py_like(like: *mut PyObject, managed: *mut DLManagedTensorVersioned) -> Result<*mut PyObject> {
    let api = if like.is_null() { None } else { published_api(like)? };
    let Some(api) = api else {
        let mut out: *mut PyObject = ptr::null_mut();
        // SAFETY: GIL held; the caller owns `managed`, which moves only on success.
        unsafe { tensor_type::to_py(managed, &mut out)? };
        return Ok(out);
    };
    let to_py = api
        .managed_tensor_to_py_object_no_sync
        .ok_or_else(|| Error::buffer("the producer's table has no managed_tensor_to_py_object_no_sync"))?;
    let mut object = ptr::null_mut();
    // SAFETY: GIL held; the caller owns `managed`, which moves only on success.
    if unsafe { to_py(managed, &mut object) } != 0 {
        return Err(Error::python_pending());
    }
    Ok(object.cast())
}
