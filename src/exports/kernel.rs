//! The kernel API (GIL held): Python objects of any framework in C kernels. Each function is the
//! shell around the producer seam (`producers`), which reads every object by its row and knows
//! the framework an object `like` names (`producers::allocator_like`, `to_py_of`); the shell
//! checks the caller's pointers (`c_entry!`'s `out(...)` and `given(...)`).

use std::ffi::{c_char, c_int, c_void};

use crate::abi::*;
use crate::cpython::{Python, Raise};
use crate::error::{ErrorCallback, LastError};
use crate::producers;
use crate::shell::entry::c_entry;

use super::exchange::EXCHANGE_API;

/// The exchange table that serves `py_object` (a `PyObject*`, or a type: its objects; GIL
/// held): its type's own table (`__dlpack_c_exchange_api__`, else `__c_dlpack_exchange_api__`,
/// walked to major 1), or else dlpx's synthetic table for the way dlpx reads that producer
/// (numpy, tvm_ffi, jax, array-api-strict, capsules, and `__dlpack__` for anything else): a
/// DLPack 1.3 table whose reads take any object, whose allocator is dlpx's and whose
/// `to_py` gives `dlpx.Tensor`s (its `dltensor_from_py_object_no_sync` is NULL unless the
/// producer's objects can be viewed in place). The answer is found once per type. Returns NULL
/// with a Python exception set for a NULL `py_object` or when no interpreter is running.
///
/// # Safety
/// The GIL is held; `py_object` is NULL or a live `PyObject*`.
#[no_mangle]
pub unsafe extern "C" fn dlpx_exchange_api_of(py_object: *mut c_void) -> *const DLPackExchangeAPI {
    c_entry!(Raise, "exchange_api_of", out(), given(py_object), |py| {
        Ok(producers::table_of(py, py_object.as_ptr().cast()) as *const DLPackExchangeAPI)
    })
}

/// Imports any DLPack producer's object (GIL held) as an owning managed tensor: through its
/// type's exchange table when it has one, else `__dlpack__(max_version=(1, 3))`, else the legacy
/// `__dlpack__()`. The caller calls `(*out)->deleter(*out)` when done (no GIL needed for dlpx's
/// own deleters). Returns 0, or -1 with a Python exception set.
///
/// # Safety
/// The GIL is held; `py_object` is NULL or a live `PyObject*`; `out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn dlpx_import(py_object: *mut c_void, out: *mut *mut DLManagedTensorVersioned) -> c_int {
    c_entry!(Raise, "import", out(out), given(py_object), |py| {
        out.put(producers::managed(py, py_object.as_ptr().cast())?.as_ptr());
        Ok(0)
    })
}

/// A kernel argument: a `DLTensor` describing a Python object's tensor, and what keeps it valid.
#[repr(C)]
pub struct DlpxTensorView {
    /// The tensor; valid until `dlpx_view_release`, and while the viewed object lives.
    pub tensor: DLTensor,
    /// NULL for a non-owning view (the producer's table gave one, or the object is a tvm_ffi
    /// tensor, read in place): valid while the object lives and the caller holds the GIL;
    /// otherwise the managed tensor backing `tensor`, released by `dlpx_view_release`.
    pub owner: *mut DLManagedTensorVersioned,
    /// DLPack flags of the viewed tensor: `DLPACK_FLAG_BITMASK_READ_ONLY` when the kernel must
    /// not write through `tensor.data` (a read-only numpy array, `bytes`, a jax array, a
    /// read-only `dlpx.Tensor`), whichever path the view took; `DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED`
    /// when a sub-byte dtype (int4, fp4) is stored one element per byte. The other bits are 0.
    pub flags: u64,
}

