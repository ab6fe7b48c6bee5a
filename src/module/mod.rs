//! The `dlpx._native` extension module: `PyInit__native` and the module-level functions.
//!
//! Single-phase initialisation: it works unchanged on CPython 3.9 through 3.13, where the
//! multi-phase slot list would have to be assembled per version.

mod info;

use std::ffi::{c_void, CStr};
use std::ptr;

use pyo3_ffi::{PyMethodDef, PyMethodDefPointer, PyModuleDef, PyObject};

use crate::abi::*;
use crate::args;
use crate::cpython::{fastcall_as_cfunction, int_tuple, CStatic, Owned, Python, Raise};
use crate::error::{boundary, Error, Result};
use crate::producers::{self, Request};
use crate::tensor::Tensor;
use crate::tensor_type::device_class::{parse_device, set_device_class};
use crate::tensor_type::{self as tensor};

static EMPTY_NAMES: args::Names = args::Names::new(&[c"shape", c"dtype", c"device"]);
static FROM_DLPACK_NAMES: args::Names = args::Names::with_positional_only(&[c"x", c"device", c"copy"], 1);

unsafe extern "C" fn empty(
    _module: *mut PyObject,
    a: *const *mut PyObject,
    nargs: pyo3_ffi::Py_ssize_t,
    kwnames: *mut PyObject,
) -> *mut PyObject {
    boundary(Raise, "empty", || {
        // SAFETY: CPython calls module functions with the GIL held.
        let py = unsafe { Python::assume_attached()? };
        let mut v = [ptr::null_mut(); 3];
        // SAFETY: CPython's METH_FASTCALL | METH_KEYWORDS convention.
        unsafe { args::parse(py, a, nargs, kwnames, &EMPTY_NAMES, 3, &mut v)? };
        let [shape, dtype, device] = v;
        if shape.is_null() {
            return Err(Error::type_error("missing required argument 'shape'"));
        }
        let shape = args::int_sequence(py, shape, "shape")?;
        let dtype =
            if args::is_none(py, dtype) { DLDataType { code: 2, bits: 32, lanes: 1 } } else { parse_dtype(py, dtype)? };
        let device = if args::is_none(py, device) { DLDevice::CPU } else { parse_device(py, device)? };
        tensor::wrap(py, Tensor::empty(&shape, dtype, device)?)
    })
}

fn parse_dtype(py: Python<'_>, object: *mut PyObject) -> Result<DLDataType> {
    if let Ok(name) = py.str_value(object, "empty") {
        return crate::dtype::parse_dtype(&name).ok_or_else(|| Error::value(format!("unknown dtype '{name}'")));
    }
    let raw = args::int_sequence(py, object, "dtype")?;
    match raw[..] {
        [code, bits, lanes] if (0..256).contains(&code) && (0..256).contains(&bits) && (0..65536).contains(&lanes) => {
            Ok(DLDataType { code: code as u8, bits: bits as u8, lanes: lanes as u16 })
        }
        _ => Err(Error::value("dtype must be a name such as 'float32' or a (code, bits, lanes) triple")),
    }
}

unsafe extern "C" fn from_dlpack(
    _module: *mut PyObject,
    a: *const *mut PyObject,
    nargs: pyo3_ffi::Py_ssize_t,
    kwnames: *mut PyObject,
) -> *mut PyObject {
    boundary(Raise, "from_dlpack", || {
        // SAFETY: CPython calls module functions with the GIL held.
        let py = unsafe { Python::assume_attached()? };
        if nargs == 1 && kwnames.is_null() {
            // `from_dlpack(x)`, the common call: nothing else to parse.
            // SAFETY: one positional argument, by CPython's convention.
            return tensor::wrap(py, producers::import(py, unsafe { *a }, Request::PLAIN)?);
        }
        let mut v = [ptr::null_mut(); 3];
        // SAFETY: CPython's METH_FASTCALL | METH_KEYWORDS convention.
        unsafe { args::parse(py, a, nargs, kwnames, &FROM_DLPACK_NAMES, 1, &mut v)? };
        let [x, device, copy] = v;
        if x.is_null() {
            return Err(Error::type_error("missing required argument 'x'"));
        }
        let device = if args::is_none(py, device) { None } else { Some(parse_device(py, device)?) };
        let copy = args::optional_bool(py, copy, "copy")?;
        tensor::wrap(py, producers::import(py, x, Request { device, copy })?)
    })
}

static STREAM_NAMES: args::Names = args::Names::with_positional_only(&[c"device_type", c"device_id", c"stream"], 3);

