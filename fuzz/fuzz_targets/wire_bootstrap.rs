//! The bootstrap wire decoders: a rank's hello, rank records, the root's answer and table.
//! Whatever the bytes, decoding returns (never panics, never allocates by a claimed count
//! beyond the bytes given), and what decodes re-encodes to an equal value.

#![no_main]

use hccl::comm::bootstrap::{decode_answer_head, decode_table, Hello, RankRecord, RECORD};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(h) = Hello::decode(data) {
        assert_eq!(Hello::decode(&h.encode()).ok(), Some(h));
    }
    if let Ok(r) = RankRecord::decode(data) {
        let mut b = [0u8; RECORD];
        r.encode(&mut b);
        assert_eq!(RankRecord::decode(&b).ok(), Some(r));
    }
    if let Some(head) = data.get(..8) {
        let (_, len) = decode_answer_head(head.try_into().expect("8 bytes"));
        // A table claims `len` records: decoding checks the claim against the bytes it has.
        let body = &data[8..];
        if let Ok(t) = decode_table(len, body) {
            assert_eq!(t.len() * RECORD, body.len());
        }
    }
});
