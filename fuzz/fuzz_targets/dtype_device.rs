#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| dlpx_fuzz::dtype_device(data));