fn stream_device(py: Python<'_>, v: &[*mut PyObject]) -> Result<DLDevice> {
    if v[0].is_null() || v[1].is_null() {
        return Err(Error::type_error("expected (device_type, device_id, ...)"));
    }
    let device_type = args::int_value(py, v[0], "device_type")?;
    let device_id = args::int_value(py, v[1], "device_id")?;
    match (i32::try_from(device_type), i32::try_from(device_id)) {
        (Ok(t), Ok(id)) if id >= 0 => Ok(DLDevice { device_type: DeviceType(t), device_id: id }),
        _ => Err(Error::value(format!("invalid device ({device_type}, {device_id})"))),
    }
}

/// `_set_current_stream(device_type, device_id, handle) -> previous handle` (0: the default).
unsafe extern "C" fn set_current_stream(
    _module: *mut PyObject,
    a: *const *mut PyObject,
    nargs: pyo3_ffi::Py_ssize_t,
    kwnames: *mut PyObject,
) -> *mut PyObject {
    boundary(Raise, "set_current_stream", || {
        // SAFETY: CPython calls module functions with the GIL held.
        let py = unsafe { Python::assume_attached()? };
        let mut v = [ptr::null_mut(); 3];
        // SAFETY: CPython's METH_FASTCALL | METH_KEYWORDS convention.
        unsafe { args::parse(py, a, nargs, kwnames, &STREAM_NAMES, 3, &mut v)? };
        let device = stream_device(py, &v)?;
        crate::devices::check_stream_settable(device)?;
        let handle = if args::is_none(py, v[2]) { 0 } else { args::int_value(py, v[2], "stream")? };
        let previous = crate::stream::set_current(device, handle as usize as *mut c_void)?;
        // SAFETY: GIL held.
        py.check(unsafe { (py.PyLong_FromUnsignedLongLong)(previous as usize as u64) })
    })
}

/// `_current_stream(device_type, device_id) -> handle` (0: the default stream).
unsafe extern "C" fn current_stream(
    _module: *mut PyObject,
    a: *const *mut PyObject,
    nargs: pyo3_ffi::Py_ssize_t,
    kwnames: *mut PyObject,
) -> *mut PyObject {
    boundary(Raise, "current_stream", || {
        // SAFETY: CPython calls module functions with the GIL held.
        let py = unsafe { Python::assume_attached()? };
        let mut v = [ptr::null_mut(); 3];
        // SAFETY: CPython's METH_FASTCALL | METH_KEYWORDS convention.
        unsafe { args::parse(py, a, nargs, kwnames, &STREAM_NAMES, 2, &mut v)? };
        let device = stream_device(py, &v)?;
        let stream = crate::stream::current(device);
        // SAFETY: GIL held.
        py.check(unsafe { (py.PyLong_FromUnsignedLongLong)(stream as usize as u64) })
    })
}

static RECORD_NAMES: args::Names = args::Names::with_positional_only(&[c"tensor", c"device_id", c"stream"], 3);

/// `_record_stream(tensor, device_id, handle)`: see `dlpx.cuda.record_stream`.
unsafe extern "C" fn record_stream(
    _module: *mut PyObject,
    a: *const *mut PyObject,
    nargs: pyo3_ffi::Py_ssize_t,
    kwnames: *mut PyObject,
) -> *mut PyObject {
    boundary(Raise, "record_stream", || {
        // SAFETY: CPython calls module functions with the GIL held.
        let py = unsafe { Python::assume_attached()? };
        let mut v = [ptr::null_mut(); 3];
        // SAFETY: CPython's METH_FASTCALL | METH_KEYWORDS convention.
        unsafe { args::parse(py, a, nargs, kwnames, &RECORD_NAMES, 3, &mut v)? };
        if v[0].is_null() {
            return Err(Error::type_error("missing required argument 'tensor'"));
        }
        let tensor = tensor::tensor_of(py, v[0]).ok_or_else(|| {
            Error::type_error(format!("expected a dlpx.Tensor, got {}", crate::cpython::type_name(py, v[0])))
        })?;
        let device_id = args::int_value(py, v[1], "device")?;
        let device_id = i32::try_from(device_id)
            .ok()
            .filter(|d| *d >= 0)
            .ok_or_else(|| Error::value(format!("device {device_id} is invalid")))?;
        crate::devices::check_exists(DLDevice { device_type: DeviceType::CUDA, device_id })?;
        let handle = args::int_value(py, v[2], "stream")?;
        tensor.record_stream(device_id, handle as usize as *mut c_void);
        Ok(py.new_none())
    })
}

