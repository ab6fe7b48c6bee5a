//! `Tensor`: shared ownership (`Shared`: an `Arc` over the per-thread cache) of one managed
//! tensor — allocated by dlpx or imported from any producer (docs/design.md, "Memory and
//! ownership"); its exports are in `export`.

mod checked;
mod export;
mod shared;

use std::ffi::c_void;
use std::ptr::NonNull;

pub use checked::{check_managed_or_delete, delete_managed};
use checked::{check_versioned, Checked};
use export::is_our_export;
pub use export::MANAGED_BLOCK;
use shared::Shared;

use crate::abi::*;
use crate::allocation;
use crate::error::{Error, Result};
use crate::layout;
use crate::validate::{check_imported, LEGACY_FLAGS};

/// What keeps the memory alive: the producer's managed tensor, whose deleter runs exactly once
/// when the last `Tensor` (and the last export) is gone.
enum Owner {
    Versioned(NonNull<DLManagedTensorVersioned>),
    Legacy(NonNull<DLManagedTensor>),
}

struct Core {
    dl: DLTensor,
    flags: u64,
    owner: Owner,
    /// Shape and strides when the producer's cannot be used as they are (NULL strides of an old
    /// producer); `dl.shape`/`dl.strides` point here then.
    _dims: Option<Box<[i64]>>,
}

// SAFETY: the core is immutable after construction; DLPack deleters may run on any thread (the
// producer's contract), which is what dropping the last reference elsewhere does.
unsafe impl Send for Core {}
// SAFETY: as above.
unsafe impl Sync for Core {}

impl Drop for Core {
    fn drop(&mut self) {
        // SAFETY: we own the managed tensor and call its deleter exactly once, here.
        unsafe {
            match self.owner {
                Owner::Versioned(m) => {
                    if let Some(deleter) = (*m.as_ptr()).deleter {
                        deleter(m.as_ptr())
                    }
                }
                Owner::Legacy(m) => {
                    if let Some(deleter) = (*m.as_ptr()).deleter {
                        deleter(m.as_ptr())
                    }
                }
            }
        }
    }
}

/// Bytes a managed tensor dlpx makes leaves in front of it, in its block, for the core of the
/// `Tensor` made from it ([`Tensor::from_made`]); a multiple of 16.
pub const CORE_ROOM: usize = Shared::<Core>::ROOM;

/// A tensor: cheap to clone, safe to send, immutable metadata.
#[derive(Clone)]
pub struct Tensor(Shared<Core>);

impl Tensor {
    /// Records that work on this tensor's data is being ordered on `stream` of CUDA device
    /// `device_id`, so dlpx's allocator waits for it before the memory is reused (torch's
    /// `record_stream`). Memory another producer allocated is its allocator's business.
    pub fn record_stream(&self, device_id: i32, stream: *mut c_void) {
        Tensor::record_core_stream(&self.0, device_id, stream);
    }

    /// [`Tensor::record_stream`] for a managed tensor dlpx handed out: an allocator block, or an
    /// export of a tensor (whose owner is found through the export). Others are ignored.
    ///
    /// # Safety
    /// `managed` points to a live managed tensor the caller holds.
    pub unsafe fn record_stream_of(managed: NonNull<DLManagedTensorVersioned>, device_id: i32, stream: *mut c_void) {
        // SAFETY: live, per the contract.
        let m = unsafe { managed.as_ref() };
        if allocation::is_ours(m) {
            // SAFETY: as above, with the caller's pointer (and its provenance).
            unsafe { allocation::record_use(managed, device_id, stream) };
        } else if is_our_export(m) {
            // SAFETY: an export's manager_ctx is a `Shared<Core>` it holds; borrowed here, not taken.
            let core = unsafe { &*m.manager_ctx.cast_const().cast::<Core>() };
            Tensor::record_core_stream(core, device_id, stream);
        }
    }

