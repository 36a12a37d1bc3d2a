//! Symbolic checking of schedules for all ranks at once, without moving data.
//!
//! Every element carries the set of (rank, element) contributions it holds, stored compactly:
//! a buffer is a list of runs, and a run says "element e holds input element e + delta of every
//! rank in this set of rank intervals". A reduction unions two sets and fails if they share a
//! rank (a contribution counted twice) or disagree on the element (data mixed up); reading an
//! element nobody has written fails ("reads data not yet received"); a step whose receives
//! overlap each other or its own sends fails (a race on memory links). The run loop matches
//! sends to receives in order per rank pair, as the transports do, and reports deadlock when
//! no rank can move. Work is proportional to runs, not elements, so thousands of ranks stay
//! cheap.

use std::collections::{HashMap, VecDeque};

use super::schedule::{Action, Buf, Schedule, Span};
use super::{build, Algo, Coll, Ctx, Topo};

/// A set of ranks as sorted, disjoint, non-adjacent half-open intervals.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RankSet(Vec<(u32, u32)>);

impl RankSet {
    /// `{r}`.
    pub fn one(r: u32) -> RankSet {
        RankSet(vec![(r, r + 1)])
    }

    /// `{0, …, n-1}`.
    pub fn all(n: u32) -> RankSet {
        RankSet(vec![(0, n)])
    }

    /// The sorted, disjoint half-open intervals of the set.
    pub(super) fn intervals(&self) -> &[(u32, u32)] {
        &self.0
    }

    /// The union, or `None` when the sets intersect.
    fn disjoint_union(&self, o: &RankSet) -> Option<RankSet> {
        let mut v: Vec<(u32, u32)> = Vec::with_capacity(self.0.len() + o.0.len());
        let (mut i, mut j) = (0, 0);
        while i < self.0.len() || j < o.0.len() {
            let take_a = j >= o.0.len() || (i < self.0.len() && self.0[i].0 < o.0[j].0);
            let x = if take_a {
                i += 1;
                self.0[i - 1]
            } else {
                j += 1;
                o.0[j - 1]
            };
            match v.last_mut() {
                Some(l) if x.0 < l.1 => return None,
                Some(l) if x.0 == l.1 => l.1 = x.1,
                _ => v.push(x),
            }
        }
        Some(RankSet(v))
    }
}

/// What a run of elements holds: input element `pos + delta` of every rank in `set`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Val {
    pub(super) delta: i64,
    pub(super) set: RankSet,
}

/// A run `[start, end)` of a buffer; `None` = never written.
#[derive(Clone, Debug)]
struct Run {
    start: usize,
    end: usize,
    val: Option<Val>,
}

/// A buffer as runs covering `[0, len)`.
#[derive(Clone, Debug, Default)]
struct SymBuf {
    runs: Vec<Run>,
}

/// A piece of a read: `len` elements; element k of the read (counted from its start) holds
/// input element k + delta.
#[derive(Clone, Debug)]
struct Piece {
    len: usize,
    val: Option<Val>,
}

impl SymBuf {
    fn new(len: usize, val: Option<Val>) -> SymBuf {
        let mut b = SymBuf::default();
        if len > 0 {
            b.runs.push(Run {
                start: 0,
                end: len,
                val,
            });
        }
        b
    }

    fn len(&self) -> usize {
        self.runs.last().map_or(0, |r| r.end)
    }

    fn grow(&mut self, len: usize) {
        let at = self.len();
        if len > at {
            self.runs.push(Run {
                start: at,
                end: len,
                val: None,
            });
        }
    }

    /// Splits so that a run boundary falls at `at`; returns the index of the run starting there.
    fn split(&mut self, at: usize) -> usize {
        let i = self.runs.partition_point(|r| r.end <= at);
        if i < self.runs.len() && self.runs[i].start < at {
            let r = self.runs[i].clone();
            self.runs[i].end = at;
            self.runs.insert(i + 1, Run { start: at, ..r });
            return i + 1;
        }
        i
    }

