//! Copies out of device memory, ordered on a stream.

use std::ffi::c_void;

use cudarc::driver::sys::{CUdeviceptr, CUstream};

use super::device::on_device;
use super::driver::check;
use crate::error::Result;
use crate::memory::blocking::blocking;

/// Copies `nbytes` from device memory to host memory on `stream`, then waits for that stream
/// (the host reads the result right after).
///
/// # Safety
/// `src` holds `nbytes` readable device bytes on `device_id`; `dst` holds `nbytes` writable bytes.
pub unsafe fn copy_to_host(
    device_id: i32,
    dst: *mut c_void,
    src: *const c_void,
    nbytes: usize,
    stream: *mut c_void,
) -> Result<()> {
    on_device(device_id, |driver, _| {
        // SAFETY: per the contract.
        // Into pageable memory the copy itself blocks until the stream drains: all of it runs
        // without the GIL (a host callback queued on the stream may need it).
        blocking(|| unsafe {
            check(
                driver,
                "cuMemcpyDtoHAsync",
                (driver.cuMemcpyDtoHAsync_v2)(dst, src as CUdeviceptr, nbytes, stream as CUstream),
            )?;
            check(driver, "cuStreamSynchronize", (driver.cuStreamSynchronize)(stream as CUstream))
        })
    })
}

/// Copies `nbytes` between two allocations of one device, ordered on `stream`.
///
/// # Safety
/// Both regions hold `nbytes` bytes of device memory on `device_id`.
pub unsafe fn copy_device_to_device(
    device_id: i32,
    dst: *mut c_void,
    src: *const c_void,
    nbytes: usize,
    stream: *mut c_void,
) -> Result<()> {
    on_device(device_id, |driver, _| {
        // SAFETY: per the contract.
        check(driver, "cuMemcpyDtoDAsync", unsafe {
            (driver.cuMemcpyDtoDAsync_v2)(dst as CUdeviceptr, src as CUdeviceptr, nbytes, stream as CUstream)
        })
    })
}

/// Waits on the host, without the GIL, for the work enqueued so far on `stream` (a stream of
/// `device_id`'s context, or a built-in one): before the host reads memory it writes.
pub fn wait_for_stream(device_id: i32, stream: *mut c_void) -> Result<()> {
    on_device(device_id, |driver, _| {
        // SAFETY: a stream of this context (the caller's); the call only waits.
        blocking(|| check(driver, "cuStreamSynchronize", unsafe { (driver.cuStreamSynchronize)(stream as CUstream) }))
    })
}
