//! Pinned host memory: cuMemHostAlloc costs about 0.7 ms, so freed blocks are kept by
//! power-of-two capacity and reused once the work enqueued on them has completed.

use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use cudarc::driver::sys::CUevent;

use super::device::{devices_in_use, on_device, out_of_memory, synchronise_device};
use super::driver::{self, check, wait_for, Driver, Wait, STREAM_LEGACY};
use super::events::{fences_done, record_event, release_fences};
use super::uses::{Fence, Uses};
use crate::error::Result;
use crate::memory::blocking::blocking;

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

/// Pinned blocks freed while a capture dlpx knows of may be underway (`deferred::any`): no event
/// is recorded or queried then (one on the legacy stream breaks the capture of a blocking
/// stream), so they are not kept for reuse, and go back to the driver once no capture is known,
/// after the devices finished their work (at the next pinned allocation or free, or a release).
static UNFENCED: Mutex<Vec<usize>> = Mutex::new(Vec::new());
/// Whether UNFENCED may hold a block (so a pinned allocation or free skips its lock otherwise).
static ANY_UNFENCED: AtomicBool = AtomicBool::new(false);

/// Whether a capture dlpx knows of may be underway (docs/cuda.md, "Graphs").
fn capture_known() -> bool {
    super::deferred::any()
}

/// Gives back the blocks freed during a capture, once none is known; the devices in use are
/// synchronised first, as nothing fences those blocks.
fn free_unfenced(driver: &'static Driver, wait: Wait) -> Result<()> {
    if !ANY_UNFENCED.load(Ordering::Acquire) || capture_known() {
        return Ok(());
    }
    let blocks = {
        let mut unfenced = UNFENCED.lock().unwrap_or_else(|p| p.into_inner());
        ANY_UNFENCED.store(false, Ordering::Release);
        std::mem::take(&mut *unfenced)
    };
    let mut first_error = Ok(());
    for device_id in devices_in_use(driver) {
        first_error = first_error.and(on_device(device_id, |driver, _| {
            // SAFETY: the device's context is current.
            check(driver, "cuCtxSynchronize", wait_for(wait, || unsafe { (driver.cuCtxSynchronize)() }))
        }));
    }
    let freed = on_device(0, |driver, _| {
        // Every block is freed; the first failure is the answer.
        let mut first = Ok(());
        for &ptr in &blocks {
            // SAFETY: a pinned block freed by its tensor, unused since, its device work done.
            let code = wait_for(wait, || unsafe { (driver.cuMemFreeHost)(ptr as *mut c_void) });
            first = first.and(check(driver, "cuMemFreeHost", code));
        }
        first
    });
    first_error.and(freed)
}

/// The capacity a pinned request of `nbytes` gets (powers of two from 4 KiB, so blocks recycle).
pub fn pinned_capacity(nbytes: usize) -> Option<usize> {
    nbytes.max(4096).checked_next_power_of_two()
}

/// Pinned (page-locked, portable) host memory of `capacity` bytes.
pub fn alloc_pinned(capacity: usize) -> Result<*mut c_void> {
    let driver = driver::get()?;
    free_unfenced(driver, Wait::Hooked)?;
    if let Some(block) = take_pinned(driver, capacity) {
        return Ok(block as *mut c_void);
    }
    let host_alloc = || {
        on_device(0, |driver, _| {
            let mut ptr: *mut c_void = std::ptr::null_mut();
            // SAFETY: a valid out pointer; CU_MEMHOSTALLOC_PORTABLE = 1 (usable from every context).
            let code = unsafe { (driver.cuMemHostAlloc)(&mut ptr, capacity, 1) };
            Ok((code, ptr))
        })
    };
    let (mut code, mut ptr) = host_alloc()?;
    // A free that failed while giving the cache back does not replace the out-of-memory error.
    if code == driver::CUDA_ERROR_OUT_OF_MEMORY && empty_pinned_cache(Wait::Hooked).map_or(true, |freed| freed > 0) {
        // Out of page-locked memory: the cached blocks of other sizes went back, try once more
        // (as a device allocation does after giving its idle blocks back).
        (code, ptr) = host_alloc()?;
    }
    out_of_memory(driver, code, capacity, "pinned host memory")?;
    Ok(ptr)
}

