//! The universal importer: any Python object that speaks DLPack becomes a [`Tensor`].
//!
//! Order of preference: the producer type's exchange table (a C call, no capsule), then the
//! producers dlpx reads directly (numpy arrays, tvm_ffi tensors, the numpy arrays inside
//! array-api-strict's), then `__dlpack__(max_version=(1, 3), …)` (for a jax array on one
//! device, the jaxlib function it ends in: `jax_array`), then the legacy `__dlpack__()`.

use std::cell::UnsafeCell;
use std::ffi::CStr;
use std::ptr::{self, NonNull};

use pyo3_ffi::{PyObject, PyTypeObject};

use super::{capsule, tensor_type};
use crate::abi::*;
use crate::copy;
use crate::cpython::{py, Owned, Python};
use crate::error::{Error, ErrorKind, Result};
use crate::tensor::Tensor;

/// Imports `object` (a tensor of any DLPack producer, or a DLPack capsule). `device` asks for
/// the result on that device; `copy` follows the array API (True always, False never, None
/// when needed).
///
/// Its errors name the importer, `from_dlpack`, whichever entry point called it (`dlpx.Tensor(x)`,
/// the kernel API): the message says which step refused the object.
pub fn import(object: *mut PyObject, device: Option<DLDevice>, copy: Option<bool>) -> Result<Tensor> {
    let py = py();
    // SAFETY: GIL held; `object` is a live reference held by our caller.
    let tensor = match unsafe { tensor_type::exact_tensor_of(object) } {
        Some(t) => t.clone(),
        None => import_foreign(py, object, device, copy).map_err(|err| err.at("from_dlpack"))?,
    };
    finish(tensor, device, copy).map_err(|err| err.at("from_dlpack"))
}

/// Applies what the producer may not have done: a copy that `copy=True` demands, a move to
/// the requested device, and the refusals of `copy=False`.
fn finish(tensor: Tensor, device: Option<DLDevice>, copy: Option<bool>) -> Result<Tensor> {
    let here = tensor.dl_tensor().device;
    let moved = device.is_some_and(|d| d != here);
    let copied_already = tensor.flags() & DLPACK_FLAG_BITMASK_IS_COPIED != 0;
    match (moved, copy) {
        (true, Some(false)) => Err(Error::buffer(format!(
            "the tensor is on {}; moving it to {} needs a copy, and copy=False forbids it",
            crate::device::name(here),
            crate::device::name(device.unwrap())
        ))),
        (true, _) => match device {
            Some(DLDevice { device_type: DeviceType::CPU, device_id: 0 }) => copy::to_new_cpu_tensor(&tensor),
            Some(d) => Err(Error::buffer(format!("dlpx cannot move a tensor to {}", crate::device::name(d)))),
            None => unreachable!("moved implies a device"),
        },
        (false, Some(true)) if !copied_already => copy::duplicate(&tensor),
        _ => Ok(tensor),
    }
}

fn import_foreign(py: &Python, object: *mut PyObject, device: Option<DLDevice>, copy: Option<bool>) -> Result<Tensor> {
    // SAFETY: GIL held; `object` is live.
    let ty = unsafe { (*object).ob_type };
    if let Some(api) = exchange_api_of_type(py, ty)? {
        // A subclass of dlpx.Tensor inherits dlpx's table: its tensor is shared as it is. (Asked
        // only here, so other producers' types cost no walk of their MRO.)
        if tensor_type::own_table().is_some_and(|own| ptr::eq(own, api)) {
            // SAFETY: GIL held; `object` is live.
            if let Some(tensor) = unsafe { tensor_type::tensor_of(object) } {
                return Ok(tensor.clone());
            }
        }
        // SAFETY: the table came from the object's own type and stays alive for the process.
        let tensor = unsafe { import_through_table(api, object)? };
        order_after_producer(api, tensor.dl_tensor().device)?;
        return Ok(tensor);
    }
    if device.is_none() && copy != Some(true) {
        if let Some(tensor) = super::numpy_array::import(py, object)? {
            return Ok(tensor);
        }
        if let Some(tensor) = super::tvm_ffi_tensor::import(py, object)? {
            return Ok(tensor);
        }
        if let Some(tensor) = super::array_api_strict_array::import(py, object)? {
            return Ok(tensor);
        }
    }
    if capsule::is_capsule(py, object) {
        return capsule::consume(py, object);
    }
    import_through_protocol(py, object, device, copy)
}

