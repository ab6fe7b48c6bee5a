//! The accounting of CUDA device memory, written and read here alone: every path of the cache
//! and the driver calls one function below for what it did, and [`memory_stats`] reads it all.
//!
//! Two halves. Per device, counters every thread updates: only the bytes tensors hold change on
//! the hot path (one atomic add per allocation and per free, so that the current value and its
//! peak are exact across threads); the rest change only when dlpx calls the driver. Per thread,
//! what its cache did (allocations, frees, hits, misses): the bins count their own hits and
//! frees inside their owner's section (`thread_cache::take`, `put`: no second entry on the hot
//! path), the other paths through `thread_cache::count`, and a statistics call sums them.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use super::classes::{settings, MAX_DEVICES};
use super::stats::DlpxCudaMemoryStats;
use super::{driver, idle, thread_cache};
use crate::error::{Error, Result};

/// One device's counters, on cache lines of their own.
#[repr(align(128))]
struct DeviceCounters {
    /// Bytes handed to live tensors (a cached block counts its whole class).
    allocated: AtomicU64,
    allocated_peak: AtomicU64,
    /// Bytes dlpx holds from the driver: live tensors' and idle cached blocks.
    reserved: AtomicU64,
    reserved_peak: AtomicU64,
    /// Driver allocations dlpx holds (segments, in torch's word).
    segments: AtomicU64,
    /// Calls that allocated or freed device memory through the driver.
    driver_allocs: AtomicU64,
    driver_frees: AtomicU64,
    /// Allocations retried after an out-of-memory answer (cached blocks given back in between),
    /// and the allocations that failed for want of memory even so.
    alloc_retries: AtomicU64,
    ooms: AtomicU64,
    /// Device-wide synchronisations (a release of blocks of streams dlpx may not name).
    syncs: AtomicU64,
    /// Frees of blocks used on other streams: held back until events recorded there complete.
    fenced_frees: AtomicU64,
}

#[allow(clippy::declare_interior_mutable_const)] // copied into the array below, never shared itself
const ZERO: DeviceCounters = DeviceCounters {
    allocated: AtomicU64::new(0),
    allocated_peak: AtomicU64::new(0),
    reserved: AtomicU64::new(0),
    reserved_peak: AtomicU64::new(0),
    segments: AtomicU64::new(0),
    driver_allocs: AtomicU64::new(0),
    driver_frees: AtomicU64::new(0),
    alloc_retries: AtomicU64::new(0),
    ooms: AtomicU64::new(0),
    syncs: AtomicU64::new(0),
    fenced_frees: AtomicU64::new(0),
};

static COUNTERS: [DeviceCounters; MAX_DEVICES] = [ZERO; MAX_DEVICES];

/// The counters of `device_id`; None for devices beyond [`MAX_DEVICES`] (not counted).
#[inline]
fn of(device_id: i32) -> Option<&'static DeviceCounters> {
    COUNTERS.get(usize::try_from(device_id).ok()?)
}

impl DeviceCounters {
    #[inline]
    fn hand_out(&self, bytes: usize) {
        let now = self.allocated.fetch_add(bytes as u64, Relaxed) + bytes as u64;
        if now > self.allocated_peak.load(Relaxed) {
            self.allocated_peak.fetch_max(now, Relaxed);
        }
    }

    #[inline]
    fn take_back(&self, bytes: usize) -> u64 {
        let allocated = self.allocated.fetch_sub(bytes as u64, Relaxed).wrapping_sub(bytes as u64);
        self.reserved.load(Relaxed).saturating_sub(allocated)
    }

    fn reserve(&self, bytes: usize) {
        self.driver_allocs.fetch_add(1, Relaxed);
        self.segments.fetch_add(1, Relaxed);
        let now = self.reserved.fetch_add(bytes as u64, Relaxed) + bytes as u64;
        self.reserved_peak.fetch_max(now, Relaxed);
    }

    fn unreserve(&self, bytes: usize) {
        self.driver_frees.fetch_add(1, Relaxed);
        self.segments.fetch_sub(1, Relaxed);
        self.reserved.fetch_sub(bytes as u64, Relaxed);
    }

    /// Idle bytes kept: reserved minus allocated.
    fn idle(&self) -> u64 {
        self.reserved.load(Relaxed).saturating_sub(self.allocated.load(Relaxed))
    }
}

/// A block of a size class handed to a tensor (counted on the thread already: a hit in its bins,
/// or a miss).
#[inline]
pub fn handed_out(device_id: i32, bytes: usize) {
    if let Some(c) = of(device_id) {
        c.hand_out(bytes);
    }
}

