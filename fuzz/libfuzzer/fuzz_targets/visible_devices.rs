#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| gpuhook_fuzz::request::visible_devices(data));
