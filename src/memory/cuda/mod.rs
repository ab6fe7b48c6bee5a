//! CUDA memory through the driver API: device memory from a dlpx-owned stream-ordered pool per
//! device, pinned host memory with event-fenced reuse, managed memory, and the events that order
//! one stream after another. One file per concept:
//!
//! - `device`: per-device set-up (primary context, pool, peer access) and running on a device;
//! - `events`: the event pool, fences, and ordering one stream after another;
//! - `pool`: device memory from the driver, and managed memory; `deferred`: its frees, put off
//!   while their stream is being captured;
//! - the block cache in front of the pool (docs/cuda.md, "The CUDA block cache"): `cache` (the
//!   allocation and free), `classes` (size classes, settings), `block` (a cached block and its
//!   stream key), `thread_cache` (per-thread bins), `idle` (shared and event-fenced blocks),
//!   `release` (blocks back to the driver, the exit hook), `owner_lock` (the bins' lock),
//!   `counters` and `stats`;
//! - `pinned`: the pinned host-memory cache;
//! - `pointer`: which device (and kind of memory) an address lies in;
//! - `copy`: device-to-host and device-to-device copies.
//!
//! The library loads where no driver exists: the driver is looked for on first use only, and
//! without it every path fails with "CUDA driver not found" (see `driver`).

mod block;
mod cache;
mod classes;
mod copy;
mod counters;
mod deferred;
mod device;
mod events;
mod idle;
mod owner_lock;
mod pinned;
mod pointer;
mod pool;
mod release;
mod stats;
mod thread_cache;

use std::ffi::c_void;

pub use cache::{alloc_device, free_device, Grant};
pub use copy::{copy_device_to_device, copy_to_host};
pub use device::{check_device, synchronise_device};
pub use events::{fence, order_after};
pub use pinned::{alloc_pinned, free_pinned, pinned_capacity};
pub use pointer::{pointer_device, PointerKind};
pub use pool::{alloc_managed, free_managed};
pub use stats::{memory_stats, DlpxCudaMemoryStats};

use super::driver;

/// CU_STREAM_LEGACY and CU_STREAM_PER_THREAD, the driver's names for DLPack's stream 1 and 2.
pub const STREAM_LEGACY: usize = 0x1;
pub const STREAM_PER_THREAD: usize = 0x2;

/// The stream a use on `stream` is recorded as: the per-thread default stream (2) names a
/// different stream on each thread, so a use there is recorded as the legacy stream, which
/// waits for all of them (and which every thread can name later, at the free).
pub fn as_recordable(stream: *mut c_void) -> *mut c_void {
    if stream as usize == STREAM_PER_THREAD {
        STREAM_LEGACY as *mut c_void
    } else {
        stream
    }
}

/// Whether no one can destroy `stream`: NULL, the legacy and the per-thread default streams.
/// A consumer owns every other stream it names and may destroy it as soon as `__dlpack__`
/// returns; the real driver does not refuse a destroyed handle, it crashes inside the call
/// (cuEventRecord, driver 580 on an H100), so dlpx keeps only built-in streams past the call.
pub fn is_built_in(stream: *mut c_void) -> bool {
    matches!(stream as usize, 0 | STREAM_LEGACY | STREAM_PER_THREAD)
}

/// Whether a CUDA driver is present (without initialising it).
pub fn driver_present() -> bool {
    driver::present()
}

/// Whether two stream handles name the same stream (NULL is the legacy default stream).
pub fn same_stream(a: usize, b: usize) -> bool {
    let normalise = |s: usize| if s == 0 { STREAM_LEGACY } else { s };
    normalise(a) == normalise(b)
}

/// Gives the CUDA memory dlpx keeps for reuse back to the driver: the block cache's idle blocks
/// and its pools' free memory on every device set up so far, and pinned blocks whose work has
/// finished.
pub fn empty_cache() -> crate::error::Result<()> {
    let released = release::release_all(Wait::Hooked);
    pool::trim_pools()?;
    pinned::empty_pinned_cache(Wait::Hooked)?;
    released
}

static EXIT_HOOK: std::sync::Once = std::sync::Once::new();

/// Registers the exit hook, on the first block a cache keeps (device or pinned).
fn register_exit_hook() {
    EXIT_HOOK.call_once(|| {
        // SAFETY: registers a function that takes no argument and returns nothing.
        unsafe { libc::atexit(release_at_exit) };
    });
}

/// The exit hook: a libc `atexit` function, so it runs after Python's finalisation (it never
/// touches Python) and while the driver is still loaded (a driver already shut down answers
/// its calls with an error, which is ignored: the process is ending). What the caches keep goes
/// back to the driver, so that a leak check at exit sees only memory live tensors hold.
extern "C" fn release_at_exit() {
    crate::error::guard("exit", release::at_exit);
}

/// How a release may wait for the device.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Wait {
    /// Through the blocking hook (other Python threads run meanwhile).
    Hooked,
    /// Directly: at exit, when Python may be finalised already.
    AtExit,
}

/// Runs a blocking driver call as `wait` allows.
fn wait_for<T>(wait: Wait, f: impl FnOnce() -> T) -> T {
    match wait {
        Wait::Hooked => super::blocking::blocking(f),
        Wait::AtExit => f(),
    }
}
