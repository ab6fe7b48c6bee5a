//! Errors: a kind (a Python exception name) and a message, the channels an entry point
//! reports them on, and the one boundary that keeps panics from crossing `extern "C"`.
//!
//! Nothing here knows Python: the Python channel (`cpython::Raise`) is one more [`Channel`],
//! implemented where CPython is. See docs/design.md, "Errors".

use std::borrow::Cow;
use std::cell::RefCell;
use std::ffi::{c_char, c_int, c_void, CString};
use std::fmt;
use std::panic::{catch_unwind, AssertUnwindSafe};

use crate::abi::SetErrorFn;

mod kind;
mod pointers;
mod reported;

pub use kind::{ErrorKind, EXCEPTION_COUNT};
pub use pointers::{given, out, Out};
pub use reported::{c_text, without_cpp_backtrace};

/// Where the message's entry-point prefix comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Context {
    /// Not yet known: the boundary the error leaves through names its entry point.
    Unset,
    /// `dlpx: <entry point>: <fact>`.
    At(&'static str),
    /// A message complete as it is (another library's, taken from a Python exception).
    Verbatim,
}

/// An error: its kind and the fact, e.g. `shape[2] = -3 is negative`, reported as
/// `dlpx: allocator: shape[2] = -3 is negative` once the boundary has added its entry point.
/// One word (its parts live in a box, made only when something fails), so a `Result` that a hot
/// path passes along is no wider than its value and mostly travels in registers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Error(Box<Parts>);

/// What an [`Error`] holds (read through it: `err.kind`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Parts {
    pub kind: ErrorKind,
    context: Context,
    fact: Cow<'static, str>,
}

impl std::ops::Deref for Error {
    type Target = Parts;

    fn deref(&self) -> &Parts {
        &self.0
    }
}

pub type Result<T> = std::result::Result<T, Error>;

impl Error {
    fn of(kind: ErrorKind, context: Context, fact: Cow<'static, str>) -> Self {
        Error(Box::new(Parts { kind, context, fact }))
    }

    pub fn new(kind: ErrorKind, fact: impl fmt::Display) -> Self {
        Self::of(kind, Context::Unset, Cow::Owned(fact.to_string()))
    }

    pub fn value(fact: impl fmt::Display) -> Self {
        Self::new(ErrorKind::ValueError, fact)
    }

    pub fn type_error(fact: impl fmt::Display) -> Self {
        Self::new(ErrorKind::TypeError, fact)
    }

    pub fn buffer(fact: impl fmt::Display) -> Self {
        Self::new(ErrorKind::BufferError, fact)
    }

    pub fn not_implemented(fact: impl fmt::Display) -> Self {
        Self::new(ErrorKind::NotImplementedError, fact)
    }

    pub fn memory(fact: impl fmt::Display) -> Self {
        Self::new(ErrorKind::MemoryError, fact)
    }

    pub fn runtime(fact: impl fmt::Display) -> Self {
        Self::new(ErrorKind::RuntimeError, fact)
    }

    /// `what` is NULL (a `NonNull::new(p).ok_or_else(...)` for every pointer argument).
    pub fn null(what: &'static str) -> Self {
        Self::of(ErrorKind::ValueError, Context::Unset, Cow::Owned(format!("{what} is NULL")))
    }

    /// "A Python exception is already set" (a CPython call returned its failure value).
    pub fn python_pending() -> Self {
        Self::of(ErrorKind::PythonPending, Context::Unset, Cow::Borrowed("a Python exception is pending"))
    }

    /// An error whose message is complete as given (no `dlpx:` prefix is added).
    pub fn verbatim(kind: ErrorKind, message: String) -> Self {
        Self::of(kind, Context::Verbatim, Cow::Owned(message))
    }

    pub fn is_python_pending(&self) -> bool {
        self.kind == ErrorKind::PythonPending
    }

    /// Names the entry point, unless an inner one already did (errors made outside any boundary,
    /// such as a deleter's, name theirs themselves).
    pub fn at(mut self, context: &'static str) -> Self {
        if self.0.context == Context::Unset {
            self.0.context = Context::At(context);
        }
        self
    }

    /// The same error as a BufferError: what an importer raises for data it cannot describe.
    pub fn into_buffer_error(mut self) -> Self {
        self.0.kind = ErrorKind::BufferError;
        self
    }

    /// The fact alone, without the `dlpx: entry point:` prefix.
    pub fn fact(&self) -> &str {
        &self.fact
    }

    /// The whole message: `dlpx: allocator: shape[2] = -3 is negative`.
    pub fn message(&self) -> String {
        match self.context {
            Context::Unset => format!("dlpx: {}", self.fact),
            Context::At(context) => format!("dlpx: {context}: {}", self.fact),
            Context::Verbatim => self.fact.to_string(),
        }
    }

    /// The message as a C string; an interior NUL (from a foreign message) is cut there.
    pub fn c_message(&self) -> CString {
        let mut bytes = self.message().into_bytes();
        if let Some(end) = bytes.iter().position(|&b| b == 0) {
            bytes.truncate(end);
        }
        CString::new(bytes).expect("NUL removed above")
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message())
    }
}

