//! An operation's identity on the wire: the tag each of its messages carries, and the notices
//! that let a rank which only sends to a peer hear whether that peer called the same operation.
//!
//! Every message of an operation carries its tag (see [`crate::transport::tag`]) and every
//! receive checks it before delivery, so a rank never consumes data of another operation. That
//! alone makes every rank that *receives* from a disagreeing peer fail. A rank that only sends
//! to a peer (a Broadcast root, a Reduce leaf) would not hear of a mismatch, so in the
//! collectives where that happens each one-way pair also exchanges a *notice*: at the first step
//! that involves the peer, the rank that only receives sends an empty message tagged like its
//! data would be, and the rank that only sends waits for it. The sender thereby learns, at the
//! latest when its own operation would complete, whether the receiver agrees — and when the
//! peer runs a different schedule, whatever it sent first arrives instead and is refused.
//!
//! The small-message path drops the notices between pairs over eager links and lets the sender
//! run ahead (see [`super::small`]): there a sender learns of a mismatch at its next call, from
//! the receiver's abort or from what it left unclaimed (a message of an earlier operation is
//! judged a mismatch by [`Expectation::check_stray`] too), and ranks that wait for each other in
//! different operations find out through [`Expectation::identity`].
//!
//! Point-to-point transfers carry no notices: a `HcclSend` may pair with one item of a
//! `HcclBatchSendRecv` that also receives, so the two sides would not agree on which messages
//! flow back. Their messages are numbered per pair and direction and tagged with their length,
//! so the receiver of a mismatched transfer fails (naming both sizes) and aborts the
//! communicator; the sender learns of it at its next call.
//!
//! Operations whose every result depends on every rank (AllReduce, AllGather(V),
//! ReduceScatter(V), AlltoAll, Barrier) need no notices: a rank completes only after data from
//! every rank reached it through ranks that checked its tag, so success on any rank implies that
//! all ranks agreed.
//!
//! When ranks disagree about the schedule itself (a different root, kind or algorithm), a peer
//! may send to this rank where it posts no receive, and both would wait until the timeout. A
//! rank whose wait stalls therefore examines such unclaimed messages ([`Expectation`]): one that
//! claims the running operation's place in the sequence but that this operation would never
//! accept is a mismatch, reported at once. A Broadcast or Scatter rank whose data came only
//! from agreeing ranks, and which exchanged nothing with a disagreeing one, may still complete
//! (with correct data), as may a leaf of a small Reduce (sent whole to the root, so it exchanges
//! with the root alone and has no output); the disagreeing ranks abort the communicator, so its
//! next call fails.

use crate::algo::{Action, Coll, Schedule};
use crate::base::dtype::{DataType, ReduceOp};
use crate::base::error::{Error, ErrorKind, Result};
use crate::base::topology::fnv64;
use crate::transport::tag::{self, OpKind, OpTag, Tag};
use crate::transport::Expectation;

/// A message a one-way pair exchanges at the first step that involves the peer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Notice {
    /// The step at which it is posted.
    pub step: u32,
    /// The peer.
    pub peer: u32,
    /// True: this rank only receives from `peer` and sends it the notice; false: this rank only
    /// sends to `peer` and waits for its notice.
    pub send: bool,
    /// Length of the first data message of the pair in the other direction (it names
    /// point-to-point notices).
    pub bytes: usize,
}

/// What one operation receives from a peer: data, a notice, or both (in different segments).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Inbound {
    /// The peer.
    pub peer: u32,
    /// Some step receives data from it.
    pub data: bool,
    /// Some step waits for its notice.
    pub notice: bool,
}

/// What rank `me` receives from each peer over all `parts` (schedule and its notices) of one
/// operation, sorted by peer.
pub fn inbound<'s>(
    me: u32,
    parts: impl IntoIterator<Item = (&'s Schedule, &'s [Notice])>,
) -> Vec<Inbound> {
    let mut all: std::collections::BTreeMap<u32, Inbound> = Default::default();
    let mut note = |peer: u32, data: bool| {
        let e = all.entry(peer).or_insert(Inbound {
            peer,
            data: false,
            notice: false,
        });
        if data {
            e.data = true;
        } else {
            e.notice = true;
        }
    };
    for (sched, notices) in parts {
        for a in sched.steps.iter().flat_map(|s| &s.actions) {
            if let Action::Recv { peer, .. } | Action::RecvReduce { peer, .. } = *a {
                if peer != me {
                    note(peer, true);
                }
            }
        }
        for n in notices.iter().filter(|n| !n.send) {
            note(n.peer, false);
        }
    }
    all.into_values().collect()
}

