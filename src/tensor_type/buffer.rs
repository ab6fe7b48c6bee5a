//! `dlpx.Tensor`'s buffer protocol (PEP 3118; docs/design.md R12): host memory of a dtype the
//! protocol can spell, shared with the reader (the view holds a reference to the tensor), read-only
//! where the tensor is. So `memoryview(t)`, `bytes(t)` and numpy's `np.asarray(t)` read it in
//! place.

use std::ffi::c_int;
use std::ptr::{self, NonNull};

use pyo3_ffi::{PyObject, Py_ssize_t};

use super::kept_view::{byte_stride, Whole};
use super::this;
use crate::array_formats;
use crate::cpython::buffer::*;
use crate::cpython::{Python, Raise};
use crate::devices;
use crate::dtype::dtype_name;
use crate::error::{boundary, guard, Error, Result};
use crate::layout;
use crate::memory::cpu;
use crate::tensor::Tensor;

// The tensor's shape (`i64`s) is handed out as the view's `Py_ssize_t`s.
const _: () = assert!(std::mem::size_of::<i64>() == std::mem::size_of::<Py_ssize_t>());

/// Where an empty view points: a buffer's memory is never NULL for its readers.
static NOTHING: u8 = 0;

/// `bf_getbuffer`: fills `view` for `flags`, or raises BufferError (then `view.obj` stays NULL).
pub(super) unsafe extern "C" fn get_buffer(exporter: *mut PyObject, view: *mut PyBuffer, flags: c_int) -> c_int {
    boundary(Raise, "buffer protocol", || {
        // SAFETY: CPython calls bf_getbuffer with the GIL held and a writable view.
        let (py, view) = unsafe { (Python::assume_attached()?, &mut *view) };
        fill(py, exporter, view, flags).map(|()| 0)
    })
}

/// Refuses a layout the reader's `flags` rule out: C order without strides, or the order asked.
fn check_order(shape: &[i64], strides: &[i64], flags: c_int) -> Result<()> {
    let c_order = layout::is_contiguous(shape, strides);
    let f_order = || layout::is_f_contiguous(shape, strides);
    let refused = |order: &str| Err(Error::buffer(format!("the tensor is not {order}-contiguous")));
    if (flags & PYBUF_STRIDES != PYBUF_STRIDES || flags & PYBUF_C_CONTIGUOUS == PYBUF_C_CONTIGUOUS) && !c_order {
        return refused("C");
    }
    if flags & PYBUF_F_CONTIGUOUS == PYBUF_F_CONTIGUOUS && !f_order() {
        return refused("Fortran");
    }
    if flags & PYBUF_ANY_CONTIGUOUS == PYBUF_ANY_CONTIGUOUS && !c_order && !f_order() {
        return refused("C- or Fortran");
    }
    Ok(())
}

/// `bf_releasebuffer`: frees the byte strides `get_buffer` made in a block of their own
/// (CPython releases `view.obj`).
pub(super) unsafe extern "C" fn release_buffer(_exporter: *mut PyObject, view: *mut PyBuffer) {
    // SAFETY: CPython hands back a view `get_buffer` filled.
    if unsafe { (*view).internal.is_null() } {
        return; // no strides of its own (none asked, or the object's kept ones)
    }
    guard("buffer protocol release", || {
        // SAFETY: a view `get_buffer` filled: `internal` is NULL (no strides, or the kept ones)
        // or the block of its `ndim` byte strides, at the capacity `strides_capacity` gives.
        unsafe {
            let view = &mut *view;
            if let (Some(block), Some(capacity)) =
                (NonNull::new(view.internal.cast()), strides_capacity(view.ndim as usize))
            {
                cpu::free(block, capacity);
            }
            view.internal = ptr::null_mut();
        }
    })
}

/// The block holding `ndim` byte strides: one from the per-thread cache, as a tensor's header
/// is (a view is taken on every `np.asarray`; malloc would cost more than the rest of it).
fn strides_capacity(ndim: usize) -> Option<cpu::Capacity> {
    cpu::capacity_for(ndim * std::mem::size_of::<Py_ssize_t>())
}

/// Byte strides in a block of their own, freed by `release_buffer` (`view.internal`).
#[cold]
fn strides_block(strides: &[i64], item: Py_ssize_t) -> Result<*mut Py_ssize_t> {
    let mut bytes = [0 as Py_ssize_t; crate::layout::MAX_NDIM];
    for (i, (&stride, out)) in strides.iter().zip(bytes.iter_mut()).enumerate() {
        *out = byte_stride(stride, item).ok_or_else(|| {
            Error::buffer(format!(
                "strides[{i}] = {stride} elements of {item} bytes does not fit a buffer's Py_ssize_t strides"
            ))
        })?;
    }
    let too_many = || Error::memory("no memory for the buffer's strides");
    let block = strides_capacity(strides.len()).and_then(cpu::alloc).ok_or_else(too_many)?;
    let out = block.as_ptr().cast::<Py_ssize_t>();
    for (i, &stride) in bytes[..strides.len()].iter().enumerate() {
        // SAFETY: the block holds `ndim` Py_ssize_t, aligned (blocks are 16-aligned).
        unsafe { out.add(i).write(stride) };
    }
    Ok(out)
}

