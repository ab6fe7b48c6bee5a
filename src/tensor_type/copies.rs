//! `copy.copy(t)` and `copy.deepcopy(t)`: a new `dlpx.Tensor` over a copy of the memory, as
//! numpy's `ndarray.__copy__` and `__deepcopy__` give (a tensor holds no Python objects, so the
//! two are the same). The copy is compact, on the tensor's device, and writable, as every copy
//! dlpx makes is (`from_dlpack(x, copy=True)`, `__dlpack__(copy=True)`) and as numpy's copy of a
//! read-only array is. Without them, `copy` would try `__reduce_ex__`, which `dlpx.Tensor(...)`
//! cannot rebuild.

use std::ffi::CStr;

use pyo3_ffi::PyObject;

use super::{this, wrap};
use crate::cpython::Python;
use crate::error::Result;

pub(super) const COPY_DOC: &CStr = c"__copy__($self, /)
--

A dlpx.Tensor over a copy of the memory (copy.copy): compact, on the same device, writable.";

pub(super) const DEEPCOPY_DOC: &CStr = c"__deepcopy__($self, memo, /)
--

A dlpx.Tensor over a copy of the memory (copy.deepcopy), as __copy__ makes.";

/// `dlpx.Tensor.__copy__`.
pub(super) fn copy(py: Python<'_>, object: *mut PyObject) -> Result<*mut PyObject> {
    wrap(py, crate::copy::duplicate(this(py, object)?)?)
}

/// `dlpx.Tensor.__deepcopy__(memo)`: nothing inside a tensor is a Python object for `memo` to map.
pub(super) fn deepcopy(py: Python<'_>, object: *mut PyObject, _memo: *mut PyObject) -> Result<*mut PyObject> {
    copy(py, object)
}
