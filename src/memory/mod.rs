//! Where tensor data lives.

pub mod blocking;
pub mod cpu;
pub mod cuda;
