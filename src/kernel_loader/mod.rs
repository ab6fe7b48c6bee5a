//! `dlpx.load_library(path)`: a kernel library as a module-like object, one attribute per kernel
//! (docs/design.md, "Kernel libraries"). The library is opened once (`kernels::library`), and
//! its module made once: loading the same library again, by any path, gives the same object.
//! Between the module and the producer seam: it reads arguments through the seam and gives
//! outputs back through it.

mod arguments;
mod function;
mod outputs_like;
mod results;

use std::ffi::CString;
use std::sync::Mutex;

use pyo3_ffi::PyObject;

use crate::cpython::{without_gil, Owned, Python};
use crate::error::{Error, Result};
use crate::kernels::{library, Library};

pub use outputs_like::{enter as outputs_like_enter, exit as outputs_like_exit, set_context as outputs_like_context};

/// Each library's module, made once: (the library's address, a strong reference kept for the
/// process). No Python code runs while the lock is held.
static MODULES: Mutex<Vec<(usize, usize)>> = Mutex::new(Vec::new());

/// `load_library(path)`: the module of the kernel library at `path` (a str).
pub fn load_library(py: Python<'_>, _module: *mut PyObject, path: *mut PyObject) -> Result<*mut PyObject> {
    let path = py.str_value(path, "path")?;
    // dlopen may take a while (and runs the library's constructors): other threads run meanwhile.
    let library = without_gil(|| library::open(&path))?;
    if let Some(module) = known(py, library) {
        return Ok(module);
    }
    let module = make(py, library)?;
    let mut modules = MODULES.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    if let Some(&(_, existing)) = modules.iter().find(|(l, _)| *l == library as *const Library as usize) {
        drop(modules);
        // Another thread made it meanwhile: that one is the library's module.
        py.decref(module.into_ptr());
        // SAFETY: GIL held; a reference the registry keeps, shared with the caller.
        unsafe { (py.Py_IncRef)(existing as *mut PyObject) };
        return Ok(existing as *mut PyObject);
    }
    modules.push((library as *const Library as usize, module.clone_ref().into_ptr() as usize));
    Ok(module.into_ptr())
}

/// A new reference to `library`'s module, if it was made.
fn known(py: Python<'_>, library: &'static Library) -> Option<*mut PyObject> {
    let modules = MODULES.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    let &(_, module) = modules.iter().find(|(l, _)| *l == library as *const Library as usize)?;
    // SAFETY: GIL held; the registry's reference keeps the module alive.
    unsafe { (py.Py_IncRef)(module as *mut PyObject) };
    Some(module as *mut PyObject)
}

/// A module named after the library's file (`libdlpx_example_kernels.so` →
/// `dlpx_example_kernels`), `__file__` the file the loader found, one function per kernel.
fn make<'py>(py: Python<'py>, library: &'static Library) -> Result<Owned<'py>> {
    let name = CString::new(module_name(&library.path)).map_err(|_| Error::value("a path with a NUL"))?;
    // SAFETY: GIL held; a NUL-terminated name; new references are owned.
    unsafe {
        let module = Owned::new(py, (py.PyModule_New)(name.as_ptr()))?;
        let file = Owned::new(py, py.new_str(&library.file)?)?;
        if (py.PyObject_SetAttrString)(module.as_ptr(), c"__file__".as_ptr(), file.as_ptr()) != 0 {
            return Err(Error::python_pending());
        }
        let module_name = Owned::new(py, py.new_str(&name.to_string_lossy())?)?;
        for kernel in &library.kernels {
            let function = function::make(py, kernel, &name, module_name.as_ptr())?;
            let attribute = CString::new(kernel.name).map_err(|_| Error::value("a kernel name with a NUL"))?;
            // PyModule_AddObject steals the function only on success.
            if (py.PyModule_AddObject)(module.as_ptr(), attribute.as_ptr(), function) != 0 {
                py.decref(function);
                return Err(Error::python_pending());
            }
        }
        Ok(module)
    }
}

/// The file's name without its directory, a `lib` prefix and its extensions (`libadd.so.1`:
/// `add`); never empty, as stubgen names the stub after it: `lib.so` is `lib`, `.so` is `so`.
fn module_name(path: &str) -> String {
    let file = path.rsplit('/').next().unwrap_or(path);
    let stem = |name: &str| name.split('.').next().unwrap_or_default().to_string();
    [stem(file.strip_prefix("lib").unwrap_or(file)), stem(file)]
        .into_iter()
        .find(|name| !name.is_empty())
        .unwrap_or_else(|| file.split('.').find(|part| !part.is_empty()).unwrap_or("kernels").to_string())
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_module_is_named_after_its_file_and_never_empty() {
        let cases = [
            ("/a/libadd.so", "add"),
            ("libadd.so.1", "add"),
            ("/a/kernels.so", "kernels"),
            ("/a/lib.so", "lib"),
            ("/a/lib.so.2", "lib"),
            ("/a/.so", "so"),
            ("/a/...", "kernels"),
        ];
        for (path, name) in cases {
            assert_eq!(super::module_name(path), name, "{path}");
        }
    }
}
