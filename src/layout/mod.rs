//! Shapes and layouts: element counts and byte sizes with overflow checks, strides, contiguity;
//! where strides reach, every product checked, in `reach`.

use crate::abi::{DLDataType, DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED};
use crate::dtype::dtype_name;
use crate::error::{Error, Result};

mod reach;
pub use reach::{addresses_fit, count_and_reach, overflowing_strides, reach, wrapping_addresses, Reach};

/// The most dimensions dlpx accepts (numpy's and torch's limit as well).
pub const MAX_NDIM: usize = 64;

/// `ndim` as a count of dimensions: not negative, at most [`MAX_NDIM`].
#[inline]
pub fn checked_ndim(ndim: i32) -> Result<usize> {
    if (0..=MAX_NDIM as i32).contains(&ndim) {
        Ok(ndim as usize)
    } else {
        Err(bad_ndim(ndim))
    }
}

/// The `ndim` values at `values` (a shape or strides a caller passed), after [`checked_ndim`]:
/// NULL is an error naming `name` where `ndim` > 0, and stands for none where it is 0.
///
/// # Safety
/// `values` is NULL or points to `ndim` readable values, which outlive the slice.
#[inline]
pub unsafe fn dims<'a>(ndim: i32, values: *const i64, name: &str) -> Result<&'a [i64]> {
    match (checked_ndim(ndim)?, values.is_null()) {
        (0, _) => Ok(&[]),
        (n, true) => Err(Error::value(format!("{name} is NULL with ndim = {n}"))),
        // SAFETY: `n` readable values, by the caller's contract.
        (n, false) => Ok(unsafe { std::slice::from_raw_parts(values, n) }),
    }
}

#[cold]
fn bad_ndim(ndim: i32) -> Error {
    if ndim < 0 {
        Error::value(format!("ndim = {ndim} is negative"))
    } else {
        Error::value(format!("ndim = {ndim} exceeds the maximum of {MAX_NDIM}"))
    }
}

/// Number of elements, with every product checked; negative extents are errors.
///
/// Every import runs it, so the loop only gathers facts and the message is built apart: a
/// negative extent is reported wherever it is; with a zero extent there are no elements,
/// whatever the other extents multiply to.
#[inline]
pub fn numel(shape: &[i64]) -> Result<u64> {
    let (mut n, mut negative, mut zero, mut overflow) = (1u64, false, false, false);
    for &extent in shape {
        negative |= extent < 0;
        zero |= extent == 0;
        let (product, overflowed) = n.overflowing_mul(extent as u64);
        n = product;
        overflow |= overflowed;
    }
    match (negative, zero, overflow) {
        (false, true, _) => Ok(0),
        (false, false, false) => Ok(n),
        _ => Err(bad_shape(shape)),
    }
}

#[cold]
fn bad_shape(shape: &[i64]) -> Error {
    match shape.iter().position(|&extent| extent < 0) {
        Some(i) => Error::value(format!("shape[{i}] = {} is negative", shape[i])),
        None => Error::value(format!("shape {shape:?}: the element count overflows 64 bits")),
    }
}

/// Bytes of storage for `numel` elements: packed (ceil(numel × bits × lanes / 8)) unless the
/// producer flagged sub-byte types as padded, then one byte per sub-byte lane.
#[inline]
pub fn nbytes(numel: u64, dtype: DLDataType, flags: u64) -> Result<u64> {
    // Counted in bits, which pass 64 bits eight times sooner than the bytes do (2^59 float64s
    // are 2^65 bits, 2^62 bytes): the product is taken in 128 bits, which it always fits.
    let bytes = (numel as u128 * element_bits(dtype, flags) as u128).div_ceil(8);
    u64::try_from(bytes).map_err(|_| bytes_overflow(numel, dtype))
}

#[cold]
fn bytes_overflow(numel: u64, dtype: DLDataType) -> Error {
    Error::value(format!("{numel} elements of {} overflow the byte size", dtype_name(dtype)))
}

