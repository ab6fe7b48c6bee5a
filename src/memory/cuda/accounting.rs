//! The accounting of CUDA device memory, written and read here alone: every path of the cache
//! and the driver calls one function below for what it did, and [`memory_stats`] reads it all.
//!
//! Two halves. Per device, counters every thread updates: only the bytes tensors hold change on
//! the hot path (one atomic add per allocation and per free, so that the current value and its
//! peak are exact across threads); the rest change off it (a driver allocation or free, counted
//! where the driver is called; a retry, a synchronisation, a fenced free). Per thread,
//! [`Counts`] of what its cache did (allocations, frees, hits, misses), which `thread_cache`
//! stores (each thread's, and the sum of threads that exited) and hands to a function below
//! inside its owner's section: only the owner writes them, with no atomic read-modify-write. A path that changes both makes one call for both: a
//! hit and a cached free from inside the section `thread_cache::take` and `put` already hold
//! (the hot path enters it once), the cold paths through `thread_cache::count`. A statistics
//! call is handed the sum of every thread's counts (`thread_cache::sum`, passed in by `mod.rs`:
//! `thread_cache` calls this file, so this file does not call it).

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use super::classes::{settings, MAX_DEVICES};
use super::stats::DlpxCudaMemoryStats;
use super::{driver, idle};
use crate::error::{Error, Result};

/// What one thread did with one device's blocks (summed over threads for statistics). Written
/// only by the functions of this file.
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
pub struct Counts {
    // Counts apart from bytes: a hit or a free then adds to two fields that are not neighbours,
    // two instructions (neighbours, the compiler packs into one vector add of six).
    allocs: u64,
    frees: u64,
    /// Allocations of a size class served from the thread's bins, and those that were not.
    hits: u64,
    misses: u64,
    alloc_bytes: u64,
    free_bytes: u64,
}

impl Counts {
    /// An allocation of `bytes` on this thread, and its bytes handed out on `device_id`: what
    /// every path that gives a tensor memory counts.
    #[inline]
    fn allocation(&mut self, device_id: i32, bytes: usize) {
        self.allocs += 1;
        self.alloc_bytes += bytes as u64;
        if let Some(c) = of(device_id) {
            c.hand_out(bytes);
        }
    }

    /// A free of `bytes` on this thread, and its bytes taken back on `device_id`: the idle bytes
    /// dlpx then keeps (reserved minus allocated; `u64::MAX` for a device not counted).
    #[inline]
    fn free(&mut self, device_id: i32, bytes: usize) -> u64 {
        self.frees += 1;
        self.free_bytes += bytes as u64;
        of(device_id).map_or(u64::MAX, |c| c.take_back(bytes))
    }

    /// Adds another's counts: a thread that exits to those that did, a thread to a sum.
    pub fn add(&mut self, other: &Counts) {
        self.allocs += other.allocs;
        self.alloc_bytes += other.alloc_bytes;
        self.frees += other.frees;
        self.free_bytes += other.free_bytes;
        self.hits += other.hits;
        self.misses += other.misses;
    }
}

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

/// A block of `bytes` from the thread's bins handed to a tensor (a hit): an allocation and a hit
/// on the thread, and the bytes on the device. Called inside the owner's section
/// (`thread_cache::take`).
#[inline]
pub fn hit(counts: &mut Counts, device_id: i32, bytes: usize) {
    counts.hits += 1;
    counts.allocation(device_id, bytes);
}

/// A block of `bytes` for an allocation the thread's bins could not serve (a miss), from the
/// device's shared lists or the driver: an allocation and a miss on the thread, and the bytes
/// on the device.
pub fn missed(counts: &mut Counts, device_id: i32, bytes: usize) {
    counts.misses += 1;
    counts.allocation(device_id, bytes);
}

/// A miss of the thread's bins that the driver could not serve either: a miss, and not an
/// allocation.
pub fn refused(counts: &mut Counts) {
    counts.misses += 1;
}

/// Memory straight from the driver handed to a tensor (no size class, a graph's, no cache).
pub fn handed_out_uncached(counts: &mut Counts, device_id: i32, bytes: usize) {
    counts.allocation(device_id, bytes);
}

/// A cached block of `bytes` given back by a tensor (then kept in the thread's bins, the
/// device's shared list, or given to the driver): a free on the thread, the bytes taken back on
/// the device. Returns the idle bytes dlpx then keeps (reserved minus allocated), what the cap
/// is checked against (`u64::MAX` for a device not counted). Called inside the owner's section
/// (`thread_cache::put`).
#[inline]
pub fn freed(counts: &mut Counts, device_id: i32, bytes: usize) -> u64 {
    counts.free(device_id, bytes)
}

/// A cached block of `bytes` used on other streams given back by a tensor: a free on the thread,
/// the bytes taken back on the device, and, when the idle bytes dlpx then keeps are within
/// `cap`, a fenced free (the block is kept until events recorded on those streams complete;
/// else it goes to the driver after them). Returns whether it is kept.
pub fn fenced(counts: &mut Counts, device_id: i32, bytes: usize, cap: u64) -> bool {
    let idle = counts.free(device_id, bytes);
    // A device not counted keeps nothing fenced.
    let Some(c) = of(device_id).filter(|_| idle <= cap) else { return false };
    c.fenced_frees.fetch_add(1, Relaxed);
    true
}

/// Memory straight from the driver given back by a tensor.
pub fn taken_back_uncached(counts: &mut Counts, device_id: i32, bytes: usize) {
    counts.free(device_id, bytes);
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

/// The statistics of `device_id` (a device that exists; it need not have been used), with
/// `threads`, which sums every thread's [`Counts`] for a device (`thread_cache::sum`).
pub fn memory_stats(device_id: i32, threads: impl FnOnce(i32) -> Counts) -> Result<DlpxCudaMemoryStats> {
    let count = driver::device_count()?;
    if device_id < 0 || device_id >= count {
        return Err(Error::value(format!(
            "device cuda:{device_id} does not exist: this machine has {count} CUDA device(s)"
        )));
    }
    let mut stats = DlpxCudaMemoryStats { cache_limit_bytes: settings().cap, ..Default::default() };
    let Some(c) = of(device_id) else { return Ok(stats) };
    let t = threads(device_id);
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
