//! A kernel's home: the framework its caller's tensors come from, named by an object `like` (the
//! C kernel API's `*_like` entries) or by its entry (the kernel loader's first tensor argument).
//! Its row's allocator makes the kernel's outputs (`allocator_like`: its table's, or the row's
//! own way, torch's shim), its current stream is where the kernel launches (`current_stream_in`),
//! and its `to_py` is the way back (`to_py_of`; `to_py_in` for a table).
//!
//! The loader's way back goes further: a tensor dlpx holds (a kernel's output) as an object of
//! the producer's own type. A row whose producer publishes a table uses the table's `to_py`
//! (torch in → `torch.Tensor` out); a row without one names its producer's `from_dlpack` here,
//! found in the producer's loaded module once and kept, and gets the `dlpx.Tensor` it would give
//! otherwise turned into the producer's type by it (numpy in → `numpy.ndarray` out). Rows that
//! name none (capsules, any `__dlpack__`, the older protocols) give the `dlpx.Tensor`.

use std::ffi::{c_void, CStr};
use std::ptr::{self, NonNull};

use pyo3_ffi::PyObject;

use super::discovered::Discovered;
use super::table_answer::{failure, succeeded};
use super::Entry;
use crate::abi::*;
use crate::cpython::{attribute, Owned, Python};
use crate::error::{Error, Result};
use crate::tensor_type;

/// A producer's `from_dlpack`, in the module that has it.
pub struct Home {
    module: &'static CStr,
    function: Discovered<NonNull<PyObject>>,
}

impl Home {
    pub const fn new(module: &'static CStr) -> Home {
        Home { module, function: Discovered::new(module, &[]) }
    }

    /// `module.from_dlpack`, once the module is loaded (kept for the process).
    fn function(&self, py: Python<'_>) -> Result<NonNull<PyObject>> {
        let found = self.function.get_or_find(py, |py, module| {
            attribute(py, module.as_ptr(), c"from_dlpack").and_then(|f| NonNull::new(f.into_ptr()))
        });
        found.ok_or_else(|| {
            Error::runtime(format!(
                "{}.from_dlpack is not there (is {} imported?)",
                self.module.to_string_lossy(),
                self.module.to_string_lossy()
            ))
        })
    }
}

