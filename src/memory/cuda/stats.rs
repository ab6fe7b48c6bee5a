//! Memory statistics of one CUDA device as C and Python see them, for `dlpx_cuda_memory_stats`
//! and `dlpx.cuda.memory_stats(device)` (a dict under torch's names where torch has one); filled
//! by `accounting::memory_stats`, read by cbindgen for dlpx.h.

use std::ffi::CStr;

/// Statistics of dlpx's CUDA device memory on one device, since the process started. Bytes of a
/// cached block count its whole size class (what the driver gave), as torch counts its blocks.
/// A field is exact when no other thread allocates meanwhile; the byte counts of live tensors
/// (`allocated_bytes`, its peak) are exact at every moment.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DlpxCudaMemoryStats {
    /// Bytes live tensors hold. torch: "allocated_bytes.all.current".
    pub allocated_bytes: u64,
    /// The most `allocated_bytes` has been. torch: "allocated_bytes.all.peak".
    pub allocated_bytes_peak: u64,
    /// Bytes handed to tensors so far. torch: "allocated_bytes.all.allocated".
    pub allocated_bytes_total: u64,
    /// Bytes tensors gave back so far. torch: "allocated_bytes.all.freed".
    pub freed_bytes_total: u64,
    /// Bytes dlpx holds from the driver: live tensors' and idle cached blocks.
    /// torch: "reserved_bytes.all.current".
    pub reserved_bytes: u64,
    /// The most `reserved_bytes` has been. torch: "reserved_bytes.all.peak".
    pub reserved_bytes_peak: u64,
    /// Idle bytes the cache holds (reserved minus allocated), ready for reuse or waiting for
    /// other streams' work. dlpx: "cached_bytes.all.current".
    pub cached_bytes: u64,
    /// The cap on `cached_bytes` (`DLPX_CUDA_CACHE_BYTES`; 0: no cache). dlpx: "cache_limit_bytes".
    pub cache_limit_bytes: u64,
    /// Live tensors' allocations. torch: "allocation.all.current".
    pub allocations: u64,
    /// Allocations made so far. torch: "allocation.all.allocated".
    pub allocations_total: u64,
    /// Allocations given back so far. torch: "allocation.all.freed".
    pub frees_total: u64,
    /// Driver allocations dlpx holds. torch: "segment.all.current".
    pub segments: u64,
    /// Allocations served by a cached block, without the driver. dlpx: "num_cache_hits".
    pub cache_hits: u64,
    /// Allocations of a size class that found no cached block. dlpx: "num_cache_misses".
    pub cache_misses: u64,
    /// Driver calls that allocated device memory. torch: "num_device_alloc".
    pub device_allocs: u64,
    /// Driver calls that freed device memory. torch: "num_device_free".
    pub device_frees: u64,
    /// Allocations retried after the driver ran out of memory and the cache gave its idle
    /// blocks back. torch: "num_alloc_retries".
    pub alloc_retries: u64,
    /// Allocations that failed for want of memory even so. torch: "num_ooms".
    pub ooms: u64,
    /// Device-wide synchronisations (a release of blocks of streams dlpx may not name, or an
    /// out-of-memory retry). torch: "num_sync_all_streams".
    pub syncs: u64,
    /// Frees of blocks used on other streams, kept until events recorded there completed.
    /// dlpx: "num_fenced_frees".
    pub fenced_frees: u64,
    /// Blocks waiting for such events now. dlpx: "fenced_blocks.all.current".
    pub fenced_blocks: u64,
}

impl DlpxCudaMemoryStats {
    /// Every field under its dictionary name (torch's where torch has one), in field order.
    pub fn entries(&self) -> [(&'static CStr, u64); 21] {
        [
            (c"allocated_bytes.all.current", self.allocated_bytes),
            (c"allocated_bytes.all.peak", self.allocated_bytes_peak),
            (c"allocated_bytes.all.allocated", self.allocated_bytes_total),
            (c"allocated_bytes.all.freed", self.freed_bytes_total),
            (c"reserved_bytes.all.current", self.reserved_bytes),
            (c"reserved_bytes.all.peak", self.reserved_bytes_peak),
            (c"cached_bytes.all.current", self.cached_bytes),
            (c"cache_limit_bytes", self.cache_limit_bytes),
            (c"allocation.all.current", self.allocations),
            (c"allocation.all.allocated", self.allocations_total),
            (c"allocation.all.freed", self.frees_total),
            (c"segment.all.current", self.segments),
            (c"num_cache_hits", self.cache_hits),
            (c"num_cache_misses", self.cache_misses),
            (c"num_device_alloc", self.device_allocs),
            (c"num_device_free", self.device_frees),
            (c"num_alloc_retries", self.alloc_retries),
            (c"num_ooms", self.ooms),
            (c"num_sync_all_streams", self.syncs),
            (c"num_fenced_frees", self.fenced_frees),
            (c"fenced_blocks.all.current", self.fenced_blocks),
        ]
    }
}
