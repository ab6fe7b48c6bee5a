//! The module's functions that make tensors: `empty` (dlpx's allocator) and `from_dlpack` (the
//! producer seam), each a body inside the one shell (`shell::method_def!`).

use pyo3_ffi::PyObject;

use crate::abi::*;
use crate::args::{self, FastArgs, Names};
use crate::cpython::Python;
use crate::error::{Error, Result};
use crate::producers::{self, Request};
use crate::tensor::Tensor;
use crate::tensor_type::{self, device_class::parse_device};

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
        if args::is_none(py, dtype) { DLDataType { code: 2, bits: 32, lanes: 1 } } else { parse_dtype(py, dtype)? };
    let device = if args::is_none(py, device) { DLDevice::CPU } else { parse_device(py, device)? };
    tensor_type::wrap(py, Tensor::empty(&shape, dtype, device)?)
}

fn parse_dtype(py: Python<'_>, object: *mut PyObject) -> Result<DLDataType> {
    if let Ok(name) = py.str_value(object, "empty") {
        return crate::dtype::parse_dtype(&name).ok_or_else(|| Error::value(format!("unknown dtype '{name}'")));
    }
    let raw = args::int_sequence(py, object, "dtype")?;
    match raw[..] {
        [code, bits, lanes] if (0..256).contains(&code) && (0..256).contains(&bits) && (0..65536).contains(&lanes) => {
            Ok(DLDataType { code: code as u8, bits: bits as u8, lanes: lanes as u16 })
        }
        _ => Err(Error::value("dtype must be a name such as 'float32' or a (code, bits, lanes) triple")),
    }
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
    let device = if args::is_none(py, device) { None } else { Some(parse_device(py, device)?) };
    let copy = args::optional_bool(py, copy, "copy")?;
    tensor_type::wrap(py, producers::import(py, x, Request { device, copy })?)
}
