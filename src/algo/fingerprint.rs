//! The fast proof of schedules: the guarantees of [`symbolic`] — every output
//! element holds each contribution exactly once, nothing is read before it arrives, no
//! deadlock, and whether reductions follow a fixed order — in memory and time that grow about
//! linearly with the messages a schedule sends, so every algorithm can be proved at thousands
//! of ranks.
//!
//! The exact checker carries, for every run of elements, the set of ranks whose contributions
//! it holds; those sets grow with the rank count. Here a set is a fingerprint instead: the sum,
//! modulo the prime 2^61 − 1, of a fixed random weight per rank, in two independent families.
//! A reduction adds fingerprints. An output holding some contribution twice, or missing one,
//! differs from the expected fingerprint unless a nonzero linear form in the weights vanishes,
//! which for each family has probability 2^-61 (the weights are uniform in a prime field), so
//! a wrong schedule passes with probability about 2^-122 per compared run. Which input element
//! a run holds (its offset) is still tracked exactly, so data moved to the wrong place fails
//! at once, as in the exact checker. The exact checker stays the reference for small rank
//! counts (the tests compare the two on every algorithm and operation up to 64 ranks).
//!
//! Cost: schedules are kept in a compact form (16 bytes an action); a buffer is a list of runs
//! cut into chunks of a few dozen, so a write rewrites one small chunk whatever the run count;
//! a receive is matched against the unconsumed sends of the sender's current step, found by
//! peer (a step only ends when its sends are consumed, so no mailbox is needed and in-flight
//! messages cost nothing); step hazards are found by sorting a step's spans. Schedules are
//! built on all available cores. The weights are pseudo-random (splitmix64 of the rank with
//! fixed seeds), fixed before any schedule is seen.

use super::schedule::{Action, Buf, Schedule, Span};
use super::symbolic::{self, RankSet, Report};
use super::{Algo, Coll, Topo};

/// The prime modulus of fingerprint arithmetic, 2^61 − 1.
const P: u64 = (1 << 61) - 1;
/// Seeds of the two weight families.
const SEEDS: [u64; 2] = [0x243F_6A88_85A3_08D3, 0x1319_8A2E_0370_7344];

/// A fingerprint of a set of ranks: two sums of per-rank weights modulo [`P`]; `[u64::MAX; 2]`
/// (no sum reaches it) marks elements nothing was written to yet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Fp([u64; 2]);

impl Fp {
    const ZERO: Fp = Fp([0, 0]);
    const UNDEF: Fp = Fp([u64::MAX; 2]);

    /// The weights of rank `r`: splitmix64 of the rank, reduced to 1..P (never 0, so every
    /// rank's contribution shows).
    fn rank(r: u32) -> Fp {
        Fp(SEEDS.map(|seed| {
            let mut z = seed.wrapping_add((r as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15));
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^= z >> 31;
            z % (P - 1) + 1
        }))
    }

    fn add(self, o: Fp) -> Fp {
        let f = |a: u64, b: u64| {
            let s = a + b;
            if s >= P {
                s - P
            } else {
                s
            }
        };
        Fp([f(self.0[0], o.0[0]), f(self.0[1], o.0[1])])
    }

    fn sub(self, o: Fp) -> Fp {
        self.add(Fp([P - o.0[0], P - o.0[1]]))
    }

    fn defined(self) -> bool {
        self != Fp::UNDEF
    }
}

/// Fingerprints of rank ranges by prefix sums, so a set of intervals costs one subtraction per
/// interval.
struct Weights {
    prefix: Vec<Fp>,
}

impl Weights {
    fn new(n: u32) -> Weights {
        let mut prefix = Vec::with_capacity(n as usize + 1);
        let mut acc = Fp::ZERO;
        prefix.push(acc);
        for r in 0..n {
            acc = acc.add(Fp::rank(r));
            prefix.push(acc);
        }
        Weights { prefix }
    }

    fn set(&self, s: &RankSet) -> Fp {
        s.intervals().iter().fold(Fp::ZERO, |acc, &(a, b)| {
            acc.add(self.prefix[b as usize].sub(self.prefix[a as usize]))
        })
    }
}

/// What a run of elements holds: input element `pos + delta` of the ranks fingerprinted by
/// `fp` (`Fp::UNDEF`: nothing yet).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Val {
    delta: i64,
    fp: Fp,
}

impl Val {
    const UNDEF: Val = Val {
        delta: 0,
        fp: Fp::UNDEF,
    };
}

/// A run `[start, end)` of a buffer.
#[derive(Clone, Copy, Debug)]
struct Seg {
    start: u32,
    end: u32,
    val: Val,
}

/// `len` elements of a read; element k of the read holds input element `k + val.delta`.
#[derive(Clone, Copy, Debug)]
struct Piece {
    len: u32,
    val: Val,
}

/// Most runs a chunk holds before it is cut in two.
const CHUNK_RUNS: usize = 48;

