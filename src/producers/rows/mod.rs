//! The rows, one file each, named as the row is (its `name`): every way dlpx reads a producer's
//! tensors. What they share — the cache, the guards, the held views, the seam's one path — is
//! the files beside this folder.

pub(super) mod array_api_strict;
pub(super) mod array_interface;
pub(super) mod buffer;
pub(super) mod capsule;
pub(super) mod cuda_array_interface;
pub(super) mod cupy;
pub(super) mod dlpack;
pub(super) mod dlpx;
pub(super) mod jax;
pub(super) mod numpy;
pub(super) mod table;
pub(super) mod torch;
pub(super) mod torch_outputs;
pub(super) mod torch_shim;
pub(super) mod torch_types;
pub(super) mod tvm_ffi;
