//! CUDA memory through the driver API (cudarc, loaded at run time): device memory ordered on a
//! stream, pinned host memory with reuse, managed memory, and the events that order one stream
//! after another.
//!
//! The library loads where no driver exists: the driver is looked for on first use only, and
//! without it every path fails with "CUDA driver not found". cudarc panics when libcuda lacks a
//! symbol; every caller sits inside the error boundary (or a deleter's catch_unwind).

use std::ffi::c_void;
use std::sync::Mutex;

use cudarc::driver::sys::{self, cudaError_enum, CUcontext, CUdeviceptr, CUstream};
use once_cell::sync::OnceCell;

use crate::error::{Error, ErrorKind, Result};

/// CU_STREAM_LEGACY and CU_STREAM_PER_THREAD, the driver's names for DLPack's stream 1 and 2.
pub const STREAM_LEGACY: usize = 0x1;
pub const STREAM_PER_THREAD: usize = 0x2;

static DEVICE_COUNT: OnceCell<std::result::Result<i32, (ErrorKind, String)>> = OnceCell::new();

/// The number of CUDA devices, initialising the driver on first use.
pub fn device_count(context: &str) -> Result<i32> {
    let count = DEVICE_COUNT.get_or_init(|| {
        // SAFETY: only tries to dlopen libcuda; no symbol is called.
        if !unsafe { sys::is_culib_present() } {
            return Err((ErrorKind::RuntimeError, "CUDA driver not found (libcuda.so could not be loaded)".to_string()));
        }
        // SAFETY: cuInit may be called any number of times from any thread.
        check("cuInit", unsafe { sys::cuInit(0) }).map_err(|e| (e.kind, e.message))?;
        let mut version = 0;
        // SAFETY: a valid out pointer.
        check("cuDriverGetVersion", unsafe { sys::cuDriverGetVersion(&mut version) }).map_err(|e| (e.kind, e.message))?;
        if version < 11020 {
            // cuMemAllocAsync and cuMemFreeAsync arrived in CUDA 11.2.
            return Err((ErrorKind::RuntimeError, format!("the CUDA driver is too old: version {version}, dlpx needs 11.2 or later")));
        }
        let mut count = 0;
        // SAFETY: a valid out pointer after a successful cuInit.
        check("cuDeviceGetCount", unsafe { sys::cuDeviceGetCount(&mut count) }).map_err(|e| (e.kind, e.message))?;
        Ok(count)
    });
    count.clone().map_err(|(kind, message)| Error::new(kind, context, message))
}

/// Whether a CUDA driver is present (without initialising it).
pub fn driver_present() -> bool {
    // SAFETY: only tries to dlopen libcuda.
    unsafe { sys::is_culib_present() }
}

fn check(what: &str, result: sys::CUresult) -> Result<()> {
    if result == cudaError_enum::CUDA_SUCCESS {
        return Ok(());
    }
    let kind = if result == cudaError_enum::CUDA_ERROR_OUT_OF_MEMORY { ErrorKind::MemoryError } else { ErrorKind::RuntimeError };
    Err(Error { kind, message: format!("{what} failed: {result:?}") })
}

fn checked(context: &str, what: &str, result: sys::CUresult) -> Result<()> {
    check(what, result).map_err(|e| Error::new(e.kind, context, e.message))
}

/// The primary context of each device, retained once and kept for the life of the process.
static CONTEXTS: Mutex<Vec<(i32, usize)>> = Mutex::new(Vec::new());

/// The primary context of `device_id`, after checking that the device exists.
pub fn primary_context(context: &str, device_id: i32) -> Result<CUcontext> {
    let count = device_count(context)?;
    if device_id < 0 || device_id >= count {
        return Err(Error::value(context, format!("device cuda:{device_id} does not exist: this machine has {count} CUDA device(s)")));
    }
    let mut contexts = CONTEXTS.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(&(_, ctx)) = contexts.iter().find(|(d, _)| *d == device_id) {
        return Ok(ctx as CUcontext);
    }
    let mut device = 0;
    let mut ctx: CUcontext = std::ptr::null_mut();
    // SAFETY: valid out pointers; the ordinal was checked against the device count.
    unsafe {
        checked(context, "cuDeviceGet", sys::cuDeviceGet(&mut device, device_id))?;
        checked(context, "cuDevicePrimaryCtxRetain", sys::cuDevicePrimaryCtxRetain(&mut ctx, device))?;
    }
    contexts.push((device_id, ctx as usize));
    Ok(ctx)
}