/// A buffer as runs covering `[0, len)`, in chunks of at most [`CHUNK_RUNS`] consecutive runs:
/// finding a position is two binary searches over small arrays, and a write rewrites only the
/// chunk (rarely two) it falls in, whatever the buffer's run count.
#[derive(Debug, Default)]
struct Runs {
    len: u32,
    /// Start of each chunk's first run.
    starts: Vec<u32>,
    chunks: Vec<Vec<Seg>>,
}

/// Splits so that a run starts at `at` (if `at` falls inside `v`'s range); returns the index
/// of the first run starting at or after `at`.
fn split_at(v: &mut Vec<Seg>, at: u32) -> usize {
    let i = v.partition_point(|s| s.end <= at);
    if i < v.len() && v[i].start < at {
        let tail = Seg { start: at, ..v[i] };
        v[i].end = at;
        v.insert(i + 1, tail);
        return i + 1;
    }
    i
}

impl Runs {
    fn new(len: u32, val: Val) -> Runs {
        let mut r = Runs {
            len,
            ..Default::default()
        };
        if len > 0 {
            r.starts.push(0);
            r.chunks.push(vec![Seg {
                start: 0,
                end: len,
                val,
            }]);
        }
        r
    }

    /// The chunk holding element `pos` (< len).
    fn chunk_of(&self, pos: u32) -> usize {
        self.starts.partition_point(|&s| s <= pos) - 1
    }

    /// Appends the pieces of `[off, off+len)` to `out`.
    fn read(&self, off: u32, len: u32, out: &mut Vec<Piece>) -> Result<(), String> {
        let end = off as u64 + len as u64;
        if end > self.len as u64 {
            return Err(format!("reads [{off}, {end}) beyond {} elements", self.len));
        }
        if len == 0 {
            return Ok(());
        }
        let end = end as u32;
        let mut c = self.chunk_of(off);
        let mut i = self.chunks[c].partition_point(|s| s.end <= off);
        loop {
            let s = self.chunks[c][i];
            let (a, b) = (s.start.max(off), s.end.min(end));
            out.push(Piece {
                len: b - a,
                val: Val {
                    delta: s.val.delta + off as i64,
                    ..s.val
                },
            });
            if s.end >= end {
                return Ok(());
            }
            i += 1;
            if i == self.chunks[c].len() {
                c += 1;
                i = 0;
            }
        }
    }

    /// Writes (with `reduce`, adds into) `[off, off+len)` from `pieces`; `new` is scratch.
    fn write(
        &mut self,
        off: u32,
        pieces: &[Piece],
        reduce: bool,
        new: &mut Vec<Seg>,
    ) -> Result<(), String> {
        let len: u64 = pieces.iter().map(|p| p.len as u64).sum();
        let end = off as u64 + len;
        if end > self.len as u64 {
            return Err(format!(
                "writes [{off}, {end}) beyond {} elements",
                self.len
            ));
        }
        if len == 0 {
            return Ok(());
        }
        let end = end as u32;
        // The chunks from the run before `off` (to merge with it) to the run holding `end`.
        let lo = self.chunk_of(off.saturating_sub(1));
        let hi = self.chunk_of(end.min(self.len - 1));
        let mut v = std::mem::take(&mut self.chunks[lo]);
        for c in lo + 1..=hi {
            v.append(&mut self.chunks[c]);
        }
        let res = edit(&mut v, off, end, pieces, reduce, new);
        if res.is_err() {
            // Leave the buffer whole: the proof stops at the first error anyway.
            self.chunks[lo] = v;
            self.chunks.drain(lo + 1..=hi);
            self.starts.drain(lo + 1..=hi);
            return res;
        }
        if hi == lo && v.len() <= CHUNK_RUNS {
            self.chunks[lo] = v;
            return Ok(());
        }
        let parts = v.len().div_ceil(CHUNK_RUNS);
        let per = v.len().div_ceil(parts);
        let mut cut: Vec<Vec<Seg>> = v.chunks(per).map(<[Seg]>::to_vec).collect();
        if parts == 1 {
            cut[0] = v;
        }
        self.starts
            .splice(lo..=hi, cut.iter().map(|c| c[0].start).collect::<Vec<_>>());
        self.chunks.splice(lo..=hi, cut);
        Ok(())
    }
}

