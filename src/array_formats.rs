//! How the older array protocols spell a dtype (docs/design.md, R12): the buffer protocol's
//! PEP 3118 format strings (struct-module characters) and the array interfaces' `typestr`
//! (`<f4`), read into a `DLDataType` and written from one. Only fixed-size numbers in the
//! machine's byte order cross: no long double (`g`, `f16`), no structures, pointers or strings.

use std::ffi::{c_char, CStr};

use crate::abi::{DLDataType, DataTypeCode};
use crate::error::{Error, Result};

/// The byte-order mark of this machine in a typestr, and the one PEP 3118 spells it with.
#[cfg(target_endian = "little")]
const NATIVE: u8 = b'<';
#[cfg(target_endian = "big")]
const NATIVE: u8 = b'>';

/// `(format character, code, bits)` for the numbers a format can hold; `l`/`L` are C's long,
/// whose native size is the platform's and whose standard size is 4.
const FORMATS: &[(u8, DataTypeCode, u8)] = &[
    (b'?', DataTypeCode::BOOL, 8),
    (b'b', DataTypeCode::INT, 8),
    (b'B', DataTypeCode::UINT, 8),
    (b'h', DataTypeCode::INT, 16),
    (b'H', DataTypeCode::UINT, 16),
    (b'i', DataTypeCode::INT, 32),
    (b'I', DataTypeCode::UINT, 32),
    (b'l', DataTypeCode::INT, LONG_BITS),
    (b'L', DataTypeCode::UINT, LONG_BITS),
    (b'q', DataTypeCode::INT, 64),
    (b'Q', DataTypeCode::UINT, 64),
    (b'e', DataTypeCode::FLOAT, 16),
    (b'f', DataTypeCode::FLOAT, 32),
    (b'd', DataTypeCode::FLOAT, 64),
];
const LONG_BITS: u8 = (std::mem::size_of::<std::ffi::c_long>() * 8) as u8;

// Every item is a power of two bytes: readers shift rather than divide (`layout::whole_items`,
// `producers::rows::buffer` `items`).
const _: () = {
    let mut i = 0;
    while i < FORMATS.len() {
        assert!(FORMATS[i].2.is_power_of_two(), "a format's items are a power of two bytes");
        i += 1;
    }
};

/// The dtype of a PEP 3118 format string (NULL, given here as None, means `B`): an optional
/// byte-order prefix (`@` and `=` native, `<`/`>`/`!` explicit, refused when not this machine's
/// for items wider than a byte), then one number character, or `Z` and `f`/`d` for complex.
pub fn from_buffer_format(format: Option<&[u8]>) -> Result<DLDataType> {
    let format = format.unwrap_or(b"B");
    let refuse = || buffer_format_refused(format);
    let (standard_sizes, explicit_order, rest) = match format.split_first() {
        Some((b'@', rest)) => (false, None, rest),
        Some((b'=', rest)) => (true, None, rest),
        Some((&order @ (b'<' | b'>' | b'!'), rest)) => (true, Some(if order == b'!' { b'>' } else { order }), rest),
        _ => (false, None, format),
    };
    let dtype = match rest {
        [b'Z', b'f'] => scalar(DataTypeCode::COMPLEX, 64),
        [b'Z', b'd'] => scalar(DataTypeCode::COMPLEX, 128),
        [b'l' | b'L'] if standard_sizes => {
            scalar(if rest[0] == b'l' { DataTypeCode::INT } else { DataTypeCode::UINT }, 32)
        }
        [c] => FORMATS.iter().find(|f| f.0 == *c).map(|&(_, code, bits)| scalar(code, bits)).ok_or_else(refuse)?,
        _ => return Err(refuse()),
    };
    if explicit_order.is_some_and(|order| order != NATIVE) && dtype.bits > 8 {
        return Err(Error::buffer(format!(
            "buffer format {:?} is not in this machine's byte order",
            String::from_utf8_lossy(format)
        )));
    }
    Ok(dtype)
}

/// `(code, bits)` of each format that is one character in native order and sizes (the common
/// case: `memoryview`, `array.array`, `bytes`, numpy), by that character; `bits` 0 for the rest.
const ONE_CHARACTER: [(u8, u8); 128] = {
    let mut table = [(0u8, 0u8); 128];
    let mut i = 0;
    while i < FORMATS.len() {
        let (c, code, bits) = FORMATS[i];
        table[c as usize] = (code.0, bits);
        i += 1;
    }
    table
};