/// Whether a tensor of `dtype` with DLPack `flags` is padded: a sub-byte lane flagged
/// IS_SUBBYTE_TYPE_PADDED takes a whole byte (the flag means nothing for wider lanes).
#[inline(always)]
pub fn is_padded(dtype: DLDataType, flags: u64) -> bool {
    flags & DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED != 0 && dtype.bits < 8
}

/// The DLPack 1.3 flags of a tensor of `dtype` that dlpx passes on (a view to a kernel, an
/// export), of the `flags` it came with: READ_ONLY (the data must not be written) and, for a
/// sub-byte dtype, IS_SUBBYTE_TYPE_PADDED (one element a byte). IS_COPIED is the producer's fact,
/// not the next consumer's, and a bit 1.3 does not define is no fact dlpx can vouch for.
#[inline(always)]
pub fn carried_flags(flags: u64, dtype: DLDataType) -> u64 {
    let padded = match is_padded(dtype, flags) {
        true => DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED,
        false => 0,
    };
    (flags & crate::abi::DLPACK_FLAG_BITMASK_READ_ONLY) | padded
}

/// Bits one element (all its lanes) occupies ([`is_padded`]: a whole byte a lane).
#[inline]
pub fn element_bits(dtype: DLDataType, flags: u64) -> u64 {
    let bits_per_lane = if is_padded(dtype, flags) { 8 } else { dtype.bits as u64 };
    bits_per_lane * dtype.lanes as u64
}

/// Compact row-major strides (in elements) for `shape`, written into `out`.
pub fn compact_strides(shape: &[i64], out: &mut [i64]) {
    let mut stride: i64 = 1;
    for (extent, slot) in shape.iter().zip(out.iter_mut()).rev() {
        *slot = stride;
        // Saturates only for zero-size tensors with huge extents, whose strides address nothing.
        stride = stride.saturating_mul((*extent).max(1));
    }
}

/// Row-major contiguity; extents of 0 or 1 make their stride irrelevant.
pub fn is_contiguous(shape: &[i64], strides: &[i64]) -> bool {
    if shape.contains(&0) {
        return true;
    }
    let mut expected: i64 = 1;
    for (&extent, &stride) in shape.iter().zip(strides).rev() {
        if extent != 1 && stride != expected {
            return false;
        }
        expected = expected.wrapping_mul(extent);
    }
    true
}

/// Column-major (Fortran) contiguity; extents of 0 or 1 make their stride irrelevant.
pub fn is_f_contiguous(shape: &[i64], strides: &[i64]) -> bool {
    if shape.contains(&0) {
        return true;
    }
    let mut expected: i64 = 1;
    for (&extent, &stride) in shape.iter().zip(strides) {
        if extent != 1 && stride != expected {
            return false;
        }
        expected = expected.wrapping_mul(extent);
    }
    true
}

/// Element strides from the byte strides the buffer protocol and the array interfaces give,
/// written into `out`: each must be a whole number of items (else the layout has no DLPack
/// spelling, and only a copy can cross).
pub fn element_strides(byte_strides: impl IntoIterator<Item = i64>, item_size: i64, out: &mut [i64]) -> Result<()> {
    for (dim, (bytes, slot)) in byte_strides.into_iter().zip(out.iter_mut()).enumerate() {
        *slot = whole_items(bytes, item_size).ok_or_else(|| unaligned_stride(dim, bytes, item_size))?;
    }
    Ok(())
}

/// `bytes` as a number of `item_size`-byte items, if it is a whole number of them (and the
/// size positive). Every dtype's item is a power of two bytes: a mask and a shift then, not a
/// division (tens of cycles, on every dimension of every import that reads byte strides).
#[inline(always)]
pub fn whole_items(bytes: i64, item_size: i64) -> Option<i64> {
    match item_size > 0 && item_size & (item_size - 1) == 0 {
        // An exact multiple: the arithmetic shift divides negative strides exactly too.
        true => (bytes & (item_size - 1) == 0).then(|| bytes >> item_size.trailing_zeros()),
        false => (item_size > 0 && bytes % item_size == 0).then(|| bytes / item_size),
    }
}

