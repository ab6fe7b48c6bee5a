//! CPython, resolved at run time.
//!
//! libdlpx never links libpython (a C program without Python must load it), so every CPython
//! function it calls is looked up once with `dlsym(RTLD_DEFAULT, …)` into one table of function
//! pointers. Only stable-ABI functions are used, so one build serves CPython 3.9 and later.
//! `pyo3_ffi` supplies the struct types; none of its `extern` functions or inline helpers that
//! call them are used.
//!
//! This is a leaf: it depends on `error` alone, and everything that speaks Python builds on it.
//! The table is reached only through a [`Python`] token (docs/design.md, "The GIL is a type").
//!
//! Functions here take `PyObject*` as CPython's own API does: borrowed references, valid while
//! the token's GIL is held — the contract of the whole module, so they are not each `unsafe`.
#![allow(clippy::not_unsafe_ptr_arg_deref)]

pub mod buffer;
mod cells;
mod critical;
mod freelist;
mod gil;
pub mod layout;
mod module_def;
mod objects;
mod owned;
mod raise;
mod token;

pub use cells::{racing_copy, FreeThreadedLock, GilCell, GilVar, SeqLock};
pub use critical::with_object_locked;
pub use freelist::Freelist;
pub use gil::{released, without_gil, ExceptionGuard};
pub use module_def::{create_module, RuntimeDef};
pub use objects::{
    attribute, dict_item, fastcall_as_cfunction, immortalise_if_free_threaded, imported_module, int_tuple, interned,
    interned_attribute, is_str, is_tuple, is_type, name_of_type, shown, type_name, type_of, type_of_unchecked,
    vectorcall_method, CStatic, FastCallKeywords, Interned, VectorcallMethod, METH_FASTCALL,
};
pub use owned::Owned;
pub use raise::{attribute_error, pending_is, pending_kind, pending_text, reword_pending, take_pending, warn, Raise};
pub use token::Python;

use std::ffi::{c_char, c_int, c_long, c_longlong, c_ulonglong, c_void, CString};

use once_cell::sync::OnceCell;
pub use pyo3_ffi::{PyMethodDef, PyModuleDef, PyObject, PyTypeObject, PyType_Slot, PyType_Spec, Py_ssize_t};

use crate::error::{Error, ErrorKind, Result};

pub type PyCapsuleDestructor = unsafe extern "C" fn(*mut PyObject);

macro_rules! python_api {
    (
        functions { $($fname:ident : fn($($arg:ty),*) -> $ret:ty;)* }
        data { $($dname:ident : $dsym:literal;)* }
    ) => {
        /// Every CPython function and object dlpx uses, resolved from the running interpreter;
        /// reached through a [`Python`] token.
        #[allow(non_snake_case)]
        pub struct Api {
            $(pub $fname: unsafe extern "C" fn($($arg),*) -> $ret,)*
            $(pub $dname: *mut PyObject,)*
            /// `PyExc_<name>` for each of `ErrorKind::exceptions()`, in that order.
            exceptions: [*mut PyObject; crate::error::EXCEPTION_COUNT],
        }

        impl Api {
            fn resolve() -> std::result::Result<Api, &'static str> {
                Ok(Api {
                    $($fname: {
                        let name = concat!(stringify!($fname), "\0");
                        // SAFETY: dlsym with a NUL-terminated name; the symbol's C type is the one
                        // declared here (taken from CPython's stable ABI headers).
                        unsafe { std::mem::transmute::<*mut c_void, unsafe extern "C" fn($($arg),*) -> $ret>(lookup(name)?) }
                    },)*
                    $($dname: {
                        let name = concat!($dsym, "\0");
                        lookup(name)?.cast::<PyObject>()
                    },)*
                    exceptions: resolve_exceptions()?,
                })
            }
        }
    };
}

