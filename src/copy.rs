//! Copies of host tensors into fresh compact tensors (for `copy=True` and device requests).

use crate::abi::*;
use crate::error::{Error, Result};
use crate::tensor::Tensor;

/// Whether the host can read the tensor's memory directly.
pub fn host_accessible(device: DLDevice) -> bool {
    matches!(device.device_type, DeviceType::CPU | DeviceType::CUDA_HOST | DeviceType::ROCM_HOST | DeviceType::CUDA_MANAGED)
}

/// A compact, writable copy of `src` in CPU memory.
pub fn to_new_cpu_tensor(context: &str, src: &Tensor) -> Result<Tensor> {
    let dl = src.dl_tensor();
    if dl.device.device_type == DeviceType::CUDA {
        return cuda_to_cpu(context, src);
    }
    if !host_accessible(dl.device) {
        return Err(Error::buffer(
            context,
            format!("cannot copy from {} to cpu:0: dlpx copies host-accessible memory only", crate::device::name(dl.device)),
        ));
    }
    let dst = empty_like_on_cpu(src)?;
    let bits = dl.dtype.bits as u64 * dl.dtype.lanes as u64;
    if src.numel() == 0 {
        return Ok(dst);
    }
    let src_base = dl.data.cast::<u8>().wrapping_add(dl.byte_offset as usize);
    let dst_base = dst.dl_tensor().data.cast::<u8>();
    if src.is_contiguous() {
        debug_assert_eq!(src.nbytes(), dst.nbytes());
        // SAFETY: both regions hold `nbytes` bytes (same shape, dtype and padding, compact) and do
        // not overlap.
        unsafe { std::ptr::copy_nonoverlapping(src_base, dst_base, src.nbytes() as usize) };
        return Ok(dst);
    }
    if bits % 8 != 0 {
        return Err(Error::buffer(context, "cannot copy a strided tensor of a packed sub-byte dtype"));
    }
    let item = (bits / 8) as usize;
    let mut offset_out = 0usize;
    // SAFETY: every source offset lies inside the producer's tensor (its strides describe it);
    // the destination is filled in order and holds numel * item bytes.
    unsafe { copy_strided(src_base, src.shape(), src.strides(), item, dst_base, &mut offset_out) };
    Ok(dst)
}

unsafe fn copy_strided(src: *const u8, shape: &[i64], strides: &[i64], item: usize, dst: *mut u8, written: &mut usize) {
    match shape {
        [] => {
            // SAFETY: per the caller.
            unsafe { std::ptr::copy_nonoverlapping(src, dst.add(*written), item) };
            *written += item;
        }
        [extent, rest @ ..] => {
            let step = strides[0] as isize * item as isize;
            for i in 0..*extent as isize {
                // SAFETY: per the caller.
                unsafe { copy_strided(src.wrapping_offset(i * step), rest, &strides[1..], item, dst, written) };
            }
        }
    }
}

/// A compact CPU tensor of `src`'s shape, dtype and sub-byte padding, so the byte sizes agree.
fn empty_like_on_cpu(src: &Tensor) -> Result<Tensor> {
    let cpu = DLDevice { device_type: DeviceType::CPU, device_id: 0 };
    Tensor::empty_with_flags(src.shape(), src.dl_tensor().dtype, cpu, src.flags())
}

/// A device-to-host copy on dlpx's current stream of the device, waited for before returning.
fn cuda_to_cpu(context: &str, src: &Tensor) -> Result<Tensor> {
    let dl = src.dl_tensor();
    if !src.is_contiguous() {
        return Err(Error::buffer(context, "cannot copy a non-contiguous CUDA tensor to cpu (make it contiguous first)"));
    }
    let dst = empty_like_on_cpu(src)?;
    if src.numel() == 0 {
        return Ok(dst);
    }
    let stream = crate::stream::current(dl.device);
    let from = dl.data.cast::<u8>().wrapping_add(dl.byte_offset as usize).cast_const().cast();
    // SAFETY: both tensors hold `nbytes` bytes (same shape and dtype, compact).
    unsafe {
        crate::memory::cuda::copy_to_host(context, dl.device.device_id, dst.dl_tensor().data, from, src.nbytes() as usize, stream)?;
    }
    Ok(dst)
}
