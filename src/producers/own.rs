//! The `dlpx` row: `dlpx.Tensor` and subclasses that keep its table are shared, not imported.

use pyo3_ffi::{PyObject, PyTypeObject};

use super::{Entry, Producer, Read, Request, Row};
use crate::abi::*;
use crate::cpython::Python;
use crate::error::Result;
use crate::tensor::Tensor;
use crate::tensor_type::{self, own_table, tensor_of};

pub static ROW: Row = Row { name: "dlpx", synthetic: None, guard: None, producer: &Own };
struct Own;

/// The entry of an exact `dlpx.Tensor`, answered before the cache is asked.
#[inline]
pub fn exact_entry() -> Option<Entry> {
    own_table().map(|table| Entry { row: &ROW, table })
}

impl Producer for Own {
    /// A subclass that publishes something else (another table, or none and a `__dlpack__` of
    /// its own) is imported through what it publishes, as any producer's subclass is.
    fn claims(&self, py: Python<'_>, ty: *mut PyTypeObject, published: Option<&'static DLPackExchangeAPI>) -> bool {
        tensor_type::is_tensor_type(py, ty) && published.zip(own_table()).is_some_and(|(a, b)| std::ptr::eq(a, b))
    }

    fn managed(&self, py: Python<'_>, object: *mut PyObject, _: Entry) -> Read {
        tensor_of(py, object).map(|t| t.export_versioned(0)).transpose()
    }

    fn import(&self, py: Python<'_>, object: *mut PyObject, _: Entry, _: Request) -> Result<Option<Tensor>> {
        Ok(tensor_of(py, object).cloned())
    }

    fn view(&self, py: Python<'_>, object: *mut PyObject, _: Entry, out: &mut DLTensor) -> Result<bool> {
        let Some(t) = tensor_of(py, object) else { return Ok(false) };
        // The kernel taking the view works on dlpx's current stream: recorded as a user.
        t.record_current_stream();
        *out = *t.dl_tensor();
        Ok(true)
    }
}
