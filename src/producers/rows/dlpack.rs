//! The `dlpack` row: any other type with a `__dlpack__`, through it (the 2023.12 keywords, then
//! fewer).
//! The producer's own exception passes unchanged: it is the producer's refusal.

use std::ffi::CStr;
use std::ptr::{self, NonNull};

use pyo3_ffi::{PyObject, PyTypeObject};

use crate::abi::*;
use crate::args;
use crate::capsule;
use crate::cpython::{int_tuple, Owned, Python};
use crate::error::{Error, ErrorKind, Result};
use crate::producers::dlpack_call;
use crate::producers::{synthetic, Answer, Ask, Entry, Handover, Producer, Request, Row};

pub static ROW: Row =
    Row { name: "dlpack", synthetic: Some(&TABLE), guard: None, suspect: None, home: None, producer: &Dlpack };
struct Dlpack;
static TABLE: DLPackExchangeAPI = synthetic::table(false);

impl Producer for Dlpack {
    fn claims(&self, py: Python<'_>, ty: *mut PyTypeObject, _: Option<&'static DLPackExchangeAPI>) -> bool {
        crate::producers::type_has(py, ty, c"__dlpack__")
    }

    fn protocol(&self) -> Option<&'static std::ffi::CStr> {
        Some(c"__dlpack__")
    }

    fn answer<'py>(&self, py: Python<'py>, object: *mut PyObject, _: Entry, ask: Ask<'_>) -> Answer<'py> {
        export(py, object, ask.request)
    }
}

/// The capsule of `object.__dlpack__(...)`, the producer's own export: with the request's
/// `dl_device` and `copy`, and dlpx's current stream on the object's CUDA device when one is set.
/// What every row leaves to the producer ends here.
pub fn export<'py>(py: Python<'py>, object: *mut PyObject, request: Request) -> Result<Handover<'py>> {
    // A stream belongs to the object's own device: none when another device is asked for.
    let stream = if request.device.is_none() { stream_request(py, object)? } else { None };
    if !request.asks_more() && request.copy.is_none() && stream.is_none() {
        return dlpack_call::call(py, object).map(Handover::capsule);
    }
    // SAFETY: the token proves the GIL is held; every new reference is owned by an `Owned`.
    let result = unsafe {
        let Ok(method) = Owned::new(py, (py.PyObject_GetAttrString)(object, c"__dlpack__".as_ptr())) else {
            (py.PyErr_Clear)();
            return Err(Error::type_error(crate::producers::dlpack_call::no_dlpack(py, object)));
        };
        let (empty, common_kwargs) = dlpack_call::shared_arguments(py)?;
        let kwargs = request_kwargs(py, request, stream)?;
        let mut result = (py.PyObject_Call)(method.as_ptr(), empty, kwargs.as_ptr());
        // Producers older than the 2023.12 array API take fewer keywords: retry with max_version
        // alone, then with none. `finish` then makes any copy or move the producer did not.
        if result.is_null() && crate::cpython::pending_is(py, ErrorKind::TypeError) {
            (py.PyErr_Clear)();
            result = (py.PyObject_Call)(method.as_ptr(), empty, common_kwargs);
        }
        if result.is_null() && crate::cpython::pending_is(py, ErrorKind::TypeError) {
            (py.PyErr_Clear)();
            result = (py.PyObject_Call)(method.as_ptr(), empty, ptr::null_mut());
        }
        result
    };
    Owned::new(py, result).map(Handover::capsule)
}

/// The managed tensor inside a capsule a producer returned, handed on as it is where it can be
/// (a legacy one in a versioned wrapper: `legacy::wrap`), so no `Tensor` is built for it. What
/// cannot be handed on as it is (NULL strides, an unknown major, an invalid tensor) the
/// importer's way decides, and its `Tensor` is exported.
pub fn hand_on(py: Python<'_>, capsule: Owned<'_>) -> Result<NonNull<DLManagedTensorVersioned>> {
    if let Some(managed) = capsule::take_versioned(py, capsule.as_ptr())? {
        return Ok(managed);
    }
    if let Some(managed) = capsule::take_legacy(py, capsule.as_ptr())? {
        return Ok(managed);
    }
    capsule::consume(py, capsule.as_ptr())?.export_versioned(0)
}

/// The `stream` to pass to `__dlpack__`: dlpx's current stream when the object is on a CUDA
/// device and this thread set one; None otherwise, which means the legacy default stream —
/// dlpx's stream when none is set — so the device is only asked for when it matters.
fn stream_request(py: Python<'_>, object: *mut PyObject) -> Result<Option<i64>> {
    if !crate::stream::any_set() {
        return Ok(None);
    }
    // SAFETY: the token proves the GIL is held; new references are owned; a missing or failing
    // method means "device unknown".
    let answer = unsafe {
        let Ok(method) = Owned::new(py, (py.PyObject_GetAttrString)(object, c"__dlpack_device__".as_ptr())) else {
            (py.PyErr_Clear)();
            return Ok(None);
        };
        let Ok(device) = Owned::new(py, (py.PyObject_CallObject)(method.as_ptr(), ptr::null_mut())) else {
            (py.PyErr_Clear)();
            return Ok(None);
        };
        args::int_pair(py, device.as_ptr(), "__dlpack_device__()")
    };
    match answer {
        Ok((t, id)) if i32::try_from(t).is_ok_and(|t| crate::devices::has_streams(DeviceType(t))) => {
            let device = DLDevice { device_type: DeviceType(t as i32), device_id: id as i32 };
            let stream = crate::stream::current(device) as usize as i64;
            Ok(Some(if stream == 0 { 1 } else { stream }))
        }
        Ok(_) => Ok(None),
        // An answer that is not a device pair is "unknown" too; reading it may have run Python
        // code that raised (`__index__`, `__getitem__`): cleared, or the import would return
        // with an exception set.
        Err(err) => {
            if err.is_python_pending() {
                // SAFETY: the token proves the GIL is held.
                unsafe { (py.PyErr_Clear)() };
            }
            Ok(None)
        }
    }
}

fn request_kwargs(py: Python<'_>, request: Request, stream: Option<i64>) -> Result<Owned<'_>> {
    // SAFETY: the token proves the GIL is held.
    let kwargs = Owned::new(py, unsafe { (py.PyDict_New)() })?;
    let version = Owned::new(py, int_tuple(py, &[DLPACK_MAJOR_VERSION as i64, DLPACK_MINOR_VERSION as i64])?)?;
    set_item(py, &kwargs, c"max_version", version.as_ptr())?;
    if let Some(d) = request.device {
        let pair = Owned::new(py, int_tuple(py, &[d.device_type.0 as i64, d.device_id as i64])?)?;
        set_item(py, &kwargs, c"dl_device", pair.as_ptr())?;
    }
    if let Some(c) = request.copy {
        set_item(py, &kwargs, c"copy", if c { py.true_ } else { py.false_ })?;
    }
    if let Some(handle) = stream {
        // SAFETY: the token proves the GIL is held.
        let handle = Owned::new(py, unsafe { (py.PyLong_FromLongLong)(handle) })?;
        set_item(py, &kwargs, c"stream", handle.as_ptr())?;
    }
    Ok(kwargs)
}

fn set_item(py: Python<'_>, dict: &Owned<'_>, key: &CStr, value: *mut PyObject) -> Result<()> {
    // SAFETY: the token proves the GIL is held; the dict takes its own reference to `value`.
    if unsafe { (py.PyDict_SetItemString)(dict.as_ptr(), key.as_ptr(), value) } != 0 {
        return Err(Error::python_pending());
    }
    Ok(())
}
