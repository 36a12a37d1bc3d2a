//! The operation tag every message carries: which operation of the communicator it belongs to
//! (kind, data type, reduction operator, root, element count, sequence number) in 24 bytes.
//!
//! A receive names the tag it expects; a link compares the incoming message's tag with it
//! before it looks at the length or touches the destination, so a message of another operation
//! (a peer that called something else, or data left over from an earlier mismatch) is refused
//! instead of being consumed. The links only carry and compare tags ([`Tag::check`]); what a
//! tag means, and the error naming both sides' calls, live here.
//!
//! Layout (little endian): `seq: u32`, `kind: u8`, `dtype: u8`, `op: u8`, `flags: u8`,
//! `root: u32`, `aux: u32`, `count: u64`. `count` is the element count of the operation, or for
//! the per-peer forms what the pair exchanges; `aux` carries what else both sides must agree on
//! (a digest of the per-rank counts, or the count of the other direction).

use std::fmt::Write as _;

use crate::base::compress::Spec;
use crate::base::dtype::{DataType, ReduceOp};
use crate::base::error::{Error, ErrorKind, Result};

/// Bytes of a tag on the wire.
pub const TAG_LEN: usize = 24;

/// The flag of a notice: an empty message a rank sends to a peer it only receives from in an
/// operation, so that the peer (which only sends to it) hears whether both called the same.
pub const FLAG_NOTICE: u8 = 1;
const KNOWN_FLAGS: u8 = FLAG_NOTICE;
const NONE: u8 = 0xff;

/// What a message belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum OpKind {
    /// Link-cost probes at communicator creation.
    Calibrate = 1,
    /// `HcclAllReduce`.
    AllReduce = 2,
    /// `HcclBroadcast`.
    Broadcast = 3,
    /// `HcclReduce`.
    Reduce = 4,
    /// `HcclAllGather`.
    AllGather = 5,
    /// `HcclAllGatherV`.
    AllGatherV = 6,
    /// `HcclReduceScatter`.
    ReduceScatter = 7,
    /// `HcclReduceScatterV`.
    ReduceScatterV = 8,
    /// `HcclScatter`.
    Scatter = 9,
    /// `HcclAlltoAll`, `HcclAlltoAllV`, `HcclAlltoAllVC`.
    AlltoAll = 10,
    /// `HcclSend`, `HcclRecv`, `HcclBatchSendRecv`.
    P2p = 11,
    /// `HcclBarrier`.
    Barrier = 12,
    /// `HcclExtAllReduceCompressed`, or an AllReduce that `HCCL_COMPRESSION` compresses:
    /// `root` and `aux` carry the compression (see [`Spec::to_wire`]).
    CompressedAllReduce = 13,
}

impl OpKind {
    const ALL: [OpKind; 13] = [
        OpKind::Calibrate,
        OpKind::AllReduce,
        OpKind::Broadcast,
        OpKind::Reduce,
        OpKind::AllGather,
        OpKind::AllGatherV,
        OpKind::ReduceScatter,
        OpKind::ReduceScatterV,
        OpKind::Scatter,
        OpKind::AlltoAll,
        OpKind::P2p,
        OpKind::Barrier,
        OpKind::CompressedAllReduce,
    ];

    fn from_raw(v: u8) -> Option<OpKind> {
        OpKind::ALL.into_iter().find(|k| *k as u8 == v)
    }

    /// Name as the C API spells it (without the `Hccl` prefix).
    pub fn name(self) -> &'static str {
        match self {
            OpKind::Calibrate => "link calibration",
            OpKind::AllReduce => "AllReduce",
            OpKind::Broadcast => "Broadcast",
            OpKind::Reduce => "Reduce",
            OpKind::AllGather => "AllGather",
            OpKind::AllGatherV => "AllGatherV",
            OpKind::ReduceScatter => "ReduceScatter",
            OpKind::ReduceScatterV => "ReduceScatterV",
            OpKind::Scatter => "Scatter",
            OpKind::AlltoAll => "AlltoAll",
            OpKind::P2p => "Send/Recv",
            OpKind::Barrier => "Barrier",
            OpKind::CompressedAllReduce => "compressed AllReduce",
        }
    }

    fn rooted(self) -> bool {
        matches!(self, OpKind::Broadcast | OpKind::Reduce | OpKind::Scatter)
    }
}

