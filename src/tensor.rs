//! `Tensor`: shared ownership (`Arc`) of one managed tensor — allocated by dlpx or imported from
//! any producer — and its export as fresh managed tensors whose deleters need no GIL.

use std::ffi::c_void;
use std::mem::size_of;
use std::ptr::NonNull;
use std::sync::Arc;

use crate::abi::*;
use crate::allocation;
use crate::error::{Error, Result};
use crate::layout;
use crate::memory::cpu::{self, Capacity};

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

/// A tensor: cheap to clone, safe to send, immutable metadata.
#[derive(Clone)]
pub struct Tensor(Arc<Core>);

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
            // SAFETY: an export's manager_ctx is an `Arc<Core>` it holds; borrowed here, not taken.
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
        if device.device_type == DeviceType::CUDA {
            self.record_stream(device.device_id, crate::stream::current(device));
        }
    }

    /// A new compact CPU tensor, uninitialised, from dlpx's allocator.
    pub fn empty(shape: &[i64], dtype: DLDataType, device: DLDevice) -> Result<Tensor> {
        Self::empty_with_flags(shape, dtype, device, 0)
    }

    /// [`Tensor::empty`] recording DLPack flags; only IS_SUBBYTE_TYPE_PADDED is kept (it sizes
    /// sub-byte dtypes one element per byte).
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
        Ok(unsafe { Self::adopt_valid(managed) })
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
                // SAFETY: our export's manager_ctx is an `Arc::into_raw`, its block ours to free.
                Ok(unsafe {
                    let core = Arc::from_raw(managed.as_ref().manager_ctx.cast_const().cast::<Core>());
                    cpu::free(managed.cast(), MANAGED_BLOCK);
                    Tensor(core)
                })
            }
            // SAFETY: our own allocator's output is valid by construction.
            Checked::OurAllocation => Ok(unsafe { Self::adopt_valid(managed) }),
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
        unsafe { Self::from_managed(managed).inspect_err(|_| delete_refused(managed)) }
    }

    /// Takes ownership of a legacy (unversioned) managed tensor after validating it. On error the
    /// caller keeps ownership.
    ///
    /// # Safety
    /// `managed` points to a live legacy managed tensor that the caller owns.
    pub unsafe fn from_legacy(managed: NonNull<DLManagedTensor>) -> Result<Tensor> {
        // SAFETY: live by the caller's contract.
        let m = unsafe { managed.as_ref() };
        // SAFETY: as above.
        let dims = unsafe { check_imported(&m.dl_tensor, 0)? };
        Ok(Self::build(m.dl_tensor, 0, Owner::Legacy(managed), dims))
    }

    /// # Safety
    /// `managed` is valid (checked or ours) and owned by the caller, who gives it up.
    unsafe fn adopt_valid(managed: NonNull<DLManagedTensorVersioned>) -> Tensor {
        // SAFETY: per the contract.
        let m = unsafe { managed.as_ref() };
        Self::build(m.dl_tensor, m.flags, Owner::Versioned(managed), None)
    }

    fn build(mut dl: DLTensor, flags: u64, owner: Owner, dims: Option<Box<[i64]>>) -> Tensor {
        if let Some(dims) = &dims {
            let ndim = dl.ndim as usize;
            dl.shape = dims.as_ptr().cast_mut();
            // SAFETY: `dims` holds shape then strides, 2 * ndim values.
            dl.strides = unsafe { dims.as_ptr().add(ndim).cast_mut() };
        }
        Tensor(Arc::new(Core { dl, flags, owner, _dims: dims }))
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

    fn export_flags(&self, extra: u64) -> u64 {
        (self.0.flags & !DLPACK_FLAG_BITMASK_IS_COPIED) | extra
    }

    pub fn is_readonly(&self) -> bool {
        self.0.flags & DLPACK_FLAG_BITMASK_READ_ONLY != 0
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
        Arc::ptr_eq(&self.0, &other.0)
    }

    /// A new owning managed tensor sharing this tensor's memory; its deleter releases one
    /// reference and needs no GIL. `extra_flags` adds e.g. IS_COPIED.
    pub fn export_versioned(&self, extra_flags: u64) -> Result<NonNull<DLManagedTensorVersioned>> {
        self.export_versioned_to(extra_flags, None)
    }

    /// [`Tensor::export_versioned`] for a consumer working on `consumer` = (CUDA device, stream):
    /// when the export is released, an event recorded on that stream fences the free (or the
    /// pinned reuse) of this tensor's memory, if dlpx allocated it.
    pub fn export_versioned_to(
        &self,
        extra_flags: u64,
        consumer: Option<(i32, *mut c_void)>,
    ) -> Result<NonNull<DLManagedTensorVersioned>> {
        let block = export_block()?;
        write_tail(block, consumer);
        let managed = block.cast::<DLManagedTensorVersioned>();
        // SAFETY: the block is 256 bytes, aligned, and exclusively ours until handed out.
        unsafe {
            managed.as_ptr().write(DLManagedTensorVersioned {
                version: DLPackVersion { major: DLPACK_MAJOR_VERSION, minor: DLPACK_MINOR_VERSION },
                manager_ctx: Arc::into_raw(self.0.clone()).cast_mut().cast::<c_void>(),
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
    pub fn export_legacy_to(&self, consumer: Option<(i32, *mut c_void)>) -> Result<NonNull<DLManagedTensor>> {
        let block = export_block()?;
        write_tail(block, consumer);
        let managed = block.cast::<DLManagedTensor>();
        // SAFETY: as in `export_versioned`.
        unsafe {
            managed.as_ptr().write(DLManagedTensor {
                dl_tensor: self.0.dl,
                manager_ctx: Arc::into_raw(self.0.clone()).cast_mut().cast::<c_void>(),
                deleter: Some(delete_legacy_export),
            });
        }
        Ok(managed)
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
fn write_tail(block: NonNull<u8>, consumer: Option<(i32, *mut c_void)>) {
    // 0x2 is the releasing thread's own per-thread stream then (see `cuda::as_recordable`).
    let (device_id, stream) = consumer.map_or((0, 0), |(d, s)| (d, crate::memory::cuda::as_recordable(s) as usize));
    // SAFETY: the tail lies inside the export block (asserted above), aligned.
    unsafe { block.as_ptr().add(TAIL_OFFSET).cast::<ExportTail>().write(ExportTail { device_id, stream }) };
}

#[inline]
fn export_block() -> Result<NonNull<u8>> {
    cpu::alloc(MANAGED_BLOCK).ok_or_else(|| Error::memory("out of memory for a managed tensor"))
}

fn is_our_export(m: &DLManagedTensorVersioned) -> bool {
    m.deleter.is_some_and(|d| {
        std::ptr::fn_addr_eq(d, delete_versioned_export as unsafe extern "C" fn(*mut DLManagedTensorVersioned))
    })
}

unsafe extern "C" fn delete_versioned_export(managed: *mut DLManagedTensorVersioned) {
    if let Some(managed) = NonNull::new(managed) {
        // SAFETY: `managed` is an export block whose manager_ctx holds one Arc reference.
        unsafe { release_export(managed.as_ref().manager_ctx, managed.cast()) }
    }
}

unsafe extern "C" fn delete_legacy_export(managed: *mut DLManagedTensor) {
    if let Some(managed) = NonNull::new(managed) {
        // SAFETY: as above, for the legacy layout.
        unsafe { release_export(managed.as_ref().manager_ctx, managed.cast()) }
    }
}

/// # Safety
/// `ctx` is the `Arc::into_raw` of an export, `block` its export block; both are given up.
unsafe fn release_export(ctx: *mut c_void, block: NonNull<u8>) {
    // SAFETY: per the contract; dropping the Arc may run the producer's deleter, on this thread.
    // Called by foreign code through an `extern "C"` deleter: nothing may unwind out of it.
    crate::error::guard("deleter", || unsafe {
        let core = Arc::from_raw(ctx.cast_const().cast::<Core>());
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

/// What [`check_versioned`] found a versioned managed tensor to be.
enum Checked {
    /// An export of a dlpx tensor (its manager_ctx is an `Arc<Core>`).
    OurExport,
    /// A block of dlpx's allocator.
    OurAllocation,
    /// A valid foreign tensor; owned shape+strides when its strides were NULL.
    Foreign(Option<Box<[i64]>>),
}

/// Validates a versioned managed tensor without taking it: its major version first (nothing
/// else of an unknown major is read), then everything [`check_imported`] checks.
///
/// # Safety
/// `managed` points to a live managed tensor.
unsafe fn check_versioned(managed: NonNull<DLManagedTensorVersioned>) -> Result<Checked> {
    // SAFETY: live by the caller's contract; only the version (in every major's stable prefix)
    // is read before the version check allows a reference to the whole v1 struct.
    let major = unsafe { std::ptr::addr_of!((*managed.as_ptr()).version.major).read() };
    if major != DLPACK_MAJOR_VERSION {
        return Err(Error::buffer(format!(
            "unsupported DLPack major version {major} (dlpx supports {DLPACK_MAJOR_VERSION})"
        )));
    }
    // SAFETY: a v1 struct, live.
    let m = unsafe { managed.as_ref() };
    if is_our_export(m) {
        return Ok(Checked::OurExport);
    }
    if allocation::is_ours(m) {
        return Ok(Checked::OurAllocation);
    }
    // SAFETY: as above; the version is known, so the whole struct may be read.
    Ok(Checked::Foreign(unsafe { check_imported(&m.dl_tensor, m.flags)? }))
}

/// Validates a producer's managed tensor that is to be handed on as it is (the kernel API
/// passes a table's tensor straight to C): Ok(true) when it is valid and complete, Ok(false)
/// when it is valid but its strides are NULL (an old producer's compact row-major), which a
/// C caller cannot index: wrap it in a [`Tensor`] and export that instead. On error the tensor
/// has been deleted (refused tensors are never handed on).
///
/// # Safety
/// `managed` points to a live managed tensor that the caller owns and gives up on error.
pub unsafe fn check_managed_or_delete(managed: NonNull<DLManagedTensorVersioned>) -> Result<bool> {
    // SAFETY: forwarded contract.
    match unsafe { check_versioned(managed) } {
        Ok(Checked::Foreign(Some(_))) => Ok(false),
        Ok(_) => Ok(true),
        Err(err) => {
            // SAFETY: refused, so still the caller's, which gave it up to us.
            unsafe { delete_refused(managed) };
            Err(err)
        }
    }
}

/// Validates a non-owning view a producer filled (`dltensor_from_py_object_no_sync`): Ok(true)
/// when it can be handed on, Ok(false) when its strides are NULL (see [`check_managed_or_delete`]).
///
/// # Safety
/// `dl.shape` and `dl.strides`, when non-NULL, point to `dl.ndim` values.
#[inline]
pub unsafe fn check_view(dl: &DLTensor) -> Result<bool> {
    // A view carries no flags: sizes are checked as packed, the smaller reading.
    // SAFETY: forwarded contract (both calls).
    if unsafe { is_sound(dl, 0) } {
        return Ok(true);
    }
    Ok(unsafe { check_fully(dl, 0)? }.is_none())
}

/// Deletes a managed tensor dlpx refused. The deleter sits in the prefix every major version
/// keeps, so it is called even for a major dlpx cannot read.
///
/// # Safety
/// `managed` is live and owned by the caller, who gives it up.
unsafe fn delete_refused(managed: NonNull<DLManagedTensorVersioned>) {
    // SAFETY: per the contract; only the stable prefix is read.
    unsafe {
        if let Some(deleter) = std::ptr::addr_of!((*managed.as_ptr()).deleter).read() {
            deleter(managed.as_ptr());
        }
    }
}

/// Whether two producers' `DLTensor`s describe the same tensor: data, offset, device, dtype and
/// ndim equal, shape and strides equal by value (each export may own its arrays; NULL strides
/// match only NULL). An `ndim` outside dlpx's limit never matches. How a shortcut to a producer's
/// export is checked against the export itself (docs/design.md, "Producers read directly").
///
/// # Safety
/// Each non-NULL `shape` and `strides` holds `ndim` values.
pub unsafe fn same_description(a: &DLTensor, b: &DLTensor) -> bool {
    if (a.data, a.byte_offset, a.device, a.dtype, a.ndim) != (b.data, b.byte_offset, b.device, b.dtype, b.ndim)
        || !(0..=layout::MAX_NDIM as i32).contains(&a.ndim)
    {
        return false;
    }
    let n = a.ndim as usize;
    // SAFETY: the caller's contract; `n` is within dlpx's limit.
    let values = |p: *const i64| (!p.is_null()).then(|| unsafe { std::slice::from_raw_parts(p, n) });
    n == 0 || (values(a.shape) == values(b.shape) && values(a.strides) == values(b.strides))
}

/// Whether `dl` passes every check of [`check_imported`] and has its strides: the common case,
/// decided without building a message or a result (every import and kernel view runs it).
///
/// # Safety
/// As for [`check_imported`].
#[inline]
pub unsafe fn is_sound(dl: &DLTensor, flags: u64) -> bool {
    if !(0..=layout::MAX_NDIM as i32).contains(&dl.ndim)
        || !crate::device::is_known(dl.device.device_type)
        || !crate::dtype::is_valid(dl.dtype)
    {
        return false;
    }
    if dl.ndim == 0 {
        return !dl.data.is_null();
    }
    if dl.shape.is_null() || dl.strides.is_null() {
        return false;
    }
    let mut numel: u64 = 1;
    // SAFETY: the caller's contract: `ndim` (checked above) extents.
    for &extent in unsafe { std::slice::from_raw_parts(dl.shape, dl.ndim as usize) } {
        // A negative extent, or a product that overflows (which a zero extent may still
        // excuse), is left to the full check.
        match u64::try_from(extent).ok().and_then(|e| numel.checked_mul(e)) {
            Some(product) => numel = product,
            None => return false,
        }
    }
    numel.checked_mul(layout::element_bits(dl.dtype, flags)).is_some() && (numel == 0 || !dl.data.is_null())
}

/// Checks what a foreign producer sent; returns owned shape+strides when its strides are NULL
/// (pre-1.2 producers meant compact row-major by that).
///
/// # Safety
/// `dl.shape` and `dl.strides`, when non-NULL, point to `dl.ndim` values.
pub unsafe fn check_imported(dl: &DLTensor, flags: u64) -> Result<Option<Box<[i64]>>> {
    // SAFETY: forwarded contract (both calls).
    if unsafe { is_sound(dl, flags) } {
        return Ok(None);
    }
    unsafe { check_fully(dl, flags) }
}

/// [`check_imported`] for what [`is_sound`] did not pass: the reason, or NULL strides spelled out.
///
/// # Safety
/// As for [`check_imported`].
#[cold]
unsafe fn check_fully(dl: &DLTensor, flags: u64) -> Result<Option<Box<[i64]>>> {
    let bad = |fact: String| Error::buffer(fact);
    let ndim = layout::checked_ndim(dl.ndim).map_err(Error::into_buffer_error)?;
    if ndim > 0 && dl.shape.is_null() {
        return Err(bad(format!("shape is NULL with ndim = {ndim}")));
    }
    if !crate::device::is_known(dl.device.device_type) {
        return Err(bad(format!("unknown device type {}", dl.device.device_type.0)));
    }
    crate::dtype::check(dl.dtype).map_err(Error::into_buffer_error)?;
    let shape = dims(dl.shape, dl.ndim);
    let numel = layout::numel(shape).map_err(Error::into_buffer_error)?;
    layout::nbytes(numel, dl.dtype, flags).map_err(Error::into_buffer_error)?;
    if numel > 0 && dl.data.is_null() {
        return Err(bad(format!("data is NULL for {numel} elements")));
    }
    if ndim == 0 || !dl.strides.is_null() {
        return Ok(None);
    }
    let mut owned = vec![0i64; 2 * ndim].into_boxed_slice();
    owned[..ndim].copy_from_slice(shape);
    let (shape_part, strides_part) = owned.split_at_mut(ndim);
    layout::compact_strides(shape_part, strides_part);
    Ok(Some(owned))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    const CPU: DLDevice = DLDevice { device_type: DeviceType::CPU, device_id: 0 };
    const F32: DLDataType = DLDataType { code: 2, bits: 32, lanes: 1 };

    #[test]
    fn two_descriptions_are_the_same_by_value_not_by_address() {
        let (mut shape_a, mut shape_b, mut strides_a, mut strides_b) = ([2i64, 3], [2i64, 3], [3i64, 1], [3i64, 1]);
        let mut data = [0f32; 6];
        let a = Tensor::empty(&[2, 3], F32, CPU).unwrap();
        let mut x = *a.dl_tensor();
        x.data = data.as_mut_ptr().cast();
        let (mut y, mut z) = (x, x);
        (x.shape, x.strides) = (shape_a.as_mut_ptr(), strides_a.as_mut_ptr());
        (y.shape, y.strides) = (shape_b.as_mut_ptr(), strides_b.as_mut_ptr());
        z.shape = shape_b.as_mut_ptr();
        // SAFETY: every non-NULL shape and strides above holds `ndim` values.
        unsafe {
            assert!(same_description(&x, &y));
            z.strides = std::ptr::null_mut();
            assert!(!same_description(&x, &z), "NULL strides match only NULL");
            let mut w = x;
            w.byte_offset = 4;
            assert!(!same_description(&x, &w));
            w = x;
            w.ndim = -1;
            assert!(!same_description(&w, &w), "an ndim out of range never matches");
            let mut other_strides = [4i64, 1];
            y.strides = other_strides.as_mut_ptr();
            assert!(!same_description(&x, &y));
        }
    }

    #[test]
    fn an_export_keeps_the_storage_alive_until_its_deleter() {
        let t = Tensor::empty(&[2, 3], F32, CPU).unwrap();
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

    static DELETED: AtomicUsize = AtomicUsize::new(0);
    unsafe extern "C" fn count_and_free(m: *mut DLManagedTensorVersioned) {
        DELETED.fetch_add(1, Ordering::SeqCst);
        // SAFETY: made by `foreign` below with Box::into_raw.
        drop(unsafe { Box::from_raw(m) });
    }

    fn foreign(data: &mut [f32; 4], shape: &mut [i64; 1], version: u32) -> NonNull<DLManagedTensorVersioned> {
        let dl = DLTensor {
            data: data.as_mut_ptr().cast(),
            device: CPU,
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

    #[test]
    fn the_fast_check_passes_exactly_what_the_full_check_passes_with_strides() {
        let mut data = [0u8; 64];
        let data_ptr = data.as_mut_ptr().cast::<std::ffi::c_void>();
        let shapes: [&[i64]; 8] =
            [&[], &[4], &[0], &[2, 3], &[-1], &[i64::MAX, 3], &[i64::MAX, i64::MAX, 0], &[3, -2, 0]];
        let dtypes = [
            F32,
            DLDataType { code: 2, bits: 0, lanes: 1 },
            DLDataType { code: 99, bits: 8, lanes: 1 },
            DLDataType { code: 5, bits: 33, lanes: 1 },
        ];
        let devices = [CPU, DLDevice { device_type: DeviceType(5), device_id: 0 }];
        let mut cases = 0;
        for shape in shapes {
            let mut strides = vec![1i64; shape.len()];
            for dtype in dtypes {
                for device in devices {
                    for (data, with_strides, ndim) in [
                        (data_ptr, true, shape.len() as i32),
                        (std::ptr::null_mut(), true, shape.len() as i32),
                        (data_ptr, false, shape.len() as i32),
                        (data_ptr, true, -1),
                        (data_ptr, true, 65),
                    ] {
                        let dl = DLTensor {
                            data,
                            device,
                            ndim,
                            dtype,
                            shape: if shape.is_empty() { std::ptr::null_mut() } else { shape.as_ptr().cast_mut() },
                            strides: if with_strides && !shape.is_empty() {
                                strides.as_mut_ptr()
                            } else {
                                std::ptr::null_mut()
                            },
                            byte_offset: 0,
                        };
                        // SAFETY: shape and strides hold `shape.len()` values; other ndims are
                        // refused before either is read.
                        let (fast, full) = unsafe { (is_sound(&dl, 0), check_fully(&dl, 0)) };
                        let full_with_strides = matches!(full, Ok(None));
                        // The one case the fast check leaves to the full one although it passes:
                        // a product that overflows, excused by a zero extent.
                        let excused = shape.contains(&0)
                            && shape.iter().try_fold(1u64, |n, &e| n.checked_mul(e.max(0) as u64)).is_none();
                        let case = format!("{shape:?} {dtype:?} {device:?} data {data:?} ndim {ndim}");
                        assert!(!fast || full_with_strides, "fast passed what the full check refuses: {case}");
                        assert!(fast || !full_with_strides || excused, "fast refused what passes: {case}");
                        cases += 1;
                    }
                }
            }
        }
        assert_eq!(cases, 8 * 4 * 2 * 5);
    }
}
