//! Copies of host tensors into fresh compact tensors (for `copy=True` and device requests), and
//! of host items by byte strides (for the layouts only a copy can bring across).

use crate::abi::*;
use crate::devices;
use crate::error::{Error, Result};
use crate::tensor::Tensor;

/// A compact, writable copy of `src` in CPU memory (a device move when `src` is elsewhere).
pub fn to_new_cpu_tensor(src: &Tensor) -> Result<Tensor> {
    copy_to(src, DLDevice::CPU)
}

/// A compact, writable copy of `src` on its own device (what `copy=True` asks for).
pub fn duplicate(src: &Tensor) -> Result<Tensor> {
    copy_to(src, src.dl_tensor().device)
}

fn copy_to(src: &Tensor, target: DLDevice) -> Result<Tensor> {
    let dl = src.dl_tensor();
    let Some(device) = devices::of(dl.device.device_type).filter(|d| d.can_copy(dl.device, target)) else {
        return Err(Error::buffer(format!(
            "cannot copy from {} to {}: dlpx copies host-accessible memory and CUDA memory",
            crate::device_names::name(dl.device),
            crate::device_names::name(target)
        )));
    };
    // Same shape, dtype and sub-byte padding, so the byte sizes agree.
    let padded = src.flags() & DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED;
    let dst = Tensor::empty_with_flags(src.shape(), dl.dtype, target, padded)?;
    if src.numel() == 0 {
        return Ok(dst);
    }
    let src_base = dl.data.cast::<u8>().wrapping_add(dl.byte_offset as usize);
    let dst_base = dst.dl_tensor().data.cast::<u8>();
    let nbytes = src.nbytes() as usize;
    debug_assert_eq!(src.nbytes(), dst.nbytes());
    if src.is_contiguous() {
        if devices::has_streams(target.device_type) {
            // The copy reads the source on dlpx's current stream and is not waited for (one to
            // the host is): a use of the source there, as a kernel's view through the table is,
            // so its block is not reused on its own stream before the copy is done.
            src.record_current_stream();
        }
        // SAFETY: both regions hold `nbytes` bytes of their devices, which `device` copies between.
        unsafe { device.copy(dl.device, target, dst_base.cast(), src_base.cast(), nbytes)? };
        return Ok(dst);
    }
    if !devices::host_accessible(dl.device.device_type) {
        return Err(Error::buffer(format!(
            "cannot copy a non-contiguous {} tensor (make it contiguous first)",
            crate::device_names::name(dl.device)
        )));
    }
    let bits = crate::layout::element_bits(dl.dtype, src.flags());
    if bits % 8 != 0 {
        return Err(Error::buffer("cannot copy a strided tensor of a packed sub-byte dtype"));
    }
    let item = (bits / 8) as usize;
    let mut written = 0usize;
    // SAFETY: every source offset lies inside the producer's tensor (its strides describe it);
    // the destination is filled in order and holds numel * item bytes.
    unsafe { gather(src_base, src.shape(), src.strides(), item as isize, item, dst_base, &mut written) };
    Ok(dst)
}

/// A compact host copy of `dtype` items laid out from `src` by `shape` and strides in bytes, which
/// need not be whole items (the buffer protocol's and the array interfaces' layouts: DLPack cannot
/// describe those, so only a copy crosses): a private copy, marked IS_COPIED, which `copy=True`
/// does not copy again.
///
/// # Safety
/// Every item the shape and byte strides reach from `src` is readable host memory.
pub unsafe fn gather_bytes(src: *const u8, shape: &[i64], byte_strides: &[i64], dtype: DLDataType) -> Result<Tensor> {
    // Byte strides from an exporter, read as hostile: offsets that overflow never reach `gather`.
    let reach = crate::layout::reach(shape, byte_strides, 8)
        .map_err(|dim| crate::layout::overflowing_strides(shape, byte_strides, dim, 8))?;
    if !shape.contains(&0) && !crate::layout::addresses_fit(src.cast(), 0, reach) {
        return Err(crate::layout::wrapping_addresses(src.cast(), 0, reach));
    }
    let dst = Tensor::empty_with_flags(shape, dtype, DLDevice::CPU, DLPACK_FLAG_BITMASK_IS_COPIED)?;
    if dst.numel() > 0 {
        let mut written = 0usize;
        let item = crate::layout::element_bits(dtype, 0) as usize / 8;
        // SAFETY: per the contract; the destination holds numel * item bytes, filled in order.
        unsafe { gather(src, shape, byte_strides, 1, item, dst.dl_tensor().data.cast(), &mut written) };
    }
    Ok(dst)
}

/// Copies `item`-byte items in row-major order from `src`, whose dimension `i` steps
/// `strides[i] * unit` bytes (`unit`: the item size for element strides, 1 for byte strides).
unsafe fn gather(
    src: *const u8,
    shape: &[i64],
    strides: &[i64],
    unit: isize,
    item: usize,
    dst: *mut u8,
    written: &mut usize,
) {
    match shape {
        [] => {
            // SAFETY: per the caller.
            unsafe { std::ptr::copy_nonoverlapping(src, dst.add(*written), item) };
            *written += item;
        }
        [extent, rest @ ..] => {
            for i in 0..*extent as isize {
                let at = src.wrapping_offset(i * strides[0] as isize * unit);
                // SAFETY: per the caller.
                unsafe { gather(at, rest, &strides[1..], unit, item, dst, written) };
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ptr::NonNull;
    use std::sync::atomic::{AtomicUsize, Ordering};

    static DELETED: AtomicUsize = AtomicUsize::new(0);

    unsafe extern "C" fn count_delete(_: *mut DLManagedTensorVersioned) {
        DELETED.fetch_add(1, Ordering::SeqCst);
    }

    #[test]
    fn a_strided_padded_sub_byte_tensor_with_lanes_copies_whole_elements() {
        // int4 x 2 lanes, IS_SUBBYTE_TYPE_PADDED: 2 bytes per element; every other element.
        let mut data: Vec<u8> = (0..16).collect();
        let mut shape = [2i64];
        let mut strides = [2i64];
        let mut managed = DLManagedTensorVersioned {
            version: DLPackVersion { major: DLPACK_MAJOR_VERSION, minor: DLPACK_MINOR_VERSION },
            manager_ctx: std::ptr::null_mut(),
            deleter: Some(count_delete),
            flags: DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED,
            dl_tensor: DLTensor {
                data: data.as_mut_ptr().cast(),
                device: DLDevice::CPU,
                ndim: 1,
                dtype: DLDataType { code: DataTypeCode::INT.0, bits: 4, lanes: 2 },
                shape: shape.as_mut_ptr(),
                strides: strides.as_mut_ptr(),
                byte_offset: 0,
            },
        };
        // SAFETY: the struct and its arrays outlive the tensor, dropped at the end of the test.
        let src = unsafe { Tensor::from_managed(NonNull::from(&mut managed)) }.unwrap();
        let copy = duplicate(&src).unwrap();
        assert_eq!(copy.nbytes(), 4);
        // SAFETY: a compact CPU tensor of 4 bytes.
        let bytes = unsafe { std::slice::from_raw_parts(copy.dl_tensor().data.cast::<u8>(), 4) };
        assert_eq!(bytes, [0, 1, 4, 5]);
        drop((src, copy));
        assert_eq!(DELETED.load(Ordering::SeqCst), 1);
    }
}
