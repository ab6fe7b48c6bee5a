//! Tensors dlpx allocates. On the CPU, one block holds the 256-byte aligned data, the managed
//! tensor, its shape and strides, so that allocate + delete is one cache pop and one push.
//! On CUDA devices the block holds the description and the data comes from the driver.
//!
//! Block layout: `[data | pad to 16 | Header | shape[ndim] | strides[ndim]]`. The data leads so
//! it takes the block's 256-byte alignment without padding: 16 floats fit a 256-byte block.

use std::ffi::{c_int, c_void};
use std::mem::size_of;
use std::ptr::{self, NonNull};
use std::sync::atomic::{AtomicPtr, Ordering};
use std::sync::Mutex;

use crate::abi::*;
use crate::error::{boundary, Error, ErrorCallback, Result};
use crate::layout;
use crate::memory::cpu::{self, Capacity};
use crate::memory::cuda;

#[repr(C)]
struct Header {
    managed: DLManagedTensorVersioned,
    block: NonNull<u8>,
    capacity: Capacity,
    data: Data,
    /// Streams other than the allocation stream that work on the data was ordered on (NULL until
    /// the first): freeing waits for them, so reused memory cannot be overwritten under a reader.
    uses: AtomicPtr<Uses>,
}

type Uses = Mutex<cuda::Uses>;

/// Where the data lives, so the deleter knows how to free it.
#[derive(Clone, Copy)]
enum Data {
    /// In the block itself (CPU), or none (zero size).
    InBlock,
    /// cuMemAllocAsync'd, freed on the same stream.
    CudaDevice {
        device_id: i32,
        stream: *mut c_void,
    },
    /// Pinned host memory of this capacity, returned to the pinned cache.
    CudaHost {
        capacity: usize,
    },
    CudaManaged,
}

/// Allocates a compact row-major tensor like `prototype` (dtype, ndim, shape, device; its
/// strides and data are ignored). The caller owns the result and calls its deleter.
///
/// # Safety
/// `prototype.shape` points to `ndim` readable values when `ndim > 0`.
pub unsafe fn allocate(prototype: &DLTensor) -> Result<NonNull<DLManagedTensorVersioned>> {
    // SAFETY: forwarded contract.
    unsafe { allocate_with_flags(prototype, 0) }
}

/// [`allocate`], with DLPack `flags` recorded on the tensor; IS_SUBBYTE_TYPE_PADDED also sizes
/// sub-byte dtypes one element per byte (what a copy of a padded tensor needs).
///
/// # Safety
/// As for [`allocate`].
pub unsafe fn allocate_with_flags(prototype: &DLTensor, flags: u64) -> Result<NonNull<DLManagedTensorVersioned>> {
    let flags = flags & DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED;
    let ndim = layout::checked_ndim(prototype.ndim)?;
    if ndim > 0 && prototype.shape.is_null() {
        return Err(Error::value(format!("prototype.shape is NULL with ndim = {ndim}")));
    }
    let shape: &[i64] = if ndim == 0 {
        &[]
    } else {
        // SAFETY: non-NULL and `ndim` long, by the caller's contract.
        unsafe { std::slice::from_raw_parts(prototype.shape, ndim) }
    };
    crate::dtype::check(prototype.dtype)?;
    check_device(prototype.device)?;
    let numel = layout::numel(shape)?;
    let nbytes = layout::nbytes(numel, prototype.dtype, flags)?;
    let on_cpu = prototype.device.device_type == DeviceType::CPU;

    let too_large = || Error::memory(format!("cannot allocate {nbytes} bytes: larger than the address space"));
    let nbytes = usize::try_from(nbytes).map_err(|_| too_large())?;
    let header_offset = if on_cpu { nbytes.checked_next_multiple_of(16).ok_or_else(too_large)? } else { 0 };
    let mut block_size =
        header_offset.checked_add(size_of::<Header>() + 2 * ndim * size_of::<i64>()).ok_or_else(too_large)?;
    if on_cpu && nbytes > 0 {
        // Only blocks of at least ALIGN bytes come 256-byte aligned.
        block_size = block_size.max(cpu::ALIGN);
    }
    let (data, storage) = if on_cpu || nbytes == 0 {
        if !on_cpu {
            check_device_exists(prototype.device)?;
        }
        (ptr::null_mut(), Data::InBlock)
    } else {
        allocate_device_data(prototype.device, nbytes)?
    };
    let block = cpu::capacity_for(block_size).and_then(|capacity| Some((cpu::alloc(capacity)?, capacity)));
    let Some((block, capacity)) = block else {
        // SAFETY: the data was allocated just above and nobody else has seen it.
        unsafe { free_data(data, storage, cuda::Uses::default()) };
        return Err(Error::memory(format!("out of memory allocating {nbytes} bytes")));
    };

    // SAFETY: the block is at least `block_size` bytes and 256-byte aligned (16 for blocks too
    // small to hold data), so the data, the header and the dims fit and are aligned for their types.
    unsafe {
        let base = block.as_ptr();
        let header = base.add(header_offset).cast::<Header>();
        let dims = header.add(1).cast::<i64>();
        ptr::copy_nonoverlapping(shape.as_ptr(), dims, ndim);
        let strides = dims.add(ndim);
        layout::compact_strides(shape, std::slice::from_raw_parts_mut(strides, ndim));
        header.write(Header {
            managed: DLManagedTensorVersioned {
                version: DLPackVersion { major: DLPACK_MAJOR_VERSION, minor: DLPACK_MINOR_VERSION },
                manager_ctx: base.cast(),
                deleter: Some(delete),
                flags,
                dl_tensor: DLTensor {
                    data: if !on_cpu {
                        data
                    } else if nbytes == 0 {
                        ptr::null_mut()
                    } else {
                        base.cast::<c_void>()
                    },
                    device: prototype.device,
                    ndim: ndim as i32,
                    dtype: prototype.dtype,
                    shape: if ndim == 0 { ptr::null_mut() } else { dims },
                    strides: if ndim == 0 { ptr::null_mut() } else { strides },
                    byte_offset: 0,
                },
            },
            block,
            capacity,
            data: storage,
            uses: AtomicPtr::new(ptr::null_mut()),
        });
        Ok(NonNull::new_unchecked(header.cast()))
    }
}

