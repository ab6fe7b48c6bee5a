//! Generates the two C headers from the Rust source and sets the library's SONAME.
//!
//! The headers are written to `$OUT_DIR/include/dlpx/` only (a build script that writes into the
//! source tree fails `cargo package`); the committed copies under `include/dlpx/` are what C users
//! and the install get, and `scripts/regen_headers.sh` copies the generated ones over them
//! (`--check`, run by `scripts/test.sh`, fails when they differ).
//!
//! `include/dlpx/dlpack.h` comes from `src/abi/` alone and carries the official DLPack names,
//! values and include guard, so it and the official header are interchangeable.
//! `include/dlpx/dlpx.h` comes from the whole crate minus the ABI items and includes the first.

use std::fmt::Write;
use std::path::PathBuf;

/// Writes DLPack's enumerations (`src/abi/enums.rs`, the one table of them) as C: the 1.3 enums
/// of `dlpack.h`, in the official header's form, and `dlpx.h`'s name tables (X-macros) and
/// `DLPX_<enumerator>` macros for values DLPack added after 1.3.
macro_rules! dlpack_enums {
    (@in_1_3) => { true };
    (@in_1_3 $since:literal) => { false };
    ($(
        $(#[doc = $doc:literal])*
        enum $c_enum:ident for $rust:ident($repr:ty) {
            $(
                $(#[doc = $row_doc:literal])*
                $konst:ident = $value:literal, $c_name:ident, $name:literal $(, bits $bits:literal)? $(, since $since:literal)?;
            )*
        }
    )*) => {
        fn enum_texts() -> (String, String) {
            let (mut dlpack, mut dlpx) = (String::new(), String::new());
            $(
                let docs: &[&str] = &[$($doc),*];
                let rows: &[(&[&str], i64, &str, &str, u8, bool)] = &[$(
                    (&[$($row_doc),*], $value, stringify!($c_name), $name, 0 $(+ $bits)?, dlpack_enums!(@in_1_3 $($since)?)),
                )*];
                write_enum(&mut dlpack, &mut dlpx, stringify!($c_enum), stringify!($repr), docs, rows);
            )*
            (dlpack, dlpx)
        }
    };
}

include!("src/abi/enums.rs");

fn doc_block(out: &mut String, indent: &str, lines: &[&str]) {
    if lines.is_empty() {
        return;
    }
    let _ = writeln!(out, "{indent}/**");
    for line in lines {
        let _ = writeln!(out, "{indent} *{}", line.trim_end());
    }
    let _ = writeln!(out, "{indent} */");
}

type Row<'a> = (&'a [&'a str], i64, &'a str, &'a str, u8, bool);

fn write_enum(dlpack: &mut String, dlpx: &mut String, c_enum: &str, repr: &str, docs: &[&str], rows: &[Row]) {
    let c_repr = if repr == "i32" { "int32_t" } else { "uint8_t" };
    doc_block(dlpack, "", docs);
    if repr == "i32" {
        // As the official header: a fixed underlying type where the language has one.
        let _ = writeln!(dlpack, "enum {c_enum}\n#if defined(__cplusplus) || __STDC_VERSION__ >= 202311L\n  : {c_repr}\n#endif // defined(__cplusplus) || __STDC_VERSION__ >= 202311L\n {{");
    } else {
        let _ = writeln!(dlpack, "typedef enum {c_enum} {{");
    }
    for (row_docs, value, c_name, _, _, in_1_3) in rows.iter().filter(|row| row.5) {
        let _ = in_1_3;
        doc_block(dlpack, "  ", row_docs);
        let _ = writeln!(dlpack, "  {c_name} = {value},");
    }
    if repr == "i32" {
        let _ = writeln!(dlpack, "}};\n#ifndef __cplusplus\n#if __STDC_VERSION__ >= 202311L\ntypedef enum {c_enum} {c_enum};\n#else\ntypedef {c_repr} {c_enum};\n#endif // __STDC_VERSION__ >= 202311L\n#endif // __cplusplus\n");
    } else {
        let _ = writeln!(dlpack, "}} {c_enum};\n");
    }

    let (table, what) = match repr {
        "i32" => ("DLPX_DEVICE_TYPE_NAMES", "X(value, \"name\")"),
        _ => ("DLPX_DTYPE_CODE_NAMES", "X(value, \"name\", bits), bits being the width the code fixes (0: any)"),
    };
    let _ = writeln!(dlpx, "/**\n * Every {c_enum} value DLPack names, with the name dlpx prints for it:\n * {what}. The C++ layer's names come from here.\n */");
    let _ = write!(dlpx, "#define {table}(X)");
    for (_, value, _, name, bits, _) in rows {
        match repr {
            "i32" => write!(dlpx, " \\\n  X({value}, \"{name}\")"),
            _ => write!(dlpx, " \\\n  X({value}, \"{name}\", {bits})"),
        }
        .unwrap_or_default();
    }
    let _ = writeln!(dlpx, "\n");
    for (row_docs, value, c_name, _, _, _) in rows.iter().filter(|row| !row.5) {
        let mut lines: Vec<&str> = row_docs.to_vec();
        lines.push(" Added to DLPack after 1.3 (dlpack.h here stays 1.3).");
        doc_block(dlpx, "", &lines);
        let _ = writeln!(dlpx, "#define DLPX_{c_name} {value}\n");
    }
}

/// The structures dlpack.h is generated from (cbindgen's roots: what they name comes with them).
const DLPACK_ROOTS: &[&str] = &[
    "DLPackVersion",
    "DLDevice",
    "DLDataType",
    "DLTensor",
    "DLManagedTensor",
    "DLManagedTensorVersioned",
    "DLPackExchangeAPIHeader",
    "DLPackExchangeAPI",
];

/// The rest of dlpack.h: what the roots name, and its macros.
const DLPACK_NAMED: &[&str] = &[
    "DLPackManagedTensorAllocator",
    "DLPackManagedTensorFromPyObjectNoSync",
    "DLPackManagedTensorToPyObjectNoSync",
    "DLPackDLTensorFromPyObjectNoSync",
    "DLPackCurrentWorkStream",
    "DLPACK_MAJOR_VERSION",
    "DLPACK_MINOR_VERSION",
    "DLPACK_FLAG_BITMASK_READ_ONLY",
    "DLPACK_FLAG_BITMASK_IS_COPIED",
    "DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED",
    "DLDeviceType",
    "DLDataTypeCode",
];

/// src/abi's Rust-side items, in neither header as they are (the enums are written as C by
/// `enum_texts`).
const RUST_ONLY: &[&str] = &["DeviceType", "DataTypeCode", "SetErrorFn", "EnumRow"];

fn strings(names: &[&[&str]]) -> Vec<String> {
    names.iter().flat_map(|list| list.iter().map(|s| s.to_string())).collect()
}

const DLPACK_PRELUDE: &str = "\
/** Compatibility with C++. */
#ifdef __cplusplus
#define DLPACK_EXTERN_C extern \"C\"
#else
#define DLPACK_EXTERN_C
#endif

/** DLPACK_DLL prefix for windows. */
#ifdef _WIN32
#ifdef DLPACK_EXPORTS
#define DLPACK_DLL __declspec(dllexport)
#else
#define DLPACK_DLL __declspec(dllimport)
#endif
#else
#define DLPACK_DLL
#endif";

const DLPX_PRELUDE: &str = "\
#if !defined(DLPACK_MAJOR_VERSION) || DLPACK_MAJOR_VERSION != 1 || DLPACK_MINOR_VERSION < 3
#error \"dlpx.h needs DLPack 1.3: an older dlpack.h was included before dlpx.h\"
#endif";

fn common(header: &str) -> cbindgen::Config {
    let mut config = cbindgen::Config {
        language: cbindgen::Language::C,
        cpp_compat: true,
        style: cbindgen::Style::Type,
        documentation: true,
        documentation_style: cbindgen::DocumentationStyle::Doxy,
        autogen_warning: Some(format!(
            "/* Generated by cbindgen from the dlpx Rust sources ({header}); do not edit. */"
        )),
        ..Default::default()
    };
    config.enumeration.prefix_with_name = false;
    config.function.sort_by = Some(cbindgen::SortKey::None);
    config.structure.associated_constants_in_body = false;
    config
}

fn main() {
    println!("cargo:rerun-if-changed=src");
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libdlpx.so.0");

    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR")).join("include/dlpx");
    std::fs::create_dir_all(&out).expect("create $OUT_DIR/include/dlpx");

    let (enums, names) = enum_texts();
    let mut dlpack = common("src/abi/mod.rs, src/abi/enums.rs");
    dlpack.include_guard = Some("DLPACK_DLPACK_H_".to_string());
    // Tagged structs: DLManagedTensor and the table header refer to themselves.
    dlpack.style = cbindgen::Style::Both;
    dlpack.no_includes = true;
    dlpack.sys_includes = vec!["stdint.h".to_string(), "stddef.h".to_string()];
    dlpack.after_includes = Some(format!("{DLPACK_PRELUDE}\n\n{}", enums.trim_end()));
    dlpack.export.include = strings(&[DLPACK_ROOTS]);
    dlpack.export.exclude = strings(&[RUST_ONLY]);
    dlpack.export.rename.insert("DeviceType".into(), "DLDeviceType".into());
    cbindgen::Builder::new()
        .with_config(dlpack)
        .with_src("src/abi/mod.rs")
        .generate()
        .expect("generate dlpack.h")
        .write_to_file(out.join("dlpack.h"));

    // One module per kind of export, in this order in the header.
    let exports = ["exchange", "library", "errors", "streams", "allocator", "kernel", "call", "kernel_library"]
        .map(|m| format!("src/exports/{m}.rs"));
    let mut dlpx = common("src/exports/, src/memory/cuda/stats.rs, src/kernels/value.rs");
    dlpx.include_guard = Some("DLPX_DLPX_H".to_string());
    dlpx.no_includes = true;
    dlpx.sys_includes = vec!["stdbool.h".to_string()];
    dlpx.usize_is_size_t = true;
    dlpx.includes = vec!["dlpack.h".to_string()];
    dlpx.after_includes = Some(format!("{DLPX_PRELUDE}\n\n{}", names.trim_end()));
    // dlpx.h includes dlpack.h: none of it again.
    dlpx.export.exclude = strings(&[DLPACK_ROOTS, DLPACK_NAMED, RUST_ONLY]);
    // CPython's entry into the library, not C's: its PyObject type is not in the header.
    dlpx.export.exclude.push("PyInit__native".to_string());
    dlpx.export.rename.insert("DeviceType".into(), "DLDeviceType".into());
    let dlpx = exports.iter().fold(cbindgen::Builder::new().with_config(dlpx), |builder, path| builder.with_src(path));
    dlpx.with_src("src/memory/cuda/stats.rs")
        .with_src("src/kernels/value.rs")
        .with_src("src/abi/mod.rs")
        .generate()
        .expect("generate dlpx.h")
        .write_to_file(out.join("dlpx.h"));
}