/// Rewrites `[off, end)` of the consecutive runs `v` (which cover it) from `pieces`, adding
/// into what is there with `reduce`, and merges equal neighbours around it.
fn edit(
    v: &mut Vec<Seg>,
    off: u32,
    end: u32,
    pieces: &[Piece],
    reduce: bool,
    new: &mut Vec<Seg>,
) -> Result<(), String> {
    let a = split_at(v, off);
    let b = split_at(v, end);
    new.clear();
    let mut push = |seg: Seg| match new.last_mut() {
        Some(l) if l.val == seg.val => l.end = seg.end,
        _ => new.push(seg),
    };
    // Pieces count from the read's start; runs from the buffer's.
    let abs = |v: Val| Val {
        delta: v.delta - off as i64,
        ..v
    };
    let mut at = off;
    let mut i = a;
    for p in pieces {
        let pend = at + p.len;
        let pv = abs(p.val);
        if !reduce {
            push(Seg {
                start: at,
                end: pend,
                val: pv,
            });
        }
        while reduce && at < pend {
            let o = v[i];
            let seg_end = o.end.min(pend);
            if !o.val.fp.defined() || !pv.fp.defined() {
                return Err(format!("reduces undefined element {at}"));
            }
            if o.val.delta != pv.delta {
                return Err(format!(
                    "reduces element {at} with a different element ({} and {})",
                    at as i64 + o.val.delta,
                    at as i64 + pv.delta
                ));
            }
            push(Seg {
                start: at,
                end: seg_end,
                val: Val {
                    delta: pv.delta,
                    fp: o.val.fp.add(pv.fp),
                },
            });
            at = seg_end;
            if o.end == seg_end {
                i += 1;
            }
        }
        at = pend;
    }
    let added = new.len();
    v.splice(a..b, new.drain(..));
    // Merge equal neighbours from the run before the write to the one after it.
    let mut k = a.saturating_sub(1);
    let mut last = (a + added).min(v.len() - 1);
    while k < last {
        if v[k].val == v[k + 1].val {
            v[k].end = v[k + 1].end;
            v.remove(k + 1);
            last -= 1;
        } else {
            k += 1;
        }
    }
    Ok(())
}

/// A compact action: 16 bytes instead of a [`Action`]'s 56, so schedules of thousands of
/// ranks with thousands of steps each fit in memory. Offsets and lengths are in elements.
#[derive(Clone, Copy, Debug)]
struct Act {
    kind: Kind,
    /// The span's buffer (for local actions, the destination's).
    buf: u8,
    /// The source buffer of a local action.
    sbuf: u8,
    /// Whether this is the last action of its step.
    last: bool,
    /// The peer, or the source offset of a local action.
    peer: u32,
    off: u32,
    len: u32,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    /// Stands for an empty step.
    Nop,
    Send,
    Recv,
    RecvReduce,
    Copy,
    Reduce,
}

/// One rank's schedule in compact form: steps back to back, each ending with an action marked
/// `last` (an empty step is one `Nop`), so walking a schedule touches one array.
struct Plan {
    acts: Vec<Act>,
    steps: usize,
    scratch: u32,
}

impl Plan {
    fn len(&self) -> usize {
        self.steps
    }

    /// The step starting at action `at`.
    fn step_at(&self, at: usize) -> &[Act] {
        let end = self.acts[at..]
            .iter()
            .position(|a| a.last)
            .expect("every step ends with a last action");
        &self.acts[at..=at + end]
    }
}

fn buf_code(b: Buf) -> Result<u8, String> {
    match b {
        Buf::Send => Ok(0),
        Buf::Recv => Ok(1),
        Buf::Scratch => Ok(2),
        Buf::Ext(_) => Err("point-to-point buffers are not checked symbolically".into()),
    }
}

fn buf_name(code: u8) -> &'static str {
    ["Send", "Recv", "Scratch"][code as usize]
}

fn small(x: usize) -> Result<u32, String> {
    u32::try_from(x).map_err(|_| {
        format!("offset {x} is beyond the 2^32 elements the fast proof tracks; use fewer elements")
    })
}

/// What compacting a schedule learned besides the plan.
#[derive(Default)]
struct Tally {
    sends: usize,
    sent: usize,
    order_dep: bool,
}

