//! Frees of pool memory on its allocation stream after the streams that used it, and those put
//! off while that stream is being captured into a CUDA graph (freed then, the free would become
//! a node of the graph, run again at every replay). A put-off free also tells the cache that a
//! capture is underway: a release then waits (no synchronisation may run during a capture).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use cudarc::driver::sys::{CUdeviceptr, CUevent, CUstream};

use super::accounting::unreserved;
use super::device::{synchronise_context, DeviceState};
use super::driver::{self, check, same_stream, Driver};
use super::events::{enqueue_wait, release_fences, wait_for_peer};
use super::uses::Uses;
use crate::error::Result;

/// A free put off while its stream was being captured into a CUDA graph.
pub(super) struct Deferred {
    pub device_id: i32,
    pub ptr: usize,
    pub nbytes: usize,
    pub stream: usize,
    pub uses: Uses,
}

static DEFERRED: Mutex<Vec<Deferred>> = Mutex::new(Vec::new());

/// Puts a free off until its stream's capture ends.
pub(super) fn defer(deferred: Deferred) {
    DEFERRED.lock().unwrap_or_else(|p| p.into_inner()).push(deferred);
    ANY_DEFERRED.store(true, Ordering::Release);
}

/// The streams a flush may name (docs/cuda.md, "Streams that die"): a created stream only while
/// its owner vouches for it, at an allocation on it or the free of a tensor allocated on it
/// (`Stream`), or at `dlpx.cuda.empty_cache()`, which the owner calls before destroying a stream
/// dlpx allocated on (`Every`). A free put off on a stream no one vouches for waits until then.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Vouched {
    Stream(usize),
    Every,
}

/// Whether a capture dlpx knows of (a free put off on `device_id`) may still be underway, after
/// freeing what is no longer put off of the streams `vouched` names (None: none may be named).
pub(super) fn capture_underway(driver: &Driver, state: &DeviceState, device_id: i32, vouched: Option<Vouched>) -> bool {
    if let Some(vouched) = vouched {
        flush(driver, state, device_id, vouched);
    }
    ANY_DEFERRED.load(Ordering::Acquire)
        && DEFERRED.lock().unwrap_or_else(|p| p.into_inner()).iter().any(|d| d.device_id == device_id)
}

/// Whether any free is put off (a capture may be underway: event queries would break it).
pub(super) fn any() -> bool {
    ANY_DEFERRED.load(Ordering::Acquire)
}

/// Whether DEFERRED may hold anything (so frees and allocations skip its lock otherwise).
static ANY_DEFERRED: AtomicBool = AtomicBool::new(false);

/// Whether `stream` is being captured into a CUDA graph (a built-in stream: the current
/// context's).
pub(super) fn capturing(driver: &Driver, stream: usize) -> bool {
    let mut status = 0;
    // SAFETY: a valid out pointer and a live stream (a created one belongs to the caller).
    let asked = unsafe { (driver.cuStreamIsCapturing)(stream as CUstream, &mut status) };
    asked == driver::CUDA_SUCCESS && status != 0
}

/// Frees what was put off on `device_id`, on a stream `vouched` names, whose stream is no longer
/// captured (context current).
pub(super) fn flush(driver: &Driver, state: &DeviceState, device_id: i32, vouched: Vouched) {
    if !ANY_DEFERRED.load(Ordering::Acquire) {
        return;
    }
    let ready: Vec<Deferred> = {
        let mut deferred = DEFERRED.lock().unwrap_or_else(|p| p.into_inner());
        let (ready, waiting) = std::mem::take(&mut *deferred).into_iter().partition(|d| {
            d.device_id == device_id
                && (vouched == Vouched::Every || vouched == Vouched::Stream(d.stream))
                && !capturing(driver, d.stream)
        });
        *deferred = waiting;
        ANY_DEFERRED.store(!deferred.is_empty(), Ordering::Release);
        ready
    };
    for d in ready {
        // SAFETY: memory dlpx allocated on this device and nobody uses any more.
        if let Err(err) = unsafe { free_now(driver, state, d.device_id, d.ptr, d.nbytes, d.stream, &d.uses) } {
            crate::error::set_last_error(&err.at("deleter"));
        }
    }
}

/// Frees pool memory on `stream` after the recorded uses (the device's context is current).
///
/// # Safety
/// `ptr` is pool memory of this device (`nbytes` of it), allocated on `stream`, not used
/// afterwards.
pub(super) unsafe fn free_now(
    driver: &Driver,
    state: &DeviceState,
    device_id: i32,
    ptr: usize,
    nbytes: usize,
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
        .inspect(|()| unreserved(device_id, nbytes))
        .and(waited)
}
