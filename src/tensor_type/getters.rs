//! `dlpx.Tensor`'s properties and repr.

use std::ffi::c_void;
use std::ptr;

use pyo3_ffi::{PyGetSetDef, PyObject};

use super::this;
use crate::cpython::{int_tuple, CStatic, Python, Raise};
use crate::device_names;
use crate::error::boundary;
use crate::tensor::Tensor;

pub(super) unsafe extern "C" fn tensor_repr(object: *mut PyObject) -> *mut PyObject {
    boundary(Raise, "dlpx.Tensor.__repr__", || {
        // SAFETY: CPython calls tp_repr with the GIL held and a live `self`.
        let py = unsafe { Python::assume_attached()? };
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
    })
}

fn tuple_text(values: &[i64]) -> String {
    match values {
        [one] => format!("({one},)"),
        _ => format!("({})", values.iter().map(|v| v.to_string()).collect::<Vec<_>>().join(", ")),
    }
}

macro_rules! getter {
    ($name:ident, |$py:ident, $t:ident| $body:expr) => {
        unsafe extern "C" fn $name(object: *mut PyObject, _closure: *mut c_void) -> *mut PyObject {
            boundary(Raise, concat!("dlpx.Tensor.", stringify!($name)), || {
                // SAFETY: CPython calls getters with the GIL held and a live `self`.
                let $py: Python<'_> = unsafe { Python::assume_attached()? };
                let $t: &Tensor = this($py, object)?;
                $body
            })
        }
    };
}

getter!(get_shape, |py, t| int_tuple(py, t.shape()));
getter!(get_strides, |py, t| int_tuple(py, t.strides()));
getter!(get_ndim, |py, t| py.new_int(t.dl_tensor().ndim as i64));
getter!(get_numel, |py, t| py.new_uint(t.numel()));
getter!(get_nbytes, |py, t| py.new_uint(t.nbytes()));
getter!(get_byte_offset, |py, t| py.new_uint(t.dl_tensor().byte_offset));
getter!(get_data_ptr, |py, t| {
    let dl = t.dl_tensor();
    let address = (dl.data as u64).wrapping_add(dl.byte_offset);
    py.new_uint(if dl.data.is_null() { 0 } else { address })
});
getter!(get_is_contiguous, |py, t| Ok(py.new_bool(t.is_contiguous())));
getter!(get_readonly, |py, t| Ok(py.new_bool(t.is_readonly())));
getter!(get_dtype, |py, t| py.new_str(&crate::dtype::dtype_name(t.dl_tensor().dtype)));
getter!(get_dtype_raw, |py, t| {
    let d = t.dl_tensor().dtype;
    int_tuple(py, &[d.code as i64, d.bits as i64, d.lanes as i64])
});
getter!(get_device, |py, t| super::device_class::make_device(py, t.dl_tensor().device));

macro_rules! getset {
    ($name:literal, $getter:ident, $doc:literal) => {
        PyGetSetDef {
            name: $name.as_ptr(),
            get: Some($getter),
            set: None,
            doc: $doc.as_ptr(),
            closure: ptr::null_mut(),
        }
    };
}

// What `create_type` hands CPython, which keeps pointers into it for the life of the type.
pub(super) static GETSET: CStatic<[PyGetSetDef; 13]> = CStatic::new([
    getset!(c"shape", get_shape, c"Extents of each dimension, a tuple of ints."),
    getset!(c"strides", get_strides, c"Strides of each dimension in elements (not bytes), a tuple of ints."),
    getset!(c"ndim", get_ndim, c"Number of dimensions."),
    getset!(c"numel", get_numel, c"Number of elements."),
    getset!(c"nbytes", get_nbytes, c"Bytes the elements occupy (sub-byte types packed unless flagged padded)."),
    getset!(
        c"byte_offset",
        get_byte_offset,
        c"DLTensor.byte_offset: bytes from the data pointer to the first element."
    ),
    getset!(c"data_ptr", get_data_ptr, c"Address of the first element (data + byte_offset), 0 for empty tensors."),
    getset!(c"is_contiguous", get_is_contiguous, c"Whether the strides are compact row-major."),
    getset!(c"readonly", get_readonly, c"Whether the producer marked the memory read-only."),
    getset!(
        c"dtype",
        get_dtype,
        c"Element type name: 'float32', 'bfloat16', 'float8_e4m3fn', 'bool', 'complex64', ..."
    ),
    getset!(c"dtype_raw", get_dtype_raw, c"The DLPack dtype as (code, bits, lanes)."),
    getset!(c"device", get_device, c"The device, a dlpx.Device (prints as 'cpu:0', compares with such strings)."),
    PyGetSetDef { name: ptr::null(), get: None, set: None, doc: ptr::null(), closure: ptr::null_mut() },
]);
