//! Argument parsing for METH_FASTCALL | METH_KEYWORDS functions, without the variadic
//! `PyArg_ParseTupleAndKeywords` (which Rust cannot call portably through a pointer table), and
//! the arguments' values: integers, shapes, and (in `dtype`, `device`) dtypes and devices as
//! users spell them.

use std::ffi::CStr;
use std::marker::PhantomData;

use pyo3_ffi::PyObject;

use crate::cpython::{interned_attribute, is_str, shown, GilCell, Interned, Owned, Python};
use crate::error::{Error, Result};

mod device;
mod dtype;
mod ints;

pub use device::device;
pub use dtype::dtype;
pub use ints::{int_pair, int_sequence, int_value, stream_value, Ints};

/// A function's parameter names, interned once: keyword names at a call site are interned
/// strings too, so matching is a pointer comparison (string comparison stays the fallback).
pub struct Names {
    names: &'static [&'static CStr],
    /// How many leading parameters are positional-only (`def f(x, /, ...)`).
    positional_only: usize,
    interned: GilCell<&'static [usize]>,
}

impl Names {
    pub const fn new(names: &'static [&'static CStr]) -> Names {
        Names { names, positional_only: 0, interned: GilCell::new() }
    }

    pub const fn with_positional_only(names: &'static [&'static CStr], positional_only: usize) -> Names {
        Names { names, positional_only, interned: GilCell::new() }
    }

    fn position(&self, py: Python<'_>, key: *mut PyObject) -> Result<usize> {
        let interned = self.interned.get_or_try_init(py, || {
            let names: Vec<usize> = self
                .names
                .iter()
                // SAFETY: GIL held; interned strings are immortal for the interpreter's life.
                .map(|n| unsafe { (py.PyUnicode_InternFromString)(n.as_ptr()) } as usize)
                .collect();
            Ok::<_, Error>(&*Box::leak(names.into_boxed_slice()))
        })?;
        let found = match interned.iter().position(|&k| k == key as usize) {
            Some(i) => Some(i),
            None => {
                let name = py.str_value(key, "a keyword argument name")?;
                self.names.iter().position(|n| n.to_bytes() == name.as_bytes())
            }
        };
        match found {
            Some(i) if i >= self.positional_only => Ok(i),
            Some(i) => Err(Error::type_error(format!(
                "'{}' is positional-only and cannot be passed by keyword",
                self.names[i].to_string_lossy()
            ))),
            None => {
                let name = py.str_value(key, "a keyword argument name")?;
                Err(Error::type_error(format!("got an unexpected keyword argument '{name}'")))
            }
        }
    }
}

/// The arguments of a METH_FASTCALL | METH_KEYWORDS call, as CPython passes them: positional
/// values in `args[..nargs]`, keyword values after them, named by the tuple `kwnames`. (The
/// calling convention is the same on every CPython dlpx supports, and it needs no dict per call.)
#[derive(Clone, Copy)]
pub struct FastArgs<'py> {
    args: *const *mut PyObject,
    nargs: pyo3_ffi::Py_ssize_t,
    kwnames: *mut PyObject,
    call: PhantomData<Python<'py>>,
}

impl<'py> FastArgs<'py> {
    /// # Safety
    /// CPython's convention, for the call that lasts `'py`: `args` holds `nargs` + len(`kwnames`)
    /// borrowed references; `kwnames` is a tuple of str or NULL.
    #[inline(always)]
    pub unsafe fn new(args: *const *mut PyObject, nargs: pyo3_ffi::Py_ssize_t, kwnames: *mut PyObject) -> Self {
        FastArgs { args, nargs, kwnames, call: PhantomData }
    }

    /// The argument of a call with one positional argument and no keyword (`from_dlpack(x)`,
    /// the common call: nothing to parse).
    #[inline(always)]
    pub fn single(self) -> Option<*mut PyObject> {
        // SAFETY: one positional argument, by the convention.
        (self.nargs == 1 && self.kwnames.is_null()).then(|| unsafe { *self.args })
    }

