//! What `<dlpx/kernel.h>` puts in a kernel library, read from Rust: the library's record and
//! its list of exports. kernel.h is the definition (hand-written, documented field by field);
//! these mirrors follow it, and the loader reading a library built from it is the test
//! (c_tests/test_kernel_library.c, tests/python/kernels/test_kernel_library.py).

use std::ffi::{c_char, c_int, c_void};

/// The newest kernel ABI this libdlpx reads (`DLPX_KERNEL_ABI_VERSION` of kernel.h).
pub const KERNEL_ABI_VERSION: u32 = 2;

/// `DLPX_KERNEL_FLAG_SHORT`: the kernel keeps the GIL (it returns sooner than releasing and
/// taking the GIL back would take).
pub const KERNEL_FLAG_SHORT: u32 = 1 << 0;

/// The symbol every kernel library defines (kernel.h, weak, default visibility).
pub const ANCHOR: &std::ffi::CStr = c"dlpx_kernel_library";

/// `int (*DlpxKernelFunction)(DlpxCall *call)`; the call is erased here (`kernels::Call`).
pub type KernelFunction = unsafe extern "C" fn(call: *mut c_void) -> c_int;

/// `DlpxKernelExport`.
#[repr(C)]
pub struct KernelExport {
    pub abi_version: u32,
    pub flags: u32,
    pub name: *const c_char,
    pub signature: *const c_char,
    pub function: Option<KernelFunction>,
    pub next: *const KernelExport,
}

/// `DlpxKernelLibrary`: what the anchor returns.
#[repr(C)]
pub struct KernelLibrary {
    pub abi_version: u32,
    pub reserved: u32,
    pub first: *const KernelExport,
}

/// `const DlpxKernelLibrary *dlpx_kernel_library(void)`.
pub type Anchor = unsafe extern "C" fn() -> *const KernelLibrary;

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::{offset_of, size_of};

    #[test]
    fn the_mirrors_have_kernel_h_s_lp64_layout() {
        // The same numbers as c_tests/test_kernel_library.c asserts of kernel.h.
        assert_eq!(size_of::<KernelExport>(), 40);
        assert_eq!(
            [offset_of!(KernelExport, flags), offset_of!(KernelExport, name), offset_of!(KernelExport, signature)],
            [4, 8, 16]
        );
        assert_eq!([offset_of!(KernelExport, function), offset_of!(KernelExport, next)], [24, 32]);
        assert_eq!((size_of::<KernelLibrary>(), offset_of!(KernelLibrary, first)), (16, 8));
    }
}
