//! The module's functions about exchange tables: the table a C kernel uses for a type's objects
//! (`exchange_api_of`), the producer seam's row for it (`_row_of`), and what a type publishes
//! (`exchange_api_info`, for users debugging interop).

use std::ffi::CStr;

use pyo3_ffi::{PyObject, PyTypeObject};

use crate::abi::*;
use crate::chain;
use crate::cpython::{int_tuple, is_type, type_of, Owned, Python};
use crate::error::{Error, Result};
use crate::producers::{self, published_head};

/// `exchange_api_of(type_or_object)`: the table as a capsule named `dlpack_exchange_api`.
pub(super) fn exchange_api_of(py: Python<'_>, _module: *mut PyObject, object: *mut PyObject) -> Result<*mut PyObject> {
    let table = producers::table_of(py, object);
    // SAFETY: the token proves the GIL is held; the table lives for the process, so the capsule
    // needs no destructor.
    py.check(unsafe {
        (py.PyCapsule_New)((table as *const DLPackExchangeAPI).cast_mut().cast(), c"dlpack_exchange_api".as_ptr(), None)
    })
}

/// `_row_of(type_or_object)`: the name of the row that reads objects of this type.
pub(super) fn row_of(py: Python<'_>, _module: *mut PyObject, object: *mut PyObject) -> Result<*mut PyObject> {
    py.new_str(producers::row_name(py, object))
}

/// `_served(row)`: the calls the direct read named `row` served (this thread's, on a free-threaded
/// interpreter; docs/design.md, "A guard per direct read"): what a test of a fast path asks to know
/// that the path answered.
pub(super) fn served(py: Python<'_>, _module: *mut PyObject, row: *mut PyObject) -> Result<*mut PyObject> {
    let name = py.str_value(row, "row")?;
    match producers::served(py, &name) {
        Some(count) => py.new_uint(count),
        None => Err(Error::value(format!(
            "no direct read named '{name}' is counted (these are: {})",
            producers::counted().join(", ")
        ))),
    }
}

/// `exchange_api_info(type_or_object)`.
pub(super) fn exchange_api_info(
    py: Python<'_>,
    _module: *mut PyObject,
    object: *mut PyObject,
) -> Result<*mut PyObject> {
    let ty: *mut PyTypeObject = if is_type(py, object) { object.cast() } else { type_of(py, object) };
    let Some((head, attribute)) = published_head(py, ty)? else { return Ok(py.new_none()) };
    let info = Owned::new(py, py.new_dict()?)?;
    set(py, &info, c"attribute", py.new_str(attribute)?)?;
    let chain = Owned::new(py, py.new_list()?)?;
    let mut selected = None;
    // SAFETY: the producer promises readable headers along its chain.
    let walk = unsafe { chain::walk(head) };
    for (i, &current) in walk.links.iter().enumerate() {
        // SAFETY: as above.
        let header = unsafe { &*current };
        let entry = Owned::new(py, py.new_dict()?)?;
        set(py, &entry, c"version", int_tuple(py, &[header.version.major as i64, header.version.minor as i64])?)?;
        set(py, &entry, c"address", py.new_uint(current as usize as u64)?)?;
        if header.version.major == DLPACK_MAJOR_VERSION {
            selected.get_or_insert(i);
            // SAFETY: a major-1 header starts a v1 table.
            let api = unsafe { &*current.cast::<DLPackExchangeAPI>() };
            let entries = Owned::new(py, py.new_dict()?)?;
            for (name, present) in [
                (c"managed_tensor_allocator", api.managed_tensor_allocator.is_some()),
                (c"managed_tensor_from_py_object_no_sync", api.managed_tensor_from_py_object_no_sync.is_some()),
                (c"managed_tensor_to_py_object_no_sync", api.managed_tensor_to_py_object_no_sync.is_some()),
                (c"dltensor_from_py_object_no_sync", api.dltensor_from_py_object_no_sync.is_some()),
                (c"current_work_stream", api.current_work_stream.is_some()),
            ] {
                set(py, &entries, name, py.new_bool(present))?;
            }
            set(py, &entry, c"entries", entries.into_ptr())?;
        }
        // SAFETY: the token proves the GIL is held; the list takes its own reference.
        if unsafe { (py.PyList_Append)(chain.as_ptr(), entry.as_ptr()) } != 0 {
            return Err(Error::python_pending());
        }
    }
    let version = match walk.links.first() {
        // SAFETY: read above.
        Some(&h) => unsafe { int_tuple(py, &[(*h).version.major as i64, (*h).version.minor as i64])? },
        None => py.new_none(),
    };
    set(py, &info, c"version", version)?;
    set(py, &info, c"chain", chain.into_ptr())?;
    set(py, &info, c"chain_end", py.new_str(walk.ending.name())?)?;
    let selected = match selected {
        Some(i) => py.new_int(i as i64)?,
        None => py.new_none(),
    };
    set(py, &info, c"selected", selected)?;
    Ok(info.into_ptr())
}

/// `dict[key] = value`, stealing `value`.
pub(super) fn set(py: Python<'_>, dict: &Owned<'_>, key: &CStr, value: *mut PyObject) -> Result<()> {
    let value = Owned::new(py, value)?;
    // SAFETY: GIL held; the dict takes its own reference.
    if unsafe { (py.PyDict_SetItemString)(dict.as_ptr(), key.as_ptr(), value.as_ptr()) } != 0 {
        return Err(Error::python_pending());
    }
    Ok(())
}
