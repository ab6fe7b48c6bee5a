//! Opening a kernel library: `dlopen` once per file, the anchor kernel.h defines, the ABI
//! version, every export's name and signature read and checked. A library stays loaded for the
//! process (its functions and strings are `'static` from then on), and opening it again, by any
//! path, gives the same [`Library`] (but for a constructor's open: [`PROVISIONAL`]).

use std::cell::Cell;
use std::collections::HashSet;
use std::ffi::{c_void, CStr, CString};
use std::sync::Mutex;

use super::export::{Anchor, KernelExport, KernelFunction, ANCHOR, KERNEL_ABI_VERSION, KERNEL_FLAG_SHORT};
use super::signature::{self, Signature};
use crate::error::{Error, ErrorKind, Result};

/// One exported kernel.
pub struct Kernel {
    /// Its name, as exported (messages start with it: `dlpx: add: …`).
    pub name: &'static str,
    pub signature: Signature,
    /// The typed signature line, a blank line and the doc (`dlpx_kernel_signature`, `__doc__`).
    pub described: CString,
    pub function: KernelFunction,
    /// `DLPX_EXPORT_KERNEL_SHORT`: the call keeps the GIL.
    pub short: bool,
}

/// A loaded kernel library.
pub struct Library {
    /// The path it was first opened by.
    pub path: String,
    /// The file the loader found for it (`libadd.so` on the search path: `/opt/lib/libadd.so`);
    /// `path` where the loader does not say.
    pub file: String,
    /// `dlopen`'s handle: the identity of the file, whatever path names it.
    handle: usize,
    /// In the order the library lists them.
    pub kernels: Vec<Kernel>,
}

impl Library {
    pub fn kernel(&self, name: &str) -> Option<&Kernel> {
        self.kernels.iter().find(|k| k.name == name)
    }
}

/// Every library opened, for the process (the `Box`es are never freed: their kernels are
/// `'static`).
static LIBRARIES: Mutex<Vec<&'static Library>> = Mutex::new(Vec::new());

/// Libraries read while a `dlopen` of [`open`]'s ran constructors on the reading thread: given to
/// the constructor that asked, kept for the process (their kernels are `'static`), never found by
/// a later open, which reads the library again.
static PROVISIONAL: Mutex<Vec<&'static Library>> = Mutex::new(Vec::new());

thread_local! {
    /// How many of [`open`]'s `dlopen`s this thread is inside. A library's constructors run
    /// within its dlopen and may open libraries, their own included, before the exports defined
    /// after them are linked: what is read meanwhile may be partial.
    static OPENING: Cell<usize> = const { Cell::new(0) };
}

/// The kernel library at `path`, opened once for the process. OSError where `dlopen` refuses the
/// path; ImportError where the library holds no dlpx kernels, or kernels this libdlpx cannot read
/// (a newer kernel ABI, a bad signature). Errors name the path.
pub fn open(path: &str) -> Result<&'static Library> {
    // dlopen("") gives the program's global scope, which is no library file.
    if path.is_empty() {
        return Err(Error::new(ErrorKind::OSError, "cannot load '': an empty path names no library"));
    }
    let c_path = CString::new(path).map_err(|_| Error::value(format!("{path:?}: a path with a NUL byte")))?;
    // No lock is held while the library's constructors run: they may call into dlpx.
    OPENING.with(|depth| depth.set(depth.get() + 1));
    // SAFETY: a NUL-terminated path; dlopen runs the library's constructors (kernel.h's link the
    // exports into the library's list).
    let handle = unsafe { libc::dlopen(c_path.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
    OPENING.with(|depth| depth.set(depth.get() - 1));
    if handle.is_null() {
        // dlopen looks a name without a '/' up on the library search path, never in the current
        // directory (as ctypes.CDLL does): say so where the file is right there.
        let hint = match !path.contains('/') && std::path::Path::new(path).is_file() {
            true => format!(" (a name without '/' is looked up on the library search path: ./{path} is the one here)"),
            false => String::new(),
        };
        return Err(Error::new(ErrorKind::OSError, format!("cannot load {path}: {}{hint}", dl_error())));
    }
    if let Some(known) = find(handle) {
        close(handle); // the first open's reference keeps it loaded
        return Ok(known);
    }
    let kernels = match read(handle, path) {
        Ok(kernels) => kernels,
        Err(err) => {
            close(handle);
            return Err(err);
        }
    };
    let file = super::link_map::file(handle).unwrap_or_else(|| path.to_string());
    let library = Library { path: path.to_string(), file, handle: handle as usize, kernels };
    if OPENING.with(Cell::get) > 0 {
        // A constructor asks (its dlopen not done): perhaps of this very library, with the
        // exports defined after it not linked yet. What it sees is not what later opens find.
        let library: &'static Library = Box::leak(Box::new(library));
        PROVISIONAL.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).push(library);
        return Ok(library);
    }
    let mut libraries = LIBRARIES.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    if let Some(known) = libraries.iter().find(|l| l.handle == handle as usize) {
        // Another thread opened it meanwhile.
        close(handle);
        return Ok(known);
    }
    let library: &'static Library = Box::leak(Box::new(library));
    libraries.push(library);
    Ok(library)
}

fn find(handle: *mut c_void) -> Option<&'static Library> {
    let libraries = LIBRARIES.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    libraries.iter().find(|l| l.handle == handle as usize).copied()
}

fn close(handle: *mut c_void) {
    // SAFETY: a handle dlopen returned, closed once for that open.
    unsafe { libc::dlclose(handle) };
}

