//! The Python channel: an error becomes the current Python exception, and a pending Python
//! exception becomes an `Error` for the other channels; a warning goes to `warnings`.

use crate::error::{set_last_error, Channel, Error, ErrorKind, Result};

use super::{api, Owned, Python};

/// PyObject entry points report by raising (the caller holds the GIL).
#[derive(Clone, Copy)]
pub struct Raise;

impl Channel for Raise {
    /// Sets `err` as the current Python exception, unless it stands for one already set.
    fn deliver(self, err: &Error) {
        let Ok(api) = api() else {
            // No interpreter to raise in: the message still reaches `dlpx_last_error()`.
            set_last_error(err);
            return;
        };
        // SAFETY: the Python channel's entry points are called with the GIL held.
        let py = unsafe { Python::assume_attached_to(api) };
        if err.is_python_pending() {
            // SAFETY: GIL held by the Python channel's callers.
            if unsafe { (py.PyErr_Occurred)() }.is_null() {
                let msg = c"dlpx: a Python call failed without setting an exception";
                // SAFETY: as above.
                unsafe { (py.PyErr_SetString)(py.exception(ErrorKind::RuntimeError), msg.as_ptr()) };
            }
            return;
        }
        let message = err.c_message();
        // SAFETY: GIL held; both arguments are valid.
        unsafe { (py.PyErr_SetString)(py.exception(err.kind), message.as_ptr()) };
    }
}

/// Moves the pending Python exception into an `Error` (for channels other than Python); its
/// message is kept as the exception says it.
pub fn take_pending(py: Python<'_>) -> Error {
    let kind = pending_kind(py).unwrap_or(ErrorKind::RuntimeError);
    // SAFETY: the token proves the GIL is held; the fetched references are released here.
    unsafe {
        let (mut ty, mut value, mut tb) = (std::ptr::null_mut(), std::ptr::null_mut(), std::ptr::null_mut());
        (py.PyErr_Fetch)(&mut ty, &mut value, &mut tb);
        let text = if value.is_null() { None } else { Owned::new(py, (py.PyObject_Str)(value)).ok() };
        let message = text.and_then(|t| py.str_value(t.as_ptr(), "exception").ok()).unwrap_or_default();
        (py.PyErr_Clear)();
        for object in [ty, value, tb] {
            py.decref(object);
        }
        Error::verbatim(kind, message)
    }
}

/// The pending exception reworded by `prefix` (`dlpx: add: parameter 'b': `) where its type is
/// exactly a builtin one a kind names (numpy's BufferError): an exception of that type with the
/// prefix before its message, raised from it (its `__cause__`, with its traceback), as Python's
/// `raise BufferError(prefix + str(e)) from e`. Any other (a subclass, KeyboardInterrupt) stays
/// as it is. The new message leaves out a C++ backtrace (torch's tables set exceptions with one:
/// `without_cpp_backtrace`); the cause keeps it. Returns the error standing for the pending
/// exception.
///
/// The GIL is held (the token) and an exception is pending.
pub fn reword_pending(py: Python<'_>, prefix: &str) -> Error {
    // SAFETY: the token proves the GIL is held; each reference fetched is handed back to the
    // interpreter (`PyErr_Restore`, `PyException_SetCause` steal theirs) or released, once.
    unsafe {
        let (mut ty, mut value, mut tb) = (std::ptr::null_mut(), std::ptr::null_mut(), std::ptr::null_mut());
        (py.PyErr_Fetch)(&mut ty, &mut value, &mut tb);
        (py.PyErr_NormalizeException)(&mut ty, &mut value, &mut tb);
        let exact = !ty.is_null() && ErrorKind::exceptions().any(|(kind, _)| py.exception(kind) == ty);
        let text = match exact && !value.is_null() {
            true => Owned::new(py, (py.PyObject_Str)(value)).and_then(|t| py.str_value(t.as_ptr(), "exception")).ok(),
            false => None,
        };
        let reworded = |t: String| format!("{prefix}{}", crate::error::without_cpp_backtrace(&t));
        let Some(message) = text.and_then(|t| std::ffi::CString::new(reworded(t)).ok()) else {
            (py.PyErr_Clear)(); // what the str of it raised
            (py.PyErr_Restore)(ty, value, tb);
            return Error::python_pending();
        };
        if !tb.is_null() {
            (py.PyException_SetTraceback)(value, tb);
        }
        (py.PyErr_SetString)(ty, message.as_ptr());
        let (mut new_ty, mut new_value, mut new_tb) =
            (std::ptr::null_mut(), std::ptr::null_mut(), std::ptr::null_mut());
        (py.PyErr_Fetch)(&mut new_ty, &mut new_value, &mut new_tb);
        (py.PyErr_NormalizeException)(&mut new_ty, &mut new_value, &mut new_tb);
        match new_value.is_null() {
            // Making it failed (a MemoryError): the original goes on as it is.
            true => {
                (py.PyErr_Restore)(ty, value, tb);
                for object in [new_ty, new_tb] {
                    py.decref(object);
                }
            }
            false => {
                (py.PyException_SetCause)(new_value, value);
                (py.PyErr_Restore)(new_ty, new_value, new_tb);
                for object in [ty, tb] {
                    py.decref(object);
                }
            }
        }
        Error::python_pending()
    }
}

