//! The device seam (docs/design.md, "Devices: one seam"): everything dlpx does that depends on
//! where memory lives is one trait, [`Device`]; [`of`] is the one dispatch. Adding a device is
//! one file implementing it and one line in [`DEVICES`].

mod cuda;
mod host;

use std::ffi::c_void;

use crate::abi::{DLDevice, DeviceType};
use crate::error::{Error, Result};
pub use crate::memory::cuda::DlpxCudaMemoryStats;
pub use crate::memory::cuda::Uses;
pub use host::HOST;

/// Every device dlpx allocates on, copies from or orders work on, with the device types each
/// serves (data, not a method: [`of`], on every hot path, is then a few comparisons).
pub static DEVICES: [Implementation; 2] = [
    Implementation { types: host::TYPES, device: &host::HOST },
    Implementation { types: cuda::TYPES, device: &cuda::CUDA },
];

/// One implementation of [`Device`] and the device types it serves.
pub struct Implementation {
    pub types: &'static [DeviceType],
    pub device: &'static dyn Device,
}

/// Memory a device gave a tensor: its address and the device's own words about it (CUDA: its
/// cached block, the allocation stream and the word its free presents; pinned memory: its
/// capacity), kept in the tensor's header.
#[derive(Clone, Copy, Debug)]
pub struct Memory {
    pub data: *mut c_void,
    pub words: [usize; 3],
}

pub trait Device: Sync {
    /// The device types it allocates on (a subset of those its [`Implementation`] names).
    fn allocates(&self) -> &'static [DeviceType];

    /// Whether the host reads memory of `device_type` directly.
    fn host_accessible(&self, device_type: DeviceType) -> bool;

    /// Whether a tensor's data lives in its allocation block (host memory): nothing else to
    /// allocate or free.
    fn data_in_block(&self) -> bool {
        false
    }

    /// Refuses an id no device of this kind can have (before anything else of an allocation).
    fn check(&self, device: DLDevice) -> Result<()>;

    /// Refuses a device that does not exist (a zero-size tensor allocates nothing, yet its
    /// device must exist).
    fn check_exists(&self, device: DLDevice) -> Result<()> {
        let _ = device;
        Ok(())
    }

    /// `nbytes` (> 0) for a tensor on `device`, ordered on this thread's current stream there.
    fn allocate(&self, device: DLDevice, nbytes: usize) -> Result<Memory>;

    /// Frees what [`Device::allocate`] gave, after the work recorded in `uses`.
    ///
    /// # Safety
    /// `memory` came from `allocate(device, …)` and is not used afterwards.
    unsafe fn free(&self, device: DLDevice, memory: &Memory, uses: Uses) -> Result<()>;

    /// The use to record when work on `memory` is ordered on `stream` of `device_id` (torch's
    /// `record_stream`); None where the free waits for it anyway.
    fn use_to_record(
        &self,
        device: DLDevice,
        memory: Memory,
        device_id: i32,
        stream: *mut c_void,
    ) -> Option<(i32, usize)> {
        let _ = (device, memory, device_id, stream);
        None
    }

    /// Fences a consumer's work on `memory`, enqueued so far on `stream` of `device_id`, into
    /// `uses` (an event the free waits for). False when the stream is gone: the caller then waits
    /// for the devices ([`Device::synchronise`]) rather than free under a reader.
    fn fence(&self, device: DLDevice, memory: Memory, uses: &mut Uses, device_id: i32, stream: *mut c_void) -> bool {
        let _ = (device, memory, uses, device_id, stream);
        true
    }

    /// Waits for all work of device `device_id` of this kind (the fallback when an ordering
    /// cannot be made).
    fn synchronise(&self, device_id: i32) {
        let _ = device_id;
    }

    /// Whether `copy` reads memory of `from` into memory of `to` on this device.
    fn can_copy(&self, from: DLDevice, to: DLDevice) -> bool;

    /// Copies `nbytes` of contiguous memory from `src` on `from` to `dst` on `to`, ordered on
    /// this thread's current stream; a copy to the host is complete when it returns.
    ///
    /// # Safety
    /// `src` holds `nbytes` readable bytes of `from`, `dst` `nbytes` writable bytes of `to`.
    unsafe fn copy(
        &self,
        from: DLDevice,
        to: DLDevice,
        dst: *mut c_void,
        src: *const c_void,
        nbytes: usize,
    ) -> Result<()>;

    /// The stream a use on `stream` is recorded as, so that a later thread can name it (CUDA's
    /// per-thread default stream names another stream on each thread).
    fn recordable(&self, stream: *mut c_void) -> *mut c_void {
        stream
    }

    /// Whether dlpx may still use `stream`, named by a DLPack consumer, after the call that
    /// named it returned: only a stream no one can destroy. The consumer owns its streams (the
    /// array API: "the ownership of the stream stays with the consumer") and may destroy one
    /// while its export still lives (cupy does, when a stream object is collected first).
    fn outlives_its_consumer(&self, stream: *mut c_void) -> bool {
        let _ = stream;
        false
    }

