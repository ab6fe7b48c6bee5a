//! Tensors dlpx allocates. On the host, one block holds the 256-byte aligned data, the managed
//! tensor, its shape and strides, so that allocate + delete is one cache pop and one push.
//! Elsewhere the block holds the description and the data comes from the device seam
//! (`devices`). The streams that used a tensor's memory are recorded in `recorded`.
//!
//! Block layout: `[data | pad to 16 | Header | shape[ndim] | strides[ndim]]`. The data leads so
//! it takes the block's 256-byte alignment without padding: 16 floats fit a 256-byte block.

mod recorded;

use std::ffi::{c_int, c_void};
use std::mem::size_of;
use std::ptr::{self, NonNull};
use std::sync::atomic::{AtomicPtr, Ordering};
use std::sync::Mutex;

pub use recorded::{record_fence, record_use};

use crate::abi::*;
use crate::devices::{self, Device, Memory, Uses};
use crate::error::{boundary, Error, ErrorCallback, Result};
use crate::layout;
use crate::memory::cpu::{self, Capacity};

#[repr(C)]
struct Header {
    managed: DLManagedTensorVersioned,
    block: NonNull<u8>,
    capacity: Capacity,
    /// Memory from the device seam; None: the data is in the block (host), or there is none.
    memory: Option<Memory>,
    /// Streams other than the allocation stream that work on the data was ordered on (NULL until
    /// the first): freeing waits for them, so reused memory cannot be overwritten under a reader.
    uses: AtomicPtr<Mutex<Uses>>,
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

/// [`allocate`], with DLPack `flags` recorded on the tensor: IS_SUBBYTE_TYPE_PADDED, which also
/// sizes sub-byte dtypes one element per byte (what a copy of a padded tensor needs), and
/// IS_COPIED (a private copy a row made, which `copy=True` does not copy again).
///
/// # Safety
/// As for [`allocate`].
pub unsafe fn allocate_with_flags(prototype: &DLTensor, flags: u64) -> Result<NonNull<DLManagedTensorVersioned>> {
    let flags = flags & (DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED | DLPACK_FLAG_BITMASK_IS_COPIED);
    // SAFETY: `ndim` values where not NULL, by the caller's contract.
    let shape = unsafe { layout::dims(prototype.ndim, prototype.shape, "prototype.shape") }?;
    crate::dtype::check(prototype.dtype)?;
    // The host, the hot case, statically: its calls inline (the seam's dispatch costs ~6 % of a
    // CPU allocation's time otherwise); every other device through the seam.
    if devices::allocates_on_host(prototype.device.device_type) {
        // SAFETY: forwarded contract.
        unsafe { allocate_on(&devices::HOST, prototype, shape, flags) }
    } else {
        // SAFETY: forwarded contract.
        unsafe { allocate_on(devices::allocating(prototype.device)?, prototype, shape, flags) }
    }
}

/// [`allocate_with_flags`] on `device`, the implementation that allocates on the prototype's
/// device.
///
/// # Safety
/// As for [`allocate`]; `shape` is the prototype's.
#[inline(always)]
unsafe fn allocate_on<D: Device + ?Sized>(
    device: &D,
    prototype: &DLTensor,
    shape: &[i64],
    flags: u64,
) -> Result<NonNull<DLManagedTensorVersioned>> {
    let ndim = shape.len();
    device.check(prototype.device)?;
    let numel = layout::numel(shape)?;
    let nbytes = layout::nbytes(numel, prototype.dtype, flags)?;
    let in_block = device.data_in_block();

    let too_large = || Error::memory(format!("cannot allocate {nbytes} bytes: larger than the address space"));
    let nbytes = usize::try_from(nbytes).map_err(|_| too_large())?;
    let header_offset = if in_block { nbytes.checked_next_multiple_of(16).ok_or_else(too_large)? } else { 0 };
    let mut block_size =
        header_offset.checked_add(size_of::<Header>() + 2 * ndim * size_of::<i64>()).ok_or_else(too_large)?;
    if in_block && nbytes > 0 {
        // Only blocks of at least ALIGN bytes come 256-byte aligned.
        block_size = block_size.max(cpu::ALIGN);
    }
    let memory = match (in_block, nbytes) {
        (true, _) => None,
        (false, 0) => {
            device.check_exists(prototype.device)?;
            None
        }
        (false, _) => {
            // Taken apart and put together again: the callee stores each word on its own, and
            // a wider copy of two such stores stalls the load (no store forwarding; 4 ns).
            let Memory { data, words: [a, b, c] } = device.allocate(prototype.device, nbytes)?;
            Some(Memory { data, words: [a, b, c] })
        }
    };
    let block = cpu::capacity_for(block_size).and_then(|capacity| Some((cpu::alloc(capacity)?, capacity)));
    let Some((block, capacity)) = block else {
        // SAFETY: the memory was allocated just above and nobody else has seen it.
        unsafe { free_memory(prototype.device, memory.as_ref(), Uses::default()) };
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
        let data = match memory {
            Some(memory) => memory.data,
            None if in_block && nbytes > 0 => base.cast::<c_void>(),
            None => ptr::null_mut(),
        };
        header.write(Header {
            managed: DLManagedTensorVersioned {
                version: DLPackVersion { major: DLPACK_MAJOR_VERSION, minor: DLPACK_MINOR_VERSION },
                manager_ctx: base.cast(),
                deleter: Some(delete),
                flags,
                dl_tensor: DLTensor {
                    data,
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
            memory,
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
        let out = crate::error::out(out, "out")?;
        let prototype = crate::error::given(prototype, "prototype")?;
        // SAFETY: non-NULL; the caller promises a valid prototype whose shape has ndim values.
        out.put(unsafe { allocate(prototype.as_ref())? }.as_ptr());
        Ok(0)
    })
}

/// Whether `managed`, a block from [`allocate`] ([`is_ours`]), describes more dimensions than its
/// block holds where its shape or strides still point into it: its owner raised `ndim` (the
/// struct is the owner's to write), and reading the description would run past the block.
///
/// # Safety
/// `managed` points to a live block from [`allocate`], with the whole block's provenance.
pub unsafe fn reads_past_its_block(managed: NonNull<DLManagedTensorVersioned>) -> bool {
    let header = managed.cast::<Header>().as_ptr();
    // SAFETY: the block's header, live (the caller's contract).
    let (block, capacity, dl) = unsafe { ((*header).block, (*header).capacity, &(*header).managed.dl_tensor) };
    let dims = header.wrapping_add(1).cast::<i64>();
    let end = block.as_ptr() as usize + capacity.bytes();
    let room = end.saturating_sub(dims as usize) / (2 * size_of::<i64>());
    let ndim = usize::try_from(dl.ndim).unwrap_or(0);
    let inside = |p: *mut i64| (dims as usize..end).contains(&(p as usize));
    ndim > room && (inside(dl.shape) || inside(dl.strides))
}

/// Whether `managed` is a block from [`allocate`] (its deleter is ours).
pub fn is_ours(managed: &DLManagedTensorVersioned) -> bool {
    managed
        .deleter
        .is_some_and(|d| std::ptr::fn_addr_eq(d, delete as unsafe extern "C" fn(*mut DLManagedTensorVersioned)))
}

unsafe extern "C" fn delete(managed: *mut DLManagedTensorVersioned) {
    if managed.is_null() {
        return;
    }
    // SAFETY: `managed` is the header of a block from `allocate`, which recorded the block, its
    // capacity and where the data lives there; the caller gives the tensor up.
    crate::error::guard("deleter", || unsafe {
        if (*managed).manager_ctx.is_null() {
            // Deleted a second time, before its block was reused: freeing it again would hand
            // its memory out twice. (The deleter itself stays, so the second call can arrive.)
            let err = Error::runtime(format!("tensor {managed:p} was deleted twice (the second call is ignored)"));
            crate::error::set_last_error(&err.at("deleter"));
            return;
        }
        (*managed).manager_ctx = ptr::null_mut();
        let header = &*managed.cast::<Header>();
        let (block, capacity) = (header.block, header.capacity);
        if let Some(memory) = &header.memory {
            let uses = header.uses.load(Ordering::Acquire);
            let uses = match uses.is_null() {
                true => Uses::default(),
                false => Box::from_raw(uses).into_inner().unwrap_or_else(|p| p.into_inner()),
            };
            free_memory(header.managed.dl_tensor.device, Some(memory), uses);
        }
        cpu::free(block, capacity);
    })
}

/// Gives memory from the device seam back. A deleter cannot report failure: the reason goes to
/// dlpx_last_error().
///
/// # Safety
/// `memory` came from `device`'s allocation and is given up by the caller.
#[inline(always)]
unsafe fn free_memory(device: DLDevice, memory: Option<&Memory>, uses: Uses) {
    let (Some(memory), Some(implementation)) = (memory, devices::of(device.device_type)) else { return };
    // SAFETY: per the contract.
    if let Err(err) = unsafe { implementation.free(device, memory, uses) } {
        crate::error::set_last_error(&err.at("deleter"));
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

    const F32: DLDataType = DLDataType { code: 2, bits: 32, lanes: 1 };

    #[test]
    fn allocates_aligned_compact_tensors_and_frees_them() {
        let mut shape = [3, 5];
        // SAFETY: a valid prototype; the result is deleted once.
        unsafe {
            let m = allocate(&prototype(&mut shape, DLDevice::CPU, F32)).unwrap();
            let dl = &m.as_ref().dl_tensor;
            assert_eq!(dl.data as usize % cpu::ALIGN, 0);
            assert_eq!(std::slice::from_raw_parts(dl.strides, 2), &[5, 1]);
            assert!(is_ours(m.as_ref()));
            (m.as_ref().deleter.unwrap())(m.as_ptr());
        }
        let mut empty = [4, 0];
        // SAFETY: as above.
        unsafe {
            let m = allocate(&prototype(&mut empty, DLDevice::CPU, F32)).unwrap();
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
        assert_eq!(refuse(&mut [2, -3], DLDevice::CPU, F32).fact(), "shape[1] = -3 is negative");
        assert!(refuse(&mut [i64::MAX, 4], DLDevice::CPU, F32).fact().contains("overflow"));
        assert!(refuse(&mut [2], DLDevice::CPU, DLDataType { code: 99, bits: 8, lanes: 1 })
            .fact()
            .contains("unknown dtype"));
        let tpu = DLDevice { device_type: DeviceType::TPU, device_id: 0 };
        let err = refuse(&mut [2], tpu, F32);
        assert_eq!(err.kind, crate::error::ErrorKind::NotImplementedError);
        assert!(err.fact().contains("tpu:0"), "{}", err.fact());
    }
}
