//! `dlpx.outputs_like(x)`: which framework a kernel's outputs are for, instead of the first tensor
//! argument's (docs/kernels.md, "Which argument decides"). The choice is this thread's, set and
//! restored by the Python context manager around the calls it covers; a call reads it once.

use std::cell::Cell;
use std::sync::atomic::{AtomicUsize, Ordering};

use pyo3_ffi::PyObject;

use crate::cpython::Python;
use crate::error::{Error, Result};
use crate::producers::{self, Entry};

thread_local! {
    /// The framework this thread's kernel calls give outputs to; None: the first tensor argument's.
    static CHOSEN: Cell<Option<Entry>> = const { Cell::new(None) };
}

/// How many threads have a choice set: while none has, a call reads this and not its
/// thread-local (in a shared library that is a `__tls_get_addr` call).
static THREADS_CHOOSING: AtomicUsize = AtomicUsize::new(0);

/// The framework chosen for this thread's calls, if any.
#[inline]
pub fn chosen() -> Option<Entry> {
    match THREADS_CHOOSING.load(Ordering::Relaxed) {
        0 => None,
        _ => this_thread_s(),
    }
}

/// This thread's choice: out of line, or the compiler hoists the thread-local's address (the
/// `__tls_get_addr` call) above the count's test into every call.
#[cold]
#[inline(never)]
fn this_thread_s() -> Option<Entry> {
    CHOSEN.with(Cell::get)
}

/// `_set_outputs_like(x)`: x's framework (x a tensor or its type) from now on in this thread;
/// None: the first tensor argument's again. A TypeError for what is no framework's tensor.
pub fn set(py: Python<'_>, _module: *mut PyObject, object: *mut PyObject) -> Result<*mut PyObject> {
    let entry = match object == py.none {
        true => None,
        false => {
            let entry = producers::entry_of_object_or_type(py, object);
            // A framework whose own type comes back: a table of its own (torch, dlpx) or a
            // `from_dlpack` to call (numpy, jax, cupy, tvm_ffi, array_api_strict).
            if entry.row.synthetic.is_some() && entry.row.home.is_none() {
                // A type by its name, anything else by its type's: `memoryview`, `an instance of int`.
                let given = match crate::cpython::is_type(py, object) {
                    true => crate::cpython::name_of_type(py, object),
                    false => format!("an instance of {}", crate::cpython::type_name(py, object)),
                };
                let err = Error::type_error(format!(
                    "takes a tensor, or a tensor type, of a framework outputs go back to (torch, numpy, jax, cupy, \
                     tvm_ffi, array_api_strict, dlpx); got {given}"
                ));
                return Err(err.at("outputs_like"));
            }
            Some(entry)
        }
    };
    // This thread's own store is ordered before its own later reads whatever the count says;
    // another thread's count only decides whether that thread looks at its own (empty) slot.
    match (CHOSEN.with(|chosen| chosen.replace(entry)).is_some(), entry.is_some()) {
        (false, true) => THREADS_CHOOSING.fetch_add(1, Ordering::Relaxed),
        (true, false) => THREADS_CHOOSING.fetch_sub(1, Ordering::Relaxed),
        _ => 0,
    };
    Ok(py.new_none())
}
