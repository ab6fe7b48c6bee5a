//! Tensors dlpx allocates: one block holding the 256-byte aligned data, the managed tensor, its
//! shape and strides, so that allocate + delete is one cache pop and one push.
//!
//! Block layout: `[data | pad to 16 | Header | shape[ndim] | strides[ndim]]`. The data leads so
//! it takes the block's 256-byte alignment without padding: 16 floats fit a 256-byte block.

use std::ffi::c_void;
use std::mem::size_of;
use std::ptr::{self, NonNull};

use crate::abi::*;
use crate::error::{Error, Result};
use crate::layout;
use crate::memory::cpu::{self, Capacity};

#[repr(C)]
struct Header {
    managed: DLManagedTensorVersioned,
    block: NonNull<u8>,
    capacity: Capacity,
}

/// Allocates a compact row-major tensor like `prototype` (dtype, ndim, shape, device; its
/// strides and data are ignored). The caller owns the result and calls its deleter.
///
/// # Safety
/// `prototype.shape` points to `ndim` readable values when `ndim > 0`.
pub unsafe fn allocate(context: &str, prototype: &DLTensor) -> Result<NonNull<DLManagedTensorVersioned>> {
    let ndim = checked_ndim(context, prototype.ndim)?;
    if ndim > 0 && prototype.shape.is_null() {
        return Err(Error::value(context, format!("prototype.shape is NULL with ndim = {ndim}")));
    }
    let shape: &[i64] = if ndim == 0 {
        &[]
    } else {
        // SAFETY: non-NULL and `ndim` long, by the caller's contract.
        unsafe { std::slice::from_raw_parts(prototype.shape, ndim) }
    };
    layout::check_dtype(context, prototype.dtype)?;
    check_device(context, prototype.device)?;
    let numel = layout::numel(context, shape)?;
    let nbytes = layout::nbytes(context, numel, prototype.dtype, 0)?;

    let too_large = || Error::memory(context, format!("cannot allocate {nbytes} bytes: larger than the address space"));
    let header_offset = usize::try_from(nbytes)
        .ok()
        .and_then(|n| n.checked_next_multiple_of(16))
        .ok_or_else(too_large)?;
    let mut block_size = header_offset
        .checked_add(size_of::<Header>() + 2 * ndim * size_of::<i64>())
        .ok_or_else(too_large)?;
    if nbytes > 0 {
        // Only blocks of at least ALIGN bytes come 256-byte aligned.
        block_size = block_size.max(cpu::ALIGN);
    }
    let capacity = cpu::capacity_for(block_size).ok_or_else(too_large)?;
    let block = cpu::alloc(capacity)
        .ok_or_else(|| Error::memory(context, format!("out of memory allocating {nbytes} bytes")))?;

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
                flags: 0,
                dl_tensor: DLTensor {
                    data: if nbytes == 0 { ptr::null_mut() } else { base.cast::<c_void>() },
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
        });
        Ok(NonNull::new_unchecked(header.cast()))
    }
}

/// Whether `managed` is a block from [`allocate`] (its deleter is ours).
pub fn is_ours(managed: &DLManagedTensorVersioned) -> bool {
    managed.deleter.is_some_and(|d| std::ptr::fn_addr_eq(d, delete as unsafe extern "C" fn(*mut DLManagedTensorVersioned)))
}

unsafe extern "C" fn delete(managed: *mut DLManagedTensorVersioned) {
    if managed.is_null() {
        return;
    }
    // SAFETY: `managed` is the header of a block from `allocate`, which recorded the block and
    // its capacity there; the caller gives the block up.
    unsafe {
        let header = &*managed.cast::<Header>();
        cpu::free(header.block, header.capacity);
    }
}

pub fn checked_ndim(context: &str, ndim: i32) -> Result<usize> {
    if ndim < 0 {
        return Err(Error::value(context, format!("ndim = {ndim} is negative")));
    }
    if ndim as usize > layout::MAX_NDIM {
        return Err(Error::value(context, format!("ndim = {ndim} exceeds the maximum of {}", layout::MAX_NDIM)));
    }
    Ok(ndim as usize)
}

fn check_device(context: &str, device: DLDevice) -> Result<()> {
    match device.device_type {
        DeviceType::CPU if device.device_id == 0 => Ok(()),
        DeviceType::CPU => Err(Error::value(context, format!("device cpu:{} is invalid: CPU device_id must be 0", device.device_id))),
        t if crate::device::is_known(t) => Err(Error::not_implemented(
            context,
            format!("allocation on device {} is not supported (dlpx allocates on cpu)", crate::device::name(device)),
        )),
        t => Err(Error::value(context, format!("unknown device type {} (DLPack 1.3 defines 1..=18)", t.0))),
    }
}
