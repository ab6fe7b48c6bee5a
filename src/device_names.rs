//! Device names as Python and C++ print them (`cpu:0`, `cuda:1`) and their parsing; the type
//! names come from the table in `abi/enums.rs`.

use crate::abi::{name_number, DLDevice, DeviceType};
use crate::error::Error;

/// Whether DLPack names this device type (1.3, or its main branch after 1.3).
pub fn is_known(device_type: DeviceType) -> bool {
    type_name(device_type).is_some()
}

pub fn type_name(device_type: DeviceType) -> Option<&'static str> {
    device_type.row().map(|row| row.name)
}

/// The span of device types DLPack names, for messages: `1..=21`.
pub fn known_range() -> String {
    let values = DeviceType::TABLE.iter().map(|row| row.value.0);
    format!("{}..={}", values.clone().min().unwrap_or(0), values.max().unwrap_or(0))
}

/// The refusal of a device type DLPack does not name: `unknown device type 99 (DLPack names 1..=21)`.
pub fn unknown(device_type: DeviceType) -> Error {
    Error::value(format!("unknown device type {} (DLPack names {})", device_type.0, known_range()))
}

/// The refusal of a negative device index: `device_id = -1 is negative`.
pub fn negative_id(device_id: i32) -> Error {
    Error::value(format!("device_id = {device_id} is negative"))
}

/// Every device type name [`parse`] reads, for messages: `cpu, cuda, cuda_host, …`.
pub fn names() -> String {
    DeviceType::TABLE.iter().map(|row| row.name).collect::<Vec<_>>().join(", ")
}

/// `cuda:1`, or `device(type=99):0` for a type DLPack does not name.
pub fn name(device: DLDevice) -> String {
    match type_name(device.device_type) {
        Some(n) => format!("{n}:{}", device.device_id),
        None => format!("device(type={}):{}", device.device_type.0, device.device_id),
    }
}

/// Parses `cpu`, `cpu:0`, `cuda:1`; None for anything else (`cpu:`, `cuda:01`, `cuda:+1`,
/// `cpu\0xyz`: names are exact).
pub fn parse(text: &str) -> Option<DLDevice> {
    let (kind, id) = match text.split_once(':') {
        Some((kind, id)) => (kind, i32::try_from(name_number(id)?).ok()?),
        None => (text, 0),
    };
    let device_type = DeviceType::TABLE.iter().find(|row| row.name == kind)?.value;
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
        assert_eq!(parse("cpu"), Some(DLDevice::CPU));
        assert_eq!(parse("gpu:0"), None);
        assert_eq!(parse("cuda:-1"), None);
        for refused in ["cpu:", "cuda:01", "cuda:+1", "cuda: 1", "cpu\0xyz", "cpu:0\0", ":0", "CPU", "cuda:2147483648"]
        {
            assert_eq!(parse(refused), None, "{refused:?}");
        }
        assert_eq!(parse("cuda:2147483647").map(|d| d.device_id), Some(i32::MAX));
        assert_eq!(name(DLDevice { device_type: DeviceType(99), device_id: 0 }), "device(type=99):0");
        assert_eq!(parse("tpu_host:0"), Some(DLDevice { device_type: DeviceType::TPU_HOST, device_id: 0 }));
        assert!(is_known(DeviceType::ASCEND) && !is_known(DeviceType(5)));
    }
}