    fn read(&self, off: usize, len: usize) -> Result<Vec<Piece>, String> {
        if off + len > self.len() {
            return Err(format!(
                "reads [{off}, {}) beyond {} elements",
                off + len,
                self.len()
            ));
        }
        let mut out = Vec::new();
        let mut i = self.runs.partition_point(|r| r.end <= off);
        let mut at = off;
        while at < off + len {
            let r = &self.runs[i];
            let end = r.end.min(off + len);
            let val = r.val.as_ref().map(|v| Val {
                delta: v.delta + off as i64,
                set: v.set.clone(),
            });
            out.push(Piece { len: end - at, val });
            at = end;
            i += 1;
        }
        Ok(out)
    }

    /// Writes (or, with `reduce`, combines into) `[off, off+len)` from `pieces`.
    fn write(&mut self, off: usize, pieces: &[Piece], reduce: bool) -> Result<(), String> {
        let len: usize = pieces.iter().map(|p| p.len).sum();
        if off + len > self.len() {
            return Err(format!(
                "writes [{off}, {}) beyond {} elements",
                off + len,
                self.len()
            ));
        }
        if len == 0 {
            return Ok(());
        }
        let a = self.split(off);
        let b = self.split(off + len);
        let mut new_runs: Vec<Run> = Vec::new();
        let mut at = off;
        for p in pieces {
            let val = p.val.as_ref().map(|v| Val {
                delta: v.delta - off as i64,
                set: v.set.clone(),
            });
            new_runs.push(Run {
                start: at,
                end: at + p.len,
                val,
            });
            at += p.len;
        }
        if reduce {
            let old: Vec<Run> = self.runs[a..b].to_vec();
            let mut merged = Vec::new();
            let (mut i, mut j) = (0, 0);
            let mut pos = off;
            while pos < off + len {
                let (o, n) = (&old[i], &new_runs[j]);
                let end = o.end.min(n.end);
                let val = match (&o.val, &n.val) {
                    (Some(x), Some(y)) => {
                        if x.delta != y.delta {
                            return Err(format!(
                                "reduces element {pos} with a different element ({} and {})",
                                pos as i64 + x.delta,
                                pos as i64 + y.delta
                            ));
                        }
                        let set = x.set.disjoint_union(&y.set).ok_or_else(|| {
                            format!(
                                "element {pos}: contributions {:?} and {:?} overlap (counted \
                                 twice)",
                                x.set.0, y.set.0
                            )
                        })?;
                        Some(Val {
                            delta: x.delta,
                            set,
                        })
                    }
                    _ => return Err(format!("reduces undefined element {pos}")),
                };
                merged.push(Run {
                    start: pos,
                    end,
                    val,
                });
                pos = end;
                if o.end == end {
                    i += 1;
                }
                if n.end == end {
                    j += 1;
                }
            }
            new_runs = merged;
        }
        let added = new_runs.len();
        self.runs.splice(a..b, new_runs);
        self.coalesce(a.saturating_sub(1), a + added + 1);
        Ok(())
    }

    /// Merges equal neighbours among runs `from..=to` (keeps run counts small).
    fn coalesce(&mut self, from: usize, to: usize) {
        let mut i = from;
        let mut to = to.min(self.runs.len().saturating_sub(1));
        while i < to {
            if self.runs[i].val == self.runs[i + 1].val {
                self.runs[i].end = self.runs[i + 1].end;
                self.runs.remove(i + 1);
                to -= 1;
            } else {
                i += 1;
            }
        }
    }

    /// Checks `[off, off+len)` holds input element `pos + delta` of exactly the ranks `set`.
    fn expect(&self, off: usize, len: usize, delta: i64, set: &RankSet) -> Result<(), String> {
        for p in self.read(off, len)? {
            match &p.val {
                Some(v) if v.delta == delta + off as i64 && v.set == *set => {}
                other => {
                    return Err(format!(
                        "[{off}, {}) should hold ranks {:?} (element offset {delta}), holds {:?}",
                        off + len,
                        set.0,
                        other.as_ref().map(|v| (&v.set.0, v.delta - off as i64))
                    ))
                }
            }
        }
        Ok(())
    }
}