/// Runs `f` with `ctx` current on this thread, restoring the caller's context afterwards.
fn with_context<T>(context: &str, ctx: CUcontext, f: impl FnOnce() -> Result<T>) -> Result<T> {
    /// Pops on drop, so a panic inside `f` (a driver lacking a symbol) leaves no context pushed.
    struct Pushed;
    impl Drop for Pushed {
        fn drop(&mut self) {
            let mut popped: CUcontext = std::ptr::null_mut();
            // SAFETY: pops what `with_context` pushed on this thread.
            unsafe { sys::cuCtxPopCurrent_v2(&mut popped) };
        }
    }
    // SAFETY: a retained primary context; push and pop are paired on this thread.
    unsafe { checked(context, "cuCtxPushCurrent", sys::cuCtxPushCurrent_v2(ctx))? };
    let _pushed = Pushed;
    f()
}

/// `nbytes` of device memory on `device_id`, ordered on `stream` (NULL: the legacy default).
pub fn alloc_device(context: &str, device_id: i32, nbytes: usize, stream: *mut c_void) -> Result<*mut c_void> {
    let ctx = primary_context(context, device_id)?;
    with_context(context, ctx, || {
        let mut ptr: CUdeviceptr = 0;
        // SAFETY: a valid out pointer; the stream belongs to the caller (or is NULL).
        let result = unsafe { sys::cuMemAllocAsync(&mut ptr, nbytes, stream as CUstream) };
        out_of_memory(context, result, nbytes, device_id)?;
        Ok(ptr as *mut c_void)
    })
}

/// Frees device memory on the stream it was allocated on, from any thread.
///
/// # Safety
/// `ptr` came from `alloc_device(device_id, …, stream)` and is not used afterwards.
pub unsafe fn free_device(device_id: i32, ptr: *mut c_void, stream: *mut c_void) -> Result<()> {
    let ctx = primary_context("deleter", device_id)?;
    with_context("deleter", ctx, || {
        // SAFETY: per the contract.
        checked("deleter", "cuMemFreeAsync", unsafe { sys::cuMemFreeAsync(ptr as CUdeviceptr, stream as CUstream) })
    })
}

/// Managed (unified) memory, attached globally.
pub fn alloc_managed(context: &str, nbytes: usize) -> Result<*mut c_void> {
    let ctx = primary_context(context, 0)?;
    with_context(context, ctx, || {
        let mut ptr: CUdeviceptr = 0;
        // SAFETY: a valid out pointer; CU_MEM_ATTACH_GLOBAL = 1.
        let result = unsafe { sys::cuMemAllocManaged(&mut ptr, nbytes, 1) };
        out_of_memory(context, result, nbytes, 0)?;
        Ok(ptr as *mut c_void)
    })
}

/// # Safety
/// `ptr` came from `alloc_managed` and is not used afterwards.
pub unsafe fn free_managed(ptr: *mut c_void) -> Result<()> {
    let ctx = primary_context("deleter", 0)?;
    // SAFETY: per the contract.
    with_context("deleter", ctx, || checked("deleter", "cuMemFree", unsafe { sys::cuMemFree_v2(ptr as CUdeviceptr) }))
}

/// Freed pinned blocks by capacity: cuMemHostAlloc costs about 0.7 ms, so blocks are reused.
static PINNED_CACHE: Mutex<Vec<(usize, usize)>> = Mutex::new(Vec::new());
/// Most bytes of freed pinned memory kept for reuse.
const PINNED_CACHE_BYTES: usize = 256 << 20;

/// The capacity a pinned request of `nbytes` gets (powers of two from 4 KiB, so blocks recycle).
pub fn pinned_capacity(nbytes: usize) -> Option<usize> {
    nbytes.max(4096).checked_next_power_of_two()
}

/// Pinned (page-locked, portable) host memory of `capacity` bytes.
pub fn alloc_pinned(context: &str, capacity: usize) -> Result<*mut c_void> {
    {
        let mut cache = PINNED_CACHE.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(i) = cache.iter().position(|&(c, _)| c == capacity) {
            return Ok(cache.swap_remove(i).1 as *mut c_void);
        }
    }
    let ctx = primary_context(context, 0)?;
    with_context(context, ctx, || {
        let mut ptr: *mut c_void = std::ptr::null_mut();
        // SAFETY: a valid out pointer; CU_MEMHOSTALLOC_PORTABLE = 1 (usable from every context).
        let result = unsafe { sys::cuMemHostAlloc(&mut ptr, capacity, 1) };
        out_of_memory(context, result, capacity, 0)?;
        Ok(ptr)
    })
}

