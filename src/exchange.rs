//! The static `DLPackExchangeAPI`s, alive for the whole process: dlpx's producer table, the
//! universal table the kernel API uses for objects whose type publishes none, and the Python
//! module's init, which hands dlpx's table down to the type that publishes it.
//!
//! Every entry point is a thin shell: the boundary (errors by the entry point's channel, no
//! panic into C) around one call into the module that does the work.

use std::ffi::{c_int, c_void};
use std::ptr::NonNull;

use crate::abi::*;
use crate::allocation;
use crate::cpython::Raise;
use crate::error::{boundary, Error, ErrorCallback, LastError};
use crate::python::{self, tensor_type};
use crate::stream;

/// dlpx's v1 table. It is the tail of its chain: no older major version exists
/// (docs/design.md, "Rulings").
pub static EXCHANGE_API: DLPackExchangeAPI = DLPackExchangeAPI {
    header: DLPackExchangeAPIHeader {
        version: DLPackVersion { major: DLPACK_MAJOR_VERSION, minor: DLPACK_MINOR_VERSION },
        prev_api: std::ptr::null_mut(),
    },
    managed_tensor_allocator: Some(managed_tensor_allocator),
    managed_tensor_from_py_object_no_sync: Some(managed_tensor_from_py_object_no_sync),
    managed_tensor_to_py_object_no_sync: Some(managed_tensor_to_py_object_no_sync),
    dltensor_from_py_object_no_sync: Some(dltensor_from_py_object_no_sync),
    current_work_stream: Some(current_work_stream),
};

/// The fallback table for objects whose type publishes none: imports go through
/// `__dlpack__`, outputs are dlpx's. It has no non-owning view (a view of an object without a
/// table needs an owner, see `dlpx_view_of`).
pub static UNIVERSAL_API: DLPackExchangeAPI = DLPackExchangeAPI {
    header: DLPackExchangeAPIHeader {
        version: DLPackVersion { major: DLPACK_MAJOR_VERSION, minor: DLPACK_MINOR_VERSION },
        prev_api: std::ptr::null_mut(),
    },
    managed_tensor_allocator: EXCHANGE_API.managed_tensor_allocator,
    managed_tensor_from_py_object_no_sync: Some(python::kernel::universal_from_py),
    managed_tensor_to_py_object_no_sync: EXCHANGE_API.managed_tensor_to_py_object_no_sync,
    dltensor_from_py_object_no_sync: None,
    current_work_stream: EXCHANGE_API.current_work_stream,
};

/// Entry point CPython calls when `dlpx._native` is loaded from `libdlpx.so`.
///
/// # Safety
/// Called by CPython's import machinery, with the GIL held.
#[no_mangle]
pub unsafe extern "C" fn PyInit__native() -> *mut pyo3_ffi::PyObject {
    python::module::init(&EXCHANGE_API)
}

unsafe extern "C" fn managed_tensor_allocator(
    prototype: *mut DLTensor,
    out: *mut *mut DLManagedTensorVersioned,
    error_ctx: *mut c_void,
    set_error: SetErrorFn,
) -> c_int {
    boundary(ErrorCallback(error_ctx, set_error), "allocator", || {
        let out = NonNull::new(out).ok_or_else(|| Error::null("out"))?;
        let prototype = NonNull::new(prototype).ok_or_else(|| Error::null("prototype"))?;
        // SAFETY: non-NULL; the caller promises a valid prototype whose shape has ndim values.
        let managed = unsafe { allocation::allocate(prototype.as_ref())? };
        // SAFETY: `out` is non-NULL and writable by the caller's contract.
        unsafe { out.as_ptr().write(managed.as_ptr()) };
        Ok(0)
    })
}

unsafe extern "C" fn managed_tensor_from_py_object_no_sync(
    py_object: *mut c_void,
    out: *mut *mut DLManagedTensorVersioned,
) -> c_int {
    boundary(Raise, "managed_tensor_from_py_object_no_sync", || {
        // SAFETY: the caller holds the GIL and passes a live object (or NULL, which is checked).
        unsafe { tensor_type::managed_from_py(py_object.cast(), out) }
    })
}

