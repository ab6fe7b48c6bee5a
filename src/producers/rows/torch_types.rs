//! torch's own classes, as torch's C++ knows them rather than as Python names them now: the
//! `_cdata` its `torch.Tensor` reports for an object, `nn.Parameter`, and whether its "cuda" is
//! ROCm's. What the torch row checks before it reads a tensor's C++ object itself.

use std::ffi::c_void;
use std::ptr;

use pyo3_ffi::{PyObject, PyTypeObject};

use crate::cpython::{imported_module, Owned, Python};

/// `object._cdata` as `tensor_type`'s own descriptor answers it (`torch.Tensor._cdata.__get__`),
/// NULL where it cannot.
pub fn true_cdata(py: Python<'_>, tensor_type: *mut PyObject, object: *mut PyObject) -> *mut c_void {
    let Some(getter) = crate::cpython::attribute(py, tensor_type, c"_cdata")
        .and_then(|descriptor| crate::cpython::attribute(py, descriptor.as_ptr(), c"__get__"))
    else {
        return ptr::null_mut();
    };
    // SAFETY: GIL held; the tuple takes the new reference to `object`; new references are owned;
    // a failure's exception is cleared.
    unsafe {
        let Ok(args) = Owned::new(py, (py.PyTuple_New)(1)) else {
            (py.PyErr_Clear)();
            return ptr::null_mut();
        };
        (py.Py_IncRef)(object);
        (py.PyTuple_SetItem)(args.as_ptr(), 0, object);
        let cdata = match Owned::new(py, (py.PyObject_CallObject)(getter.as_ptr(), args.as_ptr())) {
            Ok(cdata) => (py.PyLong_AsVoidPtr)(cdata.as_ptr()),
            Err(_) => ptr::null_mut(),
        };
        if cdata.is_null() {
            (py.PyErr_Clear)();
        }
        cdata
    }
}

/// `torch.nn.Parameter`, kept for the process, where it is a subclass of `tensor_type` (torch's
/// own torch.Tensor); NULL otherwise.
pub fn parameter_type(py: Python<'_>, tensor_type: *mut PyTypeObject) -> *mut PyTypeObject {
    let Some(parameter) = imported_module(py, c"torch.nn.parameter")
        .and_then(|module| crate::cpython::attribute(py, module.as_ptr(), c"Parameter"))
    else {
        return ptr::null_mut();
    };
    let is_type = crate::cpython::is_type(py, parameter.as_ptr());
    // SAFETY: GIL held; two live types.
    match is_type && unsafe { (py.PyType_IsSubtype)(parameter.as_ptr().cast(), tensor_type) } != 0 {
        true => parameter.into_ptr().cast(),
        false => ptr::null_mut(),
    }
}

/// Whether torch is a ROCm build (`torch.version.hip` set): its "cuda" device is ROCm's. A
/// version module that cannot be read says so too (no CUDA view through the shim then).
pub fn is_rocm(py: Python<'_>) -> bool {
    let Some(version) = imported_module(py, c"torch.version") else { return true };
    let hip = crate::cpython::attribute(py, version.as_ptr(), c"hip");
    hip.is_none_or(|hip| hip.as_ptr() != py.none)
}
