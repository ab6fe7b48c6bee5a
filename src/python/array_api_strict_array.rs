//! array-api-strict arrays read through the numpy array they wrap.
//!
//! An `array_api_strict.Array` keeps a numpy array in its `_array` slot, and its `__dlpack__`
//! (Python) forwards to that array's `__dlpack__` after two refusals: keywords such as
//! `max_version` under an API version older than 2023.12 (ValueError), and any keyword with
//! numpy older than 2.1 (NotImplementedError). On every call it parses numpy's version string,
//! ~51 000 instructions that every consumer pays (benches/interop.py). For an object whose type
//! is exactly `array_api_strict._array_object.Array`, on array-api-strict's CPU device, while
//! the API version flag is 2023.12 or later, dlpx reads the wrapped array as it reads any numpy
//! array (`numpy_array`): the export `__dlpack__` would forward to.
//!
//! The first array is read both ways and matched against its own `__dlpack__` export field by
//! field (docs/design.md, "Producers read directly"), whose answer (or error) is that import's
//! answer; a mismatch, or `__dlpack__` refusing what dlpx would read (numpy before 2.1), turns
//! the path off for the process, for good. Everything else —
//! another device, an older API version, what the numpy path does not cover — goes to
//! `__dlpack__`, whose answer or error stays the answer.

use pyo3_ffi::{PyObject, PyTypeObject};

use crate::abi::{DLManagedTensorVersioned, DLPACK_FLAG_BITMASK_READ_ONLY};
use crate::cpython::{
    attribute, imported_module, interned, interned_attribute, GilCell, GilVar, ModuleWatch, Owned, Python,
};
use crate::error::Result;
use crate::tensor::Tensor;
use crate::validate::same_description;

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
    verified: bool,
}

/// What dlpx knows of array-api-strict: nothing yet (not imported), what it found, or that
/// this path is off.
#[derive(Clone, Copy)]
enum Strict {
    Unknown,
    Found(Found),
    Off,
}

static STRICT: GilVar<Strict> = GilVar::new(Strict::Unknown);

/// The numpy array an array-api-strict array's `__dlpack__` would export, when this path
/// covers the object; None otherwise (the caller asks `__dlpack__`).
fn numpy_of(py: &Python, object: *mut PyObject) -> Option<Owned> {
    let Strict::Found(found) = state(py) else { return None };
    // SAFETY: GIL held; `object` is live.
    if unsafe { (*object).ob_type } != found.array || !on_cpu(py, object, found) || !api_new_enough(py, found) {
        return None;
    }
    interned_attribute(py, object, array_name(py).ok()?)
}

/// [`numpy_of`] imported through the numpy path, checked against `__dlpack__` on first use.
pub fn import(py: &Python, object: *mut PyObject) -> Result<Option<Tensor>> {
    let Some(array) = numpy_of(py, object) else { return Ok(None) };
    let Some(tensor) = super::numpy_array::import(py, array.as_ptr())? else { return Ok(None) };
    if verified(py) {
        return Ok(Some(tensor));
    }
    // The first array: `__dlpack__`'s answer (or error) is the answer, and the verdict.
    let theirs = super::dlpack_call::call(py, object);
    // SAFETY: GIL held; the capsule is live.
    let agree = theirs.as_ref().is_ok_and(|capsule| unsafe { same_tensor(py, capsule.as_ptr(), &tensor) });
    if let Strict::Found(now) = STRICT.get() {
        // `__dlpack__` ran Python code: another thread's verdict may have come meanwhile, and a
        // "no" stays a no.
        STRICT.set(if agree { Strict::Found(Found { verified: true, ..now }) } else { Strict::Off });
    }
    match agree {
        true => Ok(Some(tensor)),
        false => super::capsule::consume(py, theirs?.as_ptr()).map(Some),
    }
}

/// [`numpy_of`] as a managed tensor through the numpy path (kernel views, `dlpx_import`).
pub fn managed_of(py: &Python, object: *mut PyObject) -> Result<Option<std::ptr::NonNull<DLManagedTensorVersioned>>> {
    if !verified(py) {
        // The first array takes the importer's path, which checks it.
        return import(py, object)?.map(|t| t.export_versioned(0)).transpose();
    }
    let Some(array) = numpy_of(py, object) else { return Ok(None) };
    super::numpy_array::managed_of(py, array.as_ptr())
}