/// Fills `out` with a view of `py_object` (GIL held): the producer's
/// `dltensor_from_py_object_no_sync` when its table has one, a tvm_ffi tensor's own `DLTensor`
/// (both non-owning, no allocation), else an owning import kept in `out->owner` (numpy arrays
/// read in place, other producers' `__dlpack__` tensors as they are). `out->flags` says
/// READ_ONLY where the tensor may not be written. Always pair with `dlpx_view_release(out)`.
/// Returns 0, or -1 with a Python exception set (then `out` needs no release).
///
/// # Safety
/// The GIL is held; `py_object` is NULL or a live `PyObject*` that outlives the view; `out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn dlpx_view_of(py_object: *mut c_void, out: *mut DlpxTensorView) -> c_int {
    // SAFETY: forwarded contract.
    unsafe { view_of(py_object, out, false, "view_of") }
}

/// `dlpx_view_of` for a tensor the kernel only reads: `out->flags` always says READ_ONLY, and a
/// producer with a read-only export gives that one — torch's const table (torch 2.15 and later),
/// which leaves a copy-on-write tensor's storage shared where `dlpx_view_of` would have torch
/// materialise it. Pair with `dlpx_view_release(out)`. Returns 0, or -1 with a Python exception
/// set (then `out` needs no release).
///
/// # Safety
/// As for `dlpx_view_of`; the kernel never writes through the view.
#[no_mangle]
pub unsafe extern "C" fn dlpx_read_view_of(py_object: *mut c_void, out: *mut DlpxTensorView) -> c_int {
    // SAFETY: forwarded contract.
    unsafe { view_of(py_object, out, true, "read_view_of") }
}

/// The body of `dlpx_view_of` and `dlpx_read_view_of`.
///
/// # Safety
/// As for `dlpx_view_of`.
unsafe fn view_of(py_object: *mut c_void, out: *mut DlpxTensorView, read_only: bool, name: &'static str) -> c_int {
    // A view that fails, on any check, leaves nothing to release: `out` says so first.
    // SAFETY: NULL (checked at the boundary) or writable, by the contract; two plain stores.
    if let Some(out) = unsafe { out.as_mut() } {
        out.owner = std::ptr::null_mut();
        out.flags = 0;
    }
    c_entry!(Raise, name, out(out), given(py_object), |py| {
        crate::module::install_gil_release();
        let mut out = out;
        let out = out.get_mut();
        (out.owner, out.flags) = producers::view(py, py_object.as_ptr().cast(), &mut out.tensor, read_only)?;
        Ok(0)
    })
}

/// Releases what `dlpx_view_of` took (nothing for non-owning views). Idempotent; NULL is allowed.
/// A Python exception pending on this thread survives the release.
///
/// # Safety
/// `view` is NULL or a view `dlpx_view_of` filled; releasing an owning view may run its producer's deleter, so hold the GIL when the producer needs it.
#[no_mangle]
pub unsafe extern "C" fn dlpx_view_release(view: *mut DlpxTensorView) {
    c_entry!(LastError, "view_release", out(), || {
        // SAFETY: a view filled by dlpx_view_of, or NULL.
        if let Some(view) = unsafe { view.as_mut() } {
            let owner = std::mem::replace(&mut view.owner, std::ptr::null_mut());
            // SAFETY: we own `owner` and call its deleter once.
            if let Some(deleter) = unsafe { owner.as_ref() }.and_then(|m| m.deleter) {
                // A kernel often releases its views after setting its error.
                let _guard = crate::cpython::ExceptionGuard::save();
                // SAFETY: the owner's deleter, called once: the view gave `owner` up above.
                unsafe { deleter(owner) };
            }
        }
        Ok(())
    })
}