/// `dlerror()`'s message.
fn dl_error() -> String {
    // SAFETY: dlerror returns NULL or a NUL-terminated message owned by libc.
    let message = unsafe { libc::dlerror() };
    match message.is_null() {
        true => "unknown dlopen error".to_string(),
        // SAFETY: non-NULL and NUL-terminated.
        false => unsafe { CStr::from_ptr(message) }.to_string_lossy().into_owned(),
    }
}

/// The library's kernels, each export read and checked.
fn read(handle: *mut c_void, path: &str) -> Result<Vec<Kernel>> {
    let import = |fact: String| Error::new(ErrorKind::ImportError, format!("{path}: {fact}"));
    // SAFETY: a live handle and a NUL-terminated name.
    let anchor = unsafe { libc::dlsym(handle, ANCHOR.as_ptr()) };
    if anchor.is_null() {
        return Err(import(
            "holds no dlpx kernels (no dlpx_kernel_library: build it with <dlpx/kernel.h> and DLPX_EXPORT_KERNEL)"
                .into(),
        ));
    }
    if let Some(refusal) = super::anchor::refusal(handle, anchor) {
        return Err(import(refusal));
    }
    // SAFETY: kernel.h defines the anchor with this type (a function of the library's own,
    // checked above where the loader tells); it returns a pointer to the library's record, in
    // the library's static storage.
    let record = unsafe { std::mem::transmute::<*mut c_void, Anchor>(anchor)() };
    // SAFETY: the record's first field is its ABI version in every version of kernel.h.
    let version = unsafe { record.as_ref() }.map(|r| r.abi_version);
    match version {
        None => return Err(import("its dlpx_kernel_library() returns no record".into())),
        Some(0) => return Err(import("its record's kernel ABI version is 0, which no <dlpx/kernel.h> writes".into())),
        Some(v) if v > KERNEL_ABI_VERSION => return Err(newer(path, v)),
        Some(_) => {}
    }
    // Each kernel with its name, copied: made `'static` once every export is accepted, so a
    // library refused halfway leaks nothing.
    let mut kernels: Vec<(Kernel, Box<str>)> = Vec::new();
    // Each export and name seen: a list that comes back to an export never ends, and a name
    // seen twice is refused (sets: a library of 100 000 kernels loads in linear time).
    let (mut exports, mut names) = (HashSet::new(), HashSet::new());
    // SAFETY: a version-1 record (checked above): `first` heads a NULL-terminated list of exports
    // in the library's static storage.
    let mut next = unsafe { (*record).first };
    while !next.is_null() {
        if !exports.insert(next as usize) {
            return Err(import("its list of kernels does not end (an export links back to an earlier one)".into()));
        }
        // SAFETY: a live export of the library's list.
        let export = unsafe { &*next };
        let (kernel, name) = kernel_of(export, path)?;
        if !names.insert(name.clone()) {
            return Err(import(format!("two kernels are named '{name}'")));
        }
        kernels.push((kernel, name));
        next = export.next;
    }
    if kernels.is_empty() {
        return Err(import("holds no dlpx kernels (it includes <dlpx/kernel.h> but exports none)".into()));
    }
    // The constructors link each new export in front: the list runs backwards. The names are
    // copied once for the process (a library's kernels stay loaded).
    Ok(kernels.into_iter().rev().map(|(kernel, name)| Kernel { name: Box::leak(name), ..kernel }).collect())
}

/// A library, or one export of it, built for a kernel ABI newer than this libdlpx reads.
fn newer(path: &str, version: u32) -> Error {
    Error::new(
        ErrorKind::ImportError,
        format!(
            "{path} was built for dlpx kernel ABI {version}; this libdlpx ({}) reads kernel ABI {KERNEL_ABI_VERSION} and older: upgrade dlpx",
            env!("CARGO_PKG_VERSION")
        ),
    )
}

/// The kernel `export` describes, and its name (the kernel's own `name` is empty until the
/// library is accepted).
fn kernel_of(export: &KernelExport, path: &str) -> Result<(Kernel, Box<str>)> {
    if export.abi_version > KERNEL_ABI_VERSION {
        return Err(newer(path, export.abi_version));
    }
    let import = |fact: String| Error::new(ErrorKind::ImportError, format!("{path}: {fact}"));
    if export.abi_version == 0 {
        return Err(import("an export's kernel ABI version is 0, which no <dlpx/kernel.h> writes".into()));
    }
    let text = |p: *const std::ffi::c_char, what: &str| -> Result<&str> {
        if p.is_null() {
            return Err(import(format!("an export's {what} is NULL")));
        }
        // SAFETY: NUL-terminated strings of the library's, read now (what is kept is copied:
        // the library may change or free its own).
        unsafe { CStr::from_ptr(p) }.to_str().map_err(|_| import(format!("an export's {what} is not UTF-8")))
    };
    let name = text(export.name, "name")?;
    let signature = signature::parse(text(export.signature, "signature")?)
        .map_err(|err| import(format!("kernel '{name}': signature: {err}")))?;
    if signature.name != name {
        return Err(import(format!("kernel '{name}': its signature names '{}'", signature.name)));
    }
    let function = export.function.ok_or_else(|| import(format!("kernel '{name}': its function is NULL")))?;
    let described = match signature.doc.is_empty() {
        true => signature.typed.clone(),
        false => format!("{}\n\n{}", signature.typed, signature.doc),
    };
    let described = CString::new(described).map_err(|_| import(format!("kernel '{name}': a NUL in its doc")))?;
    let kernel = Kernel { name: "", signature, described, function, short: export.flags & KERNEL_FLAG_SHORT != 0 };
    Ok((kernel, Box::from(name)))
}