fn fill(py: Python<'_>, exporter: *mut PyObject, view: &mut PyBuffer, flags: c_int) -> Result<()> {
    let tensor = this(py, exporter)?;
    // SAFETY: `this` found a dlpx.Tensor with its tensor written.
    let kept = unsafe { super::PyTensor::kept_view(exporter) };
    if let Some(kept) = kept.serving(flags, tensor.is_readonly()) {
        *view = view_of(tensor, exporter, flags, &kept.whole, kept.strides.as_ptr().cast_mut(), ptr::null_mut());
        // SAFETY: GIL held; the view's reference to its exporter, which PyBuffer_Release drops.
        unsafe { (py.Py_IncRef)(exporter) };
        return Ok(());
    }
    let dl = tensor.dl_tensor();
    if !devices::host_accessible(dl.device.device_type) {
        return Err(Error::buffer(format!(
            "the tensor is on {}, not in host memory (read it with __dlpack__ or __cuda_array_interface__)",
            crate::device_names::name(dl.device)
        )));
    }
    let format = array_formats::buffer_format(dl.dtype).ok_or_else(|| {
        Error::buffer(format!(
            "{} has no buffer format (the buffer protocol spells bool, (u)int8-64, float16-64 and complex64/128)",
            dtype_name(dl.dtype)
        ))
    })?;
    if flags & PYBUF_WRITABLE != 0 && tensor.is_readonly() {
        return Err(Error::buffer("the tensor is read-only; a writable buffer was asked for"));
    }
    let (shape, strides) = (tensor.shape(), tensor.strides());
    // A reader that takes strides and asks no order (numpy's and memoryview's PyBUF_FULL_RO)
    // gets any layout: the orders are worked out only for one that asks.
    if flags & PYBUF_STRIDES != PYBUF_STRIDES || flags & PYBUF_ORDERS != 0 {
        check_order(shape, strides, flags)?;
    }
    let item = (dl.dtype.bits / 8) as Py_ssize_t;
    let whole = Whole { len: tensor.numel() as Py_ssize_t * item, format: format.as_ptr().cast_mut() };
    // The object keeps them for a request that takes strides of a tensor that has some.
    let (byte_strides, block) = match flags & PYBUF_STRIDES == PYBUF_STRIDES && !shape.is_empty() {
        true => match kept.keep(whole, strides, item) {
            Some(kept) => (kept, ptr::null_mut()),
            None => {
                let block = strides_block(strides, item)?;
                (block, block)
            }
        },
        false => (ptr::null_mut(), ptr::null_mut()),
    };
    *view = view_of(tensor, exporter, flags, &whole, byte_strides, block);
    // SAFETY: GIL held; the view's reference to its exporter, which PyBuffer_Release drops.
    unsafe { (py.Py_IncRef)(exporter) };
    Ok(())
}

/// The view of `tensor` a request of `flags` gets, its length and format `whole`, its byte
/// strides `strides` (NULL: none asked, or none for 0-d) and `internal` the block they are in
/// when they have one of their own (NULL otherwise): one spelling for the full path and the kept.
#[inline(always)]
fn view_of(
    tensor: &Tensor,
    exporter: *mut PyObject,
    flags: c_int,
    whole: &Whole,
    strides: *mut Py_ssize_t,
    internal: *mut Py_ssize_t,
) -> PyBuffer {
    let dl = tensor.dl_tensor();
    let shape = tensor.shape();
    PyBuffer {
        buf: match dl.data.is_null() {
            true => ptr::addr_of!(NOTHING).cast_mut().cast(),
            // SAFETY: the tensor's first element: data + byte_offset is inside its allocation.
            false => unsafe { dl.data.cast::<u8>().add(dl.byte_offset as usize).cast() },
        },
        obj: exporter,
        len: whole.len,
        itemsize: (dl.dtype.bits / 8) as Py_ssize_t,
        readonly: tensor.is_readonly() as c_int,
        // No shape asked (PyBUF_SIMPLE, PyBUF_WRITABLE): one run of `len` bytes, as
        // PyBuffer_FillInfo and memoryview answer; a reader copies `ndim` extents from `shape`.
        ndim: if flags & PYBUF_ND != 0 { shape.len() as c_int } else { 1 },
        format: if flags & PYBUF_FORMAT != 0 { whole.format } else { ptr::null_mut() },
        shape: if flags & PYBUF_ND != 0 && !shape.is_empty() {
            shape.as_ptr().cast_mut().cast()
        } else {
            ptr::null_mut()
        },
        strides,
        suboffsets: ptr::null_mut(),
        internal: internal.cast(),
    }
}
