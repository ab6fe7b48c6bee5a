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
    if !host_accessible(dl.device) {
        return Err(Error::buffer(
            context,
            format!("cannot copy from {} to cpu:0: dlpx copies host-accessible memory only", crate::device::name(dl.device)),
        ));
    }
    let cpu = DLDevice { device_type: DeviceType::CPU, device_id: 0 };
    let dst = Tensor::empty(src.shape(), dl.dtype, cpu)?;
    let bits = dl.dtype.bits as u64 * dl.dtype.lanes as u64;
    if src.numel() == 0 {
        return Ok(dst);
    }
    let src_base = dl.data.cast::<u8>().wrapping_add(dl.byte_offset as usize);
    let dst_base = dst.dl_tensor().data.cast::<u8>();
    if src.is_contiguous() {
        // SAFETY: both regions hold `nbytes` bytes (same shape and dtype, compact) and do not overlap.
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
