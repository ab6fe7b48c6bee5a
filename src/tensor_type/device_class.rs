//! `dlpx.Device`: the class the Python package registers, and its `parse`.

use std::ptr;
use std::sync::atomic::{AtomicPtr, Ordering};

use pyo3_ffi::PyObject;

use crate::abi::*;
use crate::args;
use crate::cpython::{int_tuple, Owned, Python};
use crate::error::Result;

/// The `dlpx.Device` class, registered by the Python package (a NamedTuple of two ints).
static DEVICE_CLASS: AtomicPtr<PyObject> = AtomicPtr::new(ptr::null_mut());

/// A `dlpx.Device` for `device` (a plain tuple before the package registered the class).
pub fn make_device(py: Python<'_>, device: DLDevice) -> Result<*mut PyObject> {
    let pair = Owned::new(py, int_tuple(py, &[device.device_type.0 as i64, device.device_id as i64])?)?;
    let class = DEVICE_CLASS.load(Ordering::Acquire);
    if class.is_null() {
        return Ok(pair.into_ptr());
    }
    // SAFETY: GIL held; the class is kept alive by the static's reference.
    py.check(unsafe { (py.PyObject_CallObject)(class, pair.as_ptr()) })
}

/// `_parse_device(device)` of the module, which the package's `Device.parse` is: the device an
/// `empty(device=...)` or `from_dlpack(device=...)` argument names, as a `dlpx.Device`. The one
/// parser is Rust's (`args::device`) and Python calls it, not the reverse: `empty` then reads
/// its argument with no call into Python, where a Python parser would cost it a call a tensor.
pub fn parse(py: Python<'_>, _module: *mut PyObject, device: *mut PyObject) -> Result<*mut PyObject> {
    make_device(py, args::device(py, device)?)
}

/// `_set_device_class(cls)` of the module: registers the class `Tensor.device` returns.
pub fn set_device_class(py: Python<'_>, _module: *mut PyObject, class: *mut PyObject) -> Result<*mut PyObject> {
    // SAFETY: GIL held; the static keeps the new reference, the old one is released.
    unsafe { (py.Py_IncRef)(class) };
    let old = DEVICE_CLASS.swap(class, Ordering::AcqRel);
    py.decref(old);
    Ok(py.new_none())
}