python_api! {
    functions {
        Py_IsInitialized: fn() -> c_int;
        Py_IncRef: fn(*mut PyObject) -> ();
        Py_DecRef: fn(*mut PyObject) -> ();
        PyGILState_Ensure: fn() -> c_int;
        PyGILState_Release: fn(c_int) -> ();
        PyErr_SetString: fn(*mut PyObject, *const c_char) -> ();
        PyErr_Occurred: fn() -> *mut PyObject;
        PyErr_ExceptionMatches: fn(*mut PyObject) -> c_int;
        PyErr_Clear: fn() -> ();
        PyObject_IsTrue: fn(*mut PyObject) -> c_int;
        PyErr_WarnEx: fn(*mut PyObject, *const c_char, Py_ssize_t) -> c_int;
        PyErr_Fetch: fn(*mut *mut PyObject, *mut *mut PyObject, *mut *mut PyObject) -> ();
        PyErr_Restore: fn(*mut PyObject, *mut PyObject, *mut PyObject) -> ();
        PyErr_NormalizeException: fn(*mut *mut PyObject, *mut *mut PyObject, *mut *mut PyObject) -> ();
        PyException_SetCause: fn(*mut PyObject, *mut PyObject) -> ();
        PyException_SetTraceback: fn(*mut PyObject, *mut PyObject) -> c_int;
        PyType_FromSpecWithBases: fn(*mut PyType_Spec, *mut PyObject) -> *mut PyObject;
        PyType_GetSlot: fn(*mut PyTypeObject, c_int) -> *mut c_void;
        PyType_IsSubtype: fn(*mut PyTypeObject, *mut PyTypeObject) -> c_int;
        PyType_GetFlags: fn(*mut PyTypeObject) -> std::ffi::c_ulong;
        PyCapsule_New: fn(*mut c_void, *const c_char, Option<PyCapsuleDestructor>) -> *mut PyObject;
        PyCapsule_GetPointer: fn(*mut PyObject, *const c_char) -> *mut c_void;
        PyCapsule_GetName: fn(*mut PyObject) -> *const c_char;
        PyCapsule_SetName: fn(*mut PyObject, *const c_char) -> c_int;
        PyCapsule_IsValid: fn(*mut PyObject, *const c_char) -> c_int;
        PyLong_FromVoidPtr: fn(*mut c_void) -> *mut PyObject;
        PyLong_AsVoidPtr: fn(*mut PyObject) -> *mut c_void;
        PyLong_FromLongLong: fn(c_longlong) -> *mut PyObject;
        PyLong_FromUnsignedLongLong: fn(c_ulonglong) -> *mut PyObject;
        PyLong_AsLongLong: fn(*mut PyObject) -> c_longlong;
        PyBool_FromLong: fn(c_long) -> *mut PyObject;
        PyTuple_New: fn(Py_ssize_t) -> *mut PyObject;
        PyTuple_SetItem: fn(*mut PyObject, Py_ssize_t, *mut PyObject) -> c_int;
        PyTuple_GetItem: fn(*mut PyObject, Py_ssize_t) -> *mut PyObject;
        PyTuple_Size: fn(*mut PyObject) -> Py_ssize_t;
        PyList_New: fn(Py_ssize_t) -> *mut PyObject;
        PyList_Append: fn(*mut PyObject, *mut PyObject) -> c_int;
        PySequence_Check: fn(*mut PyObject) -> c_int;
        PySequence_Size: fn(*mut PyObject) -> Py_ssize_t;
        PySequence_GetItem: fn(*mut PyObject, Py_ssize_t) -> *mut PyObject;
        PyDict_New: fn() -> *mut PyObject;
        PyDict_SetItemString: fn(*mut PyObject, *const c_char, *mut PyObject) -> c_int;
        PyDict_SetItem: fn(*mut PyObject, *mut PyObject, *mut PyObject) -> c_int;
        PyDict_Size: fn(*mut PyObject) -> Py_ssize_t;
        PyDict_GetItemString: fn(*mut PyObject, *const c_char) -> *mut PyObject;
        PyUnicode_FromStringAndSize: fn(*const c_char, Py_ssize_t) -> *mut PyObject;
        PyObject_GetAttrString: fn(*mut PyObject, *const c_char) -> *mut PyObject;
        PyObject_SetAttrString: fn(*mut PyObject, *const c_char, *mut PyObject) -> c_int;
        PyObject_Call: fn(*mut PyObject, *mut PyObject, *mut PyObject) -> *mut PyObject;
        PyObject_CallObject: fn(*mut PyObject, *mut PyObject) -> *mut PyObject;
        PyObject_Str: fn(*mut PyObject) -> *mut PyObject;
        PyObject_Repr: fn(*mut PyObject) -> *mut PyObject;
        PyIndex_Check: fn(*mut PyObject) -> c_int;
        PyNumber_Index: fn(*mut PyObject) -> *mut PyObject;
        PyModule_Create2: fn(*mut PyModuleDef, c_int) -> *mut PyObject;
        PyModule_AddObject: fn(*mut PyObject, *const c_char, *mut PyObject) -> c_int;
        PyGILState_Check: fn() -> c_int;
        PyGILState_GetThisThreadState: fn() -> *mut c_void;
        PyEval_SaveThread: fn() -> *mut c_void;
        PyEval_RestoreThread: fn(*mut c_void) -> ();
        PyUnicode_InternFromString: fn(*const c_char) -> *mut PyObject;
        PyObject_GetAttr: fn(*mut PyObject, *mut PyObject) -> *mut PyObject;
        PyImport_ImportModule: fn(*const c_char) -> *mut PyObject;
        PyImport_GetModule: fn(*mut PyObject) -> *mut PyObject;
        PyImport_GetModuleDict: fn() -> *mut PyObject;
        PyObject_GetBuffer: fn(*mut PyObject, *mut buffer::PyBuffer, c_int) -> c_int;
        PyBuffer_Release: fn(*mut buffer::PyBuffer) -> ();
        PyMemoryView_FromObject: fn(*mut PyObject) -> *mut PyObject;
        PyBuffer_ToContiguous: fn(*mut c_void, *const buffer::PyBuffer, Py_ssize_t, c_char) -> c_int;
        PyObject_Init: fn(*mut PyObject, *mut PyTypeObject) -> *mut PyObject;
        PyObject_ClearWeakRefs: fn(*mut PyObject) -> ();
        PyDict_GetItemWithError: fn(*mut PyObject, *mut PyObject) -> *mut PyObject;
        PyUnicode_AsUTF8AndSize: fn(*mut PyObject, *mut Py_ssize_t) -> *const c_char;
        PyFloat_AsDouble: fn(*mut PyObject) -> f64;
        PyFloat_FromDouble: fn(f64) -> *mut PyObject;
        PyModule_New: fn(*const c_char) -> *mut PyObject;
        PyModule_GetDef: fn(*mut PyObject) -> *mut PyModuleDef;
        PyCFunction_NewEx: fn(*mut PyMethodDef, *mut PyObject, *mut PyObject) -> *mut PyObject;
    }
    data {
        none: "_Py_NoneStruct";
        true_: "_Py_TrueStruct";
        false_: "_Py_FalseStruct";
        capsule_type: "PyCapsule_Type";
        bool_type: "PyBool_Type";
        long_type: "PyLong_Type";
        tuple_type: "PyTuple_Type";
        float_type: "PyFloat_Type";
        unicode_type: "PyUnicode_Type";
    }
}

