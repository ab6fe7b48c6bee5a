//! CUDA memory through the driver API: device memory from a dlpx-owned stream-ordered pool per
//! device, pinned host memory with event-fenced reuse, managed memory, and the events that order
//! one stream after another.
//!
//! The library loads where no driver exists: the driver is looked for on first use only, and
//! without it every path fails with "CUDA driver not found" (see `driver`).

use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use cudarc::driver::sys::{
    CUcontext, CUdevice, CUdeviceptr, CUevent, CUmemAccessDesc, CUmemAccess_flags, CUmemAllocationHandleType,
    CUmemAllocationType, CUmemLocation, CUmemLocationType, CUmemPoolProps, CUmemoryPool, CUstream,
};
use once_cell::sync::OnceCell;

use super::driver::{self, check, Driver};
use crate::error::{Error, Result};

/// CU_STREAM_LEGACY and CU_STREAM_PER_THREAD, the driver's names for DLPack's stream 1 and 2.
pub const STREAM_LEGACY: usize = 0x1;
pub const STREAM_PER_THREAD: usize = 0x2;
/// CU_EVENT_DISABLE_TIMING: ordering events need no timestamps, and are cheaper without.
const EVENT_DISABLE_TIMING: u32 = 0x2;

/// A stream some work on a tensor's memory was ordered on, besides the one it was allocated on:
/// the device of the stream and the stream.
pub type StreamUse = (i32, usize);

/// What a free must wait for, besides the allocation stream's own work: streams recorded as
/// users (an event is recorded on each at the free), and fences, events already recorded where
/// a consumer's work ended (from the device's event pool).
#[derive(Default)]
pub struct Uses {
    pub streams: Vec<StreamUse>,
    pub fences: Vec<Fence>,
}

/// An event recorded on a consumer's stream when its work on the memory was all enqueued.
#[derive(Clone, Copy)]
pub struct Fence {
    pub device_id: i32,
    pub stream: usize,
    pub event: usize,
}

impl Uses {
    /// Fences the work enqueued so far on `stream` of `device_id`: one event per stream, recorded
    /// again for a later use (a later point of one stream covers the earlier ones). False when
    /// the stream is gone (the reason in `dlpx_last_error()`).
    pub fn fence(&mut self, device_id: i32, stream: *mut c_void) -> bool {
        let stream = stream as usize;
        let existing = self.fences.iter().find(|f| f.device_id == device_id && f.stream == stream).map(|f| f.event);
        let recorded = on_device(device_id, |driver, state| match existing {
            // SAFETY: an event of this device's context and a stream of it.
            Some(event) => check(driver, "cuEventRecord", unsafe { (driver.cuEventRecord)(event as CUevent, stream as CUstream) }).map(|()| event),
            None => record_event(driver, state, stream),
        });
        match recorded {
            Ok(event) if existing.is_none() => self.fences.push(Fence { device_id, stream, event }),
            Ok(_) => {}
            Err(err) => {
                crate::error::set_last_error(&err.at("deleter"));
                return false;
            }
        }
        true
    }
}

/// Waits for all work of `device_id` (the fallback when an ordering cannot be made).
pub fn synchronise_device(device_id: i32) {
    let _ = on_device(device_id, |driver, _| {
        synchronise_context(driver);
        Ok(())
    });
}

/// Whether a CUDA driver is present (without initialising it).
pub fn driver_present() -> bool {
    driver::present()
}

/// What dlpx keeps per device: its primary context, and the pool device memory comes from.
struct Device {
    context: usize,
    /// A dlpx-owned pool that keeps freed memory for reuse (release threshold: never), or 0 on a
    /// device without memory pools, where memory comes from cuMemAlloc.
    pool: usize,
    /// Events of this device's context, free for reuse (cuEventCreate/Destroy cost about a
    /// microsecond each; an export to another stream or a pinned free needs one).
    events: Mutex<Vec<usize>>,
}

/// Most free events kept per device.
const EVENT_POOL_SIZE: usize = 64;

