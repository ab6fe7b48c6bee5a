//! CUDA: device memory from dlpx's pool per device, pinned host memory, managed memory, and the
//! streams and events that order their use (over `memory::cuda`, docs/design.md "Devices: one
//! seam").

use std::ffi::c_void;

use super::{Device, Memory, Uses};
use crate::abi::{DLDevice, DeviceType};
use crate::error::{Error, Result};
use crate::memory::cuda;

pub struct Cuda;
pub static CUDA: Cuda = Cuda;
pub const TYPES: &[DeviceType] = &[DeviceType::CUDA, DeviceType::CUDA_HOST, DeviceType::CUDA_MANAGED];

impl Device for Cuda {
    fn allocates(&self) -> &'static [DeviceType] {
        TYPES
    }

    /// Pinned and managed memory are host memory as well.
    fn host_accessible(&self, device_type: DeviceType) -> bool {
        device_type != DeviceType::CUDA
    }

    fn check(&self, device: DLDevice) -> Result<()> {
        match (device.device_type, device.device_id) {
            (DeviceType::CUDA, id) if id < 0 => Err(Error::value(format!(
                "device {} is invalid: device_id is negative",
                crate::device_names::name(device)
            ))),
            (DeviceType::CUDA, _) | (_, 0) => Ok(()),
            _ => Err(super::only_device_zero(device)),
        }
    }

    fn check_exists(&self, device: DLDevice) -> Result<()> {
        cuda::check_device(if device.device_type == DeviceType::CUDA { device.device_id } else { 0 })
    }

    fn allocate(&self, device: DLDevice, nbytes: usize) -> Result<Memory> {
        match device.device_type {
            DeviceType::CUDA => {
                let stream = crate::stream::current(device);
                let grant = cuda::alloc_device(device.device_id, nbytes, stream)?;
                // The deleter may run on another thread, whose per-thread default stream is
                // another stream (`cuda::as_recordable`). A stream handle the user set must
                // outlive the tensors allocated on it.
                let recorded = cuda::as_recordable(stream) as usize;
                Ok(Memory { data: grant.ptr, words: [grant.block, recorded, grant.word as usize] })
            }
            DeviceType::CUDA_HOST => {
                let capacity = cuda::pinned_capacity(nbytes)
                    .ok_or_else(|| Error::memory(format!("cannot allocate {nbytes} pinned bytes")))?;
                Ok(Memory { data: cuda::alloc_pinned(capacity)?, words: [capacity, 0, 0] })
            }
            _ => Ok(Memory { data: cuda::alloc_managed(nbytes)?, words: [0, 0, 0] }),
        }
    }

    unsafe fn free(&self, device: DLDevice, memory: &Memory, uses: Uses) -> Result<()> {
        // SAFETY: per the contract, `memory` came from `allocate(device, …)`, which says how.
        unsafe {
            match device.device_type {
                DeviceType::CUDA => {
                    let grant = cuda::Grant { ptr: memory.data, block: memory.words[0], word: memory.words[2] as u64 };
                    cuda::free_device(device.device_id, grant, memory.words[1] as *mut c_void, uses)
                }
                DeviceType::CUDA_HOST => cuda::free_pinned(memory.data, memory.words[0], &uses),
                _ => cuda::free_managed(memory.data),
            }
        }
    }

    /// A use that device memory's reuse comes after anyway (its allocation stream, or a
    /// built-in stream before a reuse on the legacy one), and managed memory, need no record
    /// (the driver orders the second); a use on the per-thread default stream is recorded as
    /// the legacy stream (the free may run on another thread). Uses on other devices count too:
    /// a peer's kernel may read this device's memory.
    fn use_to_record(
        &self,
        device: DLDevice,
        memory: Memory,
        device_id: i32,
        stream: *mut c_void,
    ) -> Option<(i32, usize)> {
        match device.device_type {
            DeviceType::CUDA if reuse_comes_after(device, memory, device_id, stream) => None,
            DeviceType::CUDA | DeviceType::CUDA_HOST => Some((device_id, cuda::as_recordable(stream) as usize)),
            _ => None,
        }
    }

    fn fence(&self, device: DLDevice, memory: Memory, uses: &mut Uses, device_id: i32, stream: *mut c_void) -> bool {
        match device.device_type {
            DeviceType::CUDA if reuse_comes_after(device, memory, device_id, stream) => true,
            DeviceType::CUDA | DeviceType::CUDA_HOST => cuda::fence(uses, device_id, stream),
            _ => true,
        }
    }

    fn synchronise(&self, device_id: i32) {
        cuda::synchronise_device(device_id)
    }

    /// CUDA memory to host memory, or within one device.
    fn can_copy(&self, from: DLDevice, to: DLDevice) -> bool {
        from.device_type == DeviceType::CUDA && (to == from || super::host_accessible(to.device_type))
            || from.device_type != DeviceType::CUDA && super::host_accessible(to.device_type)
    }

    unsafe fn copy(
        &self,
        from: DLDevice,
        to: DLDevice,
        dst: *mut c_void,
        src: *const c_void,
        nbytes: usize,
    ) -> Result<()> {
        if from.device_type != DeviceType::CUDA {
            // SAFETY: pinned and managed memory are host memory; per the contract.
            return unsafe { super::host::HOST.copy(from, to, dst, src, nbytes) };
        }
        // On dlpx's current stream of the device: an export orders its consumer after it, and a
        // copy to the host waits for it.
        let stream = crate::stream::current(from);
        // SAFETY: per the contract.
        unsafe {
            match to == from {
                true => cuda::copy_device_to_device(from.device_id, dst, src, nbytes, stream),
                false => cuda::copy_to_host(from.device_id, dst, src, nbytes, stream),
            }
        }
    }

    fn recordable(&self, stream: *mut c_void) -> *mut c_void {
        cuda::as_recordable(stream)
    }

    fn outlives_its_consumer(&self, stream: *mut c_void) -> bool {
        cuda::is_built_in(stream)
    }

    /// Device and managed memory; pinned memory is the host's.
    fn kernel_addressable(&self, device_type: DeviceType) -> bool {
        matches!(device_type, DeviceType::CUDA | DeviceType::CUDA_MANAGED)
    }

    /// dlpx's current stream there, which orders its work on the memory (NULL is the legacy
    /// stream, 1); managed memory's reader needs none.
    fn reader_stream(&self, device: DLDevice) -> Option<i64> {
        (device.device_type == DeviceType::CUDA).then(|| match crate::stream::current(device) as usize {
            0 => cuda::STREAM_LEGACY as i64,
            handle => handle as i64,
        })
    }

    /// Asked of the driver (unified addressing); without a driver, not CUDA's to say.
    fn device_of_address(&self, address: usize) -> Option<Result<DLDevice>> {
        if !cuda::driver_present() {
            return None;
        }
        Some(cuda::pointer_device(address).map(|(kind, device_id)| match kind {
            cuda::PointerKind::Device => DLDevice { device_type: DeviceType::CUDA, device_id },
            cuda::PointerKind::Pinned => DLDevice { device_type: DeviceType::CUDA_HOST, device_id: 0 },
            cuda::PointerKind::Managed => DLDevice { device_type: DeviceType::CUDA_MANAGED, device_id: 0 },
        }))
    }

    fn has_streams(&self, device_type: DeviceType) -> bool {
        device_type == DeviceType::CUDA
    }

    /// None and 1 are the legacy default stream, 2 the per-thread one, -1 no ordering, 0 an
    /// error (ambiguous); pinned memory is host memory (no stream but none); managed memory is
    /// host-accessible, yet CUDA consumers (cupy) order it by stream.
    fn consumer_stream(&self, device: DLDevice, value: Option<i64>) -> Result<Option<*mut c_void>> {
        if device.device_type == DeviceType::CUDA_HOST {
            return super::host::HOST.consumer_stream(device, value);
        }
        match value {
            Some(-1) => Ok(None),
            None | Some(1) => Ok(Some(cuda::STREAM_LEGACY as *mut c_void)),
            Some(2) => Ok(Some(cuda::STREAM_PER_THREAD as *mut c_void)),
            Some(0) => Err(Error::value("stream=0 is ambiguous and not allowed (use 1 for the legacy default stream)")),
            Some(v) if v > 2 => Ok(Some(v as usize as *mut c_void)),
            Some(v) => Err(Error::value(format!("stream={v} is not a CUDA stream"))),
        }
    }

    fn order_after(&self, device: DLDevice, producer: *mut c_void, consumer: *mut c_void) -> Result<()> {
        cuda::order_after(device.device_id, producer, consumer)
    }

    fn order_after_foreign(&self, device: DLDevice, producer: *mut c_void, consumer: *mut c_void) -> Result<()> {
        cuda::order_after_foreign(device.device_id, producer, consumer)
    }

    fn host_waits_for(&self, device: DLDevice, producer: *mut c_void) -> Result<()> {
        cuda::wait_for_stream(device.device_id, producer)
    }

    /// Device memory only: the block cache's (pinned blocks have a cache of their own, managed
    /// memory none).
    fn memory_stats(&self, device: DLDevice) -> Result<Option<super::DlpxCudaMemoryStats>> {
        match device.device_type {
            DeviceType::CUDA => cuda::memory_stats(device.device_id).map(Some),
            _ => Ok(None),
        }
    }

    fn empty_cache(&self) -> Result<()> {
        cuda::empty_cache()
    }
}

/// Whether work this thread enqueued on `stream` of `device_id` is done before the reuse of
/// `memory` (device memory) is ordered: the same device, and a stream the block's reuse waits
/// for (its own; any built-in one for the legacy stream; not another thread's default stream).
fn reuse_comes_after(device: DLDevice, memory: Memory, device_id: i32, stream: *mut c_void) -> bool {
    device.device_id == device_id && cuda::reuse_comes_after(memory.words[0], memory.words[1], stream as usize)
}