/// # Safety
/// `ptr` came from `alloc_pinned(capacity)` and is not used afterwards.
pub unsafe fn free_pinned(ptr: *mut c_void, capacity: usize) -> Result<()> {
    {
        let mut cache = PINNED_CACHE.lock().unwrap_or_else(|p| p.into_inner());
        let kept: usize = cache.iter().map(|&(c, _)| c).sum();
        if kept + capacity <= PINNED_CACHE_BYTES {
            cache.push((capacity, ptr as usize));
            return Ok(());
        }
    }
    let ctx = primary_context("deleter", 0)?;
    // SAFETY: per the contract.
    with_context("deleter", ctx, || checked("deleter", "cuMemFreeHost", unsafe { sys::cuMemFreeHost(ptr) }))
}

fn out_of_memory(context: &str, result: sys::CUresult, nbytes: usize, device_id: i32) -> Result<()> {
    if result == cudaError_enum::CUDA_ERROR_OUT_OF_MEMORY {
        return Err(Error::memory(context, format!("out of memory allocating {nbytes} bytes on CUDA device {device_id}")));
    }
    checked(context, "CUDA allocation", result)
}

/// Makes `consumer` wait for the work enqueued so far on `producer` (an event, never a device
/// synchronisation). Equal streams need nothing.
pub fn order_after(context: &str, device_id: i32, producer: *mut c_void, consumer: *mut c_void) -> Result<()> {
    let normalise = |s: *mut c_void| if s.is_null() { STREAM_LEGACY } else { s as usize };
    if normalise(producer) == normalise(consumer) {
        return Ok(());
    }
    let ctx = primary_context(context, device_id)?;
    with_context(context, ctx, || {
        let mut event: sys::CUevent = std::ptr::null_mut();
        // SAFETY: valid out pointer and streams of this device; an event may be destroyed as soon
        // as the wait is enqueued (the driver keeps what the wait needs).
        unsafe {
            checked(context, "cuEventCreate", sys::cuEventCreate(&mut event, sys::CUevent_flags::CU_EVENT_DISABLE_TIMING as u32))?;
            let recorded = checked(context, "cuEventRecord", sys::cuEventRecord(event, producer as CUstream));
            let waited = recorded.and_then(|_| {
                checked(context, "cuStreamWaitEvent", sys::cuStreamWaitEvent(consumer as CUstream, event, 0))
            });
            sys::cuEventDestroy_v2(event);
            waited
        }
    })
}

/// Copies `nbytes` from device memory to host memory on `stream`, then waits for that stream
/// (the host reads the result right after).
///
/// # Safety
/// `src` holds `nbytes` readable device bytes on `device_id`; `dst` holds `nbytes` writable bytes.
pub unsafe fn copy_to_host(context: &str, device_id: i32, dst: *mut c_void, src: *const c_void, nbytes: usize, stream: *mut c_void) -> Result<()> {
    let ctx = primary_context(context, device_id)?;
    with_context(context, ctx, || {
        // SAFETY: per the contract.
        unsafe {
            checked(context, "cuMemcpyDtoHAsync", sys::cuMemcpyDtoHAsync_v2(dst, src as CUdeviceptr, nbytes, stream as CUstream))?;
            checked(context, "cuStreamSynchronize", sys::cuStreamSynchronize(stream as CUstream))
        }
    })
}

/// Copies `nbytes` between two allocations of one device, ordered on `stream`.
///
/// # Safety
/// Both regions hold `nbytes` bytes of device memory on `device_id`.
pub unsafe fn copy_device_to_device(context: &str, device_id: i32, dst: *mut c_void, src: *const c_void, nbytes: usize, stream: *mut c_void) -> Result<()> {
    let ctx = primary_context(context, device_id)?;
    with_context(context, ctx, || {
        // SAFETY: per the contract.
        checked(context, "cuMemcpyDtoDAsync", unsafe {
            sys::cuMemcpyDtoDAsync_v2(dst as CUdeviceptr, src as CUdeviceptr, nbytes, stream as CUstream)
        })
    })
}
