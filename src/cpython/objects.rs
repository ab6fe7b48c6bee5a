//! Small generic helpers over the CPython API: tuples of integers, type names for messages,
//! the METH_FASTCALL convention and method calls by vectorcall.

use std::ffi::{c_int, c_void, CStr};

use once_cell::sync::OnceCell;

use super::{lookup, py, GilCell, Owned, PyObject, Python};
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

/// `PyObject *PyObject_VectorcallMethod(PyObject *name, PyObject *const *args, size_t nargsf,
/// PyObject *kwnames)`: `args[0]` is the object, `nargsf` counts it.
pub type VectorcallMethod =
    unsafe extern "C" fn(*mut PyObject, *const *mut PyObject, usize, *mut PyObject) -> *mut PyObject;

/// `PyObject_VectorcallMethod` where the running CPython exports it (3.9 and later do; the
/// stable ABI lists it from 3.12), resolved apart from the `python_api!` table, whose every
/// symbol must exist for it to load. Callers keep a path without it.
pub fn vectorcall_method() -> Option<VectorcallMethod> {
    static METHOD: OnceCell<Option<VectorcallMethod>> = OnceCell::new();
    *METHOD.get_or_init(|| {
        let address = lookup("PyObject_VectorcallMethod\0").ok()?;
        // SAFETY: the symbol has had this C signature since it appeared (3.9).
        Some(unsafe { std::mem::transmute::<*mut c_void, VectorcallMethod>(address) })
    })
}

/// `text` as an interned str, made on the first call with `cell` and kept for the process.
pub fn interned(py: &Python, cell: &GilCell<usize>, text: &CStr) -> Result<*mut PyObject> {
    cell.get_or_try_init(|| {
        // SAFETY: GIL held; the new reference is leaked into the cell.
        Owned::new(unsafe { (py.PyUnicode_InternFromString)(text.as_ptr()) }).map(|name| name.into_ptr() as usize)
    })
    .map(|name| name as *mut PyObject)
}

/// `getattr(object, name)`, or None with the failure cleared: for optional lookups, which
/// must not leave an exception set for the next call to run into.
pub fn attribute(py: &Python, object: *mut PyObject, name: &CStr) -> Option<Owned> {
    // SAFETY: GIL held; `object` is live.
    optional(py, unsafe { (py.PyObject_GetAttrString)(object, name.as_ptr()) })
}

/// [`attribute`] for an interned `name` (a hot path's lookup: no str is made).
pub fn interned_attribute(py: &Python, object: *mut PyObject, name: *mut PyObject) -> Option<Owned> {
    // SAFETY: GIL held; `object` and `name` are live.
    optional(py, unsafe { (py.PyObject_GetAttr)(object, name) })
}

/// A new reference, or None with the exception that NULL left cleared.
fn optional(py: &Python, value: *mut PyObject) -> Option<Owned> {
    if value.is_null() {
        // SAFETY: GIL held.
        unsafe { (py.PyErr_Clear)() };
        return None;
    }
    Some(Owned(value))
}

/// What [`imported_module`] remembers of one module name: the name, interned once, and the
/// size `sys.modules` had when the module was last missing there.
pub struct ModuleWatch {
    name: GilCell<usize>,
    size_at_miss: std::cell::Cell<isize>,
}

// SAFETY: only touched with the GIL held, which serialises every access.
unsafe impl Sync for ModuleWatch {}

impl ModuleWatch {
    pub const fn new() -> Self {
        ModuleWatch { name: GilCell::new(), size_at_miss: std::cell::Cell::new(-1) }
    }
}

impl Default for ModuleWatch {
    fn default() -> Self {
        Self::new()
    }
}

/// The module `name` when it has been imported, else None. dlpx never imports the libraries it
/// reads directly, so it asks on every call until one is imported: while `sys.modules` keeps
/// the size it had at the last miss the answer is taken to be the same (two loads); otherwise
/// `PyImport_GetModule` looks (it also waits for a module another thread is still
/// initialising). A module set to None in `sys.modules` is returned as it is. Failures are
/// cleared.
pub fn imported_module(py: &Python, watch: &ModuleWatch, name: &CStr) -> Option<Owned> {
    // SAFETY: GIL held; the interpreter's module dict is borrowed, and never NULL once Python
    // code runs.
    let size = unsafe { (py.PyDict_Size)((py.PyImport_GetModuleDict)()) };
    if size == watch.size_at_miss.get() {
        return None;
    }
    let module = match interned(py, &watch.name, name) {
        // SAFETY: GIL held; `name` is a live str.
        Ok(name) => unsafe { (py.PyImport_GetModule)(name) },
        Err(_) => std::ptr::null_mut(),
    };
    if module.is_null() {
        // SAFETY: GIL held; a miss sets no error, a failure one that is dropped here.
        unsafe { (py.PyErr_Clear)() };
        watch.size_at_miss.set(size);
        return None;
    }
    Some(Owned(module))
}