static DEVICES: OnceCell<Box<[OnceCell<Device>]>> = OnceCell::new();

/// The state of `device_id`, after checking that the device exists; set up once per device.
fn device(device_id: i32) -> Result<(&'static Driver, &'static Device)> {
    let driver = driver::get()?;
    let count = driver::device_count()?;
    if device_id < 0 || device_id >= count {
        return Err(Error::value(format!("device cuda:{device_id} does not exist: this machine has {count} CUDA device(s)")));
    }
    let devices = DEVICES.get_or_init(|| (0..count).map(|_| OnceCell::new()).collect());
    let cell = &devices[device_id as usize];
    let state = match cell.get() {
        Some(state) => state,
        // Creating a primary context takes a while: without the GIL (see `without_gil`).
        None => crate::memory::blocking::blocking(|| cell.get_or_try_init(|| set_up(driver, device_id)))?,
    };
    Ok((driver, state))
}

fn set_up(driver: &Driver, device_id: i32) -> Result<Device> {
    let mut device: CUdevice = 0;
    let mut ctx: CUcontext = std::ptr::null_mut();
    // SAFETY: valid out pointers; the ordinal was checked against the device count.
    unsafe {
        check(driver, "cuDeviceGet", (driver.cuDeviceGet)(&mut device, device_id))?;
        check(driver, "cuDevicePrimaryCtxRetain", (driver.cuDevicePrimaryCtxRetain)(&mut ctx, device))?;
    }
    let count = driver::device_count()?;
    match with_context(driver, ctx, || Ok(create_pool(driver, device, count))) {
        Ok(pool) => Ok(Device { context: ctx as usize, pool: pool as usize, events: Mutex::new(Vec::new()) }),
        Err(err) => {
            // Not set up: the next request retries from the start, so give the retain back.
            // SAFETY: the retain made above.
            unsafe { (driver.cuDevicePrimaryCtxRelease_v2)(device) };
            Err(err)
        }
    }
}

/// A pool on `device` that never releases freed memory on its own (the default pool's threshold
/// is 0: memory would go back to the driver at every synchronisation), or NULL where the device
/// has no memory pools or the pool cannot be made — cuMemAlloc serves those.
fn create_pool(driver: &Driver, device: CUdevice, device_count: i32) -> CUmemoryPool {
    let mut supported = 0;
    // SAFETY: a valid out pointer and device.
    let asked = unsafe { (driver.cuDeviceGetAttribute)(&mut supported, driver::ATTRIBUTE_MEMORY_POOLS_SUPPORTED, device) };
    if asked != driver::CUDA_SUCCESS || supported == 0 {
        return std::ptr::null_mut();
    }
    let props = CUmemPoolProps {
        allocType: CUmemAllocationType::CU_MEM_ALLOCATION_TYPE_PINNED,
        handleTypes: CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_NONE,
        location: CUmemLocation { type_: CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE, id: device },
        win32SecurityAttributes: std::ptr::null_mut(),
        maxSize: 0,
        usage: 0,
        reserved: [0; 54],
    };
    let mut pool: CUmemoryPool = std::ptr::null_mut();
    let mut threshold = u64::MAX;
    // SAFETY: valid pointers; the attribute takes a cuuint64_t.
    unsafe {
        if (driver.cuMemPoolCreate)(&mut pool, &props) != driver::CUDA_SUCCESS {
            return std::ptr::null_mut();
        }
        // Without the threshold the pool still works, releasing memory at synchronisations.
        let _ = (driver.cuMemPoolSetAttribute)(pool, driver::MEMPOOL_ATTR_RELEASE_THRESHOLD, (&mut threshold as *mut u64).cast());
    }
    grant_peer_access(driver, pool, device, device_count);
    pool
}