/// The table's entry points do not synchronise: on CUDA, dlpx's current stream waits for the
/// producer's current work stream (an event), so work dlpx orders next sees the data.
fn order_after_producer(api: &DLPackExchangeAPI, device: DLDevice) -> Result<()> {
    if device.device_type != DeviceType::CUDA {
        return Ok(());
    }
    let mut producer: *mut std::ffi::c_void = ptr::null_mut();
    if let Some(current_work_stream) = api.current_work_stream {
        // SAFETY: the producer's contract (GIL held, a writable out).
        if unsafe { current_work_stream(device.device_type, device.device_id, &mut producer) } != 0 {
            return Err(Error::python_pending());
        }
    }
    crate::memory::cuda::order_after(device.device_id, producer, crate::stream::current(device))
}

/// The `stream` to pass to `__dlpack__`: dlpx's current stream when the object is on a CUDA
/// device and this thread set one; None otherwise, which means the legacy default stream —
/// dlpx's stream when none is set — so the device is only asked for when it matters.
fn stream_request(py: &Python, object: *mut PyObject) -> Result<Option<i64>> {
    if !crate::stream::any_set() {
        return Ok(None);
    }
    // SAFETY: GIL held; new references are owned; a missing or failing method means "unknown".
    unsafe {
        let method = (py.PyObject_GetAttrString)(object, c"__dlpack_device__".as_ptr());
        if method.is_null() {
            (py.PyErr_Clear)();
            return Ok(None);
        }
        let method = Owned(method);
        let device = (py.PyObject_CallObject)(method.as_ptr(), ptr::null_mut());
        if device.is_null() {
            (py.PyErr_Clear)();
            return Ok(None);
        }
        let device = Owned(device);
        match super::args::int_pair(py, device.as_ptr(), "__dlpack_device__()") {
            Ok((t, id)) if t == DeviceType::CUDA.0 as i64 => {
                let dev = DLDevice { device_type: DeviceType::CUDA, device_id: id as i32 };
                let stream = crate::stream::current(dev) as usize as i64;
                Ok(Some(if stream == 0 { 1 } else { stream }))
            }
            Ok(_) => Ok(None),
            // An answer that is not a device pair is "unknown" too; reading it may have run
            // Python code that raised (`__index__`, `__getitem__`): clear that, or the
            // import would return with an exception set.
            Err(err) => {
                if err.is_python_pending() {
                    (py.PyErr_Clear)();
                }
                Ok(None)
            }
        }
    }
}

/// # Safety
/// GIL held; `api` is the exchange table of `object`'s type.
unsafe fn import_through_table(api: &DLPackExchangeAPI, object: *mut PyObject) -> Result<Tensor> {
    let from_py = api
        .managed_tensor_from_py_object_no_sync
        .ok_or_else(|| Error::buffer("the producer's exchange table has no managed_tensor_from_py_object_no_sync"))?;
    let mut managed: *mut DLManagedTensorVersioned = ptr::null_mut();
    // SAFETY: the producer's contract: GIL held, an object of its type, a writable out.
    if unsafe { from_py(object.cast(), &mut managed) } != 0 {
        return Err(Error::python_pending());
    }
    let managed =
        NonNull::new(managed).ok_or_else(|| Error::buffer("the producer returned success and a NULL tensor"))?;
    // SAFETY: we own `managed` now; a tensor refused is deleted there.
    unsafe { Tensor::from_managed_or_delete(managed) }
}

