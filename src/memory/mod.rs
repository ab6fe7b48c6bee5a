//! Where tensor data lives.

pub mod cpu;
