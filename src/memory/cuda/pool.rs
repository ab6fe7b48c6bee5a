//! Device memory from the driver: dlpx's pool per device (one request at a time: the retries
//! after an out-of-memory answer are the cache's ladder, `cache::climb`; freed on its
//! allocation stream after the streams that used it, put off while that stream is being
//! captured into a CUDA graph: `deferred`), and managed memory.

use std::ffi::c_void;

use cudarc::driver::sys::{CUcontext, CUdeviceptr, CUmemoryPool, CUstream};

use super::accounting::{reserved, unreserved};
use super::deferred::{capturing, defer, flush, free_now, Deferred, Vouched};
use super::device::{on_device, out_of_memory, set_up_devices, with_context, DeviceState, DEVICES};
use super::driver::{self, check, Driver};
use super::events::release_fences;
use super::uses::Uses;
use crate::error::Result;
use crate::memory::blocking::blocking;

/// One request to the driver for `nbytes` of device memory on `device_id`, the current context's
/// device, ordered on `stream` (NULL: the legacy default): the address (counted, as every driver
/// allocation and free is where the driver is called), or None when the driver is out of memory
/// (the cache's ladder, `cache::climb`, then gives memory back and asks again).
pub(super) fn allocate(
    driver: &Driver,
    state: &DeviceState,
    device_id: i32,
    nbytes: usize,
    stream: *mut c_void,
) -> Result<Option<*mut c_void>> {
    let mut ptr: CUdeviceptr = 0;
    // SAFETY: a valid out pointer; the stream belongs to the caller (or is NULL).
    let code = unsafe {
        match state.pool {
            0 => (driver.cuMemAlloc_v2)(&mut ptr, nbytes),
            pool => (driver.cuMemAllocFromPoolAsync)(&mut ptr, nbytes, pool as CUmemoryPool, stream as CUstream),
        }
    };
    match code {
        driver::CUDA_ERROR_OUT_OF_MEMORY => Ok(None),
        // The caller's current stream there is another device's (`dlpx.cuda.stream(s, device=0)`
        // with a stream made on device 1): said so, the driver's code after.
        driver::CUDA_ERROR_INVALID_CONTEXT
            if !matches!(stream as usize, 0 | driver::STREAM_LEGACY | driver::STREAM_PER_THREAD) =>
        {
            Err(crate::error::Error::runtime(format!(
                "CUDA allocation failed: the current stream {stream:p} of cuda:{device_id} is another device's \
                 (CUDA_ERROR_INVALID_CONTEXT)"
            )))
        }
        _ => check(driver, "CUDA allocation", code).map(|()| {
            reserved(device_id, nbytes);
            Some(ptr as *mut c_void)
        }),
    }
}

/// Gives the pool's free memory back to the driver (nothing where the device has no pool).
pub(super) fn trim(driver: &Driver, state: &DeviceState) {
    if state.pool != 0 {
        // SAFETY: a pool dlpx created.
        unsafe { (driver.cuMemPoolTrimTo)(state.pool as CUmemoryPool, 0) };
    }
}

/// Frees `nbytes` of device memory on the stream it was allocated on, from any thread, after
/// the work enqueued so far on every stream in `uses` (so memory reused from the pool cannot be
/// overwritten while a consumer's stream still reads it).
///
/// # Safety
/// `ptr` is `nbytes` from `allocate` on `device_id`, ordered on `stream`, not used afterwards.
pub unsafe fn driver_free(
    device_id: i32,
    ptr: *mut c_void,
    nbytes: usize,
    stream: *mut c_void,
    uses: Uses,
) -> Result<()> {
    on_device(device_id, |driver, state| {
        if state.pool == 0 {
            release_fences(driver, &uses.fences);
            // cuMemFree waits for the device's work on the memory itself (without the GIL).
            // SAFETY: per the contract.
            let code = blocking(|| unsafe { (driver.cuMemFree_v2)(ptr as CUdeviceptr) });
            return check(driver, "cuMemFree", code).inspect(|()| unreserved(device_id, nbytes));
        }
        // The free of a tensor allocated on `stream`: its owner vouches for it.
        flush(driver, state, device_id, Vouched::Stream(stream as usize));
        if capturing(driver, stream as usize) {
            // Freed now, the free would become a node of the graph being captured, run again at
            // every replay: put off until the capture ends (as torch's allocator does).
            defer(Deferred { device_id, ptr: ptr as usize, nbytes, stream: stream as usize, uses });
            return Ok(());
        }
        // SAFETY: per the contract.
        unsafe { free_now(driver, state, device_id, ptr as usize, nbytes, stream as usize, &uses) }
    })
}

/// Gives the memory dlpx's pools keep for reuse back to the driver, on every device set up so far.
pub(super) fn trim_pools() -> Result<()> {
    if DEVICES.get().is_none() {
        return Ok(());
    }
    let driver = driver::get()?;
    for (device_id, state) in set_up_devices().filter(|(_, s)| s.pool != 0) {
        with_context(driver, state.context as CUcontext, || {
            // `dlpx.cuda.empty_cache()`: what its owner calls before destroying a stream.
            flush(driver, state, device_id, Vouched::Every);
            // SAFETY: a pool dlpx created; trimming keeps memory that is still allocated.
            check(driver, "cuMemPoolTrimTo", unsafe { (driver.cuMemPoolTrimTo)(state.pool as CUmemoryPool, 0) })
        })?;
    }
    Ok(())
}

/// Managed (unified) memory, attached globally.
pub fn alloc_managed(nbytes: usize) -> Result<*mut c_void> {
    on_device(0, |driver, _| {
        let mut ptr: CUdeviceptr = 0;
        // SAFETY: a valid out pointer; CU_MEM_ATTACH_GLOBAL = 1.
        let code = unsafe { (driver.cuMemAllocManaged)(&mut ptr, nbytes, 1) };
        out_of_memory(driver, code, nbytes, "managed memory")?;
        Ok(ptr as *mut c_void)
    })
}

/// # Safety
/// `ptr` came from `alloc_managed` and is not used afterwards.
pub unsafe fn free_managed(ptr: *mut c_void) -> Result<()> {
    // SAFETY: per the contract.
    on_device(0, |driver, _| check(driver, "cuMemFree", unsafe { (driver.cuMemFree_v2)(ptr as CUdeviceptr) }))
}