/// The table whose allocator and `to_py` serve outputs like `like`: its type's (`table_of`), or
/// dlpx's own for NULL.
pub fn table_like(py: Python<'_>, like: *mut PyObject) -> Result<&'static DLPackExchangeAPI> {
    match like.is_null() {
        true => tensor_type::own_table().ok_or_else(tensor_type::not_initialised),
        false => Ok(super::table_of(py, like)),
    }
}

/// The allocator of outputs like `like` (a live object or type): its row's
/// (`Producer::output_allocator`), which the kernel loader uses too: its table's, or the row's
/// faster way to the same tensors (torch: its C shim).
pub fn allocator_like(py: Python<'_>, like: *mut PyObject) -> DLPackManagedTensorAllocator {
    let entry = super::entry_of_object_or_type(py, like);
    entry.row.producer.ready_outputs(py, like);
    entry.row.producer.output_allocator(entry)
}

/// `managed` (any managed tensor the caller owns) as an object of the framework of `like`
/// (dlpx's own for NULL): the row's own way back where the row made it as it still is (torch: a
/// shim output, `Producer::own_output_to_py`), else its table's `to_py`. On failure the caller
/// keeps ownership of `managed` (docs/design.md R4).
pub fn to_py_of(
    py: Python<'_>,
    like: *mut PyObject,
    managed: NonNull<DLManagedTensorVersioned>,
) -> Result<*mut PyObject> {
    if like.is_null() {
        return to_py_in(py, table_like(py, like)?, managed.as_ptr());
    }
    let entry = super::entry_of_object_or_type(py, like);
    match entry.row.producer.own_output_to_py(py, managed) {
        Some(converted) => converted,
        None => to_py_in(py, entry.table, managed.as_ptr()),
    }
}

/// `managed` as an object of `table`'s framework, by its `to_py`. On failure the caller keeps
/// ownership of `managed` (docs/design.md R4).
#[inline]
pub fn to_py_in(
    py: Python<'_>,
    table: &DLPackExchangeAPI,
    managed: *mut DLManagedTensorVersioned,
) -> Result<*mut PyObject> {
    let Some(to_py) = table.managed_tensor_to_py_object_no_sync else {
        return Err(Error::buffer("the producer's table has no managed_tensor_to_py_object_no_sync"));
    };
    let mut object: *mut c_void = ptr::null_mut();
    // SAFETY: the table's contract: the GIL held (the token); `managed` moves only on success.
    let returned = unsafe { to_py(managed, &mut object) };
    match (returned, object.is_null()) {
        // A success without an object is a failure that was not reported: taken as one, the
        // tensor left with the caller (the likelier story than a table that kept it and lost it).
        (0, true) if succeeded(py, returned) => {
            Err(Error::runtime("the table's managed_tensor_to_py_object_no_sync reported success and gave no object"))
        }
        (0, false) if succeeded(py, returned) => Ok(object.cast()),
        // An object made with an exception set: a failure, as CPython takes such a result, and
        // the tensor is the caller's (R4: the C caller deletes it). The object, which holds the
        // tensor too, is left unreleased, never to delete it a second time: a breached contract
        // costs one object, never a double free.
        (0, false) => Err(failure(py, "managed_tensor_to_py_object_no_sync")),
        _ => Err(failure(py, "managed_tensor_to_py_object_no_sync")),
    }
}

/// The current work stream `table`'s framework reports for a device: dlpx's own registry where
/// it serves the table (`stream::serves`), else the table's `current_work_stream`, with the GIL.
pub fn current_stream_in(py: Python<'_>, table: &DLPackExchangeAPI, device: DLDevice) -> Result<*mut c_void> {
    let Some(stream) = table.current_work_stream else {
        return Err(Error::buffer("the table has no current_work_stream"));
    };
    if crate::stream::serves(table) {
        return Ok(crate::stream::current(device));
    }
    let mut out: *mut c_void = ptr::null_mut();
    // SAFETY: the producer's contract (the GIL held, a writable out).
    match succeeded(py, unsafe { stream(device.device_type, device.device_id, &mut out) }) {
        true => Ok(out),
        false => Err(failure(py, "current_work_stream")),
    }
}

/// `managed`, a kernel call's output (owned by the caller, who gives it up here, on success and
/// on failure alike), as an object of the framework of `like`, the entry of the caller's first
/// tensor argument: its table's `to_py`, else its producer's `from_dlpack` of a `dlpx.Tensor`,
/// else the `dlpx.Tensor` (also without `like`). The call allocated it through that same
/// framework's table (dlpx's own for a row without a table of its own) and found it unchanged:
/// dlpx's own are adopted without a second check.
pub fn to_py_like(
    py: Python<'_>,
    like: Option<Entry>,
    managed: NonNull<DLManagedTensorVersioned>,
) -> Result<*mut PyObject> {
    let own = tensor_type::own_table().ok_or_else(tensor_type::not_initialised)?;
    let converted = match like {
        Some(entry) if entry.row.synthetic.is_none() && !ptr::eq(entry.table, own) => {
            match entry.row.producer.own_output_to_py(py, managed) {
                Some(converted) => converted,
                None => to_py_in(py, entry.table, managed.as_ptr()),
            }
        }
        // SAFETY: an output of dlpx's allocator (dlpx's table and the synthetic tables of rows
        // without one allocate with it), unchanged since (the caller's contract).
        _ => unsafe { tensor_type::adopt_output(py, managed) },
    };
    let object = converted.inspect_err(|_| {
        // R4: a failed `to_py` leaves the tensor with the caller, here.
        // SAFETY: still owned here; deleted once.
        unsafe { crate::tensor::delete_managed(managed) }
    })?;
    let object = Owned::new(py, object)?;
    match like.and_then(|entry| entry.row.home) {
        Some(home) if like.is_some_and(|entry| entry.row.synthetic.is_some()) => {
            let function = home.function(py)?;
            // SAFETY: GIL held; a 1-tuple that steals a new reference to the tensor; the call
            // returns a new reference or NULL with an exception set.
            unsafe {
                let args = Owned::new(py, (py.PyTuple_New)(1))?;
                (py.PyTuple_SetItem)(args.as_ptr(), 0, object.clone_ref().into_ptr());
                Owned::new(py, (py.PyObject_CallObject)(function.as_ptr(), args.as_ptr())).map(Owned::into_ptr)
            }
        }
        _ => Ok(object.into_ptr()),
    }
}