/// Buffers of one symbolic rank.
#[derive(Clone, Debug, Default)]
struct RankState {
    send: SymBuf,
    recv: SymBuf,
    scratch: SymBuf,
}

impl RankState {
    fn buf(&mut self, b: Buf) -> Result<&mut SymBuf, String> {
        match b {
            Buf::Send => Ok(&mut self.send),
            Buf::Recv => Ok(&mut self.recv),
            Buf::Scratch => Ok(&mut self.scratch),
            Buf::Ext(_) => Err("point-to-point buffers are not checked symbolically".into()),
        }
    }

    fn read(&mut self, sp: Span) -> Result<Vec<Piece>, String> {
        let p = self.buf(sp.buf)?.read(sp.off, sp.len)?;
        if let Some(i) = p.iter().position(|x| x.val.is_none()) {
            let at: usize = p[..i].iter().map(|x| x.len).sum();
            return Err(format!(
                "reads {:?} element {} before anything was written there",
                sp.buf,
                sp.off + at
            ));
        }
        Ok(p)
    }
}

/// What a successful check found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Report {
    /// Most steps of any rank.
    pub steps: usize,
    /// Most elements sent by any rank.
    pub max_sent: usize,
    /// Messages in total.
    pub messages: usize,
    /// True when no step has two receives reducing into overlapping elements (so reduction
    /// order never depends on message arrival order).
    pub order_fixed: bool,
}

fn overlap(a: Span, b: Span) -> bool {
    a.buf == b.buf && a.off < b.off + b.len && b.off < a.off + a.len && a.len > 0 && b.len > 0
}

/// Per-step hazards: receives overlapping each other or the step's sends. Returns whether two
/// reducing receives overlap (legal, but the reduction order then follows arrival order).
fn step_hazards(actions: &[Action]) -> Result<bool, String> {
    let mut order_dep = false;
    let recvs: Vec<(Span, bool)> = actions
        .iter()
        .filter_map(|a| match *a {
            Action::Recv { dst, .. } => Some((dst, false)),
            Action::RecvReduce { dst, .. } => Some((dst, true)),
            _ => None,
        })
        .collect();
    let sends: Vec<Span> = actions
        .iter()
        .filter_map(|x| match *x {
            Action::Send { src, .. } => Some(src),
            _ => None,
        })
        .collect();
    for (i, &(a, ra)) in recvs.iter().enumerate() {
        for &(b, rb) in &recvs[i + 1..] {
            if overlap(a, b) {
                if ra && rb {
                    order_dep = true;
                } else {
                    return Err(format!("receives into {a:?} and {b:?} overlap in one step"));
                }
            }
        }
        if let Some(s) = sends.iter().find(|&&s| overlap(a, s)) {
            return Err(format!(
                "receive into {a:?} overlaps the send of {s:?} in the same step"
            ));
        }
    }
    Ok(order_dep)
}

/// Initial contents and expected results of one rank, in elements: input and output lengths,
/// what the output holds before the call, and the output ranges `(off, len, delta, set)` that
/// must hold input element `pos + delta` of exactly the ranks `set`.
pub(super) struct Expect {
    pub(super) send: usize,
    pub(super) recv: usize,
    pub(super) recv_init: Option<Val>,
    pub(super) out: Vec<(usize, usize, i64, RankSet)>,
}

fn extent(counts: &[usize], displs: &[usize]) -> usize {
    counts
        .iter()
        .zip(displs)
        .map(|(c, d)| c + d)
        .max()
        .unwrap_or(0)
}