unsafe extern "C" fn empty_cache(_module: *mut PyObject, _unused: *mut PyObject) -> *mut PyObject {
    boundary(Raise, "empty_cache", || {
        // SAFETY: CPython calls module functions with the GIL held.
        let py = unsafe { Python::assume_attached()? };
        crate::devices::empty_cache()?;
        Ok(py.new_none())
    })
}

unsafe extern "C" fn cuda_driver_present(_module: *mut PyObject, _unused: *mut PyObject) -> *mut PyObject {
    boundary(Raise, "cuda_driver_present", || {
        // SAFETY: CPython calls module functions with the GIL held.
        let py = unsafe { Python::assume_attached()? };
        Ok(py.new_bool(crate::devices::driver_present()))
    })
}

unsafe extern "C" fn exchange_api_info(_module: *mut PyObject, object: *mut PyObject) -> *mut PyObject {
    boundary(Raise, "exchange_api_info", || {
        // SAFETY: CPython calls module functions with the GIL held.
        let py = unsafe { Python::assume_attached()? };
        info::exchange_api_info(py, object)
    })
}

unsafe extern "C" fn exchange_api_of(_module: *mut PyObject, object: *mut PyObject) -> *mut PyObject {
    boundary(Raise, "exchange_api_of", || {
        // SAFETY: CPython calls module functions with the GIL held.
        let py = unsafe { Python::assume_attached()? };
        let table = crate::producers::kernel::table_of(py, object)?;
        // SAFETY: the token proves the GIL is held; the table lives for the process, so the
        // capsule needs no destructor.
        py.check(unsafe {
            (py.PyCapsule_New)(
                (table as *const DLPackExchangeAPI).cast_mut().cast(),
                c"dlpack_exchange_api".as_ptr(),
                None,
            )
        })
    })
}

unsafe extern "C" fn row_of(_module: *mut PyObject, object: *mut PyObject) -> *mut PyObject {
    boundary(Raise, "_row_of", || {
        // SAFETY: CPython calls module functions with the GIL held.
        let py = unsafe { Python::assume_attached()? };
        py.new_str(producers::row_name(py, object))
    })
}

macro_rules! method {
    ($name:literal, fast $f:ident, $doc:literal) => {
        PyMethodDef {
            ml_name: $name.as_ptr(),
            // SAFETY: the flags below say METH_FASTCALL | METH_KEYWORDS.
            ml_meth: PyMethodDefPointer { PyCFunction: unsafe { fastcall_as_cfunction($f) } },
            ml_flags: crate::cpython::METH_FASTCALL | pyo3_ffi::METH_KEYWORDS,
            ml_doc: $doc.as_ptr(),
        }
    };
    ($name:literal, noargs $f:ident, $doc:literal) => {
        PyMethodDef {
            ml_name: $name.as_ptr(),
            ml_meth: PyMethodDefPointer { PyCFunction: $f },
            ml_flags: pyo3_ffi::METH_NOARGS,
            ml_doc: $doc.as_ptr(),
        }
    };
    ($name:literal, one $f:ident, $doc:literal) => {
        PyMethodDef {
            ml_name: $name.as_ptr(),
            ml_meth: PyMethodDefPointer { PyCFunction: $f },
            ml_flags: pyo3_ffi::METH_O,
            ml_doc: $doc.as_ptr(),
        }
    };
}

const MODULE_DOC: &CStr = c"Native core of dlpx (libdlpx.so loaded as a Python extension module).";

