//! The library itself to its two kinds of callers: its version, for C, and `PyInit__native`, by
//! which CPython loads it as `dlpx._native` (the module is handed dlpx's table to publish).

use std::ffi::c_char;

use super::exchange::EXCHANGE_API;

/// The dlpx library version, e.g. "0.1.0". Static storage; never NULL.
#[no_mangle]
pub extern "C" fn dlpx_version() -> *const c_char {
    concat!(env!("CARGO_PKG_VERSION"), "\0").as_ptr().cast()
}

/// Entry point CPython calls when `dlpx._native` is loaded from `libdlpx.so`.
///
/// # Safety
/// Called by CPython's import machinery, with the GIL held.
#[no_mangle]
pub unsafe extern "C" fn PyInit__native() -> *mut pyo3_ffi::PyObject {
    crate::module::init(&EXCHANGE_API)
}
