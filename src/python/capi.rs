//! CPython, resolved at run time.
//!
//! libdlpx never links libpython (a C program without Python must load it), so every CPython
//! function it calls is looked up once with `dlsym(RTLD_DEFAULT, …)` into one table of function
//! pointers. Only stable-ABI functions are used, so one build serves CPython 3.9 and later.
//! `pyo3_ffi` supplies the struct types; none of its `extern` functions or inline helpers that
//! call them are used.

use std::ffi::{c_char, c_int, c_long, c_longlong, c_ulonglong, c_void, CStr};

use once_cell::sync::OnceCell;
pub use pyo3_ffi::{PyMethodDef, PyModuleDef, PyObject, PyTypeObject, PyType_Slot, PyType_Spec, Py_ssize_t};

use crate::error::{Error, ErrorKind, Result};

pub type PyCapsuleDestructor = unsafe extern "C" fn(*mut PyObject);

macro_rules! python_api {
    (
        functions { $($fname:ident : fn($($arg:ty),*) -> $ret:ty;)* }
        data { $($dname:ident : $dsym:literal;)* }
    ) => {
        /// Every CPython function and object dlpx uses, resolved from the running interpreter.
        #[allow(non_snake_case)]
        pub struct Python {
            $(pub $fname: unsafe extern "C" fn($($arg),*) -> $ret,)*
            $(pub $dname: *mut PyObject,)*
        }

        impl Python {
            fn resolve() -> std::result::Result<Python, &'static str> {
                Ok(Python {
                    $($fname: {
                        let name = concat!(stringify!($fname), "\0");
                        // SAFETY: dlsym with a NUL-terminated name; the symbol's C type is the one
                        // declared here (taken from CPython's stable ABI headers).
                        unsafe { std::mem::transmute::<*mut c_void, unsafe extern "C" fn($($arg),*) -> $ret>(lookup(name)?) }
                    },)*
                    $($dname: {
                        let name = concat!($dsym, "\0");
                        let address = lookup(name)?;
                        // Exception classes are `PyObject*` variables; the singletons are objects.
                        if $dsym.starts_with("PyExc_") {
                            // SAFETY: the symbol is a `PyObject*` variable initialised by the interpreter.
                            unsafe { *address.cast::<*mut PyObject>() }
                        } else {
                            address.cast::<PyObject>()
                        }
                    },)*
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
        PyErr_Fetch: fn(*mut *mut PyObject, *mut *mut PyObject, *mut *mut PyObject) -> ();
        PyErr_Restore: fn(*mut PyObject, *mut PyObject, *mut PyObject) -> ();
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
        PyDict_Size: fn(*mut PyObject) -> Py_ssize_t;
        PyUnicode_FromStringAndSize: fn(*const c_char, Py_ssize_t) -> *mut PyObject;
        PyUnicode_AsUTF8String: fn(*mut PyObject) -> *mut PyObject;
        PyBytes_AsString: fn(*mut PyObject) -> *mut c_char;
        PyObject_GetAttrString: fn(*mut PyObject, *const c_char) -> *mut PyObject;
        PyObject_SetAttrString: fn(*mut PyObject, *const c_char, *mut PyObject) -> c_int;
        PyObject_Call: fn(*mut PyObject, *mut PyObject, *mut PyObject) -> *mut PyObject;
        PyObject_CallObject: fn(*mut PyObject, *mut PyObject) -> *mut PyObject;
        PyObject_Str: fn(*mut PyObject) -> *mut PyObject;
        PyIndex_Check: fn(*mut PyObject) -> c_int;
        PyNumber_Index: fn(*mut PyObject) -> *mut PyObject;
        PyModule_Create2: fn(*mut PyModuleDef, c_int) -> *mut PyObject;
        PyModule_AddObject: fn(*mut PyObject, *const c_char, *mut PyObject) -> c_int;
        PyGILState_Check: fn() -> c_int;
        PyGILState_GetThisThreadState: fn() -> *mut c_void;
        PyEval_SaveThread: fn() -> *mut c_void;
        PyEval_RestoreThread: fn(*mut c_void) -> ();
        PyUnicode_InternFromString: fn(*const c_char) -> *mut PyObject;
    }
    data {
        none: "_Py_NoneStruct";
        true_: "_Py_TrueStruct";
        false_: "_Py_FalseStruct";
        exc_value_error: "PyExc_ValueError";
        exc_type_error: "PyExc_TypeError";
        exc_buffer_error: "PyExc_BufferError";
        exc_memory_error: "PyExc_MemoryError";
        exc_not_implemented_error: "PyExc_NotImplementedError";
        exc_runtime_error: "PyExc_RuntimeError";
    }
}

// SAFETY: function pointers and pointers to immortal interpreter objects; using any of them
// requires the GIL, which every caller holds.
unsafe impl Send for Python {}
unsafe impl Sync for Python {}

fn lookup(name: &'static str) -> std::result::Result<*mut c_void, &'static str> {
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
static PYTHON: OnceCell<Python> = OnceCell::new();

/// The interpreter's API, or why there is none (no Python in this process, or one without a symbol).
pub fn python() -> Result<&'static Python> {
    PYTHON.get_or_try_init(load).map_err(|why| Error::runtime("python", why))
}

#[cold]
fn load() -> std::result::Result<Python, String> {
    let py = Python::resolve().map_err(|missing| {
        let missing = missing.trim_end_matches('\0');
        if missing == "Py_IsInitialized" {
            "no Python interpreter in this process".to_string()
        } else {
            format!("the Python interpreter in this process lacks {missing}")
        }
    })?;
    // SAFETY: Py_IsInitialized may be called at any time, with or without the GIL.
    if unsafe { (py.Py_IsInitialized)() } == 0 {
        return Err("the Python interpreter in this process is not initialized".to_string());
    }
    Ok(py)
}

/// The `python()` table when the caller already knows Python is loaded (it holds a PyObject).
#[inline]
pub fn py() -> &'static Python {
    match PYTHON.get() {
        Some(py) => py,
        None => python().expect("CPython is loaded when a PyObject exists"),
    }
}

impl Python {
    pub fn exception(&self, kind: ErrorKind) -> *mut PyObject {
        match kind {
            ErrorKind::MemoryError => self.exc_memory_error,
            ErrorKind::ValueError => self.exc_value_error,
            ErrorKind::TypeError => self.exc_type_error,
            ErrorKind::BufferError => self.exc_buffer_error,
            ErrorKind::NotImplementedError => self.exc_not_implemented_error,
            ErrorKind::RuntimeError => self.exc_runtime_error,
        }
    }

    /// A new reference to None.
    pub fn new_none(&self) -> *mut PyObject {
        // SAFETY: None is immortal-or-refcounted; Py_IncRef handles both.
        unsafe { (self.Py_IncRef)(self.none) };
        self.none
    }

    pub fn new_bool(&self, value: bool) -> *mut PyObject {
        // SAFETY: the GIL is held by every caller of this table.
        unsafe { (self.PyBool_FromLong)(value as c_long) }
    }

    pub fn decref(&self, object: *mut PyObject) {
        if !object.is_null() {
            // SAFETY: the caller owns this reference.
            unsafe { (self.Py_DecRef)(object) }
        }
    }

    /// A new `str`.
    pub fn new_str(&self, text: &str) -> Result<*mut PyObject> {
        // SAFETY: pointer and length describe `text`, valid UTF-8.
        let s = unsafe { (self.PyUnicode_FromStringAndSize)(text.as_ptr().cast(), text.len() as Py_ssize_t) };
        self.check(s)
    }

    /// A Rust copy of a `str`, or a TypeError naming `what`.
    pub fn str_value(&self, object: *mut PyObject, what: &str) -> Result<String> {
        // SAFETY: `object` is a live reference held by the caller.
        let bytes = unsafe { (self.PyUnicode_AsUTF8String)(object) };
        if bytes.is_null() {
            // SAFETY: GIL held; the failed conversion left an exception we replace.
            unsafe { (self.PyErr_Clear)() };
            return Err(Error::type_error(what, "expected a str"));
        }
        // SAFETY: `bytes` is a live bytes object; its buffer is NUL-terminated.
        let text = unsafe { CStr::from_ptr((self.PyBytes_AsString)(bytes)) }.to_string_lossy().into_owned();
        self.decref(bytes);
        Ok(text)
    }

    /// Turns a NULL result into the pending Python exception (as an `Error` that re-raises it).
    pub fn check(&self, object: *mut PyObject) -> Result<*mut PyObject> {
        if object.is_null() {
            Err(pending())
        } else {
            Ok(object)
        }
    }
}

/// The marker for "a Python exception is already set": delivering it on the Python channel
/// leaves that exception in place instead of replacing it.
pub const PENDING: &str = "\u{0}python exception pending";

pub fn pending() -> Error {
    Error { kind: ErrorKind::RuntimeError, message: PENDING.to_string() }
}

/// Moves the pending Python exception into an `Error` (for channels other than Python).
pub fn take_pending(context: &str) -> Error {
    let Ok(py) = python() else { return Error::runtime(context, "no Python interpreter") };
    // SAFETY: GIL held by the caller; the fetched references are released here.
    unsafe {
        let kind = [
            (py.exc_memory_error, ErrorKind::MemoryError),
            (py.exc_value_error, ErrorKind::ValueError),
            (py.exc_type_error, ErrorKind::TypeError),
            (py.exc_buffer_error, ErrorKind::BufferError),
            (py.exc_not_implemented_error, ErrorKind::NotImplementedError),
        ]
        .into_iter()
        .find(|(exc, _)| (py.PyErr_ExceptionMatches)(*exc) != 0)
        .map_or(ErrorKind::RuntimeError, |(_, kind)| kind);
        let (mut ty, mut value, mut tb) = (std::ptr::null_mut(), std::ptr::null_mut(), std::ptr::null_mut());
        (py.PyErr_Fetch)(&mut ty, &mut value, &mut tb);
        let text = if value.is_null() { None } else { Owned::new((py.PyObject_Str)(value)).ok() };
        let message = text.and_then(|t| py.str_value(t.as_ptr(), context).ok()).unwrap_or_default();
        (py.PyErr_Clear)();
        for object in [ty, value, tb] {
            py.decref(object);
        }
        Error { kind, message }
    }
}

/// Sets `err` as the current Python exception (the GIL is held), unless it stands for one that
/// is already set.
pub fn raise(err: &Error) {
    let Ok(py) = python() else {
        // No interpreter to raise in: the message still reaches `dlpx_last_error()`.
        crate::error::set_last_error(err);
        return;
    };
    if err.message == PENDING {
        // SAFETY: GIL held by the Python channel's callers.
        if unsafe { (py.PyErr_Occurred)() }.is_null() {
            let msg = c"dlpx: a Python call failed without setting an exception";
            // SAFETY: as above.
            unsafe { (py.PyErr_SetString)(py.exc_runtime_error, msg.as_ptr()) };
        }
        return;
    }
    let message = err.c_message();
    // SAFETY: GIL held; both arguments are valid.
    unsafe { (py.PyErr_SetString)(py.exception(err.kind), message.as_ptr()) };
}

/// A lazily computed value that lives in the interpreter's world: only touched with the GIL,
/// and never blocks. (A blocking once-cell could deadlock: its initialiser runs Python code,
/// which may hand the GIL to a thread that then waits on the cell while holding the GIL.) Two
/// threads may both compute it; the first to finish wins and the other's value is dropped
/// unused, so values must be cheap to discard (leaked duplicates of immortal objects at worst).
pub struct GilCell<T: Copy>(std::cell::UnsafeCell<Option<T>>);

// SAFETY: every access happens with the GIL held, which serialises them.
unsafe impl<T: Copy> Sync for GilCell<T> {}

impl<T: Copy> Default for GilCell<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T: Copy> GilCell<T> {
    pub const fn new() -> Self {
        GilCell(std::cell::UnsafeCell::new(None))
    }

    /// The value, computing it with `init` the first time (the GIL is held).
    pub fn get_or_try_init<E>(&self, init: impl FnOnce() -> std::result::Result<T, E>) -> std::result::Result<T, E> {
        // SAFETY: GIL held; no reference into the cell outlives these statements.
        if let Some(value) = unsafe { *self.0.get() } {
            return Ok(value);
        }
        let value = init()?;
        // SAFETY: as above; `init` may have let another thread fill the cell meanwhile.
        unsafe {
            match *self.0.get() {
                Some(existing) => Ok(existing),
                None => {
                    *self.0.get() = Some(value);
                    Ok(value)
                }
            }
        }
    }
}

/// Whether the calling thread holds the GIL (any thread may ask): the interpreter's current
/// thread state is this thread's own. Neither half is enough alone. PyGILState_Check answers 1
/// for every thread once a subinterpreter exists, even one with no thread state; and before 3.12
/// the "current" thread state is the GIL holder's, whichever thread that is. The getter is public
/// from 3.13 and private (exported) before; PyGILState_Check serves if neither is found. A
/// subinterpreter's thread may read as not holding it: then dlpx only keeps the GIL longer.
pub fn holds_gil(py: &Python) -> bool {
    type Getter = unsafe extern "C" fn() -> *mut c_void;
    static GETTER: OnceCell<Option<Getter>> = OnceCell::new();
    let getter = GETTER.get_or_init(|| {
        let address = lookup("PyThreadState_GetUnchecked\0").or_else(|_| lookup("_PyThreadState_UncheckedGet\0")).ok()?;
        // SAFETY: both take nothing and return a PyThreadState* (NULL when none).
        Some(unsafe { std::mem::transmute::<*mut c_void, Getter>(address) })
    });
    match getter {
        Some(current) => {
            // SAFETY: both may be called from any thread, with or without the GIL.
            let (current, own) = unsafe { (current(), (py.PyGILState_GetThisThreadState)()) };
            !current.is_null() && current == own
        }
        // SAFETY: PyGILState_Check may be called without the GIL.
        None => (unsafe { (py.PyGILState_Check)() }) != 0,
    }
}

/// Whether the interpreter is shutting down (`Py_IsFinalizing` from 3.13, `_Py_IsFinalizing`
/// before); false when neither is found.
fn finalizing() -> bool {
    type Query = unsafe extern "C" fn() -> c_int;
    static QUERY: OnceCell<Option<Query>> = OnceCell::new();
    let query = QUERY.get_or_init(|| {
        let address = lookup("Py_IsFinalizing\0").or_else(|_| lookup("_Py_IsFinalizing\0")).ok()?;
        // SAFETY: both take nothing and return an int; callable from any thread.
        Some(unsafe { std::mem::transmute::<*mut c_void, Query>(address) })
    });
    // SAFETY: as above.
    query.is_some_and(|q| unsafe { q() } != 0)
}

/// Runs `f` — a blocking call that touches no Python object (a CUDA synchronisation, the first
/// driver initialisation) — with the GIL released when this thread holds it, so the process's
/// other Python threads run meanwhile. Without an interpreter, or without the GIL, it just runs.
///
/// Whatever `f` waits for must never wait for the GIL: a `OnceCell` initialised inside `f` is
/// entered only through `without_gil` by GIL holders, so none of them blocks on it holding the GIL.
pub fn without_gil<T>(f: impl FnOnce() -> T) -> T {
    /// Takes the GIL back on drop, so a panic inside `f` leaves the thread as it found it.
    struct Released<'a>(&'a Python, *mut c_void);
    impl Drop for Released<'_> {
        fn drop(&mut self) {
            // SAFETY: the thread state PyEval_SaveThread returned on this thread.
            unsafe { (self.0.PyEval_RestoreThread)(self.1) };
        }
    }
    let Some(py) = PYTHON.get() else { return f() };
    if !holds_gil(py) || finalizing() {
        // While the interpreter shuts down, taking the GIL back can end this thread
        // (pthread_exit through Rust frames): keep it instead.
        return f();
    }
    // SAFETY: this thread holds the GIL; it is taken back by `Released`.
    let _released = Released(py, unsafe { (py.PyEval_SaveThread)() });
    f()
}

/// Keeps the pending Python exception aside while foreign code (a producer's deleter) runs:
/// a deleter that runs Python code must not see, or clobber, an exception set before it.
/// Only acts when an interpreter is running and this thread holds the GIL.
pub struct ExceptionGuard(Option<[*mut PyObject; 3]>);

impl ExceptionGuard {
    /// For callers that may or may not hold the GIL (C code releasing a view).
    pub fn save() -> ExceptionGuard {
        let Ok(py) = python() else { return ExceptionGuard(None) };
        if !holds_gil(py) {
            return ExceptionGuard(None);
        }
        Self::save_with_gil(py)
    }

    /// For callers that hold the GIL (tp_dealloc, capsule destructors): one call when no
    /// exception is pending, the common case on the hot path of every tensor's death.
    pub fn save_with_gil(py: &Python) -> ExceptionGuard {
        // SAFETY: the GIL is held by the caller.
        unsafe {
            if (py.PyErr_Occurred)().is_null() {
                return ExceptionGuard(None);
            }
            let mut saved = [std::ptr::null_mut(); 3];
            (py.PyErr_Fetch)(&mut saved[0], &mut saved[1], &mut saved[2]);
            ExceptionGuard(Some(saved))
        }
    }
}

impl Drop for ExceptionGuard {
    fn drop(&mut self) {
        if let Some([ty, value, tb]) = self.0.take() {
            let py = py();
            // SAFETY: GIL held (checked in `save`); Restore steals the three references and
            // replaces anything the deleter left behind, which is reported as unraisable-free noise.
            unsafe {
                (py.PyErr_Clear)();
                (py.PyErr_Restore)(ty, value, tb);
            }
        }
    }
}

/// An owned reference that is released on drop (the GIL is held throughout its life).
pub struct Owned(pub(crate) *mut PyObject);

impl Owned {
    /// Takes a new reference, or the pending exception when it is NULL.
    pub fn new(object: *mut PyObject) -> Result<Owned> {
        py().check(object).map(Owned)
    }

    pub fn as_ptr(&self) -> *mut PyObject {
        self.0
    }

    pub fn into_ptr(self) -> *mut PyObject {
        let p = self.0;
        std::mem::forget(self);
        p
    }
}

impl Drop for Owned {
    fn drop(&mut self) {
        py().decref(self.0);
    }
}
