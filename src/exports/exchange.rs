//! dlpx's static `DLPackExchangeAPI`, alive for the whole process, and what C asks of exchange
//! tables: dlpx's own, and the walk of any producer's chain. Its PyObject entries are shells
//! here; the others are the shells beside what they call (docs/design.md, "Layers"); the view of
//! an exact `dlpx.Tensor` is answered here without a frame.

use std::ffi::{c_int, c_void};

use crate::abi::*;
use crate::cpython::Raise;
use crate::error::LastError;
use crate::shell::entry::c_entry;
use crate::tensor_type as tensor;

/// dlpx's v1 table. It is the tail of its chain: no older major version exists
/// (docs/design.md, "Rulings").
pub static EXCHANGE_API: DLPackExchangeAPI = DLPackExchangeAPI {
    header: DLPackExchangeAPIHeader {
        version: DLPackVersion { major: DLPACK_MAJOR_VERSION, minor: DLPACK_MINOR_VERSION },
        prev_api: std::ptr::null_mut(),
    },
    managed_tensor_allocator: Some(crate::allocation::allocator_entry),
    managed_tensor_from_py_object_no_sync: Some(managed_tensor_from_py_object_no_sync),
    managed_tensor_to_py_object_no_sync: Some(tensor::to_py_entry),
    dltensor_from_py_object_no_sync: Some(dltensor_from_py_object_no_sync),
    current_work_stream: Some(crate::stream::current_work_stream_entry),
};

/// dlpx's `DLPackExchangeAPI` (DLPack 1.3). The pointer is the head of dlpx's chain, is
/// statically initialised and stays valid for the life of the process. Never NULL.
///
/// Its `managed_tensor_allocator` and `current_work_stream` work without Python; the three
/// PyObject entry points need a running interpreter and the GIL (without one they return -1
/// and leave the reason in `dlpx_last_error()`).
#[no_mangle]
pub extern "C" fn dlpx_exchange_api() -> *const DLPackExchangeAPI {
    &EXCHANGE_API
}

unsafe extern "C" fn managed_tensor_from_py_object_no_sync(
    py_object: *mut c_void,
    out: *mut *mut DLManagedTensorVersioned,
) -> c_int {
    c_entry!(Raise, "managed_tensor_from_py_object_no_sync", out(out), given(py_object), |py| {
        out.put(tensor::managed_from_py(py, py_object.as_ptr().cast())?.as_ptr());
        Ok(0)
    })
}

unsafe extern "C" fn dltensor_from_py_object_no_sync(py_object: *mut c_void, out: *mut DLTensor) -> c_int {
    // The hot case, a writable dlpx.Tensor (not a subclass), in a few loads and one 48-byte copy: nothing
    // here can fail or panic, so it needs no boundary. Every other path is a tail call, so this
    // one needs no stack frame.
    // SAFETY: GIL held and a live object (or NULL), by the caller's contract.
    match unsafe { tensor::exact_writable_view(py_object.cast()) } {
        Some(view) if !out.is_null() => {
            // SAFETY: non-NULL and writable by the caller's contract; a DLTensor is plain data.
            unsafe { std::ptr::copy_nonoverlapping(view, out, 1) };
            if crate::devices::has_streams(view.device.device_type) {
                // SAFETY: as above; an exact dlpx.Tensor.
                return unsafe { record_current_stream(py_object) };
            }
            0
        }
        // SAFETY: forwarded contract.
        _ => unsafe { dltensor_from_py_object_checked(py_object, out) },
    }
}

/// The kernel taking this view works on dlpx's current stream: record it (see
/// `Tensor::record_current_stream`). Returns the view's success, 0. `extern "C"` like the slow
/// path below: calls that cannot unwind need no landing pad, so the hot path tail-calls them.
#[cold]
#[inline(never)]
unsafe extern "C" fn record_current_stream(py_object: *mut c_void) -> c_int {
    c_entry!(Raise, "dltensor_from_py_object_no_sync", out(), |py| {
        if let Some(tensor) = tensor::tensor_of(py, py_object.cast()) {
            tensor.record_current_stream();
        }
        Ok(0)
    })
}

#[cold]
unsafe extern "C" fn dltensor_from_py_object_checked(py_object: *mut c_void, out: *mut DLTensor) -> c_int {
    c_entry!(Raise, "dltensor_from_py_object_no_sync", out(out), given(py_object), |py| {
        out.put(tensor::dltensor_from_py(py, py_object.as_ptr().cast())?);
        Ok(0)
    })
}

/// Walks a `prev_api` chain from `head` to the first table of DLPack major version 1 — the one
/// dlpx and this header understand, among the first 16 tables (the head and 15 links). NULL, with
/// the reason in `dlpx_last_error()`, when none of them is major 1 (the chain ends, loops or goes
/// on past them first) or the head is NULL.
///
/// # Safety
/// `head` is NULL or a table header whose `prev_api` links are NULL or valid headers.
#[no_mangle]
pub unsafe extern "C" fn dlpx_exchange_api_select(head: *const DLPackExchangeAPIHeader) -> *const DLPackExchangeAPI {
    c_entry!(LastError, "exchange_api_select", out(), || {
        // SAFETY: the caller passes a readable chain (or NULL, which is handled).
        Ok(unsafe { crate::chain::select_supported(head)? } as *const DLPackExchangeAPI)
    })
}
