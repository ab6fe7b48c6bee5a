//! Where a strided tensor's elements lie around its first element (its [`Reach`]), every
//! product and sum checked: the check every import, view and copy makes of a producer's strides
//! (docs/design.md, "Hostile input").

use crate::error::Error;

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
/// ([`super::numel`] and [`reach_in_bits`]). Agrees with them wherever it answers.
#[inline(always)]
pub fn count_and_reach(shape: &[i64], strides: &[i64], item: u64) -> Option<(u64, Reach)> {
    let (mut numel, mut below, mut above) = (1u64, 0u64, item);
    for (&extent, &stride) in shape.iter().zip(strides) {
        let extent = u64::try_from(extent).ok()?;
        numel = numel.checked_mul(extent)?;
        // A byte stride fits isize (a test of its top bit: no register kept for a union).
        let step = stride.unsigned_abs().checked_mul(item).filter(|&step| step <= isize::MAX as u64)?;
        let span = extent.saturating_sub(1).checked_mul(step)?;
        let side = if stride < 0 { &mut below } else { &mut above };
        *side = side.checked_add(span)?;
    }
    // Any value past isize::MAX has its top bit set, and so has their union.
    if (below | above) > isize::MAX as u64 {
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
    use super::super::numel;
    use super::*;

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
}
