//! The content of the 4108-byte root info blob.
//!
//! Layout (little endian): magic "HCRI", format version, address family, port, address,
//! random job token, root pid, root host id, and an FNV-1a checksum over everything before it.
//! The rest is zero. A blob whose magic, version, checksum or address does not check out is
//! rejected as corrupted or foreign.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use crate::base::error::{Error, ErrorKind, Result};
use crate::base::topology::fnv64;

/// Size of the blob.
pub const ROOT_INFO_BYTES: usize = 4108;
const MAGIC: u32 = 0x4952_4348; // "HCRI"
const VERSION: u32 = 1;
const CHECKED: usize = 64;

/// What a rank needs to find the rendezvous root.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RootInfo {
    /// Where the root listens.
    pub addr: SocketAddr,
    /// Random token naming the job; connections with another token are refused.
    pub token: u128,
    /// Process id of the root (diagnostics).
    pub pid: u32,
    /// Host identity of the root (diagnostics).
    pub host: u64,
}

impl RootInfo {
    /// Serialises into the opaque blob.
    pub fn encode(&self) -> [u8; ROOT_INFO_BYTES] {
        let mut b = [0u8; ROOT_INFO_BYTES];
        b[0..4].copy_from_slice(&MAGIC.to_le_bytes());
        b[4..8].copy_from_slice(&VERSION.to_le_bytes());
        match self.addr.ip() {
            IpAddr::V4(a) => {
                b[8] = 4;
                b[16..20].copy_from_slice(&a.octets());
            }
            IpAddr::V6(a) => {
                b[8] = 6;
                b[16..32].copy_from_slice(&a.octets());
            }
        }
        b[12..14].copy_from_slice(&self.addr.port().to_le_bytes());
        b[32..48].copy_from_slice(&self.token.to_le_bytes());
        b[48..52].copy_from_slice(&self.pid.to_le_bytes());
        b[56..64].copy_from_slice(&self.host.to_le_bytes());
        let sum = fnv64(&b[..CHECKED]);
        b[CHECKED..CHECKED + 8].copy_from_slice(&sum.to_le_bytes());
        b
    }

    /// Parses and verifies a blob.
    pub fn decode(b: &[u8]) -> Result<RootInfo> {
        let bad = |why: &str| {
            Error::new(
                ErrorKind::Para,
                format!("root info is corrupted or not from this library ({why})"),
            )
        };
        if b.len() < ROOT_INFO_BYTES {
            return Err(bad("too short"));
        }
        let u32_at = |o: usize| u32::from_le_bytes(b[o..o + 4].try_into().unwrap());
        if u32_at(0) != MAGIC {
            return Err(bad("bad magic"));
        }
        if u32_at(4) != VERSION {
            return Err(bad("unsupported format version"));
        }
        let sum = u64::from_le_bytes(b[CHECKED..CHECKED + 8].try_into().unwrap());
        if sum != fnv64(&b[..CHECKED]) {
            return Err(bad("checksum mismatch"));
        }
        if b[CHECKED + 8..ROOT_INFO_BYTES].iter().any(|&x| x != 0) {
            return Err(bad("unexpected data after the checksum"));
        }
        let port = u16::from_le_bytes(b[12..14].try_into().unwrap());
        let ip = match b[8] {
            4 => IpAddr::V4(Ipv4Addr::new(b[16], b[17], b[18], b[19])),
            6 => IpAddr::V6(Ipv6Addr::from(<[u8; 16]>::try_from(&b[16..32]).unwrap())),
            _ => return Err(bad("bad address family")),
        };
        if port == 0 {
            return Err(bad("port 0"));
        }
        Ok(RootInfo {
            addr: SocketAddr::new(ip, port),
            token: u128::from_le_bytes(b[32..48].try_into().unwrap()),
            pid: u32_at(48),
            host: u64::from_le_bytes(b[56..64].try_into().unwrap()),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> RootInfo {
        RootInfo {
            addr: "198.18.0.7:60001".parse().unwrap(),
            token: 0x0123_4567_89ab_cdef_0011_2233_4455_6677,
            pid: 4242,
            host: 99,
        }
    }

    #[test]
    fn roundtrip_v4_v6() {
        let r = sample();
        assert_eq!(RootInfo::decode(&r.encode()).unwrap(), r);
        let r6 = RootInfo {
            addr: "[2001:db8::1]:60002".parse().unwrap(),
            ..r
        };
        assert_eq!(RootInfo::decode(&r6.encode()).unwrap(), r6);
    }

    #[test]
    fn rejects_corruption_and_foreign_blobs() {
        let good = sample().encode();
        for i in [0usize, 5, 8, 12, 20, 40, 50, 60, 64, 100, 4107] {
            let mut b = good;
            b[i] ^= 0x40;
            assert!(
                RootInfo::decode(&b).is_err(),
                "byte {i} flipped was accepted"
            );
        }
        assert!(RootInfo::decode(&[0u8; ROOT_INFO_BYTES]).is_err());
        assert!(RootInfo::decode(&[0xffu8; ROOT_INFO_BYTES]).is_err());
        assert!(RootInfo::decode(&good[..100]).is_err());
    }
}