    fn record_core_stream(core: &Core, device_id: i32, stream: *mut c_void) {
        if let Owner::Versioned(owner) = core.owner {
            // SAFETY: the core keeps its owner alive.
            unsafe { allocation::record_use(owner, device_id, stream) };
        }
    }

    /// A consumer of dlpx's exchange table works on dlpx's current stream of the tensor's
    /// device (`current_work_stream`): record it.
    #[inline]
    pub fn record_current_stream(&self) {
        let device = self.0.dl.device;
        if crate::devices::has_streams(device.device_type) {
            self.record_stream(device.device_id, crate::stream::current(device));
        }
    }

    /// A new compact CPU tensor, uninitialised, from dlpx's allocator.
    pub fn empty(shape: &[i64], dtype: DLDataType, device: DLDevice) -> Result<Tensor> {
        Self::empty_with_flags(shape, dtype, device, 0)
    }

    /// [`Tensor::empty`] recording DLPack flags; only IS_SUBBYTE_TYPE_PADDED (it sizes sub-byte
    /// dtypes one element per byte) and IS_COPIED (a private copy) are kept.
    pub fn empty_with_flags(shape: &[i64], dtype: DLDataType, device: DLDevice, flags: u64) -> Result<Tensor> {
        let ndim = i32::try_from(shape.len()).map_err(|_| Error::value("too many dimensions"))?;
        let prototype = DLTensor {
            data: std::ptr::null_mut(),
            device,
            ndim,
            dtype,
            shape: shape.as_ptr().cast_mut(),
            strides: std::ptr::null_mut(),
            byte_offset: 0,
        };
        // SAFETY: `shape` is a live slice of `ndim` values.
        let managed = unsafe { allocation::allocate_with_flags(&prototype, flags)? };
        // SAFETY: a fresh, valid tensor from our allocator; ownership passes to the Tensor.
        Ok(unsafe { Self::from_valid(managed) })
    }

    /// Takes ownership of a versioned managed tensor after validating it. On error the caller
    /// keeps ownership (and must call the deleter).
    ///
    /// # Safety
    /// `managed` points to a live managed tensor that the caller owns.
    pub unsafe fn from_managed(managed: NonNull<DLManagedTensorVersioned>) -> Result<Tensor> {
        // SAFETY: forwarded contract.
        match unsafe { check_versioned(managed)? } {
            Checked::OurExport => {
                // One of our exports coming home (a round trip): take back its reference instead
                // of wrapping it in a second owner.
                // SAFETY: our export's manager_ctx is a `Shared::into_raw`, its block ours to free.
                Ok(unsafe { export::take_back(managed.as_ref().manager_ctx, managed.cast()) })
            }
            Checked::Foreign(dims) => {
                // SAFETY: checked: a v1 struct, live and owned by the caller.
                let m = unsafe { managed.as_ref() };
                Ok(Self::build(m.dl_tensor, m.flags, Owner::Versioned(managed), dims))
            }
        }
    }

    /// [`Tensor::from_managed`] taking ownership either way: a tensor it refuses is deleted
    /// (its deleter called once, unread past the version when the major is unknown).
    ///
    /// # Safety
    /// As for [`Tensor::from_managed`]; the caller gives `managed` up.
    pub unsafe fn from_managed_or_delete(managed: NonNull<DLManagedTensorVersioned>) -> Result<Tensor> {
        // SAFETY: forwarded contract; on failure the tensor is still ours to delete.
        unsafe { Self::from_managed(managed).inspect_err(|_| delete_managed(managed)) }
    }