    /// Whether this device's kernels address memory of `device_type` by pointer: what the CUDA
    /// array interface describes.
    fn kernel_addressable(&self, device_type: DeviceType) -> bool {
        let _ = device_type;
        false
    }

    /// The stream a reader of `device`'s memory synchronises with before it reads (the CUDA
    /// array interface's `stream`: 1 the legacy default stream, 2 the per-thread one, else the
    /// handle); None where nothing is to be synchronised.
    fn reader_stream(&self, device: DLDevice) -> Option<i64> {
        let _ = device;
        None
    }

    /// The device of the memory `address` lies in, if it is this kind's (None: not its to say).
    fn device_of_address(&self, address: usize) -> Option<Result<DLDevice>> {
        let _ = address;
        None
    }

    /// Whether work on memory of `device_type` is ordered on the device's streams (a consumer
    /// of dlpx's table works on dlpx's current stream there, recorded as a use).
    fn has_streams(&self, device_type: DeviceType) -> bool {
        let _ = device_type;
        false
    }

    /// The stream a DLPack consumer named in `__dlpack__(stream=…)` for memory of `device`
    /// (docs/design.md R9): the stream to order after dlpx's, or None where nothing is to be
    /// ordered.
    fn consumer_stream(&self, device: DLDevice, value: Option<i64>) -> Result<Option<*mut c_void>>;

    /// Makes `consumer` wait for the work enqueued so far on `producer` (an event, never a
    /// device synchronisation).
    fn order_after(&self, device: DLDevice, producer: *mut c_void, consumer: *mut c_void) -> Result<()> {
        let _ = (device, producer, consumer);
        Ok(())
    }

    /// [`Device::order_after`] for a `producer` another framework named, which may be a stream
    /// of another device than `device` (whose memory it wrote).
    fn order_after_foreign(&self, device: DLDevice, producer: *mut c_void, consumer: *mut c_void) -> Result<()> {
        self.order_after(device, producer, consumer)
    }

    /// Waits on the host for the work enqueued so far on `producer`, a stream of `device`: the
    /// host reads memory of a host-accessible kind (pinned, managed) that a stream writes.
    fn host_waits_for(&self, device: DLDevice, producer: *mut c_void) -> Result<()> {
        let _ = (device, producer);
        Ok(())
    }

    /// The statistics of the memory this device kind keeps on `device` (None: it keeps none).
    fn memory_stats(&self, device: DLDevice) -> Result<Option<DlpxCudaMemoryStats>> {
        let _ = device;
        Ok(None)
    }

    /// Gives the memory this device kind keeps for reuse back to its driver.
    fn empty_cache(&self) -> Result<()> {
        Ok(())
    }
}

/// The memory statistics of `device` (docs/cuda.md, "The CUDA block cache"); an error for a
/// device whose kind keeps none.
pub fn memory_stats(device: DLDevice) -> Result<DlpxCudaMemoryStats> {
    of(device.device_type).map_or(Ok(None), |d| d.memory_stats(device))?.ok_or_else(|| {
        Error::value(format!("dlpx keeps no memory statistics for {} memory", crate::device_names::name(device)))
    })
}

/// Gives the memory every device kind keeps for reuse back to its driver.
pub fn empty_cache() -> Result<()> {
    DEVICES.iter().try_for_each(|row| row.device.empty_cache())
}

/// The implementation serving `device_type`, if dlpx has one.
#[inline]
pub fn of(device_type: DeviceType) -> Option<&'static dyn Device> {
    DEVICES.iter().find(|row| row.types.contains(&device_type)).map(|row| row.device)
}

/// The implementation allocating on `device`, or the refusal of a device dlpx does not allocate
/// on.
pub fn allocating(device: DLDevice) -> Result<&'static dyn Device> {
    of(device.device_type).filter(|d| d.allocates().contains(&device.device_type)).ok_or_else(|| unsupported(device))
}

/// Whether the host reads memory of `device_type` directly.
pub fn host_accessible(device_type: DeviceType) -> bool {
    of(device_type).is_some_and(|device| device.host_accessible(device_type))
}

/// Whether work on memory of `device_type` is ordered on streams (the host's never is: every
/// import and view asks, so the CPU is answered by one comparison, the rest by the seam).
#[inline(always)]
pub fn has_streams(device_type: DeviceType) -> bool {
    device_type != DeviceType::CPU && device_has_streams(device_type)
}

#[inline(never)]
fn device_has_streams(device_type: DeviceType) -> bool {
    of(device_type).is_some_and(|device| device.has_streams(device_type))
}

/// [`Device::kernel_addressable`]: whether memory of `device_type` is a kernel's by pointer.
pub fn kernel_addressable(device_type: DeviceType) -> bool {
    of(device_type).is_some_and(|device| device.kernel_addressable(device_type))
}

/// [`Device::reader_stream`] for `device`.
pub fn interface_stream(device: DLDevice) -> Option<i64> {
    of(device.device_type).and_then(|d| d.reader_stream(device))
}

