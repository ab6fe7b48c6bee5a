//! The C side of dlpx's errors (docs/design.md, "Errors"): the calling thread's last error, and a
//! ready `SetError` that raises it in Python.

use std::ffi::{c_char, c_void};

use crate::cpython::{Python, Raise};
use crate::error::{self, Channel, Error, LastError};
use crate::shell::entry::c_entry;

/// The message of the last error on the calling thread ("dlpx: allocator: shape[2] = -3 is
/// negative"), or NULL if none. Valid until the next failing dlpx call on this thread.
#[no_mangle]
pub extern "C" fn dlpx_last_error() -> *const c_char {
    error::last_error_ptr()
}

/// The kind of the last error on the calling thread, named after the Python exception it maps
/// to ("ValueError", "MemoryError", "TypeError", "BufferError", "NotImplementedError",
/// "RuntimeError"; a kernel library's "OSError" and "ImportError", and the kinds a kernel
/// reports: "IndexError", "KeyError", "OverflowError", "ZeroDivisionError"), or NULL if none.
/// Static storage.
#[no_mangle]
pub extern "C" fn dlpx_last_error_kind() -> *const c_char {
    error::last_error_kind_ptr()
}

/// Forgets the calling thread's last error.
#[no_mangle]
pub extern "C" fn dlpx_clear_last_error() {
    error::clear_last_error()
}

/// A ready `SetError` callback for allocators called from Python extension code: it raises
/// the Python exception named by `kind` (ValueError, MemoryError, …; RuntimeError for names it
/// does not know) with `message` (less the C++ backtrace torch's errors append), taking the GIL
/// itself. `error_ctx` is unused. Without a Python interpreter in the process the message goes
/// to `dlpx_last_error()`.
///
/// # Safety
/// The GIL is held; `kind` and `message` are NULL or NUL-terminated strings.
#[no_mangle]
pub unsafe extern "C" fn dlpx_set_error_python(_error_ctx: *mut c_void, kind: *const c_char, message: *const c_char) {
    c_entry!(LastError, "set_error_python", out(), || {
        // SAFETY: NUL-terminated strings from the allocator, or NULL, by the contract.
        let err = unsafe { Error::from_set_error(kind, message) };
        if Python::with_gil(|_| Raise.deliver(&err)).is_none() {
            error::set_last_error(&err);
        }
        Ok(())
    })
}
