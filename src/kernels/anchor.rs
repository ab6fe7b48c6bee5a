//! Whether the `dlpx_kernel_library` that `dlsym` found is the library's own function: `dlsym`
//! also searches a library's dependencies (a library without kernels that links a kernel
//! library would pass for it), and a data symbol of that name is nothing to call. glibc says
//! both through `dladdr1`; elsewhere the symbol is taken as found.

use std::ffi::{c_void, CStr};

/// `dladdr1`'s requests (glibc's <dlfcn.h>).
#[cfg(all(target_os = "linux", target_env = "gnu", target_pointer_width = "64"))]
mod glibc {
    pub const RTLD_DL_SYMENT: i32 = 1;
    pub const RTLD_DL_LINKMAP: i32 = 2;
    /// `Elf64_Sym.st_info`'s offset, and its type bits' values for code.
    pub const ST_INFO_OFFSET: usize = 4;
    pub const STT_FUNC: u8 = 2;
    pub const STT_GNU_IFUNC: u8 = 10;
}

/// Why `anchor` (what `dlsym(handle, "dlpx_kernel_library")` gave) is not the library's own
/// function, or None where it is (or cannot be told).
#[cfg(all(target_os = "linux", target_env = "gnu", target_pointer_width = "64"))]
pub fn refusal(handle: *mut c_void, anchor: *mut c_void) -> Option<String> {
    use glibc::*;
    let own_map = super::link_map::of(handle)?;
    // SAFETY: Dl_info is plain pointers, for which zero is NULL.
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    let mut found_map: *mut c_void = std::ptr::null_mut();
    // SAFETY: an address in a loaded object (dlsym's answer); `info` and `found_map` are written.
    if unsafe { libc::dladdr1(anchor, &mut info, &mut found_map, RTLD_DL_LINKMAP) } == 0 {
        return None;
    }
    if found_map != own_map {
        let owner = match info.dli_fname.is_null() {
            true => "another library".to_string(),
            // SAFETY: dladdr's NUL-terminated file name, owned by the loader.
            false => unsafe { CStr::from_ptr(info.dli_fname) }.to_string_lossy().into_owned(),
        };
        return Some(format!(
            "holds no dlpx kernels of its own (the dlpx_kernel_library dlsym found is {owner}'s, a library it links)"
        ));
    }
    let mut symbol: *mut c_void = std::ptr::null_mut();
    // SAFETY: as above; `symbol` is the symbol table entry, in the loaded object.
    if unsafe { libc::dladdr1(anchor, &mut info, &mut symbol, RTLD_DL_SYMENT) } == 0 || symbol.is_null() {
        return None;
    }
    // SAFETY: an `Elf64_Sym`, whose `st_info` byte is at this offset; read, never written.
    let kind = unsafe { symbol.cast::<u8>().add(ST_INFO_OFFSET).read() } & 0xf;
    match kind {
        STT_FUNC | STT_GNU_IFUNC => None,
        _ => Some(format!(
            "its dlpx_kernel_library is no function (an ELF symbol of type {kind}): build it with <dlpx/kernel.h>"
        )),
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu", target_pointer_width = "64")))]
pub fn refusal(_handle: *mut c_void, _anchor: *mut c_void) -> Option<String> {
    None
}