/// Whether the pending exception is `kind`'s (or a subclass's); false when none is pending.
/// The GIL is held (the token).
pub fn pending_is(py: Python<'_>, kind: ErrorKind) -> bool {
    // SAFETY: the token proves the GIL is held; with nothing pending the answer is 0.
    unsafe { (py.PyErr_ExceptionMatches)(py.exception(kind)) != 0 }
}

/// The kind of the pending exception (a subclass's: numpy's AxisError is an IndexError); None for
/// one no kind names (KeyboardInterrupt, a bare Exception).
///
/// The GIL is held (the token) and an exception is pending.
pub fn pending_kind(py: Python<'_>) -> Option<ErrorKind> {
    // In table order, so NotImplementedError matches before its base RuntimeError.
    // SAFETY: the token proves the GIL is held.
    ErrorKind::exceptions()
        .map(|(kind, _)| kind)
        .find(|&kind| unsafe { (py.PyErr_ExceptionMatches)(py.exception(kind)) } != 0)
}

/// Raises AttributeError with `message` (complete, `dlpx:` and all): what a property says where
/// it does not apply, so that `hasattr` is False and a reader tries its next protocol. Not an
/// `ErrorKind`: no entry point of dlpx's C API fails this way.
pub fn attribute_error(py: Python<'_>, message: &str) -> Error {
    let Ok(class) = super::lookup("PyExc_AttributeError\0") else { return Error::runtime(message.to_string()) };
    let Ok(text) = std::ffi::CString::new(message) else { return Error::runtime(message.to_string()) };
    // SAFETY: the symbol is a `PyObject*` variable the interpreter initialised; GIL held.
    unsafe { (py.PyErr_SetString)(*class.cast::<*mut super::PyObject>(), text.as_ptr()) };
    Error::python_pending()
}

/// Warns with `message` (complete, `dlpx:` and all) as `warnings.warn(message, category)` does:
/// from the calling Python frame, shown or not as the warning filters say. `category` is the
/// CPython symbol of the warning class (`"PyExc_UserWarning\0"`, `"PyExc_RuntimeWarning\0"`).
/// An `Err` (the exception pending) where the filters make it an error.
pub fn warn(py: Python<'_>, category: &'static str, message: &str) -> Result<()> {
    let class = super::lookup(category).map_err(|_| Error::runtime(message.to_string()))?;
    let text = std::ffi::CString::new(message).map_err(|_| Error::runtime(message.to_string()))?;
    // SAFETY: the symbol is a `PyObject*` variable the interpreter initialised; GIL held.
    match unsafe { (py.PyErr_WarnEx)(*class.cast::<*mut super::PyObject>(), text.as_ptr(), 1) } {
        0 => Ok(()),
        _ => Err(Error::python_pending()),
    }
}

/// The pending exception's text (`str()` of its value), the exception left pending.
pub fn pending_text(py: Python<'_>) -> String {
    // SAFETY: the token proves the GIL is held; the fetched references are restored (Restore
    // steals them), the str made here released.
    unsafe {
        let (mut ty, mut value, mut tb) = (std::ptr::null_mut(), std::ptr::null_mut(), std::ptr::null_mut());
        (py.PyErr_Fetch)(&mut ty, &mut value, &mut tb);
        let text = if value.is_null() { None } else { Owned::new(py, (py.PyObject_Str)(value)).ok() };
        let text = text.and_then(|t| py.str_value(t.as_ptr(), "exception").ok()).unwrap_or_default();
        (py.PyErr_Clear)();
        (py.PyErr_Restore)(ty, value, tb);
        text
    }
}
