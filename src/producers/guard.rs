//! The guard of a direct read (docs/design.md, "A guard per direct read"): the producer versions
//! the read was tested on, a first-use check against the producer's `__dlpack__` for any other
//! version, and an off switch.

use std::ffi::CStr;
use std::sync::atomic::{AtomicBool, Ordering};

use super::served::Served;
use super::Handover;
use crate::abi::*;
use crate::cpython::{attribute, imported_module, GilVar, Python};
use crate::error::{Error, Result};

/// Turns direct reads off: `DLPX_DIRECT_OFF=numpy,jax` (row names) or `all`.
pub const OFF_VARIABLE: &str = "DLPX_DIRECT_OFF";
/// Makes tested versions take the first-use check too: row names or `all`.
pub const VERIFY_VARIABLE: &str = "DLPX_DIRECT_VERIFY";
/// Set (to anything): a first-use check that finds a difference is an error, not a warning
/// (the test suite sets it, so a read that disagrees fails it).
pub const STRICT_VARIABLE: &str = "DLPX_DIRECT_STRICT";

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
    /// The calls the read answered (`dlpx._native._served`).
    served: Served,
}

impl Guard {
    pub const fn new(row: &'static str, module: &'static CStr, tested: &'static [&'static str]) -> Guard {
        Guard { row, module, tested, state: GilVar::new(State::Unknown), served: Served::of(row) }
    }

    /// The read answered a call: its handover is handed out.
    #[inline(always)]
    pub fn served(&self, py: Python<'_>) {
        self.served.count(py)
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
        // Another thread may have decided meanwhile (the lookups run Python code): its verdict
        // stays, an "off" one above all (read and written in one step).
        match self.state.replace(py, |now| if now == State::Unknown { state } else { now }) {
            State::Unknown => state,
            known => known,
        }
    }

    fn version(&self, py: Python<'_>) -> Option<String> {
        let module = imported_module(py, self.module)?;
        let version = attribute(py, module.as_ptr(), c"__version__")?;
        py.str_value(version.as_ptr(), "__version__").ok()
    }

    /// Records the first-use check's verdict: agreement trusts the read; a difference (what it
    /// is) turns it off for good (a later agreement cannot turn it back on) and is said once, a
    /// RuntimeWarning naming the producer, its version and the difference — or, under
    /// `DLPX_DIRECT_STRICT`, is an error that leaves the read undecided, so that every later
    /// object is checked, and fails, again: a caller that swallows one error hides nothing.
    fn verdict(&self, py: Python<'_>, difference: Option<String>) -> Result<()> {
        match difference {
            // Agreement trusts the read unless another thread's check turned it off meanwhile
            // (read and written in one step: two steps let "trusted" overwrite "off").
            None => {
                self.state.replace(py, |now| if now == State::Off { now } else { State::Trusted });
                Ok(())
            }
            Some(_) if self.state.get(py) == State::Off => Ok(()),
            Some(difference) => self.disagreed(py, &difference),
        }
    }

    #[cold]
    fn disagreed(&self, py: Python<'_>, difference: &str) -> Result<()> {
        let version = self.version(py).unwrap_or_else(|| "(version unknown)".to_string());
        let module = self.module.to_str().unwrap_or_default();
        let fact =
            format!("the {} direct read disagrees with {module} {version}'s own __dlpack__: {difference}", self.row);
        disagreement(py, &fact, "dlpx asks __dlpack__ for every such object from now on", || {
            self.state.set(py, State::Off)
        })
    }

    /// The first-use check's verdict on `ours`, the row's handover for an object, held against
    /// `theirs`, what `__dlpack__` answered for it: the two compared by value (and read-only
    /// flag), agreement trusting the row, a difference turning it off. The answer is the row's
    /// handover where they agree, else `__dlpack__`'s; the caller applies the faithful-import rule
    /// to it, as to every handover. A read that refused the object outright refused it before
    /// `__dlpack__` was asked (tvm_ffi's would dereference a moved-out handle); one that does not
    /// cover it, and two refusals, decide nothing.
    #[cold]
    pub fn judge<'py>(
        &self,
        py: Python<'py>,
        ours: Handover<'py>,
        theirs: Result<Handover<'py>>,
    ) -> Result<Handover<'py>> {
        if let Handover::Uncovered = ours {
            return theirs;
        }
        // Both as managed tensors, each checked on its way out of its handover, compared.
        let ours = ours.into_managed(py)?;
        let theirs = theirs.and_then(|theirs| {
            // A legacy capsule's read-only flag is dlpx's assumption, not the producer's word.
            let legacy = matches!(&theirs, Handover::Capsule(c) if crate::capsule::is_legacy(py, c.as_ptr()));
            Ok((theirs.into_managed(py)?, legacy))
        });
        let (theirs, legacy) = match theirs {
            Ok(theirs) => theirs,
            Err(err) => {
                // SAFETY: ours, unused: its deleter runs once, here.
                unsafe { crate::tensor::delete_managed(ours) };
                // The producer refuses what the read reads: a difference too. Its refusal stays
                // the answer (its exception set aside while the difference is said), unless the
                // difference is an error of its own (`DLPX_DIRECT_STRICT`).
                let refusal = match err.is_python_pending() {
                    true => crate::cpython::pending_text(py),
                    false => err.message(),
                };
                let first = refusal.lines().next().unwrap_or_default();
                let said = {
                    let _aside = crate::cpython::ExceptionGuard::save_with_gil(py);
                    self.verdict(py, Some(format!("it refuses what the direct read reads ({first})")))
                };
                return match said {
                    Err(strict) if !strict.is_python_pending() => {
                        // SAFETY: the token proves the GIL is held; the refusal gives way.
                        unsafe { (py.PyErr_Clear)() };
                        Err(strict)
                    }
                    _ => Err(err),
                };
            }
        };
        // SAFETY: two live managed tensors of major 1, checked on their way out.
        let difference = unsafe { difference(ours.as_ref(), theirs.as_ref(), legacy) };
        let agree = difference.is_none();
        if agree {
            self.served(py);
        }
        if let Err(err) = self.verdict(py, difference) {
            // SAFETY: both ours, unused: each deleter runs once, here.
            unsafe { [ours, theirs].into_iter().for_each(|m| crate::tensor::delete_managed(m)) };
            return Err(err);
        }
        // Agreed, the read is the answer (it knows what a legacy capsule cannot say: whether the
        // array is writable), as it is for every later object.
        let (answer, unused) = if agree { (ours, theirs) } else { (theirs, ours) };
        // SAFETY: both are ours; the unused one is deleted once, here, the answer handed on.
        unsafe {
            crate::tensor::delete_managed(unused);
            Ok(Handover::managed(answer))
        }
    }
}

