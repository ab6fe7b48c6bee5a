//! Host memory: CPU tensors (data in the allocation block), and reading memory the host reaches
//! directly (ROCm's pinned host memory dlpx imported).

use std::ffi::c_void;

use super::{Device, Memory, Uses};
use crate::abi::{DLDevice, DeviceType};
use crate::error::{Error, Result};

pub struct Host;
pub static HOST: Host = Host;
pub const TYPES: &[DeviceType] = &[DeviceType::CPU, DeviceType::ROCM_HOST];

impl Device for Host {
    fn allocates(&self) -> &'static [DeviceType] {
        &[DeviceType::CPU]
    }

    fn host_accessible(&self, _: DeviceType) -> bool {
        true
    }

    fn data_in_block(&self) -> bool {
        true
    }

    fn check(&self, device: DLDevice) -> Result<()> {
        match device.device_id {
            0 => Ok(()),
            _ => Err(super::only_device_zero(device)),
        }
    }

    fn allocate(&self, _: DLDevice, _: usize) -> Result<Memory> {
        unreachable!("host data lives in the allocation block")
    }

    unsafe fn free(&self, _: DLDevice, _: &Memory, _: Uses) -> Result<()> {
        Ok(())
    }

    fn can_copy(&self, _: DLDevice, to: DLDevice) -> bool {
        super::host_accessible(to.device_type)
    }

    unsafe fn copy(&self, _: DLDevice, _: DLDevice, dst: *mut c_void, src: *const c_void, nbytes: usize) -> Result<()> {
        // SAFETY: per the contract, both regions are host-readable and -writable; they do not
        // overlap (the destination is a fresh tensor).
        unsafe { std::ptr::copy_nonoverlapping(src.cast::<u8>(), dst.cast::<u8>(), nbytes) };
        Ok(())
    }

    /// Host memory has nothing to order: no stream but "none" (or -1, as torch passes).
    fn consumer_stream(&self, device: DLDevice, value: Option<i64>) -> Result<Option<*mut c_void>> {
        match value {
            None | Some(-1) => Ok(None),
            Some(v) => Err(Error::value(format!(
                "stream must be None for a {} tensor, got {v}",
                crate::device_names::name(device)
            ))),
        }
    }
}
