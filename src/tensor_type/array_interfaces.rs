//! `dlpx.Tensor`'s array interfaces (docs/design.md R12): numpy's `__array_interface__` (v3) for
//! host memory, `__cuda_array_interface__` (v3, with the stream a reader synchronises with) for
//! memory a CUDA kernel addresses, and numpy 2's `__array__(dtype=None, copy=None)`. Each is
//! absent (AttributeError) where it does not describe the tensor's memory, so a reader that
//! looks for it moves on to what does.

use std::ffi::{c_void, CStr};

use pyo3_ffi::PyObject;

use super::this;
use crate::abi::DLDevice;
use crate::args::{self, FastArgs};
use crate::array_formats;
use crate::cpython::{attribute_error, int_tuple, Owned, Python};
use crate::devices;
use crate::dtype::dtype_name;
use crate::error::{Error, Result};
use crate::tensor::Tensor;

/// `dlpx.Tensor.__array_interface__`: the tensor's host memory, described for numpy (which keeps
/// the tensor alive as the array's base).
pub(super) fn array_interface(py: Python<'_>, object: *mut PyObject) -> Result<*mut PyObject> {
    let tensor = this(py, object)?;
    let device = tensor.dl_tensor().device;
    if !devices::host_accessible(device.device_type) {
        let other = devices::kernel_addressable(device.device_type).then_some("__cuda_array_interface__");
        return Err(absent(py, device, "__array_interface__ (host memory only)", other));
    }
    describe(py, tensor, None)
}

/// `dlpx.Tensor.__cuda_array_interface__` (version 3): with `stream`, the stream dlpx's work
/// on the tensor is ordered on (its current stream there), which a reader synchronises with.
pub(super) fn cuda_array_interface(py: Python<'_>, object: *mut PyObject) -> Result<*mut PyObject> {
    let tensor = this(py, object)?;
    let device = tensor.dl_tensor().device;
    if !devices::kernel_addressable(device.device_type) {
        let other = devices::host_accessible(device.device_type).then_some("__array_interface__");
        return Err(absent(py, device, "__cuda_array_interface__ (CUDA memory only)", other));
    }
    describe(py, tensor, Some(devices::interface_stream(device)))
}

/// The AttributeError of an interface that does not describe memory on `device`, naming the
/// other interface where that one does.
#[cold]
fn absent(py: Python<'_>, device: DLDevice, what: &str, other: Option<&str>) -> Error {
    let on = crate::device_names::name(device);
    let other = other.map(|other| format!("{other} or ")).unwrap_or_default();
    attribute_error(py, &format!("dlpx.Tensor on {on} has no {what}: use {other}__dlpack__"))
}

/// The interface's dict: shape, typestr (and descr), data and its read-only flag, strides in
/// bytes (None when C-contiguous), version 3, and for CUDA the stream.
fn describe(py: Python<'_>, tensor: &Tensor, stream: Option<Option<i64>>) -> Result<*mut PyObject> {
    let dl = tensor.dl_tensor();
    let typestr = array_formats::typestr(dl.dtype).ok_or_else(|| {
        Error::buffer(format!(
            "{} has no typestr (the array interfaces spell bool, (u)int8-64, float16-64 and complex64/128)",
            dtype_name(dl.dtype)
        ))
    })?;
    let item = (dl.dtype.bits / 8) as i64;
    let dict = Owned::new(py, py.new_dict()?)?;
    let typestr_object = Owned::new(py, py.new_str(&typestr)?)?;
    // SAFETY: GIL held; every object below is new and owned here (PyTuple_SetItem steals one
    // reference: each is handed over once), the dict takes its own references.
    unsafe {
        let set =
            |key: &CStr, value: Owned<'_>| match (py.PyDict_SetItemString)(dict.as_ptr(), key.as_ptr(), value.as_ptr())
            {
                0 => Ok(()),
                _ => Err(Error::python_pending()),
            };
        set(c"shape", Owned::new(py, int_tuple(py, tensor.shape())?)?)?;
        set(c"typestr", typestr_object.clone_ref())?;
        let field = Owned::new(py, (py.PyTuple_New)(2))?;
        (py.PyTuple_SetItem)(field.as_ptr(), 0, py.new_str("")?);
        (py.PyTuple_SetItem)(field.as_ptr(), 1, typestr_object.clone_ref().into_ptr());
        let descr = Owned::new(py, py.new_list()?)?;
        if (py.PyList_Append)(descr.as_ptr(), field.as_ptr()) != 0 {
            return Err(Error::python_pending());
        }
        set(c"descr", descr)?;
        let address = if dl.data.is_null() { 0 } else { dl.data as usize + dl.byte_offset as usize };
        let data = Owned::new(py, (py.PyTuple_New)(2))?;
        (py.PyTuple_SetItem)(data.as_ptr(), 0, py.check((py.PyLong_FromVoidPtr)(address as *mut c_void))?);
        (py.PyTuple_SetItem)(data.as_ptr(), 1, py.new_bool(tensor.is_readonly()));
        set(c"data", data)?;
        let strides = match tensor.is_contiguous() {
            true => Owned::new(py, py.new_none())?,
            false => Owned::new(py, int_tuple(py, &tensor.strides().iter().map(|s| s * item).collect::<Vec<_>>())?)?,
        };
        set(c"strides", strides)?;
        set(c"version", Owned::new(py, py.new_int(3)?)?)?;
        if let Some(stream) = stream {
            let value = match stream {
                Some(handle) => py.new_int(handle)?,
                None => py.new_none(),
            };
            set(c"stream", Owned::new(py, value)?)?;
        }
    }
    Ok(dict.into_ptr())
}

