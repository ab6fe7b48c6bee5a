//! The guard of a direct read (docs/design.md, "A guard per direct read"): the producer versions
//! the read was tested on, a first-use check against the producer's `__dlpack__` for any other
//! version, and an off switch.

use std::ffi::CStr;
use std::ptr::NonNull;

use pyo3_ffi::PyObject;

use super::{dlpack_method, Entry, Producer};
use crate::abi::*;
use crate::cpython::{attribute, imported_module, GilVar, Python};
use crate::error::Result;

/// Turns direct reads off: `DLPX_DIRECT_OFF=numpy,jax` (row names) or `all`.
pub const OFF_VARIABLE: &str = "DLPX_DIRECT_OFF";
/// Makes tested versions take the first-use check too: row names or `all`.
pub const VERIFY_VARIABLE: &str = "DLPX_DIRECT_VERIFY";

/// What a guard knows of its read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum State {
    /// Not looked at yet (the producer's module and version, the environment).
    Unknown,
    /// The first object read both ways decides.
    Unverified,
    /// Read directly.
    Trusted,
    /// Every object goes to `__dlpack__`: switched off, or the check found a difference.
    Off,
}

pub struct Guard {
    /// The row's name, as the environment variables spell it.
    row: &'static str,
    /// The module whose `__version__` is the producer's version.
    module: &'static CStr,
    /// Versions the read was tested on (`"2.4"` covers 2.4 and 2.4.x, not 2.40).
    tested: &'static [&'static str],
    state: GilVar<State>,
}

impl Guard {
    pub const fn new(row: &'static str, module: &'static CStr, tested: &'static [&'static str]) -> Guard {
        Guard { row, module, tested, state: GilVar::new(State::Unknown) }
    }

    #[inline]
    pub fn state(&self, py: Python<'_>) -> State {
        match self.state.get(py) {
            State::Unknown => self.decide(py),
            known => known,
        }
    }

    #[cold]
    fn decide(&self, py: Python<'_>) -> State {
        let state = if named(OFF_VARIABLE, self.row) {
            State::Off
        } else if named(VERIFY_VARIABLE, self.row) || !self.version(py).is_some_and(|v| tested(self.tested, &v)) {
            State::Unverified
        } else {
            State::Trusted
        };
        // Another thread may have decided meanwhile (the lookups run Python code): an "off"
        // verdict stays.
        match self.state.get(py) {
            State::Unknown => {
                self.state.set(py, state);
                state
            }
            known => known,
        }
    }

    fn version(&self, py: Python<'_>) -> Option<String> {
        let module = imported_module(py, self.module)?;
        let version = attribute(py, module.as_ptr(), c"__version__")?;
        py.str_value(version.as_ptr(), "__version__").ok()
    }

    /// Records the first-use check's verdict: agreement trusts the read, a difference turns it
    /// off for good (a later agreement cannot turn it back on).
    fn verdict(&self, py: Python<'_>, agree: bool) {
        if self.state.get(py) != State::Off {
            self.state.set(py, if agree { State::Trusted } else { State::Off });
        }
    }

    /// The first-use check: `object` read the row's way and through `__dlpack__`, the two
    /// managed tensors compared by value (and read-only flag). The answer is the read where they
    /// agree, else `__dlpack__`'s; the caller applies the faithful-import rule to it, as to
    /// every read. A read that refuses `object` outright refuses it here too, without asking
    /// `__dlpack__` (tvm_ffi's would dereference a moved-out handle); one that does not cover
    /// it, and two refusals, decide nothing.
    #[cold]
    pub fn verify(
        &self,
        py: Python<'_>,
        row: &dyn Producer,
        object: *mut PyObject,
        entry: Entry,
    ) -> Result<NonNull<DLManagedTensorVersioned>> {
        let ours = row.managed(py, object, entry)?;
        let answer = dlpack_method::managed_and_legacy_of(py, object);
        match (ours, &answer) {
            (Some(ours), Ok((theirs, legacy))) => {
                // SAFETY: two live managed tensors of major 1, checked on the way in.
                let agree = unsafe { same_tensor(ours.as_ref(), theirs.as_ref(), *legacy) };
                self.verdict(py, agree);
                // Agreed, the read is the answer (it knows what a legacy capsule cannot say:
                // whether the array is writable), as it is for every later object.
                let (answer, unused) = if agree { (ours, *theirs) } else { (*theirs, ours) };
                // SAFETY: both are ours; the unused one is deleted once, here.
                unsafe { crate::tensor::delete_managed(unused) };
                return Ok(answer);
            }
            (Some(ours), Err(_)) => {
                self.verdict(py, false);
                // SAFETY: ours, unused: its deleter runs once, here.
                unsafe { crate::tensor::delete_managed(ours) };
            }
            (None, _) => {}
        }
        answer.map(|(theirs, _)| theirs)
    }
}

/// Whether two managed tensors describe the same memory the same way: the first-use check.
/// Where `b` came from a legacy capsule, its read-only flag is an assumption (a legacy capsule
/// cannot say), not a disagreement: numpy before 2.1 answers with one.
///
/// # Safety
/// Both are live, valid major-1 managed tensors.
unsafe fn same_tensor(a: &DLManagedTensorVersioned, b: &DLManagedTensorVersioned, b_legacy: bool) -> bool {
    (b_legacy || (a.flags ^ b.flags) & DLPACK_FLAG_BITMASK_READ_ONLY == 0)
        // SAFETY: per the contract, their shapes and strides are `ndim` long.
        && unsafe { crate::validate::same_description(&a.dl_tensor, &b.dl_tensor) }
}

/// Whether the environment variable names `row` (or `all`).
pub fn named(variable: &str, row: &str) -> bool {
    std::env::var(variable).is_ok_and(|names| names.split(',').map(str::trim).any(|n| n == row || n == "all"))
}

/// Whether `version` is one of `tested`: equal, or the same release followed by more parts
/// (`2.4` covers `2.4.6` and `2.4rc1`, not `2.40`).
fn tested(tested: &[&str], version: &str) -> bool {
    tested.iter().any(|t| version.strip_prefix(t).is_some_and(|rest| !rest.starts_with(|c: char| c.is_ascii_digit())))
}

#[cfg(test)]
mod tests {
    use super::tested;

    #[test]
    fn a_tested_version_covers_its_patch_releases_only() {
        assert!(tested(&["2.4"], "2.4"));
        assert!(tested(&["2.4"], "2.4.6"));
        assert!(tested(&["0.1.15"], "0.1.15.post2"));
        assert!(!tested(&["2.4"], "2.40.1"));
        assert!(!tested(&["2.4"], "2.5.0"));
        assert!(!tested(&[], "2.4"));
    }
}
