//! Device names as Python and C++ print them (`cpu:0`, `cuda:1`) and their parsing.

use crate::abi::{DLDevice, DeviceType};

const NAMES: [(DeviceType, &str); 16] = [
    (DeviceType::CPU, "cpu"),
    (DeviceType::CUDA, "cuda"),
    (DeviceType::CUDA_HOST, "cuda_host"),
    (DeviceType::OPENCL, "opencl"),
    (DeviceType::VULKAN, "vulkan"),
    (DeviceType::METAL, "metal"),
    (DeviceType::VPI, "vpi"),
    (DeviceType::ROCM, "rocm"),
    (DeviceType::ROCM_HOST, "rocm_host"),
    (DeviceType::EXT_DEV, "ext_dev"),
    (DeviceType::CUDA_MANAGED, "cuda_managed"),
    (DeviceType::ONEAPI, "oneapi"),
    (DeviceType::WEBGPU, "webgpu"),
    (DeviceType::HEXAGON, "hexagon"),
    (DeviceType::MAIA, "maia"),
    (DeviceType::TRN, "trn"),
];

/// Whether DLPack 1.3 names this device type.
pub fn is_known(device_type: DeviceType) -> bool {
    type_name(device_type).is_some()
}

pub fn type_name(device_type: DeviceType) -> Option<&'static str> {
    NAMES.iter().find(|(t, _)| *t == device_type).map(|(_, n)| *n)
}

/// `cuda:1`, or `device(type=99):0` for a type DLPack does not name.
pub fn name(device: DLDevice) -> String {
    match type_name(device.device_type) {
        Some(n) => format!("{n}:{}", device.device_id),
        None => format!("device(type={}):{}", device.device_type.0, device.device_id),
    }
}

/// Parses `cpu`, `cpu:0`, `cuda:1`; None for anything else.
pub fn parse(text: &str) -> Option<DLDevice> {
    let (kind, id) = match text.split_once(':') {
        Some((kind, id)) => (kind, id.parse::<i32>().ok().filter(|&i| i >= 0)?),
        None => (text, 0),
    };
    let device_type = NAMES.iter().find(|(_, n)| *n == kind).map(|(t, _)| *t)?;
    Some(DLDevice { device_type, device_id: id })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        let cuda1 = DLDevice { device_type: DeviceType::CUDA, device_id: 1 };
        assert_eq!(name(cuda1), "cuda:1");
        assert_eq!(parse("cuda:1"), Some(cuda1));
        assert_eq!(parse("cpu"), Some(DLDevice { device_type: DeviceType::CPU, device_id: 0 }));
        assert_eq!(parse("gpu:0"), None);
        assert_eq!(parse("cuda:-1"), None);
        assert_eq!(name(DLDevice { device_type: DeviceType(99), device_id: 0 }), "device(type=99):0");
    }
}
