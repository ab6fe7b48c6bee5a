//! Errors: a kind (a Python exception name) and a message, delivered through the channel each
//! entry point defines, and the one boundary that keeps panics from crossing `extern "C"`.

use std::cell::RefCell;
use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::fmt;
use std::panic::{catch_unwind, AssertUnwindSafe};

use crate::abi::SetErrorFn;

/// What went wrong, named after the Python exception a Python caller sees.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorKind {
    MemoryError,
    ValueError,
    TypeError,
    BufferError,
    NotImplementedError,
    RuntimeError,
}

impl ErrorKind {
    pub fn name(self) -> &'static CStr {
        match self {
            ErrorKind::MemoryError => c"MemoryError",
            ErrorKind::ValueError => c"ValueError",
            ErrorKind::TypeError => c"TypeError",
            ErrorKind::BufferError => c"BufferError",
            ErrorKind::NotImplementedError => c"NotImplementedError",
            ErrorKind::RuntimeError => c"RuntimeError",
        }
    }
}

/// An error with its full message, e.g. `dlpx: allocator: shape[2] = -3 is negative`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Error {
    pub kind: ErrorKind,
    pub message: String,
}

pub type Result<T> = std::result::Result<T, Error>;

impl Error {
    /// `context` is the entry point (`allocator`, `from_dlpack`); the message is prefixed `dlpx: context: `.
    pub fn new(kind: ErrorKind, context: &str, fact: impl fmt::Display) -> Self {
        Error { kind, message: format!("dlpx: {context}: {fact}") }
    }

    pub fn value(context: &str, fact: impl fmt::Display) -> Self {
        Self::new(ErrorKind::ValueError, context, fact)
    }

    pub fn type_error(context: &str, fact: impl fmt::Display) -> Self {
        Self::new(ErrorKind::TypeError, context, fact)
    }

    pub fn buffer(context: &str, fact: impl fmt::Display) -> Self {
        Self::new(ErrorKind::BufferError, context, fact)
    }

    pub fn not_implemented(context: &str, fact: impl fmt::Display) -> Self {
        Self::new(ErrorKind::NotImplementedError, context, fact)
    }

    pub fn memory(context: &str, fact: impl fmt::Display) -> Self {
        Self::new(ErrorKind::MemoryError, context, fact)
    }

    pub fn runtime(context: &str, fact: impl fmt::Display) -> Self {
        Self::new(ErrorKind::RuntimeError, context, fact)
    }

    /// The same message as a BufferError: what an importer raises for data it cannot describe.
    pub fn into_buffer_error(self) -> Self {
        Error { kind: ErrorKind::BufferError, ..self }
    }

    /// The message as a C string; an interior NUL (from a foreign message) is cut there.
    pub fn c_message(&self) -> CString {
        let bytes = self.message.as_bytes();
        let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
        CString::new(&bytes[..end]).expect("NUL removed above")
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

thread_local! {
    static LAST_ERROR: RefCell<Option<(ErrorKind, CString)>> = const { RefCell::new(None) };
}

/// Stores `err` as this thread's last error (what `dlpx_last_error()` returns).
/// Stores `err` as this thread's last error (what `dlpx_last_error()` returns). While the thread
/// is being torn down the slot is gone and the message is dropped (nothing here may panic).
pub fn set_last_error(err: &Error) {
    let message = err.c_message();
    let _ = LAST_ERROR.try_with(|slot| {
        if let Ok(mut slot) = slot.try_borrow_mut() {
            *slot = Some((err.kind, message));
        }
    });
}

fn read_last_error(field: impl Fn(&(ErrorKind, CString)) -> *const c_char) -> *const c_char {
    LAST_ERROR
        .try_with(|slot| match slot.try_borrow().as_deref() {
            Ok(Some(entry)) => field(entry),
            _ => std::ptr::null(),
        })
        .unwrap_or(std::ptr::null())
}

/// The last error's message on this thread; valid until the next failure on this thread.
pub fn last_error_ptr() -> *const c_char {
    read_last_error(|(_, message)| message.as_ptr())
}

/// The last error's kind name on this thread, or NULL.
pub fn last_error_kind_ptr() -> *const c_char {
    read_last_error(|(kind, _)| kind.name().as_ptr())
}

pub fn clear_last_error() {
    let _ = LAST_ERROR.try_with(|slot| {
        if let Ok(mut slot) = slot.try_borrow_mut() {
            *slot = None;
        }
    });
}

/// Where an entry point reports its failure (ARCHITECTURE decision 6).
#[derive(Clone, Copy)]
pub enum Channel {
    /// Plain C API: the thread-local `dlpx_last_error()`.
    LastError,
    /// The allocator: `SetError(error_ctx, kind, message)`; a NULL `SetError` falls back to the
    /// thread-local so the message is never lost.
    SetError(*mut c_void, SetErrorFn),
    /// PyObject entry points: a Python exception (the caller holds the GIL).
    Python,
}

impl Channel {
    pub fn deliver(self, err: &Error) {
        match self {
            Channel::LastError => set_last_error(err),
            Channel::SetError(ctx, Some(set_error)) => {
                set_last_error(err);
                let message = err.c_message();
                // SAFETY: the caller handed us this callback for exactly this purpose; both strings
                // are NUL-terminated and outlive the call.
                unsafe { set_error(ctx, err.kind.name().as_ptr(), message.as_ptr()) };
            }
            Channel::SetError(_, None) => set_last_error(err),
            Channel::Python => crate::python::raise(err),
        }
    }
}

/// The value an `extern "C"` function returns when it failed.
pub trait FailureValue {
    fn failure() -> Self;
}

impl FailureValue for c_int {
    fn failure() -> Self {
        -1
    }
}

impl<T> FailureValue for *mut T {
    fn failure() -> Self {
        std::ptr::null_mut()
    }
}

impl<T> FailureValue for *const T {
    fn failure() -> Self {
        std::ptr::null()
    }
}

impl FailureValue for () {
    fn failure() -> Self {}
}

/// The one boundary every `extern "C"` body runs inside: an `Err` or a panic becomes the
/// failure value, with the error delivered on `channel`. Nothing unwinds into C.
#[inline(always)]
pub fn boundary<T: FailureValue>(channel: Channel, context: &str, body: impl FnOnce() -> Result<T>) -> T {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(value)) => value,
        Ok(Err(err)) => fail(channel, &err),
        Err(payload) => fail(channel, &panic_error(context, payload)),
    }
}

#[cold]
#[inline(never)]
fn fail<T: FailureValue>(channel: Channel, err: &Error) -> T {
    // Delivering must not unwind either (a SetError written in C++ could, in theory, throw).
    let _ = catch_unwind(AssertUnwindSafe(|| channel.deliver(err)));
    T::failure()
}

#[cold]
fn panic_error(context: &str, payload: Box<dyn std::any::Any + Send>) -> Error {
    let what = payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".to_string());
    Error::runtime(context, format!("internal error (panic): {what}"))
}
