//! The `array_api_strict` row: arrays read through the numpy array they wrap (docs/python.md,
//! "What each direct read rests on").

use pyo3_ffi::{PyObject, PyTypeObject};

use super::numpy;
use crate::abi::*;
use crate::cpython::{attribute, imported_module, interned_attribute, Interned, Owned, Python};
use crate::producers::discovered::Discovered;
use crate::producers::home::Home;
use crate::producers::{synthetic, Answer, Ask, Entry, Guard, Handover, Producer, Row};

pub static ROW: Row = Row {
    name: "array_api_strict",
    synthetic: Some(&TABLE),
    guard: Some(&GUARD),
    suspect: None,
    home: Some(&HOME),
    producer: &ArrayApiStrict,
};
struct ArrayApiStrict;
static HOME: Home = Home::new(c"array_api_strict");
static TABLE: DLPackExchangeAPI = synthetic::table(false);
static GUARD: Guard = Guard::new("array_api_strict", c"array_api_strict", &["2.6"]);

/// The oldest API version whose `__dlpack__` takes `max_version` (versions are "YYYY.MM").
const OLDEST_API_VERSION: &str = "2023.12";

/// What dlpx found in the loaded array-api-strict. The references are kept for the process.
#[derive(Clone, Copy)]
struct Found {
    array: *mut PyTypeObject,
    flags: *mut PyObject,
    cpu_device: *mut PyObject,
    /// The `API_VERSION` string last seen to be new enough (compared by identity first).
    api_version: *mut PyObject,
}

static FOUND: Discovered<Found> = Discovered::new(c"array_api_strict._array_object", &[&ARRAY, &DEVICE, &VERSION]);

impl Producer for ArrayApiStrict {
    fn claims(&self, py: Python<'_>, ty: *mut PyTypeObject, _: Option<&'static DLPackExchangeAPI>) -> bool {
        FOUND.get_or_find(py, find).is_some_and(|found| found.array == ty)
    }

    /// The wrapped numpy array, read the numpy row's way, on the CPU device while the API version
    /// is new enough; None otherwise (its own `__dlpack__` answers, or refuses).
    fn answer<'py>(&self, py: Python<'py>, object: *mut PyObject, _: Entry, _: Ask<'_>) -> Answer<'py> {
        let Some(found) = FOUND.get(py) else { return Ok(Handover::Uncovered) };
        if !on_cpu(py, object, found) || !api_new_enough(py, found) {
            return Ok(Handover::Uncovered);
        }
        let Some(array) = ARRAY.get(py).ok().and_then(|name| interned_attribute(py, object, name)) else {
            return Ok(Handover::Uncovered);
        };
        // SAFETY: a managed tensor the numpy read filled, ours, valid as made.
        Ok(numpy::managed_of(py, array.as_ptr())?
            .map_or(Handover::Uncovered, |managed| unsafe { Handover::made(managed) }))
    }
}

/// `Array`, `CPU_DEVICE` and the flags module, once array-api-strict has them.
fn find(py: Python<'_>, objects: &Owned<'_>) -> Option<Found> {
    let flags = imported_module(py, c"array_api_strict._flags")?;
    let array = attribute(py, objects.as_ptr(), c"Array")?;
    let cpu = attribute(py, objects.as_ptr(), c"CPU_DEVICE")?;
    Some(Found {
        array: array.into_ptr().cast(),
        flags: flags.into_ptr(),
        cpu_device: cpu.into_ptr(),
        api_version: std::ptr::null_mut(),
    })
}

static ARRAY: Interned = Interned::new(c"_array");
static DEVICE: Interned = Interned::new(c"_device");
static VERSION: Interned = Interned::new(c"API_VERSION");
/// Whether the array is on array-api-strict's CPU device (its other devices are make-believe
/// ones its own host conversions refuse).
fn on_cpu(py: Python<'_>, object: *mut PyObject, found: Found) -> bool {
    let Ok(name) = DEVICE.get(py) else { return false };
    interned_attribute(py, object, name).is_some_and(|device| device.as_ptr() == found.cpu_device)
}

/// Whether the `API_VERSION` flag is 2023.12 or later: the string last found new enough, or a
/// new one that is (then remembered).
fn api_new_enough(py: Python<'_>, found: Found) -> bool {
    let Some(version) = VERSION.get(py).ok().and_then(|name| interned_attribute(py, found.flags, name)) else {
        return false;
    };
    if version.as_ptr() == found.api_version {
        return true;
    }
    let Ok(text) = py.str_value(version.as_ptr(), "API_VERSION") else {
        // SAFETY: GIL held; a non-str flag is not this path's to judge.
        unsafe { (py.PyErr_Clear)() };
        return false;
    };
    if text.as_str() < OLDEST_API_VERSION {
        return false;
    }
    // The state as it is now (a lookup may run Python code, and another thread with it): read
    // and replaced in one step, so each thread releases only the reference it replaced.
    let version = version.into_ptr();
    match FOUND.update(py, |now| Found { api_version: version, ..now }) {
        // The reference the state held, now replaced (its release may run Python code).
        Some(was) => py.decref(was.api_version),
        // Nothing found to remember it in.
        None => py.decref(version),
    }
    true
}
