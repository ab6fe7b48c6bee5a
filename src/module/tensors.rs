//! The module's functions that make tensors: `empty` (dlpx's allocator) and `from_dlpack` (the
//! producer seam), each a body inside the one shell (`shell::method_def!`).

use pyo3_ffi::PyObject;

use crate::abi::*;
use crate::args::{self, FastArgs, Names};
use crate::cpython::Python;
use crate::error::{Error, Result};
use crate::producers::{self, Request};
use crate::tensor::Tensor;
use crate::tensor_type;

static EMPTY_NAMES: Names = Names::new(&[c"shape", c"dtype", c"device"]);
static FROM_DLPACK_NAMES: Names = Names::with_positional_only(&[c"x", c"device", c"copy"], 1);

/// `empty(shape, dtype='float32', device='cpu')`.
pub(super) fn empty(py: Python<'_>, _module: *mut PyObject, args: FastArgs<'_>) -> Result<*mut PyObject> {
    let [shape, dtype, device] = args.parse(py, &EMPTY_NAMES, 3)?;
    if shape.is_null() {
        return Err(Error::type_error("missing required argument 'shape'"));
    }
    let shape = args::int_sequence(py, shape, "shape")?;
    let dtype =
        if args::is_none(py, dtype) { DLDataType { code: 2, bits: 32, lanes: 1 } } else { args::dtype(py, dtype)? };
    let device = if args::is_none(py, device) { DLDevice::CPU } else { args::device(py, device)? };
    tensor_type::wrap(py, Tensor::empty(&shape, dtype, device)?)
}

/// `from_dlpack(x, /, *, device=None, copy=None)`: the producer seam's import, wrapped.
pub(super) fn from_dlpack(py: Python<'_>, _module: *mut PyObject, args: FastArgs<'_>) -> Result<*mut PyObject> {
    if let Some(x) = args.single() {
        // `from_dlpack(x)`, the common call: nothing else to parse.
        return tensor_type::wrap(py, producers::import(py, x, Request::PLAIN)?);
    }
    let [x, device, copy] = args.parse(py, &FROM_DLPACK_NAMES, 1)?;
    if x.is_null() {
        return Err(Error::type_error("missing required argument 'x'"));
    }
    let device = if args::is_none(py, device) { None } else { Some(args::device(py, device)?) };
    let copy = args::optional_bool(py, copy, "copy")?;
    tensor_type::wrap(py, producers::import(py, x, Request { device, copy })?)
}