/// A cached block of `capacity` whose fences have all completed.
fn take_pinned(driver: &Driver, capacity: usize) -> Option<usize> {
    if capture_known() {
        return None; // no event is queried during a capture
    }
    let mut cache = PINNED_CACHE.lock().unwrap_or_else(|p| p.into_inner());
    let index = cache.iter().position(|b| b.capacity == capacity && fences_done(driver, &b.fences))?;
    let block = cache.swap_remove(index);
    drop(cache);
    release_fences(driver, &block.fences);
    Some(block.ptr)
}

/// Returns a pinned block to the cache (or to the driver when the cache is full), fenced after
/// the work enqueued so far on the streams in `uses` and on the legacy default stream of every
/// device dlpx has used (which covers every blocking stream: a consumer such as torch copying
/// from the block on its default stream records nothing).
///
/// `may_keep`: whether the cache may keep it (not after the exit hook gave the cache back). A
/// stream that could not be fenced, or a free that failed, is the error.
///
/// # Safety
/// `ptr` came from `alloc_pinned(capacity)` and is not used afterwards.
pub unsafe fn free_pinned(ptr: *mut c_void, capacity: usize, uses: &Uses, may_keep: bool) -> Result<()> {
    let driver = driver::get()?;
    if may_keep && capture_known() {
        release_fences(driver, &uses.fences);
        UNFENCED.lock().unwrap_or_else(|p| p.into_inner()).push(ptr as usize);
        ANY_UNFENCED.store(true, Ordering::Release);
        return Ok(());
    }
    free_unfenced(driver, Wait::Hooked)?;
    let mut fences = uses.fences.clone();
    let mut first_error = Ok(());
    let legacy = devices_in_use(driver).map(|device_id| (device_id, STREAM_LEGACY));
    for (device_id, stream) in uses.streams.iter().copied().chain(legacy) {
        // A stream that cannot be fenced (gone, or its device's context not made current) is
        // waited for by synchronising its device, rather than the block reused under a reader,
        // as a device block's (`cache::keep_fenced`); the error is the deleter's to report.
        match on_device(device_id, |driver, state| record_event(driver, state, stream)) {
            Ok(event) => fences.push(Fence { device_id, stream, event }),
            Err(err) => {
                synchronise_device(device_id);
                first_error = first_error.and(Err(err));
            }
        }
    }
    if may_keep {
        let mut cache = PINNED_CACHE.lock().unwrap_or_else(|p| p.into_inner());
        let kept: usize = cache.iter().map(|b| b.capacity).sum();
        if kept + capacity <= PINNED_CACHE_BYTES {
            cache.push(PinnedBlock { capacity, ptr: ptr as usize, fences });
            return first_error;
        }
    }
    // The cache is full: wait for the fenced work (without the GIL), then give the block back.
    for &Fence { event, .. } in &fences {
        // SAFETY: an event dlpx created and has not destroyed.
        blocking(|| unsafe { (driver.cuEventSynchronize)(event as CUevent) });
    }
    release_fences(driver, &fences);
    let freed = on_device(0, |driver, _| {
        // SAFETY: per the contract.
        check(driver, "cuMemFreeHost", blocking(|| unsafe { (driver.cuMemFreeHost)(ptr) }))
    });
    first_error.and(freed)
}

/// Frees every cached pinned block whose fences have completed; returns how many went back.
pub(super) fn empty_pinned_cache(wait: Wait) -> Result<usize> {
    let driver = driver::get()?;
    if capture_known() && wait == Wait::Hooked {
        return Ok(0); // no event is queried during a capture; the blocks stay until it ends
    }
    free_unfenced(driver, wait)?;
    let done: Vec<PinnedBlock> = {
        let mut cache = PINNED_CACHE.lock().unwrap_or_else(|p| p.into_inner());
        let (done, pending) = std::mem::take(&mut *cache).into_iter().partition(|b| fences_done(driver, &b.fences));
        *cache = pending;
        done
    };
    if done.is_empty() {
        return Ok(0);
    }
    on_device(0, |driver, _| {
        let mut first_error = Ok(());
        for block in &done {
            release_fences(driver, &block.fences);
            // SAFETY: a cached block nobody uses.
            let code = wait_for(wait, || unsafe { (driver.cuMemFreeHost)(block.ptr as *mut c_void) });
            first_error = first_error.and(check(driver, "cuMemFreeHost", code));
        }
        first_error.map(|()| done.len())
    })
}