pub(super) const ARRAY_DOC: &CStr = c"__array__($self, /, dtype=None, copy=None)
--

numpy 2's protocol: the tensor's host memory in place (a view that keeps the tensor alive),
converted to dtype when one is given; copy=True always copies, copy=False raises ValueError
where a copy cannot be avoided (another dtype, or a tensor in device memory, which is copied
to the host otherwise).";
static NAMES: args::Names = args::Names::new(&[c"dtype", c"copy"]);

/// `dlpx.Tensor.__array__`.
pub(super) fn array(py: Python<'_>, object: *mut PyObject, args: FastArgs<'_>) -> Result<*mut PyObject> {
    let [dtype, copy] = args.parse(py, &NAMES, 2)?;
    let copy = args::optional_bool(py, copy, "copy")?;
    let tensor = this(py, object)?;
    let dl = tensor.dl_tensor();
    if array_formats::typestr(dl.dtype).is_none() {
        return Err(Error::buffer(format!("{} has no numpy dtype", dtype_name(dl.dtype))));
    }
    let on_host = devices::host_accessible(dl.device.device_type);
    if !on_host && copy == Some(false) {
        return Err(Error::value(format!(
            "the tensor is on {}: an array of it is a copy to the host, and copy=False forbids it",
            crate::device_names::name(dl.device)
        )));
    }
    let host = match on_host {
        true => Owned::from_borrowed(py, std::ptr::NonNull::new(object).ok_or_else(|| Error::null("self"))?),
        false => Owned::new(py, super::wrap(py, crate::copy::to_new_cpu_tensor(tensor)?)?)?,
    };
    // SAFETY: GIL held; a NUL-terminated name.
    let numpy = Owned::new(py, unsafe { (py.PyImport_ImportModule)(c"numpy".as_ptr()) })?;
    // The buffer protocol of the host tensor, through a memoryview (numpy.asarray of the tensor
    // itself would come back here should the buffer be refused).
    // SAFETY: GIL held; a live object.
    let view = Owned::new(py, unsafe { (py.PyMemoryView_FromObject)(host.as_ptr()) })?;
    let mut array = call(py, &numpy, c"asarray", &[view.as_ptr()], None)?;
    let mut copied = !on_host;
    if !args::is_none(py, dtype) {
        let converted = call(py, &array, c"astype", &[dtype], Some((c"copy", py.new_bool(false))))?;
        if converted.as_ptr() != array.as_ptr() {
            if copy == Some(false) {
                return Err(Error::value("the dtype asked for needs a converted copy, and copy=False forbids it"));
            }
            copied = true;
            array = converted;
        }
    }
    if copy == Some(true) && !copied {
        array = call(py, &array, c"copy", &[], None)?;
    }
    Ok(array.into_ptr())
}

/// `object.name(*args, **{keyword})`.
fn call<'py>(
    py: Python<'py>,
    object: &Owned<'py>,
    name: &CStr,
    args: &[*mut PyObject],
    keyword: Option<(&CStr, *mut PyObject)>,
) -> Result<Owned<'py>> {
    // SAFETY: GIL held; new references are owned by `Owned`s, borrowed ones live for the call.
    unsafe {
        let method = Owned::new(py, (py.PyObject_GetAttrString)(object.as_ptr(), name.as_ptr()))?;
        let tuple = Owned::new(py, (py.PyTuple_New)(args.len() as _))?;
        for (i, &arg) in args.iter().enumerate() {
            (py.Py_IncRef)(arg);
            (py.PyTuple_SetItem)(tuple.as_ptr(), i as _, arg);
        }
        let kwargs = match keyword {
            Some((key, value)) => {
                let value = Owned::new(py, value)?;
                let dict = Owned::new(py, py.new_dict()?)?;
                if (py.PyDict_SetItemString)(dict.as_ptr(), key.as_ptr(), value.as_ptr()) != 0 {
                    return Err(Error::python_pending());
                }
                Some(dict)
            }
            None => None,
        };
        let kwargs_ptr = kwargs.as_ref().map_or(std::ptr::null_mut(), |d| d.as_ptr());
        Owned::new(py, (py.PyObject_Call)(method.as_ptr(), tuple.as_ptr(), kwargs_ptr))
    }
}
