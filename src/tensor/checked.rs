//! What a versioned managed tensor handed to dlpx is, checked before it is taken: one of dlpx's
//! exports coming home (taken back), a block of dlpx's allocator, or a producer's (every field
//! a tensor could be refused for read, docs/design.md "Hostile input"). A refused one stays its
//! owner's, or is deleted once where the owner gave it up.

use std::ptr::NonNull;

use super::export::{self, is_our_export};
use crate::abi::*;
use crate::allocation;
use crate::error::{Error, Result};
use crate::validate::{check_imported, check_major, major_of};

/// What [`check_versioned`] found a versioned managed tensor to be.
pub(super) enum Checked {
    /// An export of a dlpx tensor (its manager_ctx is a `Shared<Core>`).
    OurExport,
    /// Any other valid tensor (a producer's, or a block of dlpx's allocator, read alike: its
    /// owner may have written its description); owned shape+strides when its strides were NULL.
    Foreign(Option<Box<[i64]>>),
}

/// Validates a versioned managed tensor without taking it: its major version first (nothing
/// else of an unknown major is read), then everything [`check_imported`] checks.
///
/// # Safety
/// `managed` points to a live managed tensor.
pub(super) unsafe fn check_versioned(managed: NonNull<DLManagedTensorVersioned>) -> Result<Checked> {
    // SAFETY: live by the caller's contract; only the version is read before the version check
    // allows a reference to the whole v1 struct.
    check_major(unsafe { major_of(managed.as_ptr()) })?;
    // SAFETY: a v1 struct, live.
    let m = unsafe { managed.as_ref() };
    // A read-only export of a writable tensor, or one whose owner rewrote its description, is
    // read as any producer's (a tensor of its own, holding the export), not taken back.
    if is_our_export(m) && !export::adds_read_only(m) && export::describes_its_tensor(&m.dl_tensor, m.manager_ctx) {
        return Ok(Checked::OurExport);
    }
    // A block of dlpx's allocator was valid as made, but its owner may have written its
    // description since: it is read as any producer's, within the room its block has.
    // SAFETY: one of our blocks, live, reached through the caller's pointer.
    if allocation::is_ours(m) && unsafe { allocation::reads_past_its_block(managed) } {
        return Err(Error::buffer(format!(
            "ndim = {} is more dimensions than this tensor of dlpx's allocator was made with",
            m.dl_tensor.ndim
        )));
    }
    // SAFETY: as above; the version is known, so the whole struct may be read (a block's
    // description lies within it, or where its owner put it).
    Ok(Checked::Foreign(unsafe { check_imported(&m.dl_tensor, m.flags)? }))
}

/// Validates a producer's managed tensor that is to be handed on as it is (the kernel API
/// passes a table's tensor straight to C): Ok(true) when it is valid and complete, Ok(false)
/// when it is valid but its strides are NULL (an old producer's compact row-major), which a
/// C caller cannot index: wrap it in a [`Tensor`] and export that instead. On error the tensor
/// has been deleted (refused tensors are never handed on).
///
/// # Safety
/// `managed` points to a live managed tensor that the caller owns and gives up on error.
pub unsafe fn check_managed_or_delete(managed: NonNull<DLManagedTensorVersioned>) -> Result<bool> {
    // SAFETY: forwarded contract.
    match unsafe { check_versioned(managed) } {
        Ok(Checked::Foreign(Some(_))) => Ok(false),
        Ok(_) => Ok(true),
        Err(err) => {
            // SAFETY: refused, so still the caller's, which gave it up to us.
            unsafe { delete_managed(managed) };
            Err(err)
        }
    }
}

/// Deletes a managed tensor its owner gives up (one dlpx refused, or one it no longer needs).
/// The deleter sits in the prefix every major version keeps, so it is called even for a major
/// dlpx cannot read.
///
/// # Safety
/// `managed` is live and owned by the caller, who gives it up.
pub unsafe fn delete_managed(managed: NonNull<DLManagedTensorVersioned>) {
    // SAFETY: per the contract; only the stable prefix is read.
    unsafe {
        if let Some(deleter) = std::ptr::addr_of!((*managed.as_ptr()).deleter).read() {
            deleter(managed.as_ptr());
        }
    }
}