/// Whether the operation of kind `kind` needs notices (see the module documentation).
pub fn needs_notices(kind: OpKind) -> bool {
    matches!(kind, OpKind::Broadcast | OpKind::Reduce | OpKind::Scatter)
}

/// The notices rank `me` posts while running `sched`, in step order.
pub fn notices(sched: &Schedule, me: u32) -> Vec<Notice> {
    // Per peer: first step, first send length, first receive length.
    struct Pair {
        peer: u32,
        step: u32,
        sent: Option<usize>,
        received: Option<usize>,
    }
    let mut pairs: Vec<Pair> = Vec::new();
    let mut index = std::collections::HashMap::new();
    for (si, step) in sched.steps.iter().enumerate() {
        for a in &step.actions {
            let (peer, len, send) = match *a {
                Action::Send { peer, src } => (peer, src.len, true),
                Action::Recv { peer, dst } | Action::RecvReduce { peer, dst } => {
                    (peer, dst.len, false)
                }
                _ => continue,
            };
            if peer == me {
                continue;
            }
            let i = *index.entry(peer).or_insert_with(|| {
                pairs.push(Pair {
                    peer,
                    step: si as u32,
                    sent: None,
                    received: None,
                });
                pairs.len() - 1
            });
            let p = &mut pairs[i];
            let first = if send { &mut p.sent } else { &mut p.received };
            first.get_or_insert(len);
        }
    }
    pairs
        .into_iter()
        .filter_map(|p| match (p.sent, p.received) {
            (None, Some(bytes)) => Some(Notice {
                step: p.step,
                peer: p.peer,
                send: true,
                bytes,
            }),
            (Some(bytes), None) => Some(Notice {
                step: p.step,
                peer: p.peer,
                send: false,
                bytes,
            }),
            _ => None,
        })
        .collect()
}

/// The kind a collective is tagged with.
pub fn kind_of(coll: &Coll) -> OpKind {
    match coll {
        Coll::AllReduce { .. } => OpKind::AllReduce,
        Coll::Broadcast { .. } => OpKind::Broadcast,
        Coll::Reduce { .. } => OpKind::Reduce,
        Coll::AllGather { .. } => OpKind::AllGather,
        Coll::AllGatherV { .. } => OpKind::AllGatherV,
        Coll::ReduceScatter { .. } => OpKind::ReduceScatter,
        Coll::ReduceScatterV { .. } => OpKind::ReduceScatterV,
        Coll::Scatter { .. } => OpKind::Scatter,
        Coll::AlltoAllV { .. } => OpKind::AlltoAll,
        Coll::P2p { .. } => OpKind::P2p,
        Coll::Barrier => OpKind::Barrier,
    }
}

/// A digest of per-rank counts that every rank must agree on.
fn digest(counts: &[usize]) -> u32 {
    let bytes: Vec<u8> = counts
        .iter()
        .flat_map(|c| (*c as u64).to_le_bytes())
        .collect();
    let h = fnv64(&bytes);
    (h ^ (h >> 32)) as u32
}

/// What the tags of every call of `coll` share, whatever its data type, operator and place in
/// the sequence: kind, root, count (the digest of per-rank counts for the V forms). Computed
/// once per plan; [`OpTags::new`] fills in the rest.
pub fn template(coll: &Coll) -> OpTag {
    let mut t = OpTag::new(kind_of(coll));
    match coll {
        Coll::AllReduce { count } | Coll::AllGather { count } | Coll::ReduceScatter { count } => {
            t.count = *count as u64
        }
        Coll::Broadcast { count, root }
        | Coll::Reduce { count, root }
        | Coll::Scatter { count, root } => {
            t.count = *count as u64;
            t.root = *root;
        }
        Coll::AllGatherV { counts, .. } | Coll::ReduceScatterV { counts, .. } => {
            t.aux = digest(counts)
        }
        Coll::AlltoAllV { .. } | Coll::P2p { .. } | Coll::Barrier => {}
    }
    t
}

/// How the tag varies with the peer.
enum Form<'a> {
    /// One tag for every message.
    Uniform,
    /// Every rank must agree on per-rank counts: the tag carries the sender's own count and a
    /// digest of all of them.
    PerRank(&'a [usize]),
    /// Each pair agrees on what it exchanges: the count the sender sends and the count it
    /// expects back.
    PerPair {
        send: &'a [usize],
        recv: &'a [usize],
    },
    /// Point-to-point: messages numbered per pair and direction, tagged with their length.
    P2p {
        sent: &'a mut [u32],
        received: &'a mut [u32],
    },
}

