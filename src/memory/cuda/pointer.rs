//! What the driver knows of an address: the device memory, pinned host memory or managed
//! memory it lies in, and the device (unified addressing): how a reader of the CUDA array
//! interface, which names no device, finds it.

use std::ffi::{c_int, c_void};

use cudarc::driver::sys::CUdeviceptr;

use super::driver::{self, check};
use crate::error::{Error, Result};

/// CU_POINTER_ATTRIBUTE_MEMORY_TYPE, _IS_MANAGED, _DEVICE_ORDINAL; CU_MEMORYTYPE_HOST.
const MEMORY_TYPE: c_int = 2;
const IS_MANAGED: c_int = 8;
const DEVICE_ORDINAL: c_int = 9;
const MEMORYTYPE_HOST: u32 = 1;

/// The kind of CUDA memory an address lies in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PointerKind {
    Device,
    Pinned,
    Managed,
}

/// The kind and device of the CUDA allocation `address` lies in; an error naming the address
/// for memory the driver did not allocate.
pub fn pointer_device(address: usize) -> Result<(PointerKind, i32)> {
    let driver = driver::get()?;
    let ask = |attribute: c_int, out: *mut c_void| {
        // SAFETY: `out` holds 4 writable bytes, enough for each attribute asked here; the driver
        // answers for any address (unified addressing), needing no current context.
        unsafe { (driver.cuPointerGetAttribute)(out, attribute, address as CUdeviceptr) }
    };
    let mut memory_type = 0u32;
    let code = ask(MEMORY_TYPE, (&mut memory_type as *mut u32).cast());
    if code == driver::CUDA_ERROR_INVALID_VALUE {
        return Err(Error::buffer(format!("address {address:#x} is not CUDA memory the driver knows")));
    }
    check(driver, "cuPointerGetAttribute", code)?;
    // A bool: zeroed first, so a driver writing one byte or four reads the same.
    let mut managed = 0u32;
    check(driver, "cuPointerGetAttribute", ask(IS_MANAGED, (&mut managed as *mut u32).cast()))?;
    let mut ordinal: c_int = 0;
    check(driver, "cuPointerGetAttribute", ask(DEVICE_ORDINAL, (&mut ordinal as *mut c_int).cast()))?;
    let kind = match (managed != 0, memory_type == MEMORYTYPE_HOST) {
        (true, _) => PointerKind::Managed,
        (false, true) => PointerKind::Pinned,
        (false, false) => PointerKind::Device,
    };
    Ok((kind, ordinal))
}
