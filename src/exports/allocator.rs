//! What C asks of dlpx's allocator beyond the table's `managed_tensor_allocator`: the streams that
//! used a tensor's memory, and giving the memory kept for reuse back.

use std::ffi::{c_int, c_void};

use crate::abi::*;
use crate::error::LastError;
use crate::shell::entry::c_entry;

/// Records that work on `tensor`'s data is being enqueued on `stream` of CUDA device
/// `device_id` (torch's `record_stream`): when the tensor is deleted, dlpx's allocator waits for
/// the work enqueued on that stream by then before the memory can be reused. Needed only for a
/// stream other than the one the tensor was allocated on, and only for tensors dlpx allocated —
/// from its allocator, or exported by dlpx from one (others are ignored: their producer's
/// allocator owns the memory). dlpx records the consumer streams it hears of itself
/// (`__dlpack__(stream=...)`, and its current stream when a kernel reads a tensor through the
/// exchange table); a consumer working on another stream records it here. The stream must
/// outlive the tensor (an event is recorded on it when the tensor is deleted).
/// Returns 0, or -1 (see `dlpx_last_error()`) for a NULL tensor, a negative `device_id`, or,
/// where a CUDA driver is present, a device that does not exist.
///
/// # Safety
/// `tensor` is NULL or a managed tensor the caller holds (its deleter not yet called).
#[no_mangle]
pub unsafe extern "C" fn dlpx_record_stream(
    tensor: *const DLManagedTensorVersioned,
    device_id: i32,
    stream: *mut c_void,
) -> c_int {
    c_entry!(LastError, "record_stream", out(), given(tensor), || {
        if device_id < 0 {
            return Err(crate::device_names::negative_id(device_id));
        }
        // Where there is a driver, a stream's device exists (an event is recorded there when
        // the tensor is deleted); without one dlpx holds no CUDA memory whose free could wait.
        if crate::devices::driver_present() {
            crate::devices::check_exists(DLDevice { device_type: DeviceType::CUDA, device_id })?;
        }
        // SAFETY: a live managed tensor, per the contract.
        unsafe { crate::Tensor::record_stream_of(tensor, device_id, stream) };
        Ok(0)
    })
}

/// Gives the CUDA memory dlpx keeps for reuse (its block cache's idle blocks, its device memory
/// pools, and pinned host blocks whose work has finished) back to the driver. Memory still in
/// use is kept. Returns 0, or -1 (see `dlpx_last_error()`; "CUDA driver not found" without a
/// driver).
#[no_mangle]
pub extern "C" fn dlpx_cuda_empty_cache() -> c_int {
    c_entry!(LastError, "cuda_empty_cache", out(), || {
        crate::devices::empty_cache()?;
        Ok(0)
    })
}

/// Fills `*out` with the statistics of dlpx's memory on CUDA device `device_id`: bytes live
/// tensors hold and their peak, bytes held from the driver and cached, allocation counts, cache
/// hits and misses, driver calls (each field of `DlpxCudaMemoryStats` says which of
/// `torch.cuda.memory_stats`'s keys it is). Asking sets no device up. Returns 0, or -1 (see
/// `dlpx_last_error()`) for a NULL `out`, a device that does not exist, or no CUDA driver.
///
/// # Safety
/// `out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn dlpx_cuda_memory_stats(
    device_id: i32,
    out: *mut crate::devices::DlpxCudaMemoryStats,
) -> c_int {
    c_entry!(LastError, "cuda_memory_stats", out(out), || {
        out.put(crate::devices::memory_stats(DLDevice { device_type: DeviceType::CUDA, device_id })?);
        Ok(0)
    })
}
