//! The `HCCL_WHITELIST_FILE` parser (a JSON document of host addresses).

#![no_main]

use hccl::transport::acceptor::Whitelist;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = Whitelist::parse("fuzz.json", text);
    }
});
