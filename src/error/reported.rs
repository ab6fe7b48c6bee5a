//! What foreign code reported as an error — a `SetError` callback's kind and text, an
//! exception's text — made an [`Error`]: C strings read leniently, torch's C++ backtrace cut off,
//! an empty report named as one.

use std::ffi::c_char;

use super::{Error, ErrorKind};

impl Error {
    /// What a foreign `SetError` reported (an allocator's), less a C++ backtrace
    /// ([`without_cpp_backtrace`]); a report with no text says that it had none.
    pub fn reported(kind: ErrorKind, message: String) -> Self {
        let mut message = message;
        message.truncate(without_cpp_backtrace(&message).len());
        if message.trim().is_empty() {
            message = NO_MESSAGE.to_string();
        }
        Self::verbatim(kind, message)
    }

    /// What a `SetError` callback was handed, as an error: `kind` a Python exception's name
    /// (RuntimeError for one dlpx does not map), `message` less a C++ backtrace ([`Error::reported`]).
    ///
    /// # Safety
    /// `kind` and `message` are NULL or NUL-terminated strings.
    pub unsafe fn from_set_error(kind: *const c_char, message: *const c_char) -> Self {
        // SAFETY: per the contract.
        let (kind, message) = unsafe { (c_text(kind), c_text(message)) };
        Self::reported(ErrorKind::from_name(&kind).unwrap_or(ErrorKind::RuntimeError), message)
    }
}

/// A C string a caller handed in for a message (an error's kind or text), lossy UTF-8; NULL reads
/// as empty.
///
/// # Safety
/// `text` is NULL or NUL-terminated, valid for the call.
pub unsafe fn c_text(text: *const c_char) -> String {
    match text.is_null() {
        true => String::new(),
        // SAFETY: non-NULL and NUL-terminated, by the contract.
        false => unsafe { std::ffi::CStr::from_ptr(text) }.to_string_lossy().into_owned(),
    }
}

/// What an error reported with no text (a NULL or empty message) says.
pub const NO_MESSAGE: &str = "(an error was reported with no message)";

/// `text` with the C++ backtrace torch's errors carry cut off: `c10::Error::what()` appends
/// `Exception raised from … (most recent call first):` and `frame #0: …` lines, which torch's own
/// Python exceptions leave out (unless `TORCH_SHOW_CPP_STACKTRACES` is set).
pub fn without_cpp_backtrace(text: &str) -> &str {
    let end = ["\nException raised from ", "\nframe #0: "].iter().filter_map(|marker| text.find(marker)).min();
    &text[..end.unwrap_or(text.len())]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reported_message_loses_the_cpp_backtrace_torch_appends() {
        let enforce = "[enforce fail at alloc_cpu.cpp:127] err == 0. DefaultCPUAllocator: can't allocate memory\n\
                       frame #0: c10::ThrowEnforceNotMet(char const*, int) + 0x6a (0x7f in libc10.so)\nframe #1: …";
        let checked = "Expected a proper shape\nException raised from empty_cpu at aten/src/ATen/Empty.cpp:20 \
                       (most recent call first):\nframe #0: c10::Error::Error(…)";
        for (text, kept) in [
            (enforce, "[enforce fail at alloc_cpu.cpp:127] err == 0. DefaultCPUAllocator: can't allocate memory"),
            (checked, "Expected a proper shape"),
            ("two lines\nof an allocator's own", "two lines\nof an allocator's own"),
            ("", NO_MESSAGE),
            (" \n", NO_MESSAGE),
        ] {
            let err = Error::reported(ErrorKind::MemoryError, text.to_string());
            assert_eq!(err.message(), kept);
            assert_eq!(err.kind, ErrorKind::MemoryError);
        }
    }
}
