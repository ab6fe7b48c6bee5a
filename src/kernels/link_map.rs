//! What glibc's dynamic loader knows of a loaded library: its link map (`dlinfo`), which names
//! the object and the file it was loaded from. Elsewhere nothing is known (None).

use std::ffi::{c_char, c_void, CStr};

/// `dlinfo`'s request for the link map (glibc's <dlfcn.h>).
#[cfg(all(target_os = "linux", target_env = "gnu", target_pointer_width = "64"))]
const RTLD_DI_LINKMAP: i32 = 2;

/// The start of glibc's `struct link_map` (<link.h>), the part that is public.
#[repr(C)]
struct LinkMap {
    base: usize,
    /// The file's path as the loader found it (a bare name resolved on the search path).
    name: *const c_char,
}

/// The link map of `handle` (a live `dlopen` handle): the loaded object's identity, whichever
/// path or handle reached it.
#[cfg(all(target_os = "linux", target_env = "gnu", target_pointer_width = "64"))]
pub fn of(handle: *mut c_void) -> Option<*mut c_void> {
    let mut map: *mut c_void = std::ptr::null_mut();
    // SAFETY: a live handle; the link map's address is written to `map`.
    match unsafe { libc::dlinfo(handle, RTLD_DI_LINKMAP, (&mut map as *mut *mut c_void).cast()) } {
        0 if !map.is_null() => Some(map),
        _ => None,
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu", target_pointer_width = "64")))]
pub fn of(_handle: *mut c_void) -> Option<*mut c_void> {
    None
}

/// The file `handle`'s library was loaded from: `dlopen("libadd.so")` found on the library
/// search path is `/opt/lib/libadd.so`. None where the loader does not say (or names no file).
pub fn file(handle: *mut c_void) -> Option<String> {
    let map = of(handle)?.cast::<LinkMap>();
    // SAFETY: glibc's link map, alive while the library is loaded; its name is NUL-terminated
    // (or NULL) and owned by the loader.
    let name = unsafe { (*map).name };
    // SAFETY: as above.
    let name = (!name.is_null()).then(|| unsafe { CStr::from_ptr(name) })?;
    let name = name.to_str().ok()?;
    (!name.is_empty()).then(|| name.to_string())
}