fn import_through_protocol(
    py: &Python,
    object: *mut PyObject,
    device: Option<DLDevice>,
    copy: Option<bool>,
) -> Result<Tensor> {
    // A stream belongs to the object's own device: none when another device is asked for.
    let stream = if device.is_none() { stream_request(py, object)? } else { None };
    if device.is_none() && copy.is_none() && stream.is_none() {
        let capsule = super::jax_array::dlpack(py, object)?;
        return capsule::consume(py, capsule.as_ptr());
    }
    // SAFETY: GIL held; every new reference is owned by an `Owned`.
    unsafe {
        let method = (py.PyObject_GetAttrString)(object, c"__dlpack__".as_ptr());
        if method.is_null() {
            (py.PyErr_Clear)();
            return Err(Error::type_error(format!(
                "{} does not support DLPack (no __dlpack__ and no exchange table)",
                crate::cpython::type_name(object)
            )));
        }
        let method = Owned(method);
        let (empty, common_kwargs) = super::dlpack_call::shared_arguments(py)?;
        let kwargs = request_kwargs(py, device, copy, stream)?;
        let mut result = (py.PyObject_Call)(method.as_ptr(), empty, kwargs.as_ptr());
        // Producers older than the 2023.12 array API take fewer keywords: retry with max_version
        // alone, then with none. `finish` then makes any copy or move the producer did not.
        if result.is_null() && (py.PyErr_ExceptionMatches)(py.exception(ErrorKind::TypeError)) != 0 {
            (py.PyErr_Clear)();
            result = (py.PyObject_Call)(method.as_ptr(), empty, common_kwargs);
        }
        if result.is_null() && (py.PyErr_ExceptionMatches)(py.exception(ErrorKind::TypeError)) != 0 {
            (py.PyErr_Clear)();
            result = (py.PyObject_Call)(method.as_ptr(), empty, ptr::null_mut());
        }
        let capsule = Owned::new(result)?;
        capsule::consume(py, capsule.as_ptr())
    }
}

fn request_kwargs(py: &Python, device: Option<DLDevice>, copy: Option<bool>, stream: Option<i64>) -> Result<Owned> {
    // SAFETY: GIL held.
    let kwargs = Owned::new(unsafe { (py.PyDict_New)() })?;
    let version =
        Owned::new(crate::cpython::int_tuple(py, &[DLPACK_MAJOR_VERSION as i64, DLPACK_MINOR_VERSION as i64])?)?;
    set_item(py, &kwargs, c"max_version", version.as_ptr())?;
    if let Some(d) = device {
        let pair = Owned::new(crate::cpython::int_tuple(py, &[d.device_type.0 as i64, d.device_id as i64])?)?;
        set_item(py, &kwargs, c"dl_device", pair.as_ptr())?;
    }
    if let Some(c) = copy {
        set_item(py, &kwargs, c"copy", if c { py.true_ } else { py.false_ })?;
    }
    if let Some(handle) = stream {
        // SAFETY: GIL held.
        let handle = Owned::new(unsafe { (py.PyLong_FromLongLong)(handle) })?;
        set_item(py, &kwargs, c"stream", handle.as_ptr())?;
    }
    Ok(kwargs)
}

fn set_item(py: &Python, dict: &Owned, key: &CStr, value: *mut PyObject) -> Result<()> {
    // SAFETY: GIL held; the dict takes its own reference to `value`.
    if unsafe { (py.PyDict_SetItemString)(dict.as_ptr(), key.as_ptr(), value) } != 0 {
        return Err(Error::python_pending());
    }
    Ok(())
}

// ---- exchange tables of Python types ------------------------------------------------------