/// The device of the memory `address` lies in, asked of each device kind that can say (the CUDA
/// array interface names a pointer, not a device).
pub fn device_of_address(address: usize) -> Result<DLDevice> {
    DEVICES
        .iter()
        .find_map(|row| row.device.device_of_address(address))
        .unwrap_or_else(|| Err(Error::buffer(format!("no device dlpx knows holds address {address:#x}"))))
}

/// [`Device::recordable`] for memory of `device`.
pub fn recordable(device: DLDevice, stream: *mut c_void) -> *mut c_void {
    of(device.device_type).map_or(stream, |d| d.recordable(stream))
}

/// [`Device::outlives_its_consumer`] for a stream of `device`.
pub fn outlives_its_consumer(device: DLDevice, stream: *mut c_void) -> bool {
    of(device.device_type).is_some_and(|d| d.outlives_its_consumer(stream))
}

/// Makes `consumer` wait for `producer` on `device` (nothing where there is nothing to order).
pub fn order_after(device: DLDevice, producer: *mut c_void, consumer: *mut c_void) -> Result<()> {
    of(device.device_type).map_or(Ok(()), |d| d.order_after(device, producer, consumer))
}

/// Orders the reader of memory on `device` after `producer`'s work so far, a stream another
/// framework named (of any device): the host, waiting, for memory it reads directly (pinned,
/// managed: `host_accessible`); else dlpx's current stream there, with an event.
pub fn order_reader_after(device: DLDevice, producer: *mut c_void) -> Result<()> {
    let Some(d) = of(device.device_type) else { return Ok(()) };
    match d.host_accessible(device.device_type) {
        true => d.host_waits_for(device, producer),
        false => d.order_after_foreign(device, producer, crate::stream::current(device)),
    }
}

/// The stream a DLPack consumer named for memory of `device`; for a device dlpx has no
/// implementation of (a tensor imported from ROCm, a TPU), dlpx never enqueued work there, so
/// there is nothing of its own to order after, and a stream named cannot be honoured.
pub fn consumer_stream(device: DLDevice, value: Option<i64>) -> Result<Option<*mut c_void>> {
    match (of(device.device_type), value) {
        (Some(d), _) => d.consumer_stream(device, value),
        (None, None | Some(-1)) => Ok(None),
        (None, Some(_)) => Err(Error::buffer(format!(
            "stream synchronisation for {} tensors is not supported",
            crate::device_names::name(device)
        ))),
    }
}

/// Refuses a device no current stream can be set on (`stream::set_current`): the CPU, which has
/// none (every other device type DLPack names may hold one, whether or not dlpx orders work
/// there), a type DLPack does not name (as the allocator and `dlpx_call_stream` refuse it), or a
/// negative id.
pub fn check_stream_settable(device: DLDevice) -> Result<()> {
    if device.device_type == DeviceType::CPU {
        return Err(Error::value("cpu has no streams"));
    }
    if !crate::device_names::is_known(device.device_type) {
        return Err(crate::device_names::unknown(device.device_type));
    }
    if device.device_id < 0 {
        return Err(crate::device_names::negative_id(device.device_id));
    }
    Ok(())
}

/// Whether the host allocates tensors of `device_type`, their data in the allocation block: the
/// allocator's fast path, taken statically (its calls inline).
#[inline(always)]
pub fn allocates_on_host(device_type: DeviceType) -> bool {
    HOST.allocates().contains(&device_type)
}

/// Refuses an id no device of its kind can have ([`Device::check`]: cpu:1, cuda:-1), asking no
/// driver; for a kind dlpx has no implementation of, a negative id.
pub fn check_id(device: DLDevice) -> Result<()> {
    match of(device.device_type) {
        Some(d) => d.check(device),
        None if device.device_id < 0 => Err(crate::device_names::negative_id(device.device_id)),
        None => Ok(()),
    }
}

/// Refuses a device that does not exist ([`Device::check_exists`]); a device dlpx has no
/// implementation of is not its to judge.
pub fn check_exists(device: DLDevice) -> Result<()> {
    of(device.device_type).map_or(Ok(()), |d| d.check_exists(device))
}

/// Whether a CUDA driver can be loaded in this process (without initialising it).
pub fn driver_present() -> bool {
    crate::memory::cuda::driver_present()
}

/// The refusal of a host, pinned or managed device other than 0.
pub(crate) fn only_device_zero(device: DLDevice) -> Error {
    Error::value(format!(
        "device {} is invalid: device_id must be 0 for host, pinned and managed memory",
        crate::device_names::name(device)
    ))
}

#[cold]
fn unsupported(device: DLDevice) -> Error {
    match crate::device_names::is_known(device.device_type) {
        true => {
            let names: Vec<&str> = DEVICES
                .iter()
                .flat_map(|row| row.device.allocates())
                .filter_map(|&t| crate::device_names::type_name(t))
                .collect();
            let list = match names.split_last() {
                Some((last, [])) => last.to_string(),
                Some((last, rest)) => format!("{} and {last}", rest.join(", ")),
                None => String::new(),
            };
            Error::not_implemented(format!(
                "allocation on device {} is not supported (dlpx allocates on {list})",
                crate::device_names::name(device)
            ))
        }
        false => crate::device_names::unknown(device.device_type),
    }
}
