//! Integer arguments: one integer (anything with `__index__`), a pair, a sequence (a shape), as
//! every entry point reads them.

use pyo3_ffi::PyObject;

use crate::cpython::{Owned, Python};
use crate::error::{Error, Result};
use crate::layout::MAX_NDIM;

/// A stream argument: None, or an integer handle. A bool is refused, as torch's `__dlpack__`
/// refuses it: `stream=True` is a mistake, not the legacy default stream (1).
pub fn stream_value(py: Python<'_>, object: *mut PyObject, name: &str) -> Result<Option<i64>> {
    match object {
        none if crate::args::is_none(py, none) => Ok(None),
        flag if flag == py.true_ || flag == py.false_ => {
            Err(Error::type_error(format!("{name} must be an integer or None, not bool")))
        }
        handle => int_value(py, handle, name).map(Some),
    }
}

/// An integer argument (anything with `__index__`). `name` is spelled out only for an error (a
/// sequence's `shape[2]` costs nothing until then).
pub fn int_value(py: Python<'_>, object: *mut PyObject, name: impl std::fmt::Display) -> Result<i64> {
    // SAFETY: GIL held; `object` is a live borrowed reference; the index is a new reference
    // released by `Owned`.
    unsafe {
        let index;
        // An exact int (the common case) is its own index.
        let number = match crate::cpython::type_of(py, object) == py.long_type.cast() {
            true => object,
            false if (py.PyIndex_Check)(object) == 0 => {
                return Err(Error::type_error(format!("{name} must be an integer")));
            }
            false => {
                index = Owned::new(py, (py.PyNumber_Index)(object))?;
                index.as_ptr()
            }
        };
        let value = (py.PyLong_AsLongLong)(number);
        if value == -1 && !(py.PyErr_Occurred)().is_null() {
            (py.PyErr_Clear)();
            // As CPython says of an int its C type cannot hold.
            return Err(Error::new(crate::ErrorKind::OverflowError, format!("{name} does not fit in 64 bits")));
        }
        Ok(value)
    }
}

/// A pair of integers given as a tuple (read without building a Vec) or any sequence of length 2.
pub fn int_pair(py: Python<'_>, object: *mut PyObject, name: &str) -> Result<(i64, i64)> {
    // SAFETY: GIL held; PyTuple_Size fails (cleared below) on non-tuples; items are borrowed.
    unsafe {
        if (py.PyTuple_Size)(object) == 2 {
            let read = |i| {
                Some((py.PyLong_AsLongLong)((py.PyTuple_GetItem)(object, i)))
                    .filter(|&value| value != -1 || (py.PyErr_Occurred)().is_null())
            };
            // Item 1's `__index__` never runs with item 0's error pending (a handled one of its own clears it).
            if let Some(pair) = read(0).and_then(|a| Some((a, read(1)?))) {
                return Ok(pair);
            }
        }
        (py.PyErr_Clear)();
    }
    let items = int_sequence(py, object, name)?;
    match items[..] {
        [a, b] => Ok((a, b)),
        [_] => Err(Error::type_error(format!("{name} must be a pair of integers, got one integer"))),
        _ => Err(Error::type_error(format!("{name} must be a pair of integers, got {} integers", items.len()))),
    }
}

/// At most `MAX_NDIM` integers (a shape, its strides), without a heap allocation.
pub struct Ints {
    values: [i64; MAX_NDIM],
    len: usize,
}

impl std::ops::Deref for Ints {
    type Target = [i64];
    fn deref(&self) -> &[i64] {
        &self.values[..self.len]
    }
}

/// A sequence of integers (a shape), or one integer.
pub fn int_sequence(py: Python<'_>, object: *mut PyObject, name: &str) -> Result<Ints> {
    // SAFETY: GIL held; `object` is live.
    unsafe {
        let tuple = crate::cpython::type_of(py, object) == py.tuple_type.cast();
        if !tuple && (py.PyIndex_Check)(object) != 0 {
            match int_value(py, object, name) {
                Ok(value) => return Ok(Ints { values: [value; MAX_NDIM], len: 1 }),
                // An integer array's `__index__` refuses more than one element (a TypeError):
                // read as its elements (as `np.empty(np.array([2, 3]))`).
                Err(err) if err.is_python_pending() && crate::cpython::pending_is(py, crate::ErrorKind::TypeError) => {
                    let refused = crate::cpython::take_pending(py);
                    let elements = array_elements(py, object, name).ok_or(refused)??;
                    return items(py, elements.as_ptr(), false, name);
                }
                Err(err) => return Err(err),
            }
        }
        if !tuple && (py.PySequence_Check)(object) == 0 {
            return Err(Error::type_error(format!("{name} must be a sequence of integers")));
        }
        items(py, object, tuple, name)
    }
}

/// The elements of an array (numpy, torch, jax: what has a `shape` and a `tolist`) as a list,
/// where it is one-dimensional and no longer than a shape may be; None for what is no array (its
/// `__index__` error stands).
fn array_elements<'py>(py: Python<'py>, object: *mut PyObject, name: &str) -> Option<Result<Owned<'py>>> {
    let shape = crate::cpython::attribute(py, object, c"shape")?;
    let tolist = crate::cpython::attribute(py, object, c"tolist")?;
    Some(match int_sequence(py, shape.as_ptr(), "shape").ok()?[..] {
        [n] if (0..=MAX_NDIM as i64).contains(&n) => {
            // SAFETY: GIL held; a live callable; the result is a new reference.
            Owned::new(py, unsafe { (py.PyObject_CallObject)(tolist.as_ptr(), std::ptr::null_mut()) })
        }
        ref dims => {
            Err(Error::type_error(format!("{name} must be a sequence of integers, got an array of shape {dims:?}")))
        }
    })
}

/// The items of a sequence (an exact tuple: `tuple`), each an integer.
///
/// # Safety
/// GIL held; `object` is live and a sequence.
unsafe fn items(py: Python<'_>, object: *mut PyObject, tuple: bool, name: &str) -> Result<Ints> {
    let mut out = Ints { values: [0; MAX_NDIM], len: 0 };
    // SAFETY: per the contract; items are borrowed from a tuple, or new references released by
    // `Owned`.
    unsafe {
        let n = if tuple { (py.PyTuple_Size)(object) } else { (py.PySequence_Size)(object) };
        if n < 0 {
            (py.PyErr_Clear)();
            return Err(Error::type_error(format!("{name} must be a sequence of integers")));
        }
        // `n` comes from `__len__`, which may lie: no argument dlpx takes has more items than a
        // shape has dimensions, so a longer one is refused before any item is read.
        if n as usize > MAX_NDIM {
            return Err(Error::value(format!(
                "{name} has {n} items, more than any argument takes (at most ndim = {MAX_NDIM})"
            )));
        }
        for i in 0..n {
            out.values[i as usize] = match tuple {
                // An exact tuple's items are borrowed: nothing to take or release.
                true => int_value(py, (py.PyTuple_GetItem)(object, i), format_args!("{name}[{i}]"))?,
                false => {
                    let item = Owned::new(py, (py.PySequence_GetItem)(object, i))?;
                    int_value(py, item.as_ptr(), format_args!("{name}[{i}]"))?
                }
            };
        }
        out.len = n as usize;
        Ok(out)
    }
}
