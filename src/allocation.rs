//! Tensors dlpx allocates: one block holding the managed tensor, its shape and strides, and the
//! 256-byte aligned data, so that allocate + delete is one cache pop and one push.
//!
//! Block layout: `[Header | shape[ndim] | strides[ndim] | pad to 256 | data]`.

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

    let dims_end = size_of::<Header>() + 2 * ndim * size_of::<i64>();
    let data_offset = dims_end.next_multiple_of(cpu::ALIGN);
    let too_large = || Error::memory(context, format!("cannot allocate {nbytes} bytes: larger than the address space"));
    let block_size = if nbytes == 0 {
        dims_end
    } else {
        usize::try_from(nbytes).ok().and_then(|n| data_offset.checked_add(n)).ok_or_else(too_large)?
    };
    let capacity = cpu::capacity_for(block_size).ok_or_else(too_large)?;
    let block = cpu::alloc(capacity)
        .ok_or_else(|| Error::memory(context, format!("out of memory allocating {nbytes} bytes")))?;

    // SAFETY: the block is at least `block_size` bytes and 256-byte aligned, so the header, the
    // dims and the data all fit and are aligned for their types.
    unsafe {
        let base = block.as_ptr();
        let dims = base.add(size_of::<Header>()).cast::<i64>();
        ptr::copy_nonoverlapping(shape.as_ptr(), dims, ndim);
        let strides = dims.add(ndim);
        layout::compact_strides(shape, std::slice::from_raw_parts_mut(strides, ndim));
        let header = base.cast::<Header>();
        header.write(Header {
            managed: DLManagedTensorVersioned {
                version: DLPackVersion { major: DLPACK_MAJOR_VERSION, minor: DLPACK_MINOR_VERSION },
                manager_ctx: base.cast(),
                deleter: Some(delete),
                flags: 0,
                dl_tensor: DLTensor {
                    data: if nbytes == 0 { ptr::null_mut() } else { base.add(data_offset).cast::<c_void>() },
                    device: prototype.device,
                    ndim: ndim as i32,
                    dtype: prototype.dtype,
                    shape: if ndim == 0 { ptr::null_mut() } else { dims },
                    strides: if ndim == 0 { ptr::null_mut() } else { strides },
                    byte_offset: 0,
                },
            },
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
    // SAFETY: `managed` is the header at the start of a block from `allocate`; the capacity was
    // written there at allocation and the caller gives the block up.
    unsafe {
        let capacity = (*managed.cast::<Header>()).capacity;
        cpu::free(NonNull::new_unchecked(managed.cast()), capacity);
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
