//! Kernel libraries (docs/design.md, "Kernel libraries"): a plain shared library whose kernels
//! `<dlpx/kernel.h>` exports is opened once and stays loaded ([`library`]); each kernel's
//! signature is read when it is ([`signature`]); a call binds arguments to parameters
//! ([`bind`]) and hands the kernel a [`call::Call`], from which it reads its arguments, asks for
//! outputs and the stream, and returns its results. Nothing here touches Python: the loader's
//! Python half (`kernel_loader`) and C's `dlpx_kernel_call` are the two callers.

mod anchor;
pub mod bind;
pub mod call;
pub mod export;
pub mod framework_allocator;
pub mod inline;
pub mod library;
mod link_map;
mod output;
pub mod signature;
pub mod value;

pub use call::{Call, Environment};
pub use library::{Kernel, Library};
pub use value::{with_dims, Returned, Value};