/// What rank `me` of `n` starts with and must end with for `coll`.
pub(super) fn expect(coll: &Coll, me: u32, n: u32, coll_of: &dyn Fn(u32) -> Coll) -> Expect {
    let all = RankSet::all(n);
    let nn = n as usize;
    let m = me as usize;
    let plain = |send, recv, out| Expect {
        send,
        recv,
        recv_init: None,
        out,
    };
    match coll {
        Coll::AllReduce { count } => plain(*count, *count, vec![(0, *count, 0, all)]),
        Coll::ReduceScatter { count } => plain(
            count * nn,
            *count,
            vec![(0, *count, (m * count) as i64, all)],
        ),
        Coll::ReduceScatterV { counts, displs } => plain(
            extent(counts, displs),
            counts[m],
            vec![(0, counts[m], displs[m] as i64, all)],
        ),
        Coll::AllGather { count } => plain(
            *count,
            count * nn,
            (0..n)
                .map(|q| {
                    let at = q as usize * count;
                    (at, *count, -(at as i64), RankSet::one(q))
                })
                .collect(),
        ),
        Coll::AllGatherV { counts, displs } => plain(
            counts[m],
            extent(counts, displs),
            (0..n)
                .map(|q| {
                    let (c, d) = (counts[q as usize], displs[q as usize]);
                    (d, c, -(d as i64), RankSet::one(q))
                })
                .collect(),
        ),
        Coll::Broadcast { count, root } => Expect {
            send: 0,
            recv: *count,
            recv_init: (me == *root).then(|| Val {
                delta: 0,
                set: RankSet::one(*root),
            }),
            out: vec![(0, *count, 0, RankSet::one(*root))],
        },
        Coll::Reduce { count, root } => plain(
            *count,
            *count,
            if me == *root {
                vec![(0, *count, 0, all)]
            } else {
                Vec::new()
            },
        ),
        Coll::Scatter { count, root } => plain(
            count * nn,
            *count,
            vec![(0, *count, (m * count) as i64, RankSet::one(*root))],
        ),
        Coll::AlltoAllV {
            send_counts,
            send_displs,
            recv_counts,
            recv_displs,
        } => plain(
            extent(send_counts, send_displs),
            extent(recv_counts, recv_displs),
            (0..n)
                .map(|p| {
                    let Coll::AlltoAllV {
                        send_displs: sd, ..
                    } = coll_of(p)
                    else {
                        unreachable!("every rank calls AlltoAllV")
                    };
                    let q = p as usize;
                    let delta = sd[m] as i64 - recv_displs[q] as i64;
                    (recv_displs[q], recv_counts[q], delta, RankSet::one(p))
                })
                .collect(),
        ),
        Coll::P2p { .. } | Coll::Barrier => plain(0, 0, Vec::new()),
    }
}

