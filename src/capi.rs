//! The exported `dlpx_*` C functions; cbindgen turns these and their docs into `dlpx.h`.

use std::ffi::{c_char, c_int, c_void, CStr};
use std::ptr::NonNull;

use crate::abi::*;
use crate::error::{self, boundary, Channel, Error, ErrorKind};

/// dlpx's `DLPackExchangeAPI` (DLPack 1.3). The pointer is the head of dlpx's chain, is
/// statically initialised and stays valid for the life of the process. Never NULL.
///
/// Its `managed_tensor_allocator` and `current_work_stream` work without Python; the three
/// PyObject entry points need a running interpreter and the GIL (without one they return -1
/// and leave the reason in `dlpx_last_error()`).
#[no_mangle]
pub extern "C" fn dlpx_exchange_api() -> *const DLPackExchangeAPI {
    &crate::exchange::EXCHANGE_API
}

/// The dlpx library version, e.g. "0.1.0". Static storage; never NULL.
#[no_mangle]
pub extern "C" fn dlpx_version() -> *const c_char {
    concat!(env!("CARGO_PKG_VERSION"), "\0").as_ptr().cast()
}

/// The message of the last error on the calling thread ("dlpx: allocator: shape[2] = -3 is
/// negative"), or NULL if none. Valid until the next failing dlpx call on this thread.
#[no_mangle]
pub extern "C" fn dlpx_last_error() -> *const c_char {
    error::last_error_ptr()
}

/// The kind of the last error on the calling thread, named after the Python exception it maps
/// to ("ValueError", "MemoryError", "TypeError", "BufferError", "NotImplementedError",
/// "RuntimeError"), or NULL if none. Static storage.
#[no_mangle]
pub extern "C" fn dlpx_last_error_kind() -> *const c_char {
    error::last_error_kind_ptr()
}

/// Forgets the calling thread's last error.
#[no_mangle]
pub extern "C" fn dlpx_clear_last_error() {
    error::clear_last_error()
}

/// Makes `stream` the calling thread's current work stream on (`device_type`, `device_id`);
/// NULL restores the default. The previous stream is written to `*previous` when `previous`
/// is not NULL, so a caller can restore it. Returns 0, or -1 (see `dlpx_last_error()`) for a
/// CPU device, which has no streams.
#[no_mangle]
pub extern "C" fn dlpx_set_current_stream(
    device_type: DeviceType,
    device_id: i32,
    stream: *mut c_void,
    previous: *mut *mut c_void,
) -> c_int {
    boundary(Channel::LastError, "set_current_stream", || {
        let device = DLDevice { device_type, device_id };
        if device_type == DeviceType::CPU {
            return Err(Error::value("set_current_stream", "cpu has no streams"));
        }
        if device_id < 0 {
            return Err(Error::value("set_current_stream", format!("device_id = {device_id} is negative")));
        }
        let old = crate::stream::set_current(device, stream);
        if let Some(previous) = NonNull::new(previous) {
            // SAFETY: non-NULL and writable by the caller's contract.
            unsafe { previous.as_ptr().write(old) };
        }
        Ok(0)
    })
}

/// The calling thread's current work stream on (`device_type`, `device_id`): NULL (the
/// default stream) when none was set, and always NULL for CPU. Returns 0, or -1 when `out` is
/// NULL. The same answer as the table's `current_work_stream`.
#[no_mangle]
pub extern "C" fn dlpx_get_current_stream(device_type: DeviceType, device_id: i32, out: *mut *mut c_void) -> c_int {
    boundary(Channel::LastError, "get_current_stream", || {
        let out = NonNull::new(out).ok_or_else(|| Error::value("get_current_stream", "out is NULL"))?;
        // SAFETY: non-NULL and writable by the caller's contract.
        unsafe { out.as_ptr().write(crate::stream::current(DLDevice { device_type, device_id })) };
        Ok(0)
    })
}

/// Walks a `prev_api` chain from `head` to the first table of DLPack major version 1 — the one
/// dlpx and this header understand. At most 16 links are followed; a cycle, a chain without a
/// major-1 table, or a NULL head returns NULL with the reason in `dlpx_last_error()`.
#[no_mangle]
pub unsafe extern "C" fn dlpx_exchange_api_select(head: *const DLPackExchangeAPIHeader) -> *const DLPackExchangeAPI {
    boundary(Channel::LastError, "exchange_api_select", || {
        // SAFETY: the caller passes a readable chain (or NULL, which is handled).
        Ok(unsafe { crate::chain::select_supported(head)? } as *const DLPackExchangeAPI)
    })
}

/// A ready `SetError` callback for allocators called from Python extension code: it raises
/// the Python exception named by `kind` (ValueError, MemoryError, …; RuntimeError for names it
/// does not know) with `message`, taking the GIL itself. `error_ctx` is unused. Without a
/// Python interpreter in the process the message goes to `dlpx_last_error()`.
#[no_mangle]
pub unsafe extern "C" fn dlpx_set_error_python(_error_ctx: *mut c_void, kind: *const c_char, message: *const c_char) {
    boundary(Channel::LastError, "set_error_python", || {
        // SAFETY: NUL-terminated strings from the allocator, or NULL (handled).
        let text = |p: *const c_char| if p.is_null() { String::new() } else { unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned() };
        let kind_name = text(kind);
        let kind = match kind_name.as_str() {
            "MemoryError" => ErrorKind::MemoryError,
            "ValueError" => ErrorKind::ValueError,
            "TypeError" => ErrorKind::TypeError,
            "BufferError" => ErrorKind::BufferError,
            "NotImplementedError" => ErrorKind::NotImplementedError,
            _ => ErrorKind::RuntimeError,
        };
        let err = Error { kind, message: text(message) };
        match crate::python::capi::python() {
            Ok(py) => {
                // SAFETY: PyGILState_Ensure/Release bracket the raise, from any thread.
                unsafe {
                    let state = (py.PyGILState_Ensure)();
                    crate::python::raise(&err);
                    (py.PyGILState_Release)(state);
                }
            }
            Err(_) => error::set_last_error(&err),
        }
        Ok(())
    })
}
