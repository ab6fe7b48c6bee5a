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
/// `dl_device` and `copy`, and dlpx's current stream on the device the tensor will be on (the
/// one asked for, else the object's own) when that device orders work on streams and this
/// thread set one. What every row leaves to the producer ends here.
pub fn export<'py>(py: Python<'py>, object: *mut PyObject, request: Request) -> Result<Handover<'py>> {
    // The spec: a `stream` is one of the device asked for (`dl_device`), else of the object's.
    let asked = match request.device {
        None => stream_request(py, object)?,
        Some(device) => Asked { device: Some(device), stream: dlpx_stream_on(device), named_by: "dl_device asked for" },
    };
    if !request.asks_more() && request.copy.is_none() && asked.stream.is_none() {
        let capsule = dlpack_call::call(py, object)?;
        check_ordered(py, &capsule, asked)?;
        return Ok(Handover::capsule(capsule));
    }
    // SAFETY: the token proves the GIL is held; every new reference is owned by an `Owned`.
    let result = unsafe {
        let Ok(method) = Owned::new(py, (py.PyObject_GetAttrString)(object, c"__dlpack__".as_ptr())) else {
            (py.PyErr_Clear)();
            return Err(Error::type_error(crate::producers::dlpack_call::no_dlpack(py, object)));
        };
        let empty = dlpack_call::empty_arguments(py)?;
        let mut result = ptr::null_mut();
        // Producers older than the 2023.12 array API take fewer keywords: retried with
        // max_version and the stream, then the stream alone (the spec's consumer: what a
        // producer ignores of `copy` and `dl_device`, `finish` makes; a stream it never sees
        // leaves its work unordered). A retry that would pass what was passed is skipped.
        let nothing_more = request.device.is_none() && request.copy.is_none();
        for keywords in [Keywords::All, Keywords::VersionAndStream, Keywords::Stream] {
            if keywords == Keywords::VersionAndStream && nothing_more {
                continue;
            }
            if keywords != Keywords::All {
                if !crate::cpython::pending_is(py, ErrorKind::TypeError) {
                    break;
                }
                (py.PyErr_Clear)();
            }
            let kwargs = request_kwargs(py, request, asked.stream, keywords)?;
            result = (py.PyObject_Call)(method.as_ptr(), empty, kwargs.as_ptr());
            if !result.is_null() {
                break;
            }
        }
        result
    };
    let capsule = Owned::new(py, result)?;
    check_ordered(py, &capsule, asked)?;
    if request.copy == Some(false) {
        check_not_copied(py, &capsule)?;
    }
    Ok(Handover::capsule(capsule))
}

/// Refuses a copy a producer made where `copy=False` forbade one (its flags say IS_COPIED): the
/// caller asked to share the producer's memory, and would write to a copy (R10). The capsule,
/// unconsumed, deletes its tensor.
fn check_not_copied(py: Python<'_>, capsule: &Owned<'_>) -> Result<()> {
    match capsule::device_and_flags(py, capsule.as_ptr()) {
        Some((_, flags)) if flags & DLPACK_FLAG_BITMASK_IS_COPIED != 0 => Err(Error::buffer(
            "__dlpack__(copy=False) gave a copy (its tensor is flagged IS_COPIED): copy=False shares the \
             producer's memory or fails",
        )),
        _ => Ok(()),
    }
}

/// Which of a request's keywords a call of `__dlpack__` passes.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Keywords {
    /// `max_version`, `dl_device`, `copy` and `stream`, as the request has them.
    All,
    /// `max_version`, and `stream` where there is one.
    VersionAndStream,
    /// `stream` alone, where there is one (a producer older than `max_version`).
    Stream,
}

/// The stream a producer was asked to order its work before: `stream` (None: not passed, the
/// legacy default stream) on `device` (the device asked for, or the object's by its
/// `__dlpack_device__`; None when that gave no answer), and which of the two named it.
#[derive(Clone, Copy)]
struct Asked {
    device: Option<DLDevice>,
    stream: Option<i64>,
    named_by: &'static str,
}

/// The `stream` that names dlpx's current stream on `device` to a producer: None where the device
/// keeps no streams or this thread set none (the legacy default stream, which a producer assumes
/// for None); the legacy stream's NULL is spelled 1.
fn dlpx_stream_on(device: DLDevice) -> Option<i64> {
    if !crate::stream::any_set() || !crate::devices::has_streams(device.device_type) {
        return None;
    }
    let stream = crate::stream::current(device) as usize as i64;
    Some(if stream == 0 { 1 } else { stream })
}