#[cold]
fn unaligned_stride(dim: usize, bytes: i64, item_size: i64) -> Error {
    Error::buffer(format!("strides[{dim}] = {bytes} bytes is not a multiple of the item size, {item_size} bytes"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dt(code: u8, bits: u8, lanes: u16) -> DLDataType {
        DLDataType { code, bits, lanes }
    }

    #[test]
    fn sizes_are_packed_and_checked() {
        assert_eq!(nbytes(3, dt(17, 4, 1), 0).unwrap(), 2);
        assert_eq!(nbytes(3, dt(17, 4, 1), DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED).unwrap(), 3);
        assert_eq!(element_bits(dt(0, 4, 2), DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED), 16);
        assert_eq!(element_bits(dt(0, 4, 2), 0), 8);
        assert_eq!(nbytes(4, dt(15, 6, 1), 0).unwrap(), 3);
        assert_eq!(nbytes(16, dt(2, 32, 1), 0).unwrap(), 64);
        assert!(nbytes(u64::MAX / 2, dt(2, 32, 1), 0).is_err());
        // Bytes that fit though their bits do not: 2^62 float64s, 2^61 complex128s.
        assert_eq!(nbytes(1 << 59, dt(2, 64, 1), 0).unwrap(), 1 << 62);
        assert_eq!(nbytes(1 << 57, dt(5, 128, 1), 0).unwrap(), 1 << 61);
        assert_eq!(nbytes(u64::MAX, dt(1, 8, 1), 0).unwrap(), u64::MAX);
        assert!(nbytes(u64::MAX / 8 + 1, dt(2, 64, 1), 0).is_err());
        assert_eq!(nbytes(u64::MAX, dt(17, 4, 1), 0).unwrap(), u64::MAX / 2 + 1);
        assert!(numel(&[i64::MAX, 3]).is_err());
        assert_eq!(numel(&[2, -3]).unwrap_err().fact(), "shape[1] = -3 is negative");
        assert_eq!(numel(&[]).unwrap(), 1);
        assert_eq!(numel(&[5, 0, i64::MAX]).unwrap(), 0);
        assert_eq!(numel(&[i64::MAX, i64::MAX, 0]).unwrap(), 0);
        assert_eq!(numel(&[i64::MAX, i64::MAX, -1]).unwrap_err().fact(), "shape[2] = -1 is negative");
        assert_eq!(numel(&[3, 4, 5]).unwrap(), 60);
    }

    #[test]
    fn strides_and_contiguity() {
        let mut s = [0i64; 3];
        compact_strides(&[2, 3, 4], &mut s);
        assert_eq!(s, [12, 4, 1]);
        assert!(is_contiguous(&[2, 3, 4], &s));
        assert!(!is_contiguous(&[2, 3, 4], &[1, 2, 6]));
        assert!(is_contiguous(&[2, 1, 4], &[4, 99, 1]));
        assert!(is_contiguous(&[0, 3], &[7, 7]));
        assert!(is_f_contiguous(&[2, 3, 4], &[1, 2, 6]) && !is_f_contiguous(&[2, 3, 4], &s));
        let mut e = [0i64; 3];
        element_strides([-24, 8, 0], 8, &mut e).unwrap();
        assert_eq!(e, [-3, 1, 0]);
        let err = element_strides([12, 6], 4, &mut e).unwrap_err();
        assert_eq!(err.fact(), "strides[1] = 6 bytes is not a multiple of the item size, 4 bytes");
    }

    #[test]
    fn element_strides_shift_as_the_division_divides() {
        for item in [-4i64, 0, 1, 2, 3, 4, 6, 8, 12, 16] {
            for bytes in -70i64..=70 {
                let mut out = [0i64];
                let got = element_strides([bytes], item, &mut out).map(|()| out[0]).map_err(|e| e.fact().to_string());
                let by_division = match item > 0 && bytes % item == 0 {
                    true => Ok(bytes / item),
                    false => Err(unaligned_stride(0, bytes, item).fact().to_string()),
                };
                assert_eq!(got, by_division, "{bytes} bytes, items of {item}");
            }
        }
    }
}
