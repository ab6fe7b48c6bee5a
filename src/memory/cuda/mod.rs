//! CUDA memory through the driver API: device memory from a dlpx-owned stream-ordered pool per
//! device, pinned host memory with event-fenced reuse, managed memory, and the events that order
//! one stream after another: everything CUDA below the device seam (`devices/cuda.rs`), read
//! from the bottom up. One file per concept; every arrow points down, none back into this file:
//!
//! - the driver: `driver` (its functions, codes and built-in streams, how a blocking call
//!   waits), `uses` (what a free waits for: streams used, fences), `device` (per-device set-up:
//!   primary context, pool, peer access; running on a device), `events` (the event pool,
//!   fences, one stream after another), `pool` (one request for device memory, the frees, and
//!   managed memory) and `deferred` (frees put off while their stream is captured), `pointer`
//!   (which device and kind of memory an address lies in), `copy` (device to host and within a
//!   device);
//! - the block cache in front of the pool (docs/cuda.md, "The CUDA block cache"): `classes`
//!   (size classes, settings), `block` (a cached block and its stream key), `owner_lock` (the
//!   bins' lock), `thread_cache` (per-thread bins), `idle` (the device's shared and
//!   event-fenced blocks), `release` (idle blocks back to the driver, the exit hook), and
//!   `cache`: the allocation ladder (`cache::climb`) and the free, each in one function;
//! - `accounting`: every counter, the device's and each thread's `Counts` (which `thread_cache`
//!   stores beside its bins), written there alone by one call per path and read by
//!   `memory_stats` (`stats`: the C struct it fills);
//! - `pinned`: the pinned host-memory cache.
//!
//! The library loads where no driver exists: the driver is looked for on first use only, and
//! without it every path fails with "CUDA driver not found" (see `driver`).

mod accounting;
mod block;
mod cache;
mod classes;
mod copy;
mod deferred;
mod device;
mod driver;
mod events;
mod idle;
mod owner_lock;
mod pinned;
mod pointer;
mod pool;
mod release;
mod stats;
mod thread_cache;
mod uses;

use std::ffi::c_void;

pub use cache::{alloc_device, free_device, reuse_comes_after, Grant};
pub use copy::{copy_device_to_device, copy_to_host, wait_for_stream};
pub use device::{check_device, synchronise_device};
pub use driver::{
    as_recordable, is_built_in, present as driver_present, same_stream, STREAM_LEGACY, STREAM_PER_THREAD,
};
pub use events::{fence, order_after, order_after_foreign};
pub use pinned::{alloc_pinned, pinned_capacity};
pub use pointer::{pointer_device, PointerKind};
pub use pool::{alloc_managed, free_managed};
pub use stats::DlpxCudaMemoryStats;
pub use uses::Uses;

use crate::error::Result;
use driver::Wait;

/// Returns a pinned block to its cache (or to the driver when the cache is full), fenced after
/// the work enqueued so far on the streams in `uses` and on every used device's legacy stream.
///
/// # Safety
/// `ptr` came from `alloc_pinned(capacity)` and is not used afterwards.
pub unsafe fn free_pinned(ptr: *mut c_void, capacity: usize, uses: &Uses) -> Result<()> {
    // After the exit hook gave the cache back, nothing would again: the block goes to the driver.
    // Before, the hook is registered (once) for what the cache may keep.
    let may_keep = !release::exited();
    if may_keep {
        release::register_exit_hook();
    }
    // SAFETY: per the contract.
    unsafe { pinned::free_pinned(ptr, capacity, uses, may_keep) }
}

/// The memory statistics of `device_id`: every counter, read by `accounting`, handed the sum of
/// every thread's counts (`thread_cache`, which stores them).
pub fn memory_stats(device_id: i32) -> Result<DlpxCudaMemoryStats> {
    accounting::memory_stats(device_id, thread_cache::sum)
}

/// Gives the CUDA memory dlpx keeps for reuse back to the driver: the block cache's idle blocks
/// and its pools' free memory on every device set up so far, and pinned blocks whose work has
/// finished.
pub fn empty_cache() -> Result<()> {
    let released = release::release_all(Wait::Hooked);
    pool::trim_pools()?;
    pinned::empty_pinned_cache(Wait::Hooked)?;
    released
}