/// A decoded tag.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OpTag {
    /// Position of the operation: the communicator's collective counter, or for point-to-point
    /// messages the number of earlier ones between the pair in that direction.
    pub seq: u32,
    /// Operation kind.
    pub kind: OpKind,
    /// Element type (`None` where it does not apply).
    pub dtype: Option<DataType>,
    /// Reduction operator (`None` where it does not apply).
    pub op: Option<ReduceOp>,
    /// [`FLAG_NOTICE`] or 0.
    pub flags: u8,
    /// Root rank of rooted operations, else 0.
    pub root: u32,
    /// Second value both sides must agree on (see the module documentation).
    pub aux: u32,
    /// Element count (bytes for point-to-point messages).
    pub count: u64,
}

/// A tag as it travels: compared as bytes, decoded only to explain a mismatch.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Tag(pub [u8; TAG_LEN]);

impl Tag {
    /// This tag with its sequence number replaced (what [`OpTag::encode`] would write).
    #[inline]
    pub fn with_seq(mut self, seq: u32) -> Tag {
        self.0[0..4].copy_from_slice(&seq.to_le_bytes());
        self
    }

    /// This tag with its count, and its `aux` when given, replaced.
    #[inline]
    pub fn with_count(mut self, count: usize, aux: Option<u32>) -> Tag {
        self.0[16..24].copy_from_slice(&(count as u64).to_le_bytes());
        if let Some(a) = aux {
            self.0[12..16].copy_from_slice(&a.to_le_bytes());
        }
        self
    }

    /// This tag marked as a notice.
    #[inline]
    pub fn as_notice(mut self) -> Tag {
        self.0[7] |= FLAG_NOTICE;
        self
    }

    /// The sequence number, read without decoding the rest.
    pub fn seq(&self) -> u32 {
        u32::from_le_bytes([self.0[0], self.0[1], self.0[2], self.0[3]])
    }

    /// Whether this tags a point-to-point message, read without decoding the rest.
    pub fn is_p2p(&self) -> bool {
        self.0[4] == OpKind::P2p as u8
    }
}

impl OpTag {
    /// A tag of `kind` with everything else empty.
    pub fn new(kind: OpKind) -> OpTag {
        OpTag {
            seq: 0,
            kind,
            dtype: None,
            op: None,
            flags: 0,
            root: 0,
            aux: 0,
            count: 0,
        }
    }

    /// The bytes on the wire.
    pub fn encode(&self) -> Tag {
        let mut b = [0u8; TAG_LEN];
        b[0..4].copy_from_slice(&self.seq.to_le_bytes());
        b[4] = self.kind as u8;
        b[5] = self.dtype.map_or(NONE, |d| d.raw() as u8);
        b[6] = self.op.map_or(NONE, |o| o.raw() as u8);
        b[7] = self.flags;
        b[8..12].copy_from_slice(&self.root.to_le_bytes());
        b[12..16].copy_from_slice(&self.aux.to_le_bytes());
        b[16..24].copy_from_slice(&self.count.to_le_bytes());
        Tag(b)
    }

    /// Parses a tag; `None` when the bytes are not one this library writes.
    pub fn decode(b: &[u8]) -> Option<OpTag> {
        let b: &[u8; TAG_LEN] = b.get(..TAG_LEN)?.try_into().ok()?;
        let kind = OpKind::from_raw(b[4])?;
        let dtype = match b[5] {
            NONE => None,
            v => Some(DataType::from_raw(v as u32)?),
        };
        let op = match b[6] {
            NONE => None,
            v => Some(ReduceOp::from_raw(v as u32)?),
        };
        if b[7] & !KNOWN_FLAGS != 0 {
            return None;
        }
        Some(OpTag {
            seq: u32::from_le_bytes(b[0..4].try_into().ok()?),
            kind,
            dtype,
            op,
            flags: b[7],
            root: u32::from_le_bytes(b[8..12].try_into().ok()?),
            aux: u32::from_le_bytes(b[12..16].try_into().ok()?),
            count: u64::from_le_bytes(b[16..24].try_into().ok()?),
        })
    }

