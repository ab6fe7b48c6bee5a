//! Reading an object's memory through the buffer protocol (PEP 3118; docs/design.md R12):
//! `bytes`, `bytearray`, `memoryview`, `array.array`, `mmap`, ctypes arrays, pyarrow buffers,
//! anything that exports one. One `PyObject_GetBuffer(PyBUF_RECORDS_RO)`: the format says the
//! dtype (`array_formats`), the byte strides become element strides (refused when not a whole
//! number of items: only a copy can cross then), `readonly` is kept. The view stays held by the
//! managed tensor until its deleter runs (`held_buffer`). The `buffer` row: the last, after DLPack
//! and the array interfaces (docs/design.md R12's order).

use std::ptr::{self, NonNull};

use pyo3_ffi::{PyObject, PyTypeObject};

use crate::abi::*;
use crate::array_formats;
use crate::cpython::buffer::{PyBuffer, PYBUF_RECORDS_RO};
use crate::cpython::Python;
use crate::error::{Error, ErrorKind, Result};
use crate::layout::{self, MAX_NDIM};
use crate::producers::held_buffer::HeldView;
use crate::producers::{synthetic, Answer, Ask, Entry, Handover, Producer, Row};
use crate::tensor::Tensor;

pub static ROW: Row =
    Row { name: "buffer", synthetic: Some(&TABLE), guard: None, suspect: None, home: None, producer: &BufferProtocol };
struct BufferProtocol;
static TABLE: DLPackExchangeAPI = synthetic::table(false);

impl Producer for BufferProtocol {
    /// Every type no row before it claims (it is last): an object that exports no buffer either
    /// is refused at its read, naming every protocol dlpx looked for.
    fn claims(&self, _: Python<'_>, _: *mut PyTypeObject, _: Option<&'static DLPackExchangeAPI>) -> bool {
        true
    }

    fn answer<'py>(&self, py: Python<'py>, object: *mut PyObject, _: Entry, ask: Ask<'_>) -> Answer<'py> {
        match managed_of(py, object) {
            // SAFETY: a managed tensor this read made from the view it checked, valid as made.
            Ok(Some(managed)) => Ok(unsafe { Handover::made(managed) }),
            Ok(None) => on_the_instance(py, object, ask),
            // Strides that are not whole items cross only as a copy, and a copy was asked for.
            Err(err) if ask.request.copy == Some(true) && err.kind == ErrorKind::BufferError => {
                match copy_of(py, object)? {
                    // A copy this read made, marked as one (`copy_of`): not copied again.
                    Some(copy) => {
                        let copy = copy.export_versioned(DLPACK_FLAG_BITMASK_IS_COPIED)?;
                        // SAFETY: an export of dlpx's own tensor, handed over.
                        Ok(unsafe { Handover::managed(copy) })
                    }
                    None => on_the_instance(py, object, ask),
                }
            }
            Err(err) => Err(err),
        }
    }
}

/// An object whose type claims no protocol may still carry one on itself (an attribute set on
/// the instance: numpy looks there too). Only when the buffer failed: the rows of `ROWS` that
/// read a protocol, in its order (R12), asked of the instance instead of its type, each read
/// with its own entry as if its type had claimed the object.
#[cold]
fn on_the_instance<'py>(py: Python<'py>, object: *mut PyObject, ask: Ask<'_>) -> Answer<'py> {
    let carried = |row: &&&'static Row| {
        row.producer.protocol().is_some_and(|name| crate::cpython::attribute(py, object, name).is_some())
    };
    match crate::producers::ROWS.iter().find(carried) {
        Some(&row) => row.producer.answer(py, object, Entry { row, table: row.table(None) }, ask),
        None => Err(speaks_nothing(py, object)),
    }
}

/// The refusal of an object that speaks no protocol dlpx reads.
#[cold]
fn speaks_nothing(py: Python<'_>, object: *mut PyObject) -> Error {
    Error::type_error(format!(
        "{}, nor __cuda_array_interface__, __array_interface__ or the buffer protocol",
        crate::producers::dlpack_call::no_dlpack(py, object)
    ))
}

