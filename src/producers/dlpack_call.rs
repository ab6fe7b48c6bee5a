//! Calling a producer's `__dlpack__(max_version=(1, 3))` for the cost of the call itself.
//!
//! The name, the version tuple and the keyword names are built once and interned, so a call
//! makes no string and no dict. Where the running CPython exports `PyObject_VectorcallMethod`
//! (3.9 and later export it; the stable ABI lists it from 3.12) the method is called without
//! a bound-method object either; an interpreter without it gets `getattr` + `PyObject_Call`
//! with a shared keyword dict, the path every CPython has.

use std::ptr;

use pyo3_ffi::PyObject;

use crate::abi::{DLPACK_MAJOR_VERSION, DLPACK_MINOR_VERSION};
use crate::cpython::{int_tuple, type_name, vectorcall_method, GilCell, Owned, Python};
use crate::error::{Error, ErrorKind, Result};

/// The call's constant parts, alive for the process: `"__dlpack__"` (interned), `(1, 3)`,
/// `("max_version",)`, `()` and `{"max_version": (1, 3)}`. CPython never mutates a call's
/// arguments, so every call may share them.
#[derive(Clone, Copy)]
struct Parts {
    name: usize,
    version: usize,
    kwnames: usize,
    empty: usize,
    kwargs: usize,
}

fn parts(py: Python<'_>) -> Result<Parts> {
    static PARTS: GilCell<Parts> = GilCell::new();
    PARTS.get_or_try_init(py, || {
        // SAFETY: GIL held; each new reference is owned until leaked into the cell.
        unsafe {
            let name = Owned::new(py, (py.PyUnicode_InternFromString)(c"__dlpack__".as_ptr()))?;
            let key = Owned::new(py, (py.PyUnicode_InternFromString)(c"max_version".as_ptr()))?;
            let version = Owned::new(py, int_tuple(py, &[DLPACK_MAJOR_VERSION as i64, DLPACK_MINOR_VERSION as i64])?)?;
            let kwnames = Owned::new(py, (py.PyTuple_New)(1))?;
            (py.Py_IncRef)(key.as_ptr());
            (py.PyTuple_SetItem)(kwnames.as_ptr(), 0, key.as_ptr());
            let empty = Owned::new(py, (py.PyTuple_New)(0))?;
            let kwargs = Owned::new(py, (py.PyDict_New)())?;
            if (py.PyDict_SetItem)(kwargs.as_ptr(), key.as_ptr(), version.as_ptr()) != 0 {
                return Err(Error::python_pending());
            }
            Ok(Parts {
                name: name.into_ptr() as usize,
                version: version.into_ptr() as usize,
                kwnames: kwnames.into_ptr() as usize,
                empty: empty.into_ptr() as usize,
                kwargs: kwargs.into_ptr() as usize,
            })
        }
    })
}

/// `()`, for calls that build their own keywords.
pub fn empty_arguments(py: Python<'_>) -> Result<*mut PyObject> {
    Ok(parts(py)?.empty as *mut PyObject)
}

/// `object.__dlpack__(max_version=(1, 3))`, or `object.__dlpack__()` when the producer predates
/// `max_version` (a TypeError). A TypeError naming the object's type when it has no `__dlpack__`.
pub fn call<'py>(py: Python<'py>, object: *mut PyObject) -> Result<Owned<'py>> {
    let p = parts(py)?;
    let (name, version) = (p.name as *mut PyObject, p.version as *mut PyObject);
    // SAFETY: GIL held; `object` is live; the parts live for the process; a NULL result leaves
    // the producer's exception pending.
    let result = unsafe {
        match vectorcall_method() {
            Some(call) => {
                let args = [object, version];
                let result = call(name, args.as_ptr(), 1, p.kwnames as *mut PyObject);
                if result.is_null() && crate::cpython::pending_is(py, ErrorKind::TypeError) {
                    (py.PyErr_Clear)();
                    call(name, args.as_ptr(), 1, ptr::null_mut())
                } else {
                    result
                }
            }
            None => {
                let method = (py.PyObject_GetAttr)(object, name);
                if method.is_null() {
                    ptr::null_mut()
                } else {
                    let method = Owned::new(py, method)?;
                    let empty = p.empty as *mut PyObject;
                    let result = (py.PyObject_Call)(method.as_ptr(), empty, p.kwargs as *mut PyObject);
                    if result.is_null() && crate::cpython::pending_is(py, ErrorKind::TypeError) {
                        (py.PyErr_Clear)();
                        (py.PyObject_Call)(method.as_ptr(), empty, ptr::null_mut())
                    } else {
                        result
                    }
                }
            }
        }
    };
    if result.is_null() {
        return Err(failure(py, object, name));
    }
    Owned::new(py, result)
}

/// The producer's own exception, unless the object has no `__dlpack__` at all.
#[cold]
fn failure(py: Python<'_>, object: *mut PyObject, name: *mut PyObject) -> Error {
    // SAFETY: GIL held; the pending exception is set aside while the attribute is looked up
    // and put back untouched when the method exists.
    unsafe {
        let mut saved = [ptr::null_mut(); 3];
        (py.PyErr_Fetch)(&mut saved[0], &mut saved[1], &mut saved[2]);
        let method = (py.PyObject_GetAttr)(object, name);
        if method.is_null() {
            (py.PyErr_Clear)();
            for object in saved {
                py.decref(object);
            }
            return Error::type_error(no_dlpack(py, object));
        }
        py.decref(method);
        (py.PyErr_Restore)(saved[0], saved[1], saved[2]);
    }
    Error::python_pending()
}

/// "T does not support DLPack (…)": an object with no `__dlpack__` and no table dlpx reads —
/// none published, or one whose chain holds no major dlpx reads (a producer that moved on to a
/// new major), said so.
#[cold]
pub(super) fn no_dlpack(py: Python<'_>, object: *mut PyObject) -> String {
    let published = crate::producers::published_head(py, crate::cpython::type_of(py, object));
    // SAFETY: the producer promises a readable chain that lives for the process.
    let table = match published.map(|head| head.map(|(head, _)| unsafe { crate::chain::select_supported(head) })) {
        Ok(Some(Err(why))) => format!("its exchange table is not one dlpx reads: {}", why.fact()),
        _ => "no exchange table".to_string(),
    };
    format!("{} does not support DLPack (no __dlpack__, and {table})", type_name(py, object))
}