    /// The same tag marked as a notice.
    pub fn notice(mut self) -> OpTag {
        self.flags |= FLAG_NOTICE;
        self
    }

    /// The call this tag stands for, e.g. `AllReduce count=1048576 fp32 sum`.
    pub fn describe(&self) -> String {
        let mut s = String::from(self.kind.name());
        s.push(' ');
        s.push_str(&self.count_text());
        if let Some(d) = self.dtype {
            let _ = write!(s, " {}", d.name());
        }
        if let Some(o) = self.op {
            let _ = write!(s, " {}", o.name());
        }
        if self.kind.rooted() {
            let _ = write!(s, " root={}", self.root);
        }
        s
    }

    fn count_text(&self) -> String {
        match self.kind {
            OpKind::P2p => format!("of {} bytes", self.count),
            OpKind::AllGatherV | OpKind::ReduceScatterV => {
                format!("count={} (counts digest {:08x})", self.count, self.aux)
            }
            OpKind::AlltoAll => {
                format!("sending {} elements and expecting {}", self.count, self.aux)
            }
            OpKind::CompressedAllReduce => format!(
                "count={} {}",
                self.count,
                Spec::from_wire(self.root, self.aux)
                    .map_or_else(|| "(unknown compression)".to_string(), |s| s.to_string())
            ),
            _ => format!("count={}", self.count),
        }
    }

    /// What `self` (the receiver's expectation) says that differs from `got`.
    fn differences(&self, got: &OpTag) -> String {
        if self.kind != got.kind {
            return format!("called {} ({})", self.describe(), self.position());
        }
        let mut d: Vec<String> = Vec::new();
        let method = self.kind == OpKind::CompressedAllReduce && self.root != got.root;
        if self.count != got.count || self.aux != got.aux || method {
            d.push(self.count_text());
        }
        if self.dtype != got.dtype {
            d.push(
                self.dtype
                    .map_or("no data type".into(), |t| t.name().into()),
            );
        }
        if self.op != got.op {
            d.push(self.op.map_or("no reduction".into(), |o| o.name().into()));
        }
        if self.kind.rooted() && self.root != got.root {
            d.push(format!("root={}", self.root));
        }
        if d.is_empty() && self.flags != got.flags {
            d.push("a different schedule (the ranks chose different algorithms)".into());
        }
        if self.seq != got.seq {
            d.push(format!("is at {}", self.position()));
        }
        d.join(" ")
    }

    fn position(&self) -> String {
        match self.kind {
            OpKind::P2p => format!("point-to-point message #{}", self.seq),
            _ => format!("operation #{}", self.seq),
        }
    }
}

impl Tag {
    /// Fails when `got` (the tag of a message from rank `peer`) is not the `want`ed one of rank
    /// `me`: the error names both calls.
    #[inline]
    pub fn check(got: &Tag, want: &Tag, peer: u32, me: u32) -> Result<()> {
        if got == want {
            return Ok(());
        }
        Err(mismatch(got, want, peer, me))
    }
}