/// [`from_buffer_format`] of a view's `format` field, a C string or NULL: a format of one native
/// character is looked up without measuring the string (every buffer import asks).
///
/// # Safety
/// `format` is NULL or points to a NUL-terminated string.
#[inline]
pub unsafe fn from_buffer_format_c(format: *const c_char) -> Result<DLDataType> {
    if format.is_null() {
        return from_buffer_format(None);
    }
    // SAFETY: a NUL-terminated string: its second byte is read only when the first is not NUL.
    let (first, second) = unsafe { (*format as u8, if *format == 0 { 1 } else { *format.add(1) as u8 }) };
    if second == 0 && first < 128 {
        let (code, bits) = ONE_CHARACTER[first as usize];
        if bits != 0 {
            return Ok(scalar(DataTypeCode(code), bits));
        }
    }
    // SAFETY: as above.
    from_buffer_format(Some(unsafe { CStr::from_ptr(format) }.to_bytes()))
}

#[cold]
fn buffer_format_refused(format: &[u8]) -> Error {
    let why = match format.last() {
        Some(b'g') => ": long double has no DLPack dtype",
        _ => "",
    };
    Error::buffer(format!(
        "buffer format {:?} is not a number DLPack can describe{why} (dlpx reads ?bBhHiIlLqQefd, Zf and Zd)",
        String::from_utf8_lossy(format)
    ))
}

/// The PEP 3118 format string of `dtype` (native order), if the buffer protocol can say it.
pub fn buffer_format(dtype: DLDataType) -> Option<&'static CStr> {
    if dtype.lanes != 1 {
        return None;
    }
    // A match, not a table search: every `memoryview(t)` and `np.asarray(t)` asks.
    Some(match (DataTypeCode(dtype.code), dtype.bits) {
        (DataTypeCode::BOOL, 8) => c"?",
        (DataTypeCode::INT, 8) => c"b",
        (DataTypeCode::UINT, 8) => c"B",
        (DataTypeCode::INT, 16) => c"h",
        (DataTypeCode::UINT, 16) => c"H",
        (DataTypeCode::INT, 32) => c"i",
        (DataTypeCode::UINT, 32) => c"I",
        (DataTypeCode::INT, 64) => c"q",
        (DataTypeCode::UINT, 64) => c"Q",
        (DataTypeCode::FLOAT, 16) => c"e",
        (DataTypeCode::FLOAT, 32) => c"f",
        (DataTypeCode::FLOAT, 64) => c"d",
        (DataTypeCode::COMPLEX, 64) => c"Zf",
        (DataTypeCode::COMPLEX, 128) => c"Zd",
        _ => return None,
    })
}

/// The kinds a typestr names, by its kind character.
const KINDS: &[(u8, DataTypeCode)] = &[
    (b'b', DataTypeCode::BOOL),
    (b'i', DataTypeCode::INT),
    (b'u', DataTypeCode::UINT),
    (b'f', DataTypeCode::FLOAT),
    (b'c', DataTypeCode::COMPLEX),
];

/// The dtype of an array interface's `typestr` (`<f4`, `|u1`, `|b1`): a byte order (`<`, `>`,
/// `|` not applicable, `=` native), a kind, and the item size in bytes.
pub fn from_typestr(typestr: &str) -> Result<DLDataType> {
    let refuse = || {
        Error::buffer(format!(
            "typestr {typestr:?} is not a number DLPack can describe (dlpx reads b1, i and u 1-8, f2-f8, c8 and c16)"
        ))
    };
    let bytes = typestr.as_bytes();
    let (&order, rest) = bytes.split_first().ok_or_else(refuse)?;
    let (&kind, size) = rest.split_first().ok_or_else(refuse)?;
    let size: u8 = std::str::from_utf8(size).ok().and_then(|s| s.parse().ok()).ok_or_else(refuse)?;
    let dtype = from_kind(kind, size).ok_or_else(refuse)?;
    if !matches!(order, b'<' | b'>' | b'|' | b'=') {
        return Err(refuse());
    }
    // `|` (byte order not applicable) numpy reads as native whatever the size, as `=`.
    if size > 1 && !matches!(order, b'=' | b'|') && order != NATIVE {
        return Err(Error::buffer(format!("typestr {typestr:?} is not in this machine's byte order")));
    }
    Ok(dtype)
}

/// The dtype of a numpy kind (`b`, `i`, `u`, `f`, `c`) and item size in bytes (a typestr's, a
/// numpy dtype's `kind` and `itemsize`), where DLPack has one.
pub fn from_kind(kind: u8, size: u8) -> Option<DLDataType> {
    let code = KINDS.iter().find(|k| k.0 == kind)?.1;
    let fits = match code {
        DataTypeCode::BOOL => size == 1,
        DataTypeCode::INT | DataTypeCode::UINT => matches!(size, 1 | 2 | 4 | 8),
        DataTypeCode::FLOAT => matches!(size, 2 | 4 | 8),
        _ => matches!(size, 8 | 16),
    };
    fits.then(|| scalar(code, size * 8))
}

