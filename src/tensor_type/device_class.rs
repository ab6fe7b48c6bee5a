//! `dlpx.Device`: the class the Python package registers, and device arguments.

use std::ptr;
use std::sync::atomic::{AtomicPtr, Ordering};

use pyo3_ffi::PyObject;

use crate::abi::*;
use crate::args;
use crate::cpython::{int_tuple, Owned, Python};
use crate::error::{Error, Result};

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

/// A device argument: `"cpu"`, `"cuda:1"`, a `(type, id)` pair (a `dlpx.Device` is one).
pub fn parse_device(py: Python<'_>, object: *mut PyObject) -> Result<DLDevice> {
    if let Ok(text) = py.str_value(object, "device") {
        return crate::device_names::parse(&text)
            .ok_or_else(|| Error::value(format!("unknown device '{text}' (expected e.g. 'cpu', 'cuda:0')")));
    }
    let (t, id) = args::int_pair(py, object, "device")?;
    match (i32::try_from(t), i32::try_from(id)) {
        (Ok(t), Ok(id)) if id >= 0 => Ok(DLDevice { device_type: DeviceType(t), device_id: id }),
        _ => Err(Error::value(format!("invalid device ({t}, {id})"))),
    }
}

/// `_set_device_class(cls)` of the module: registers the class `Tensor.device` returns.
pub fn set_device_class(py: Python<'_>, _module: *mut PyObject, class: *mut PyObject) -> Result<*mut PyObject> {
    // SAFETY: GIL held; the static keeps the new reference, the old one is released.
    unsafe { (py.Py_IncRef)(class) };
    let old = DEVICE_CLASS.swap(class, Ordering::AcqRel);
    py.decref(old);
    Ok(py.new_none())
}
