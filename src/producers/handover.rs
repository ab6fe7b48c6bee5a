//! What a row hands over for an object (a [`Handover`]: the managed tensor in the form the
//! producer gave it, a view, or nothing), and what the seam makes of it: a [`Tensor`] for Python,
//! an owning managed tensor for C. Whatever a producer handed over is checked on the way out as
//! hostile input (docs/design.md, "Hostile input"), whichever row read it, and a refused one is
//! deleted once; what dlpx made from fields it checked (`Made`) is handed on as made.

use std::marker::PhantomData;
use std::mem::ManuallyDrop;
use std::ptr::NonNull;

use super::rows::dlpack;
use super::Ask;
use pyo3_ffi::PyObject;

use crate::abi::*;
use crate::capsule;
use crate::cpython::{Owned, Python};
use crate::error::{Error, Result};
use crate::tensor::{self, Tensor};

/// What a row hands over for an object (inside its [`Answer`](super::Answer)): the object's
/// managed tensor, in the form the row got it, or a borrowed view; or nothing, where the
/// producer's own `__dlpack__` answers or judges instead. Dropped unused, it lets go of what it holds (a managed tensor's deleter runs once).
pub enum Handover<'py> {
    /// dlpx's own tensor, shared (the `dlpx` row), valid while the caller holds the object.
    Own(&'py Tensor),
    /// An owning versioned managed tensor a producer handed over (its table's, or one dlpx filled
    /// with the producer's own description): checked on its way out.
    Managed(Managed),
    /// One dlpx made from fields its row read and checked (numpy's array struct): valid as made,
    /// as the allocator's blocks are, with room for a `Tensor`'s core in front of it (`held`,
    /// `held_buffer`).
    Made(Managed),
    /// A DLPack capsule the producer's own export made, its tensor not yet taken out.
    Capsule(Capsule<'py>),
    /// A non-owning view, written where the entry point asked (`Ask::view`), valid while the
    /// caller holds the object.
    View,
    /// Nothing: the row does not cover this object (the producer's own `__dlpack__` answers).
    Uncovered,
    /// The row's read refused the object where the producer's own `__dlpack__` may not (torch's
    /// table fails on what its `__dlpack__` refuses with BufferError): the producer's verdict
    /// stands, as for a suspect handover.
    Refused,
}

/// An owning versioned managed tensor: dropped, its deleter runs once.
pub struct Managed(NonNull<DLManagedTensorVersioned>);

impl Managed {
    /// # Safety
    /// `managed` is live and its owner gives it up.
    pub unsafe fn new(managed: NonNull<DLManagedTensorVersioned>) -> Managed {
        Managed(managed)
    }

    /// The managed tensor, given up by this owner.
    fn into_raw(self) -> NonNull<DLManagedTensorVersioned> {
        ManuallyDrop::new(self).0
    }
}

/// A strong reference to a DLPack capsule, released on drop. One word (where `Owned` keeps its
/// token too), so that a [`Handover`] is two and a row's answer travels in registers.
pub struct Capsule<'py> {
    object: NonNull<PyObject>,
    attached: PhantomData<Python<'py>>,
}

impl<'py> Capsule<'py> {
    pub fn as_ptr(&self) -> *mut PyObject {
        self.object.as_ptr()
    }

    fn into_owned(self, py: Python<'py>) -> Owned<'py> {
        let object = ManuallyDrop::new(self).object;
        // SAFETY: the reference this capsule held, handed on.
        Owned::new(py, object.as_ptr()).expect("a capsule's reference is not NULL")
    }
}

impl Drop for Capsule<'_> {
    fn drop(&mut self) {
        // SAFETY: the capsule lives within `'py`, while this thread holds the GIL; its reference
        // is ours, released once, here. (Without an API there would be no capsule.)
        if let Ok(py) = unsafe { Python::assume_attached() } {
            py.decref(self.object.as_ptr());
        }
    }
}

impl Drop for Managed {
    fn drop(&mut self) {
        // SAFETY: ours (`new`'s contract), given up once, here.
        unsafe { tensor::delete_managed(self.0) };
    }
}

impl<'py> Handover<'py> {
    /// The handover of the capsule a producer's export made.
    pub fn capsule(capsule: Owned<'py>) -> Handover<'py> {
        let object = NonNull::new(capsule.into_ptr()).expect("an owned reference is not NULL");
        Handover::Capsule(Capsule { object, attached: PhantomData })
    }

    /// The handover of an owning managed tensor a producer handed over.
    ///
    /// # Safety
    /// As for [`Managed::new`].
    pub unsafe fn managed(managed: NonNull<DLManagedTensorVersioned>) -> Handover<'py> {
        // SAFETY: forwarded contract.
        Handover::Managed(unsafe { Managed::new(managed) })
    }

