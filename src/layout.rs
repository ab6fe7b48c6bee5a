//! Shapes and layouts: element counts and byte sizes with overflow checks, strides, contiguity,
//! and the checks an imported tensor's metadata must pass.

use crate::abi::{DLDataType, DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED};
use crate::dtype::dtype_name;
use crate::error::{Error, Result};

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
    match numel.checked_mul(element_bits(dtype, flags)) {
        Some(bits) => Ok(bits.div_ceil(8)),
        None => Err(bytes_overflow(numel, dtype)),
    }
}

#[cold]
fn bytes_overflow(numel: u64, dtype: DLDataType) -> Error {
    Error::value(format!("{numel} elements of {} overflow the byte size", dtype_name(dtype)))
}

/// Bits one element (all its lanes) occupies: a sub-byte lane takes a whole byte when the
/// producer flagged IS_SUBBYTE_TYPE_PADDED.
#[inline]
pub fn element_bits(dtype: DLDataType, flags: u64) -> u64 {
    let padded = flags & DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED != 0;
    let bits_per_lane = if padded && dtype.bits < 8 { 8 } else { dtype.bits as u64 };
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

/// Where a strided tensor's elements lie around its first element, in bytes: the farthest an
/// index reaches below it (negative strides) and above it (the last element's bytes included).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Reach {
    pub below: u64,
    pub above: u64,
}

/// The most bits a reach or a byte stride may span: `isize::MAX` bytes, what a pointer offset,
/// a `Py_ssize_t` stride and numpy's and torch's storage sizes can hold.
const MAX_REACH_BITS: u128 = isize::MAX as u128 * 8;

/// The [`Reach`] of `shape` and `strides` (in elements of `bits` bits each), every product and
/// sum checked against `isize::MAX` bytes; Err(dim) names the first dimension whose byte stride,
/// or whose share of the reach, does not fit. A producer's strides are read as hostile: a
/// wrapped product would let an index land anywhere (docs/design.md, "Hostile input").
///
/// A tensor with a zero extent addresses nothing (its reach is 0 both ways): only its strides'
/// byte sizes are checked, so that every byte stride dlpx derives (the buffer protocol, the array
/// interfaces) fits. Extents are not negative (`numel` refuses those first).
#[inline(always)]
pub fn reach(shape: &[i64], strides: &[i64], bits: u64) -> std::result::Result<Reach, usize> {
    // Every import runs this: whole-byte items in u64 with overflow flags (a multiply and a
    // jump per product), and the exact reckoning in bits only where that cannot decide.
    match bits % 8 == 0 {
        true => reach_in_bytes(shape, strides, bits / 8).map_or_else(|| reach_in_bits(shape, strides, bits), Ok),
        false => reach_in_bits(shape, strides, bits),
    }
}

/// [`reach`] of whole-byte items in u64: None where a product or sum overflows or a value passes
/// `isize::MAX`, for [`reach_in_bits`] to decide (and to name the dimension). Agrees with it
/// wherever it answers (`reach_in_bytes_agrees_with_reach_in_bits`).
#[inline(always)]
fn reach_in_bytes(shape: &[i64], strides: &[i64], item: u64) -> Option<Reach> {
    count_and_reach(shape, strides, item).map(|(_, reach)| reach)
}

