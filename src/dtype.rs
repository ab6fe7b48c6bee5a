//! Dtypes: what DLPack allows (known code, non-zero bits and lanes, the width a code fixes), the
//! names Python and C++ print (`float32`, `bfloat16`, `float8_e4m3fn`, `float32x4`), and the
//! names dlpx reads, exactly (only the widths the peers name), all from the one table in
//! `abi/enums.rs`.

use crate::abi::{name_number, DLDataType, DataTypeCode, EnumRow};
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

/// [`check`]'s answer without its reason: every import and kernel view asks it, so it is one
/// lookup of [`WIDTHS`] rather than a walk of the code's row.
#[inline]
pub fn is_valid(dtype: DLDataType) -> bool {
    let DLDataType { code, bits, lanes } = dtype;
    match WIDTHS.get(code as usize) {
        Some(widths) => lanes != 0 && widths[(bits >> 6) as usize] >> (bits & 63) & 1 != 0,
        None => false,
    }
}

/// The bit widths each code allows, as a 256-bit set (`1 << bits`), read from the table in
/// `abi/enums.rs`: none for an unnamed code, never 0 bits, the one width a code fixes, an even
/// width for complex.
const WIDTHS: [[u64; 4]; 64] = {
    let mut widths = [[0u64; 4]; 64];
    let mut row = 0;
    while row < DataTypeCode::TABLE.len() {
        let EnumRow { value, bits: fixed, .. } = DataTypeCode::TABLE[row];
        let mut bits = 1usize;
        while bits < 256 {
            if (fixed == 0 || bits == fixed as usize) && (value.0 != DataTypeCode::COMPLEX.0 || bits % 2 == 0) {
                widths[value.0 as usize][bits >> 6] |= 1 << (bits & 63);
            }
            bits += 1;
        }
        row += 1;
    }
    widths
};

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

/// The widths a name gives the codes that fix none (`int8`, `float32`): those the peers name
/// (numpy, torch, jax and ml_dtypes, tvm_ffi), so that `float33` or `int7` is no name (a
/// `(code, bits, lanes)` triple still reaches any width [`check`] allows). int1/2/4 and
/// uint1/2/4 are ml_dtypes' and tvm_ffi's (packed, R6); complex32 is torch's and ml_dtypes' (two
/// float16); 64 is the width TVM gives an opaque handle.
const NAMED_WIDTHS: &[(DataTypeCode, &[u8])] = &[
    (DataTypeCode::INT, &[1, 2, 4, 8, 16, 32, 64]),
    (DataTypeCode::UINT, &[1, 2, 4, 8, 16, 32, 64]),
    (DataTypeCode::FLOAT, &[16, 32, 64]),
    (DataTypeCode::OPAQUE_HANDLE, &[64]),
    (DataTypeCode::COMPLEX, &[32, 64, 128]),
];

/// Peers' names for dtypes dlpx prints otherwise: TVM's `handle`, and torch's
/// `float4_e2m1fn_x2` (two float4 values a byte), which torch hands out as two lanes.
const ALIASES: &[(&str, DLDataType)] = &[
    ("handle", DLDataType { code: DataTypeCode::OPAQUE_HANDLE.0, bits: 64, lanes: 1 }),
    ("float4_e2m1fn_x2", DLDataType { code: DataTypeCode::FLOAT4_E2M1FN.0, bits: 4, lanes: 2 }),
];

fn named_widths(code: DataTypeCode) -> &'static [u8] {
    NAMED_WIDTHS.iter().find(|(c, _)| *c == code).map_or(&[], |(_, widths)| widths)
}

/// Parses a dtype name: one [`dtype_name`] prints for a code that fixes its width or for a
/// width in `NAMED_WIDTHS`, with an optional `x<lanes>` suffix (`float32x4`), or an alias.
/// Exact: `float33`, `int08`, `float32x+4` and `uint8\0xyz` are no names.
pub fn parse_dtype(name: &str) -> Option<DLDataType> {
    if let Some(&(_, dtype)) = ALIASES.iter().find(|(alias, _)| *alias == name) {
        return Some(dtype);
    }
    parse_scalar(name).or_else(|| {
        let (base, lanes) = name.rsplit_once('x')?;
        let lanes = u16::try_from(name_number(lanes)?).ok().filter(|&lanes| lanes > 1)?;
        parse_scalar(base).map(|dtype| DLDataType { lanes, ..dtype })
    })
}