/// `managed_tensor_allocator` of dlpx's table and of the synthetic ones: never touches Python
/// (tvm-ffi calls it with the GIL released); errors go to `SetError` exactly once (R3).
///
/// # Safety
/// The table's contract: `prototype` is NULL or a valid prototype whose shape holds `ndim`
/// values; `out` is NULL or writable.
pub unsafe extern "C" fn allocator_entry(
    prototype: *mut DLTensor,
    out: *mut *mut DLManagedTensorVersioned,
    error_ctx: *mut c_void,
    set_error: SetErrorFn,
) -> c_int {
    boundary(ErrorCallback(error_ctx, set_error), "allocator", || {
        let out = NonNull::new(out).ok_or_else(|| Error::null("out"))?;
        let prototype = NonNull::new(prototype).ok_or_else(|| Error::null("prototype"))?;
        // SAFETY: non-NULL; the caller promises a valid prototype whose shape has ndim values.
        let managed = unsafe { allocate(prototype.as_ref())? };
        // SAFETY: `out` is non-NULL and writable by the caller's contract.
        unsafe { out.as_ptr().write(managed.as_ptr()) };
        Ok(0)
    })
}

/// Whether `managed` is a block from [`allocate`] (its deleter is ours).
pub fn is_ours(managed: &DLManagedTensorVersioned) -> bool {
    managed
        .deleter
        .is_some_and(|d| std::ptr::fn_addr_eq(d, delete as unsafe extern "C" fn(*mut DLManagedTensorVersioned)))
}

/// Records that work on the data of `managed` (a block from [`allocate`]; anything else is
/// ignored) is being ordered on `stream` of CUDA device `device_id`: freeing the data then waits
/// for that stream's work (device memory), or reuse does (pinned memory). Torch's
/// `record_stream`, done for the consumer streams dlpx hears of.
///
/// # Safety
/// `managed` points to a live managed tensor (the header is reached through this pointer, so it
/// must carry the provenance of the whole block, not of a reference to the managed tensor).
pub unsafe fn record_use(managed: NonNull<DLManagedTensorVersioned>, device_id: i32, stream: *mut c_void) {
    // SAFETY: live, per the contract.
    if !is_ours(unsafe { managed.as_ref() }) {
        return;
    }
    // SAFETY: ours, so `managed` is the first field of a live Header.
    let header = unsafe { &*managed.as_ptr().cast::<Header>() };
    // Uses on other devices count too: a peer's kernel may read this device's memory.
    if !matches!(header.data, Data::CudaDevice { .. } | Data::CudaHost { .. }) {
        return;
    }
    // 0x2 names the calling thread's per-thread stream; the deleter may run on another thread.
    let stream = cuda::as_recordable(stream);
    if let Data::CudaDevice { device_id: home, stream: allocated_on } = header.data {
        if home == device_id && cuda::same_stream(allocated_on as usize, stream as usize) {
            return;
        }
    }
    let entry = (device_id, stream as usize);
    with_uses(header, |uses| {
        if !uses.streams.contains(&entry) {
            uses.streams.push(entry);
        }
    });
}

