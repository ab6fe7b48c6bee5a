//! Validation of what a producer or caller hands dlpx, read as hostile (docs/design.md,
//! "Hostile input"): the major version before anything else of a managed tensor, then ndim,
//! shape, strides, dtype, device and the byte size, each against overflow. Every import, view
//! and kernel argument passes through here; nothing else reads a foreign `DLTensor` first.

use crate::abi::*;
use crate::error::{Error, Result};
use crate::layout;

/// The major version of a versioned managed tensor, read from the prefix every major keeps.
///
/// # Safety
/// `managed` points to a live managed tensor of any major version.
#[inline]
pub unsafe fn major_of(managed: *const DLManagedTensorVersioned) -> u32 {
    // SAFETY: per the contract; only the version, in every major's stable prefix, is read.
    unsafe { std::ptr::addr_of!((*managed).version.major).read() }
}

/// Refuses a major version dlpx cannot read (docs/design.md R7): nothing else of it may be read.
#[inline]
pub fn check_major(major: u32) -> Result<()> {
    match major {
        DLPACK_MAJOR_VERSION => Ok(()),
        _ => Err(unsupported_major(major)),
    }
}

#[cold]
fn unsupported_major(major: u32) -> Error {
    Error::buffer(format!("unsupported DLPack major version {major} (dlpx supports {DLPACK_MAJOR_VERSION})"))
}

/// The flags of a legacy (unversioned) tensor once imported: it carries none, so nothing says
/// it may be written: read-only, as numpy imports it (docs/design.md, "Faithful import").
pub const LEGACY_FLAGS: u64 = DLPACK_FLAG_BITMASK_READ_ONLY;

/// `ndim` values at `ptr` (none for NULL or a non-positive `ndim`).
fn dims<'a>(ptr: *const i64, ndim: i32) -> &'a [i64] {
    if ndim <= 0 || ptr.is_null() {
        &[]
    } else {
        // SAFETY: the callers' contract: a non-NULL shape or strides holds `ndim` values.
        unsafe { std::slice::from_raw_parts(ptr, ndim as usize) }
    }
}

/// Validates a view, with its DLPack `flags` (a non-owning view a producer filled,
/// `dltensor_from_py_object_no_sync`, has none; a C caller's tensor its own): Ok(true) when it
/// can be handed on, Ok(false) when its strides are NULL (an owner must spell them out).
///
/// # Safety
/// `dl.shape` and `dl.strides`, when non-NULL, point to `dl.ndim` values.
#[inline(always)]
pub unsafe fn check_view(dl: &DLTensor, flags: u64) -> Result<bool> {
    // Sizes as `flags` say: a producer's view carries none (packed), a C caller's may be padded.
    // SAFETY: forwarded contract (both calls).
    if unsafe { is_sound(dl, flags) } {
        return Ok(true);
    }
    // SAFETY: forwarded contract.
    Ok(unsafe { check_fully(dl, flags)? }.is_none())
}

/// Whether `dl` passes every check of [`check_imported`] and has its strides: the common case,
/// decided without building a message or a result (every import and kernel view runs it).
///
/// # Safety
/// As for [`check_imported`].
#[inline]
pub unsafe fn is_sound(dl: &DLTensor, flags: u64) -> bool {
    if !(0..=layout::MAX_NDIM as i32).contains(&dl.ndim)
        || !crate::device_names::is_known(dl.device.device_type)
        || dl.device.device_id < 0
        || !crate::dtype::is_valid(dl.dtype)
    {
        return false;
    }
    let bits = layout::element_bits(dl.dtype, flags);
    if dl.ndim == 0 {
        return !dl.data.is_null() && layout::reach(&[], &[], bits).is_ok_and(|r| addresses_fit(dl, r));
    }
    if dl.shape.is_null() || dl.strides.is_null() {
        return false;
    }
    // The caller's contract: `ndim` (checked above) extents and strides.
    let (shape, strides) = (dims(dl.shape, dl.ndim), dims(dl.strides, dl.ndim));
    // Whole-byte items, the common case: the count and the reach in one pass.
    let counted = match bits % 8 {
        0 => layout::count_and_reach(shape, strides, bits / 8),
        _ => None,
    };
    match counted {
        Some((numel, reach)) => {
            numel.checked_mul(bits).is_some() && (numel == 0 || (!dl.data.is_null() && addresses_fit(dl, reach)))
        }
        None => sound_in_bits(dl, shape, strides, bits),
    }
}

