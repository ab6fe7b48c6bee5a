//! The `torch` row: torch's own table, with the checks torch's `__dlpack__` makes and its table
//! skips (docs/design.md, "Faithful import").

use std::ptr::{self, NonNull};

use pyo3_ffi::{PyObject, PyTypeObject};

use super::{faithful, table, Entry, Producer, Read, Request, Row, Suspicion};
use crate::abi::*;
use crate::cpython::{imported_module, vectorcall_method, GilVar, Interned, Owned, Python};
use crate::error::{Error, Result};
use crate::tensor::Tensor;

pub static ROW: Row = Row { name: "torch", synthetic: None, guard: None, producer: &Torch };
struct Torch;

/// The table `torch.Tensor` publishes, once a type publishing one was seen with torch imported.
static TORCH_TABLE: GilVar<usize> = GilVar::new(0);

impl Producer for Torch {
    fn claims(&self, py: Python<'_>, _ty: *mut PyTypeObject, published: Option<&'static DLPackExchangeAPI>) -> bool {
        published.is_some_and(|table| torch_table(py) == Some(table as *const DLPackExchangeAPI as usize))
    }

    /// torch's table refuses sparse, meta, quantized and nested tensors with C++ errors where its
    /// `__dlpack__` refuses them with BufferError: the producer's own refusal is the answer.
    fn managed(&self, py: Python<'_>, object: *mut PyObject, entry: Entry) -> Read {
        match table::managed_through(py, object, entry.table) {
            Ok(managed) => Ok(Some(managed)),
            Err(err) if err.is_python_pending() => faithful::ask_producer(py, object).map(Some),
            Err(err) => Err(err),
        }
    }

    fn import(&self, py: Python<'_>, object: *mut PyObject, entry: Entry, _: Request) -> Result<Option<Tensor>> {
        match table::import_through(py, object, entry.table) {
            Ok(tensor) => Ok(Some(tensor)),
            Err(err) if err.is_python_pending() => faithful::ask_producer_tensor(py, object).map(Some),
            Err(err) => Err(err),
        }
    }

    fn view(&self, py: Python<'_>, object: *mut PyObject, entry: Entry, out: &mut DLTensor) -> Result<bool> {
        match table::view_through(py, object, entry.table, out) {
            Err(err) if err.is_python_pending() => {
                // The owning read asks the producer for its refusal.
                // SAFETY: the token proves the GIL is held; the table's exception is replaced.
                unsafe { (py.PyErr_Clear)() };
                Ok(false)
            }
            answer => answer,
        }
    }

    /// `requires_grad` (floating and complex dtypes only), the conjugate bit (complex only),
    /// the negative bit (any dtype: `_neg_view`, the imaginary part of a conjugate).
    fn suspicion(&self, py: Python<'_>, object: *mut PyObject, dl: &DLTensor) -> Result<Option<Suspicion>> {
        let code = DataTypeCode(dl.dtype.code);
        let complex = code == DataTypeCode::COMPLEX;
        let floating = complex || crate::dtype::is_floating(dl.dtype);
        let ask_producer = (floating && flag(py, object, &REQUIRES_GRAD)?) || (complex && flag(py, object, &IS_CONJ)?);
        let negated = flag(py, object, &IS_NEG)?;
        Ok((ask_producer || negated).then_some(Suspicion { ask_producer, negated }))
    }

    fn resolved(&self, py: Python<'_>, object: *mut PyObject) -> Result<Option<NonNull<PyObject>>> {
        let resolved = call_method(py, object, &RESOLVE_NEG)?;
        Ok(NonNull::new(resolved.into_ptr()))
    }
}

/// The address of torch's table, when torch is imported.
fn torch_table(py: Python<'_>) -> Option<usize> {
    match TORCH_TABLE.get(py) {
        0 => {
            let torch = imported_module(py, c"torch")?;
            let tensor = crate::cpython::attribute(py, torch.as_ptr(), c"Tensor")?;
            let table = table::published_v1(py, tensor.as_ptr().cast())? as *const DLPackExchangeAPI as usize;
            TORCH_TABLE.set(py, table);
            Some(table)
        }
        table => Some(table),
    }
}

/// A name torch's tensors answer to: an attribute, or a method taking no argument.
struct Name {
    name: Interned,
    method: bool,
}

static REQUIRES_GRAD: Name = Name { name: Interned::new(c"requires_grad"), method: false };
static IS_CONJ: Name = Name { name: Interned::new(c"is_conj"), method: true };
static IS_NEG: Name = Name { name: Interned::new(c"is_neg"), method: true };
static RESOLVE_NEG: Name = Name { name: Interned::new(c"resolve_neg"), method: true };

/// Whether `object.<name>` (or `object.<name>()`) is True.
fn flag(py: Python<'_>, object: *mut PyObject, name: &Name) -> Result<bool> {
    let value = call_method(py, object, name)?;
    Ok(value.as_ptr() == py.true_)
}

fn call_method<'py>(py: Python<'py>, object: *mut PyObject, name: &Name) -> Result<Owned<'py>> {
    let key = name.name.get(py)?;
    // SAFETY: the token proves the GIL is held; `object` and the interned name are live.
    let value = unsafe {
        match (name.method, vectorcall_method()) {
            (false, _) => (py.PyObject_GetAttr)(object, key),
            (true, Some(call)) => call(key, [object].as_ptr(), 1, ptr::null_mut()),
            (true, None) => match Owned::new(py, (py.PyObject_GetAttr)(object, key)) {
                Ok(method) => (py.PyObject_CallObject)(method.as_ptr(), ptr::null_mut()),
                Err(_) => ptr::null_mut(),
            },
        }
    };
    Owned::new(py, value).map_err(|_| Error::python_pending())
}
