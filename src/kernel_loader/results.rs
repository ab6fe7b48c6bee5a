//! A kernel's results as Python objects (the GIL held): none → None, one → itself, several → a
//! tuple. A tensor comes back as the caller's type (`producers::to_py_like`: the first tensor
//! argument's framework); what is not handed over is deleted once.

use pyo3_ffi::PyObject;

use crate::abi::DLDataType;
use crate::cpython::{Owned, Python};
use crate::error::{Error, Result};
use crate::kernels::inline::Inline;
use crate::kernels::Returned;
use crate::producers::{self, Entry};

/// Why the results could not be made: the error, and which result it was (`result 2 of 3
/// (bfloat16)`: the framework's own words, numpy's "Unsupported dtype in DLTensor", say
/// neither).
pub struct Refusal {
    err: Error,
    which: String,
}

pub fn to_py(
    py: Python<'_>,
    like: Option<Entry>,
    returned: Inline<Returned, 2>,
) -> std::result::Result<*mut PyObject, Refusal> {
    let returned = returned.as_slice();
    match returned.len() {
        0 => Ok(py.new_none()),
        1 => {
            // Read before the result is given up (converted, or deleted on failure).
            let dtype = dtype_of(returned[0]);
            one(py, like, returned[0]).map_err(|err| Refusal { err, which: which("result", dtype) })
        }
        n => {
            // SAFETY: GIL held; a new tuple, whose unset items are NULL until filled.
            let tuple = Owned::new(py, unsafe { (py.PyTuple_New)(n as _) });
            let tuple = match tuple {
                Ok(tuple) => tuple,
                Err(err) => {
                    returned.iter().copied().for_each(Returned::discard);
                    return Err(Refusal { err, which: "results".to_string() });
                }
            };
            let mut results = returned.iter().copied().enumerate();
            while let Some((i, result)) = results.next() {
                // Read before the result is given up (converted, or deleted on failure).
                let dtype = dtype_of(result);
                match one(py, like, result) {
                    // SAFETY: GIL held; i < n; the tuple steals the new reference.
                    Ok(item) => unsafe { (py.PyTuple_SetItem)(tuple.as_ptr(), i as _, item) },
                    Err(err) => {
                        results.for_each(|(_, rest)| rest.discard());
                        return Err(Refusal { err, which: which(&format!("result {} of {n}", i + 1), dtype) });
                    }
                };
            }
            Ok(tuple.into_ptr())
        }
    }
}

/// A tensor result's dtype (None for a scalar), read while the result is still the call's.
#[inline]
fn dtype_of(result: Returned) -> Option<DLDataType> {
    match result {
        // SAFETY: a live result tensor, not yet given up, of a major dlpx reads (the call
        // checked its outputs).
        Returned::Tensor(managed) => Some(unsafe { managed.as_ref() }.dl_tensor.dtype),
        _ => None,
    }
}

/// `position`, and a tensor's dtype after it.
#[cold]
fn which(position: &str, dtype: Option<DLDataType>) -> String {
    match dtype {
        Some(dtype) => format!("{position} ({})", crate::dtype::dtype_name(dtype)),
        None => position.to_string(),
    }
}

/// One result as a new reference; a tensor is given up either way.
fn one(py: Python<'_>, like: Option<Entry>, result: Returned) -> Result<*mut PyObject> {
    match result {
        Returned::Tensor(managed) => producers::to_py_like(py, like, managed),
        Returned::Int(value) => py.new_int(value),
        // SAFETY: GIL held.
        Returned::Float(value) => py.check(unsafe { (py.PyFloat_FromDouble)(value) }),
        Returned::Bool(value) => py.check(py.new_bool(value)),
    }
}

/// A result the caller's framework could not take (numpy refusing a bfloat16 output), named as
/// an output's refusal is: `dlpx: bf: result (bfloat16): Unsupported dtype in DLTensor.`, of the
/// kind it raised. An exception no kind names (KeyboardInterrupt) passes as it is.
#[cold]
pub fn refused(py: Python<'_>, kernel: &'static str, refusal: Refusal) -> Error {
    let err = match refusal.err.is_python_pending() {
        true if crate::cpython::pending_kind(py).is_some() => crate::cpython::take_pending(py),
        true => return refusal.err,
        false => refusal.err,
    };
    crate::kernels::call::for_the_call(&refusal.which, err).at(kernel)
}