// SAFETY: function pointers and pointers to immortal interpreter objects; calling any of them
// takes a `Python` token, which only a GIL holder has.
unsafe impl Send for Api {}
// SAFETY: as above.
unsafe impl Sync for Api {}

/// The exception classes, named once in `ErrorKind`: each is a `PyObject*` variable.
fn resolve_exceptions() -> std::result::Result<[*mut PyObject; crate::error::EXCEPTION_COUNT], &'static str> {
    let mut classes = [std::ptr::null_mut(); crate::error::EXCEPTION_COUNT];
    for ((_, name), slot) in ErrorKind::exceptions().zip(classes.iter_mut()) {
        let symbol = CString::new(format!("PyExc_{}", name.to_str().unwrap_or_default())).map_err(|_| "PyExc_?")?;
        // SAFETY: dlsym with a NUL-terminated name.
        let address = unsafe { libc::dlsym(libc::RTLD_DEFAULT, symbol.as_ptr()) };
        if address.is_null() {
            return Err("an exception class (PyExc_*)");
        }
        // SAFETY: the symbol is a `PyObject*` variable initialised by the interpreter.
        *slot = unsafe { *address.cast::<*mut PyObject>() };
    }
    Ok(classes)
}

pub(crate) fn lookup(name: &'static str) -> std::result::Result<*mut c_void, &'static str> {
    // SAFETY: `name` is NUL-terminated (the macro appends it); RTLD_DEFAULT searches the
    // process, where a running interpreter has put its symbols.
    let address = unsafe { libc::dlsym(libc::RTLD_DEFAULT, name.as_ptr().cast()) };
    if address.is_null() {
        Err(name)
    } else {
        Ok(address)
    }
}

/// Only success is kept: a process may call dlpx before it starts its interpreter.
static API: OnceCell<Api> = OnceCell::new();

/// The interpreter's API, or why there is none (no Python in this process, or one without a
/// symbol). Private to the leaf: the rest of the crate reaches it through a token.
#[inline]
fn api() -> Result<&'static Api> {
    match API.get() {
        Some(api) => Ok(api),
        None => load_once(),
    }
}