/// A managed tensor over `object`'s buffer, or None when it exports none; a layout DLPack cannot
/// describe is a BufferError naming it (the view is released then).
pub fn managed_of(py: Python<'_>, object: *mut PyObject) -> Result<Option<NonNull<DLManagedTensorVersioned>>> {
    let Some(mut held) = HeldView::take(py, object, PYBUF_RECORDS_RO)? else { return Ok(None) };
    let (view, dims) = held.parts();
    let tensor = describe(view, 0, dims)?;
    let readonly = view.readonly != 0;
    // SAFETY: the dimensions written describe the view's own memory.
    Ok(Some(unsafe { held.into_managed(tensor, readonly)? }))
}

/// The view as a DLPack tensor, its extents then its element strides written to `dims`, or why
/// it has none.
pub fn describe(view: &PyBuffer, offset: usize, dims: &mut [i64; 2 * MAX_NDIM]) -> Result<DLTensor> {
    let (dtype, ndim) = items(view, dims)?;
    let (shape, strides) = dims.split_at_mut(ndim);
    let strides = &mut strides[..ndim];
    match view.strides.is_null() {
        true => layout::compact_strides(shape, strides),
        // SAFETY: a filled view's strides are `ndim` long, valid while it is held.
        false => unsafe {
            let bytes = (0..ndim).map(|i| *view.strides.add(i) as i64);
            layout::element_strides(bytes, (dtype.bits / 8) as i64, strides)?;
        },
    }
    Ok(DLTensor {
        data: view.buf,
        device: DLDevice::CPU,
        ndim: ndim as i32,
        dtype,
        shape: ptr::null_mut(),
        strides: ptr::null_mut(),
        byte_offset: offset as u64,
    })
}

/// The view's items: their dtype (its format, which its itemsize must agree with), and its
/// dimensions, whose extents are written to the front of `shape`; or why DLPack cannot say them.
fn items(view: &PyBuffer, shape: &mut [i64]) -> Result<(DLDataType, usize)> {
    // SAFETY: a filled view: its format, shape and suboffsets arrays are NULL or `ndim` long,
    // valid while it is held.
    unsafe {
        let dtype = array_formats::from_buffer_format_c(view.format)?;
        let item = (dtype.bits / 8) as isize;
        debug_assert!(item.count_ones() == 1, "a format's items are a power of two bytes");
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
        // A view without shape is one dimension of `len / itemsize` items.
        let ndim = if view.shape.is_null() { ndim.min(1) } else { ndim };
        for (i, extent) in shape[..ndim].iter_mut().enumerate() {
            *extent = match view.shape.is_null() {
                // Items are a power of two bytes: a shift, not a division, for a whole length.
                true if view.len >= 0 => (view.len >> item.trailing_zeros()) as i64,
                true => (view.len / item) as i64,
                false => *view.shape.add(i) as i64,
            };
        }
        Ok((dtype, ndim))
    }
}

/// A compact copy of `object`'s buffer in a new tensor of dlpx's (for `copy=True`, and the one
/// way across for byte strides that are not a whole number of items): `PyBuffer_ToContiguous`
/// gathers any strides.
pub fn copy_of(py: Python<'_>, object: *mut PyObject) -> Result<Option<Tensor>> {
    let Some(held) = HeldView::take(py, object, PYBUF_RECORDS_RO)? else { return Ok(None) };
    let view = held.view();
    let mut shape = [0i64; MAX_NDIM];
    let (dtype, ndim) = items(view, &mut shape)?;
    let shape = &shape[..ndim];
    // A private copy, marked as one: `copy=True` does not copy it again.
    let copy = Tensor::empty_with_flags(shape, dtype, DLDevice::CPU, DLPACK_FLAG_BITMASK_IS_COPIED)?;
    let dst = copy.dl_tensor().data;
    if !dst.is_null() {
        // SAFETY: GIL held; `dst` holds exactly `view.len` bytes (the same items, compact).
        let done = unsafe { (py.PyBuffer_ToContiguous)(dst, view, view.len, b'C' as std::ffi::c_char) };
        if done != 0 {
            return Err(Error::python_pending());
        }
    }
    Ok(Some(copy))
}