    /// The positional arguments.
    #[inline(always)]
    pub fn positional(self) -> &'py [*mut PyObject] {
        match self.nargs {
            0 => &[],
            // SAFETY: `nargs` borrowed references, by the convention, live for the call.
            n => unsafe { std::slice::from_raw_parts(self.args, n as usize) },
        }
    }

    /// The keyword arguments' names (a tuple of str), or NULL when there are none.
    #[inline(always)]
    pub fn keyword_names(self) -> *mut PyObject {
        self.kwnames
    }

    /// The value of keyword argument `k` (an index into `keyword_names`).
    #[inline(always)]
    pub fn keyword_value(self, k: usize) -> *mut PyObject {
        // SAFETY: the keyword values follow the positional ones, one per name; the caller's
        // index is below len(kwnames).
        unsafe { *self.args.add(self.nargs as usize + k) }
    }

    /// A borrowed reference to the argument named `names[i]` at `[i]` (NULL when absent); the
    /// first `positional` names may be passed by position.
    pub fn parse<const N: usize>(
        self,
        py: Python<'py>,
        names: &Names,
        positional: usize,
    ) -> Result<[*mut PyObject; N]> {
        let mut out = [std::ptr::null_mut(); N];
        // SAFETY: the convention, as `new` was promised.
        unsafe { parse(py, self.args, self.nargs, self.kwnames, names, positional, &mut out)? };
        Ok(out)
    }
}

/// [`FastArgs::parse`] into `out`.
///
/// # Safety
/// `args` holds `nargs` + len(`kwnames`) borrowed references; `kwnames` is a tuple or NULL.
unsafe fn parse(
    py: Python<'_>,
    args: *const *mut PyObject,
    nargs: pyo3_ffi::Py_ssize_t,
    kwnames: *mut PyObject,
    names: &Names,
    positional: usize,
    out: &mut [*mut PyObject],
) -> Result<()> {
    let nargs = nargs as usize;
    if nargs > positional {
        return Err(Error::type_error(format!(
            "takes at most {positional} positional argument{} ({nargs} given)",
            if positional == 1 { "" } else { "s" }
        )));
    }
    for (i, slot) in out.iter_mut().enumerate().take(nargs) {
        // SAFETY: i < nargs.
        *slot = unsafe { *args.add(i) };
    }
    if kwnames.is_null() {
        return Ok(());
    }
    // SAFETY: kwnames is a tuple of str; values follow the positional arguments.
    let nkw = unsafe { (py.PyTuple_Size)(kwnames) } as usize;
    for k in 0..nkw {
        // SAFETY: k < len(kwnames); the item is borrowed.
        let key = unsafe { (py.PyTuple_GetItem)(kwnames, k as _) };
        let i = names.position(py, key)?;
        if !out[i].is_null() {
            let name = names.names[i].to_string_lossy();
            return Err(Error::type_error(format!("got multiple values for argument '{name}'")));
        }
        // SAFETY: the keyword values follow the positional ones, one per name in `kwnames`.
        out[i] = unsafe { *args.add(nargs + k) };
    }
    Ok(())
}

/// None or absent.
pub fn is_none(py: Python<'_>, object: *mut PyObject) -> bool {
    object.is_null() || object == py.none
}

/// An optional bool argument: absent/None → None, True/False → the value, anything else a TypeError.
pub fn optional_bool(py: Python<'_>, object: *mut PyObject, name: &str) -> Result<Option<bool>> {
    if is_none(py, object) {
        Ok(None)
    } else if object == py.true_ {
        Ok(Some(true))
    } else if object == py.false_ {
        Ok(Some(false))
    } else {
        Err(Error::type_error(format!("{name} must be True, False or None")))
    }
}

