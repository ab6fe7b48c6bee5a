//! The `table` row: a type that publishes its own exchange table is read through it, a C call
//! and no capsule. Also how any row learns what a type publishes (R1, R8).

use std::ptr::{self, NonNull};

use pyo3_ffi::{PyObject, PyTypeObject};

use crate::abi::*;
use crate::cpython::{Owned, Python};
use crate::error::{Error, Result};
use crate::producers::table_answer::{failure, succeeded};
use crate::producers::{Answer, Ask, Entry, Handover, Producer, Row};

pub static ROW: Row = Row { name: "table", synthetic: None, guard: None, suspect: None, home: None, producer: &Table };
struct Table;

impl Producer for Table {
    fn claims(&self, _py: Python<'_>, _ty: *mut PyTypeObject, published: Option<&'static DLPackExchangeAPI>) -> bool {
        published.is_some()
    }

    fn answer<'py>(&self, py: Python<'py>, object: *mut PyObject, entry: Entry, ask: Ask<'_>) -> Answer<'py> {
        read_through(py, object, entry.table, ask)
    }
}

/// The table's view (`dltensor_from_py_object_no_sync`) where `ask` takes one and the table has
/// it, else its managed tensor (`managed_tensor_from_py_object_no_sync`): one C call, no
/// capsule. The producer's failure is its pending Python exception. The entries do not
/// synchronise: where the data is next used on dlpx's current stream and its memory is
/// stream-ordered, that stream then waits for the table's current work stream.
#[inline(always)]
pub fn read_through<'py>(
    py: Python<'py>,
    object: *mut PyObject,
    api: &'static DLPackExchangeAPI,
    ask: Ask<'_>,
) -> Result<Handover<'py>> {
    if let (Some(out), Some(view)) = (ask.view, api.dltensor_from_py_object_no_sync) {
        // SAFETY: the producer's contract: the GIL held (the token), an object of its type, a
        // writable DLTensor (the cell's, which nothing else borrows during the call).
        if succeeded(py, unsafe { view(object.cast(), out.as_ptr()) }) {
            return Ok(Handover::View);
        }
        // A view the table cannot give (or gave with an exception set: a failure too) — dlpx's
        // own refuses a read-only tensor, which a view cannot flag; torch's fails where its
        // managed entry fails too — the owning read asks for: its flags can say what the view
        // could not, and its refusal is the table's answer.
        // SAFETY: the token proves the GIL is held; the view's exception is replaced by what
        // the owning read gives.
        unsafe { (py.PyErr_Clear)() };
    }
    let from_py = api
        .managed_tensor_from_py_object_no_sync
        .ok_or_else(|| Error::buffer("the producer's exchange table has no managed_tensor_from_py_object_no_sync"))?;
    let mut managed: *mut DLManagedTensorVersioned = ptr::null_mut();
    // SAFETY: the producer's contract: the GIL held (the token), an object of its type, a
    // writable out.
    let returned = unsafe { from_py(object.cast(), &mut managed) };
    if !succeeded(py, returned) {
        return Err(refused(py, returned, managed));
    }
    let managed =
        NonNull::new(managed).ok_or_else(|| Error::buffer("the producer returned success and a NULL tensor"))?;
    // SAFETY: the table hands its caller the managed tensor.
    let handover = unsafe { Handover::managed(managed) };
    if ask.on_dlpx_stream {
        // SAFETY: live, ours; the device is read before any check (an unknown one has no streams).
        order_after_producer(py, api, unsafe { managed.as_ref() }.dl_tensor.device)?;
    }
    Ok(handover)
}

/// Why `managed_tensor_from_py_object_no_sync` failed. A tensor it handed over with an exception
/// set (a success it did not mean) is deleted, once, with the exception kept aside.
#[cold]
fn refused(py: Python<'_>, returned: std::ffi::c_int, managed: *mut DLManagedTensorVersioned) -> Error {
    if let Some(managed) = NonNull::new(managed).filter(|_| returned == 0) {
        let _kept = crate::cpython::ExceptionGuard::save_with_gil(py);
        // SAFETY: the table handed its caller the tensor; given up once, here.
        unsafe { crate::tensor::delete_managed(managed) };
    }
    failure(py, "managed_tensor_from_py_object_no_sync")
}

/// Where memory is stream-ordered, dlpx's current stream waits for the producer's current work
/// stream (an event, never a device synchronisation), so the work dlpx orders next — a copy, a
/// kernel on dlpx's stream — sees the data the producer's stream was still writing.
#[inline]
pub fn order_after_producer(py: Python<'_>, api: &DLPackExchangeAPI, device: DLDevice) -> Result<()> {
    if !crate::devices::has_streams(device.device_type) {
        return Ok(());
    }
    let mut producer: *mut std::ffi::c_void = ptr::null_mut();
    if let Some(current_work_stream) = api.current_work_stream {
        // SAFETY: the producer's contract (GIL held, a writable out).
        if !succeeded(py, unsafe { current_work_stream(device.device_type, device.device_id, &mut producer) }) {
            return Err(failure(py, "current_work_stream"));
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
/// it publishes neither, or sets the capsule's attribute to None (a subclass opting out).
pub fn published_head(
    py: Python<'_>,
    ty: *mut PyTypeObject,
) -> Result<Option<(*const DLPackExchangeAPIHeader, &'static str)>> {
    let ty = ty.cast::<PyObject>();
    // SAFETY: the token proves the GIL is held; new references are owned; missing attributes
    // are cleared.
    unsafe {
        if let Ok(capsule) = Owned::new(py, (py.PyObject_GetAttrString)(ty, c"__dlpack_c_exchange_api__".as_ptr())) {
            // None: a subclass that opts out of its base's table (its objects go to `__dlpack__`).
            if capsule.as_ptr() == py.none {
                return Ok(None);
            }
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
        // As a signed value: a negative one (-1 read as 0xffff...) is no address of a table, nor
        // is one past int64, which user space never reaches.
        let value = (py.PyLong_AsLongLong)(address.as_ptr());
        if value <= 0 {
            (py.PyErr_Clear)();
            return Err(Error::type_error("__c_dlpack_exchange_api__ must be a positive integer address"));
        }
        Ok(Some((value as usize as *const DLPackExchangeAPIHeader, "__c_dlpack_exchange_api__")))
    }
}