/// The element count and the [`Reach`] of whole-byte items of `item` bytes, in one pass (every
/// import's and kernel view's check runs it): None where an extent is negative, the count
/// overflows, or a product or sum passes `isize::MAX` bytes, for the exact reckoning to decide
/// ([`numel`] and [`reach_in_bits`]). Agrees with them wherever it answers.
#[inline(always)]
pub fn count_and_reach(shape: &[i64], strides: &[i64], item: u64) -> Option<(u64, Reach)> {
    let (mut numel, mut below, mut above, mut steps) = (1u64, 0u64, item, 0u64);
    for (&extent, &stride) in shape.iter().zip(strides) {
        let extent = u64::try_from(extent).ok()?;
        numel = numel.checked_mul(extent)?;
        let step = stride.unsigned_abs().checked_mul(item)?;
        steps |= step;
        let span = extent.saturating_sub(1).checked_mul(step)?;
        let side = if stride < 0 { &mut below } else { &mut above };
        *side = side.checked_add(span)?;
    }
    // Any value past isize::MAX has its top bit set, and so has their union.
    if (steps | below | above) > isize::MAX as u64 {
        return None;
    }
    // No element (a zero extent): no address is reached.
    Some((numel, if numel == 0 { Reach { below: 0, above: 0 } } else { Reach { below, above } }))
}

/// [`reach`] reckoned exactly, in bits.
#[cold]
fn reach_in_bits(shape: &[i64], strides: &[i64], bits: u64) -> std::result::Result<Reach, usize> {
    // Every product below is u64 × u64 widened to u128 (one `mul`), or a u128 under 2^67 times
    // `bits` (under 2^24): none overflows, so none needs u128's checked multiply (a library call).
    let empty = shape.contains(&0);
    let (mut below, mut above) = (0u128, bits as u128);
    for (dim, (&extent, &stride)) in shape.iter().zip(strides).enumerate() {
        let step = stride.unsigned_abs() as u128 * bits as u128;
        if step > MAX_REACH_BITS {
            return Err(dim);
        }
        if empty || extent <= 1 {
            continue;
        }
        let items = (extent as u64 - 1) as u128 * stride.unsigned_abs() as u128;
        // `bits` >= 1: more items than the limit has bits is past it whatever their size.
        if items > MAX_REACH_BITS {
            return Err(dim);
        }
        let side = if stride < 0 { &mut below } else { &mut above };
        *side += items * bits as u128;
        if *side > MAX_REACH_BITS {
            return Err(dim);
        }
    }
    let bytes = |bits: u128| ((bits + 7) >> 3) as u64;
    Ok(match empty {
        true => Reach { below: 0, above: 0 },
        false => Reach { below: bytes(below), above: bytes(above) },
    })
}

/// Whether every address `reach` spans around `data + byte_offset` exists: none below zero, none
/// past the top of the address space (checked as numbers: `data` is never dereferenced here).
#[inline]
pub fn addresses_fit(data: *const std::ffi::c_void, byte_offset: u64, reach: Reach) -> bool {
    match (data as usize as u64).checked_add(byte_offset) {
        Some(first) => first >= reach.below && first.checked_add(reach.above).is_some(),
        None => false,
    }
}

/// The refusal of strides whose reach [`reach`] did not fit, naming the dimension.
#[cold]
pub fn overflowing_strides(shape: &[i64], strides: &[i64], dim: usize, bits: u64) -> Error {
    Error::buffer(format!(
        "dimension {dim} (extent {}, stride {}) of a tensor of shape {shape:?}, strides {strides:?} and \
         {bits}-bit elements reaches past isize::MAX bytes (the byte offsets overflow)",
        shape[dim], strides[dim]
    ))
}

