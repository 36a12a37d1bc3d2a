//! The data-path wire decoders: operation tags (and the mismatch message built from any two),
//! TCP part headers, data-listener handshakes. Whatever the bytes, decoding returns (never
//! panics) and what decodes re-encodes to the same bytes' meaning.

#![no_main]

use hccl::transport::acceptor::{decode_handshake, encode_handshake};
use hccl::transport::tag::{mismatch, OpTag, Tag, TAG_LEN};
use hccl::transport::tcp::PartHeader;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Some(t) = OpTag::decode(data) {
        assert_eq!(OpTag::decode(&t.encode().0), Some(t));
        let _ = t.describe();
    }
    if data.len() >= 2 * TAG_LEN {
        let got = Tag(data[..TAG_LEN].try_into().expect("tag"));
        let want = Tag(data[TAG_LEN..2 * TAG_LEN].try_into().expect("tag"));
        let e = mismatch(&got, &want, 1, 2);
        assert!(e.msg.len() < 4096, "{}", e.msg);
        assert_eq!(Tag::check(&got, &want, 1, 2).is_ok(), got == want);
    }
    if let Some(h) = PartHeader::decode(data) {
        assert_eq!(PartHeader::decode(&h.encode()), Some(h));
    }
    if let Some((key, count)) = decode_handshake(data) {
        assert_eq!(decode_handshake(&encode_handshake(key, count)), Some((key, count)));
    }
});
