//! The kernel API: what a C/C++ kernel library needs to take any framework's tensors, allocate
//! its outputs in the caller's framework and return them there (DLPack's "N0" use).
//!
//! Every object maps to one exchange table: its type's own (walked to major 1), or dlpx's
//! universal table, which imports anything that speaks `__dlpack__` and allocates and returns
//! `dlpx.Tensor`s.

use std::ffi::{c_int, c_void};
use std::ptr::{self, NonNull};

use pyo3_ffi::PyObject;

use super::capi::{pending, python};
use super::consumer;
use crate::abi::*;
use crate::error::{boundary, Channel, Error, Result};
use crate::exchange::EXCHANGE_API;

/// The fallback table for objects whose type publishes none: imports go through
/// `__dlpack__`, outputs are dlpx's. It has no non-owning view (a view of an object without a
/// table needs an owner, see `dlpx_view`).
pub static UNIVERSAL_API: DLPackExchangeAPI = DLPackExchangeAPI {
    header: DLPackExchangeAPIHeader {
        version: DLPackVersion { major: DLPACK_MAJOR_VERSION, minor: DLPACK_MINOR_VERSION },
        prev_api: ptr::null_mut(),
    },
    managed_tensor_allocator: EXCHANGE_API.managed_tensor_allocator,
    managed_tensor_from_py_object_no_sync: Some(universal_from_py),
    managed_tensor_to_py_object_no_sync: EXCHANGE_API.managed_tensor_to_py_object_no_sync,
    dltensor_from_py_object_no_sync: None,
    current_work_stream: EXCHANGE_API.current_work_stream,
};

unsafe extern "C" fn universal_from_py(object: *mut c_void, out: *mut *mut DLManagedTensorVersioned) -> c_int {
    boundary(Channel::Python, "managed_tensor_from_py_object_no_sync", || {
        let out = NonNull::new(out).ok_or_else(|| Error::value("import", "out is NULL"))?;
        let managed = import_managed(object.cast())?;
        // SAFETY: non-NULL and writable by the caller's contract.
        unsafe { out.as_ptr().write(managed.as_ptr()) };
        Ok(0)
    })
}

/// The exchange table that serves `object`: its type's (major 1), or the universal one.
pub fn api_of(object: *mut PyObject) -> Result<&'static DLPackExchangeAPI> {
    if object.is_null() {
        return Err(Error::value("exchange_api_of", "py_object is NULL"));
    }
    let py = python()?;
    // SAFETY: GIL held by the caller; `object` is live.
    let ty = unsafe { (*object).ob_type };
    Ok(consumer::exchange_api_of_type(py, ty)?.unwrap_or(&UNIVERSAL_API))
}

/// An owning managed tensor for any object (its table's fast path, else `__dlpack__`).
pub fn import_managed(object: *mut PyObject) -> Result<NonNull<DLManagedTensorVersioned>> {
    let api = api_of(object)?;
    if !ptr::eq(api, &UNIVERSAL_API) {
        let from_py = api
            .managed_tensor_from_py_object_no_sync
            .ok_or_else(|| Error::buffer("import", "the producer's table has no managed_tensor_from_py_object_no_sync"))?;
        let mut out = ptr::null_mut();
        // SAFETY: the producer's contract: GIL held, an object of its type.
        if unsafe { from_py(object.cast(), &mut out) } != 0 {
            return Err(pending());
        }
        return NonNull::new(out).ok_or_else(|| Error::buffer("import", "the producer returned success and NULL"));
    }
    consumer::import(object, None, None)?.export_versioned(0)
}

/// A DLTensor view of `object` and, when the producer has no non-owning view, the managed
/// tensor that keeps it valid (the caller releases it with `release_view`).
pub fn view(object: *mut PyObject, out: &mut DLTensor) -> Result<*mut DLManagedTensorVersioned> {
    let api = api_of(object)?;
    if let Some(view) = api.dltensor_from_py_object_no_sync {
        // SAFETY: the producer's contract: GIL held, an object of its type, a writable DLTensor.
        if unsafe { view(object.cast(), out) } != 0 {
            return Err(pending());
        }
        return Ok(ptr::null_mut());
    }
    let managed = import_managed(object)?;
    // SAFETY: a live managed tensor we own until the caller releases the view.
    *out = unsafe { managed.as_ref().dl_tensor };
    Ok(managed.as_ptr())
}

/// Makes `managed` a Python object of `like`'s framework (dlpx.Tensor when it has no table).
/// On failure the caller keeps ownership of `managed` (ruling 4).
pub fn to_py_like(like: *mut PyObject, managed: *mut DLManagedTensorVersioned) -> Result<*mut PyObject> {
    let api = if like.is_null() { &UNIVERSAL_API } else { api_of(like)? };
    let to_py = api
        .managed_tensor_to_py_object_no_sync
        .ok_or_else(|| Error::buffer("to_py_like", "the producer's table has no managed_tensor_to_py_object_no_sync"))?;
    let mut out = ptr::null_mut();
    // SAFETY: GIL held; the caller owns `managed`, which moves only on success.
    if unsafe { to_py(managed, &mut out) } != 0 {
        return Err(pending());
    }
    Ok(out.cast())
}