/// The error for a message from `peer` tagged `got` where rank `me` expected `want`.
#[cold]
pub fn mismatch(got: &Tag, want: &Tag, peer: u32, me: u32) -> Error {
    let msg = match (OpTag::decode(&got.0), OpTag::decode(&want.0)) {
        (Some(g), Some(w)) => {
            let mut m = format!(
                "operation mismatch: rank {peer} called {} ({})",
                g.describe(),
                g.position()
            );
            let diff = w.differences(&g);
            if diff.is_empty() {
                m.push_str(&format!(", rank {me} expected the same"));
            } else {
                m.push_str(&format!(", rank {me} {diff}"));
            }
            m
        }
        (None, Some(w)) => format!(
            "operation mismatch: rank {peer} sent a message with an unreadable tag {} while \
             rank {me} called {} ({})",
            hex(&got.0),
            w.describe(),
            w.position()
        ),
        _ => format!(
            "operation mismatch: rank {peer} sent tag {} where rank {me} expected {}",
            hex(&got.0),
            hex(&want.0)
        ),
    };
    Error::new(ErrorKind::Para, msg)
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn allreduce(count: u64) -> OpTag {
        OpTag {
            seq: 7,
            dtype: Some(DataType::Fp32),
            op: Some(ReduceOp::Sum),
            count,
            ..OpTag::new(OpKind::AllReduce)
        }
    }

    #[test]
    fn patching_the_bytes_equals_encoding_the_fields() {
        let t = OpTag {
            root: 2,
            aux: 9,
            ..allreduce(5)
        };
        let e = t.encode();
        assert_eq!(e.with_seq(41), OpTag { seq: 41, ..t }.encode());
        assert_eq!(e.seq(), 7);
        assert_eq!(
            e.with_count(1 << 40, None),
            OpTag {
                count: 1 << 40,
                ..t
            }
            .encode()
        );
        assert_eq!(
            e.with_count(3, Some(u32::MAX)),
            OpTag {
                count: 3,
                aux: u32::MAX,
                ..t
            }
            .encode()
        );
        assert_eq!(e.as_notice(), t.notice().encode());
    }

    #[test]
    fn roundtrip_and_rejects_unknown_values() {
        let t = OpTag {
            seq: u32::MAX,
            root: 3,
            aux: 0xdead_beef,
            ..allreduce(u64::MAX)
        };
        assert_eq!(OpTag::decode(&t.encode().0), Some(t));
        let n = OpTag::new(OpKind::Barrier).notice();
        assert_eq!(OpTag::decode(&n.encode().0), Some(n));
        let good = t.encode().0;
        for (i, v) in [(4usize, 0u8), (4, 200), (5, 13), (5, 99), (6, 4), (7, 2)] {
            let mut b = good;
            b[i] = v;
            assert_eq!(OpTag::decode(&b), None, "byte {i} = {v}");
        }
        assert_eq!(OpTag::decode(&good[..23]), None);
    }

    #[test]
    fn mismatch_names_both_calls() {
        let e = Tag::check(
            &allreduce(2_097_152).encode(),
            &allreduce(1_048_576).encode(),
            1,
            0,
        )
        .unwrap_err();
        assert_eq!(e.kind, ErrorKind::Para);
        assert!(
            e.msg
                .contains("rank 1 called AllReduce count=2097152 fp32 sum")
                && e.msg.contains("rank 0 count=1048576"),
            "{}",
            e.msg
        );
        let bcast = OpTag {
            op: None,
            root: 0,
            count: 1024,
            ..OpTag::new(OpKind::Broadcast)
        };
        let bcast = OpTag {
            seq: 7,
            dtype: Some(DataType::Fp32),
            ..bcast
        };
        let e = Tag::check(&bcast.encode(), &allreduce(1024).encode(), 0, 1).unwrap_err();
        assert!(
            e.msg
                .contains("rank 0 called Broadcast count=1024 fp32 root=0")
                && e.msg
                    .contains("rank 1 called AllReduce count=1024 fp32 sum"),
            "{}",
            e.msg
        );
        let mut max = allreduce(8);
        max.op = Some(ReduceOp::Max);
        max.seq = 8;
        let e = Tag::check(&max.encode(), &allreduce(8).encode(), 2, 3).unwrap_err();
        assert!(e.msg.contains("rank 3 sum is at operation #7"), "{}", e.msg);
        let e = Tag::check(&Tag([0xee; TAG_LEN]), &allreduce(8).encode(), 2, 3).unwrap_err();
        assert!(e.msg.contains("unreadable tag"), "{}", e.msg);
    }
}
