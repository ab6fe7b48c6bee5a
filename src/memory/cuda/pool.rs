//! Device memory from dlpx's pool per device (freed on its allocation stream after the streams
//! that used it), frees put off while their stream is being captured into a CUDA graph, and
//! managed memory.

use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use cudarc::driver::sys::{CUcontext, CUdeviceptr, CUevent, CUmemoryPool, CUstream};

use super::device::{on_device, out_of_memory, set_up_devices, synchronise_context, with_context, Device, DEVICES};
use super::events::{enqueue_wait, release_fences, wait_for_peer};
use super::same_stream;
use crate::error::Result;
use crate::memory::blocking::blocking;
use crate::memory::driver::{self, check, Driver};
use crate::memory::uses::Uses;

/// `nbytes` of device memory on `device_id`, ordered on `stream` (NULL: the legacy default).
pub fn alloc_device(device_id: i32, nbytes: usize, stream: *mut c_void) -> Result<*mut c_void> {
    on_device(device_id, |driver, state| {
        flush_deferred(driver, state, device_id);
        let mut ptr: CUdeviceptr = 0;
        // SAFETY: a valid out pointer; the stream belongs to the caller (or is NULL).
        let allocate = |ptr: &mut CUdeviceptr| unsafe {
            match state.pool {
                0 => (driver.cuMemAlloc_v2)(ptr, nbytes),
                pool => (driver.cuMemAllocFromPoolAsync)(ptr, nbytes, pool as CUmemoryPool, stream as CUstream),
            }
        };
        let mut code = allocate(&mut ptr);
        if code == driver::CUDA_ERROR_OUT_OF_MEMORY && state.pool != 0 {
            // The pool keeps what dlpx freed: give it back (others may hold the rest) and retry.
            // SAFETY: a pool dlpx created.
            unsafe { (driver.cuMemPoolTrimTo)(state.pool as CUmemoryPool, 0) };
            code = allocate(&mut ptr);
        }
        out_of_memory(driver, code, nbytes, device_id)?;
        Ok(ptr as *mut c_void)
    })
}

/// Frees device memory on the stream it was allocated on, from any thread, after the work
/// enqueued so far on every stream in `uses` (so memory reused from the pool cannot be
/// overwritten while a consumer's stream still reads it).
///
/// # Safety
/// `ptr` came from `alloc_device(device_id, …, stream)` and is not used afterwards.
pub unsafe fn free_device(device_id: i32, ptr: *mut c_void, stream: *mut c_void, uses: Uses) -> Result<()> {
    on_device(device_id, |driver, state| {
        if state.pool == 0 {
            release_fences(driver, &uses.fences);
            // cuMemFree waits for the device's work on the memory itself (without the GIL).
            // SAFETY: per the contract.
            let code = blocking(|| unsafe { (driver.cuMemFree_v2)(ptr as CUdeviceptr) });
            return check(driver, "cuMemFree", code);
        }
        flush_deferred(driver, state, device_id);
        if capturing(driver, stream as usize) {
            // Freed now, the free would become a node of the graph being captured, run again at
            // every replay: put off until the capture ends (as torch's allocator does).
            let deferred = Deferred { device_id, ptr: ptr as usize, stream: stream as usize, uses };
            DEFERRED.lock().unwrap_or_else(|p| p.into_inner()).push(deferred);
            ANY_DEFERRED.store(true, Ordering::Release);
            return Ok(());
        }
        // SAFETY: per the contract.
        unsafe { free_now(driver, state, device_id, ptr as usize, stream as usize, &uses) }
    })
}

/// A free put off while its stream was being captured into a CUDA graph.
struct Deferred {
    device_id: i32,
    ptr: usize,
    stream: usize,
    uses: Uses,
}

static DEFERRED: Mutex<Vec<Deferred>> = Mutex::new(Vec::new());
/// Whether DEFERRED may hold anything (so frees and allocations skip its lock otherwise).
static ANY_DEFERRED: AtomicBool = AtomicBool::new(false);

fn capturing(driver: &Driver, stream: usize) -> bool {
    let mut status = 0;
    // SAFETY: a valid out pointer and a stream of the current context.
    let asked = unsafe { (driver.cuStreamIsCapturing)(stream as CUstream, &mut status) };
    asked == driver::CUDA_SUCCESS && status != 0
}

/// Frees what was put off on `device_id` whose stream is no longer captured (context current).
fn flush_deferred(driver: &Driver, state: &Device, device_id: i32) {
    if !ANY_DEFERRED.load(Ordering::Acquire) {
        return;
    }
    let ready: Vec<Deferred> = {
        let mut deferred = DEFERRED.lock().unwrap_or_else(|p| p.into_inner());
        let (ready, waiting) = std::mem::take(&mut *deferred)
            .into_iter()
            .partition(|d| d.device_id == device_id && !capturing(driver, d.stream));
        *deferred = waiting;
        ANY_DEFERRED.store(!deferred.is_empty(), Ordering::Release);
        ready
    };
    for d in ready {
        // SAFETY: memory dlpx allocated on this device and nobody uses any more.
        if let Err(err) = unsafe { free_now(driver, state, d.device_id, d.ptr, d.stream, &d.uses) } {
            crate::error::set_last_error(&err.at("deleter"));
        }
    }
}

/// Frees pool memory on `stream` after the recorded uses (the device's context is current).
///
/// # Safety
/// `ptr` is pool memory of this device, allocated on `stream`, not used afterwards.
unsafe fn free_now(
    driver: &Driver,
    state: &Device,
    device_id: i32,
    ptr: usize,
    stream: usize,
    uses: &Uses,
) -> Result<()> {
    let waited = uses
        .streams
        .iter()
        .filter(|&&(d, s)| !(d == device_id && same_stream(s, stream)))
        .try_for_each(|&(d, used_on)| match d == device_id {
            true => enqueue_wait(driver, state, used_on, stream),
            false => wait_for_peer(driver, d, used_on, stream),
        })
        .and_then(|()| {
            uses.fences.iter().try_for_each(|f| {
                // SAFETY: a recorded event (of any device) and a stream of this context.
                check(driver, "cuStreamWaitEvent", unsafe {
                    (driver.cuStreamWaitEvent)(stream as CUstream, f.event as CUevent, 0)
                })
            })
        });
    release_fences(driver, &uses.fences);
    if waited.is_err() {
        // A recorded stream is gone (destroyed before the tensor): the memory is still freed,
        // after the whole device is idle rather than never.
        synchronise_context(driver);
    }
    // SAFETY: per the contract.
    check(driver, "cuMemFreeAsync", unsafe { (driver.cuMemFreeAsync)(ptr as CUdeviceptr, stream as CUstream) })
        .and(waited)
}

/// Gives the memory dlpx's pools keep for reuse back to the driver, on every device set up so far.
pub(super) fn trim_pools() -> Result<()> {
    if DEVICES.get().is_none() {
        return Ok(());
    }
    let driver = driver::get()?;
    for (device_id, state) in set_up_devices().filter(|(_, s)| s.pool != 0) {
        with_context(driver, state.context as CUcontext, || {
            flush_deferred(driver, state, device_id);
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
        out_of_memory(driver, code, nbytes, 0)?;
        Ok(ptr as *mut c_void)
    })
}

/// # Safety
/// `ptr` came from `alloc_managed` and is not used afterwards.
pub unsafe fn free_managed(ptr: *mut c_void) -> Result<()> {
    // SAFETY: per the contract.
    on_device(0, |driver, _| check(driver, "cuMemFree", unsafe { (driver.cuMemFree_v2)(ptr as CUdeviceptr) }))
}
