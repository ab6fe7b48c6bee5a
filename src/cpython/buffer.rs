//! The buffer protocol's struct and flags (PEP 3118). `Py_buffer`'s layout has not changed since
//! CPython 3.3, and the `bf_getbuffer`/`bf_releasebuffer` type slots and `PyObject_GetBuffer`/
//! `PyBuffer_Release` exist on every CPython dlpx serves: the limited API names them from 3.11,
//! the ABI has them all along (dlpx resolves functions at run time, not through headers).

use std::ffi::{c_char, c_int, c_void};

use pyo3_ffi::{PyObject, Py_ssize_t};

/// CPython's `Py_buffer`.
#[repr(C)]
pub struct PyBuffer {
    pub buf: *mut c_void,
    /// A strong reference to the exporter, released by `PyBuffer_Release`; NULL after a failure.
    pub obj: *mut PyObject,
    pub len: Py_ssize_t,
    pub itemsize: Py_ssize_t,
    pub readonly: c_int,
    pub ndim: c_int,
    pub format: *mut c_char,
    pub shape: *mut Py_ssize_t,
    pub strides: *mut Py_ssize_t,
    pub suboffsets: *mut Py_ssize_t,
    /// The exporter's own, for its release.
    pub internal: *mut c_void,
}

impl PyBuffer {
    pub const fn zeroed() -> PyBuffer {
        PyBuffer {
            buf: std::ptr::null_mut(),
            obj: std::ptr::null_mut(),
            len: 0,
            itemsize: 0,
            readonly: 0,
            ndim: 0,
            format: std::ptr::null_mut(),
            shape: std::ptr::null_mut(),
            strides: std::ptr::null_mut(),
            suboffsets: std::ptr::null_mut(),
            internal: std::ptr::null_mut(),
        }
    }
}

/// Plain bytes: one contiguous run of `len` bytes (an exporter that has no such run refuses,
/// as a strided memoryview does), read-only allowed.
pub const PYBUF_SIMPLE: c_int = 0;
pub const PYBUF_WRITABLE: c_int = 0x0001;
pub const PYBUF_FORMAT: c_int = 0x0004;
pub const PYBUF_ND: c_int = 0x0008;
pub const PYBUF_STRIDES: c_int = 0x0010 | PYBUF_ND;
pub const PYBUF_C_CONTIGUOUS: c_int = 0x0020 | PYBUF_STRIDES;
pub const PYBUF_F_CONTIGUOUS: c_int = 0x0040 | PYBUF_STRIDES;
pub const PYBUF_ANY_CONTIGUOUS: c_int = 0x0080 | PYBUF_STRIDES;
/// The bits of a request that ask for an order (each contiguity flag includes PYBUF_STRIDES).
pub const PYBUF_ORDERS: c_int = (PYBUF_C_CONTIGUOUS | PYBUF_F_CONTIGUOUS | PYBUF_ANY_CONTIGUOUS) & !PYBUF_STRIDES;
/// What a reader of any strided buffer asks for: strides and the format, read-only allowed.
pub const PYBUF_RECORDS_RO: c_int = PYBUF_STRIDES | PYBUF_FORMAT;

/// The type slots (`typeslots.h`: 1 and 2 since the slots were numbered).
pub const PY_BF_GETBUFFER: c_int = 1;
pub const PY_BF_RELEASEBUFFER: c_int = 2;

pub type GetBufferFn = unsafe extern "C" fn(*mut PyObject, *mut PyBuffer, c_int) -> c_int;
pub type ReleaseBufferFn = unsafe extern "C" fn(*mut PyObject, *mut PyBuffer);