unsafe extern "C" fn managed_tensor_to_py_object_no_sync(
    tensor: *mut DLManagedTensorVersioned,
    out_py_object: *mut *mut c_void,
) -> c_int {
    boundary(Raise, "managed_tensor_to_py_object_no_sync", || {
        // SAFETY: the caller holds the GIL and owns `tensor`; ownership moves only on success.
        unsafe { tensor_type::to_py(tensor, out_py_object.cast()) }
    })
}

unsafe extern "C" fn dltensor_from_py_object_no_sync(py_object: *mut c_void, out: *mut DLTensor) -> c_int {
    // The hot case, a dlpx.Tensor (not a subclass), in a few loads and one 48-byte copy: nothing
    // here can fail or panic, so it needs no boundary. Every other path is a tail call, so this
    // one needs no stack frame.
    // SAFETY: GIL held and a live object, by the caller's contract; exact-type instances have
    // the PyTensor layout.
    match unsafe { tensor_type::exact_tensor_view(py_object.cast()) } {
        Some(view) if !out.is_null() => {
            // SAFETY: non-NULL and writable by the caller's contract; a DLTensor is plain data.
            unsafe { std::ptr::copy_nonoverlapping(view, out, 1) };
            if view.device.device_type == DeviceType::CUDA {
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
    // SAFETY: a live dlpx.Tensor (GIL held), per the caller.
    if let Some(tensor) = unsafe { tensor_type::tensor_of(py_object.cast()) } {
        tensor.record_current_stream();
    }
    0
}

#[cold]
unsafe extern "C" fn dltensor_from_py_object_checked(py_object: *mut c_void, out: *mut DLTensor) -> c_int {
    boundary(Raise, "dltensor_from_py_object_no_sync", || {
        // SAFETY: the caller holds the GIL and passes a live object and writable `out`.
        unsafe { tensor_type::dltensor_from_py(py_object.cast(), out) }
    })
}

unsafe extern "C" fn current_work_stream(device_type: DeviceType, device_id: i32, out: *mut *mut c_void) -> c_int {
    if out.is_null() {
        // SAFETY: forwarded contract.
        return unsafe { current_work_stream_checked(device_type, device_id, out) };
    }
    // CPU has no streams, and until some thread sets one every device has its default stream:
    // answered here, with no stack frame. Otherwise the thread-local lookup, a tail call that
    // cannot panic (so no boundary).
    if device_type == DeviceType::CPU || !stream::ever_set() {
        // SAFETY: non-NULL and writable by the caller's contract.
        unsafe { out.write(std::ptr::null_mut()) };
        return 0;
    }
    // SAFETY: as above.
    unsafe { current_work_stream_lookup(device_type, device_id, out) }
}

#[inline(never)]
unsafe extern "C" fn current_work_stream_lookup(
    device_type: DeviceType,
    device_id: i32,
    out: *mut *mut c_void,
) -> c_int {
    // SAFETY: non-NULL and writable, checked by the caller.
    unsafe { out.write(stream::current(DLDevice { device_type, device_id })) };
    0
}

/// Never touches Python: tvm-ffi calls it with the GIL released. Errors go to dlpx_last_error().
#[cold]
unsafe extern "C" fn current_work_stream_checked(
    device_type: DeviceType,
    device_id: i32,
    out: *mut *mut c_void,
) -> c_int {
    boundary(LastError, "current_work_stream", || {
        let out = NonNull::new(out).ok_or_else(|| Error::null("out_current_stream"))?;
        let stream = stream::current(DLDevice { device_type, device_id });
        // SAFETY: non-NULL and writable by the caller's contract.
        unsafe { out.as_ptr().write(stream) };
        Ok(0)
    })
}