/// A dtype or device given by name: Some(what the name means, or a ValueError naming it and
/// listing `forms`) for a str or a subclass, read whole and in place (`uint8\0xyz` is no name);
/// None for anything else.
#[inline(always)]
fn by_name<T>(
    py: Python<'_>,
    object: *mut PyObject,
    what: &str,
    parse: impl FnOnce(&str) -> Option<T>,
    forms: fn() -> String,
) -> Option<Result<T>> {
    if !is_str(py, object) {
        return None;
    }
    Some(match py.with_str(object, what, parse) {
        Ok(Some(value)) => Ok(value),
        _ => Err(unknown_name(py, object, what, forms)),
    })
}

#[cold]
fn unknown_name(py: Python<'_>, object: *mut PyObject, what: &str, forms: fn() -> String) -> Error {
    Error::value(format!("unknown {what} {}; {}", shown(py, object), forms()))
}

/// `__module__`, asked of types.
static MODULE: Interned = Interned::new(c"__module__");

/// One peer's objects of one kind (its dtypes, its devices), read without importing the peer:
/// told from the other peers' by an attribute only they have among them (`mark`), and read by
/// `read`, which is handed the mark's value.
struct Peer<T: 'static> {
    /// The peer, for messages.
    name: &'static str,
    /// The first part of its types' `__module__`.
    package: &'static str,
    mark: &'static Interned,
    read: fn(Python<'_>, *mut PyObject, &Owned<'_>) -> Result<T>,
}

/// What the peer whose object `object` is reads it as; None when no peer's mark is on it. The
/// peer of the package `object`'s type comes from is asked first: a mark that is missing costs
/// an AttributeError made and cleared (about a microsecond), and a peer's own object then misses
/// none. (The package only orders the asking; the marks decide.)
fn read_peer<T>(py: Python<'_>, object: *mut PyObject, peers: &[Peer<T>]) -> Option<Result<T>> {
    let ty = crate::cpython::type_of(py, object).cast::<PyObject>();
    let module = attribute(py, ty, &MODULE);
    let home = |package: &str| {
        let module =
            module.as_ref().map(|module| py.with_str(module.as_ptr(), "", |m| m.split('.').next() == Some(package)));
        module.is_some_and(|home| home == Ok(true))
    };
    let first = peers.iter().position(|peer| home(peer.package));
    let order = first.into_iter().chain((0..peers.len()).filter(|&i| Some(i) != first));
    order.map(|i| &peers[i]).find_map(|peer| {
        let mark = attribute(py, object, peer.mark)?;
        Some((peer.read)(py, object, &mark))
    })
}

/// The peers' names for messages: `tvm_ffi, jax, cupy or torch`.
fn peer_names<T>(peers: &[Peer<T>]) -> String {
    let names: Vec<&str> = peers.iter().map(|peer| peer.name).collect();
    match names.split_last() {
        Some((last, [])) => last.to_string(),
        Some((last, others)) => format!("{} or {last}", others.join(", ")),
        None => String::new(),
    }
}

/// `getattr(object, name)`, or None with no exception left set; `name` interned once.
fn attribute<'py>(py: Python<'py>, object: *mut PyObject, name: &Interned) -> Option<Owned<'py>> {
    interned_attribute(py, object, name.get(py).ok()?)
}

/// `getattr(object, name)` as an integer, or None with no exception left set: a peer's object
/// read where a missing or odd attribute means "not this form".
fn int_attribute(py: Python<'_>, object: *mut PyObject, name: &Interned) -> Option<i64> {
    int_or_none(py, attribute(py, object, name)?.as_ptr())
}

/// `object` as an integer, or None with no exception left set.
pub fn int_or_none(py: Python<'_>, object: *mut PyObject) -> Option<i64> {
    let int = int_value(py, object, "").ok();
    if int.is_none() {
        // SAFETY: GIL held; a failed `__index__` may have left an exception nobody reads.
        unsafe { (py.PyErr_Clear)() };
    }
    int
}

/// `getattr(object, name)` as a str, or None with no exception left set.
fn str_attribute(py: Python<'_>, object: *mut PyObject, name: &Interned) -> Option<String> {
    let value = attribute(py, object, name)?;
    py.str_value(value.as_ptr(), "").ok()
}
