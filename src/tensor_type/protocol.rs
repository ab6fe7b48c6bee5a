//! `dlpx.Tensor.__dlpack__` and `__dlpack_device__`, as the Python array API specifies them,
//! with docs/design.md R7 (versions), R9 (streams) and R10 (copies).

use std::ffi::CStr;

use pyo3_ffi::PyObject;

use super::this;
use crate::abi::*;
use crate::args::{self, FastArgs};
use crate::capsule;
use crate::copy;
use crate::cpython::{GilCell, Python};
use crate::devices;
use crate::error::{Error, Result};
use crate::tensor::Tensor;

pub(super) const DLPACK_DOC: &CStr =
    c"__dlpack__($self, /, *, stream=None, max_version=None, dl_device=None, copy=None, read_only=False)
--

Exports the tensor as a DLPack capsule: 'dltensor_versioned' (DLPack 1.3) when max_version
has major >= 1, the legacy 'dltensor' otherwise. dl_device=(1, 0) asks for CPU memory;
copy=True always copies (the capsule then carries DLPACK_FLAG_BITMASK_IS_COPIED), copy=False
never does and raises BufferError when a copy would be needed. On host memory, stream must be
None (or -1); on CUDA, None/1 (legacy default), 2 (per-thread default), a CUstream, or -1 (no
synchronisation): the consumer's stream then waits on an event recorded on dlpx's stream.
read_only=True marks the capsule DLPACK_FLAG_BITMASK_READ_ONLY (the consumer must not write;
a versioned capsule is needed to say it), as torch's does; a read-only tensor is always so.";
static NAMES: args::Names = args::Names::new(&[c"stream", c"max_version", c"dl_device", c"copy", c"read_only"]);

/// `dlpx.Tensor.__dlpack__`.
pub(super) fn dlpack(py: Python<'_>, object: *mut PyObject, args: FastArgs<'_>) -> Result<*mut PyObject> {
    let [stream, max_version, dl_device, copy, read_only] = args.parse(py, &NAMES, 0)?;
    let tensor = this(py, object)?;
    let device = tensor.dl_tensor().device;
    let versioned = match args::is_none(py, max_version) {
        true => false,
        false => args::int_pair(py, max_version, "max_version")?.0 >= 1,
    };
    let target = match args::is_none(py, dl_device) {
        true => device,
        false => {
            let (t, id) = args::int_pair(py, dl_device, "dl_device")?;
            // DLPack's device fields are int32: a wider value names no device (numpy: the same).
            let field = |value: i64, name: &str| {
                i32::try_from(value).map_err(|_| {
                    Error::new(
                        crate::ErrorKind::OverflowError,
                        format!("dl_device: {name} {value} does not fit DLPack's int32"),
                    )
                })
            };
            DLDevice { device_type: DeviceType(field(t, "device type")?), device_id: field(id, "device id")? }
        }
    };
    let copy = args::optional_bool(py, copy, "copy")?;
    // torch's spelling: True or False (None is refused there too), False when absent.
    let read_only = match read_only {
        absent if absent.is_null() || absent == py.false_ => false,
        flag if flag == py.true_ => true,
        _ => return Err(Error::type_error("read_only must be True or False")),
    };
    if read_only && !versioned {
        return Err(Error::buffer(
            "read_only=True needs a versioned capsule to say so: pass max_version=(1, 0) or later",
        ));
    }
    // A request for another device is refused by export_for below; the stream only means
    // something for the device the capsule will describe.
    let stream = args::stream_value(py, stream, "stream")?;
    let consumer = match target == device || devices::host_accessible(target.device_type) {
        true => devices::consumer_stream(target, stream)?,
        false => None,
    };
    let (exported, copied) = export_for(tensor, target, copy)?;
    if let Some(consumer) = consumer {
        // The consumer's stream waits for what dlpx enqueued on its own (an event, never a
        // device synchronisation).
        devices::order_after(device, crate::stream::current(device), consumer)?;
    }
    // The consumer reads on its stream: when it releases the export, an event there fences
    // the memory's free (no later use of its stream handle, which it may destroy).
    let consumer = consumer.map(|stream| (device, stream));
    let copied_flag = if copied { DLPACK_FLAG_BITMASK_IS_COPIED } else { 0 };
    let read_only_flag = if read_only { DLPACK_FLAG_BITMASK_READ_ONLY } else { 0 };
    if versioned {
        capsule::versioned(py, exported.export_versioned_to(copied_flag | read_only_flag, consumer)?)
    } else {
        // No max_version asks for a legacy capsule: jax.numpy.from_dlpack asks that way, and its
        // users cannot pass one, so each refusal says what such a caller can do.
        if crate::layout::is_padded(exported.dl_tensor().dtype, exported.flags()) {
            return Err(Error::buffer(
                "the tensor is of a padded sub-byte dtype, which a legacy capsule (asked for without \
                 max_version, as jax.numpy.from_dlpack asks) cannot say: only a consumer that passes \
                 max_version=(1, 0) or later can take it",
            ));
        }
        if exported.is_readonly() {
            return Err(Error::buffer(
                "the tensor is read-only, which a legacy capsule (asked for without max_version, as \
                 jax.numpy.from_dlpack asks) cannot say: hand such a consumer a writable copy, \
                 dlpx.from_dlpack(tensor, copy=True), or pass max_version=(1, 0) or later",
            ));
        }
        capsule::legacy(py, exported.export_legacy_to(consumer)?)
    }
}

/// The tensor to export for a request of `target` with `copy` (docs/design.md R10), and whether it is a copy.
fn export_for(tensor: &Tensor, target: DLDevice, copy: Option<bool>) -> Result<(Tensor, bool)> {
    let device = tensor.dl_tensor().device;
    let same_device = target == device;
    if !(same_device || target == DLDevice::CPU) {
        return Err(Error::buffer(format!(
            "cannot export a {} tensor to {}",
            crate::device_names::name(device),
            crate::device_names::name(target)
        )));
    }
    match (same_device, copy) {
        (true, None | Some(false)) => Ok((tensor.clone(), false)),
        (true, Some(true)) => Ok((copy::duplicate(tensor)?, true)),
        (false, Some(false)) => Err(Error::buffer(format!(
            "dl_device={} needs a copy of this {} tensor, and copy=False forbids it",
            crate::device_names::name(target),
            crate::device_names::name(device)
        ))),
        (false, _) => Ok((copy::to_new_cpu_tensor(tensor)?, true)),
    }
}

/// `dlpx.Tensor.__dlpack_device__`.
pub(super) fn dlpack_device(py: Python<'_>, object: *mut PyObject) -> Result<*mut PyObject> {
    let device = this(py, object)?.dl_tensor().device;
    if device == DLDevice::CPU {
        // Consumers ask before every import (torch.from_dlpack does): one shared (1, 0).
        static CPU: GilCell<usize> = GilCell::new();
        let tuple = CPU.get_or_try_init(py, || crate::cpython::int_tuple(py, &[1, 0]).map(|t| t as usize))?;
        // SAFETY: GIL held; the cell keeps its own reference forever.
        unsafe { (py.Py_IncRef)(tuple as *mut PyObject) };
        return Ok(tuple as *mut PyObject);
    }
    crate::cpython::int_tuple(py, &[device.device_type.0 as i64, device.device_id as i64])
}
