#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| dlpx_fuzz::chain_walk(data));
