//! A device argument as users pass it (docs/python.md, "Arguments"): a name, a `(device_type,
//! device_id)` pair (a `dlpx.Device` is one), or a peer's device, read without importing the
//! peer. `Device.parse` of the Python package calls this too: the one device parser.

use pyo3_ffi::PyObject;

use super::{attribute, by_name, int_attribute, int_pair, peer_names, read_peer, str_attribute, Peer};
use crate::abi::{DLDevice, DeviceType};
use crate::cpython::{imported_module, shown, Interned, Owned, Python};
use crate::device_names;
use crate::error::{Error, Result};

static CLIENT: Interned = Interned::new(c"client");
static COMPUTE_CAPABILITY: Interned = Interned::new(c"compute_capability");
static DLPACK_DEVICE_TYPE: Interned = Interned::new(c"dlpack_device_type");
static HIP: Interned = Interned::new(c"hip");
static ID: Interned = Interned::new(c"id");
static INDEX: Interned = Interned::new(c"index");
static IS_HIP: Interned = Interned::new(c"is_hip");
static LOCAL_HARDWARE_ID: Interned = Interned::new(c"local_hardware_id");
static PLATFORM: Interned = Interned::new(c"platform");
static PLATFORM_VERSION: Interned = Interned::new(c"platform_version");
static TYPE: Interned = Interned::new(c"type");
static VERSION: Interned = Interned::new(c"version");

/// A device argument: a name (`cpu`, `cuda:1`), a `(device_type, device_id)` pair, or a device
/// of one of `PEERS`.
pub fn device(py: Python<'_>, object: *mut PyObject) -> Result<DLDevice> {
    by_name(py, object, "device", device_names::parse, forms).unwrap_or_else(|| not_a_name(py, object))
}

/// The peers whose devices are read (dlpx imports none of them).
static PEERS: [Peer<DLDevice>; 4] = [
    Peer { name: "tvm_ffi", package: "tvm_ffi", mark: &DLPACK_DEVICE_TYPE, read: tvm_ffi },
    Peer { name: "jax", package: "jaxlib", mark: &PLATFORM, read: jax },
    Peer { name: "cupy", package: "cupy", mark: &COMPUTE_CAPABILITY, read: cupy },
    Peer { name: "torch", package: "torch", mark: &TYPE, read: torch },
];

/// What a device may be, for messages.
#[cold]
fn forms() -> String {
    format!(
        "a device is a name ({}; :<id> for another than device 0: cuda:1), a (device_type, device_id) pair, a \
         dlpx.Device, or a {} device",
        device_names::names(),
        peer_names(&PEERS)
    )
}

/// Every form but a name: a pair (any sequence, or one integer for the message), else a peer's.
#[inline(never)]
fn not_a_name(py: Python<'_>, object: *mut PyObject) -> Result<DLDevice> {
    // SAFETY: GIL held; `object` is live.
    if unsafe { (py.PySequence_Check)(object) != 0 || (py.PyIndex_Check)(object) != 0 } {
        let (device_type, device_id) = int_pair(py, object, "device")?;
        return checked(py, object, device_type, device_id);
    }
    if let Some(read) = read_peer(py, object, &PEERS) {
        return read;
    }
    Err(Error::type_error(format!("device={}: {}", shown(py, object), forms())))
}

/// A device type DLPack names and an id that is an i32 and not negative.
fn checked(py: Python<'_>, object: *mut PyObject, device_type: i64, device_id: i64) -> Result<DLDevice> {
    let device_type = i32::try_from(device_type).ok().map(DeviceType).filter(|&t| device_names::is_known(t));
    match (device_type, i32::try_from(device_id)) {
        (Some(device_type), Ok(device_id)) if device_id >= 0 => Ok(DLDevice { device_type, device_id }),
        (None, _) => Err(Error::value(format!(
            "device={}: no device type DLPack names (it names {})",
            shown(py, object),
            device_names::known_range()
        ))),
        _ => Err(Error::value(format!("device={}: the device id is not in 0..=2**31-1", shown(py, object)))),
    }
}

/// tvm_ffi's device: `dlpack_device_type()` and `index`.
fn tvm_ffi(py: Python<'_>, object: *mut PyObject, method: &Owned<'_>) -> Result<DLDevice> {
    // SAFETY: GIL held; the method is live; the new reference is released by `Owned`.
    let device_type = Owned::new(py, unsafe { (py.PyObject_CallObject)(method.as_ptr(), std::ptr::null_mut()) })?;
    let device_type = super::int_value(py, device_type.as_ptr(), "dlpack_device_type()")?;
    let device_id = int_attribute(py, object, &INDEX).ok_or_else(|| unreadable(py, object, "tvm_ffi"))?;
    checked(py, object, device_type, device_id)
}

