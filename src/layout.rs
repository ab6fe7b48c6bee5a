//! Validation of DLTensor metadata: dtypes, shapes, byte sizes with overflow checks, strides.

use crate::abi::{DLDataType, DataTypeCode, DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED};
use crate::error::{Error, Result};

/// The most dimensions dlpx accepts (numpy's and torch's limit as well).
pub const MAX_NDIM: usize = 64;

/// Rejects dtypes no tensor can have: unknown codes, zero bits or lanes, and bit widths that
/// contradict the code (DLPack: the consumer must stop importing if fp4/fp6 bits are unexpected).
pub fn check_dtype(dtype: DLDataType) -> Result<()> {
    let DLDataType { code, bits, lanes } = dtype;
    if code >= DataTypeCode::END.0 {
        return Err(Error::value(format!("unknown dtype code {code} (DLPack 1.3 defines 0..=17)")));
    }
    if bits == 0 {
        return Err(Error::value(format!("dtype code {code} has bits = 0")));
    }
    if lanes == 0 {
        return Err(Error::value(format!("dtype code {code} has lanes = 0")));
    }
    let required_bits = match DataTypeCode(code) {
        DataTypeCode::BFLOAT => Some(16),
        DataTypeCode::BOOL => Some(8),
        c if (DataTypeCode::FLOAT8_E3M4.0..=DataTypeCode::FLOAT8_E8M0FNU.0).contains(&c.0) => Some(8),
        DataTypeCode::FLOAT6_E2M3FN | DataTypeCode::FLOAT6_E3M2FN => Some(6),
        DataTypeCode::FLOAT4_E2M1FN => Some(4),
        DataTypeCode::COMPLEX if bits % 2 != 0 => {
            return Err(Error::value(format!("complex dtype with odd bits = {bits}")))
        }
        _ => None,
    };
    match required_bits {
        Some(required) if bits != required => Err(Error::value(format!("dtype code {code} ({}) needs bits = {required}, got {bits}", dtype_name_of_code(code)),
        )),
        _ => Ok(()),
    }
}

/// Number of elements, with every product checked; negative extents are errors.
pub fn numel(shape: &[i64]) -> Result<u64> {
    if let Some((i, extent)) = shape.iter().enumerate().find(|(_, &e)| e < 0) {
        return Err(Error::value(format!("shape[{i}] = {extent} is negative")));
    }
    // With a zero extent there are no elements, whatever the other extents multiply to.
    if shape.contains(&0) {
        return Ok(0);
    }
    let mut n: u64 = 1;
    for &extent in shape {
        n = n
            .checked_mul(extent as u64)
            .ok_or_else(|| Error::value(format!("shape {shape:?}: the element count overflows 64 bits")))?;
    }
    Ok(n)
}

/// Bytes of storage for `numel` elements: packed (ceil(numel × bits × lanes / 8)) unless the
/// producer flagged sub-byte types as padded, then one byte per sub-byte lane.
pub fn nbytes(numel: u64, dtype: DLDataType, flags: u64) -> Result<u64> {
    let overflow = || Error::value(format!("{numel} elements of {} overflow the byte size", dtype_name(dtype)));
    let padded = flags & DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED != 0;
    let bits_per_element = if padded && dtype.bits < 8 { 8 } else { dtype.bits as u64 } * dtype.lanes as u64;
    let bits = numel.checked_mul(bits_per_element).ok_or_else(overflow)?;
    Ok(bits.div_ceil(8))
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

/// The name of a dtype as Python and C++ print it: `float32`, `bfloat16`, `float8_e4m3fn`,
/// `bool`, `complex64`, `float32x4` for lanes, `dtype(code=…,bits=…,lanes=…)` otherwise.
pub fn dtype_name(dtype: DLDataType) -> String {
    let base = match (DataTypeCode(dtype.code), dtype.bits) {
        (DataTypeCode::INT, b) => format!("int{b}"),
        (DataTypeCode::UINT, b) => format!("uint{b}"),
        (DataTypeCode::FLOAT, b) => format!("float{b}"),
        (DataTypeCode::BFLOAT, 16) => "bfloat16".to_string(),
        (DataTypeCode::COMPLEX, b) => format!("complex{b}"),
        (DataTypeCode::BOOL, 8) => "bool".to_string(),
        (DataTypeCode::OPAQUE_HANDLE, b) => format!("handle{b}"),
        (c, b) if c.0 > DataTypeCode::BOOL.0 && c.0 < DataTypeCode::END.0 && b as u32 == named_bits(c.0) => {
            dtype_name_of_code(c.0).to_string()
        }
        _ => return format!("dtype(code={},bits={},lanes={})", dtype.code, dtype.bits, dtype.lanes),
    };
    if dtype.lanes == 1 {
        base
    } else {
        format!("{base}x{}", dtype.lanes)
    }
}

fn named_bits(code: u8) -> u32 {
    match code {
        15 | 16 => 6,
        17 => 4,
        _ => 8,
    }
}

fn dtype_name_of_code(code: u8) -> &'static str {
    const NAMES: [&str; 18] = [
        "int", "uint", "float", "handle", "bfloat16", "complex", "bool", "float8_e3m4", "float8_e4m3",
        "float8_e4m3b11fnuz", "float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz",
        "float8_e8m0fnu", "float6_e2m3fn", "float6_e3m2fn", "float4_e2m1fn",
    ];
    NAMES.get(code as usize).copied().unwrap_or("unknown")
}

