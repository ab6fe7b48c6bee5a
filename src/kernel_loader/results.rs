//! A kernel's results as Python objects (the GIL held): none → None, one → itself, several → a
//! tuple. A tensor comes back as the caller's type (`producers::to_py_like`: the first tensor
//! argument's framework); what is not handed over is deleted once.

use pyo3_ffi::PyObject;

use crate::cpython::{Owned, Python};
use crate::error::{Error, Result};
use crate::kernels::inline::Inline;
use crate::kernels::Returned;
use crate::producers::{self, Entry};

pub fn to_py(py: Python<'_>, like: Option<Entry>, returned: Inline<Returned, 2>) -> Result<*mut PyObject> {
    let returned = returned.as_slice();
    match returned.len() {
        0 => Ok(py.new_none()),
        1 => one(py, like, returned[0]),
        n => {
            // SAFETY: GIL held; a new tuple, whose unset items are NULL until filled.
            let tuple = Owned::new(py, unsafe { (py.PyTuple_New)(n as _) });
            let tuple = match tuple {
                Ok(tuple) => tuple,
                Err(err) => {
                    returned.iter().copied().for_each(Returned::discard);
                    return Err(err);
                }
            };
            let mut results = returned.iter().copied().enumerate();
            while let Some((i, result)) = results.next() {
                match one(py, like, result) {
                    // SAFETY: GIL held; i < n; the tuple steals the new reference.
                    Ok(item) => unsafe { (py.PyTuple_SetItem)(tuple.as_ptr(), i as _, item) },
                    Err(err) => {
                        results.for_each(|(_, rest)| rest.discard());
                        return Err(err);
                    }
                };
            }
            Ok(tuple.into_ptr())
        }
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
/// an output's refusal is: `dlpx: bf: result: Unsupported dtype in DLTensor.`, of the kind it
/// raised. An exception no kind names (KeyboardInterrupt) passes as it is.
#[cold]
pub fn refused(py: Python<'_>, kernel: &'static str, err: Error) -> Error {
    let err = match err.is_python_pending() {
        true if crate::cpython::pending_kind(py).is_some() => crate::cpython::take_pending(py),
        true => return err,
        false => err,
    };
    crate::kernels::call::for_the_call("result", err).at(kernel)
}