/// The refusal of a tensor whose reach wraps around the address space.
#[cold]
pub fn wrapping_addresses(data: *const std::ffi::c_void, byte_offset: u64, reach: Reach) -> Error {
    Error::buffer(format!(
        "data {data:?} + byte_offset {byte_offset} with {} bytes below and {} above wraps around the address space",
        reach.below, reach.above
    ))
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
    fn a_reach_is_the_bytes_an_index_can_land_on_and_never_wraps() {
        let r = |shape: &[i64], strides: &[i64], bits| reach(shape, strides, bits);
        assert_eq!(r(&[], &[], 32), Ok(Reach { below: 0, above: 4 }));
        assert_eq!(r(&[2, 3], &[3, 1], 32), Ok(Reach { below: 0, above: 24 }));
        assert_eq!(r(&[2, 3], &[-3, 1], 32), Ok(Reach { below: 12, above: 12 }));
        assert_eq!(r(&[5], &[1], 4), Ok(Reach { below: 0, above: 3 }), "packed sub-byte items");
        assert_eq!(r(&[0, 4], &[i64::MAX / 64, 1], 32), Ok(Reach { below: 0, above: 0 }), "empty: no elements");
        assert_eq!(r(&[1, 4], &[1 << 58, 1], 32), Ok(Reach { below: 0, above: 16 }), "an extent of 1 never steps");
        // The cases: a byte stride that wraps to i64::MIN (2^61 × 4) or to 0 (2^62 × 4).
        assert_eq!(r(&[2, 4], &[1 << 61, 1], 32), Err(0));
        assert_eq!(r(&[2, 4], &[1 << 62, 1], 32), Err(0));
        assert_eq!(r(&[2, 4], &[-(1 << 62), 1], 32), Err(0));
        assert_eq!(r(&[2, 4], &[i64::MIN, 1], 8), Err(0));
        // Each byte stride fits, their sum does not: the dimension that tips it is named.
        assert_eq!(r(&[2, 2, 2], &[1 << 60, 1 << 60, 1 << 60], 32), Err(1));
        assert_eq!(r(&[i64::MAX, 2], &[2, 1], 8), Err(0));
        // A byte stride dlpx could not spell (the buffer protocol, the array interfaces) is refused
        // even on an extent of 1 or 0.
        assert_eq!(r(&[1, 4], &[1 << 62, 1], 32), Err(0));
        assert_eq!(r(&[0, 4], &[1 << 62, 1], 32), Err(0));
        let at = |address: usize| address as *const std::ffi::c_void;
        let up = Reach { below: 0, above: 16 };
        assert!(addresses_fit(at(0x1000), 0, up));
        assert!(!addresses_fit(at(usize::MAX - 8), 0, up));
        assert!(!addresses_fit(at(0x1000), u64::MAX - 0x800, up), "byte_offset wraps");
        assert!(!addresses_fit(at(0x1000), 0, Reach { below: 0x2000, above: 4 }), "below address 0");
        assert!(addresses_fit(at(0x1000), 0x1000, Reach { below: 0x2000, above: 4 }));
    }

    #[test]
    fn reach_in_bytes_agrees_with_reach_in_bits() {
        // xorshift: the same cases every run. Extents and strides near the edges where products
        // and sums overflow, and small ones; items of 1 to 16 bytes.
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let pick = |r: u64| -> i64 {
            match r % 6 {
                0 => (r >> 8) as i64 % 5,
                1 => 1 << ((r >> 8) % 63),
                2 => -(1i64 << ((r >> 8) % 63)),
                3 => i64::MAX - (r >> 8) as i64 % 3,
                4 => i64::MIN + (r >> 8) as i64 % 3,
                _ => (r >> 8) as i64 % 4096 - 2048,
            }
        };
        let (mut answered, mut cases) = (0, 0);
        for _ in 0..200_000 {
            let ndim = (next() % 4) as usize;
            let shape: Vec<i64> = (0..ndim).map(|_| pick(next()).max(0)).collect();
            let strides: Vec<i64> = (0..ndim).map(|_| pick(next())).collect();
            let item = 1u64 << (next() % 5);
            let exact = reach_in_bits(&shape, &strides, item * 8);
            if let Some(fast) = reach_in_bytes(&shape, &strides, item) {
                assert_eq!(Ok(fast), exact, "shape {shape:?} strides {strides:?} item {item}");
                answered += 1;
            }
            if let Some((count, _)) = count_and_reach(&shape, &strides, item) {
                assert_eq!(numel(&shape).ok(), Some(count), "shape {shape:?}");
            }
            assert_eq!(reach(&shape, &strides, item * 8), exact);
            cases += 1;
        }
        assert!(answered > cases / 4, "the fast reckoning answers the common cases ({answered} of {cases})");
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
