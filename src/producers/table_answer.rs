//! What an entry of a producer's exchange table answered. The table's contract: 0 is success,
//! anything else a failure with the producer's Python exception set. A producer that breaks it
//! — a failure that set no exception, a success that left one set — gets an error naming the
//! entry, never CPython's SystemError for a result returned with an exception set, nor "a
//! Python call failed without setting an exception".

use std::ffi::c_int;

use crate::cpython::Python;
use crate::error::Error;

/// Whether an entry that returned `returned` succeeded: 0, and no exception left set (dlpx
/// calls a table with none pending).
#[inline(always)]
pub fn succeeded(py: Python<'_>, returned: c_int) -> bool {
    // SAFETY: the token proves the GIL is held.
    returned == 0 && unsafe { (py.PyErr_Occurred)() }.is_null()
}

/// Why the entry `entry` failed: the producer's pending exception, or, where it set none, a
/// RuntimeError that names the entry.
#[cold]
pub fn failure(py: Python<'_>, entry: &str) -> Error {
    // SAFETY: the token proves the GIL is held.
    match unsafe { (py.PyErr_Occurred)() }.is_null() {
        false => Error::python_pending(),
        true => Error::runtime(format!("the producer's exchange table failed in {entry} and set no exception")),
    }
}
