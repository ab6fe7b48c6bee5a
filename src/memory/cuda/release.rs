//! Giving idle cached blocks back to the driver: `dlpx.cuda.empty_cache()`, the retry after an
//! out-of-memory answer, and the exit hook (so that a leak check at exit, compute-sanitizer's,
//! sees only memory live tensors hold).
//!
//! A release frees every idle block of a device — every thread's bins and the shared lists — on
//! the legacy default stream, which waits for every blocking stream (the per-thread ones too).
//! A block of a stream the user created may be on a non-blocking stream, and that stream may
//! be gone since its last tensor died (the real driver crashes on a destroyed stream's handle):
//! a release never names it, it synchronises the device once instead. A fenced block's events
//! are waited for on the legacy stream.

use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Once;

use cudarc::driver::sys::{CUcontext, CUdeviceptr, CUevent, CUmemoryPool, CUstream};

use super::block::Block;
use super::classes::MAX_DEVICES;
use super::deferred::{capture_underway, Vouched};
use super::device::{set_up_devices, with_context, DeviceState};
use super::driver::{self, check, wait_for, Driver, Wait, STREAM_LEGACY};
use super::events::release_fences;
use super::{accounting, idle, pinned, thread_cache};
use crate::error::Result;

/// Set once the exit hook ran: later frees go to the driver instead of the cache.
static EXITED: AtomicBool = AtomicBool::new(false);

pub fn exited() -> bool {
    EXITED.load(Ordering::Relaxed)
}

/// Gives every idle cached block of `device_id` back to the driver (its context current).
/// Returns how many blocks went back.
pub(super) fn release_device(driver: &Driver, state: &DeviceState, device_id: i32, wait: Wait) -> Result<usize> {
    if usize::try_from(device_id).map_or(true, |d| d >= MAX_DEVICES) {
        return Ok(0);
    }
    // At exit a stream may be gone: nothing put off is named then (what it holds stays the
    // driver's to reclaim with the process); through empty_cache, every stream may be.
    let vouched = (wait == Wait::Hooked).then_some(Vouched::Every);
    if capture_underway(driver, state, device_id, vouched) {
        // A synchronisation, or work on the legacy stream, would break the capture: the blocks
        // stay cached until it ends (torch refuses to empty its cache during a capture).
        return Ok(0);
    }
    let mut blocks = thread_cache::drain_all(|d| d == device_id, wait == Wait::Hooked);
    let (ready, fenced) = idle::drain(device_id);
    blocks.extend(ready);
    if blocks.is_empty() && fenced.is_empty() {
        return Ok(0);
    }
    let mut first_error = Ok(());
    let named = |b: &NonNull<Block>| {
        // SAFETY: drained blocks are owned here, nobody else holds them.
        !unsafe { b.as_ref() }.key().is_built_in()
    };
    if blocks.iter().chain(fenced.iter().map(|f| &f.block)).any(named) {
        accounting::synchronised(device_id);
        // SAFETY: the device's context is current (the caller's `with_context`).
        let code = wait_for(wait, || unsafe { (driver.cuCtxSynchronize)() });
        first_error = first_error.and(check(driver, "cuCtxSynchronize", code));
    }
    for f in &fenced {
        for fence in &f.fences {
            // SAFETY: an event dlpx recorded and still holds; the legacy stream of this context.
            let code = unsafe { (driver.cuStreamWaitEvent)(STREAM_LEGACY as CUstream, fence.event as CUevent, 0) };
            first_error = first_error.and(check(driver, "cuStreamWaitEvent", code));
        }
        release_fences(driver, &f.fences);
    }
    let count = blocks.len() + fenced.len();
    for block in blocks.into_iter().chain(fenced.into_iter().map(|f| f.block)) {
        // SAFETY: an idle block of this device, owned here; given back once.
        first_error = first_error.and(unsafe { give_back(driver, state, block, wait) });
    }
    first_error.map(|()| count)
}

/// Frees one idle block through the driver and drops its record (even when the driver refuses:
/// a block the driver would not take is never handed out again).
///
/// # Safety
/// `block` is an idle block of this device owned by the caller; the device's context is current.
pub(super) unsafe fn give_back(driver: &Driver, state: &DeviceState, block: NonNull<Block>, wait: Wait) -> Result<()> {
    // SAFETY: owned by the caller, per the contract; made by `Box::into_raw`.
    let block = unsafe { Box::from_raw(block.as_ptr()) };
    let code = match state.pool {
        // SAFETY: memory of this device from cuMemAlloc, which cuMemFree waits for.
        0 => wait_for(wait, || unsafe { (driver.cuMemFree_v2)(block.ptr as CUdeviceptr) }),
        // SAFETY: pool memory of this device, freed on the legacy stream after its work.
        _ => unsafe { (driver.cuMemFreeAsync)(block.ptr as CUdeviceptr, STREAM_LEGACY as CUstream) },
    };
    accounting::unreserved(block.device_id, block.bytes());
    check(driver, if state.pool == 0 { "cuMemFree" } else { "cuMemFreeAsync" }, code)
}

/// Gives every set-up device's idle blocks back, then its pool's free memory.
pub(super) fn release_all(wait: Wait) -> Result<()> {
    let driver = driver::get()?;
    let mut first_error = Ok(());
    for (device_id, state) in set_up_devices() {
        let released = with_context(driver, state.context as CUcontext, || {
            release_device(driver, state, device_id, wait)?;
            if wait == Wait::AtExit && state.pool != 0 {
                // The frees just enqueued complete, so that the pool can give their memory back.
                // SAFETY: the device's context is current.
                unsafe { (driver.cuCtxSynchronize)() };
                // SAFETY: a pool dlpx created; trimming keeps memory still allocated.
                unsafe { (driver.cuMemPoolTrimTo)(state.pool as CUmemoryPool, 0) };
            }
            Ok(())
        });
        first_error = first_error.and(released);
    }
    if wait == Wait::AtExit {
        // Pinned blocks have a cache of their own: its finished blocks go back too.
        first_error = first_error.and(pinned::empty_pinned_cache(wait).map(drop));
    }
    first_error
}

static EXIT_HOOK: Once = Once::new();

/// Registers the exit hook, on the first block a cache keeps (device or pinned).
pub(super) fn register_exit_hook() {
    EXIT_HOOK.call_once(|| {
        // SAFETY: registers a function that takes no argument and returns nothing.
        unsafe { libc::atexit(release_at_exit) };
    });
}

/// The exit hook: a libc `atexit` function, so it runs after Python's finalisation (it never
/// touches Python) and while the driver is still loaded (a driver already shut down answers
/// its calls with an error, which is ignored: the process is ending). Later frees go to the
/// driver, and what the caches keep goes back to it now, so that a leak check at exit sees
/// only memory live tensors hold.
extern "C" fn release_at_exit() {
    crate::error::guard("exit", || {
        EXITED.store(true, Ordering::Relaxed);
        let _ = release_all(Wait::AtExit);
    });
}
