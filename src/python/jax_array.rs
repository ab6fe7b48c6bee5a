//! jax arrays exported by the C++ function jax's own `__dlpack__` ends in.
//!
//! `jax.Array.__dlpack__` is Python (`jax/_src/array.py`, `jax/_src/dlpack.py`). Without a
//! `dl_device` or `copy` request it checks that the array's sharding spans one device, then
//! returns `jaxlib._jax.buffer_to_dlpack_managed_tensor(array.addressable_data(0),
//! stream=stream)`: jaxlib's C++ function makes the capsule. That call is about a fifth of
//! `__dlpack__`'s cost; the rest is the Python around it, which every consumer pays
//! (benches/interop.py prints both). For an array whose type is exactly `jaxlib._jax.ArrayImpl`
//! and whose sharding is exactly a `SingleDeviceSharding` (one device by construction), dlpx
//! calls the function itself, with the array (its only shard), looked up in the module on every
//! call as jax's own code looks it up, and no stream: only the requests dlpx makes with none go
//! this way.
//!
//! Nothing is trusted before the first array has been exported both ways and the two capsules
//! matched (docs/design.md, "Producers read directly"); a mismatch turns this path off for the
//! process. Whatever the function refuses (a deleted array) goes to `__dlpack__`, so jax's own
//! error is the error; so does everything else: a subclass, another sharding, jax without
//! `jaxlib._jax`.

use std::ptr;

use pyo3_ffi::{PyObject, PyTypeObject};

use crate::abi::DLManagedTensor;
use crate::cpython::{imported_module, interned, vectorcall_method, GilCell, GilVar, ModuleWatch, Owned, Python};
use crate::error::Result;
use crate::layout::MAX_NDIM;

/// What dlpx found in the loaded `jaxlib._jax`. The references are kept for the process: the
/// extension is never unloaded.
#[derive(Clone, Copy)]
struct Found {
    module: *mut PyObject,
    array: *mut PyTypeObject,
    single_device: *mut PyTypeObject,
    verified: bool,
}

/// What dlpx knows of jax: nothing yet (not imported: asked again when `sys.modules` changes,
/// as dlpx never imports jax itself), what it found, or that this path is off.
#[derive(Clone, Copy)]
enum Jax {
    Unknown,
    Found(Found),
    Off,
}

static JAX: GilVar<Jax> = GilVar::new(Jax::Unknown);

/// The capsule `object.__dlpack__(max_version=(1, 3))` returns when no stream is asked for:
/// made by jaxlib's function for a jax array on one device, by `__dlpack__` otherwise.
pub fn dlpack(py: &Python, object: *mut PyObject) -> Result<Owned> {
    if let Jax::Found(found) = state(py) {
        // SAFETY: GIL held; `object` is live.
        if unsafe { (*object).ob_type } == found.array && on_one_device(py, object, found) {
            if !found.verified {
                return verify(py, object, found);
            }
            if let Some(capsule) = export(py, object, found) {
                return Ok(capsule);
            }
        }
    }
    super::dlpack_call::call(py, object)
}

#[inline]
fn state(py: &Python) -> Jax {
    match JAX.get() {
        Jax::Unknown => resolve(py),
        known => known,
    }
}

/// `ArrayImpl`, `SingleDeviceSharding` and the module, once `jaxlib._jax` is imported, has
/// both types and the function, and the running CPython can call by vectorcall (3.9+).
#[cold]
fn resolve(py: &Python) -> Jax {
    static WATCH: ModuleWatch = ModuleWatch::new();
    let Some(module) = imported_module(py, &WATCH, c"jaxlib._jax") else { return Jax::Unknown };
    if vectorcall_method().is_none() || sharding_name(py).is_err() || export_name(py).is_err() {
        // SAFETY: GIL held; interning may have failed with an exception: not ours to keep.
        unsafe { (py.PyErr_Clear)() };
        return Jax::Unknown;
    }
    // SAFETY: GIL held; new references are owned (kept below); failed lookups are cleared.
    let found = unsafe {
        let array = Owned::new((py.PyObject_GetAttrString)(module.as_ptr(), c"ArrayImpl".as_ptr()));
        let single = Owned::new((py.PyObject_GetAttrString)(module.as_ptr(), c"SingleDeviceSharding".as_ptr()));
        let export =
            Owned::new((py.PyObject_GetAttrString)(module.as_ptr(), c"buffer_to_dlpack_managed_tensor".as_ptr()));
        // Without the field every array would cost a failed lookup before `__dlpack__`.
        let field = match &array {
            Ok(array) => Owned::new((py.PyObject_GetAttrString)(array.as_ptr(), c"_sharding".as_ptr())).is_ok(),
            Err(_) => false,
        };
        match (array, single, export) {
            (Ok(array), Ok(single), Ok(_)) if field => Jax::Found(Found {
                module: module.into_ptr(),
                array: array.into_ptr().cast(),
                single_device: single.into_ptr().cast(),
                verified: false,
            }),
            _ => {
                (py.PyErr_Clear)();
                Jax::Off
            }
        }
    };
    JAX.set(found);
    found
}

