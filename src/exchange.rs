//! The static `DLPackExchangeAPI`: dlpx's producer table, alive for the whole process.
//!
//! Every entry point is a thin shell: the boundary (errors by the entry point's channel, no
//! panic into C) around one call into the module that does the work.

use std::ffi::{c_int, c_void};
use std::ptr::NonNull;

use crate::abi::*;
use crate::allocation;
use crate::error::{boundary, Channel, Error};
use crate::python::tensor_type;
use crate::stream;

/// dlpx's v1 table. It is the tail of its chain: no older major version exists (ruling 8).
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

unsafe extern "C" fn managed_tensor_allocator(
    prototype: *mut DLTensor,
    out: *mut *mut DLManagedTensorVersioned,
    error_ctx: *mut c_void,
    set_error: SetErrorFn,
) -> c_int {
    boundary(Channel::SetError(error_ctx, set_error), "allocator", || {
        let out = NonNull::new(out).ok_or_else(|| Error::value("allocator", "out is NULL"))?;
        let prototype = NonNull::new(prototype).ok_or_else(|| Error::value("allocator", "prototype is NULL"))?;
        // SAFETY: non-NULL; the caller promises a valid prototype whose shape has ndim values.
        let managed = unsafe { allocation::allocate("allocator", prototype.as_ref())? };
        // SAFETY: `out` is non-NULL and writable by the caller's contract.
        unsafe { out.as_ptr().write(managed.as_ptr()) };
        Ok(0)
    })
}

unsafe extern "C" fn managed_tensor_from_py_object_no_sync(
    py_object: *mut c_void,
    out: *mut *mut DLManagedTensorVersioned,
) -> c_int {
    boundary(Channel::Python, "managed_tensor_from_py_object_no_sync", || {
        // SAFETY: the caller holds the GIL and passes a live object (or NULL, which is checked).
        unsafe { tensor_type::managed_from_py(py_object.cast(), out) }
    })
}

unsafe extern "C" fn managed_tensor_to_py_object_no_sync(
    tensor: *mut DLManagedTensorVersioned,
    out_py_object: *mut *mut c_void,
) -> c_int {
    boundary(Channel::Python, "managed_tensor_to_py_object_no_sync", || {
        // SAFETY: the caller holds the GIL and owns `tensor`; ownership moves only on success.
        unsafe { tensor_type::to_py(tensor, out_py_object.cast()) }
    })
}

unsafe extern "C" fn dltensor_from_py_object_no_sync(py_object: *mut c_void, out: *mut DLTensor) -> c_int {
    // The hot case, a dlpx.Tensor (not a subclass), in a few loads and one 48-byte copy: nothing
    // here can fail or panic, so it needs no boundary.
    // SAFETY: GIL held and a live object, by the caller's contract; exact-type instances have
    // the PyTensor layout.
    if let Some(view) = unsafe { tensor_type::exact_tensor_view(py_object.cast()) } {
        if !out.is_null() {
            // SAFETY: non-NULL and writable by the caller's contract.
            unsafe { out.write(*view) };
            if view.device.device_type == DeviceType::CUDA {
                // SAFETY: as above; an exact dlpx.Tensor.
                record_current_stream(py_object);
            }
            return 0;
        }
    }
    dltensor_from_py_object_checked(py_object, out)
}

#[cold]
unsafe fn record_current_stream(py_object: *mut c_void) {
    // SAFETY: a live dlpx.Tensor (GIL held), per the caller.
    if let Some(tensor) = unsafe { tensor_type::tensor_of(py_object.cast()) } {
        tensor.record_current_stream();
    }
}

#[cold]
unsafe fn dltensor_from_py_object_checked(py_object: *mut c_void, out: *mut DLTensor) -> c_int {
    boundary(Channel::Python, "dltensor_from_py_object_no_sync", || {
        // SAFETY: the caller holds the GIL and passes a live object and writable `out`.
        unsafe { tensor_type::dltensor_from_py(py_object.cast(), out) }
    })
}

unsafe extern "C" fn current_work_stream(device_type: DeviceType, device_id: i32, out: *mut *mut c_void) -> c_int {
    // Nothing here can panic (stream::current is panic-free), so the answer needs no boundary;
    // CPU has no streams and is answered without even a thread-local lookup.
    if !out.is_null() {
        let stream = if device_type == DeviceType::CPU {
            std::ptr::null_mut()
        } else {
            stream::current(DLDevice { device_type, device_id })
        };
        // SAFETY: non-NULL and writable by the caller's contract.
        unsafe { out.write(stream) };
        return 0;
    }
    current_work_stream_checked(device_type, device_id, out)
}

/// Never touches Python: tvm-ffi calls it with the GIL released. Errors go to dlpx_last_error().
#[cold]
unsafe fn current_work_stream_checked(device_type: DeviceType, device_id: i32, out: *mut *mut c_void) -> c_int {
    boundary(Channel::LastError, "current_work_stream", || {
        let out = NonNull::new(out).ok_or_else(|| Error::value("current_work_stream", "out_current_stream is NULL"))?;
        let stream = stream::current(DLDevice { device_type, device_id });
        // SAFETY: non-NULL and writable by the caller's contract.
        unsafe { out.as_ptr().write(stream) };
        Ok(0)
    })
}