/// Compacts rank `me`'s schedule of `n` ranks, checking peers and per-step hazards (receives
/// overlapping each other or the step's sends; two reducing receives may overlap, which makes
/// the reduction order follow arrival order).
fn compact(s: &Schedule, me: u32, n: u32) -> Result<(Plan, Tally), String> {
    let mut acts: Vec<Act> =
        Vec::with_capacity(s.steps.iter().map(|st| st.actions.len().max(1)).sum());
    let mut t = Tally::default();
    // (buf, off, end, class: 0 send, 1 recv, 2 recv-reduce, index in step) of a step.
    let mut spans: Vec<(u8, u32, u32, u8, u32)> = Vec::new();
    for (k, step) in s.steps.iter().enumerate() {
        let err = |e: String| format!("rank {me} step {k}: {e}");
        spans.clear();
        if step.actions.is_empty() {
            acts.push(Act {
                kind: Kind::Nop,
                buf: 0,
                sbuf: 0,
                last: true,
                peer: 0,
                off: 0,
                len: 0,
            });
        }
        for (i, a) in step.actions.iter().enumerate() {
            let comm = |kind, peer: u32, sp: Span| -> Result<Act, String> {
                if peer >= n || peer == me {
                    return Err(err(format!("exchanges with invalid peer {peer}")));
                }
                Ok(Act {
                    kind,
                    buf: buf_code(sp.buf).map_err(err)?,
                    sbuf: 0,
                    last: false,
                    peer,
                    off: small(sp.off)?,
                    len: small(sp.len)?,
                })
            };
            let local = |kind, src: Span, dst: Span| -> Result<Act, String> {
                if src.len != dst.len {
                    return Err(err(format!("{src:?} and {dst:?} differ in length")));
                }
                Ok(Act {
                    kind,
                    buf: buf_code(dst.buf).map_err(err)?,
                    sbuf: buf_code(src.buf).map_err(err)?,
                    last: false,
                    peer: small(src.off)?,
                    off: small(dst.off)?,
                    len: small(dst.len)?,
                })
            };
            let mut act = match *a {
                Action::Send { peer, src } => {
                    t.sends += 1;
                    t.sent += src.len;
                    comm(Kind::Send, peer, src)?
                }
                Action::Recv { peer, dst } => comm(Kind::Recv, peer, dst)?,
                Action::RecvReduce { peer, dst } => comm(Kind::RecvReduce, peer, dst)?,
                Action::Copy { src, dst } => local(Kind::Copy, src, dst)?,
                Action::Reduce { dst, src } => local(Kind::Reduce, src, dst)?,
            };
            let class = match act.kind {
                Kind::Send => 0,
                Kind::Recv => 1,
                Kind::RecvReduce => 2,
                _ => 3,
            };
            if class < 3 && act.len > 0 {
                spans.push((act.buf, act.off, act.off + act.len, class, i as u32));
            }
            act.last = i + 1 == step.actions.len();
            acts.push(act);
        }
        spans.sort_unstable();
        // Sweep in offset order: a span overlaps an earlier one exactly when it starts before
        // the furthest end seen so far, per class.
        let mut reach = [0u32; 3];
        let mut cur = u8::MAX;
        let mut who = [0u32; 3];
        for &(buf, off, end, class, i) in &spans {
            if buf != cur {
                cur = buf;
                reach = [0; 3];
            }
            let hit = |c: usize| off < reach[c];
            let desc = |j: u32| format!("{:?}", step.actions[j as usize]);
            let clash = match class {
                0 if hit(1) || hit(2) => Some(if hit(1) { who[1] } else { who[2] }),
                1 | 2 if hit(0) => Some(who[0]),
                _ => None,
            };
            if let Some(j) = clash {
                return Err(err(format!(
                    "a receive overlaps a send in the same step ({} and {})",
                    desc(j),
                    desc(i)
                )));
            }
            if class == 1 && (hit(1) || hit(2)) || class == 2 && hit(1) {
                let j = if hit(1) { who[1] } else { who[2] };
                return Err(err(format!(
                    "receives overlap in one step ({} and {})",
                    desc(j),
                    desc(i)
                )));
            }
            if class == 2 && hit(2) {
                t.order_dep = true;
            }
            let c = class as usize;
            if end > reach[c] {
                reach[c] = end;
                who[c] = i;
            }
        }
    }
    let scratch = small(s.scratch)?;
    Ok((
        Plan {
            acts,
            steps: s.steps.len(),
            scratch,
        },
        t,
    ))
}

/// The sends (or receives) of a rank's current step, sorted by peer (and within a peer in
/// action order, the order messages between a pair match in), with one cursor per peer: the
/// next entry to match, since a pair's messages match in order.
#[derive(Default)]
struct Side {
    acts: Vec<Act>,
    /// (peer, next unmatched index in `acts`, end of the peer's entries), by peer.
    groups: Vec<(u32, u32, u32)>,
    open: usize,
}

impl Side {
    fn reset(&mut self) {
        self.acts.clear();
        self.groups.clear();
        self.open = 0;
    }

    /// Sorts the collected actions and indexes them by peer.
    fn index(&mut self) {
        self.acts.sort_by_key(|a| a.peer);
        self.open = self.acts.len();
        let mut i = 0;
        while i < self.acts.len() {
            let p = self.acts[i].peer;
            let mut j = i + 1;
            while j < self.acts.len() && self.acts[j].peer == p {
                j += 1;
            }
            self.groups.push((p, i as u32, j as u32));
            i = j;
        }
    }

