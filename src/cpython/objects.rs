//! Small generic helpers over the CPython API: tuples of integers, type names for messages,
//! the METH_FASTCALL convention and method calls by vectorcall.

use std::ffi::{c_int, c_void, CStr};

use once_cell::sync::OnceCell;

use super::{lookup, GilCell, Owned, PyObject, PyTypeObject, Python};
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

/// The type of a live `object`. (Every read of an object's header goes through here, at the
/// offset of the running interpreter's object layout.)
#[inline(always)]
pub fn type_of(_py: Python<'_>, object: *mut PyObject) -> *mut PyTypeObject {
    // SAFETY: the token proves the GIL is held, and `object` is live by the module's contract.
    unsafe { type_of_unchecked(object) }
}

/// Whether `object` is a type (of any metaclass: Py_TPFLAGS_TYPE_SUBCLASS).
pub fn is_type(py: Python<'_>, object: *mut PyObject) -> bool {
    has_type_flag(py, object, 1 << 31)
}

/// Py_TPFLAGS_UNICODE_SUBCLASS: the type is str or a subclass.
pub(super) const STR_FLAG: std::ffi::c_ulong = 1 << 28;

/// Whether `object` is a str or an instance of a subclass.
pub fn is_str(py: Python<'_>, object: *mut PyObject) -> bool {
    has_type_flag(py, object, STR_FLAG)
}

/// Whether `object` is a tuple or an instance of a subclass (Py_TPFLAGS_TUPLE_SUBCLASS).
pub fn is_tuple(py: Python<'_>, object: *mut PyObject) -> bool {
    has_type_flag(py, object, 1 << 26)
}

fn has_type_flag(py: Python<'_>, object: *mut PyObject, flag: std::ffi::c_ulong) -> bool {
    // SAFETY: the token proves the GIL is held; a live object has a live type.
    unsafe { (py.PyType_GetFlags)(type_of(py, object)) & flag != 0 }
}

/// `repr(object)` for a message, cut to 80 characters; the type's name where `__repr__` fails.
pub fn shown(py: Python<'_>, object: *mut PyObject) -> String {
    // SAFETY: GIL held; `object` is live; the new reference is released by `Owned`.
    let text = Owned::new(py, unsafe { (py.PyObject_Repr)(object) }).and_then(|r| py.str_value(r.as_ptr(), "repr"));
    match text {
        Ok(text) if text.chars().count() > 80 => format!("{}...", text.chars().take(77).collect::<String>()),
        Ok(text) => text,
        Err(_) => {
            // SAFETY: GIL held; the failed repr left an exception nobody else reads.
            unsafe { (py.PyErr_Clear)() };
            format!("a {}", type_name(py, object))
        }
    }
}

/// [`type_of`] for a caller that holds the GIL without a token at hand (a hot C entry point).
///
/// # Safety
/// The GIL is held; `object` is live.
#[inline(always)]
pub unsafe fn type_of_unchecked(object: *mut PyObject) -> *mut PyTypeObject {
    // SAFETY: per the contract.
    unsafe { super::layout::type_at(object) }
}

/// The qualified type name of `object` for messages (`torch.Tensor`, `int`).
pub fn type_name(py: Python<'_>, object: *mut PyObject) -> String {
    if object.is_null() {
        return "NULL".to_string();
    }
    name_of_type(py, type_of(py, object).cast())
}

/// The qualified name of the type `ty` for messages (`torch.Tensor`, `memoryview`).
pub fn name_of_type(py: Python<'_>, ty: *mut PyObject) -> String {
    // SAFETY: GIL held; `ty` is live; `__qualname__`/`__module__` reads do not keep references.
    unsafe {
        let read = |name: &CStr| -> Option<String> {
            let attr = Owned::new(py, (py.PyObject_GetAttrString)(ty, name.as_ptr())).ok()?;
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
pub fn int_tuple(py: Python<'_>, values: &[i64]) -> Result<*mut PyObject> {
    // SAFETY: GIL held; PyTuple_SetItem steals each new integer.
    unsafe {
        let tuple = Owned::new(py, (py.PyTuple_New)(values.len() as _))?;
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

/// A str interned on first use and kept for the process: a hot path's attribute or method name
/// (no str is made per call).
pub struct Interned {
    text: &'static CStr,
    cell: GilCell<usize>,
}

impl Interned {
    pub const fn new(text: &'static CStr) -> Interned {
        Interned { text, cell: GilCell::new() }
    }

    #[inline]
    pub fn get(&self, py: Python<'_>) -> Result<*mut PyObject> {
        interned(py, &self.cell, self.text)
    }
}

/// `text` as an interned str, made on the first call with `cell` and kept for the process.
#[inline]
pub fn interned(py: Python<'_>, cell: &GilCell<usize>, text: &CStr) -> Result<*mut PyObject> {
    cell.get_or_try_init(py, || {
        // SAFETY: GIL held; the new reference is leaked into the cell.
        Owned::new(py, unsafe { (py.PyUnicode_InternFromString)(text.as_ptr()) }).map(|name| name.into_ptr() as usize)
    })
    .map(|name| name as *mut PyObject)
}

/// `getattr(object, name)`, or None with the failure cleared: for optional lookups, which
/// must not leave an exception set for the next call to run into.
pub fn attribute<'py>(py: Python<'py>, object: *mut PyObject, name: &CStr) -> Option<Owned<'py>> {
    // SAFETY: GIL held; `object` is live.
    optional(py, unsafe { (py.PyObject_GetAttrString)(object, name.as_ptr()) })
}

/// [`attribute`] for an interned `name` (a hot path's lookup: no str is made).
pub fn interned_attribute<'py>(py: Python<'py>, object: *mut PyObject, name: *mut PyObject) -> Option<Owned<'py>> {
    // SAFETY: GIL held; `object` and `name` are live.
    optional(py, unsafe { (py.PyObject_GetAttr)(object, name) })
}

/// A new reference, or None with the exception that NULL left cleared.
fn optional(py: Python<'_>, value: *mut PyObject) -> Option<Owned<'_>> {
    if value.is_null() {
        // SAFETY: GIL held.
        unsafe { (py.PyErr_Clear)() };
        return None;
    }
    Owned::new(py, value).ok()
}

/// The module `name` when it has been imported, else None (dlpx never imports the libraries it
/// reads directly). `PyImport_GetModule` also waits for a module another thread is still
/// initialising; a module set to None in `sys.modules` is returned as it is. Failures are
/// cleared. (Asked when a row claims a type, once per type: never on a hot path.)
pub fn imported_module<'py>(py: Python<'py>, name: &CStr) -> Option<Owned<'py>> {
    // SAFETY: GIL held; the new str is released at once; a miss sets no error, a failure one
    // that is dropped.
    unsafe {
        let name = Owned::new(py, (py.PyUnicode_FromStringAndSize)(name.as_ptr(), name.to_bytes().len() as _));
        let module = match name {
            Ok(name) => (py.PyImport_GetModule)(name.as_ptr()),
            Err(_) => std::ptr::null_mut(),
        };
        optional(py, module)
    }
}