    /// Takes ownership of a legacy (unversioned) managed tensor after validating it. On error the
    /// caller keeps ownership.
    ///
    /// # Safety
    /// `managed` points to a live legacy managed tensor that the caller owns.
    pub unsafe fn from_legacy(managed: NonNull<DLManagedTensor>) -> Result<Tensor> {
        // SAFETY: live by the caller's contract.
        let m = unsafe { managed.as_ref() };
        if export::is_our_legacy_export(m) && export::describes_its_tensor(&m.dl_tensor, m.manager_ctx) {
            // One of our legacy exports coming home, as exported: its tensor (dlpx exports no
            // read-only tensor without a version, so nothing is lost).
            // SAFETY: our export's manager_ctx is a `Shared::into_raw`, its block ours to free.
            return Ok(unsafe { export::take_back(m.manager_ctx, managed.cast()) });
        }
        // SAFETY: as above.
        let dims = unsafe { check_imported(&m.dl_tensor, 0)? };
        Ok(Self::build(m.dl_tensor, LEGACY_FLAGS, Owner::Legacy(managed), dims))
    }

    /// Takes ownership of a managed tensor dlpx made valid: its allocator's, or one a direct read
    /// filled from fields it checked (a numpy array's).
    ///
    /// # Safety
    /// `managed` is valid (checked or ours) and owned by the caller, who gives it up.
    pub unsafe fn from_valid(managed: NonNull<DLManagedTensorVersioned>) -> Tensor {
        // SAFETY: per the contract.
        let m = unsafe { managed.as_ref() };
        Self::build(m.dl_tensor, m.flags, Owner::Versioned(managed), None)
    }

    /// Takes ownership of a managed tensor dlpx made from fields a row read and checked, with
    /// [`CORE_ROOM`] bytes in front of it in its block, where the tensor's core is put: one block
    /// per import, not two. Its deleter frees the block, the core's room with it.
    ///
    /// # Safety
    /// As for [`Tensor::from_valid`]; the [`CORE_ROOM`] bytes before `managed` are its block's,
    /// 16-aligned, unused by anything else, and freed by its deleter alone.
    pub unsafe fn from_made(managed: NonNull<DLManagedTensorVersioned>) -> Tensor {
        // SAFETY: per the contract.
        unsafe {
            let m = managed.as_ref();
            let room = NonNull::new_unchecked(managed.as_ptr().cast::<u8>().sub(CORE_ROOM));
            let mut dl = m.dl_tensor;
            dl.device = dl.device.canonical();
            let core = Core { dl, flags: m.flags, owner: Owner::Versioned(managed), _dims: None };
            Tensor(Shared::new_in(room, core))
        }
    }

    fn build(mut dl: DLTensor, flags: u64, owner: Owner, dims: Option<Box<[i64]>>) -> Tensor {
        dl.device = dl.device.canonical();
        if let Some(dims) = &dims {
            let ndim = dl.ndim as usize;
            dl.shape = dims.as_ptr().cast_mut();
            // SAFETY: `dims` holds shape then strides, 2 * ndim values.
            dl.strides = unsafe { dims.as_ptr().add(ndim).cast_mut() };
        }
        Tensor(Shared::new(Core { dl, flags, owner, _dims: dims }))
    }

    /// The tensor's description; shape and strides live as long as this `Tensor`.
    #[inline]
    pub fn dl_tensor(&self) -> &DLTensor {
        &self.0.dl
    }

    /// The producer's flags. IS_COPIED here means the producer made this tensor as a private
    /// copy for dlpx; exports never repeat it (dlpx keeps a reference, so the consumer of an
    /// export does not own the memory alone).
    pub fn flags(&self) -> u64 {
        self.0.flags
    }

    /// Whether this tensor is a copy its holder alone has: its producer made it as one
    /// (IS_COPIED), and nothing else shares it (a `dlpx.Tensor` handed over, or an export of one
    /// taken back, is shared with the tensor it came from: `copy=True` still copies those).
    pub fn is_private_copy(&self) -> bool {
        self.0.flags & DLPACK_FLAG_BITMASK_IS_COPIED != 0 && Shared::is_unique(&self.0)
    }

    pub fn is_readonly(&self) -> bool {
        self.0.flags & DLPACK_FLAG_BITMASK_READ_ONLY != 0
    }

