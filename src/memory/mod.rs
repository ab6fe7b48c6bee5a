//! Where tensor data lives.

pub mod cpu;
pub mod cuda;
pub mod driver;
pub mod blocking;
