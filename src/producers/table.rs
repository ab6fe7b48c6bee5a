//! The `table` row: a type that publishes its own exchange table is read through it, a C call
//! and no capsule. Also how any row learns what a type publishes (R1, R8).

use std::ffi::c_void;
use std::ptr::{self, NonNull};

use pyo3_ffi::{PyObject, PyTypeObject};

use super::{Entry, Producer, Read, Request, Row};
use crate::abi::*;
use crate::cpython::{Owned, Python};
use crate::error::{Error, Result};
use crate::tensor::Tensor;

pub static ROW: Row = Row { name: "table", synthetic: None, guard: None, producer: &Table };
struct Table;

impl Producer for Table {
    fn claims(&self, _py: Python<'_>, _ty: *mut PyTypeObject, published: Option<&'static DLPackExchangeAPI>) -> bool {
        published.is_some()
    }

    fn managed(&self, py: Python<'_>, object: *mut PyObject, entry: Entry) -> Read {
        managed_through(py, object, entry.table).map(Some)
    }

    fn import(&self, py: Python<'_>, object: *mut PyObject, entry: Entry, _: Request) -> Result<Option<Tensor>> {
        import_through(py, object, entry.table).map(Some)
    }

    fn view(&self, py: Python<'_>, object: *mut PyObject, entry: Entry, out: &mut DLTensor) -> Result<bool> {
        view_through(py, object, entry.table, out)
    }
}

/// The table's `managed_tensor_from_py_object_no_sync`, checked as every import is: a tensor
/// it refuses is deleted once, there; NULL strides are spelled out by an owner of dlpx's.
pub fn managed_through(
    py: Python<'_>,
    object: *mut PyObject,
    api: &'static DLPackExchangeAPI,
) -> Result<NonNull<DLManagedTensorVersioned>> {
    let managed = call_from_py(py, object, api)?;
    // SAFETY: we own `managed`; a refused tensor is deleted there.
    if unsafe { crate::tensor::check_managed_or_delete(managed)? } {
        return Ok(managed);
    }
    // SAFETY: checked and owned; a failure deletes it.
    unsafe { Tensor::from_managed_or_delete(managed)? }.export_versioned(0)
}

/// The table's tensor as a [`Tensor`]; on CUDA, dlpx's current stream is then ordered after the
/// producer's current work stream (the table's entries do not synchronise).
#[inline]
pub fn import_through(py: Python<'_>, object: *mut PyObject, api: &'static DLPackExchangeAPI) -> Result<Tensor> {
    let managed = call_from_py(py, object, api)?;
    // SAFETY: we own `managed`; a refused tensor is deleted there.
    let tensor = unsafe { Tensor::from_managed_or_delete(managed)? };
    order_after_producer(api, tensor.dl_tensor().device)?;
    Ok(tensor)
}

#[inline]
fn call_from_py(
    _py: Python<'_>,
    object: *mut PyObject,
    api: &'static DLPackExchangeAPI,
) -> Result<NonNull<DLManagedTensorVersioned>> {
    let from_py = api
        .managed_tensor_from_py_object_no_sync
        .ok_or_else(|| Error::buffer("the producer's exchange table has no managed_tensor_from_py_object_no_sync"))?;
    let mut managed: *mut DLManagedTensorVersioned = ptr::null_mut();
    // SAFETY: the producer's contract: the GIL held (the token), an object of its type, a
    // writable out.
    if unsafe { from_py(object.cast(), &mut managed) } != 0 {
        return Err(Error::python_pending());
    }
    NonNull::new(managed).ok_or_else(|| Error::buffer("the producer returned success and a NULL tensor"))
}

/// The table's non-owning view, checked; Ok(false) where it has none or its strides are NULL.
pub fn view_through(
    _py: Python<'_>,
    object: *mut PyObject,
    api: &'static DLPackExchangeAPI,
    out: &mut DLTensor,
) -> Result<bool> {
    let Some(view) = api.dltensor_from_py_object_no_sync else { return Ok(false) };
    // SAFETY: the producer's contract: the GIL held (the token), an object of its type, a
    // writable DLTensor.
    if unsafe { view(object.cast(), out) } != 0 {
        return Err(Error::python_pending());
    }
    // SAFETY: the producer filled `out`; its shape and strides are `ndim` long.
    unsafe { crate::validate::check_view(out) }
}

/// Where memory is stream-ordered, dlpx's current stream waits for the producer's current work
/// stream (an event), so work dlpx orders next sees the data.
#[inline]
fn order_after_producer(api: &DLPackExchangeAPI, device: DLDevice) -> Result<()> {
    if !crate::devices::has_streams(device.device_type) {
        return Ok(());
    }
    let mut producer: *mut c_void = ptr::null_mut();
    if let Some(current_work_stream) = api.current_work_stream {
        // SAFETY: the producer's contract (GIL held, a writable out).
        if unsafe { current_work_stream(device.device_type, device.device_id, &mut producer) } != 0 {
            return Err(Error::python_pending());
        }
    }
    crate::devices::order_after(device, producer, crate::stream::current(device))
}

/// The major-1 table objects of type `ty` are read through, or None: a type that publishes
/// nothing, an attribute of the wrong form, or a chain without a major-1 table (a producer that
/// moved on to a new major) gives no table to dlpx; such objects go through `__dlpack__`, and
/// `exchange_api_info` says why the table was not used.
pub fn published_v1(py: Python<'_>, ty: *mut PyTypeObject) -> Option<&'static DLPackExchangeAPI> {
    match published_head(py, ty) {
        // SAFETY: the producer promises a readable chain that lives for the process.
        Ok(Some((head, _))) => unsafe { crate::chain::select_supported(head) }.ok(),
        Ok(None) | Err(_) => None,
    }
}

/// The head of the exchange-table chain a type publishes: the capsule
/// `__dlpack_c_exchange_api__` first, then the integer `__c_dlpack_exchange_api__`; None when
/// it publishes neither.
pub fn published_head(
    py: Python<'_>,
    ty: *mut PyTypeObject,
) -> Result<Option<(*const DLPackExchangeAPIHeader, &'static str)>> {
    let ty = ty.cast::<PyObject>();
    // SAFETY: the token proves the GIL is held; new references are owned; missing attributes
    // are cleared.
    unsafe {
        if let Ok(capsule) = Owned::new(py, (py.PyObject_GetAttrString)(ty, c"__dlpack_c_exchange_api__".as_ptr())) {
            let table = (py.PyCapsule_GetPointer)(capsule.as_ptr(), c"dlpack_exchange_api".as_ptr());
            if table.is_null() {
                (py.PyErr_Clear)();
                return Err(Error::type_error(
                    "__dlpack_c_exchange_api__ must be a PyCapsule named 'dlpack_exchange_api' holding a non-NULL table",
                ));
            }
            return Ok(Some((table.cast_const().cast(), "__dlpack_c_exchange_api__")));
        }
        (py.PyErr_Clear)();
        let Ok(address) = Owned::new(py, (py.PyObject_GetAttrString)(ty, c"__c_dlpack_exchange_api__".as_ptr())) else {
            (py.PyErr_Clear)();
            return Ok(None);
        };
        let table = (py.PyLong_AsVoidPtr)(address.as_ptr());
        if table.is_null() {
            (py.PyErr_Clear)();
            return Err(Error::type_error("__c_dlpack_exchange_api__ must be a non-zero integer address"));
        }
        Ok(Some((table.cast_const().cast(), "__c_dlpack_exchange_api__")))
    }
}