/// A block given back by a tensor (the thread counts the free as the block goes on); returns
/// the idle bytes dlpx then keeps (reserved minus allocated), what the cap is checked against
/// (`u64::MAX` for a device not counted).
#[inline]
pub fn taken_back(device_id: i32, bytes: usize) -> u64 {
    of(device_id).map_or(u64::MAX, |c| c.take_back(bytes))
}

/// A miss of the thread's bins that the driver could not serve: not an allocation after all.
pub fn refused(device_id: i32, bytes: usize) {
    thread_cache::count(device_id, |c| {
        c.allocs -= 1;
        c.alloc_bytes -= bytes as u64;
    });
}

/// Memory straight from the driver handed to a tensor (no size class, a graph's, no cache).
pub fn handed_out_uncached(device_id: i32, bytes: usize) {
    thread_cache::count(device_id, |c| {
        c.allocs += 1;
        c.alloc_bytes += bytes as u64;
    });
    handed_out(device_id, bytes);
}

/// Memory straight from the driver given back by a tensor.
pub fn taken_back_uncached(device_id: i32, bytes: usize) {
    thread_cache::count(device_id, |c| {
        c.frees += 1;
        c.free_bytes += bytes as u64;
    });
    taken_back(device_id, bytes);
}

/// A free of a block used on other streams, kept until events recorded there complete (after
/// [`taken_back`]).
pub fn fenced(device_id: i32, bytes: usize) {
    thread_cache::count(device_id, |c| {
        c.frees += 1;
        c.free_bytes += bytes as u64;
    });
    if let Some(c) = of(device_id) {
        c.fenced_frees.fetch_add(1, Relaxed);
    }
}

/// A driver allocation of `bytes`.
pub fn reserved(device_id: i32, bytes: usize) {
    if let Some(c) = of(device_id) {
        c.reserve(bytes);
    }
}

/// A driver free of `bytes`.
pub fn unreserved(device_id: i32, bytes: usize) {
    if let Some(c) = of(device_id) {
        c.unreserve(bytes);
    }
}

/// An allocation retried after an out-of-memory answer (idle blocks given back in between).
pub fn retried(device_id: i32) {
    if let Some(c) = of(device_id) {
        c.alloc_retries.fetch_add(1, Relaxed);
    }
}

/// A device-wide synchronisation (a release of blocks of streams dlpx may not name, or the
/// last retry of an allocation).
pub fn synchronised(device_id: i32) {
    if let Some(c) = of(device_id) {
        c.syncs.fetch_add(1, Relaxed);
    }
}

/// An allocation that failed for want of memory after every retry.
pub fn ran_out(device_id: i32) {
    if let Some(c) = of(device_id) {
        c.ooms.fetch_add(1, Relaxed);
    }
}

/// The statistics of `device_id` (a device that exists; it need not have been used).
pub fn memory_stats(device_id: i32) -> Result<DlpxCudaMemoryStats> {
    let count = driver::device_count()?;
    if device_id < 0 || device_id >= count {
        return Err(Error::value(format!(
            "device cuda:{device_id} does not exist: this machine has {count} CUDA device(s)"
        )));
    }
    let mut stats = DlpxCudaMemoryStats { cache_limit_bytes: settings().cap, ..Default::default() };
    let Some(c) = of(device_id) else { return Ok(stats) };
    let t = thread_cache::sum(device_id);
    stats.allocated_bytes = c.allocated.load(Relaxed);
    stats.allocated_bytes_peak = c.allocated_peak.load(Relaxed);
    stats.allocated_bytes_total = t.alloc_bytes;
    stats.freed_bytes_total = t.free_bytes;
    stats.reserved_bytes = c.reserved.load(Relaxed);
    stats.reserved_bytes_peak = c.reserved_peak.load(Relaxed);
    stats.cached_bytes = c.idle();
    stats.allocations = t.allocs.saturating_sub(t.frees);
    stats.allocations_total = t.allocs;
    stats.frees_total = t.frees;
    stats.segments = c.segments.load(Relaxed);
    stats.cache_hits = t.hits;
    stats.cache_misses = t.misses;
    stats.device_allocs = c.driver_allocs.load(Relaxed);
    stats.device_frees = c.driver_frees.load(Relaxed);
    stats.alloc_retries = c.alloc_retries.load(Relaxed);
    stats.ooms = c.ooms.load(Relaxed);
    stats.syncs = c.syncs.load(Relaxed);
    stats.fenced_frees = c.fenced_frees.load(Relaxed);
    stats.fenced_blocks = idle::count(device_id).1 as u64;
    Ok(stats)
}