/// Whether an initialised interpreter runs in this process (for messages and for entry points
/// that need none); the error says why not.
pub fn present() -> Result<()> {
    api().map(|_| ())
}

/// The table behind a token (for guards that outlive a borrow of the token).
fn api_of(py: Python<'_>) -> &'static Api {
    py.table()
}

#[cold]
fn load_once() -> Result<&'static Api> {
    API.get_or_try_init(load).map_err(Error::runtime)
}

#[cold]
fn load() -> std::result::Result<Api, String> {
    let api = Api::resolve().map_err(|missing| {
        let missing = missing.trim_end_matches('\0');
        if missing == "Py_IsInitialized" {
            "no Python interpreter in this process".to_string()
        } else {
            format!("the Python interpreter in this process lacks {missing}")
        }
    })?;
    // SAFETY: Py_IsInitialized may be called at any time, with or without the GIL.
    if unsafe { (api.Py_IsInitialized)() } == 0 {
        return Err("the Python interpreter in this process is not initialized".to_string());
    }
    // SAFETY: True is an immortal static int object (32 bytes and more) of type bool.
    unsafe { layout::learn(api.true_, api.bool_type) }
        .map_err(|what| format!("the Python interpreter in this process does not have {what}"))?;
    Ok(api)
}

impl Api {
    /// The exception class a Python caller sees for `kind`.
    pub fn exception(&self, kind: ErrorKind) -> *mut PyObject {
        self.exceptions[kind.exception_index()]
    }

    /// A new reference to None.
    pub fn new_none(&self) -> *mut PyObject {
        // SAFETY: reached through a token (GIL held); Py_IncRef handles immortal objects too.
        unsafe { (self.Py_IncRef)(self.none) };
        self.none
    }

    pub fn new_bool(&self, value: bool) -> *mut PyObject {
        // SAFETY: reached through a token (GIL held).
        unsafe { (self.PyBool_FromLong)(value as c_long) }
    }

    /// Releases a reference the caller owns (NULL is allowed).
    pub fn decref(&self, object: *mut PyObject) {
        if !object.is_null() {
            // SAFETY: reached through a token (GIL held); the caller owns this reference.
            unsafe { (self.Py_DecRef)(object) }
        }
    }

