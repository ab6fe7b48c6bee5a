//! dlpx's synthetic exchange tables, one per row without a table of its own (docs/design.md,
//! "Synthetic tables"): the allocator, `to_py` (a `dlpx.Tensor`) and `current_work_stream` are
//! dlpx's; the reads go through the seam, so any object given to any of them is read by its
//! own row.

use std::ffi::{c_int, c_void};

use pyo3_ffi::PyObject;

use crate::abi::*;
use crate::cpython::{type_name, Raise};
use crate::error::Error;
use crate::shell::entry::c_entry;
use crate::tensor_type;

/// A synthetic table; `views`: whether it has `dltensor_from_py_object_no_sync` (rows that can
/// view an object in place).
pub const fn table(views: bool) -> DLPackExchangeAPI {
    DLPackExchangeAPI {
        header: DLPackExchangeAPIHeader {
            version: DLPackVersion { major: DLPACK_MAJOR_VERSION, minor: DLPACK_MINOR_VERSION },
            prev_api: std::ptr::null_mut(),
        },
        managed_tensor_allocator: Some(crate::allocation::allocator_entry),
        managed_tensor_from_py_object_no_sync: Some(from_py),
        managed_tensor_to_py_object_no_sync: Some(tensor_type::to_py_entry),
        dltensor_from_py_object_no_sync: if views { Some(view) } else { None },
        current_work_stream: Some(crate::stream::current_work_stream_entry),
    }
}

/// `managed_tensor_from_py_object_no_sync`: `py_object` read by its own row, as `dlpx_import`
/// reads it.
unsafe extern "C" fn from_py(py_object: *mut c_void, out: *mut *mut DLManagedTensorVersioned) -> c_int {
    c_entry!(Raise, "managed_tensor_from_py_object_no_sync", out(out), given(py_object), |py| {
        out.put(super::managed(py, py_object.as_ptr().cast())?.as_ptr());
        Ok(0)
    })
}

/// `dltensor_from_py_object_no_sync`: a non-owning view, where `py_object`'s row has one.
unsafe extern "C" fn view(py_object: *mut c_void, out: *mut DLTensor) -> c_int {
    c_entry!(Raise, "dltensor_from_py_object_no_sync", out(out), given(py_object), |py| {
        let (object, mut out) = (py_object.as_ptr().cast::<PyObject>(), out);
        if super::view_in_place(py, object, out.get_mut())? {
            return Ok(0);
        }
        Err(Error::buffer(format!(
            "a {} has no non-owning view (take it with managed_tensor_from_py_object_no_sync)",
            type_name(py, object)
        )))
    })
}
