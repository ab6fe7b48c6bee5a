//! The `jax` row: an array on one device exported by the jaxlib function its `__dlpack__` ends
//! in (docs/python.md, "What each direct read rests on"); the result is jax's own capsule.

use std::ptr::{self};

use pyo3_ffi::{PyObject, PyTypeObject};

use crate::abi::*;
use crate::cpython::{attribute, interned_attribute, type_of, vectorcall_method, Interned, Owned, Python};
use crate::producers::discovered::Discovered;
use crate::producers::home::Home;
use crate::producers::{synthetic, Answer, Ask, Entry, Guard, Handover, Producer, Row};

pub static ROW: Row =
    Row { name: "jax", synthetic: Some(&TABLE), guard: Some(&GUARD), suspect: None, home: Some(&HOME), producer: &Jax };
struct Jax;
static HOME: Home = Home::new(c"jax.numpy");
static TABLE: DLPackExchangeAPI = synthetic::table(false);
static GUARD: Guard = Guard::new("jax", c"jaxlib", &["0.10"]);

/// What dlpx found in the loaded `jaxlib._jax`. The references are kept for the process: the
/// extension is never unloaded.
#[derive(Clone, Copy)]
struct Found {
    module: *mut PyObject,
    array: *mut PyTypeObject,
    /// `jax.Array`, the abstract type `array` derives from (no object is of it exactly): named so
    /// that `dlpx.outputs_like(jax.Array)` finds jax (docs/kernels.md, "Which argument decides").
    abstract_array: *mut PyTypeObject,
    single_device: *mut PyTypeObject,
}

static FOUND: Discovered<Found> = Discovered::new(c"jaxlib._jax", &[&SHARDING, &SHARD, &EXPORT]);

impl Producer for Jax {
    fn claims(&self, py: Python<'_>, ty: *mut PyTypeObject, _: Option<&'static DLPackExchangeAPI>) -> bool {
        FOUND.get_or_find(py, find).is_some_and(|found| found.array == ty || found.abstract_array == ty)
    }

    fn answer<'py>(&self, py: Python<'py>, object: *mut PyObject, _: Entry, _: Ask<'_>) -> Answer<'py> {
        Ok(capsule_of(py, object).map_or(Handover::Uncovered, Handover::capsule))
    }
}

/// jax's capsule for `object` the way its `__dlpack__` makes it when no stream is asked for:
/// None where this read does not cover it (a stream set, another sharding) or either call
/// refused it (the `dlpack` row then asks `__dlpack__`, so jax's own error is the error).
fn capsule_of<'py>(py: Python<'py>, object: *mut PyObject) -> Option<Owned<'py>> {
    let found = FOUND.get(py)?;
    if crate::stream::any_set() || !on_one_device(py, object, found) {
        return None;
    }
    export(py, object, found)
}

/// `ArrayImpl`, `SingleDeviceSharding` and the module, once `jaxlib._jax` has them all, the
/// function and the fields this read uses.
fn find(py: Python<'_>, module: &Owned<'_>) -> Option<Found> {
    let array = attribute(py, module.as_ptr(), c"ArrayImpl")?;
    let single = attribute(py, module.as_ptr(), c"SingleDeviceSharding")?;
    attribute(py, module.as_ptr(), c"buffer_to_dlpack_managed_tensor")?;
    // Without the fields every array would cost failed lookups before `__dlpack__`.
    let fields =
        [c"_sharding", c"_fully_replicated_shard"].iter().all(|field| attribute(py, array.as_ptr(), field).is_some());
    if !fields || vectorcall_method().is_none() {
        return None;
    }
    let abstract_array = attribute(py, array.as_ptr(), c"__base__")?;
    // SAFETY: the token proves the GIL is held; the module's reference is kept for the process.
    unsafe { (py.Py_IncRef)(module.as_ptr()) };
    Some(Found {
        module: module.as_ptr(),
        array: array.into_ptr().cast(),
        abstract_array: abstract_array.into_ptr().cast(),
        single_device: single.into_ptr().cast(),
    })
}

static SHARDING: Interned = Interned::new(c"_sharding");
static SHARD: Interned = Interned::new(c"_fully_replicated_shard");
static EXPORT: Interned = Interned::new(c"buffer_to_dlpack_managed_tensor");
/// Whether the array's sharding is exactly a `SingleDeviceSharding`: `__dlpack__` refuses an
/// array over several devices (`self.sharding.device_set`), which jaxlib's function would
/// export one shard of.
fn on_one_device(py: Python<'_>, object: *mut PyObject, found: Found) -> bool {
    let Some(sharding) = SHARDING.get(py).ok().and_then(|name| interned_attribute(py, object, name)) else {
        return false;
    };
    type_of(py, sharding.as_ptr()) == found.single_device
}

/// `jaxlib._jax.buffer_to_dlpack_managed_tensor(object._fully_replicated_shard())`, as jax's
/// `_to_dlpack` calls it for an array on one device; None when either call fails (cleared).
fn export<'py>(py: Python<'py>, object: *mut PyObject, found: Found) -> Option<Owned<'py>> {
    let call = vectorcall_method()?;
    let (shard_name, export_name) = (SHARD.get(py).ok()?, EXPORT.get(py).ok()?);
    // SAFETY: GIL held; the module and `object` are live; `args[0]` is the receiver, as
    // `PyObject_VectorcallMethod` takes it (for the module, its attribute is called with the
    // shard); new references are owned.
    let capsule = unsafe {
        let shard = Owned::new(py, call(shard_name, [object].as_ptr(), 1, ptr::null_mut()));
        match shard {
            Ok(shard) => Owned::new(py, call(export_name, [found.module, shard.as_ptr()].as_ptr(), 2, ptr::null_mut())),
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