/// Runs `scheds` (one per rank, element size 1) symbolically and checks the outputs against
/// what `coll_of(rank)` must produce.
pub fn run(scheds: &[Schedule], coll_of: &dyn Fn(u32) -> Coll) -> Result<Report, String> {
    let n = scheds.len();
    let mut st: Vec<RankState> = Vec::with_capacity(n);
    let mut rep = Report {
        order_fixed: true,
        ..Default::default()
    };
    for (r, s) in scheds.iter().enumerate() {
        let e = expect(&coll_of(r as u32), r as u32, n as u32, coll_of);
        let mut scratch = SymBuf::default();
        scratch.grow(s.scratch);
        let mine = Val {
            delta: 0,
            set: RankSet::one(r as u32),
        };
        st.push(RankState {
            send: SymBuf::new(e.send, Some(mine)),
            recv: SymBuf::new(e.recv, e.recv_init),
            scratch,
        });
        rep.steps = rep.steps.max(s.steps.len());
        for (k, step) in s.steps.iter().enumerate() {
            if step_hazards(&step.actions).map_err(|e| format!("rank {r} step {k}: {e}"))? {
                rep.order_fixed = false;
            }
        }
    }
    let mut mail: HashMap<(u32, u32), VecDeque<Vec<Piece>>> = HashMap::new();
    let mut at = vec![0usize; n];
    let mut posted = vec![false; n];
    let mut open: Vec<VecDeque<Action>> = vec![VecDeque::new(); n];
    let mut outstanding = vec![0usize; n];
    let mut sent = vec![0usize; n];
    let mut queue: VecDeque<usize> = (0..n).collect();
    let mut queued = vec![true; n];
    let err = |r: usize, k: usize, e: String| format!("rank {r} step {k}: {e}");
    while let Some(r) = queue.pop_front() {
        queued[r] = false;
        let mut wake: Vec<usize> = Vec::new();
        while let Some(step) = scheds[r].steps.get(at[r]) {
            let k = at[r];
            if !posted[r] {
                for a in &step.actions {
                    let (src, dst, red) = match *a {
                        Action::Copy { src, dst } => (src, dst, false),
                        Action::Reduce { dst, src } => (src, dst, true),
                        _ => continue,
                    };
                    let p = st[r].read(src).map_err(|e| err(r, k, e))?;
                    st[r]
                        .buf(dst.buf)?
                        .write(dst.off, &p, red)
                        .map_err(|e| err(r, k, e))?;
                }
                for a in &step.actions {
                    match *a {
                        Action::Send { peer, src } => {
                            if peer as usize >= n || peer as usize == r {
                                return Err(err(r, k, format!("sends to invalid peer {peer}")));
                            }
                            let p = st[r].read(src).map_err(|e| err(r, k, e))?;
                            mail.entry((r as u32, peer)).or_default().push_back(p);
                            outstanding[r] += 1;
                            sent[r] += src.len;
                            rep.messages += 1;
                            wake.push(peer as usize);
                        }
                        Action::Recv { .. } | Action::RecvReduce { .. } => open[r].push_back(*a),
                        _ => {}
                    }
                }
                posted[r] = true;
            }
            let mut still = VecDeque::new();
            let mut blocked: Vec<u32> = Vec::new();
            while let Some(a) = open[r].pop_front() {
                let (peer, dst, red) = match a {
                    Action::Recv { peer, dst } => (peer, dst, false),
                    Action::RecvReduce { peer, dst } => (peer, dst, true),
                    _ => unreachable!("only receives are queued"),
                };
                if blocked.contains(&peer) {
                    still.push_back(a);
                    continue;
                }
                match mail
                    .get_mut(&(peer, r as u32))
                    .and_then(VecDeque::pop_front)
                {
                    Some(p) => {
                        let len: usize = p.iter().map(|x| x.len).sum();
                        if len != dst.len {
                            return Err(err(
                                r,
                                k,
                                format!("expected {} elements from {peer}, got {len}", dst.len),
                            ));
                        }
                        st[r]
                            .buf(dst.buf)?
                            .write(dst.off, &p, red)
                            .map_err(|e| err(r, k, format!("from {peer}: {e}")))?;
                        outstanding[peer as usize] -= 1;
                        wake.push(peer as usize);
                    }
                    None => {
                        blocked.push(peer);
                        still.push_back(a);
                    }
                }
            }
            open[r] = still;
            if !open[r].is_empty() || outstanding[r] > 0 {
                break;
            }
            at[r] += 1;
            posted[r] = false;
        }
        for w in wake {
            if !queued[w] {
                queued[w] = true;
                queue.push_back(w);
            }
        }
    }
    let stuck: Vec<(usize, usize)> = (0..n)
        .filter(|&r| at[r] < scheds[r].steps.len())
        .map(|r| (r, at[r]))
        .take(8)
        .collect();
    if !stuck.is_empty() {
        return Err(format!("deadlock: (rank, step) stuck at {stuck:?}"));
    }
    if let Some(((a, b), _)) = mail.iter().find(|(_, q)| !q.is_empty()) {
        return Err(format!(
            "rank {a} sent to rank {b} a message nobody received"
        ));
    }
    for (r, s) in st.iter().enumerate() {
        let e = expect(&coll_of(r as u32), r as u32, n as u32, coll_of);
        for (off, len, delta, set) in &e.out {
            if *len > 0 {
                s.recv
                    .expect(*off, *len, *delta, set)
                    .map_err(|e| format!("rank {r} output {e}"))?;
            }
        }
    }
    rep.max_sent = sent.into_iter().max().unwrap_or(0);
    Ok(rep)
}