/// The tags of one operation's messages, as rank `me` sends and expects them, and what the
/// operation receives from each peer.
pub struct OpTags<'a> {
    me: u32,
    /// The operation's tag on the wire (every message's, for the uniform forms).
    base: Tag,
    form: Form<'a>,
    /// What the operation receives from each peer, when known (else unclaimed messages are not
    /// examined).
    inbound: Option<&'a [Inbound]>,
}

/// Point-to-point message counters of one rank: per peer, messages sent and received.
#[derive(Clone, Debug, Default)]
pub struct P2pCounters {
    sent: Vec<u32>,
    received: Vec<u32>,
}

impl P2pCounters {
    /// Counters for a communicator of `n` ranks.
    pub fn new(n: u32) -> P2pCounters {
        P2pCounters {
            sent: vec![0; n as usize],
            received: vec![0; n as usize],
        }
    }
}

/// The tag of a call of `coll` (from its [`template`]) on elements of `dtype` reduced with `op`,
/// the `seq`-th operation of its communicator.
pub fn call_tag(
    template: &OpTag,
    coll: &Coll,
    dtype: DataType,
    op: Option<ReduceOp>,
    seq: u32,
) -> OpTag {
    let mut t = *template;
    t.seq = seq;
    if !matches!(coll, Coll::P2p { .. } | Coll::Barrier) {
        t.dtype = Some(dtype);
        t.op = op;
    }
    t
}

impl<'a> OpTags<'a> {
    /// The tags of collective `coll` on rank `me`, whose own tag is `call` (see [`call_tag`]);
    /// `inbound` is what the operation receives (see [`inbound`]; `None`: unknown), `p2p`
    /// numbers point-to-point messages.
    // Forced: on the repeat path LLVM otherwise keeps it out of line, a frame per call.
    #[inline(always)]
    pub fn new(
        me: u32,
        coll: &'a Coll,
        call: Tag,
        inbound: Option<&'a [Inbound]>,
        p2p: &'a mut P2pCounters,
    ) -> OpTags<'a> {
        let form = match coll {
            Coll::AllGatherV { counts, .. } | Coll::ReduceScatterV { counts, .. } => {
                Form::PerRank(counts)
            }
            Coll::AlltoAllV {
                send_counts,
                recv_counts,
                ..
            } => Form::PerPair {
                send: send_counts,
                recv: recv_counts,
            },
            // Items of one batch may have different types; their lengths are compared.
            Coll::P2p { .. } => Form::P2p {
                sent: &mut p2p.sent,
                received: &mut p2p.received,
            },
            _ => Form::Uniform,
        };
        OpTags {
            me,
            base: call,
            form,
            inbound,
        }
    }

    /// The tags of internal traffic (`kind`, e.g. link calibration) that is not counted among
    /// the communicator's operations.
    pub fn internal(kind: OpKind) -> OpTags<'static> {
        OpTags {
            me: 0,
            base: OpTag::new(kind).encode(),
            form: Form::Uniform,
            inbound: None,
        }
    }

    /// The tag of a data message of `len` bytes this rank sends to `peer`.
    #[inline(always)]
    pub fn to(&mut self, peer: u32, len: usize) -> Tag {
        match &mut self.form {
            Form::Uniform => self.base,
            Form::PerRank(counts) => self.base.with_count(counts[self.me as usize], None),
            Form::PerPair { send, recv } => self
                .base
                .with_count(send[peer as usize], Some(saturate(recv[peer as usize]))),
            Form::P2p { sent, .. } => {
                let seq = &mut sent[peer as usize];
                *seq = seq.wrapping_add(1);
                self.base
                    .with_count(len, None)
                    .with_seq(seq.wrapping_sub(1))
            }
        }
    }

    /// The tag this rank expects on a data message of `len` bytes from `peer`.
    #[inline(always)]
    pub fn from(&mut self, peer: u32, len: usize) -> Tag {
        match &mut self.form {
            Form::Uniform => self.base,
            Form::P2p { received, .. } => {
                let seq = &mut received[peer as usize];
                *seq = seq.wrapping_add(1);
                self.base
                    .with_count(len, None)
                    .with_seq(seq.wrapping_sub(1))
            }
            _ => self.expected(peer),
        }
    }

    /// The tag a data message from `peer` carries when it agrees (collectives only).
    fn expected(&self, peer: u32) -> Tag {
        match &self.form {
            Form::PerRank(counts) => self.base.with_count(counts[peer as usize], None),
            Form::PerPair { send, recv } => self
                .base
                .with_count(recv[peer as usize], Some(saturate(send[peer as usize]))),
            _ => self.base,
        }
    }

    /// The tag of notice `n`: the one this rank sends, or the one it expects from the peer.
    /// Posted before the step's data, so point-to-point notices carry the number of the pair's
    /// next message in the data's direction.
    pub fn notice(&self, n: &Notice) -> Tag {
        let t = match &self.form {
            Form::P2p { sent, received } => {
                self.base.with_count(n.bytes, None).with_seq(if n.send {
                    received[n.peer as usize]
                } else {
                    sent[n.peer as usize]
                })
            }
            _ => self.base,
        };
        t.as_notice()
    }
}