/// How the direct read's managed tensor `a` differs from `b`, the producer's export (its first
/// difference, `a`'s against `b`'s); None where they describe the same memory the same way: the
/// first-use check. Where `b` came from a legacy capsule, its read-only flag is an assumption (a
/// legacy capsule cannot say), not a disagreement: numpy before 2.1 answers with one.
///
/// # Safety
/// Both are live, valid major-1 managed tensors.
unsafe fn difference(a: &DLManagedTensorVersioned, b: &DLManagedTensorVersioned, b_legacy: bool) -> Option<String> {
    let read_only = |m: &DLManagedTensorVersioned| m.flags & DLPACK_FLAG_BITMASK_READ_ONLY != 0;
    if !b_legacy && read_only(a) != read_only(b) {
        return Some(format!("read-only {} against {}", read_only(a), read_only(b)));
    }
    // SAFETY: per the contract, their shapes and strides are `ndim` long.
    unsafe { description_difference(&a.dl_tensor, &b.dl_tensor) }
}

/// The first difference between two producers' `DLTensor`s, `a`'s against `b`'s: data, offset,
/// device, dtype and ndim equal, shape and strides equal by value (each export may own its
/// arrays; NULL strides match only NULL); None where there is none. An `ndim` outside dlpx's
/// limit never matches.
///
/// # Safety
/// Each non-NULL `shape` and `strides` holds `ndim` values.
unsafe fn description_difference(a: &DLTensor, b: &DLTensor) -> Option<String> {
    let differ = |name: &str, ours: String, theirs: String| Some(format!("{name} {ours} against {theirs}"));
    if a.data != b.data {
        return differ("data", format!("{:p}", a.data), format!("{:p}", b.data));
    }
    if a.byte_offset != b.byte_offset {
        return differ("byte_offset", a.byte_offset.to_string(), b.byte_offset.to_string());
    }
    if a.device != b.device {
        return differ("device", crate::device_names::name(a.device), crate::device_names::name(b.device));
    }
    if a.dtype != b.dtype {
        return differ("dtype", crate::dtype::dtype_name(a.dtype), crate::dtype::dtype_name(b.dtype));
    }
    if a.ndim != b.ndim {
        return differ("ndim", a.ndim.to_string(), b.ndim.to_string());
    }
    if !(0..=crate::layout::MAX_NDIM as i32).contains(&a.ndim) {
        return Some(format!("ndim {} is out of range", a.ndim));
    }
    let n = a.ndim as usize;
    // SAFETY: the caller's contract; `n` is within dlpx's limit.
    let values = |p: *const i64| (!p.is_null()).then(|| unsafe { std::slice::from_raw_parts(p, n) });
    let spelled = |p: *const i64| values(p).map_or("NULL".to_string(), |v| format!("{v:?}"));
    if n > 0 && values(a.shape) != values(b.shape) {
        return differ("shape", spelled(a.shape), spelled(b.shape));
    }
    if n > 0 && values(a.strides) != values(b.strides) {
        return differ("strides", spelled(a.strides), spelled(b.strides));
    }
    None
}