/// Allocates an output like `prototype` (dtype, ndim, shape, device) in the framework of
/// `like_py_object` (GIL held): as a kernel library's outputs are allocated (a torch tensor in →
/// torch's allocator, through libtorch's C shim where dlpx found it, else torch's table), with
/// dlpx's allocator for an object of a framework without a table, or when `like_py_object` is
/// NULL. An error, dlpx's or the table's, goes to `dlpx_last_error()` and, when `SetError` is not
/// NULL, to `SetError(error_ctx, kind, message)` once (`dlpx_set_error_python` raises it as a
/// Python exception): a table's own words, the first it reported. A table's answer that is not
/// the tensor asked for (another shape, dtype or device, strides not compact, no data, another
/// DLPack major), or a failure it did not report, is refused (the tensor deleted). Returns 0, or
/// -1.
///
/// # Safety
/// The GIL is held; `like_py_object` is NULL or live; `prototype` is valid with `ndim` shape values; `out` is writable.
#[no_mangle]
#[allow(non_snake_case)] // `SetError` keeps the DLPack header's parameter name
pub unsafe extern "C" fn dlpx_allocate_like(
    like_py_object: *mut c_void,
    prototype: *mut DLTensor,
    out: *mut *mut DLManagedTensorVersioned,
    error_ctx: *mut c_void,
    SetError: Option<unsafe extern "C" fn(error_ctx: *mut c_void, kind: *const c_char, message: *const c_char)>,
) -> c_int {
    c_entry!(ErrorCallback(error_ctx, SetError), "allocate_like", out(out), given(prototype), || {
        // SAFETY: a valid prototype with `ndim` shape values, by the contract.
        let prototype = unsafe { prototype.as_ref() };
        // SAFETY: as above.
        let shape = unsafe { crate::layout::dims(prototype.ndim, prototype.shape, "prototype.shape") }?;
        let allocator = match like_py_object.is_null() {
            true => EXCHANGE_API.managed_tensor_allocator,
            // SAFETY: the caller holds the GIL, by this function's contract.
            false => producers::allocator_like(unsafe { Python::assume_attached()? }, like_py_object.cast()),
        };
        // The table's answer held to the request; an error it reported keeps its own words
        // (less a C++ backtrace), and only the first of several reports is passed on.
        // SAFETY: a table's allocator, under DLPack's contract.
        let managed = unsafe {
            crate::kernels::framework_allocator::allocate(allocator, prototype.device, prototype.dtype, shape)
        }?;
        out.put(managed.as_ptr());
        Ok(0)
    })
}

/// Turns `managed` into a Python object of `like_py_object`'s framework (GIL held): its table's
/// `managed_tensor_to_py_object_no_sync` (an output `dlpx_allocate_like` made through torch's C
/// shim, its header unchanged, becomes that `torch.Tensor` itself), or a `dlpx.Tensor` when it
/// has none (or `like_py_object` is NULL). On success the object owns `managed`; on failure (-1,
/// Python exception set) the caller still owns it and must call its deleter. A NULL `managed` (ValueError) and one of a
/// major version dlpx cannot read (BufferError) are refused before any table sees them.
///
/// # Safety
/// The GIL is held; `like_py_object` is NULL or live; `managed` is a managed tensor the caller owns; `out_py_object` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn dlpx_to_py_like(
    like_py_object: *mut c_void,
    managed: *mut DLManagedTensorVersioned,
    out_py_object: *mut *mut c_void,
) -> c_int {
    c_entry!(Raise, "to_py_like", out(out_py_object), given(managed), |py| {
        // A major the table's framework may not read is refused here, the tensor left with the
        // caller: torch's to_py reads a major-2 struct as a 1.x one.
        // SAFETY: a live managed tensor, by this function's contract; only its version is read.
        crate::validate::check_major(unsafe { crate::validate::major_of(managed.as_ptr()) })?;
        out_py_object.put(producers::to_py_of(py, like_py_object.cast(), managed)?.cast());
        Ok(0)
    })
}

/// The current work stream of `like_py_object`'s framework on a device (GIL held), e.g. torch's
/// `torch.cuda.current_stream()` for a torch tensor; dlpx's per-thread stream for objects
/// without a table; NULL for CPU. Launch kernels there. Returns 0, or -1 with a Python exception.
///
/// # Safety
/// The GIL is held; `like_py_object` is NULL or a live `PyObject*`; `out_stream` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn dlpx_current_stream_of(
    like_py_object: *mut c_void,
    device_type: DeviceType,
    device_id: i32,
    out_stream: *mut *mut c_void,
) -> c_int {
    c_entry!(Raise, "current_stream_of", out(out_stream), |py| {
        let table = producers::table_like(py, like_py_object.cast())?;
        out_stream.put(producers::current_stream_in(py, table, DLDevice { device_type, device_id })?);
        Ok(0)
    })
}