impl Expectation for OpTags<'_> {
    fn identity(&self) -> Option<Tag> {
        let p2p = matches!(self.form, Form::P2p { .. });
        (!p2p && self.inbound.is_some()).then_some(self.base)
    }

    fn check_stray(&self, peer: u32, got: &Tag) -> Result<()> {
        let Some(inbound) = self.inbound else {
            return Ok(());
        };
        if matches!(self.form, Form::P2p { .. }) {
            // Point-to-point numbering is per pair; unclaimed messages are left to the receive.
            return Ok(());
        }
        let data = self.expected(peer);
        let Some(g) = OpTag::decode(&got.0) else {
            return Err(tag::mismatch(got, &data, peer, self.me));
        };
        if g.kind == OpKind::P2p {
            return Ok(());
        }
        let behind = self.base.seq().wrapping_sub(g.seq) as i32;
        if behind > 0 {
            // An earlier operation's, which this rank completed without taking it: the two
            // called different things then (a sender completes eagerly, see `super::small`).
            return Err(tag::mismatch(got, &data, peer, self.me));
        }
        if behind < 0 {
            // A later operation's: a peer that is ahead.
            return Ok(());
        }
        let role = inbound
            .binary_search_by_key(&peer, |i| i.peer)
            .ok()
            .map(|i| inbound[i]);
        let notice = data.as_notice();
        match role {
            Some(r) if (r.data && *got == data) || (r.notice && *got == notice) => Ok(()),
            Some(r) => Err(tag::mismatch(
                got,
                if r.data { &data } else { &notice },
                peer,
                self.me,
            )),
            None if *got == data || *got == notice => Err(Error::new(
                ErrorKind::Para,
                format!(
                    "operation mismatch: rank {peer} sent rank {} a message of {} ({}), but \
                     rank {}'s schedule for the same call never receives from rank {peer}: the \
                     ranks chose different algorithms (HCCL_ALGO, HCCL_BUFFSIZE and the \
                     communicator configuration must agree)",
                    self.me,
                    g.describe(),
                    format_args!("operation #{}", g.seq),
                    self.me
                ),
            )),
            None => Err(tag::mismatch(got, &data, peer, self.me)),
        }
    }
}