/// A fast read found reading otherwise than the producer's own answer (`fact`): an error under
/// `DLPX_DIRECT_STRICT` (the read left undecided, so that every later object is checked, and
/// fails, again: a caller that swallows one error hides nothing), else the read is turned off
/// (`turn_off`) and the difference said once, a RuntimeWarning with what happens `instead`.
#[cold]
pub fn disagreement(py: Python<'_>, fact: &str, instead: &str, turn_off: impl FnOnce()) -> Result<()> {
    if std::env::var_os(STRICT_VARIABLE).is_some() {
        return Err(Error::runtime(format!("{fact} ({STRICT_VARIABLE} is set)")));
    }
    turn_off();
    crate::cpython::warn(py, "PyExc_RuntimeWarning\0", &format!("dlpx: {fact}; {instead}"))
}

/// Whether the environment variable names `row` (or `all`).
pub fn named(variable: &str, row: &str) -> bool {
    std::env::var(variable).is_ok_and(|names| names.split(',').map(str::trim).any(|n| n == row || n == "all"))
}

/// The names a switch answers to: its rows' (`switchable_rows`), and `all`.
fn known(variable: &str) -> Vec<&'static str> {
    super::switchable_rows(variable == OFF_VARIABLE).chain(["all"]).collect()
}

/// Warns, once a process (when dlpx is imported), of each switch that names what it does not
/// know: a misspelt row would otherwise be ignored without a word.
pub fn warn_of_unknown_names(py: Python<'_>) -> Result<()> {
    static CHECKED: AtomicBool = AtomicBool::new(false);
    if CHECKED.swap(true, Ordering::Relaxed) {
        return Ok(());
    }
    for variable in [OFF_VARIABLE, VERIFY_VARIABLE] {
        let Ok(names) = std::env::var(variable) else { continue };
        let known = known(variable);
        let unknown: Vec<String> = names
            .split(',')
            .map(str::trim)
            .filter(|n| !n.is_empty() && !known.contains(n))
            .map(|n| format!("'{n}'"))
            .collect();
        if !unknown.is_empty() {
            crate::cpython::warn(
                py,
                "PyExc_UserWarning\0",
                &format!(
                    "dlpx: {variable} names {}, which it does not know (ignored); it knows {}",
                    unknown.join(", "),
                    known.join(", ")
                ),
            )?;
        }
    }
    Ok(())
}

/// Whether `version` is one of `tested`: equal, or the same release followed by more parts
/// (`2.4` covers `2.4.6` and `2.4rc1`, not `2.40`).
fn tested(tested: &[&str], version: &str) -> bool {
    tested.iter().any(|t| version.strip_prefix(t).is_some_and(|rest| !rest.starts_with(|c: char| c.is_ascii_digit())))
}

#[cfg(test)]
mod tests {
    use super::{description_difference, tested};
    use crate::abi::*;

    const F32: DLDataType = DLDataType { code: 2, bits: 32, lanes: 1 };

    #[test]
    fn two_descriptions_are_the_same_by_value_not_by_address_and_the_first_difference_is_named() {
        let (mut shape_a, mut shape_b, mut strides_a, mut strides_b) = ([2i64, 3], [2i64, 3], [3i64, 1], [3i64, 1]);
        let mut data = [0f32; 6];
        let mut x = DLTensor {
            data: data.as_mut_ptr().cast(),
            device: DLDevice::CPU,
            ndim: 2,
            dtype: F32,
            shape: std::ptr::null_mut(),
            strides: std::ptr::null_mut(),
            byte_offset: 0,
        };
        let (mut y, mut z) = (x, x);
        (x.shape, x.strides) = (shape_a.as_mut_ptr(), strides_a.as_mut_ptr());
        (y.shape, y.strides) = (shape_b.as_mut_ptr(), strides_b.as_mut_ptr());
        z.shape = shape_b.as_mut_ptr();
        // SAFETY: every non-NULL shape and strides above holds `ndim` values.
        unsafe {
            assert_eq!(description_difference(&x, &y), None);
            z.strides = std::ptr::null_mut();
            assert_eq!(
                description_difference(&x, &z).unwrap(),
                "strides [3, 1] against NULL",
                "NULL matches only NULL"
            );
            let mut w = x;
            w.byte_offset = 4;
            assert_eq!(description_difference(&x, &w).unwrap(), "byte_offset 0 against 4");
            w = x;
            w.ndim = -1;
            assert!(description_difference(&w, &w).is_some(), "an ndim out of range never matches");
            let mut other_strides = [4i64, 1];
            y.strides = other_strides.as_mut_ptr();
            assert_eq!(description_difference(&x, &y).unwrap(), "strides [3, 1] against [4, 1]");
            w = x;
            w.dtype.bits = 64;
            assert_eq!(description_difference(&x, &w).unwrap(), "dtype float32 against float64");
        }
    }

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
