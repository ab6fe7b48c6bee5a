//! `dlpx.Tensor`'s properties and repr: plain bodies, each inside the one shell that the type's
//! spec wraps around it (`type_spec`).

use pyo3_ffi::PyObject;

use super::this;
use crate::cpython::{int_tuple, Python};
use crate::device_names;
use crate::error::Result;

pub(super) fn repr(py: Python<'_>, object: *mut PyObject) -> Result<*mut PyObject> {
    let t = this(py, object)?;
    let text = format!(
        "dlpx.Tensor(shape={}, dtype={}, device={}, strides={}{})",
        tuple_text(t.shape()),
        crate::dtype::dtype_name(t.dl_tensor().dtype),
        device_names::name(t.dl_tensor().device),
        tuple_text(t.strides()),
        if t.is_readonly() { ", readonly=True" } else { "" }
    );
    py.new_str(&text)
}

fn tuple_text(values: &[i64]) -> String {
    match values {
        [one] => format!("({one},)"),
        _ => format!("({})", values.iter().map(|v| v.to_string()).collect::<Vec<_>>().join(", ")),
    }
}

pub(super) fn shape(py: Python<'_>, object: *mut PyObject) -> Result<*mut PyObject> {
    int_tuple(py, this(py, object)?.shape())
}

pub(super) fn strides(py: Python<'_>, object: *mut PyObject) -> Result<*mut PyObject> {
    int_tuple(py, this(py, object)?.strides())
}

pub(super) fn ndim(py: Python<'_>, object: *mut PyObject) -> Result<*mut PyObject> {
    py.new_int(this(py, object)?.dl_tensor().ndim as i64)
}

pub(super) fn numel(py: Python<'_>, object: *mut PyObject) -> Result<*mut PyObject> {
    py.new_uint(this(py, object)?.numel())
}

pub(super) fn nbytes(py: Python<'_>, object: *mut PyObject) -> Result<*mut PyObject> {
    py.new_uint(this(py, object)?.nbytes())
}

pub(super) fn byte_offset(py: Python<'_>, object: *mut PyObject) -> Result<*mut PyObject> {
    py.new_uint(this(py, object)?.dl_tensor().byte_offset)
}

pub(super) fn data_ptr(py: Python<'_>, object: *mut PyObject) -> Result<*mut PyObject> {
    let dl = this(py, object)?.dl_tensor();
    let address = (dl.data as u64).wrapping_add(dl.byte_offset);
    py.new_uint(if dl.data.is_null() { 0 } else { address })
}

pub(super) fn is_contiguous(py: Python<'_>, object: *mut PyObject) -> Result<*mut PyObject> {
    Ok(py.new_bool(this(py, object)?.is_contiguous()))
}

pub(super) fn readonly(py: Python<'_>, object: *mut PyObject) -> Result<*mut PyObject> {
    Ok(py.new_bool(this(py, object)?.is_readonly()))
}

pub(super) fn dtype(py: Python<'_>, object: *mut PyObject) -> Result<*mut PyObject> {
    py.new_str(&crate::dtype::dtype_name(this(py, object)?.dl_tensor().dtype))
}

pub(super) fn dtype_raw(py: Python<'_>, object: *mut PyObject) -> Result<*mut PyObject> {
    let d = this(py, object)?.dl_tensor().dtype;
    int_tuple(py, &[d.code as i64, d.bits as i64, d.lanes as i64])
}

pub(super) fn device(py: Python<'_>, object: *mut PyObject) -> Result<*mut PyObject> {
    super::device_class::make_device(py, this(py, object)?.dl_tensor().device)
}
