//! Dtypes: what DLPack allows (known code, non-zero bits and lanes, the width a code fixes) and
//! the names Python and C++ print (`float32`, `bfloat16`, `float8_e4m3fn`, `float32x4`), all
//! read from the one table in `abi/enums.rs`.

use crate::abi::{DLDataType, DataTypeCode, EnumRow};
use crate::error::{Error, Result};

/// Rejects dtypes no tensor can have: unknown codes, zero bits or lanes, and bit widths that
/// contradict the code (DLPack: the consumer must stop importing if fp4/fp6 bits are unexpected).
#[inline]
pub fn check(dtype: DLDataType) -> Result<()> {
    if is_valid(dtype) {
        Ok(())
    } else {
        Err(refusal(dtype))
    }
}

/// [`check`]'s answer without its reason.
#[inline]
pub fn is_valid(dtype: DLDataType) -> bool {
    let DLDataType { code, bits, lanes } = dtype;
    DataTypeCode(code).row().is_some_and(|row| {
        bits != 0
            && lanes != 0
            && (row.bits == 0 || bits == row.bits)
            && (row.value != DataTypeCode::COMPLEX || bits % 2 == 0)
    })
}

/// Whether `dtype` is a real floating-point kind (IEEE, bfloat16, the float8/6/4 kinds): every
/// known code but the integer, boolean, handle and complex ones.
pub fn is_floating(dtype: DLDataType) -> bool {
    let code = DataTypeCode(dtype.code);
    code.row().is_some()
        && ![
            DataTypeCode::INT,
            DataTypeCode::UINT,
            DataTypeCode::OPAQUE_HANDLE,
            DataTypeCode::BOOL,
            DataTypeCode::COMPLEX,
        ]
        .contains(&code)
}

/// Why [`check`] refused `dtype`.
#[cold]
fn refusal(dtype: DLDataType) -> Error {
    let DLDataType { code, bits, lanes } = dtype;
    let Some(row) = DataTypeCode(code).row() else {
        let last = DataTypeCode::TABLE.last().map_or(0, |row| row.value.0);
        return Error::value(format!("unknown dtype code {code} (DLPack names 0..={last})"));
    };
    if bits == 0 {
        Error::value(format!("dtype code {code} has bits = 0"))
    } else if lanes == 0 {
        Error::value(format!("dtype code {code} has lanes = 0"))
    } else if row.bits != 0 && bits != row.bits {
        Error::value(format!("dtype code {code} ({}) needs bits = {}, got {bits}", row.name, row.bits))
    } else {
        Error::value(format!("complex dtype with odd bits = {bits}"))
    }
}

/// The name of a dtype as Python and C++ print it: the code's name with its bits where the code
/// allows any width (`int8`, `complex64`), the name alone where it fixes one (`bool`,
/// `float8_e4m3fn`), `x<lanes>` for vectors, `dtype(code=…,bits=…,lanes=…)` otherwise.
pub fn dtype_name(dtype: DLDataType) -> String {
    let base = match DataTypeCode(dtype.code).row() {
        Some(row) if row.bits == 0 => format!("{}{}", row.name, dtype.bits),
        Some(row) if row.bits == dtype.bits => row.name.to_string(),
        _ => return format!("dtype(code={},bits={},lanes={})", dtype.code, dtype.bits, dtype.lanes),
    };
    if dtype.lanes == 1 {
        base
    } else {
        format!("{base}x{}", dtype.lanes)
    }
}

/// Parses a dtype name produced by [`dtype_name`], lanes suffix included (`float32x4`).
pub fn parse_dtype(name: &str) -> Option<DLDataType> {
    if let Some(dtype) = parse_scalar(name) {
        return Some(dtype);
    }
    let (base, lanes) = name.rsplit_once('x')?;
    let lanes: u16 = lanes.parse().ok().filter(|&l| l > 1)?;
    parse_scalar(base).map(|d| DLDataType { lanes, ..d })
}

fn parse_scalar(name: &str) -> Option<DLDataType> {
    let scalar = |row: &EnumRow<DataTypeCode>, bits: u8| DLDataType { code: row.value.0, bits, lanes: 1 };
    if let Some(row) = DataTypeCode::TABLE.iter().find(|row| row.bits != 0 && row.name == name) {
        return Some(scalar(row, row.bits));
    }
    DataTypeCode::TABLE.iter().filter(|row| row.bits == 0).find_map(|row| {
        let digits = name.strip_prefix(row.name)?;
        if digits.starts_with('0') || !digits.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        Some(scalar(row, digits.parse().ok()?))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dt(code: u8, bits: u8, lanes: u16) -> DLDataType {
        DLDataType { code, bits, lanes }
    }

    #[test]
    fn names_round_trip() {
        for d in [
            dt(6, 8, 1),
            dt(0, 8, 1),
            dt(0, 64, 1),
            dt(1, 16, 1),
            dt(2, 16, 1),
            dt(2, 32, 4),
            dt(4, 16, 1),
            dt(5, 64, 1),
            dt(5, 128, 2),
            dt(10, 8, 1),
            dt(12, 8, 1),
            dt(14, 8, 1),
            dt(15, 6, 1),
            dt(17, 4, 1),
            dt(18, 32, 1),
        ] {
            let name = dtype_name(d);
            assert_eq!(parse_dtype(&name), Some(d), "{name}");
        }
        assert_eq!(dtype_name(dt(2, 32, 1)), "float32");
        assert_eq!(dtype_name(dt(2, 32, 4)), "float32x4");
        assert_eq!(dtype_name(dt(10, 8, 1)), "float8_e4m3fn");
        assert_eq!(dtype_name(dt(18, 32, 1)), "bcomplex32");
        assert_eq!(dtype_name(dt(10, 7, 1)), "dtype(code=10,bits=7,lanes=1)");
        assert_eq!(dtype_name(dt(99, 8, 1)), "dtype(code=99,bits=8,lanes=1)");
        assert_eq!(parse_dtype("float"), None);
        assert_eq!(parse_dtype("float032"), None);
        assert_eq!(parse_dtype("nonsense"), None);
    }

    #[test]
    fn checks_name_the_problem() {
        assert!(check(dt(19, 8, 1)).unwrap_err().fact().contains("unknown dtype code 19 (DLPack names 0..=18)"));
        assert!(check(dt(2, 0, 1)).unwrap_err().fact().contains("bits = 0"));
        assert!(check(dt(2, 32, 0)).unwrap_err().fact().contains("lanes = 0"));
        assert!(check(dt(17, 8, 1)).unwrap_err().fact().contains("float4_e2m1fn) needs bits = 4"));
        assert!(check(dt(5, 63, 1)).unwrap_err().fact().contains("odd bits"));
        assert!(check(dt(18, 32, 1)).is_ok());
        assert!(check(dt(2, 32, 4)).is_ok());
    }

    #[test]
    fn the_table_is_ordered_and_fixes_widths_of_named_codes() {
        for (i, row) in DataTypeCode::TABLE.iter().enumerate() {
            assert_eq!(row.value.0 as usize, i, "dtype codes are dense from 0");
        }
        assert_eq!(DataTypeCode::FLOAT6_E2M3FN.row().unwrap().bits, 6);
        assert!(!DataTypeCode::BCOMPLEX.row().unwrap().in_1_3);
    }
}