/// Lets every device that can reach `device`'s memory reach the pool's: pool memory ignores
/// cuCtxEnablePeerAccess, so without this a kernel on a peer (torch copying between GPUs with
/// peer access on) would fault where cuMemAlloc'd memory works. Best effort: a device that
/// cannot be granted access just reads through copies, as without peer access.
fn grant_peer_access(driver: &Driver, pool: CUmemoryPool, device: CUdevice, device_count: i32) {
    for peer in (0..device_count).filter(|&p| p != device) {
        let mut can = 0;
        // SAFETY: a valid out pointer and two valid ordinals.
        if unsafe { (driver.cuDeviceCanAccessPeer)(&mut can, peer, device) } != driver::CUDA_SUCCESS || can == 0 {
            continue;
        }
        let access = CUmemAccessDesc {
            location: CUmemLocation { type_: CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE, id: peer },
            flags: CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_READWRITE,
        };
        // SAFETY: a pool dlpx created and one valid descriptor.
        let _ = unsafe { (driver.cuMemPoolSetAccess)(pool, &access, 1) };
    }
}

/// Checks that `device_id` exists (and sets it up), for requests that need no memory.
pub fn check_device(device_id: i32) -> Result<()> {
    device(device_id).map(|_| ())
}

/// Runs `f` with `ctx` current on this thread, restoring the caller's context afterwards.
fn with_context<T>(driver: &Driver, ctx: CUcontext, f: impl FnOnce() -> Result<T>) -> Result<T> {
    /// Pops on drop, so an early return or a panic inside `f` leaves no context pushed.
    struct Pushed<'a>(&'a Driver);
    impl Drop for Pushed<'_> {
        fn drop(&mut self) {
            let mut popped: CUcontext = std::ptr::null_mut();
            // SAFETY: pops what `with_context` pushed on this thread.
            unsafe { (self.0.cuCtxPopCurrent_v2)(&mut popped) };
        }
    }
    // SAFETY: a retained primary context; push and pop are paired on this thread.
    unsafe { check(driver, "cuCtxPushCurrent", (driver.cuCtxPushCurrent_v2)(ctx))? };
    let _pushed = Pushed(driver);
    f()
}

/// Waits (without the GIL) for all work of the current context: only where an ordering that
/// should have been an event cannot be made, so that memory is never freed under a reader.
fn synchronise_context(driver: &Driver) {
    // SAFETY: a context is current (callers run inside `with_context`).
    crate::memory::blocking::blocking(|| unsafe { (driver.cuCtxSynchronize)() });
}

