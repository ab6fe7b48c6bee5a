//! Exports of a [`Tensor`]: fresh managed tensors sharing its memory, whose deleters release
//! one reference and need no GIL (docs/design.md, "Memory and ownership").

use std::ffi::c_void;
use std::mem::size_of;
use std::ptr::{self, NonNull};

use super::{Core, Owner, Shared, Tensor};
use crate::abi::*;
use crate::allocation;
use crate::error::{Error, Result};
use crate::memory::cpu::{self, Capacity};

impl Tensor {
    fn export_flags(&self, extra: u64) -> u64 {
        crate::layout::carried_flags(self.0.flags, self.0.dl.dtype) | extra
    }

    /// A new owning managed tensor sharing this tensor's memory; its deleter releases one
    /// reference and needs no GIL. `extra_flags` adds e.g. IS_COPIED.
    pub fn export_versioned(&self, extra_flags: u64) -> Result<NonNull<DLManagedTensorVersioned>> {
        self.export_versioned_to(extra_flags, None)
    }

    /// [`Tensor::export_versioned`] for a consumer working on `consumer` = (CUDA device, stream):
    /// when the export is released, an event recorded on that stream fences the free (or the
    /// pinned reuse) of this tensor's memory, if dlpx allocated it — on a built-in stream only:
    /// the consumer may have destroyed any other by then (docs/design.md, "Consumer streams").
    pub fn export_versioned_to(
        &self,
        extra_flags: u64,
        consumer: Option<(DLDevice, *mut c_void)>,
    ) -> Result<NonNull<DLManagedTensorVersioned>> {
        let block = export_block()?;
        write_tail(block, consumer);
        let managed = block.cast::<DLManagedTensorVersioned>();
        // SAFETY: the block (`MANAGED_BLOCK`, 128 bytes) holds the tensor and its tail, aligned,
        // and is exclusively ours until handed out.
        unsafe {
            managed.as_ptr().write(DLManagedTensorVersioned {
                version: DLPackVersion { major: DLPACK_MAJOR_VERSION, minor: DLPACK_MINOR_VERSION },
                manager_ctx: Shared::into_raw(self.0.clone()).cast_mut().cast::<c_void>(),
                deleter: Some(delete_versioned_export),
                flags: self.export_flags(extra_flags),
                dl_tensor: self.0.dl,
            });
        }
        Ok(managed)
    }

    /// A new owning legacy managed tensor sharing this tensor's memory (for consumers that ask
    /// for no version). Legacy tensors cannot carry flags.
    pub fn export_legacy(&self) -> Result<NonNull<DLManagedTensor>> {
        self.export_legacy_to(None)
    }

    /// [`Tensor::export_legacy`] with a consumer stream (see [`Tensor::export_versioned_to`]).
    pub fn export_legacy_to(&self, consumer: Option<(DLDevice, *mut c_void)>) -> Result<NonNull<DLManagedTensor>> {
        let block = export_block()?;
        write_tail(block, consumer);
        let managed = block.cast::<DLManagedTensor>();
        // SAFETY: as in `export_versioned`.
        unsafe {
            managed.as_ptr().write(DLManagedTensor {
                dl_tensor: self.0.dl,
                manager_ctx: Shared::into_raw(self.0.clone()).cast_mut().cast::<c_void>(),
                deleter: Some(delete_legacy_export),
            });
        }
        Ok(managed)
    }
}

/// The per-thread cache's size class of a managed tensor: dlpx's exports (with their tail in
/// the slack), and the wrappers of legacy and tvm_ffi tensors.
pub const MANAGED_BLOCK: Capacity = match cpu::capacity_for(size_of::<DLManagedTensorVersioned>()) {
    Some(c) => c,
    None => panic!("a managed tensor fits a size class"),
};

const _: () = assert!(size_of::<DLManagedTensor>() <= size_of::<DLManagedTensorVersioned>());

/// What an export keeps past its managed tensor, in the same block: the consumer's CUDA device and
/// stream (0: none), so that releasing the export fences the consumer's work on the memory.
#[repr(C)]
struct ExportTail {
    device_id: i32,
    stream: usize,
}

const TAIL_OFFSET: usize = size_of::<DLManagedTensorVersioned>();
const _: () = assert!(TAIL_OFFSET % std::mem::align_of::<ExportTail>() == 0);
const _: () = assert!(TAIL_OFFSET + size_of::<ExportTail>() <= MANAGED_BLOCK.bytes());

#[inline]
fn write_tail(block: NonNull<u8>, consumer: Option<(DLDevice, *mut c_void)>) {
    // A stream the consumer may destroy before it releases the export is never kept: using its
    // handle then crashes the driver. 0x2 is the releasing thread's own per-thread stream then
    // (see `cuda::as_recordable`).
    let (device_id, stream) = match consumer {
        Some((d, s)) if crate::devices::outlives_its_consumer(d, s) => {
            (d.device_id, crate::devices::recordable(d, s) as usize)
        }
        _ => (0, 0),
    };
    // SAFETY: the tail lies inside the export block (asserted above), aligned.
    unsafe { block.as_ptr().add(TAIL_OFFSET).cast::<ExportTail>().write(ExportTail { device_id, stream }) };
}

#[inline]
fn export_block() -> Result<NonNull<u8>> {
    cpu::alloc(MANAGED_BLOCK).ok_or_else(|| Error::memory("out of memory for a managed tensor"))
}