    /// The group of `peer` among `n` ranks. A big step's peers are spread over all ranks (a
    /// mesh step lists every one), so the search starts where an even spread puts `peer` and
    /// widens from there: a cache line or two instead of a binary search's dozen.
    fn group(&self, peer: u32, n: u32) -> Option<usize> {
        let g = &self.groups;
        if g.len() <= 8 {
            return g.iter().position(|e| e.0 == peer);
        }
        let guess = ((peer as u64 * g.len() as u64) / n.max(1) as u64) as usize;
        let at = guess.min(g.len() - 1);
        let (mut lo, mut hi) = if g[at].0 < peer {
            let mut step = 1;
            let mut lo = at + 1;
            while lo + step < g.len() && g[lo + step].0 < peer {
                lo += step;
                step *= 2;
            }
            (lo, (lo + step).min(g.len()))
        } else {
            let mut step = 1;
            let mut hi = at;
            while hi >= step && g[hi - step].0 >= peer {
                hi -= step;
                step *= 2;
            }
            (hi.saturating_sub(step), hi)
        };
        while lo < hi {
            let mid = (lo + hi) / 2;
            if g[mid].0 < peer {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        (lo < g.len() && g[lo].0 == peer).then_some(lo)
    }

    /// The next unmatched action with `peer`: (group, action).
    fn next(&self, peer: u32, n: u32) -> Option<(usize, Act)> {
        let k = self.group(peer, n)?;
        let (_, next, end) = self.groups[k];
        (next < end).then(|| (k, self.acts[next as usize]))
    }

    /// Marks the next action of group `k` matched.
    fn take(&mut self, k: usize) {
        self.groups[k].1 += 1;
        self.open -= 1;
    }

    /// Distinct peers, in order.
    fn peers(&self) -> impl Iterator<Item = u32> + '_ {
        self.groups.iter().map(|g| g.0)
    }
}

/// The communication of one rank's current step.
#[derive(Default)]
struct Posted {
    tx: Side,
    rx: Side,
}

impl Posted {
    fn idle(&self) -> bool {
        self.tx.open == 0 && self.rx.open == 0
    }
}

/// One rank's buffers and progress.
struct RankState {
    bufs: [Runs; 3],
    /// Current step.
    at: usize,
    /// Its first action, and the next step's.
    pos: usize,
    next: usize,
    posted: bool,
    cur: Posted,
}

/// The proof's run over compact plans.
struct Prover<'a> {
    plans: &'a [Plan],
    ranks: Vec<RankState>,
    work: Vec<u32>,
    pieces: Vec<Piece>,
    segs: Vec<Seg>,
    peers: Vec<u32>,
}

impl Prover<'_> {
    fn fail(&self, r: u32, e: String) -> String {
        format!("rank {r} step {}: {e}", self.ranks[r as usize].at)
    }

    /// Reads a span of rank `r` that must be fully written into `self.pieces`.
    fn read(&mut self, r: u32, buf: u8, off: u32, len: u32) -> Result<(), String> {
        self.pieces.clear();
        let b = &self.ranks[r as usize].bufs[buf as usize];
        b.read(off, len, &mut self.pieces)
            .map_err(|e| self.fail(r, e))?;
        let mut at = off;
        for p in &self.pieces {
            if !p.val.fp.defined() {
                return Err(self.fail(
                    r,
                    format!(
                        "reads {} element {at} before anything was written there",
                        buf_name(buf)
                    ),
                ));
            }
            at += p.len;
        }
        Ok(())
    }

    fn write(&mut self, r: u32, buf: u8, off: u32, reduce: bool) -> Result<(), String> {
        let pieces = std::mem::take(&mut self.pieces);
        let res =
            self.ranks[r as usize].bufs[buf as usize].write(off, &pieces, reduce, &mut self.segs);
        self.pieces = pieces;
        res.map_err(|e| self.fail(r, e))
    }

    /// Runs rank `r`'s local actions of its current step and posts its communication.
    fn post(&mut self, r: u32) -> Result<(), String> {
        let plans = self.plans;
        let plan = &plans[r as usize];
        let pos = self.ranks[r as usize].pos;
        let mut cur = std::mem::take(&mut self.ranks[r as usize].cur);
        cur.tx.reset();
        cur.rx.reset();
        let step = plan.step_at(pos);
        for &a in step {
            match a.kind {
                Kind::Copy | Kind::Reduce => {
                    self.read(r, a.sbuf, a.peer, a.len)?;
                    self.write(r, a.buf, a.off, a.kind == Kind::Reduce)?;
                }
                Kind::Send => cur.tx.acts.push(a),
                Kind::Recv | Kind::RecvReduce => cur.rx.acts.push(a),
                Kind::Nop => {}
            }
        }
        self.ranks[r as usize].next = pos + step.len();
        cur.tx.index();
        cur.rx.index();
        let mut peers = std::mem::take(&mut self.peers);
        peers.clear();
        peers.extend(cur.rx.peers());
        let from = peers.len();
        peers.extend(cur.tx.peers());
        let st = &mut self.ranks[r as usize];
        st.cur = cur;
        st.posted = true;
        let mut res = Ok(());
        for (i, &p) in peers.iter().enumerate() {
            res = if i < from {
                self.exchange(p, r)
            } else {
                self.exchange(r, p)
            };
            if res.is_err() {
                break;
            }
        }
        self.peers = peers;
        res
    }

    /// Matches, in order, the posted sends of `s` to `d` with the posted receives of `d` from
    /// `s`, moving the data.
    fn exchange(&mut self, s: u32, d: u32) -> Result<(), String> {
        let n = self.plans.len() as u32;
        loop {
            let (ss, ds) = (&self.ranks[s as usize], &self.ranks[d as usize]);
            if !ss.posted || !ds.posted {
                return Ok(());
            }
            let Some((gi, send)) = ss.cur.tx.next(d, n) else {
                return Ok(());
            };
            let Some((gj, recv)) = ds.cur.rx.next(s, n) else {
                return Ok(());
            };
            if send.len != recv.len {
                return Err(self.fail(
                    d,
                    format!("expected {} elements from {s}, got {}", recv.len, send.len),
                ));
            }
            self.read(s, send.buf, send.off, send.len)?;
            self.write(d, recv.buf, recv.off, recv.kind == Kind::RecvReduce)
                .map_err(|e| format!("{e} (from {s})"))?;
            let ss = &mut self.ranks[s as usize].cur;
            ss.tx.take(gi);
            if ss.idle() {
                self.work.push(s);
            }
            let ds = &mut self.ranks[d as usize].cur;
            ds.rx.take(gj);
            if ds.idle() {
                self.work.push(d);
            }
        }
    }

    /// Moves every rank as far as it can go.
    fn run(&mut self) -> Result<(), String> {
        while let Some(r) = self.work.pop() {
            loop {
                let st = &mut self.ranks[r as usize];
                if st.posted {
                    if !st.cur.idle() {
                        break;
                    }
                    st.at += 1;
                    st.pos = st.next;
                    st.posted = false;
                }
                if st.at >= self.plans[r as usize].len() {
                    break;
                }
                self.post(r)?;
            }
        }
        Ok(())
    }
}