/// The head of the exchange-table chain a type publishes: the capsule
/// `__dlpack_c_exchange_api__` first, then the integer `__c_dlpack_exchange_api__`; None when
/// it publishes neither.
pub fn published_head(
    py: &Python,
    ty: *mut PyTypeObject,
) -> Result<Option<(*const DLPackExchangeAPIHeader, &'static str)>> {
    let ty = ty.cast::<PyObject>();
    // SAFETY: GIL held; new references are owned; missing attributes are cleared.
    unsafe {
        let capsule = (py.PyObject_GetAttrString)(ty, c"__dlpack_c_exchange_api__".as_ptr());
        if !capsule.is_null() {
            let capsule = Owned(capsule);
            let table = (py.PyCapsule_GetPointer)(capsule.as_ptr(), c"dlpack_exchange_api".as_ptr());
            if table.is_null() {
                (py.PyErr_Clear)();
                return Err(Error::type_error("__dlpack_c_exchange_api__ must be a PyCapsule named 'dlpack_exchange_api' holding a non-NULL table",
                ));
            }
            return Ok(Some((table.cast_const().cast(), "__dlpack_c_exchange_api__")));
        }
        (py.PyErr_Clear)();
        let address = (py.PyObject_GetAttrString)(ty, c"__c_dlpack_exchange_api__".as_ptr());
        if address.is_null() {
            (py.PyErr_Clear)();
            return Ok(None);
        }
        let address = Owned(address);
        let table = (py.PyLong_AsVoidPtr)(address.as_ptr());
        if table.is_null() {
            (py.PyErr_Clear)();
            return Err(Error::type_error("__c_dlpack_exchange_api__ must be a non-zero integer address"));
        }
        Ok(Some((table.cast_const().cast(), "__c_dlpack_exchange_api__")))
    }
}

/// Per-type cache of resolved tables (0: the type publishes none). The GIL serialises every
/// access. Each entry holds a strong reference to its type, so a cached type can never die and
/// be replaced by another at the same address; eviction (round robin) releases it. A type is
/// looked up once: attribute lookups that miss cost an AttributeError each, microseconds.
struct TableCache {
    entries: UnsafeCell<[(usize, usize); 32]>,
    next: UnsafeCell<usize>,
}

// SAFETY: only touched with the GIL held.
unsafe impl Sync for TableCache {}

static CACHE: TableCache = TableCache { entries: UnsafeCell::new([(0, 0); 32]), next: UnsafeCell::new(0) };

/// The v1 table for objects of type `ty`, or None when the type publishes none.
pub fn exchange_api_of_type(py: &Python, ty: *mut PyTypeObject) -> Result<Option<&'static DLPackExchangeAPI>> {
    if ty == tensor_type::tensor_type() {
        return Ok(tensor_type::own_table());
    }
    // SAFETY: GIL held (see TableCache); the borrow ends before any Python code runs.
    let cached = unsafe { (*CACHE.entries.get()).iter().find(|(t, _)| *t == ty as usize).map(|&(_, table)| table) };
    if let Some(table) = cached {
        // SAFETY: only validated, process-lifetime tables (or 0) are cached.
        return Ok(unsafe { (table as *const DLPackExchangeAPI).as_ref() });
    }
    // What dlpx cannot use is no table to dlpx: an attribute of the wrong form, or a chain
    // without a major-1 table (a producer that moved on to a new major). Such objects still
    // import through `__dlpack__`; `exchange_api_info` reports why the table was not used.
    // (The lookup may run Python code: no borrow of the cache lives across it.)
    let api = match published_head(py, ty) {
        // SAFETY: the producer promises a readable chain that lives for the process.
        Ok(Some((head, _))) => unsafe { crate::chain::select_supported(head) }.ok(),
        Ok(None) | Err(_) => None,
    };
    // SAFETY: GIL held; no Python code runs while these borrows live (the decref is last).
    unsafe {
        let entries = &mut *CACHE.entries.get();
        let slot = &mut *CACHE.next.get();
        let (old_type, _) = entries[*slot];
        (py.Py_IncRef)(ty.cast());
        entries[*slot] = (ty as usize, api.map_or(0, |a| a as *const _ as usize));
        *slot = (*slot + 1) % entries.len();
        if old_type != 0 {
            (py.Py_DecRef)(old_type as *mut PyObject);
        }
    }
    Ok(api)
}