/// The tensor of one of our exports, its reference taken back and its block freed.
///
/// # Safety
/// `ctx` is the `manager_ctx` of an export of ours, `block` its block; both are given up.
pub(super) unsafe fn take_back(ctx: *mut c_void, block: NonNull<u8>) -> Tensor {
    // SAFETY: per the contract.
    unsafe {
        let core = Shared::from_raw(ctx.cast_const().cast::<Core>());
        cpu::free(block, MANAGED_BLOCK);
        Tensor(core)
    }
}

pub(super) fn is_our_legacy_export(m: &DLManagedTensor) -> bool {
    m.deleter
        .is_some_and(|d| std::ptr::fn_addr_eq(d, delete_legacy_export as unsafe extern "C" fn(*mut DLManagedTensor)))
}

/// Whether `m`, one of our exports (`is_our_export`), says read-only of a writable tensor
/// (`__dlpack__(read_only=True)`): taken back, the tensor would be writable again.
pub(super) fn adds_read_only(m: &DLManagedTensorVersioned) -> bool {
    // SAFETY: our export's manager_ctx is a `Shared::into_raw` of the exported core, which the
    // export's reference keeps live; only its immutable flags are read.
    let core = unsafe { &*m.manager_ctx.cast_const().cast::<Core>() };
    m.flags & DLPACK_FLAG_BITMASK_READ_ONLY != 0 && core.flags & DLPACK_FLAG_BITMASK_READ_ONLY == 0
}

/// Whether an export of ours (`is_our_export`, `is_our_legacy_export`: `ctx` its manager_ctx)
/// still describes its tensor as exported: its owner may have rewritten its DLTensor since (a
/// view of one row, another byte_offset), and then it is read as any producer's, not taken back.
pub(super) fn describes_its_tensor(dl: &DLTensor, ctx: *mut c_void) -> bool {
    // SAFETY: as in `adds_read_only`; the core's description never changes.
    let core = unsafe { &*ctx.cast_const().cast::<Core>() };
    dl.same_header(&core.dl)
}

pub(super) fn is_our_export(m: &DLManagedTensorVersioned) -> bool {
    m.deleter.is_some_and(|d| {
        std::ptr::fn_addr_eq(d, delete_versioned_export as unsafe extern "C" fn(*mut DLManagedTensorVersioned))
    })
}

unsafe extern "C" fn delete_versioned_export(managed: *mut DLManagedTensorVersioned) {
    if let Some(managed) = NonNull::new(managed) {
        // SAFETY: `managed` is an export block whose manager_ctx holds one `Shared` reference
        // (NULL once deleted).
        unsafe { release_export(ptr::addr_of_mut!((*managed.as_ptr()).manager_ctx), managed.cast()) }
    }
}

unsafe extern "C" fn delete_legacy_export(managed: *mut DLManagedTensor) {
    if let Some(managed) = NonNull::new(managed) {
        // SAFETY: as above, for the legacy layout.
        unsafe { release_export(ptr::addr_of_mut!((*managed.as_ptr()).manager_ctx), managed.cast()) }
    }
}

/// # Safety
/// `ctx` is where the export in `block` keeps its manager_ctx, the `Shared::into_raw` of an
/// export (NULL once deleted); both are given up.
unsafe fn release_export(ctx: *mut *mut c_void, block: NonNull<u8>) {
    // SAFETY: per the contract; dropping the reference may run the producer's deleter, on this thread.
    // Called by foreign code through an `extern "C"` deleter: nothing may unwind out of it.
    crate::error::guard("deleter", || unsafe {
        let held = ctx.replace(ptr::null_mut());
        if held.is_null() {
            // Deleted a second time, before its block was reused: releasing it again would free
            // a tensor a live object still holds (as `allocation`'s deleter, ignored and said).
            let err = Error::runtime(format!("tensor {block:p} was deleted twice (the second call is ignored)"));
            crate::error::set_last_error(&err.at("deleter"));
            return;
        }
        let ctx = held;
        let core = Shared::from_raw(ctx.cast_const().cast::<Core>());
        let tail = block.as_ptr().add(TAIL_OFFSET).cast::<ExportTail>().read();
        if tail.stream != 0 {
            fence_consumer(&core, tail);
        }
        drop(core);
        cpu::free(block, MANAGED_BLOCK);
    })
}

/// The consumer is done with an export it was handed on a stream: fence its work there.
#[cold]
fn fence_consumer(core: &Core, tail: ExportTail) {
    if let Owner::Versioned(owner) = core.owner {
        // SAFETY: the core keeps its owner alive.
        unsafe { allocation::record_fence(owner, tail.device_id, tail.stream as *mut c_void) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const F32: DLDataType = DLDataType { code: 2, bits: 32, lanes: 1 };

    #[test]
    fn an_export_keeps_the_storage_alive_until_its_deleter() {
        let t = Tensor::empty(&[2, 3], F32, DLDevice::CPU).unwrap();
        let data = t.dl_tensor().data;
        let export = t.export_versioned(DLPACK_FLAG_BITMASK_READ_ONLY).unwrap();
        drop(t);
        // SAFETY: a live export of ours; its deleter is called exactly once below.
        unsafe {
            let m = export.as_ref();
            assert_eq!((m.version.major, m.version.minor), (DLPACK_MAJOR_VERSION, DLPACK_MINOR_VERSION));
            assert_eq!(m.dl_tensor.data, data);
            assert_eq!(std::slice::from_raw_parts(m.dl_tensor.strides, 2), &[3, 1]);
            assert_eq!(m.flags & DLPACK_FLAG_BITMASK_READ_ONLY, DLPACK_FLAG_BITMASK_READ_ONLY);
            // The data is still ours to write: the export holds the storage.
            std::ptr::write_bytes(m.dl_tensor.data.cast::<u8>(), 7, 24);
            (m.deleter.unwrap())(export.as_ptr());
        }
    }
}