    /// A new `int`.
    pub fn new_int(&self, value: i64) -> Result<*mut PyObject> {
        // SAFETY: reached through a token (GIL held).
        self.check(unsafe { (self.PyLong_FromLongLong)(value) })
    }

    /// A new `int` of an unsigned value (a size, an address).
    pub fn new_uint(&self, value: u64) -> Result<*mut PyObject> {
        // SAFETY: reached through a token (GIL held).
        self.check(unsafe { (self.PyLong_FromUnsignedLongLong)(value) })
    }

    /// A new, empty `dict`.
    pub fn new_dict(&self) -> Result<*mut PyObject> {
        // SAFETY: reached through a token (GIL held).
        self.check(unsafe { (self.PyDict_New)() })
    }

    /// A new, empty `list`.
    pub fn new_list(&self) -> Result<*mut PyObject> {
        // SAFETY: reached through a token (GIL held).
        self.check(unsafe { (self.PyList_New)(0) })
    }

    /// A new `str`.
    pub fn new_str(&self, text: &str) -> Result<*mut PyObject> {
        // SAFETY: pointer and length describe `text`, valid UTF-8.
        let s = unsafe { (self.PyUnicode_FromStringAndSize)(text.as_ptr().cast(), text.len() as Py_ssize_t) };
        self.check(s)
    }

    /// A Rust copy of a `str` (all of it: an embedded NUL is kept), or a TypeError naming `what`.
    pub fn str_value(&self, object: *mut PyObject, what: &str) -> Result<String> {
        self.with_str(object, what, str::to_owned)
    }

    /// `f` of the text of the str `object`, read in place (no copy; CPython keeps a str's UTF-8),
    /// a TypeError naming `what` for anything else, and a ValueError for a str with no UTF-8 (a
    /// lone surrogate: `"\udcff"`, as `os.fsdecode` makes of undecodable bytes).
    pub fn with_str<R>(&self, object: *mut PyObject, what: &str, f: impl FnOnce(&str) -> R) -> Result<R> {
        let mut size: Py_ssize_t = 0;
        // SAFETY: `object` is a live reference held by the caller; the text lives as long as it.
        let text = unsafe { (self.PyUnicode_AsUTF8AndSize)(object, &mut size) };
        if text.is_null() {
            // SAFETY: GIL held; a live object has a live type.
            let is_str = unsafe { (self.PyType_GetFlags)(layout::type_at(object)) } & objects::STR_FLAG != 0;
            // SAFETY: GIL held; the conversion's exception is pending (UnicodeEncodeError is a
            // ValueError).
            let encoding =
                is_str && unsafe { (self.PyErr_ExceptionMatches)(self.exception(ErrorKind::ValueError)) } != 0;
            if is_str && !encoding {
                // Not ours to word (a MemoryError): raised as it is.
                return Err(Error::python_pending());
            }
            // SAFETY: GIL held; the failed conversion left an exception we replace.
            unsafe { (self.PyErr_Clear)() };
            return Err(match encoding {
                true => Error::value(format!("{what}: a str with no UTF-8 encoding (it holds a lone surrogate)")),
                false => Error::type_error(format!("{what}: expected a str")),
            });
        }
        // SAFETY: `size` bytes at `text`, valid while `object` lives (all of `f`), and UTF-8:
        // CPython encodes a str it could encode, and fails (above) for one it could not (lone
        // surrogates).
        Ok(f(unsafe { std::str::from_utf8_unchecked(std::slice::from_raw_parts(text.cast::<u8>(), size as usize)) }))
    }

    /// Turns a NULL result into the pending Python exception (as an `Error` that re-raises it).
    pub fn check(&self, object: *mut PyObject) -> Result<*mut PyObject> {
        if object.is_null() {
            Err(Error::python_pending())
        } else {
            Ok(object)
        }
    }
}