/// Parses a dtype name produced by [`dtype_name`], lanes suffix included (`float32x4`).
pub fn parse_dtype(name: &str) -> Option<DLDataType> {
    if let Some(dtype) = parse_scalar_dtype(name) {
        return Some(dtype);
    }
    let (base, lanes) = name.rsplit_once('x')?;
    let lanes: u16 = lanes.parse().ok().filter(|&l| l > 1)?;
    parse_scalar_dtype(base).map(|d| DLDataType { lanes, ..d })
}

fn parse_scalar_dtype(name: &str) -> Option<DLDataType> {
    let scalar = |code: DataTypeCode, bits: u8| Some(DLDataType { code: code.0, bits, lanes: 1 });
    let numbered = |prefix: &str, code: DataTypeCode| -> Option<DLDataType> {
        let digits = name.strip_prefix(prefix)?;
        if digits.starts_with('0') || !digits.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        scalar(code, digits.parse().ok()?)
    };
    match name {
        "bool" => scalar(DataTypeCode::BOOL, 8),
        "bfloat16" => scalar(DataTypeCode::BFLOAT, 16),
        _ => match (7u8..18).find(|&c| dtype_name_of_code(c) == name) {
            Some(code) => scalar(DataTypeCode(code), named_bits(code) as u8),
            None => numbered("uint", DataTypeCode::UINT)
                .or_else(|| numbered("int", DataTypeCode::INT))
                .or_else(|| numbered("float", DataTypeCode::FLOAT))
                .or_else(|| numbered("complex", DataTypeCode::COMPLEX)),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dt(code: u8, bits: u8, lanes: u16) -> DLDataType {
        DLDataType { code, bits, lanes }
    }

    #[test]
    fn dtype_names_round_trip() {
        for d in [
            dt(6, 8, 1), dt(0, 8, 1), dt(0, 64, 1), dt(1, 16, 1), dt(2, 16, 1), dt(2, 32, 4), dt(4, 16, 1),
            dt(5, 64, 1), dt(5, 128, 2), dt(10, 8, 1), dt(12, 8, 1), dt(14, 8, 1), dt(15, 6, 1), dt(17, 4, 1),
        ] {
            let name = dtype_name(d);
            assert_eq!(parse_dtype(&name), Some(d), "{name}");
        }
        assert_eq!(dtype_name(dt(2, 32, 1)), "float32");
        assert_eq!(dtype_name(dt(2, 32, 4)), "float32x4");
        assert_eq!(dtype_name(dt(10, 8, 1)), "float8_e4m3fn");
        assert_eq!(dtype_name(dt(10, 7, 1)), "dtype(code=10,bits=7,lanes=1)");
        assert_eq!(parse_dtype("float"), None);
        assert_eq!(parse_dtype("nonsense"), None);
    }

    #[test]
    fn sizes_are_packed_and_checked() {
        assert_eq!(nbytes(3, dt(17, 4, 1), 0).unwrap(), 2);
        assert_eq!(nbytes(3, dt(17, 4, 1), DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED).unwrap(), 3);
        assert_eq!(nbytes(4, dt(15, 6, 1), 0).unwrap(), 3);
        assert_eq!(nbytes(16, dt(2, 32, 1), 0).unwrap(), 64);
        assert!(nbytes(u64::MAX / 2, dt(2, 32, 1), 0).is_err());
        assert!(numel(&[i64::MAX, 3]).is_err());
        assert_eq!(numel(&[2, -3]).unwrap_err().fact(), "shape[1] = -3 is negative");
        assert_eq!(numel(&[]).unwrap(), 1);
        assert_eq!(numel(&[5, 0, i64::MAX]).unwrap(), 0);
        assert_eq!(numel(&[i64::MAX, i64::MAX, 0]).unwrap(), 0);
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
    }

    #[test]
    fn dtype_checks_name_the_problem() {
        assert!(check_dtype(dt(18, 8, 1)).unwrap_err().message().contains("unknown dtype code 18"));
        assert!(check_dtype(dt(2, 0, 1)).unwrap_err().message().contains("bits = 0"));
        assert!(check_dtype(dt(2, 32, 0)).unwrap_err().message().contains("lanes = 0"));
        assert!(check_dtype(dt(17, 8, 1)).unwrap_err().message().contains("float4_e2m1fn) needs bits = 4"));
        assert!(check_dtype(dt(2, 32, 4)).is_ok());
    }
}
