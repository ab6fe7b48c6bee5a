//! The `dlpx` row: `dlpx.Tensor` and subclasses that keep its table are shared, not imported.

use pyo3_ffi::{PyObject, PyTypeObject};

use crate::abi::*;
use crate::cpython::Python;
use crate::producers::{Answer, Ask, Entry, Handover, Producer, Row};
use crate::tensor_type::{self, own_table, tensor_of};

pub static ROW: Row = Row { name: "dlpx", synthetic: None, guard: None, suspect: None, home: None, producer: &Own };
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

    /// The tensor itself, shared (a view, an export or a clone is the entry point's to make).
    fn answer<'py>(&self, py: Python<'py>, object: *mut PyObject, _: Entry, _: Ask<'_>) -> Answer<'py> {
        Ok(tensor_of(py, object).map_or(Handover::Uncovered, Handover::Own))
    }
}