thread_local! {
    static LAST_ERROR: RefCell<Option<(ErrorKind, CString)>> = const { RefCell::new(None) };
}

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

/// Where an entry point reports its failure (docs/design.md, "Errors").
pub trait Channel: Copy {
    fn deliver(self, err: &Error);
}

/// Plain C API: the thread-local `dlpx_last_error()`.
#[derive(Clone, Copy)]
pub struct LastError;

impl Channel for LastError {
    fn deliver(self, err: &Error) {
        set_last_error(err)
    }
}

/// The allocator: `ErrorCallback(error_ctx, kind, message)` exactly once; a NULL `SetError` falls
/// back to the thread-local so the message is never lost.
#[derive(Clone, Copy)]
pub struct ErrorCallback(pub *mut c_void, pub SetErrorFn);

impl Channel for ErrorCallback {
    fn deliver(self, err: &Error) {
        set_last_error(err);
        if let ErrorCallback(ctx, Some(set_error)) = self {
            let message = err.c_message();
            // SAFETY: the caller handed us this callback for exactly this purpose; both strings
            // are NUL-terminated and outlive the call.
            unsafe { set_error(ctx, err.kind.name().as_ptr(), message.as_ptr()) };
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
/// failure value, with the error, named after the entry point `context`, delivered on
/// `channel`. Nothing unwinds into C.
#[inline(always)]
pub fn boundary<T: FailureValue, C: Channel>(channel: C, context: &'static str, body: impl FnOnce() -> Result<T>) -> T {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(value)) => value,
        Ok(Err(err)) => fail(channel, err.at(context)),
        Err(payload) => fail(channel, panic_error(payload).at(context)),
    }
}

/// Runs a deleter-like body that reports nowhere (a deleter returns nothing): a panic is kept
/// from unwinding into C and its message goes to `dlpx_last_error()`, named after `context`.
#[inline(always)]
pub fn guard(context: &'static str, body: impl FnOnce()) {
    if let Err(payload) = catch_unwind(AssertUnwindSafe(body)) {
        set_last_error(&panic_error(payload).at(context));
    }
}

#[cold]
#[inline(never)]
fn fail<T: FailureValue, C: Channel>(channel: C, err: Error) -> T {
    // Delivering must not unwind either (a SetError written in C++ could, in theory, throw).
    let _ = catch_unwind(AssertUnwindSafe(|| channel.deliver(&err)));
    T::failure()
}

#[cold]
fn panic_error(payload: Box<dyn std::any::Any + Send>) -> Error {
    let what = payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".to_string());
    Error::runtime(format!("internal error (panic): {what}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::CStr;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[test]
    fn the_boundary_names_the_entry_point_once() {
        let err = Error::value("shape[2] = -3 is negative").at("allocator");
        assert_eq!(err.message(), "dlpx: allocator: shape[2] = -3 is negative");
        assert_eq!(err.clone().at("outer").message(), err.message(), "an inner entry point wins");
        assert_eq!(Error::verbatim(ErrorKind::TypeError, "torch: bad".into()).at("x").message(), "torch: bad");
        assert_eq!(Error::null("out").message(), "dlpx: out is NULL");
    }

    #[test]
    fn a_panic_becomes_the_failure_value_and_a_message() {
        clear_last_error();
        let r: c_int = boundary(LastError, "probe", || panic!("boom"));
        assert_eq!(r, -1);
        // SAFETY: set just above on this thread.
        let message = unsafe { CStr::from_ptr(last_error_ptr()) }.to_str().unwrap().to_string();
        assert_eq!(message, "dlpx: probe: internal error (panic): boom");
        guard("deleter", || panic!("late"));
        // SAFETY: the guard left a message: a live NUL-terminated string.
        let message = unsafe { CStr::from_ptr(last_error_ptr()) }.to_str().unwrap().to_string();
        assert_eq!(message, "dlpx: deleter: internal error (panic): late");
    }

    static CALLS: AtomicUsize = AtomicUsize::new(0);
    unsafe extern "C" fn count(_ctx: *mut c_void, kind: *const c_char, _message: *const c_char) {
        // SAFETY: dlpx passes a NUL-terminated kind name.
        assert_eq!(unsafe { CStr::from_ptr(kind) }, c"MemoryError");
        CALLS.fetch_add(1, Ordering::SeqCst);
    }

    #[test]
    fn set_error_is_called_exactly_once_and_only_on_failure() {
        let channel = ErrorCallback(std::ptr::null_mut(), Some(count));
        let ok: c_int = boundary(channel, "allocator", || Ok(0));
        assert_eq!((ok, CALLS.load(Ordering::SeqCst)), (0, 0));
        let failed: c_int = boundary(channel, "allocator", || Err(Error::memory("out of memory")));
        assert_eq!((failed, CALLS.load(Ordering::SeqCst)), (-1, 1));
        let tolerated: c_int =
            boundary(ErrorCallback(std::ptr::null_mut(), None), "allocator", || Err(Error::memory("x")));
        assert_eq!(tolerated, -1);
    }
}
