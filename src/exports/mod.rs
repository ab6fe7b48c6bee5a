//! What C sees of dlpx, one module per kind: dlpx's exchange table, the library (its version and
//! its entry as a Python extension), errors, streams, the allocator, the kernel API, a kernel
//! library's calls (`call`: the kernel's side; `kernel_library`: a C caller's). cbindgen
//! writes the `dlpx_*` functions and their docs into `include/dlpx/dlpx.h`. Each function is a
//! shell: the one boundary (`shell::entry::c_entry!`) around one call below (docs/design.md, "Layers").

pub mod allocator;
pub mod call;
pub mod errors;
pub mod exchange;
pub mod kernel;
pub mod kernel_library;
pub mod library;
pub mod streams;