/// Records that a consumer's work on the data of `managed` was enqueued on `stream` of
/// `device_id` and is now complete as far as the host knows (its export was released): an event
/// recorded there now, which the free (or pinned reuse) waits for. Unlike a recorded stream it
/// touches no stream handle later, so the consumer may destroy its stream at once.
///
/// # Safety
/// As for [`record_use`].
pub unsafe fn record_fence(managed: NonNull<DLManagedTensorVersioned>, device_id: i32, stream: *mut c_void) {
    // SAFETY: live, per the contract.
    if !is_ours(unsafe { managed.as_ref() }) {
        return;
    }
    // SAFETY: ours, so `managed` is the first field of a live Header.
    let header = unsafe { &*managed.as_ptr().cast::<Header>() };
    let home = match header.data {
        Data::CudaDevice { device_id: home, stream: allocated_on } => {
            if home == device_id && cuda::same_stream(allocated_on as usize, stream as usize) {
                return;
            }
            home
        }
        Data::CudaHost { .. } => 0,
        _ => return,
    };
    let mut fenced = true;
    with_uses(header, |uses| fenced = uses.fence(device_id, stream));
    if !fenced {
        // The stream is already gone: wait for the devices rather than free under a reader.
        cuda::synchronise_device(device_id);
        if home != device_id {
            cuda::synchronise_device(home);
        }
    }
}

/// Runs `f` on the header's use list, creating it on first use.
fn with_uses(header: &Header, f: impl FnOnce(&mut cuda::Uses)) {
    let mut uses = header.uses.load(Ordering::Acquire);
    if uses.is_null() {
        let fresh = Box::into_raw(Box::new(Uses::new(cuda::Uses::default())));
        match header.uses.compare_exchange(ptr::null_mut(), fresh, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => uses = fresh,
            Err(winner) => {
                // SAFETY: `fresh` lost the race and was never shared.
                drop(unsafe { Box::from_raw(fresh) });
                uses = winner;
            }
        }
    }
    // SAFETY: the list lives until the deleter, which cannot run while the caller holds the tensor.
    f(&mut unsafe { &*uses }.lock().unwrap_or_else(|p| p.into_inner()));
}

unsafe extern "C" fn delete(managed: *mut DLManagedTensorVersioned) {
    if managed.is_null() {
        return;
    }
    // SAFETY: `managed` is the header of a block from `allocate`, which recorded the block, its
    // capacity and where the data lives there; the caller gives the tensor up.
    crate::error::guard("deleter", || unsafe {
        let header = &*managed.cast::<Header>();
        let (block, capacity) = (header.block, header.capacity);
        let uses = header.uses.load(Ordering::Acquire);
        let uses = if uses.is_null() {
            cuda::Uses::default()
        } else {
            Box::from_raw(uses).into_inner().unwrap_or_else(|p| p.into_inner())
        };
        free_data(header.managed.dl_tensor.data, header.data, uses);
        cpu::free(block, capacity);
    })
}

/// Releases data that does not live in the block. A deleter cannot report failure: the reason
/// goes to dlpx_last_error().
unsafe fn free_data(data: *mut c_void, storage: Data, uses: cuda::Uses) {
    if matches!(storage, Data::InBlock) || data.is_null() {
        return;
    }
    // SAFETY: `data` was allocated as `storage` says and is given up by the caller.
    let freed = unsafe {
        match storage {
            Data::InBlock => Ok(()),
            Data::CudaDevice { device_id, stream } => cuda::free_device(device_id, data, stream, uses),
            Data::CudaHost { capacity } => cuda::free_pinned(data, capacity, &uses),
            Data::CudaManaged => cuda::free_managed(data),
        }
    };
    if let Err(err) = freed {
        crate::error::set_last_error(&err.at("deleter"));
    }
}