fn verified(py: &Python) -> bool {
    matches!(state(py), Strict::Found(Found { verified: true, .. }))
}

#[inline]
fn state(py: &Python) -> Strict {
    match STRICT.get() {
        Strict::Unknown => resolve(py),
        known => known,
    }
}

#[cold]
fn resolve(py: &Python) -> Strict {
    static OBJECTS: ModuleWatch = ModuleWatch::new();
    static FLAGS: ModuleWatch = ModuleWatch::new();
    let Some(objects) = imported_module(py, &OBJECTS, c"array_api_strict._array_object") else {
        return Strict::Unknown;
    };
    let Some(flags) = imported_module(py, &FLAGS, c"array_api_strict._flags") else { return Strict::Unknown };
    if array_name(py).is_err() || device_name(py).is_err() || version_name(py).is_err() {
        // SAFETY: GIL held; interning may have failed with an exception: not ours to keep.
        unsafe { (py.PyErr_Clear)() };
        return Strict::Unknown;
    }
    let array = attribute(py, objects.as_ptr(), c"Array");
    let cpu = attribute(py, objects.as_ptr(), c"CPU_DEVICE");
    let found = match (array, cpu) {
        (Some(array), Some(cpu)) => Strict::Found(Found {
            array: array.into_ptr().cast(),
            flags: flags.into_ptr(),
            cpu_device: cpu.into_ptr(),
            api_version: std::ptr::null_mut(),
            verified: false,
        }),
        _ => Strict::Off,
    };
    STRICT.set(found);
    found
}

fn array_name(py: &Python) -> Result<*mut PyObject> {
    static NAME: GilCell<usize> = GilCell::new();
    interned(py, &NAME, c"_array")
}

fn device_name(py: &Python) -> Result<*mut PyObject> {
    static NAME: GilCell<usize> = GilCell::new();
    interned(py, &NAME, c"_device")
}

fn version_name(py: &Python) -> Result<*mut PyObject> {
    static NAME: GilCell<usize> = GilCell::new();
    interned(py, &NAME, c"API_VERSION")
}

/// Whether the array is on array-api-strict's CPU device (its other devices are make-believe
/// ones its own host conversions refuse).
fn on_cpu(py: &Python, object: *mut PyObject, found: Found) -> bool {
    let Ok(name) = device_name(py) else { return false };
    interned_attribute(py, object, name).is_some_and(|device| device.as_ptr() == found.cpu_device)
}

/// Whether the `API_VERSION` flag is 2023.12 or later: the string last found new enough, or a
/// new one that is (then remembered).
fn api_new_enough(py: &Python, found: Found) -> bool {
    let Some(version) = version_name(py).ok().and_then(|name| interned_attribute(py, found.flags, name)) else {
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
    // The state as it is now (a lookup may run Python code, and another thread with it).
    if let Strict::Found(now) = STRICT.get() {
        STRICT.set(Strict::Found(Found { api_version: version.into_ptr(), ..now }));
        // The reference the state held, now replaced (its release may run Python code).
        py.decref(now.api_version);
    }
    true
}

/// Whether `capsule` is a versioned DLPack capsule describing `tensor`: data, offset, device,
/// dtype, shape and strides by value, and the read-only flag.
///
/// # Safety
/// GIL held; `capsule` is a live object.
unsafe fn same_tensor(py: &Python, capsule: *mut PyObject, tensor: &Tensor) -> bool {
    // SAFETY: per the contract; a capsule of another name answers NULL (cleared).
    let managed = unsafe { (py.PyCapsule_GetPointer)(capsule, c"dltensor_versioned".as_ptr()) };
    if managed.is_null() {
        // SAFETY: GIL held.
        unsafe { (py.PyErr_Clear)() };
        return false;
    }
    // SAFETY: the pointer of a live "dltensor_versioned" capsule.
    let managed = unsafe { &*managed.cast::<DLManagedTensorVersioned>() };
    // SAFETY: `tensor` passed dlpx's checks; the producer's shape and strides are `ndim` long.
    (managed.flags ^ tensor.flags()) & DLPACK_FLAG_BITMASK_READ_ONLY == 0
        && unsafe { same_description(&managed.dl_tensor, tensor.dl_tensor()) }
}
