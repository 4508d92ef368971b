#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| gpuhook_fuzz::mps::control_reply(data));