fn saturate(c: usize) -> u32 {
    u32::try_from(c).unwrap_or(u32::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algo::{Buf, Span};

    fn tags<'a>(
        me: u32,
        coll: &'a Coll,
        dtype: DataType,
        seq: u32,
        p2p: &'a mut P2pCounters,
    ) -> OpTags<'a> {
        let call = call_tag(&template(coll), coll, dtype, None, seq);
        OpTags::new(me, coll, call.encode(), None, p2p)
    }

    fn send(peer: u32, len: usize) -> Action {
        Action::Send {
            peer,
            src: Span::new(Buf::Send, 0, len),
        }
    }

    fn recv(peer: u32, len: usize) -> Action {
        Action::Recv {
            peer,
            dst: Span::new(Buf::Recv, 0, len),
        }
    }

    #[test]
    fn notices_for_one_way_pairs_only() {
        let mut s = Schedule::new("t");
        s.step().extend([send(1, 8), recv(2, 4), send(3, 5)]);
        s.step()
            .extend([recv(1, 8), recv(3, 6), send(0, 1), recv(0, 1)]);
        s.step().extend([send(4, 2), recv(5, 3)]);
        let n = notices(&s, 0);
        assert_eq!(
            n,
            vec![
                Notice {
                    step: 0,
                    peer: 2,
                    send: true,
                    bytes: 4
                },
                Notice {
                    step: 2,
                    peer: 4,
                    send: false,
                    bytes: 2
                },
                Notice {
                    step: 2,
                    peer: 5,
                    send: true,
                    bytes: 3
                },
            ]
        );
    }

    #[test]
    fn pair_tags_mirror_each_other() {
        // Rank 0 sends 3 to rank 1 and expects 5; rank 1 the opposite.
        let c0 = Coll::AlltoAllV {
            send_counts: vec![0, 3],
            send_displs: vec![0, 0],
            recv_counts: vec![0, 5],
            recv_displs: vec![0, 0],
        };
        let c1 = Coll::AlltoAllV {
            send_counts: vec![5, 0],
            send_displs: vec![0, 0],
            recv_counts: vec![3, 0],
            recv_displs: vec![0, 0],
        };
        let (mut p0, mut p1) = (P2pCounters::new(2), P2pCounters::new(2));
        let mut t0 = tags(0, &c0, DataType::Fp32, 4, &mut p0);
        let mut t1 = tags(1, &c1, DataType::Fp32, 4, &mut p1);
        assert_eq!(t0.to(1, 12), t1.from(0, 12));
        assert_eq!(t1.to(0, 20), t0.from(1, 20));
        let c1_bad = Coll::AlltoAllV {
            send_counts: vec![6, 0],
            send_displs: vec![0, 0],
            recv_counts: vec![3, 0],
            recv_displs: vec![0, 0],
        };
        let mut t1 = tags(1, &c1_bad, DataType::Fp32, 4, &mut p1);
        assert_ne!(t1.to(0, 24), t0.from(1, 24));
    }

    #[test]
    fn unclaimed_messages_of_the_running_operation_are_judged() {
        let coll = Coll::Broadcast { count: 8, root: 0 };
        let other = Coll::Broadcast { count: 8, root: 3 };
        let mut p = P2pCounters::new(4);
        let mut q = P2pCounters::new(4);
        let inbound = [
            Inbound {
                peer: 0,
                data: true,
                notice: false,
            },
            Inbound {
                peer: 2,
                data: false,
                notice: true,
            },
        ];
        let call = call_tag(&template(&coll), &coll, DataType::Fp32, None, 5);
        let mine = OpTags::new(1, &coll, call.encode(), Some(&inbound), &mut p);
        let mut theirs = tags(3, &other, DataType::Fp32, 5, &mut q);
        let expected = tags(0, &coll, DataType::Fp32, 5, &mut P2pCounters::new(4)).to(1, 32);
        // What a later step takes, and another operation's message, pass.
        assert!(mine.check_stray(0, &expected).is_ok());
        let notice = mine.notice(&Notice {
            step: 0,
            peer: 2,
            send: false,
            bytes: 0,
        });
        assert!(mine.check_stray(2, &notice).is_ok());
        let later = OpTag {
            seq: 6,
            ..OpTag::decode(&theirs.to(1, 32).0).unwrap()
        };
        assert!(mine.check_stray(3, &later.encode()).is_ok());
        // A message of an earlier operation left unclaimed: the peer disagreed then.
        let earlier = OpTag {
            seq: 4,
            ..OpTag::decode(&expected.0).unwrap()
        };
        let e = mine.check_stray(0, &earlier.encode()).unwrap_err();
        assert!(e.msg.contains("operation #4"), "{}", e.msg);
        // A peer that named another root, or that sends where this rank never receives.
        let e = mine.check_stray(3, &theirs.to(1, 32)).unwrap_err();
        assert!(
            e.msg.contains("root=3") && e.msg.contains("root=0"),
            "{}",
            e.msg
        );
        let e = mine.check_stray(3, &expected).unwrap_err();
        assert!(e.msg.contains("different algorithms"), "{}", e.msg);
        // Without a known inbound table nothing is judged.
        let blind = tags(1, &coll, DataType::Fp32, 5, &mut p);
        assert!(blind.check_stray(3, &theirs.to(1, 32)).is_ok());
    }

    #[test]
    fn point_to_point_messages_are_numbered_per_pair() {
        let items = Coll::P2p { items: Vec::new() };
        let (mut a, mut b) = (P2pCounters::new(3), P2pCounters::new(3));
        for k in 0..3 {
            let mut ta = tags(0, &items, DataType::Uint8, 9, &mut a);
            let mut tb = tags(2, &items, DataType::Uint8, 9 + k, &mut b);
            let notice = Notice {
                step: 0,
                peer: 2,
                send: false,
                bytes: 16,
            };
            let back = Notice {
                step: 0,
                peer: 0,
                send: true,
                bytes: 16,
            };
            assert_eq!(ta.notice(&notice), tb.notice(&back), "message {k}");
            assert_eq!(ta.to(2, 16), tb.from(0, 16), "message {k}");
        }
        let mut ta = tags(0, &items, DataType::Uint8, 0, &mut a);
        let mut tb = tags(2, &items, DataType::Uint8, 0, &mut b);
        assert_ne!(ta.to(2, 16), tb.from(0, 8), "lengths differ");
    }
}
