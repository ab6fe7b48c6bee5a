//! Per-device counters of CUDA device memory, kept where every thread can update them. Only the
//! bytes tensors hold change on the hot path (one atomic add per allocation and per free, so that
//! the current value and its peak are exact across threads); the rest change only when dlpx calls
//! the driver. What each thread's cache did (hits, misses, counts) is counted per thread
//! (`thread_cache`) and summed when asked.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use super::classes::MAX_DEVICES;

/// One device's counters, on cache lines of their own.
#[repr(align(128))]
pub struct DeviceCounters {
    /// Bytes handed to live tensors (a cached block counts its whole class).
    pub allocated: AtomicU64,
    pub allocated_peak: AtomicU64,
    /// Bytes dlpx holds from the driver: live tensors' and idle cached blocks.
    pub reserved: AtomicU64,
    pub reserved_peak: AtomicU64,
    /// Driver allocations dlpx holds (segments, in torch's word).
    pub segments: AtomicU64,
    /// Calls that allocated or freed device memory through the driver.
    pub driver_allocs: AtomicU64,
    pub driver_frees: AtomicU64,
    /// Allocations retried after an out-of-memory answer (cached blocks given back in between),
    /// and the allocations that failed for want of memory even so.
    pub alloc_retries: AtomicU64,
    pub ooms: AtomicU64,
    /// Device-wide synchronisations (a release of blocks of streams dlpx may not name).
    pub syncs: AtomicU64,
    /// Frees of blocks used on other streams: held back until events recorded there complete.
    pub fenced_frees: AtomicU64,
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
pub fn of(device_id: i32) -> Option<&'static DeviceCounters> {
    COUNTERS.get(usize::try_from(device_id).ok()?)
}

impl DeviceCounters {
    /// `bytes` handed to a tensor.
    #[inline]
    pub fn hand_out(&self, bytes: usize) {
        let now = self.allocated.fetch_add(bytes as u64, Relaxed) + bytes as u64;
        if now > self.allocated_peak.load(Relaxed) {
            self.allocated_peak.fetch_max(now, Relaxed);
        }
    }

    /// `bytes` given back by a tensor; returns the idle bytes dlpx then keeps (reserved minus
    /// allocated), what the cap is checked against.
    #[inline]
    pub fn take_back(&self, bytes: usize) -> u64 {
        let allocated = self.allocated.fetch_sub(bytes as u64, Relaxed).wrapping_sub(bytes as u64);
        self.reserved.load(Relaxed).saturating_sub(allocated)
    }

    /// A driver allocation of `bytes`.
    pub fn reserve(&self, bytes: usize) {
        self.driver_allocs.fetch_add(1, Relaxed);
        self.segments.fetch_add(1, Relaxed);
        let now = self.reserved.fetch_add(bytes as u64, Relaxed) + bytes as u64;
        self.reserved_peak.fetch_max(now, Relaxed);
    }

    /// A driver free of `bytes`.
    pub fn unreserve(&self, bytes: usize) {
        self.driver_frees.fetch_add(1, Relaxed);
        self.segments.fetch_sub(1, Relaxed);
        self.reserved.fetch_sub(bytes as u64, Relaxed);
    }

    /// Idle bytes kept: reserved minus allocated.
    pub fn idle(&self) -> u64 {
        self.reserved.load(Relaxed).saturating_sub(self.allocated.load(Relaxed))
    }
}