/// Runs `f` on `device_id` with its primary context current.
fn on_device<T>(device_id: i32, f: impl FnOnce(&'static Driver, &'static Device) -> Result<T>) -> Result<T> {
    let (driver, state) = device(device_id)?;
    with_context(driver, state.context as CUcontext, || f(driver, state))
}

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
            let code = crate::memory::blocking::blocking(|| unsafe { (driver.cuMemFree_v2)(ptr as CUdeviceptr) });
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
unsafe fn free_now(driver: &Driver, state: &Device, device_id: i32, ptr: usize, stream: usize, uses: &Uses) -> Result<()> {
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
                check(driver, "cuStreamWaitEvent", unsafe { (driver.cuStreamWaitEvent)(stream as CUstream, f.event as CUevent, 0) })
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
pub fn empty_cache() -> Result<()> {
    if DEVICES.get().is_some() {
        let driver = driver::get()?;
        for (device_id, state) in set_up_devices().filter(|(_, s)| s.pool != 0) {
            with_context(driver, state.context as CUcontext, || {
                flush_deferred(driver, state, device_id);
                // SAFETY: a pool dlpx created; trimming keeps memory that is still allocated.
                check(driver, "cuMemPoolTrimTo", unsafe { (driver.cuMemPoolTrimTo)(state.pool as CUmemoryPool, 0) })
            })?;
        }
    }
    empty_pinned_cache()
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

/// A freed pinned block kept for reuse, with the events that mark the end of the work that was
/// enqueued on it (reused only once they have all completed).
struct PinnedBlock {
    capacity: usize,
    ptr: usize,
    fences: Vec<Fence>,
}

/// Freed pinned blocks: cuMemHostAlloc costs about 0.7 ms, so blocks are reused.
static PINNED_CACHE: Mutex<Vec<PinnedBlock>> = Mutex::new(Vec::new());
/// Most bytes of freed pinned memory kept for reuse.
const PINNED_CACHE_BYTES: usize = 256 << 20;

/// The capacity a pinned request of `nbytes` gets (powers of two from 4 KiB, so blocks recycle).
pub fn pinned_capacity(nbytes: usize) -> Option<usize> {
    nbytes.max(4096).checked_next_power_of_two()
}

/// Pinned (page-locked, portable) host memory of `capacity` bytes.
pub fn alloc_pinned(capacity: usize) -> Result<*mut c_void> {
    let driver = driver::get()?;
    if let Some(block) = take_pinned(driver, capacity) {
        return Ok(block as *mut c_void);
    }
    on_device(0, |driver, _| {
        let mut ptr: *mut c_void = std::ptr::null_mut();
        // SAFETY: a valid out pointer; CU_MEMHOSTALLOC_PORTABLE = 1 (usable from every context).
        let code = unsafe { (driver.cuMemHostAlloc)(&mut ptr, capacity, 1) };
        out_of_memory(driver, code, capacity, 0)?;
        Ok(ptr)
    })
}

/// A cached block of `capacity` whose fences have all completed.
fn take_pinned(driver: &Driver, capacity: usize) -> Option<usize> {
    let mut cache = PINNED_CACHE.lock().unwrap_or_else(|p| p.into_inner());
    let index = cache.iter().position(|b| b.capacity == capacity && fences_done(driver, &b.fences))?;
    let block = cache.swap_remove(index);
    drop(cache);
    release_fences(driver, &block.fences);
    Some(block.ptr)
}

fn fences_done(driver: &Driver, fences: &[Fence]) -> bool {
    // SAFETY: events dlpx created and has not destroyed.
    fences.iter().all(|f| unsafe { (driver.cuEventQuery)(f.event as CUevent) } == driver::CUDA_SUCCESS)
}

/// Gives fences' events back to their devices' pools (or to the driver when a pool is full).
fn release_fences(driver: &Driver, fences: &[Fence]) {
    for &Fence { device_id, event, .. } in fences {
        match device_state(device_id) {
            Some(state) => release_event(driver, state, event),
            None => {
                // SAFETY: an event dlpx created, destroyed once.
                unsafe { (driver.cuEventDestroy_v2)(event as CUevent) };
            }
        }
    }
}

/// A set-up device's state (events are only made on those).
fn device_state(device_id: i32) -> Option<&'static Device> {
    DEVICES.get()?.get(usize::try_from(device_id).ok()?)?.get()
}

/// Returns a pinned block to the cache (or to the driver when the cache is full), fenced after
/// the work enqueued so far on the streams in `uses` and on the legacy default stream of every
/// device dlpx has used (which covers every blocking stream: a consumer such as torch copying
/// from the block on its default stream records nothing).
///
/// # Safety
/// `ptr` came from `alloc_pinned(capacity)` and is not used afterwards.
pub unsafe fn free_pinned(ptr: *mut c_void, capacity: usize, uses: &Uses) -> Result<()> {
    let driver = driver::get()?;
    let mut fences = uses.fences.clone();
    let legacy = devices_in_use(driver).map(|device_id| (device_id, STREAM_LEGACY));
    for (device_id, stream) in uses.streams.iter().copied().chain(legacy) {
        let fenced = on_device(device_id, |driver, state| {
            Ok(record_event(driver, state, stream).map_err(|_| {
                // A recorded stream is gone: wait for the device instead of reusing under a reader.
                synchronise_context(driver)
            }))
        });
        if let Ok(Ok(event)) = fenced {
            fences.push(Fence { device_id, stream, event });
        }
    }
    {
        let mut cache = PINNED_CACHE.lock().unwrap_or_else(|p| p.into_inner());
        let kept: usize = cache.iter().map(|b| b.capacity).sum();
        if kept + capacity <= PINNED_CACHE_BYTES {
            cache.push(PinnedBlock { capacity, ptr: ptr as usize, fences });
            return Ok(());
        }
    }
    // The cache is full: wait for the fenced work (without the GIL), then give the block back.
    for &Fence { event, .. } in &fences {
        // SAFETY: an event dlpx created and has not destroyed.
        crate::memory::blocking::blocking(|| unsafe { (driver.cuEventSynchronize)(event as CUevent) });
    }
    release_fences(driver, &fences);
    on_device(0, |driver, _| {
        // SAFETY: per the contract.
        check(driver, "cuMemFreeHost", crate::memory::blocking::blocking(|| unsafe { (driver.cuMemFreeHost)(ptr) }))
    })
}

/// The devices someone works on: dlpx's, and those whose primary context another framework
/// holds (torch copying from a pinned block to cuda:1 retains cuda:1's).
fn devices_in_use(driver: &'static Driver) -> impl Iterator<Item = i32> {
    let count = driver::device_count().unwrap_or(0);
    (0..count).filter(move |&device_id| {
        if device_state(device_id).is_some() {
            return true;
        }
        let (mut flags, mut active) = (0, 0);
        // SAFETY: valid out pointers and ordinal.
        let asked = unsafe { (driver.cuDevicePrimaryCtxGetState)(device_id, &mut flags, &mut active) };
        asked == driver::CUDA_SUCCESS && active != 0
    })
}

/// The devices dlpx has set up so far, with their state.
fn set_up_devices() -> impl Iterator<Item = (i32, &'static Device)> {
    DEVICES.get().into_iter().flat_map(|devices| devices.iter().enumerate().filter_map(|(i, d)| d.get().map(|d| (i as i32, d))))
}

/// Frees every cached pinned block whose fences have completed.
fn empty_pinned_cache() -> Result<()> {
    let driver = driver::get()?;
    let done: Vec<PinnedBlock> = {
        let mut cache = PINNED_CACHE.lock().unwrap_or_else(|p| p.into_inner());
        let (done, pending) = std::mem::take(&mut *cache).into_iter().partition(|b| fences_done(driver, &b.fences));
        *cache = pending;
        done
    };
    if done.is_empty() {
        return Ok(());
    }
    on_device(0, |driver, _| {
        let mut first_error = Ok(());
        for block in &done {
            release_fences(driver, &block.fences);
            // SAFETY: a cached block nobody uses.
            let code = crate::memory::blocking::blocking(|| unsafe { (driver.cuMemFreeHost)(block.ptr as *mut c_void) });
            first_error = first_error.and(check(driver, "cuMemFreeHost", code));
        }
        first_error
    })
}

fn out_of_memory(driver: &Driver, code: i32, nbytes: usize, device_id: i32) -> Result<()> {
    if code == driver::CUDA_ERROR_OUT_OF_MEMORY {
        return Err(Error::memory(format!("out of memory allocating {nbytes} bytes on CUDA device {device_id}")));
    }
    check(driver, "CUDA allocation", code)
}

/// Whether two stream handles name the same stream (NULL is the legacy default stream).
pub fn same_stream(a: usize, b: usize) -> bool {
    let normalise = |s: usize| if s == 0 { STREAM_LEGACY } else { s };
    normalise(a) == normalise(b)
}

/// An event recorded on `stream`, from the device's pool when it has one (the device's context
/// is current).
fn record_event(driver: &Driver, state: &Device, stream: usize) -> Result<usize> {
    let pooled = state.events.lock().unwrap_or_else(|p| p.into_inner()).pop();
    let event = match pooled {
        Some(event) => event,
        None => {
            let mut event: CUevent = std::ptr::null_mut();
            // SAFETY: a valid out pointer, with the device's context current.
            check(driver, "cuEventCreate", unsafe { (driver.cuEventCreate)(&mut event, EVENT_DISABLE_TIMING) })?;
            event as usize
        }
    };
    // SAFETY: an event of the current context and a stream of its device.
    if let Err(err) = check(driver, "cuEventRecord", unsafe { (driver.cuEventRecord)(event as CUevent, stream as CUstream) }) {
        release_event(driver, state, event);
        return Err(err);
    }
    Ok(event)
}

/// Returns an event to its device's pool. Re-recording it later does not disturb waits already
/// enqueued: a wait uses the record current when the wait was enqueued.
fn release_event(driver: &Driver, state: &Device, event: usize) {
    let mut pool = state.events.lock().unwrap_or_else(|p| p.into_inner());
    if pool.len() < EVENT_POOL_SIZE {
        pool.push(event);
        return;
    }
    drop(pool);
    // SAFETY: an event dlpx created, destroyed once.
    unsafe { (driver.cuEventDestroy_v2)(event as CUevent) };
}

/// Makes `consumer` wait for the work enqueued so far on `producer` (current context's device).
fn enqueue_wait(driver: &Driver, state: &Device, producer: usize, consumer: usize) -> Result<()> {
    let event = record_event(driver, state, producer)?;
    // SAFETY: an event just recorded and a stream (any device may wait on it).
    let waited = check(driver, "cuStreamWaitEvent", unsafe { (driver.cuStreamWaitEvent)(consumer as CUstream, event as CUevent, 0) });
    release_event(driver, state, event);
    waited
}

/// Makes `consumer` (a stream of the current context's device) wait for the work enqueued so far
/// on `producer`, a stream of peer device `peer` (a kernel there reading this device's memory):
/// the event is recorded in the peer's context; a wait may cross devices.
fn wait_for_peer(driver: &Driver, peer: i32, producer: usize, consumer: usize) -> Result<()> {
    let (peer_state, event) = on_device(peer, |driver, peer_state| {
        Ok((peer_state, record_event(driver, peer_state, producer)?))
    })?;
    // SAFETY: a recorded event and a stream of the current context.
    let waited = check(driver, "cuStreamWaitEvent", unsafe { (driver.cuStreamWaitEvent)(consumer as CUstream, event as CUevent, 0) });
    release_event(driver, peer_state, event);
    waited
}

/// Makes `consumer` wait for the work enqueued so far on `producer` (an event, never a device
/// synchronisation). Equal streams need nothing.
pub fn order_after(device_id: i32, producer: *mut c_void, consumer: *mut c_void) -> Result<()> {
    if same_stream(producer as usize, consumer as usize) {
        return Ok(());
    }
    on_device(device_id, |driver, state| enqueue_wait(driver, state, producer as usize, consumer as usize))
}

/// Copies `nbytes` from device memory to host memory on `stream`, then waits for that stream
/// (the host reads the result right after).
///
/// # Safety
/// `src` holds `nbytes` readable device bytes on `device_id`; `dst` holds `nbytes` writable bytes.
pub unsafe fn copy_to_host(device_id: i32, dst: *mut c_void, src: *const c_void, nbytes: usize, stream: *mut c_void) -> Result<()> {
    on_device(device_id, |driver, _| {
        // SAFETY: per the contract.
        // Into pageable memory the copy itself blocks until the stream drains: all of it runs
        // without the GIL (a host callback queued on the stream may need it).
        crate::memory::blocking::blocking(|| unsafe {
            check(driver, "cuMemcpyDtoHAsync", (driver.cuMemcpyDtoHAsync_v2)(dst, src as CUdeviceptr, nbytes, stream as CUstream))?;
            check(driver, "cuStreamSynchronize", (driver.cuStreamSynchronize)(stream as CUstream))
        })
    })
}

/// Copies `nbytes` between two allocations of one device, ordered on `stream`.
///
/// # Safety
/// Both regions hold `nbytes` bytes of device memory on `device_id`.
pub unsafe fn copy_device_to_device(device_id: i32, dst: *mut c_void, src: *const c_void, nbytes: usize, stream: *mut c_void) -> Result<()> {
    on_device(device_id, |driver, _| {
        // SAFETY: per the contract.
        check(driver, "cuMemcpyDtoDAsync", unsafe {
            (driver.cuMemcpyDtoDAsync_v2)(dst as CUdeviceptr, src as CUdeviceptr, nbytes, stream as CUstream)
        })
    })
}
