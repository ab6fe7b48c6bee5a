//! jax arrays exported by the C++ function jax's own `__dlpack__` ends in.
//!
//! `jax.Array.__dlpack__` is Python (`jax/_src/array.py`, `jax/_src/dlpack.py`). Without a
//! `dl_device` or `copy` request it checks that the array's sharding spans one device, then
//! returns `jaxlib._jax.buffer_to_dlpack_managed_tensor(array.addressable_data(0),
//! stream=stream)`: jaxlib's C++ function makes the capsule. That call is about a fifth of
//! `__dlpack__`'s cost; the rest is the Python around it, which every consumer pays
//! (benches/interop.py prints both). For an array whose type is exactly `jaxlib._jax.ArrayImpl`
//! and whose sharding is exactly a `SingleDeviceSharding` (one device by construction), dlpx
//! makes the same call: the function, looked up in the module on every call as jax's own code
//! looks it up, with what `addressable_data(0)` gives such an array, its cached
//! `_fully_replicated_shard()` (not the array itself: an export of the array would outlive a
//! `delete()` of it badly, and one of an array held by another process would read a shard list
//! that is empty), and no stream: only the requests dlpx makes with none go this way.
//!
//! Nothing is trusted before an array has been exported both ways and the two capsules matched
//! (docs/design.md, "Producers read directly"); a mismatch, or an export `__dlpack__` refuses,
//! turns this path off for the process, for good. Whatever the shard lookup or the function
//! refuses (a deleted array, one held by another process) goes to `__dlpack__`, so jax's own
//! error is the error; so does everything else: a subclass, another sharding, jax without
//! `jaxlib._jax`.

use std::ptr;

use pyo3_ffi::{PyObject, PyTypeObject};

use crate::abi::DLManagedTensor;
use crate::cpython::{
    attribute, imported_module, interned, interned_attribute, vectorcall_method, GilCell, GilVar, ModuleWatch, Owned,
    Python,
};
use crate::error::Result;
use crate::validate::same_description;

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

/// `ArrayImpl`, `SingleDeviceSharding` and the module, once `jaxlib._jax` is imported and has
/// them all, the function and the fields this path reads.
#[cold]
fn resolve(py: &Python) -> Jax {
    static WATCH: ModuleWatch = ModuleWatch::new();
    let Some(module) = imported_module(py, &WATCH, c"jaxlib._jax") else { return Jax::Unknown };
    if [sharding_name(py), shard_name(py), export_name(py)].iter().any(|name| name.is_err()) {
        // SAFETY: GIL held; interning failed with an exception (no memory): not ours to keep.
        unsafe { (py.PyErr_Clear)() };
        return Jax::Unknown;
    }
    let array = attribute(py, module.as_ptr(), c"ArrayImpl");
    let single = attribute(py, module.as_ptr(), c"SingleDeviceSharding");
    let export = attribute(py, module.as_ptr(), c"buffer_to_dlpack_managed_tensor");
    // Without the fields every array would cost failed lookups before `__dlpack__`.
    let fields = array.as_ref().is_some_and(|array| {
        [c"_sharding", c"_fully_replicated_shard"].iter().all(|field| attribute(py, array.as_ptr(), field).is_some())
    });
    let found = match (array, single, export) {
        (Some(array), Some(single), Some(_)) if fields && vectorcall_method().is_some() => Jax::Found(Found {
            module: module.into_ptr(),
            array: array.into_ptr().cast(),
            single_device: single.into_ptr().cast(),
            verified: false,
        }),
        _ => Jax::Off,
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

/// `"_fully_replicated_shard"`, interned once: what jax's `addressable_data(0)` returns for an
/// array on one device (cached by the array).
fn shard_name(py: &Python) -> Result<*mut PyObject> {
    static NAME: GilCell<usize> = GilCell::new();
    interned(py, &NAME, c"_fully_replicated_shard")
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
    let Some(sharding) = sharding_name(py).ok().and_then(|name| interned_attribute(py, object, name)) else {
        return false;
    };
    // SAFETY: a live object has a type.
    unsafe { (*sharding.as_ptr()).ob_type == found.single_device }
}

/// `jaxlib._jax.buffer_to_dlpack_managed_tensor(object._fully_replicated_shard())`, as jax's
/// `_to_dlpack` calls it for an array on one device; None when either call fails (cleared).
fn export(py: &Python, object: *mut PyObject, found: Found) -> Option<Owned> {
    let call = vectorcall_method()?;
    let (shard_name, export_name) = (shard_name(py).ok()?, export_name(py).ok()?);
    // SAFETY: GIL held; the module and `object` are live; `args[0]` is the receiver, as
    // `PyObject_VectorcallMethod` takes it (for the module, its attribute is called with the
    // shard); new references are owned.
    let capsule = unsafe {
        let shard = Owned::new(call(shard_name, [object].as_ptr(), 1, ptr::null_mut()));
        match shard {
            Ok(shard) => Owned::new(call(export_name, [found.module, shard.as_ptr()].as_ptr(), 2, ptr::null_mut())),
            Err(error) => Err(error),
        }
    };
    match capsule {
        Ok(capsule) => Some(capsule),
        Err(_) => {
            // SAFETY: GIL held.
            unsafe { (py.PyErr_Clear)() };
            None
        }
    }
}

/// The first array: exported both ways, the capsules compared. Agreement turns the path on; a
/// difference, or one way refusing what the other exports, turns it off for good (another
/// thread's verdict meanwhile cannot turn it back on). Both refusing (a deleted array) decides
/// nothing. The answer is `__dlpack__`'s either way.
#[cold]
fn verify(py: &Python, object: *mut PyObject, found: Found) -> Result<Owned> {
    let ours = export(py, object, found);
    let theirs = super::dlpack_call::call(py, object);
    let verdict = match (&ours, &theirs) {
        // SAFETY: GIL held; both capsules are live.
        (Some(ours), Ok(theirs)) => Some(unsafe { same_legacy_tensor(py, ours.as_ptr(), theirs.as_ptr()) }),
        (None, Err(_)) => None,
        _ => Some(false),
    };
    if let (Some(agree), Jax::Found(now)) = (verdict, JAX.get()) {
        JAX.set(if agree { Jax::Found(Found { verified: true, ..now }) } else { Jax::Off });
    }
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
    let pointer = |capsule: *mut PyObject| {
        // SAFETY: per the contract.
        let managed = unsafe { (py.PyCapsule_GetPointer)(capsule, c"dltensor".as_ptr()) };
        if managed.is_null() {
            // SAFETY: GIL held.
            unsafe { (py.PyErr_Clear)() };
        }
        managed.cast::<DLManagedTensor>()
    };
    let (a, b) = (pointer(a), pointer(b));
    // SAFETY: non-NULL pointers of live "dltensor" capsules, whose producers keep `ndim` values.
    !a.is_null() && !b.is_null() && unsafe { same_description(&(*a).dl_tensor, &(*b).dl_tensor) }
}
