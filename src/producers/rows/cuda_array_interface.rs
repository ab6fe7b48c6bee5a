//! The `cuda_array_interface` row: objects that describe CUDA memory with
//! `__cuda_array_interface__` (versions 2 and 3) and speak no DLPack — numba's device arrays,
//! pycuda, older libraries (docs/design.md R12). The interface names a pointer, not a device: the
//! driver says which (`devices::device_of_address`). Version 3's `stream` is the producer's: dlpx's
//! current stream on the device waits on it (an event, never a device synchronisation), as the
//! interface asks of a consumer. The import holds the exporting object.

use std::ffi::c_void;

use pyo3_ffi::{PyObject, PyTypeObject};

use crate::abi::*;
use crate::cpython::Python;
use crate::devices;
use crate::error::{Error, Result};
use crate::producers::held::{self, Reference};
use crate::producers::interface_dict::{self, Data, Kind};
use crate::producers::{synthetic, Answer, Ask, Entry, Handover, Producer, Row};

pub static ROW: Row = Row {
    name: "cuda_array_interface",
    synthetic: Some(&TABLE),
    guard: None,
    suspect: None,
    home: None,
    producer: &CudaArrayInterface,
};
struct CudaArrayInterface;
static TABLE: DLPackExchangeAPI = synthetic::table(false);

impl Producer for CudaArrayInterface {
    fn claims(&self, py: Python<'_>, ty: *mut PyTypeObject, _: Option<&'static DLPackExchangeAPI>) -> bool {
        crate::producers::type_has(py, ty, c"__cuda_array_interface__")
    }

    fn protocol(&self) -> Option<&'static std::ffi::CStr> {
        Some(c"__cuda_array_interface__")
    }

    fn answer<'py>(&self, py: Python<'py>, object: *mut PyObject, _: Entry, _: Ask<'_>) -> Answer<'py> {
        let interface = interface_dict::interface_of(py, object, Kind::Cuda)?;
        if let Some(unaligned) = interface.unaligned {
            return Err(unaligned); // device memory: dlpx gathers host items only
        }
        let Data::Pointer { address, readonly, ref keeper } = interface.data else {
            return Err(Error::buffer("__cuda_array_interface__: data must be (address, read_only)"));
        };
        let ndim = interface.ndim;
        let empty = crate::layout::numel(&interface.shape[..ndim])? == 0;
        let device = match (address, empty) {
            // An empty array may have no memory — NULL, or the end of an allocation (an empty
            // tail slice `a[n:]`), which the driver may not know: it is on the first device, as
            // numba puts it, unless its pointer says another.
            (0, true) => FIRST_DEVICE,
            (0, false) => return Err(Error::buffer("__cuda_array_interface__: data is NULL for a non-empty array")),
            (_, true) => devices::device_of_address(address).unwrap_or(FIRST_DEVICE),
            (_, false) => devices::device_of_address(address)?,
        };
        if let Some(stream) = interface.stream {
            wait_for(device, stream)?;
        }
        let tensor = DLTensor {
            data: address as *mut c_void,
            device,
            ndim: ndim as i32,
            dtype: interface.dtype,
            shape: std::ptr::null_mut(),
            strides: std::ptr::null_mut(),
            byte_offset: 0,
        };
        let dims = interface.shape[..ndim].iter().copied().zip(interface.strides[..ndim].iter().copied());
        // SAFETY: GIL held; the keeper (the exporting object) keeps its memory while the import
        // holds it; a managed tensor this read made from the interface it checked, valid as made.
        unsafe {
            Ok(Handover::made(held::managed_holding(py, Reference::to(py, keeper.non_null()), tensor, dims, readonly)?))
        }
    }
}

/// Where an empty array whose pointer names no device is.
const FIRST_DEVICE: DLDevice = DLDevice { device_type: DeviceType::CUDA, device_id: 0 };

/// The reader waits for the producer's `stream` (1 the legacy default stream, 2 the per-thread
/// one, else a handle: the values are the driver's own handles): dlpx's current stream on
/// `device` for device memory; the host for pinned or managed memory, which it reads directly
/// (numba's mapped arrays: ruling R12's consumer is the host there).
fn wait_for(device: DLDevice, stream: i64) -> Result<()> {
    let producer = usize::try_from(stream)
        .map_err(|_| Error::buffer(format!("__cuda_array_interface__: stream {stream} is not a stream")))?;
    devices::order_reader_after(device, producer as *mut c_void)
}