/// Proves compact `plans` (one per rank) against what `coll_of(rank)` must produce.
fn prove(plans: &[Plan], coll_of: &dyn Fn(u32) -> Coll) -> Result<(), String> {
    let n = plans.len() as u32;
    let w = Weights::new(n);
    let val = |v: &symbolic::Val| Val {
        delta: v.delta,
        fp: w.set(&v.set),
    };
    let mut ranks = Vec::with_capacity(n as usize);
    for (r, plan) in plans.iter().enumerate() {
        let e = symbolic::expect(&coll_of(r as u32), r as u32, n, coll_of);
        let mine = Val {
            delta: 0,
            fp: Fp::rank(r as u32),
        };
        let init = e.recv_init.as_ref().map_or(Val::UNDEF, val);
        ranks.push(RankState {
            bufs: [
                Runs::new(small(e.send)?, mine),
                Runs::new(small(e.recv)?, init),
                Runs::new(plan.scratch, Val::UNDEF),
            ],
            at: 0,
            pos: 0,
            next: 0,
            posted: false,
            cur: Posted::default(),
        });
    }
    let mut pr = Prover {
        plans,
        ranks,
        work: (0..n).rev().collect(),
        pieces: Vec::new(),
        segs: Vec::new(),
        peers: Vec::new(),
    };
    pr.run()?;
    let stuck: Vec<(usize, usize)> = (0..n as usize)
        .filter(|&r| pr.ranks[r].at < plans[r].len())
        .map(|r| (r, pr.ranks[r].at))
        .take(8)
        .collect();
    if !stuck.is_empty() {
        return Err(format!("deadlock: (rank, step) stuck at {stuck:?}"));
    }
    let mut pieces = Vec::new();
    for r in 0..n {
        let e = symbolic::expect(&coll_of(r), r, n, coll_of);
        let out = &pr.ranks[r as usize].bufs[1];
        for (off, len, delta, set) in &e.out {
            let (off, len) = (small(*off)?, small(*len)?);
            let want = Val {
                delta: *delta,
                fp: w.set(set),
            };
            pieces.clear();
            out.read(off, len, &mut pieces)
                .map_err(|e| format!("rank {r} output {e}"))?;
            let mut at = off;
            for p in &pieces {
                let abs = p.val.delta - off as i64;
                if p.val.fp != want.fp || abs != want.delta {
                    let holds = if !p.val.fp.defined() {
                        "nothing".to_string()
                    } else if abs != want.delta {
                        format!("input element offset {abs}")
                    } else {
                        "another set of contributions (one missing or counted twice)".to_string()
                    };
                    return Err(format!(
                        "rank {r} output [{at}, {}) should hold ranks {:?} (element offset \
                         {delta}), holds {holds}",
                        at + p.len,
                        set.intervals()
                    ));
                }
                at += p.len;
            }
        }
    }
    Ok(())
}

/// Runs `scheds` (one per rank, element size 1) and checks the outputs against what
/// `coll_of(rank)` must produce: the fast counterpart of [`symbolic::run`], with the same
/// report.
pub fn run(scheds: &[Schedule], coll_of: &dyn Fn(u32) -> Coll) -> Result<Report, String> {
    let n = scheds.len() as u32;
    let mut plans = Vec::with_capacity(scheds.len());
    let mut rep = Report {
        order_fixed: true,
        ..Default::default()
    };
    for (r, s) in scheds.iter().enumerate() {
        let (p, t) = compact(s, r as u32, n)?;
        tally(&mut rep, &p, &t);
        plans.push(p);
    }
    prove(&plans, coll_of)?;
    Ok(rep)
}

fn tally(rep: &mut Report, p: &Plan, t: &Tally) {
    rep.steps = rep.steps.max(p.len());
    rep.messages += t.sends;
    rep.max_sent = rep.max_sent.max(t.sent);
    rep.order_fixed &= !t.order_dep;
}