// The module's definition: CPython keeps (and initialises) it for the life of the process.
static METHODS: CStatic<[PyMethodDef; 12]> = CStatic::new([
    method!(c"empty", fast empty, c"empty(shape, dtype='float32', device='cpu') -> Tensor\n\nAn uninitialised compact tensor from dlpx's allocator (the exchange table's)."),
    method!(c"from_dlpack", fast from_dlpack, c"from_dlpack(x, /, *, device=None, copy=None) -> Tensor\n\nImports any DLPack producer's tensor (or a DLPack capsule), zero-copy when possible."),
    method!(c"exchange_api_of", one exchange_api_of, c"exchange_api_of(type_or_object) -> PyCapsule\n\nThe DLPackExchangeAPI a C kernel uses for objects of this type: its own, or dlpx's synthetic one (a PyCapsule named 'dlpack_exchange_api')."),
    method!(c"_row_of", one row_of, c"_row_of(type_or_object) -> str\n\nThe name of the importer row that reads objects of this type."),
    method!(c"exchange_api_info", one exchange_api_info, c"exchange_api_info(type_or_object) -> dict | None\n\nThe exchange table a type publishes: version, the prev_api chain, which entries are set."),
    method!(c"_set_device_class", one set_device_class, c"Registers the class that Tensor.device returns."),
    method!(c"_set_current_stream", fast set_current_stream, c"_set_current_stream(device_type, device_id, handle) -> previous handle"),
    method!(c"_record_stream", fast record_stream, c"_record_stream(tensor, device_id, handle)"),
    method!(c"_empty_cache", noargs empty_cache, c"_empty_cache()"),
    method!(c"_current_stream", fast current_stream, c"_current_stream(device_type, device_id) -> handle (0: default)"),
    PyMethodDef {
        ml_name: c"_cuda_driver_present".as_ptr(),
        ml_meth: PyMethodDefPointer { PyCFunction: cuda_driver_present },
        ml_flags: pyo3_ffi::METH_NOARGS,
        ml_doc: c"Whether libcuda can be loaded in this process.".as_ptr(),
    },
    PyMethodDef::zeroed(),
]);
static DEF: CStatic<PyModuleDef> = CStatic::new(PyModuleDef {
    m_base: pyo3_ffi::PyModuleDef_HEAD_INIT,
    m_name: c"dlpx._native".as_ptr(),
    m_doc: MODULE_DOC.as_ptr(),
    m_size: -1,
    m_methods: METHODS.get().cast(),
    m_slots: ptr::null_mut(),
    m_traverse: None,
    m_clear: None,
    m_free: None,
});

/// Creates the `dlpx._native` module, whose `Tensor` type publishes `own`, dlpx's exchange
/// table (`PyInit__native` on top hands it down). Called by CPython's import machinery, with
/// the GIL held.
pub fn init(own: &'static DLPackExchangeAPI) -> *mut PyObject {
    boundary(Raise, "PyInit__native", || {
        // SAFETY: CPython's import machinery calls PyInit with the GIL held.
        let py = unsafe { Python::assume_attached()? };
        install_gil_release();
        let module = crate::cpython::create_module(py, DEF.get())?;
        let ty = tensor::create_type(py, own, |py, x| producers::import(py, x, Request::PLAIN))?;
        add(py, &module, c"Tensor", ty)?;
        add(py, &module, c"__version__", py.new_str(env!("CARGO_PKG_VERSION"))?)?;
        add(py, &module, c"DEVICE_TYPE_NAMES", device_type_names(py)?)?;
        add(
            py,
            &module,
            c"DLPACK_VERSION",
            int_tuple(py, &[DLPACK_MAJOR_VERSION as i64, DLPACK_MINOR_VERSION as i64])?,
        )?;
        let table = (own as *const DLPackExchangeAPI).cast_mut().cast::<c_void>();
        // SAFETY: GIL held.
        add(py, &module, c"_exchange_api_address", py.check(unsafe { (py.PyLong_FromVoidPtr)(table) })?)?;
        Ok(module.into_ptr())
    })
}

/// `{device_type: name}` for every device type DLPack names (`dlpx.Device` prints these).
fn device_type_names(py: Python<'_>) -> Result<*mut PyObject> {
    // SAFETY: GIL held; every new reference is owned by an `Owned` or stolen by the dict's owner.
    unsafe {
        let dict = Owned::new(py, (py.PyDict_New)())?;
        for row in DeviceType::TABLE {
            let key = Owned::new(py, (py.PyLong_FromLongLong)(row.value.0 as i64))?;
            let name = Owned::new(py, py.new_str(row.name)?)?;
            if (py.PyDict_SetItem)(dict.as_ptr(), key.as_ptr(), name.as_ptr()) != 0 {
                return Err(Error::python_pending());
            }
        }
        Ok(dict.into_ptr())
    }
}

/// Adds `value` (a new reference, stolen) to the module.
fn add(py: Python<'_>, module: &Owned<'_>, name: &CStr, value: *mut PyObject) -> Result<()> {
    // SAFETY: GIL held; PyModule_AddObject steals `value` only on success.
    if unsafe { (py.PyModule_AddObject)(module.as_ptr(), name.as_ptr(), value) } != 0 {
        py.decref(value);
        return Err(Error::python_pending());
    }
    Ok(())
}

/// Lets blocking driver calls release the GIL (the core's hook, `memory::blocking`): installed
/// when Python first calls into dlpx (module import, the kernel API).
pub fn install_gil_release() {
    crate::memory::blocking::install(|run| crate::cpython::without_gil(run));
}
