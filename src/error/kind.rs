//! The kinds of error, each named after the Python exception a Python caller sees: the one
//! table of their names, which the CPython leaf resolves `PyExc_<name>` from.

use std::ffi::CStr;

/// What went wrong, named after the Python exception a Python caller sees.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorKind {
    MemoryError,
    ValueError,
    TypeError,
    BufferError,
    NotImplementedError,
    /// A kernel library `dlopen` refuses.
    OSError,
    /// A library that holds no dlpx kernels, or kernels of a newer kernel ABI.
    ImportError,
    /// What kernels name most (`dlpx_call_error`); a name the table lacks arrives as
    /// RuntimeError, the name kept in the message.
    IndexError,
    KeyError,
    OverflowError,
    ZeroDivisionError,
    /// Last of the exceptions: `PythonPending` reads as it where it cannot be taken.
    RuntimeError,
    /// A Python exception is already set on this thread (a CPython call failed): the Python
    /// channel leaves it in place; other channels must take it first (`cpython::take_pending`).
    PythonPending,
}

/// How many kinds are Python exceptions (all but `PythonPending`).
pub const EXCEPTION_COUNT: usize = 12;

/// The kinds that are Python exceptions, with their names: the one place they are spelled. In
/// declaration order, RuntimeError last (a subclass must come before its base: `take_pending`
/// matches in this order).
const EXCEPTIONS: [(ErrorKind, &CStr); EXCEPTION_COUNT] = [
    (ErrorKind::MemoryError, c"MemoryError"),
    (ErrorKind::ValueError, c"ValueError"),
    (ErrorKind::TypeError, c"TypeError"),
    (ErrorKind::BufferError, c"BufferError"),
    (ErrorKind::NotImplementedError, c"NotImplementedError"),
    (ErrorKind::OSError, c"OSError"),
    (ErrorKind::ImportError, c"ImportError"),
    (ErrorKind::IndexError, c"IndexError"),
    (ErrorKind::KeyError, c"KeyError"),
    (ErrorKind::OverflowError, c"OverflowError"),
    (ErrorKind::ZeroDivisionError, c"ZeroDivisionError"),
    (ErrorKind::RuntimeError, c"RuntimeError"),
];

impl ErrorKind {
    /// Every kind a caller can be told about, in a fixed order (`exception_index` indexes it).
    pub fn exceptions() -> impl Iterator<Item = (ErrorKind, &'static CStr)> {
        EXCEPTIONS.into_iter()
    }

    /// The Python exception's name; a pending exception reads as RuntimeError where it could not
    /// be taken.
    pub fn name(self) -> &'static CStr {
        EXCEPTIONS[self.exception_index()].1
    }

    /// The position of this kind's exception in [`ErrorKind::exceptions`].
    pub fn exception_index(self) -> usize {
        match self {
            ErrorKind::PythonPending => EXCEPTIONS.len() - 1,
            kind => kind as usize,
        }
    }

    /// The kind a Python exception name stands for; None for names dlpx does not map.
    pub fn from_name(name: &str) -> Option<ErrorKind> {
        EXCEPTIONS.iter().find(|(_, n)| n.to_bytes() == name.as_bytes()).map(|(kind, _)| *kind)
    }
}

const _: () = {
    // `exception_index` relies on the declaration order matching the table.
    let mut i = 0;
    while i < EXCEPTION_COUNT {
        assert!(EXCEPTIONS[i].0 as usize == i);
        i += 1;
    }
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_and_names_are_one_table() {
        for (kind, name) in ErrorKind::exceptions() {
            assert_eq!(kind.name(), name);
            assert_eq!(ErrorKind::from_name(name.to_str().unwrap()), Some(kind));
        }
        assert_eq!(ErrorKind::from_name("LinAlgError"), None);
        assert_eq!(ErrorKind::PythonPending.name(), c"RuntimeError");
    }
}
