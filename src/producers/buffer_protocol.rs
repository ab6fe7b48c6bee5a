//! Reading an object's memory through the buffer protocol (PEP 3118; docs/design.md R12):
//! `bytes`, `bytearray`, `memoryview`, `array.array`, `mmap`, ctypes arrays, pyarrow buffers,
//! anything that exports one. One `PyObject_GetBuffer(PyBUF_RECORDS_RO)`: the format says the
//! dtype (`array_formats`), the byte strides become element strides (refused when not a whole
//! number of items: only a copy can cross then), `readonly` is kept. The view stays held by the
//! managed tensor until its deleter runs (`held_buffer`).

use std::ffi::CStr;
use std::ptr::{self, NonNull};

use pyo3_ffi::PyObject;

use super::held_buffer;
use crate::abi::*;
use crate::array_formats;
use crate::cpython::buffer::{PyBuffer, PYBUF_RECORDS_RO};
use crate::cpython::Python;
use crate::error::{Error, ErrorKind, Result};
use crate::layout::{self, MAX_NDIM};
use crate::tensor::Tensor;

/// The view of `object`, or None when it exports no buffer (the exporter's own error, such as a
/// BufferError from a released memoryview, is kept).
pub fn view_of(py: Python<'_>, object: *mut PyObject) -> Result<Option<PyBuffer>> {
    let mut view = PyBuffer::zeroed();
    // SAFETY: GIL held; a live object and a writable view.
    if unsafe { (py.PyObject_GetBuffer)(object, &mut view, PYBUF_RECORDS_RO) } == 0 {
        return Ok(Some(view));
    }
    // SAFETY: GIL held; a failed call left an exception.
    if unsafe { (py.PyErr_ExceptionMatches)(py.exception(ErrorKind::TypeError)) } != 0 {
        // SAFETY: as above.
        unsafe { (py.PyErr_Clear)() };
        return Ok(None);
    }
    Err(Error::python_pending())
}

/// A managed tensor over `object`'s buffer, or None when it exports none; a layout DLPack cannot
/// describe is a BufferError naming it (the view is released then).
pub fn managed_of(py: Python<'_>, object: *mut PyObject) -> Result<Option<NonNull<DLManagedTensorVersioned>>> {
    let Some(mut view) = view_of(py, object)? else { return Ok(None) };
    managed_over(py, &mut view, 0).map(Some)
}

/// A managed tensor over `view`, `offset` bytes in (the array interface's `offset` into a
/// buffer), taking the view over; released here when refused.
pub fn managed_over(py: Python<'_>, view: &mut PyBuffer, offset: usize) -> Result<NonNull<DLManagedTensorVersioned>> {
    let taken = std::mem::replace(view, PyBuffer::zeroed());
    match describe(&taken, offset) {
        // SAFETY: GIL held; `dims` comes from the view, whose memory `tensor.data` points into.
        Ok((tensor, dims)) => unsafe {
            let readonly = taken.readonly != 0;
            held_buffer::managed_over(py, taken, tensor, dims.into_iter(), readonly)
        },
        Err(err) => {
            let mut taken = taken;
            // SAFETY: GIL held; the view was filled and is released once.
            unsafe { (py.PyBuffer_Release)(&mut taken) };
            Err(err)
        }
    }
}

/// The view as a DLPack tensor (shape and strides in `dims`), or why it has none.
fn describe(view: &PyBuffer, offset: usize) -> Result<(DLTensor, Vec<(i64, i64)>)> {
    // SAFETY: a filled view: its format, shape, strides and suboffsets arrays are NULL or `ndim`
    // long, valid while it is held.
    unsafe {
        let format = NonNull::new(view.format).map(|f| CStr::from_ptr(f.as_ptr()).to_bytes());
        let dtype = array_formats::from_buffer_format(format)?;
        let item = (dtype.bits / 8) as isize;
        if view.itemsize != item {
            return Err(Error::buffer(format!(
                "the buffer's format says {item}-byte items, its itemsize {}",
                view.itemsize
            )));
        }
        let ndim = usize::try_from(view.ndim).unwrap_or(usize::MAX);
        if ndim > MAX_NDIM {
            return Err(Error::buffer(format!("the buffer has {} dimensions (at most {MAX_NDIM})", view.ndim)));
        }
        if !view.suboffsets.is_null() && (0..ndim).any(|i| *view.suboffsets.add(i) >= 0) {
            return Err(Error::buffer("an indirect buffer (suboffsets, PIL-style) has no DLPack layout"));
        }
        let shape: Vec<i64> = match view.shape.is_null() {
            true => vec![(view.len / item.max(1)) as i64; ndim.min(1)],
            false => (0..ndim).map(|i| *view.shape.add(i) as i64).collect(),
        };
        let mut strides = vec![0i64; shape.len()];
        match view.strides.is_null() {
            true => layout::compact_strides(&shape, &mut strides),
            false => {
                let bytes: Vec<i64> = (0..shape.len()).map(|i| *view.strides.add(i) as i64).collect();
                layout::element_strides(&bytes, item as i64, &mut strides)?;
            }
        }
        let tensor = DLTensor {
            data: view.buf,
            device: DLDevice::CPU,
            ndim: shape.len() as i32,
            dtype,
            shape: ptr::null_mut(),
            strides: ptr::null_mut(),
            byte_offset: offset as u64,
        };
        Ok((tensor, shape.into_iter().zip(strides).collect()))
    }
}

/// A compact copy of `object`'s buffer in a new tensor of dlpx's (for `copy=True`, and the one
/// way across for byte strides that are not a whole number of items): `PyBuffer_ToContiguous`
/// gathers any strides.
pub fn copy_of(py: Python<'_>, object: *mut PyObject) -> Result<Option<Tensor>> {
    let Some(mut view) = view_of(py, object)? else { return Ok(None) };
    let copied = copy_view(py, &view);
    // SAFETY: GIL held; the view was filled and is released once.
    unsafe { (py.PyBuffer_Release)(&mut view) };
    copied.map(Some)
}

fn copy_view(py: Python<'_>, view: &PyBuffer) -> Result<Tensor> {
    // SAFETY: a filled view (see `describe`).
    let format = unsafe { NonNull::new(view.format).map(|f| CStr::from_ptr(f.as_ptr()).to_bytes()) };
    let dtype = array_formats::from_buffer_format(format)?;
    let ndim = usize::try_from(view.ndim).ok().filter(|&n| n <= MAX_NDIM).ok_or_else(|| {
        Error::buffer(format!("the buffer has {} dimensions (at most {MAX_NDIM})", view.ndim))
    })?;
    let shape: Vec<i64> = match view.shape.is_null() {
        true => vec![(view.len / view.itemsize.max(1)) as i64; ndim.min(1)],
        // SAFETY: `ndim` extents.
        false => (0..ndim).map(|i| unsafe { *view.shape.add(i) } as i64).collect(),
    };
    let copy = Tensor::empty(&shape, dtype, DLDevice::CPU)?;
    let dst = copy.dl_tensor().data;
    if !dst.is_null() {
        // SAFETY: GIL held; `dst` holds exactly `view.len` bytes (the same items, compact).
        let done = unsafe { (py.PyBuffer_ToContiguous)(dst, view, view.len, b'C' as std::ffi::c_char) };
        if done != 0 {
            return Err(Error::python_pending());
        }
    }
    Ok(copy)
}