/// Refuses a capsule on a stream-ordered device whose work the producer was not asked to order
/// before dlpx's current stream there: its `__dlpack_device__` named another device, or none,
/// so the stream passed (or none) was not dlpx's (R9). Nothing to check while this thread set no
/// stream: the legacy default stream is dlpx's then, and what a producer assumes for none.
fn check_ordered(py: Python<'_>, capsule: &Owned<'_>, asked: Asked) -> Result<()> {
    if !crate::stream::any_set() {
        return Ok(());
    }
    // An unreadable capsule is left to the import, which says why.
    let Some((device, _)) = capsule::device_and_flags(py, capsule.as_ptr()) else { return Ok(()) };
    let wanted = dlpx_stream_on(device);
    let passed = match asked.device {
        Some(d) if d == device => asked.stream,
        _ if asked.stream.is_none() => None,
        _ => Some(-1), // a stream of another device orders nothing here
    };
    if wanted.unwrap_or(1) == passed.unwrap_or(1) {
        return Ok(());
    }
    let said = match asked.device {
        Some(d) => format!("{} {}", asked.named_by, crate::device_names::name(d)),
        None => "__dlpack_device__ named no device".to_string(),
    };
    Err(Error::buffer(format!(
        "__dlpack__ gave a tensor on {} where {said}: the producer's work on it is not ordered \
         before dlpx's current stream there",
        crate::device_names::name(device)
    )))
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
fn stream_request(py: Python<'_>, object: *mut PyObject) -> Result<Asked> {
    const UNKNOWN: Asked = Asked { device: None, stream: None, named_by: "__dlpack_device__ said" };
    if !crate::stream::any_set() {
        return Ok(UNKNOWN);
    }
    // SAFETY: the token proves the GIL is held; new references are owned; a missing or failing
    // method means "device unknown".
    let answer = unsafe {
        let Ok(method) = Owned::new(py, (py.PyObject_GetAttrString)(object, c"__dlpack_device__".as_ptr())) else {
            (py.PyErr_Clear)();
            return Ok(UNKNOWN);
        };
        let Ok(device) = Owned::new(py, (py.PyObject_CallObject)(method.as_ptr(), ptr::null_mut())) else {
            (py.PyErr_Clear)();
            return Ok(UNKNOWN);
        };
        args::int_pair(py, device.as_ptr(), "__dlpack_device__()")
    };
    match answer {
        Ok((t, id)) => match (i32::try_from(t), i32::try_from(id)) {
            (Ok(t), Ok(id)) => {
                let device = DLDevice { device_type: DeviceType(t), device_id: id };
                Ok(Asked { device: Some(device), stream: dlpx_stream_on(device), named_by: UNKNOWN.named_by })
            }
            _ => Ok(UNKNOWN),
        },
        // An answer that is not a device pair is "unknown" too; reading it may have run Python
        // code that raised (`__index__`, `__getitem__`): cleared, or the import would return
        // with an exception set.
        Err(err) => {
            if err.is_python_pending() {
                // SAFETY: the token proves the GIL is held.
                unsafe { (py.PyErr_Clear)() };
            }
            Ok(UNKNOWN)
        }
    }
}

fn request_kwargs(py: Python<'_>, request: Request, stream: Option<i64>, keywords: Keywords) -> Result<Owned<'_>> {
    // SAFETY: the token proves the GIL is held.
    let kwargs = Owned::new(py, unsafe { (py.PyDict_New)() })?;
    if keywords != Keywords::Stream {
        let version = Owned::new(py, int_tuple(py, &[DLPACK_MAJOR_VERSION as i64, DLPACK_MINOR_VERSION as i64])?)?;
        set_item(py, &kwargs, c"max_version", version.as_ptr())?;
    }
    if let (Some(d), Keywords::All) = (request.device, keywords) {
        let pair = Owned::new(py, int_tuple(py, &[d.device_type.0 as i64, d.device_id as i64])?)?;
        set_item(py, &kwargs, c"dl_device", pair.as_ptr())?;
    }
    if let (Some(c), Keywords::All) = (request.copy, keywords) {
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
