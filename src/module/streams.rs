//! The module's functions behind `dlpx.cuda`: the calling thread's current streams, the streams
//! that used a tensor's memory, and the memory kept for reuse.

use std::ffi::c_void;

use pyo3_ffi::PyObject;

use crate::abi::*;
use crate::args::{self, FastArgs, Names};
use crate::cpython::{Owned, Python};
use crate::devices;
use crate::error::{Error, Result};

static STREAM_NAMES: Names = Names::with_positional_only(&[c"device_type", c"device_id", c"stream"], 3);
static RECORD_NAMES: Names = Names::with_positional_only(&[c"tensor", c"device_id", c"stream"], 3);

fn stream_device(py: Python<'_>, device_type: *mut PyObject, device_id: *mut PyObject) -> Result<DLDevice> {
    if device_type.is_null() || device_id.is_null() {
        return Err(Error::type_error("expected (device_type, device_id, ...)"));
    }
    let device_type = args::int_value(py, device_type, "device_type")?;
    let device_id = args::int_value(py, device_id, "device_id")?;
    match (i32::try_from(device_type), i32::try_from(device_id)) {
        (Ok(t), Ok(id)) if id >= 0 => Ok(DLDevice { device_type: DeviceType(t), device_id: id }),
        _ => Err(Error::value(format!("invalid device ({device_type}, {device_id})"))),
    }
}

/// `_set_current_stream(device_type, device_id, handle) -> previous handle` (0: the default).
pub(super) fn set_current_stream(py: Python<'_>, _module: *mut PyObject, args: FastArgs<'_>) -> Result<*mut PyObject> {
    let [device_type, device_id, stream] = args.parse(py, &STREAM_NAMES, 3)?;
    let device = stream_device(py, device_type, device_id)?;
    devices::check_stream_settable(device)?;
    let handle = args::stream_value(py, stream, "stream")?.unwrap_or(0);
    let previous = crate::stream::set_current(device, handle as usize as *mut c_void)?;
    py.new_uint(previous as usize as u64)
}

/// `_current_stream(device_type, device_id) -> handle` (0: the default stream).
pub(super) fn current_stream(py: Python<'_>, _module: *mut PyObject, args: FastArgs<'_>) -> Result<*mut PyObject> {
    let [device_type, device_id, _] = args.parse(py, &STREAM_NAMES, 2)?;
    let device = stream_device(py, device_type, device_id)?;
    py.new_uint(crate::stream::current(device) as usize as u64)
}

/// `_record_stream(tensor, device_id, handle)`: see `dlpx.cuda.record_stream`.
pub(super) fn record_stream(py: Python<'_>, _module: *mut PyObject, args: FastArgs<'_>) -> Result<*mut PyObject> {
    let [tensor, device_id, stream] = args.parse(py, &RECORD_NAMES, 3)?;
    if tensor.is_null() {
        return Err(Error::type_error("missing required argument 'tensor'"));
    }
    let tensor = crate::tensor_type::tensor_of(py, tensor).ok_or_else(|| {
        Error::type_error(format!("expected a dlpx.Tensor, got {}", crate::cpython::type_name(py, tensor)))
    })?;
    let device_id = args::int_value(py, device_id, "device")?;
    let device_id = i32::try_from(device_id)
        .ok()
        .filter(|d| *d >= 0)
        .ok_or_else(|| Error::value(format!("device {device_id} is invalid")))?;
    devices::check_exists(DLDevice { device_type: DeviceType::CUDA, device_id })?;
    let handle = args::int_value(py, stream, "stream")?;
    tensor.record_stream(device_id, handle as usize as *mut c_void);
    Ok(py.new_none())
}

/// `_empty_cache()`: the memory dlpx keeps for reuse goes back to the driver. Without a driver
/// dlpx keeps none, and there is nothing to do (as `torch.cuda.empty_cache()` does nothing; C's
/// `dlpx_cuda_empty_cache` says "CUDA driver not found").
pub(super) fn empty_cache(py: Python<'_>, _module: *mut PyObject) -> Result<*mut PyObject> {
    if devices::driver_present() {
        devices::empty_cache()?;
    }
    Ok(py.new_none())
}

/// `_cuda_memory_stats(device_id) -> dict`: see `dlpx.cuda.memory_stats`. Without a driver, an
/// empty dict, as `torch.cuda.memory_stats()` answers without CUDA.
pub(super) fn cuda_memory_stats(
    py: Python<'_>,
    _module: *mut PyObject,
    device_id: *mut PyObject,
) -> Result<*mut PyObject> {
    let device_id = args::int_value(py, device_id, "device")?;
    let device_id = i32::try_from(device_id).map_err(|_| Error::value(format!("device {device_id} is invalid")))?;
    let dict = Owned::new(py, py.new_dict()?)?;
    if !devices::driver_present() {
        return Ok(dict.into_ptr());
    }
    let stats = devices::memory_stats(DLDevice { device_type: DeviceType::CUDA, device_id })?;
    for (name, value) in stats.entries() {
        super::tables::set(py, &dict, name, py.new_uint(value)?)?;
    }
    Ok(dict.into_ptr())
}

/// `_cuda_driver_present()`.
pub(super) fn cuda_driver_present(py: Python<'_>, _module: *mut PyObject) -> Result<*mut PyObject> {
    Ok(py.new_bool(devices::driver_present()))
}