/// [`is_sound`] for sub-byte items, and for what the one pass could not decide.
#[inline(never)]
fn sound_in_bits(dl: &DLTensor, shape: &[i64], strides: &[i64], bits: u64) -> bool {
    let mut numel: u64 = 1;
    for &extent in shape {
        // A negative extent, or a product that overflows (which a zero extent may still
        // excuse), is left to the full check.
        match u64::try_from(extent).ok().and_then(|e| numel.checked_mul(e)) {
            Some(product) => numel = product,
            None => return false,
        }
    }
    numel.checked_mul(bits).is_some()
        && (numel == 0 || !dl.data.is_null())
        && layout::reach(shape, strides, bits).is_ok_and(|r| r.above == 0 || addresses_fit(dl, r))
}

/// Whether the addresses `reach` spans around `dl`'s first element exist.
#[inline(always)]
fn addresses_fit(dl: &DLTensor, reach: layout::Reach) -> bool {
    layout::addresses_fit(dl.data, dl.byte_offset, reach)
}

/// Refuses strides whose byte offsets overflow, or a reach that wraps the address space: an
/// index computed from them would land outside the tensor (issue: `strides=(2**61, 1)` read
/// through a wrapped byte stride).
#[inline(always)]
fn check_reach(dl: &DLTensor, shape: &[i64], strides: &[i64], bits: u64) -> Result<()> {
    let reach =
        layout::reach(shape, strides, bits).map_err(|dim| layout::overflowing_strides(shape, strides, dim, bits))?;
    // An empty tensor (no bytes above its first element: it has none) addresses nothing.
    if reach.above > 0 && !addresses_fit(dl, reach) {
        return Err(layout::wrapping_addresses(dl.data, dl.byte_offset, reach));
    }
    Ok(())
}

/// Checks what a foreign producer sent; returns owned shape+strides when its strides are NULL
/// (pre-1.2 producers meant compact row-major by that).
///
/// # Safety
/// `dl.shape` and `dl.strides`, when non-NULL, point to `dl.ndim` values.
pub unsafe fn check_imported(dl: &DLTensor, flags: u64) -> Result<Option<Box<[i64]>>> {
    // SAFETY: forwarded contract (both calls).
    if unsafe { is_sound(dl, flags) } {
        return Ok(None);
    }
    // SAFETY: forwarded contract.
    unsafe { check_fully(dl, flags) }
}

/// [`check_imported`] for what [`is_sound`] did not pass: the reason, or NULL strides spelled out.
///
/// # Safety
/// As for [`check_imported`].
#[cold]
unsafe fn check_fully(dl: &DLTensor, flags: u64) -> Result<Option<Box<[i64]>>> {
    let bad = |fact: String| Error::buffer(fact);
    let ndim = layout::checked_ndim(dl.ndim).map_err(Error::into_buffer_error)?;
    if ndim > 0 && dl.shape.is_null() {
        return Err(bad(format!("shape is NULL with ndim = {ndim}")));
    }
    if !crate::device_names::is_known(dl.device.device_type) {
        return Err(bad(format!("unknown device type {}", dl.device.device_type.0)));
    }
    if dl.device.device_id < 0 {
        // No device has a negative ordinal: such a tensor would be carried and re-exported,
        // and refused only by the first copy.
        return Err(crate::device_names::negative_id(dl.device.device_id).into_buffer_error());
    }
    crate::dtype::check(dl.dtype).map_err(Error::into_buffer_error)?;
    let shape = dims(dl.shape, dl.ndim);
    let numel = layout::numel(shape).map_err(Error::into_buffer_error)?;
    layout::nbytes(numel, dl.dtype, flags).map_err(Error::into_buffer_error)?;
    if numel > 0 && dl.data.is_null() {
        return Err(bad(format!("data is NULL for {numel} elements")));
    }
    let bits = layout::element_bits(dl.dtype, flags);
    if ndim == 0 || !dl.strides.is_null() {
        check_reach(dl, shape, dims(dl.strides, dl.ndim), bits)?;
        return Ok(None);
    }
    let mut owned = vec![0i64; 2 * ndim].into_boxed_slice();
    owned[..ndim].copy_from_slice(shape);
    let (shape_part, strides_part) = owned.split_at_mut(ndim);
    layout::compact_strides(shape_part, strides_part);
    check_reach(dl, shape_part, strides_part, bits)?;
    Ok(Some(owned))
}

/// Refuses a tensor a row made from fields it read (a buffer's, an array interface's, numpy's
/// own, which `as_strided` lets say anything) whose strides overflow or whose reach wraps: the
/// check [`check_imported`] makes of a producer's tensor, for the rows that build their own.
/// `shape` and `strides` are the ones the made tensor will carry.
/// Their extents are not negative (the rows read them so).
#[inline(always)]
pub fn check_made(dl: &DLTensor, shape: &[i64], strides: &[i64], flags: u64) -> Result<()> {
    check_reach(dl, shape, strides, layout::element_bits(dl.dtype, flags))
}