/// Builds every rank's schedule for `coll_of(rank)` with `algo` on `topo` (element size 1,
/// network links), on all available cores, and proves it: the fast counterpart of
/// [`symbolic::check`], with the same report. Every rank must reserve the same scratch.
pub fn check(
    topo: &Topo,
    coll_of: &(dyn Fn(u32) -> Coll + Sync),
    algo: Algo,
    deterministic: bool,
) -> Result<Report, String> {
    let built = super::build_each(topo, coll_of, algo, 1, deterministic, |me, s| {
        let (p, t) = compact(&s, me, topo.n())?;
        Ok((p, t, s.scratch))
    })?;
    let mut plans = Vec::with_capacity(built.len());
    let mut rep = Report {
        order_fixed: true,
        ..Default::default()
    };
    let mut scratch = None;
    for (p, t, s) in built {
        // Communicators cut large operations into segments by the scratch a schedule needs, a
        // decision every rank must make alike.
        match scratch {
            None => scratch = Some(s),
            Some(s0) if s0 != s => {
                return Err(format!(
                    "scratch differs between ranks ({s0} and {s} bytes)"
                ))
            }
            _ => {}
        }
        tally(&mut rep, &p, &t);
        plans.push(p);
    }
    prove(&plans, coll_of)?;
    Ok(rep)
}

#[cfg(test)]
mod tests {
    use super::super::schedule::{Action, Buf, Schedule, Span};
    use super::super::{build, symbolic, Algo, Coll, Ctx, Topo};
    use super::*;

    /// 4096 ranks: 512 hosts of 8.
    fn big() -> Topo {
        Topo::uniform(512, 8)
    }

    fn scheds(topo: &Topo, coll: &Coll, algo: Algo) -> Vec<Schedule> {
        (0..topo.n())
            .map(|me| {
                let ctx = Ctx {
                    me,
                    n: topo.n(),
                    elem: 1,
                    network: true,
                    topo,
                    deterministic: true,
                };
                build(coll, &ctx, algo)
            })
            .collect()
    }

    /// Index of the first step of `s` holding an action that `f` accepts, and the action's.
    fn find(s: &Schedule, f: impl Fn(&Action) -> bool) -> (usize, usize) {
        s.steps
            .iter()
            .enumerate()
            .find_map(|(k, st)| st.actions.iter().position(&f).map(|i| (k, i)))
            .expect("schedule has such an action")
    }

    #[test]
    fn weights_are_nonzero_and_distinct() {
        let w: Vec<Fp> = (0..10_000).map(Fp::rank).collect();
        assert!(w.iter().all(|f| f.0.iter().all(|&x| x > 0 && x < P)));
        let mut a: Vec<u64> = w.iter().map(|f| f.0[0]).collect();
        a.sort_unstable();
        a.dedup();
        assert_eq!(a.len(), w.len());
        // Sums wrap modulo P: a set and its complement add up to the whole.
        let ws = Weights::new(100);
        let all = ws.set(&RankSet::all(100));
        let part = ws.set(&RankSet::one(42));
        assert_eq!(all.sub(part).add(part), all);
    }

    #[test]
    fn runs_split_merge_and_reduce() {
        let v = |d: i64, r: u32| Val {
            delta: d,
            fp: Fp::rank(r),
        };
        let mut b = Runs::new(300, Val::UNDEF);
        let mut scratch = Vec::new();
        // Many small writes force chunks to split; equal neighbours merge again.
        // Piece offsets count from the write, so each holds input element `pos + 0`.
        for i in 0..100u32 {
            let p = [Piece {
                len: 3,
                val: v(i as i64 * 3, i % 2),
            }];
            b.write(i * 3, &p, false, &mut scratch).unwrap();
        }
        assert!(b.chunks.len() > 1);
        let mut out = Vec::new();
        b.read(0, 300, &mut out).unwrap();
        assert_eq!(out.len(), 100);
        for i in (0..100u32).step_by(2) {
            let p = [Piece {
                len: 3,
                val: v(i as i64 * 3, 1),
            }];
            b.write(i * 3, &p, false, &mut scratch).unwrap();
        }
        out.clear();
        b.read(0, 300, &mut out).unwrap();
        assert_eq!(out.len(), 1, "{out:?}");
        // Reducing adds fingerprints, and checks the element offsets agree.
        let p = [Piece {
            len: 10,
            val: v(5, 7),
        }];
        // Element k of this write holds input element k + 5 = its position.
        b.write(5, &p, true, &mut scratch).unwrap();
        out.clear();
        b.read(5, 10, &mut out).unwrap();
        assert_eq!(out[0].val.fp, Fp::rank(1).add(Fp::rank(7)));
        let e = b
            .write(
                20,
                &[Piece {
                    len: 2,
                    val: v(9, 1),
                }],
                true,
                &mut scratch,
            )
            .unwrap_err();
        assert!(e.contains("different element"), "{e}");
        assert!(b.read(299, 2, &mut out).unwrap_err().contains("beyond"));
    }