    /// The handover of an owning managed tensor dlpx made valid from what a row read and checked.
    ///
    /// # Safety
    /// As for [`Managed::new`]; `managed` is valid as `Tensor::from_managed` checks it, and has
    /// room for a core in front of it as `Tensor::from_made` asks (`held`, `held_buffer`).
    pub unsafe fn made(managed: NonNull<DLManagedTensorVersioned>) -> Handover<'py> {
        // SAFETY: forwarded contract.
        Handover::Made(unsafe { Managed::new(managed) })
    }

    /// The tensor's description, where one is at hand without taking the tensor out: not in a
    /// capsule (whose tensor is the producer's own export, so there is nothing to suspect); a
    /// view's is where the entry point asked for it (`ask`).
    #[inline(always)]
    pub fn dl_tensor<'a>(&'a self, ask: Ask<'a>) -> Option<&'a DLTensor> {
        match self {
            Handover::Own(tensor) => Some(tensor.dl_tensor()),
            // SAFETY: a live managed tensor we own: its version first (in every major's prefix),
            // and the rest only of a major whose layout dlpx knows (the check on the way out
            // refuses the others).
            Handover::Managed(managed) => unsafe {
                match crate::validate::major_of(managed.0.as_ptr()) {
                    DLPACK_MAJOR_VERSION => Some(&managed.0.as_ref().dl_tensor),
                    _ => None,
                }
            },
            // SAFETY: a live managed tensor dlpx made, of its own major.
            Handover::Made(managed) => Some(unsafe { &managed.0.as_ref().dl_tensor }),
            Handover::Capsule(_) | Handover::Uncovered | Handover::Refused => None,
            // SAFETY: the row wrote the view; nothing writes the cell while the reference lives.
            Handover::View => ask.view.map(|view| unsafe { &*view.as_ptr() }),
        }
    }

    /// The handover as a [`Tensor`] (`from_dlpack`, `dlpx.Tensor(x)`): checked, a refused tensor
    /// deleted once.
    #[inline]
    pub fn into_tensor(self, py: Python<'py>) -> Result<Tensor> {
        match self {
            Handover::Own(tensor) => Ok(tensor.clone()),
            // SAFETY: ours; a refused tensor is deleted there.
            Handover::Managed(managed) => unsafe { Tensor::from_managed_or_delete(managed.into_raw()) },
            // SAFETY: ours, valid as made, with the core's room (`made`'s contract).
            Handover::Made(managed) => Ok(unsafe { Tensor::from_made(managed.into_raw()) }),
            Handover::Capsule(capsule) => capsule::consume(py, capsule.as_ptr()),
            Handover::View | Handover::Uncovered | Handover::Refused => Err(unexpected()),
        }
    }

    /// The handover as an owning managed tensor for C (`dlpx_import`, a view's owner, the
    /// synthetic tables), checked as `from_dlpack` checks it and handed on as the producer made
    /// it where it can be: a legacy one in a versioned wrapper (`legacy::wrap`); one whose
    /// strides are NULL (an old producer's compact row-major), which a C caller cannot index,
    /// spelled out by an export of a [`Tensor`].
    pub fn into_managed(self, py: Python<'py>) -> Result<NonNull<DLManagedTensorVersioned>> {
        match self {
            Handover::Own(tensor) => tensor.export_versioned(0),
            Handover::Managed(managed) => {
                let managed = managed.into_raw();
                // SAFETY: ours; a refused tensor is deleted there.
                if unsafe { tensor::check_managed_or_delete(managed)? } {
                    return Ok(managed);
                }
                // SAFETY: checked and ours; a failure deletes it.
                unsafe { Tensor::from_managed_or_delete(managed)? }.export_versioned(0)
            }
            Handover::Made(managed) => Ok(managed.into_raw()),
            Handover::Capsule(capsule) => dlpack::hand_on(py, capsule.into_owned(py)),
            Handover::View | Handover::Uncovered | Handover::Refused => Err(unexpected()),
        }
    }
}

/// A handover no entry point takes where it stands: a view where an owner was asked for, or a
/// row's "not mine", which the seam answers before any entry point sees it.
#[cold]
fn unexpected() -> Error {
    Error::runtime("a row answered a view, or nothing, where an owner was asked for")
}
