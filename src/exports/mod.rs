//! What C sees of dlpx, one module per kind: dlpx's exchange table, the library (its version and
//! its entry as a Python extension), errors, streams, the allocator, the kernel API. cbindgen
//! writes the `dlpx_*` functions and their docs into `include/dlpx/dlpx.h`. Each function is a
//! shell: the one boundary (`error::boundary`) around one call below (docs/design.md, "Layers").

pub mod allocator;
pub mod errors;
pub mod exchange;
pub mod kernel;
pub mod library;
pub mod streams;
