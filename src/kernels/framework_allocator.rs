//! A framework's allocator (its exchange table's `managed_tensor_allocator`), asked for one
//! compact tensor for a kernel to write. Its answer is held to the request before anyone writes
//! through it: a kernel writes `numel` items at `data`, so a tensor of another shape, dtype or
//! device, without data, starting past `data` or of another DLPack major is a framework's bug
//! that would otherwise become a write past its memory. The answer's failure modes are named too: a failure it did not
//! report, a success without a tensor, a second report (only the first is kept).

use std::ffi::{c_char, c_void};
use std::ptr::{self, NonNull};

use crate::abi::*;
use crate::error::{Error, Result};

/// A new tensor of `shape`, `dtype` on `device` from `allocator`, checked against the request;
/// the caller owns it (calls its deleter once). An answer that is not the tensor asked for is
/// deleted here and refused.
///
/// # Safety
/// `allocator` follows DLPack's `DLPackManagedTensorAllocator` contract (it may be called
/// without the GIL, as the spec allows).
pub unsafe fn allocate(
    allocator: DLPackManagedTensorAllocator,
    device: DLDevice,
    dtype: DLDataType,
    shape: &[i64],
) -> Result<NonNull<DLManagedTensorVersioned>> {
    let allocator = allocator.ok_or_else(|| Error::not_implemented("the framework's table has no allocator"))?;
    let mut prototype = DLTensor {
        data: ptr::null_mut(),
        device,
        ndim: shape.len() as i32,
        dtype,
        shape: shape.as_ptr().cast_mut(),
        strides: ptr::null_mut(),
        byte_offset: 0,
    };
    let mut reported: Option<Error> = None;
    let mut out: *mut DLManagedTensorVersioned = ptr::null_mut();
    // SAFETY: the allocator's contract: a prototype whose shape is `ndim` long, a writable out,
    // and a SetError that records into `reported` (no Python: it may run without the GIL).
    let status = unsafe {
        allocator(&mut prototype, &mut out, (&mut reported as *mut Option<Error>).cast(), Some(reported_error))
    };
    match (status, NonNull::new(out)) {
        (0, Some(managed)) => {
            // SAFETY: a managed tensor the allocator handed over, live until its deleter.
            match unsafe { other_than_asked(managed.as_ref(), device, dtype, shape) } {
                None => Ok(managed),
                Some(what) => {
                    // SAFETY: live, as above.
                    if let Some(deleter) = unsafe { managed.as_ref() }.deleter {
                        // SAFETY: ours to delete, once; not used after.
                        unsafe { deleter(managed.as_ptr()) };
                    }
                    Err(Error::runtime(format!("the allocator gave a tensor other than the one asked for: {what}")))
                }
            }
        }
        (0, None) => Err(Error::runtime("the allocator reported success and gave no tensor")),
        _ => Err(reported.unwrap_or_else(|| Error::memory("the allocator failed without saying why"))),
    }
}

/// How `managed` differs from a compact tensor of `shape`, `dtype` on `device`; None when it
/// does not.
///
/// # Safety
/// `managed` is live; its shape and strides (where not NULL) hold `ndim` values.
unsafe fn other_than_asked(
    managed: &DLManagedTensorVersioned,
    device: DLDevice,
    dtype: DLDataType,
    shape: &[i64],
) -> Option<String> {
    if managed.version.major != DLPACK_MAJOR_VERSION {
        return Some(format!("DLPack major {} (dlpx reads {DLPACK_MAJOR_VERSION})", managed.version.major));
    }
    let t = &managed.dl_tensor;
    if t.device != device || t.dtype != dtype || usize::try_from(t.ndim).ok() != Some(shape.len()) {
        return Some("another device, dtype or ndim".to_string());
    }
    let dims = |p: *const i64| match shape.len() {
        0 => Some(&[][..]),
        // SAFETY: `ndim` values where not NULL, by the contract.
        n => (!p.is_null()).then(|| unsafe { std::slice::from_raw_parts(p, n) }),
    };
    if dims(t.shape) != Some(shape) {
        return Some("another shape".to_string());
    }
    if let Some(strides) = dims(t.strides) {
        if !crate::layout::is_contiguous(shape, strides) {
            return Some("strides that are not compact row-major".to_string());
        }
    }
    if t.byte_offset != 0 {
        // Kernels write from `data` (kernel.h's promise of a fresh output), as the examples do.
        return Some(format!("byte_offset {} (a new output starts at data)", t.byte_offset));
    }
    (t.data.is_null() && !shape.contains(&0)).then(|| "no data".to_string())
}

/// The `SetError` the allocator is given: the first error goes into the caller's slot.
unsafe extern "C" fn reported_error(context: *mut c_void, kind: *const c_char, message: *const c_char) {
    crate::error::guard("allocate", || {
        // SAFETY: the allocator passes NUL-terminated strings (or NULL), valid for the call.
        let err = unsafe { Error::from_set_error(kind, message) };
        // SAFETY: `context` is the `Option<Error>` `allocate` passed, live for the call.
        let slot = unsafe { &mut *context.cast::<Option<Error>>() };
        slot.get_or_insert(err);
    });
}
