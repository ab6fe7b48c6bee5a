//! The `array_interface` row: objects that describe their memory with numpy's
//! `__array_interface__` (version 3) and speak no DLPack — PIL images, older libraries
//! (docs/design.md R12). The data is a pointer (the import then holds the exporting object) or
//! a buffer (the import holds its view, `offset` bytes in: PIL hands its pixels over as bytes).

use std::ptr::NonNull;

use pyo3_ffi::{PyObject, PyTypeObject};

use crate::abi::*;
use crate::cpython::buffer::PYBUF_SIMPLE;
use crate::cpython::Python;
use crate::error::{Error, Result};
use crate::producers::held::{self, Reference};
use crate::producers::held_buffer::HeldView;
use crate::producers::interface_dict::{self, Data, Interface, Kind};
use crate::producers::{synthetic, Answer, Ask, Entry, Handover, Producer, Row};

pub static ROW: Row = Row {
    name: "array_interface",
    synthetic: Some(&TABLE),
    guard: None,
    suspect: None,
    home: None,
    producer: &ArrayInterface,
};
struct ArrayInterface;
static TABLE: DLPackExchangeAPI = synthetic::table(false);

impl Producer for ArrayInterface {
    fn claims(&self, py: Python<'_>, ty: *mut PyTypeObject, _: Option<&'static DLPackExchangeAPI>) -> bool {
        crate::producers::type_has(py, ty, c"__array_interface__")
    }

    fn protocol(&self) -> Option<&'static std::ffi::CStr> {
        Some(c"__array_interface__")
    }

    fn answer<'py>(&self, py: Python<'py>, object: *mut PyObject, _: Entry, ask: Ask<'_>) -> Answer<'py> {
        let interface = interface_dict::interface_of(py, object, Kind::Host)?;
        match (interface.unaligned.is_some(), ask.request.copy == Some(true)) {
            // SAFETY: an export of dlpx's own tensor, handed over.
            (true, true) => Ok(unsafe { Handover::managed(copied(py, &interface)?) }),
            (true, false) => Err(interface.unaligned.unwrap_or_else(|| Error::buffer("unaligned strides"))),
            // SAFETY: a managed tensor this read made from the interface it checked, valid as made.
            (false, _) => Ok(unsafe { Handover::made(managed_of(py, &interface)?) }),
        }
    }
}

/// A managed tensor over the memory `interface` (whose strides are whole items) describes.
fn managed_of(py: Python<'_>, interface: &Interface<'_>) -> Result<NonNull<DLManagedTensorVersioned>> {
    let ndim = interface.ndim;
    let dims = || interface.shape[..ndim].iter().copied().zip(interface.strides[..ndim].iter().copied());
    let numel = crate::layout::numel(&interface.shape[..ndim])?;
    let mut tensor = DLTensor {
        data: std::ptr::null_mut(),
        device: DLDevice::CPU,
        ndim: ndim as i32,
        dtype: interface.dtype,
        shape: std::ptr::null_mut(),
        strides: std::ptr::null_mut(),
        byte_offset: 0,
    };
    match interface.data {
        Data::Pointer { address, readonly, ref keeper } => {
            if address == 0 && numel > 0 {
                return Err(Error::buffer("__array_interface__: data is NULL for a non-empty array"));
            }
            tensor.data = address as *mut std::ffi::c_void;
            // SAFETY: GIL held; the keeper (the exporting object, or numpy's `__ref`) keeps the
            // memory while the import holds it.
            unsafe { held::managed_holding(py, Reference::to(py, keeper.non_null()), tensor, dims(), readonly) }
        }
        Data::Buffer(ref exporter, offset) => {
            // Its bytes as one run, which the interface's strides index (numpy takes `data` so):
            // a strided buffer's `buf` and `len` say nothing of where its bytes lie.
            let Some(mut held) = HeldView::take(py, exporter.as_ptr(), PYBUF_SIMPLE)? else {
                return Err(Error::buffer("__array_interface__: data is neither (address, read_only) nor a buffer"));
            };
            let (view, out) = held.parts();
            tensor.data = view.buf;
            tensor.byte_offset = offset as u64;
            fits(interface, offset, view.len as usize)?;
            let readonly = view.readonly != 0;
            for (i, (extent, stride)) in dims().enumerate() {
                (out[i], out[ndim + i]) = (extent, stride);
            }
            // SAFETY: the view's memory holds every element (checked just above).
            unsafe { held.into_managed(tensor, readonly) }
        }
    }
}

/// Strides that are no whole number of items: a compact copy, gathered by byte strides, for a
/// request that asked for a copy (the one way such a layout crosses).
#[cold]
fn copied(py: Python<'_>, interface: &Interface<'_>) -> Result<NonNull<DLManagedTensorVersioned>> {
    let ndim = interface.ndim;
    let (shape, byte_strides) = (&interface.shape[..ndim], &interface.byte_strides[..ndim]);
    let copy = match &interface.data {
        // SAFETY: the exporting object, alive for the call, says its memory holds every item.
        Data::Pointer { address, .. } => unsafe {
            crate::copy::gather_bytes(*address as *const u8, shape, byte_strides, interface.dtype)?
        },
        Data::Buffer(exporter, offset) => {
            let Some(held) = HeldView::take(py, exporter.as_ptr(), PYBUF_SIMPLE)? else {
                return Err(Error::buffer("__array_interface__: data is neither (address, read_only) nor a buffer"));
            };
            fits(interface, *offset, held.view().len as usize)?;
            // SAFETY: the view is held for the call and holds every item (checked just above).
            unsafe {
                crate::copy::gather_bytes(
                    held.view().buf.cast::<u8>().add(*offset),
                    shape,
                    byte_strides,
                    interface.dtype,
                )?
            }
        }
    };
    // A copy this read made, marked as one: `copy=True` does not copy it again.
    copy.export_versioned(DLPACK_FLAG_BITMASK_IS_COPIED)
}

/// Refuses an interface whose items reach outside the buffer it names, `offset` bytes into its
/// `len` (hostile input): by element strides, or, where there are none (a layout only a copy
/// takes), by byte strides, the last item whole.
fn fits(interface: &Interface<'_>, offset: usize, len: usize) -> Result<()> {
    let ndim = interface.ndim;
    let shape = &interface.shape[..ndim];
    let bits = interface.dtype.bits as u64;
    let (strides, bits, tail) = match interface.unaligned {
        None => (&interface.strides[..ndim], bits, 0),
        Some(_) => (&interface.byte_strides[..ndim], 8, bits / 8 - 1),
    };
    let reach = crate::layout::reach(shape, strides, bits)
        .map_err(|dim| crate::layout::overflowing_strides(shape, strides, dim, bits))?;
    let (low, high) = (offset as i128 - reach.below as i128, offset as i128 + reach.above as i128 + tail as i128);
    if shape.contains(&0) || (low >= 0 && high <= len as i128) {
        return Ok(());
    }
    Err(Error::buffer(format!("__array_interface__ reaches bytes {low}..{high} of a {len}-byte buffer")))
}