    #[test]
    fn proves_log_step_schedules_at_4096_ranks() {
        let topo = big();
        let coll = Coll::AllReduce { count: 8197 };
        for algo in [Algo::Rhd, Algo::Tree] {
            let r = check(&topo, &|_| coll.clone(), algo, true).unwrap();
            assert!(r.order_fixed && r.messages > 0, "{algo:?}");
        }
    }

    #[test]
    fn catches_a_dropped_send_at_4096_ranks() {
        let topo = big();
        let coll = Coll::AllReduce { count: 8197 };
        let mut s = scheds(&topo, &coll, Algo::Rhd);
        assert!(run(&s, &|_| coll.clone()).is_ok());
        let (k, i) = find(&s[1234], |a| matches!(a, Action::Send { .. }));
        s[1234].steps[k].actions.remove(i);
        // The peer then matches 1234's next message early (a size mismatch) or waits forever.
        let e = run(&s, &|_| coll.clone()).unwrap_err();
        assert!(e.contains("deadlock") || e.contains("from 1234"), "{e}");
        assert!(symbolic::run(&s, &|_| coll.clone()).is_err());
    }

    #[test]
    fn catches_a_duplicated_reduction_at_4096_ranks() {
        let topo = big();
        let coll = Coll::AllReduce { count: 8197 };
        let mut s = scheds(&topo, &coll, Algo::Rhd);
        // Rank 2000's first reducing receive, and the matching send of its peer: sending the
        // same partial sum twice adds it twice.
        let (k, i) = find(&s[2000], |a| matches!(a, Action::RecvReduce { .. }));
        let recv = s[2000].steps[k].actions[i];
        let Action::RecvReduce { peer, .. } = recv else {
            unreachable!()
        };
        let (pk, pi) = find(&s[peer as usize], |a| {
            matches!(a, Action::Send { peer: 2000, .. })
        });
        let send = s[peer as usize].steps[pk].actions[pi];
        s[2000].steps[k].actions.push(recv);
        s[peer as usize].steps[pk].actions.push(send);
        let e = run(&s, &|_| coll.clone()).unwrap_err();
        assert!(e.contains("counted twice"), "{e}");
        let e = symbolic::run(&s, &|_| coll.clone()).unwrap_err();
        assert!(e.contains("counted twice"), "{e}");
    }

    #[test]
    fn catches_a_read_before_arrival_at_4096_ranks() {
        let topo = big();
        let coll = Coll::AllReduce { count: 8197 };
        let mut s = scheds(&topo, &coll, Algo::Tree);
        // An inner node folds a child's chunk from scratch; fold it one step early, before the
        // receive into that scratch slot.
        let r = (0..topo.n() as usize)
            .find(|&r| {
                s[r].steps.iter().skip(1).any(|st| {
                    st.actions
                        .iter()
                        .any(|a| matches!(a, Action::Reduce { src, .. } if src.buf == Buf::Scratch))
                })
            })
            .expect("an inner node");
        let (k, i) = find(
            &s[r],
            |a| matches!(a, Action::Reduce { src, .. } if src.buf == Buf::Scratch),
        );
        let fold = s[r].steps[k].actions.remove(i);
        s[r].steps[0].actions.insert(0, fold);
        let e = run(&s, &|_| coll.clone()).unwrap_err();
        assert!(e.contains("before anything was written"), "{e}");
        let e = symbolic::run(&s, &|_| coll.clone()).unwrap_err();
        assert!(e.contains("before anything was written"), "{e}");
    }

    #[test]
    fn step_hazards_match_the_exact_checker() {
        let sp = |off, len| Span::new(Buf::Recv, off, len);
        let coll = Coll::AllReduce { count: 4 };
        let mk = |acts: Vec<Action>| {
            let mut s = Schedule::new("t");
            s.step().extend(acts);
            let mut t = Schedule::new("t");
            t.step().extend([
                Action::Send {
                    peer: 0,
                    src: Span::new(Buf::Send, 0, 2),
                },
                Action::Send {
                    peer: 0,
                    src: Span::new(Buf::Send, 2, 2),
                },
            ]);
            vec![s, t]
        };
        for (acts, ok) in [
            // Two receives into one place: wrong, unless both reduce (then order-dependent).
            (
                vec![
                    Action::Recv {
                        peer: 1,
                        dst: sp(0, 2),
                    },
                    Action::Recv {
                        peer: 1,
                        dst: sp(1, 2),
                    },
                ],
                false,
            ),
            (
                vec![
                    Action::Recv {
                        peer: 1,
                        dst: sp(0, 2),
                    },
                    Action::Send {
                        peer: 1,
                        src: sp(1, 1),
                    },
                    Action::Recv {
                        peer: 1,
                        dst: sp(2, 2),
                    },
                ],
                false,
            ),
        ] {
            let s = mk(acts);
            let f = run(&s, &|_| coll.clone());
            let e = symbolic::run(&s, &|_| coll.clone());
            assert_eq!(f.is_ok(), ok, "{f:?}");
            assert_eq!(e.is_ok(), ok, "{e:?}");
        }
    }
}