#[cfg(test)]
mod tests {
    use super::*;

    const F32: DLDataType = DLDataType { code: 2, bits: 32, lanes: 1 };

    #[test]
    fn the_fast_check_passes_exactly_what_the_full_check_passes_with_strides() {
        let mut data = [0u8; 64];
        let data_ptr = data.as_mut_ptr().cast::<std::ffi::c_void>();
        let shapes: [&[i64]; 8] =
            [&[], &[4], &[0], &[2, 3], &[-1], &[i64::MAX, 3], &[i64::MAX, i64::MAX, 0], &[3, -2, 0]];
        let dtypes = [
            F32,
            DLDataType { code: 2, bits: 0, lanes: 1 },
            DLDataType { code: 99, bits: 8, lanes: 1 },
            DLDataType { code: 5, bits: 33, lanes: 1 },
            // Sub-byte items: the reckoning in bits.
            DLDataType { code: 0, bits: 4, lanes: 1 },
        ];
        let devices = [DLDevice::CPU, DLDevice { device_type: DeviceType(5), device_id: 0 }];
        let mut cases = 0;
        // Unit strides, then a first stride whose byte offsets overflow (refused by both checks
        // wherever it steps), then a negative one that reaches below address 0.
        for (shape, first_stride) in shapes.iter().flat_map(|&s| [(s, 1i64), (s, 1 << 62), (s, -(1 << 40))]) {
            let mut strides = vec![1i64; shape.len()];
            if let Some(first) = strides.first_mut() {
                *first = first_stride;
            }
            for dtype in dtypes {
                for device in devices {
                    for (data, with_strides, ndim) in [
                        (data_ptr, true, shape.len() as i32),
                        (std::ptr::null_mut(), true, shape.len() as i32),
                        (data_ptr, false, shape.len() as i32),
                        (data_ptr, true, -1),
                        (data_ptr, true, 65),
                    ] {
                        let dl = DLTensor {
                            data,
                            device,
                            ndim,
                            dtype,
                            shape: if shape.is_empty() { std::ptr::null_mut() } else { shape.as_ptr().cast_mut() },
                            strides: if with_strides && !shape.is_empty() {
                                strides.as_mut_ptr()
                            } else {
                                std::ptr::null_mut()
                            },
                            byte_offset: 0,
                        };
                        // SAFETY: shape and strides hold `shape.len()` values; other ndims are
                        // refused before either is read.
                        let (fast, full) = unsafe { (is_sound(&dl, 0), check_fully(&dl, 0)) };
                        let full_with_strides = matches!(full, Ok(None));
                        // The one case the fast check leaves to the full one although it passes:
                        // a product that overflows, excused by a zero extent.
                        let excused = shape.contains(&0)
                            && shape.iter().try_fold(1u64, |n, &e| n.checked_mul(e.max(0) as u64)).is_none();
                        let case = format!("{shape:?} {dtype:?} {device:?} data {data:?} ndim {ndim}");
                        assert!(!fast || full_with_strides, "fast passed what the full check refuses: {case}");
                        assert!(fast || !full_with_strides || excused, "fast refused what passes: {case}");
                        cases += 1;
                    }
                }
            }
        }
        assert_eq!(cases, 8 * 3 * 5 * 2 * 5);
    }

    #[test]
    fn strides_whose_byte_offsets_overflow_are_refused_naming_the_dimension() {
        let mut data = [0f32; 8];
        let (shape, mut strides) = ([2i64, 4], [1i64 << 61, 1]);
        let mut dl = DLTensor {
            data: data.as_mut_ptr().cast(),
            device: DLDevice::CPU,
            ndim: 2,
            dtype: F32,
            shape: shape.as_ptr().cast_mut(),
            strides: strides.as_mut_ptr(),
            byte_offset: 0,
        };
        // SAFETY: shape and strides hold 2 values each.
        let err = unsafe { check_imported(&dl, 0) }.unwrap_err();
        assert!(err.fact().starts_with("dimension 0 (extent 2, stride 2305843009213693952)"), "{}", err.fact());
        strides = [4, 1];
        dl.strides = strides.as_mut_ptr();
        dl.byte_offset = u64::MAX - 8;
        // SAFETY: as above.
        let err = unsafe { check_imported(&dl, 0) }.unwrap_err();
        assert!(err.fact().contains("wraps around the address space"), "{}", err.fact());
        dl.byte_offset = 0;
        // SAFETY: as above.
        assert!(matches!(unsafe { check_imported(&dl, 0) }, Ok(None)));
    }
}