    /// Whether a bare `DLTensor` (the table's view entry) describes this tensor whole: not when it
    /// is read-only or its sub-byte elements are padded a byte each, which only flags say (a
    /// bare view of int4 means packed). docs/design.md, "Read-only".
    #[inline(always)]
    pub fn has_bare_view(&self) -> bool {
        // One test on the exchange table's view path, where neither flag is set.
        let flags = self.0.flags;
        flags & (DLPACK_FLAG_BITMASK_READ_ONLY | DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED) == 0
            || (!self.is_readonly() && !crate::layout::is_padded(self.0.dl.dtype, flags))
    }

    pub fn shape(&self) -> &[i64] {
        dims(self.0.dl.shape, self.0.dl.ndim)
    }

    pub fn strides(&self) -> &[i64] {
        dims(self.0.dl.strides, self.0.dl.ndim)
    }

    pub fn numel(&self) -> u64 {
        self.shape().iter().map(|&e| e as u64).product()
    }

    /// Bytes the elements occupy (packed sub-byte types unless flagged padded).
    pub fn nbytes(&self) -> u64 {
        layout::nbytes(self.numel(), self.0.dl.dtype, self.0.flags).unwrap_or(u64::MAX)
    }

    pub fn is_contiguous(&self) -> bool {
        layout::is_contiguous(self.shape(), self.strides())
    }

    /// Whether both handles share one owner (no copy was made between them).
    pub fn same_owner(&self, other: &Tensor) -> bool {
        Shared::ptr_eq(&self.0, &other.0)
    }
}

fn dims<'a>(ptr: *const i64, ndim: i32) -> &'a [i64] {
    if ndim <= 0 || ptr.is_null() {
        &[]
    } else {
        // SAFETY: a core's shape and strides are `ndim` long and live as long as the core.
        unsafe { std::slice::from_raw_parts(ptr, ndim as usize) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    const F32: DLDataType = DLDataType { code: 2, bits: 32, lanes: 1 };

    static DELETED: AtomicUsize = AtomicUsize::new(0);
    unsafe extern "C" fn count_and_free(m: *mut DLManagedTensorVersioned) {
        DELETED.fetch_add(1, Ordering::SeqCst);
        // SAFETY: made by `foreign` below with Box::into_raw.
        drop(unsafe { Box::from_raw(m) });
    }

    fn foreign(data: &mut [f32; 4], shape: &mut [i64; 1], version: u32) -> NonNull<DLManagedTensorVersioned> {
        let dl = DLTensor {
            data: data.as_mut_ptr().cast(),
            device: DLDevice::CPU,
            ndim: 1,
            dtype: F32,
            shape: shape.as_mut_ptr(),
            strides: std::ptr::null_mut(),
            byte_offset: 0,
        };
        let m = DLManagedTensorVersioned {
            version: DLPackVersion { major: version, minor: 0 },
            manager_ctx: std::ptr::null_mut(),
            deleter: Some(count_and_free),
            flags: 0,
            dl_tensor: dl,
        };
        NonNull::new(Box::into_raw(Box::new(m))).unwrap()
    }

    #[test]
    fn an_import_calls_the_producers_deleter_once_when_its_last_user_goes() {
        let (mut data, mut shape) = ([1.0f32, 2.0, 3.0, 4.0], [4i64]);
        let before = DELETED.load(Ordering::SeqCst);
        // SAFETY: a valid managed tensor whose deleter frees it; ownership moves in.
        let t = unsafe { Tensor::from_managed(foreign(&mut data, &mut shape, 1)) }.unwrap();
        assert_eq!(t.strides(), &[1], "NULL strides from an old producer read as compact (R5)");
        let export = t.export_versioned(0).unwrap();
        drop(t);
        assert_eq!(DELETED.load(Ordering::SeqCst), before, "the export still holds the import");
        // SAFETY: our export; deleted once.
        unsafe { (export.as_ref().deleter.unwrap())(export.as_ptr()) };
        assert_eq!(DELETED.load(Ordering::SeqCst), before + 1);
    }
}
