//! The shell of every function CPython calls: written once, here, as rustls-ffi writes its
//! `ffi_panic_boundary!` once. A function of `dlpx._native`, a method or a property of
//! `dlpx.Tensor` is a plain Rust function that takes the `Python` token and returns a `Result`;
//! [`method_def!`] and [`getset_def!`] make the `extern "C"` function CPython calls around it:
//! the one boundary (`error::boundary`: an `Err` or a panic becomes NULL with a Python exception
//! naming the entry point), the token (CPython holds the GIL for every such call), and the
//! calling convention's arguments (`args::FastArgs` for METH_FASTCALL | METH_KEYWORDS).
//!
//! The shell is named after its body (`dlpx::module::METHODS::from_dlpack`), so a profile tells
//! the entry points apart. A function C calls (a `dlpx_*` function, an exchange table's PyObject
//! entry) has its own boundary beside this one, [`entry::c_entry!`]: here, below `exports/`, so
//! dlpx's table and the producer seam's synthetic tables share it.

pub mod entry;

/// The inside of every shell: the one boundary around `$call`, with `$py` the token. CPython
/// calls a module's functions, an object's methods, getters and `tp_repr` with the GIL held.
macro_rules! attached {
    ($context:expr, |$py:ident| $call:expr) => {
        $crate::error::boundary($crate::cpython::Raise, $context, || {
            // SAFETY: CPython holds the GIL for every call of the conventions below.
            let $py = unsafe { $crate::cpython::Python::assume_attached()? };
            $call
        })
    };
}

/// The `extern "C"` shell of `$module::$body` for one calling convention (an expression: the
/// function). The body gets the token, the object the call is bound to (the module, or `self`),
/// and the arguments as the convention passes them.
macro_rules! shell {
    (fastcall $module:ident :: $body:ident, $context:expr) => {{
        unsafe extern "C" fn $body(
            this: *mut pyo3_ffi::PyObject,
            args: *const *mut pyo3_ffi::PyObject,
            nargs: pyo3_ffi::Py_ssize_t,
            kwnames: *mut pyo3_ffi::PyObject,
        ) -> *mut pyo3_ffi::PyObject {
            // SAFETY: CPython's METH_FASTCALL | METH_KEYWORDS convention, for this call.
            let args = unsafe { $crate::args::FastArgs::new(args, nargs, kwnames) };
            $crate::shell::attached!($context, |py| $module::$body(py, this, args))
        }
        $body
    }};
    (noargs $module:ident :: $body:ident, $context:expr) => {{
        unsafe extern "C" fn $body(
            this: *mut pyo3_ffi::PyObject,
            _: *mut pyo3_ffi::PyObject,
        ) -> *mut pyo3_ffi::PyObject {
            $crate::shell::attached!($context, |py| $module::$body(py, this))
        }
        $body
    }};
    (one $module:ident :: $body:ident, $context:expr) => {{
        // METH_O: one live borrowed argument.
        unsafe extern "C" fn $body(
            this: *mut pyo3_ffi::PyObject,
            arg: *mut pyo3_ffi::PyObject,
        ) -> *mut pyo3_ffi::PyObject {
            $crate::shell::attached!($context, |py| $module::$body(py, this, arg))
        }
        $body
    }};
    (getter $module:ident :: $body:ident, $context:expr) => {{
        unsafe extern "C" fn $body(this: *mut pyo3_ffi::PyObject, _: *mut std::ffi::c_void) -> *mut pyo3_ffi::PyObject {
            $crate::shell::attached!($context, |py| $module::$body(py, this))
        }
        $body
    }};
    (flags noargs) => {
        pyo3_ffi::METH_NOARGS
    };
    (flags one) => {
        pyo3_ffi::METH_O
    };
    (unary $module:ident :: $body:ident, $context:expr) => {{
        unsafe extern "C" fn $body(this: *mut pyo3_ffi::PyObject) -> *mut pyo3_ffi::PyObject {
            $crate::shell::attached!($context, |py| $module::$body(py, this))
        }
        $body
    }};
}

/// A `PyMethodDef` named `$name` whose function is the shell of `$module::$body`, by one of
/// CPython's conventions: `fastcall` (METH_FASTCALL | METH_KEYWORDS; the body takes
/// `args::FastArgs`), `noargs` (METH_NOARGS) or `one` (METH_O; the body takes the argument).
/// Errors name the entry point `$name`, or `as "context"`.
macro_rules! method_def {
    ($name:literal, $kind:ident $module:ident :: $body:ident, $doc:expr) => {
        $crate::shell::method_def!($name as $name, $kind $module::$body, $doc)
    };
    ($name:literal as $context:literal, fastcall $module:ident :: $body:ident, $doc:expr) => {
        pyo3_ffi::PyMethodDef {
            ml_name: concat!($name, "\0").as_ptr().cast(),
            ml_meth: pyo3_ffi::PyMethodDefPointer {
                // SAFETY: the flags below say METH_FASTCALL | METH_KEYWORDS.
                PyCFunction: unsafe {
                    $crate::cpython::fastcall_as_cfunction($crate::shell::shell!(fastcall $module::$body, $context))
                },
            },
            ml_flags: $crate::cpython::METH_FASTCALL | pyo3_ffi::METH_KEYWORDS,
            ml_doc: $doc.as_ptr(),
        }
    };
    ($name:literal as $context:literal, $kind:ident $module:ident :: $body:ident, $doc:expr) => {
        pyo3_ffi::PyMethodDef {
            ml_name: concat!($name, "\0").as_ptr().cast(),
            ml_meth: pyo3_ffi::PyMethodDefPointer { PyCFunction: $crate::shell::shell!($kind $module::$body, $context) },
            ml_flags: $crate::shell::shell!(flags $kind),
            ml_doc: $doc.as_ptr(),
        }
    };
}

/// A read-only property `$name` whose getter is the shell of `$module::$body` (errors name
/// `$context`).
macro_rules! getset_def {
    ($name:literal as $context:literal, $module:ident :: $body:ident, $doc:expr) => {
        pyo3_ffi::PyGetSetDef {
            name: concat!($name, "\0").as_ptr().cast(),
            get: Some($crate::shell::shell!(getter $module::$body, $context)),
            set: None,
            doc: $doc.as_ptr(),
            closure: std::ptr::null_mut(),
        }
    };
}

pub(crate) use {attached, getset_def, method_def, shell};