/// Builds every rank's schedule for `coll_of(rank)` with `algo` on `topo` (element size 1,
/// network links) and checks it symbolically, and that every rank reserves the same scratch.
pub fn check(
    topo: &Topo,
    coll_of: &dyn Fn(u32) -> Coll,
    algo: Algo,
    deterministic: bool,
) -> Result<Report, String> {
    let n = topo.n();
    let scheds: Vec<Schedule> = (0..n)
        .map(|me| {
            let ctx = Ctx {
                me,
                n,
                elem: 1,
                network: true,
                topo,
                deterministic,
                processes: false,
                crowded: false,
            };
            build(&coll_of(me), &ctx, algo)
        })
        .collect();
    // Communicators cut large operations into segments by the scratch a schedule needs, a
    // decision every rank must make alike.
    if let Some(s) = scheds.iter().find(|s| s.scratch != scheds[0].scratch) {
        return Err(format!(
            "scratch differs between ranks ({} and {} bytes)",
            scheds[0].scratch, s.scratch
        ));
    }
    run(&scheds, coll_of)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sp(buf: Buf, off: usize, len: usize) -> Span {
        Span::new(buf, off, len)
    }

    #[test]
    fn rank_sets_reject_double_counting() {
        let a = RankSet(vec![(0, 2), (5, 6)]);
        let b = RankSet(vec![(2, 5)]);
        assert_eq!(a.disjoint_union(&b), Some(RankSet(vec![(0, 6)])));
        assert_eq!(a.disjoint_union(&RankSet::one(1)), None);
    }

    #[test]
    fn detects_a_double_counted_contribution() {
        let coll = Coll::AllReduce { count: 1 };
        let mut s0 = Schedule::new("bad");
        let st = s0.step();
        st.push(Action::Copy {
            src: sp(Buf::Send, 0, 1),
            dst: sp(Buf::Recv, 0, 1),
        });
        st.push(Action::RecvReduce {
            peer: 1,
            dst: sp(Buf::Recv, 0, 1),
        });
        s0.step().push(Action::RecvReduce {
            peer: 1,
            dst: sp(Buf::Recv, 0, 1),
        });
        let mut s1 = Schedule::new("bad");
        s1.step().push(Action::Send {
            peer: 0,
            src: sp(Buf::Send, 0, 1),
        });
        s1.step().push(Action::Send {
            peer: 0,
            src: sp(Buf::Send, 0, 1),
        });
        let e = run(&[s0, s1], &|_| coll.clone()).unwrap_err();
        assert!(e.contains("counted twice"), "{e}");
    }

    #[test]
    fn detects_reading_unreceived_data_and_deadlock() {
        let coll = Coll::AllReduce { count: 1 };
        let mut s0 = Schedule::new("bad");
        s0.step().push(Action::Send {
            peer: 1,
            src: sp(Buf::Recv, 0, 1),
        });
        let mut s1 = Schedule::new("bad");
        s1.step().push(Action::Recv {
            peer: 0,
            dst: sp(Buf::Recv, 0, 1),
        });
        let e = run(&[s0, s1.clone()], &|_| coll.clone()).unwrap_err();
        assert!(e.contains("before anything was written"), "{e}");
        let e = run(&[s1.clone(), s1], &|_| coll.clone()).unwrap_err();
        assert!(e.contains("invalid peer") || e.contains("deadlock"), "{e}");
    }
}