/// `"_sharding"`, interned once: the field of jaxlib's `ArrayImpl` that jax's Python `sharding`
/// property returns (a Python frame dearer).
fn sharding_name(py: &Python) -> Result<*mut PyObject> {
    static NAME: GilCell<usize> = GilCell::new();
    interned(py, &NAME, c"_sharding")
}

/// `"buffer_to_dlpack_managed_tensor"`, interned once.
fn export_name(py: &Python) -> Result<*mut PyObject> {
    static NAME: GilCell<usize> = GilCell::new();
    interned(py, &NAME, c"buffer_to_dlpack_managed_tensor")
}

/// Whether the array's sharding is exactly a `SingleDeviceSharding`: `__dlpack__` refuses an
/// array over several devices (`self.sharding.device_set`), which jaxlib's function would
/// export one shard of.
fn on_one_device(py: &Python, object: *mut PyObject, found: Found) -> bool {
    let Ok(name) = sharding_name(py) else { return false };
    // SAFETY: GIL held; the new reference is released here; a failure is cleared.
    unsafe {
        let Ok(sharding) = Owned::new((py.PyObject_GetAttr)(object, name)) else {
            (py.PyErr_Clear)();
            return false;
        };
        (*sharding.as_ptr()).ob_type == found.single_device
    }
}

/// `jaxlib._jax.buffer_to_dlpack_managed_tensor(object)`; None when it fails (cleared).
fn export(py: &Python, object: *mut PyObject, found: Found) -> Option<Owned> {
    let call = vectorcall_method()?;
    let name = export_name(py).ok()?;
    // SAFETY: GIL held; the module and `object` are live; `args[0]` is the receiver, as
    // `PyObject_VectorcallMethod` takes it: the module's attribute is called with `object`.
    unsafe {
        let args = [found.module, object];
        match Owned::new(call(name, args.as_ptr(), 2, ptr::null_mut())) {
            Ok(capsule) => Some(capsule),
            Err(_) => {
                (py.PyErr_Clear)();
                None
            }
        }
    }
}

/// The first array: exported both ways, the capsules compared. Agreement turns the path on;
/// any difference, including one failing where the other does not, turns it off. The answer is
/// `__dlpack__`'s either way.
#[cold]
fn verify(py: &Python, object: *mut PyObject, found: Found) -> Result<Owned> {
    let ours = export(py, object, found);
    let theirs = super::dlpack_call::call(py, object);
    let agree = match (&ours, &theirs) {
        // SAFETY: GIL held; both capsules are live.
        (Some(ours), Ok(theirs)) => unsafe { same_legacy_tensor(py, ours.as_ptr(), theirs.as_ptr()) },
        _ => false,
    };
    JAX.set(if agree { Jax::Found(Found { verified: true, ..found }) } else { Jax::Off });
    // `ours`, unconsumed, is freed by its capsule's destructor.
    theirs
}

/// Whether two capsules are both `"dltensor"` and describe the same tensor: data, offset,
/// device, dtype, shape and strides by value (each export has its own arrays).
///
/// # Safety
/// GIL held; both are live objects.
unsafe fn same_legacy_tensor(py: &Python, a: *mut PyObject, b: *mut PyObject) -> bool {
    // SAFETY: per the contract; a non-capsule or another name answers NULL, cleared.
    let (a, b) = unsafe {
        let a = (py.PyCapsule_GetPointer)(a, c"dltensor".as_ptr()).cast::<DLManagedTensor>();
        let b = (py.PyCapsule_GetPointer)(b, c"dltensor".as_ptr()).cast::<DLManagedTensor>();
        if a.is_null() || b.is_null() {
            (py.PyErr_Clear)();
            return false;
        }
        (&(*a).dl_tensor, &(*b).dl_tensor)
    };
    if (a.data, a.byte_offset, a.device, a.dtype, a.ndim) != (b.data, b.byte_offset, b.device, b.dtype, b.ndim)
        || !(0..=MAX_NDIM as i32).contains(&a.ndim)
    {
        return false;
    }
    let n = a.ndim as usize;
    // SAFETY: a producer's shape and strides are `ndim` long (strides may be NULL); read only
    // for an ndim within dlpx's limit.
    let values = |p: *const i64| (!p.is_null()).then(|| unsafe { std::slice::from_raw_parts(p, n) });
    n == 0 || (values(a.shape) == values(b.shape) && values(a.strides) == values(b.strides))
}