/// jax's device, read as jax's own `__dlpack_device__` reads an array's: every CPU device is
/// `cpu:0`; a GPU is CUDA or ROCm as its client's `platform_version` says, numbered by
/// `local_hardware_id`, as is a TPU.
fn jax(py: Python<'_>, object: *mut PyObject, platform: &Owned<'_>) -> Result<DLDevice> {
    let platform = py.str_value(platform.as_ptr(), "platform").map_err(|_| unreadable(py, object, "jax"))?;
    let device_type = match platform.as_str() {
        "cpu" => return Ok(DLDevice::CPU),
        "cuda" => DeviceType::CUDA,
        "rocm" => DeviceType::ROCM,
        "tpu" => DeviceType::TPU,
        "gpu" => {
            let client = attribute(py, object, &CLIENT);
            let version = client.and_then(|client| str_attribute(py, client.as_ptr(), &PLATFORM_VERSION));
            match version.as_deref() {
                Some(v) if v.contains("cuda") => DeviceType::CUDA,
                Some(v) if v.contains("rocm") => DeviceType::ROCM,
                _ => return Err(unreadable(py, object, "jax")),
            }
        }
        _ => {
            return Err(Error::value(format!(
                "device={}: jax's platform '{platform}' has no DLPack device",
                shown(py, object)
            )))
        }
    };
    let device_id = int_attribute(py, object, &LOCAL_HARDWARE_ID).ok_or_else(|| unreadable(py, object, "jax"))?;
    checked(py, object, device_type.0.into(), device_id)
}

/// cupy's device: `id`, on CUDA (ROCm where cupy was built for HIP).
fn cupy(py: Python<'_>, object: *mut PyObject, _compute_capability: &Owned<'_>) -> Result<DLDevice> {
    let device_id = int_attribute(py, object, &ID).ok_or_else(|| unreadable(py, object, "cupy"))?;
    let runtime = imported_module(py, c"cupy.cuda.runtime");
    let hip =
        runtime.and_then(|runtime| attribute(py, runtime.as_ptr(), &IS_HIP)).is_some_and(|h| h.as_ptr() == py.true_);
    let device_type = if hip { DeviceType::ROCM } else { DeviceType::CUDA };
    checked(py, object, device_type.0.into(), device_id)
}

/// torch's device types and the DLPack device types torch exports them as (`cuda` is ROCm
/// where torch was built for HIP).
const TORCH_TYPES: [(&str, DeviceType); 5] = [
    ("cpu", DeviceType::CPU),
    ("cuda", DeviceType::CUDA),
    ("xpu", DeviceType::ONEAPI),
    ("mps", DeviceType::METAL),
    ("maia", DeviceType::MAIA),
];

/// torch's device: `type` and `index`. An index of None is 0 on the CPU; elsewhere torch reads
/// it as its current device, which dlpx does not guess.
fn torch(py: Python<'_>, object: *mut PyObject, kind: &Owned<'_>) -> Result<DLDevice> {
    let kind = py.str_value(kind.as_ptr(), "type").map_err(|_| unreadable(py, object, "torch"))?;
    let Some(&(_, mut device_type)) = TORCH_TYPES.iter().find(|(name, _)| *name == kind) else {
        return Err(Error::value(format!("device={}: torch's '{kind}' has no DLPack device", shown(py, object))));
    };
    if device_type == DeviceType::CUDA && torch_is_hip(py) {
        device_type = DeviceType::ROCM;
    }
    let index = attribute(py, object, &INDEX).ok_or_else(|| unreadable(py, object, "torch"))?;
    let device_id = match index.as_ptr() == py.none {
        // torch exports every CPU tensor as CPU 0, whatever index its device names.
        _ if device_type == DeviceType::CPU => 0,
        true => {
            return Err(Error::value(format!(
                "device={}: no index (torch reads it as its current device); name one: '{kind}:0'",
                shown(py, object)
            )))
        }
        false => super::int_value(py, index.as_ptr(), "torch device index")?,
    };
    checked(py, object, device_type.0.into(), device_id)
}

fn torch_is_hip(py: Python<'_>) -> bool {
    let version = imported_module(py, c"torch").and_then(|torch| attribute(py, torch.as_ptr(), &VERSION));
    let hip = version.and_then(|version| attribute(py, version.as_ptr(), &HIP));
    hip.is_some_and(|hip| hip.as_ptr() != py.none)
}

#[cold]
fn unreadable(py: Python<'_>, object: *mut PyObject, peer: &str) -> Error {
    Error::type_error(format!(
        "device={}: looks like a {peer} device, but its attributes do not read as one",
        shown(py, object)
    ))
}