/// The array interface's `typestr` of `dtype`, if it has one.
pub fn typestr(dtype: DLDataType) -> Option<String> {
    let kind = KINDS.iter().find(|k| k.1 .0 == dtype.code)?.0;
    buffer_format(dtype)?; // the same numbers cross both ways
    let bytes = dtype.bits / 8;
    let order = if bytes == 1 { '|' } else { NATIVE as char };
    Some(format!("{order}{}{bytes}", kind as char))
}

fn scalar(code: DataTypeCode, bits: u8) -> DLDataType {
    DLDataType { code: code.0, bits, lanes: 1 }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dt(code: DataTypeCode, bits: u8) -> DLDataType {
        scalar(code, bits)
    }

    #[test]
    fn every_format_dlpx_writes_reads_back_as_its_dtype() {
        for (code, bits) in [(DataTypeCode::BOOL, 8), (DataTypeCode::INT, 64), (DataTypeCode::UINT, 16)]
            .into_iter()
            .chain([(DataTypeCode::FLOAT, 16), (DataTypeCode::FLOAT, 64), (DataTypeCode::COMPLEX, 64)])
        {
            let dtype = dt(code, bits);
            let format = buffer_format(dtype).unwrap().to_bytes();
            assert_eq!(from_buffer_format(Some(format)).unwrap(), dtype);
            assert_eq!(from_typestr(&typestr(dtype).unwrap()).unwrap(), dtype);
        }
    }

    #[test]
    fn the_one_character_lookup_agrees_with_the_parser() {
        let answer = |r: Result<DLDataType>| r.map_err(|e| e.fact().to_string());
        for first in 0..=255u8 {
            for second in [0u8, b'f', b'd'] {
                let c_string = [first, second, 0];
                let bytes = CStr::from_bytes_until_nul(&c_string).unwrap().to_bytes();
                // SAFETY: NUL-terminated.
                let fast = unsafe { from_buffer_format_c(c_string.as_ptr().cast()) };
                assert_eq!(answer(fast), answer(from_buffer_format(Some(bytes))), "{c_string:?}");
            }
        }
        // SAFETY: NULL is allowed.
        assert_eq!(unsafe { from_buffer_format_c(std::ptr::null()) }.unwrap(), dt(DataTypeCode::UINT, 8));
    }

    #[test]
    fn formats_read_with_their_byte_order_and_sizes() {
        assert_eq!(from_buffer_format(None).unwrap(), dt(DataTypeCode::UINT, 8));
        assert_eq!(from_buffer_format(Some(b"l")).unwrap(), dt(DataTypeCode::INT, LONG_BITS));
        assert_eq!(from_buffer_format(Some(b"=l")).unwrap(), dt(DataTypeCode::INT, 32));
        assert_eq!(from_buffer_format(Some(b"<L")).unwrap(), dt(DataTypeCode::UINT, 32));
        assert_eq!(from_buffer_format(Some(b"@Zd")).unwrap(), dt(DataTypeCode::COMPLEX, 128));
        assert_eq!(from_buffer_format(Some(b">B")).unwrap(), dt(DataTypeCode::UINT, 8));
        let refused = |f: &[u8]| from_buffer_format(Some(f)).unwrap_err().fact().to_string();
        assert!(refused(b">i").contains("byte order"), "{}", refused(b">i"));
        assert!(refused(b"!d").contains("byte order"));
        assert!(refused(b"g").contains("long double"));
        assert!(refused(b"Zg").contains("\"Zg\""));
        for format in [&b"T{i:x:}"[..], b"2f", b"P", b"s", b"x", b"", b"<", b"ff"] {
            assert!(refused(format).contains("not a number"), "{format:?}");
        }
    }

    #[test]
    fn typestrs_read_and_refuse_by_kind_size_and_order() {
        assert_eq!(from_typestr("|b1").unwrap(), dt(DataTypeCode::BOOL, 8));
        assert_eq!(from_typestr("=i8").unwrap(), dt(DataTypeCode::INT, 64));
        assert_eq!(from_typestr(">u1").unwrap(), dt(DataTypeCode::UINT, 8));
        assert_eq!(from_typestr("<c16").unwrap(), dt(DataTypeCode::COMPLEX, 128));
        assert!(from_typestr(">f4").unwrap_err().fact().contains("byte order"));
        for refused in ["<f16", "|b2", "<f1", "|O8", "<M8", "|V4", "<U4", "f4", "", "<i", "<i4x"] {
            assert!(from_typestr(refused).unwrap_err().fact().contains("not a number"), "{refused}");
        }
        assert_eq!(typestr(dt(DataTypeCode::UINT, 8)).unwrap(), "|u1");
        assert_eq!(typestr(dt(DataTypeCode::BFLOAT, 16)), None);
        assert_eq!(typestr(DLDataType { lanes: 4, ..dt(DataTypeCode::FLOAT, 32) }), None);
        assert_eq!(buffer_format(dt(DataTypeCode::FLOAT8_E4M3FN, 8)), None);
    }
}