/// Makes `object` (a process-lifetime object dlpx made: its type) immortal on a free-threaded
/// interpreter, where every thread's `Py_DECREF` of a mortal object another thread owns is an
/// atomic add on one shared line: each `dlpx.Tensor` freed on another thread decremented the
/// type's count, and with 16 threads that line, not dlpx, set the pace (2.6 µs a call). CPython
/// makes its own types immortal; `_Py_SetImmortal` is exported by 3.14t and 3.15t (3.15's
/// public `PyUnstable_SetImmortal` refuses an object with more than one reference). A GIL build
/// (one thread runs at a time) keeps counting.
pub fn immortalise_if_free_threaded(py: Python<'_>, object: *mut PyObject) {
    let _ = py;
    if !super::layout::free_threaded() {
        return;
    }
    if let Ok(set_immortal) = super::lookup("_Py_SetImmortal\0") {
        // SAFETY: `void _Py_SetImmortal(PyObject *)` of the running interpreter, with the thread
        // attached (the token) and a live object.
        unsafe {
            std::mem::transmute::<*mut std::ffi::c_void, unsafe extern "C" fn(*mut PyObject)>(set_immortal)(object)
        };
    }
}

type GetItemRef = unsafe extern "C" fn(*mut PyObject, *mut PyObject, *mut *mut PyObject) -> c_int;

/// The interpreter's `PyDict_GetItemRef` (3.13 on), once looked up.
static DICT_GET_ITEM_REF: OnceCell<Option<GetItemRef>> = OnceCell::new();

/// `dict[key]` as a new reference, None when absent. Where the interpreter has
/// `PyDict_GetItemRef` (3.13 on, every free-threaded one) the reference is taken by the lookup
/// itself: a borrowed item of a dict another thread changes may be freed before it is counted
/// (docs/design.md, "Free-threaded CPython": borrowed references come only from tuples). Before
/// 3.13 the GIL is held across the borrowed lookup and the count.
pub fn dict_item<'py>(py: Python<'py>, dict: *mut PyObject, key: *mut PyObject) -> Result<Option<Owned<'py>>> {
    let get_item_ref = *DICT_GET_ITEM_REF.get_or_init(|| {
        // SAFETY: `int PyDict_GetItemRef(PyObject *, PyObject *, PyObject **)` of the running
        // interpreter, where it has one.
        lookup("PyDict_GetItemRef\0").ok().map(|f| unsafe { std::mem::transmute::<*mut c_void, GetItemRef>(f) })
    });
    let Some(get_item_ref) = get_item_ref else {
        // SAFETY: GIL held (no free-threaded interpreter lacks PyDict_GetItemRef); a live dict
        // and key; the result is borrowed (NULL when absent, with an exception only when the
        // lookup failed) and counted at once.
        let value = unsafe { (py.PyDict_GetItemWithError)(dict, key) };
        return match std::ptr::NonNull::new(value) {
            Some(v) => Ok(Some(Owned::from_borrowed(py, v))),
            // SAFETY: GIL held.
            None if unsafe { (py.PyErr_Occurred)() }.is_null() => Ok(None),
            None => Err(crate::error::Error::python_pending()),
        };
    };
    let mut value = std::ptr::null_mut();
    // SAFETY: the thread attached (the token); a live dict and key; `value` is written with a
    // new reference when the result is 1.
    match unsafe { get_item_ref(dict, key, &mut value) } {
        1 => Owned::new(py, value).map(Some),
        0 => Ok(None),
        _ => Err(crate::error::Error::python_pending()),
    }
}