fn parse_scalar(name: &str) -> Option<DLDataType> {
    DataTypeCode::TABLE.iter().find_map(|row| {
        let bits = match row.bits {
            0 => {
                let bits = u8::try_from(name_number(name.strip_prefix(row.name)?)?).ok()?;
                named_widths(row.value).contains(&bits).then_some(bits)?
            }
            fixed => (name == row.name).then_some(fixed)?,
        };
        Some(DLDataType { code: row.value.0, bits, lanes: 1 })
    })
}

/// Every dtype name [`parse_dtype`] reads, for messages: `int1/2/4/8/16/32/64, …, bool, …,
/// handle, float4_e2m1fn_x2` (each but the aliases may end in `x<lanes>`).
pub fn names() -> String {
    let rows = DataTypeCode::TABLE.iter().map(|row| match row.bits {
        0 => {
            let widths: Vec<String> = named_widths(row.value).iter().map(u8::to_string).collect();
            format!("{}{}", row.name, widths.join("/"))
        }
        _ => row.name.to_string(),
    });
    let aliases = ALIASES.iter().map(|(alias, _)| alias.to_string());
    rows.chain(aliases).collect::<Vec<_>>().join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dt(code: u8, bits: u8, lanes: u16) -> DLDataType {
        DLDataType { code, bits, lanes }
    }

    #[test]
    fn the_width_table_agrees_with_the_codes_rows_for_every_dtype() {
        for code in 0..=255u8 {
            for bits in 0..=255u8 {
                for lanes in [0u16, 1, 4] {
                    let by_row = DataTypeCode(code).row().is_some_and(|row| {
                        bits != 0
                            && lanes != 0
                            && (row.bits == 0 || bits == row.bits)
                            && (row.value != DataTypeCode::COMPLEX || bits % 2 == 0)
                    });
                    assert_eq!(is_valid(dt(code, bits, lanes)), by_row, "code {code} bits {bits} lanes {lanes}");
                }
            }
        }
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
    fn names_are_exact() {
        for refused in [
            "float33",
            "int7",
            "int255",
            "uint128",
            "bfloat15",
            "float8",
            "complex63",
            "handle32",
            "uint8\0xyz",
            "float32\0",
            "int08",
            "float32x1",
            "float32x04",
            "float32x+4",
            "float32x65536",
            "float32x",
            "Float32",
            " float32",
            "float32 ",
            "bool8",
            "bcomplex64",
            "handlex2",
            "+8",
            "",
        ] {
            assert_eq!(parse_dtype(refused), None, "{refused:?}");
        }
        assert_eq!(parse_dtype("int4"), Some(dt(0, 4, 1)));
        assert_eq!(parse_dtype("uint1"), Some(dt(1, 1, 1)));
        assert_eq!(parse_dtype("complex32"), Some(dt(5, 32, 1)));
        assert_eq!(parse_dtype("float32x65535"), Some(dt(2, 32, 65535)));
        assert_eq!(parse_dtype("handle"), Some(dt(3, 64, 1)));
        assert_eq!(parse_dtype("float4_e2m1fn_x2"), Some(dt(17, 4, 2)));
    }

    #[test]
    fn every_listed_name_parses_and_every_free_width_code_has_widths() {
        for listed in names().split(", ") {
            let (stem, widths) = listed
                .split_at(listed.find(|c: char| c.is_ascii_digit() && !listed.contains('_')).unwrap_or(listed.len()));
            for width in widths.split('/') {
                let name = format!("{stem}{width}");
                assert!(parse_dtype(&name).is_some(), "{name}");
            }
        }
        for row in DataTypeCode::TABLE.iter().filter(|row| row.bits == 0) {
            assert!(!named_widths(row.value).is_empty(), "{}", row.name);
            for &bits in named_widths(row.value) {
                assert!(is_valid(dt(row.value.0, bits, 1)), "{}{bits}", row.name);
            }
        }
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
