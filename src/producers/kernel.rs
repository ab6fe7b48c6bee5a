//! The kernel API's Python half: what a C/C++ kernel library needs to take any framework's
//! tensors and return its outputs there. Every object goes through its row of the importer seam
//! (`producers`); the exported `dlpx_*` functions on top are thin shells over these.

use std::ffi::c_void;
use std::ptr::{self, NonNull};

use pyo3_ffi::PyObject;

use crate::abi::*;
use crate::cpython::Python;
use crate::error::{Error, Result};
use crate::producers;
use crate::tensor_type::{self as tensor, own_table};

/// The table that serves `object` (or the type `object`, when it is one): its type's own, or the
/// synthetic table of its row.
pub fn table_of(py: Python<'_>, object: *mut PyObject) -> Result<&'static DLPackExchangeAPI> {
    let object = NonNull::new(object).ok_or_else(|| Error::null("py_object"))?;
    Ok(producers::table_of(py, object.as_ptr()))
}

/// The table whose allocator serves an output like `like` (dlpx's own for NULL).
pub fn allocator_table_of(py: Python<'_>, like: *mut PyObject) -> Result<&'static DLPackExchangeAPI> {
    match NonNull::new(like) {
        None => own_table().ok_or_else(tensor::not_initialised),
        Some(like) => Ok(producers::table_of(py, like.as_ptr())),
    }
}

/// An owning managed tensor for any object.
pub fn import_managed(py: Python<'_>, object: *mut PyObject) -> Result<NonNull<DLManagedTensorVersioned>> {
    let object = NonNull::new(object).ok_or_else(|| Error::null("py_object"))?;
    producers::managed(py, object.as_ptr())
}

/// A DLTensor view of `object`, the managed tensor that keeps it valid when its row has no
/// non-owning view (the caller releases it with `dlpx_view_release`), and the view's flags;
/// `read_only` when the kernel only reads it.
pub fn view(
    py: Python<'_>,
    object: *mut PyObject,
    out: &mut DLTensor,
    read_only: bool,
) -> Result<(*mut DLManagedTensorVersioned, u64)> {
    let object = NonNull::new(object).ok_or_else(|| Error::null("py_object"))?;
    producers::view(py, object.as_ptr(), out, read_only)
}

/// Makes `managed` a Python object of `like`'s framework (a dlpx.Tensor for a row without a
/// table of its own, or a NULL `like`). On failure the caller keeps ownership of `managed`
/// (docs/design.md R4).
pub fn to_py_like(
    py: Python<'_>,
    like: *mut PyObject,
    managed: *mut DLManagedTensorVersioned,
) -> Result<*mut PyObject> {
    let api = allocator_table_of(py, like)?;
    let to_py = api
        .managed_tensor_to_py_object_no_sync
        .ok_or_else(|| Error::buffer("the producer's table has no managed_tensor_to_py_object_no_sync"))?;
    let mut object: *mut c_void = ptr::null_mut();
    // SAFETY: the producer's contract: the GIL held (the token); the caller owns `managed`, which
    // moves only on success.
    if unsafe { to_py(managed, &mut object) } != 0 {
        return Err(Error::python_pending());
    }
    Ok(object.cast())
}

/// The current work stream of `like`'s framework on a device: its table's `current_work_stream`
/// (dlpx's own registry for dlpx's tables, which report to `dlpx_last_error`, not Python).
pub fn current_stream_of(py: Python<'_>, like: *mut PyObject, device: DLDevice) -> Result<*mut c_void> {
    current_stream_in(py, allocator_table_of(py, like)?, device)
}

/// The current work stream `api`'s framework reports for a device.
pub fn current_stream_in(py: Python<'_>, api: &DLPackExchangeAPI, device: DLDevice) -> Result<*mut c_void> {
    let _ = py; // the table's contract: the GIL held
    let Some(stream) = api.current_work_stream else {
        return Err(Error::buffer("the table has no current_work_stream"));
    };
    if is_dlpx_stream(api) {
        return Ok(crate::stream::current(device));
    }
    let mut out: *mut c_void = ptr::null_mut();
    // SAFETY: the producer's contract (the GIL held, a writable out).
    match unsafe { stream(device.device_type, device.device_id, &mut out) } {
        0 => Ok(out),
        _ => Err(Error::python_pending()),
    }
}

/// Whether `api`'s `current_work_stream` is dlpx's own, which needs no GIL.
pub fn is_dlpx_stream(api: &DLPackExchangeAPI) -> bool {
    type Entry = unsafe extern "C" fn(DeviceType, i32, *mut *mut c_void) -> std::ffi::c_int;
    api.current_work_stream.is_some_and(|s| std::ptr::fn_addr_eq(s, crate::stream::current_work_stream_entry as Entry))
}