fn allocate_device_data(device: DLDevice, nbytes: usize) -> Result<(*mut c_void, Data)> {
    match device.device_type {
        DeviceType::CUDA => {
            let stream = crate::stream::current(device);
            let data = cuda::alloc_device(device.device_id, nbytes, stream)?;
            // The deleter may run on another thread, whose per-thread default stream is another
            // stream (see `cuda::as_recordable`). A stream handle the user set must outlive the
            // tensors allocated on it.
            let free_on = cuda::as_recordable(stream);
            Ok((data, Data::CudaDevice { device_id: device.device_id, stream: free_on }))
        }
        DeviceType::CUDA_HOST => {
            let capacity = cuda::pinned_capacity(nbytes)
                .ok_or_else(|| Error::memory(format!("cannot allocate {nbytes} pinned bytes")))?;
            Ok((cuda::alloc_pinned(capacity)?, Data::CudaHost { capacity }))
        }
        DeviceType::CUDA_MANAGED => Ok((cuda::alloc_managed(nbytes)?, Data::CudaManaged)),
        _ => unreachable!("check_device admits only CPU and CUDA kinds"),
    }
}

/// A zero-size CUDA tensor needs no memory, but its device must still exist.
fn check_device_exists(device: DLDevice) -> Result<()> {
    let id = if device.device_type == DeviceType::CUDA { device.device_id } else { 0 };
    cuda::check_device(id)
}

fn check_device(device: DLDevice) -> Result<()> {
    match device.device_type {
        DeviceType::CPU | DeviceType::CUDA_HOST | DeviceType::CUDA_MANAGED if device.device_id != 0 => {
            Err(Error::value(format!(
                "device {} is invalid: device_id must be 0 for host, pinned and managed memory",
                crate::device::name(device)
            )))
        }
        DeviceType::CPU | DeviceType::CUDA_HOST | DeviceType::CUDA_MANAGED => Ok(()),
        DeviceType::CUDA if device.device_id < 0 => {
            Err(Error::value(format!("device {} is invalid: device_id is negative", crate::device::name(device))))
        }
        DeviceType::CUDA => Ok(()),
        t if crate::device::is_known(t) => Err(Error::not_implemented(format!(
            "allocation on device {} is not supported (dlpx allocates on cpu, cuda, cuda_host and cuda_managed)",
            crate::device::name(device)
        ))),
        t => Err(Error::value(format!("unknown device type {} (DLPack names {})", t.0, crate::device::known_range()))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn prototype(shape: &mut [i64], device: DLDevice, dtype: DLDataType) -> DLTensor {
        DLTensor {
            data: std::ptr::null_mut(),
            device,
            ndim: shape.len() as i32,
            dtype,
            shape: shape.as_mut_ptr(),
            strides: std::ptr::null_mut(),
            byte_offset: 0,
        }
    }

    const CPU: DLDevice = DLDevice { device_type: DeviceType::CPU, device_id: 0 };
    const F32: DLDataType = DLDataType { code: 2, bits: 32, lanes: 1 };

    #[test]
    fn allocates_aligned_compact_tensors_and_frees_them() {
        let mut shape = [3, 5];
        // SAFETY: a valid prototype; the result is deleted once.
        unsafe {
            let m = allocate(&prototype(&mut shape, CPU, F32)).unwrap();
            let dl = &m.as_ref().dl_tensor;
            assert_eq!(dl.data as usize % cpu::ALIGN, 0);
            assert_eq!(std::slice::from_raw_parts(dl.strides, 2), &[5, 1]);
            assert!(is_ours(m.as_ref()));
            (m.as_ref().deleter.unwrap())(m.as_ptr());
        }
        let mut empty = [4, 0];
        // SAFETY: as above.
        unsafe {
            let m = allocate(&prototype(&mut empty, CPU, F32)).unwrap();
            assert!(m.as_ref().dl_tensor.data.is_null(), "R6: zero-size tensors have no data");
            (m.as_ref().deleter.unwrap())(m.as_ptr());
        }
    }

    #[test]
    fn refuses_what_no_tensor_can_be_and_devices_it_cannot_allocate_on() {
        let refuse = |shape: &mut [i64], device: DLDevice, dtype: DLDataType| {
            // SAFETY: a valid prototype; nothing is allocated on failure.
            unsafe { allocate(&prototype(shape, device, dtype)) }.err().unwrap()
        };
        assert_eq!(refuse(&mut [2, -3], CPU, F32).fact(), "shape[1] = -3 is negative");
        assert!(refuse(&mut [i64::MAX, 4], CPU, F32).fact().contains("overflow"));
        assert!(refuse(&mut [2], CPU, DLDataType { code: 99, bits: 8, lanes: 1 }).fact().contains("unknown dtype"));
        let tpu = DLDevice { device_type: DeviceType::TPU, device_id: 0 };
        let err = refuse(&mut [2], tpu, F32);
        assert_eq!(err.kind, crate::error::ErrorKind::NotImplementedError);
        assert!(err.fact().contains("tpu:0"), "{}", err.fact());
    }
}
