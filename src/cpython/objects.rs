//! Small generic helpers over the CPython API: tuples of integers, type names for messages,
//! and the METH_FASTCALL convention.

use std::ffi::{c_int, CStr};

use super::{py, Owned, PyObject, Python};
use crate::error::Result;

/// METH_FASTCALL: in the limited API from 3.10, with the same value and convention since 3.7.
pub const METH_FASTCALL: c_int = 0x0080;

/// A C structure CPython keeps a pointer to for the life of the process (a type spec, its slots,
/// method tables, a module definition), as a `static`: a leaked heap copy would have no owner
/// CPython keeps pointing at, which valgrind rightly reports as lost. CPython writes into a
/// module definition while initialising it, hence the cell.
#[repr(transparent)]
pub struct CStatic<T>(std::cell::UnsafeCell<T>);

// SAFETY: CPython reads (and, for a module definition, initialises) these with the GIL held.
unsafe impl<T> Sync for CStatic<T> {}

impl<T> CStatic<T> {
    pub const fn new(value: T) -> Self {
        CStatic(std::cell::UnsafeCell::new(value))
    }

    pub const fn get(&self) -> *mut T {
        self.0.get()
    }
}

/// A METH_FASTCALL | METH_KEYWORDS function, stored where CPython reads it back by its flags.
pub type FastCallKeywords =
    unsafe extern "C" fn(*mut PyObject, *const *mut PyObject, pyo3_ffi::Py_ssize_t, *mut PyObject) -> *mut PyObject;

/// # Safety
/// The method's flags must say METH_FASTCALL | METH_KEYWORDS, so CPython calls it as such.
pub const unsafe fn fastcall_as_cfunction(f: FastCallKeywords) -> pyo3_ffi::PyCFunction {
    // SAFETY: function pointers of the C ABI have one size; CPython casts back by the flags.
    unsafe { std::mem::transmute::<FastCallKeywords, pyo3_ffi::PyCFunction>(f) }
}

/// The qualified type name of `object` for messages (`torch.Tensor`, `int`).
pub fn type_name(object: *mut PyObject) -> String {
    if object.is_null() {
        return "NULL".to_string();
    }
    let py = py();
    // SAFETY: GIL held; `object` is live; `__qualname__`/`__module__` reads do not keep references.
    unsafe {
        let ty = (*object).ob_type.cast::<PyObject>();
        let read = |name: &CStr| -> Option<String> {
            let attr = Owned::new((py.PyObject_GetAttrString)(ty, name.as_ptr())).ok()?;
            py.str_value(attr.as_ptr(), "type name").ok()
        };
        let qualname = read(c"__qualname__").unwrap_or_else(|| "?".to_string());
        let module = read(c"__module__").filter(|m| m != "builtins");
        (py.PyErr_Clear)();
        match module {
            Some(m) => format!("{m}.{qualname}"),
            None => qualname,
        }
    }
}

/// A new tuple of Python integers.
pub fn int_tuple(py: &Python, values: &[i64]) -> Result<*mut PyObject> {
    // SAFETY: GIL held; PyTuple_SetItem steals each new integer.
    unsafe {
        let tuple = Owned::new((py.PyTuple_New)(values.len() as _))?;
        for (i, &v) in values.iter().enumerate() {
            let item = py.check((py.PyLong_FromLongLong)(v))?;
            (py.PyTuple_SetItem)(tuple.as_ptr(), i as _, item);
        }
        Ok(tuple.into_ptr())
    }
}
