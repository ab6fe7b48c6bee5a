//! Legacy (pre-1.0, unversioned) managed tensors handed on as versioned ones, as they are.
//!
//! A producer that still sends `DLManagedTensor` (jax, older libraries) would otherwise cost the
//! kernel API a `Tensor` (an `Arc` on the heap) and an export per argument. Instead its tensor
//! is described by a `DLManagedTensorVersioned` in one block from the per-thread cache: the same
//! `DLTensor` (shape and strides stay the producer's), the flags of every legacy import
//! (`validate::LEGACY_FLAGS`: read-only), the legacy tensor as `manager_ctx`, and a deleter that
//! calls the producer's deleter, once, then frees the block.

use std::ptr::NonNull;

use crate::abi::*;
use crate::error::guard;
use crate::memory::cpu;
use crate::tensor::MANAGED_BLOCK;

/// `legacy` in a versioned wrapper when it passes every import check and has strides (an
/// old producer's NULL strides need storage of their own: the caller imports those as a
/// `Tensor`). None leaves `legacy` to the caller, untouched; so does running out of memory.
///
/// # Safety
/// `legacy` is a live legacy managed tensor the caller owns; on `Some`, the wrapper owns it.
pub unsafe fn wrap(legacy: NonNull<DLManagedTensor>) -> Option<NonNull<DLManagedTensorVersioned>> {
    // SAFETY: live by the caller's contract.
    let dl = unsafe { legacy.as_ref().dl_tensor };
    // SAFETY: the producer's shape and strides are `ndim` long.
    if !unsafe { crate::validate::is_sound(&dl, 0) } {
        return None;
    }
    let managed = cpu::alloc(MANAGED_BLOCK)?.cast::<DLManagedTensorVersioned>();
    // SAFETY: a block of MANAGED_BLOCK bytes, aligned for the struct.
    unsafe {
        managed.as_ptr().write(DLManagedTensorVersioned {
            version: DLPackVersion { major: DLPACK_MAJOR_VERSION, minor: DLPACK_MINOR_VERSION },
            manager_ctx: legacy.as_ptr().cast(),
            deleter: Some(release),
            flags: crate::validate::LEGACY_FLAGS,
            dl_tensor: dl,
        })
    };
    Some(managed)
}

unsafe extern "C" fn release(managed: *mut DLManagedTensorVersioned) {
    guard("legacy tensor release", || {
        // SAFETY: a block `wrap` filled; its legacy tensor is deleted and the block freed once,
        // here, by their only owner.
        unsafe {
            let legacy = (*managed).manager_ctx.cast::<DLManagedTensor>();
            cpu::free(NonNull::new_unchecked(managed).cast(), MANAGED_BLOCK);
            if let Some(deleter) = (*legacy).deleter {
                deleter(legacy);
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    static DELETED: AtomicUsize = AtomicUsize::new(0);

    unsafe extern "C" fn count(_: *mut DLManagedTensor) {
        DELETED.fetch_add(1, Ordering::SeqCst);
    }

    #[test]
    fn a_wrapped_legacy_tensor_is_the_same_tensor_and_deleted_once() {
        let mut data = [0f32; 6];
        let mut shape = [2i64, 3];
        let mut strides = [3i64, 1];
        let dl = DLTensor {
            data: data.as_mut_ptr().cast(),
            device: DLDevice::CPU,
            ndim: 2,
            dtype: DLDataType { code: 2, bits: 32, lanes: 1 },
            shape: shape.as_mut_ptr(),
            strides: strides.as_mut_ptr(),
            byte_offset: 0,
        };
        let mut legacy = DLManagedTensor { dl_tensor: dl, manager_ctx: std::ptr::null_mut(), deleter: Some(count) };
        let before = DELETED.load(Ordering::SeqCst);
        // SAFETY: a live legacy tensor; the wrapper's deleter runs once below.
        unsafe {
            let wrapped = wrap(NonNull::from(&mut legacy)).expect("a sound tensor is wrapped");
            let m = wrapped.as_ref();
            assert_eq!((m.dl_tensor.data, m.dl_tensor.shape, m.dl_tensor.strides), (dl.data, dl.shape, dl.strides));
            assert_eq!((m.flags, m.version.major), (DLPACK_FLAG_BITMASK_READ_ONLY, DLPACK_MAJOR_VERSION));
            (m.deleter.unwrap())(wrapped.as_ptr());
        }
        assert_eq!(DELETED.load(Ordering::SeqCst), before + 1);

        // NULL strides, or a negative extent: left to the caller, nothing deleted.
        legacy.dl_tensor.strides = std::ptr::null_mut();
        // SAFETY: as above; nothing is taken.
        assert!(unsafe { wrap(NonNull::from(&mut legacy)) }.is_none());
        legacy.dl_tensor.strides = strides.as_mut_ptr();
        let mut negative = [2i64, -3];
        legacy.dl_tensor.shape = negative.as_mut_ptr();
        // SAFETY: as above.
        assert!(unsafe { wrap(NonNull::from(&mut legacy)) }.is_none());
        assert_eq!(DELETED.load(Ordering::SeqCst), before + 1);
    }
}
