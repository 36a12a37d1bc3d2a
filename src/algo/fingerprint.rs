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
//! Cost: schedules are kept in a compact form (16 bytes an action), each step's sends and
//! receives sorted by peer, so a receive is matched against the unconsumed sends of the
//! sender's current step by a search in that step (a step only ends when its sends are
//! consumed, so no mailbox is needed, in-flight messages cost nothing, and nothing is
//! allocated per step or message). A buffer is a list of runs cut into chunks of a few dozen,
//! so a write rewrites one small chunk whatever the run count; a run of blocks of consecutive
//! ranks' inputs side by side is one striped run (see `Val`), so gathered outputs cost runs
//! per message, not per rank. Step hazards are found by sorting a step's spans. Schedules are
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

/// What a run of elements holds. Plain (`width` 0): input element `pos + delta` of the ranks
/// fingerprinted by `fp` (`Fp::UNDEF`: nothing yet). Striped (`width` > 0): the run is cut into
/// blocks of `width` elements counted from `origin`; position `pos` lies in block
/// `k = (pos − origin) div width` and holds input element `pos + delta − k·width` of rank `k`
/// plus the ranks of `fp`. A rank's input starts as one stripe of its length, so the blocks of
/// consecutive ranks gathered side by side (the output of an AllGather) have equal values and
/// stay one run: gathering costs runs per message, not per rank.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Val {
    delta: i64,
    origin: i64,
    width: u32,
    fp: Fp,
}

impl Val {
    const UNDEF: Val = Val::plain(0, Fp::UNDEF);

    const fn plain(delta: i64, fp: Fp) -> Val {
        Val {
            delta,
            origin: 0,
            width: 0,
            fp,
        }
    }

    /// The input of rank `r`, `len` elements at positions `[0, len)`.
    fn input(r: u32, len: u32) -> Val {
        let at = r as i64 * len as i64;
        Val {
            delta: at,
            origin: -at,
            width: len,
            fp: Fp::ZERO,
        }
    }

    /// The same contents moved by `by` positions.
    fn shift(self, by: i64) -> Val {
        Val {
            delta: self.delta - by,
            origin: if self.width > 0 { self.origin + by } else { 0 },
            ..self
        }
    }

    /// The end of the block holding `pos` (`u32::MAX` for a plain value), so that
    /// `[pos, block_end)` holds one plain value.
    fn block_end(self, pos: u32) -> u64 {
        if self.width == 0 {
            return u64::MAX;
        }
        let w = self.width as i64;
        let k = (pos as i64 - self.origin).div_euclid(w);
        (self.origin + (k + 1) * w) as u64
    }

    /// The plain value of the block holding `pos`.
    fn at(self, pos: u32) -> Val {
        if self.width == 0 {
            return self;
        }
        let w = self.width as i64;
        let k = (pos as i64 - self.origin).div_euclid(w);
        Val::plain(self.delta - k * w, self.fp.add(Fp::rank(k as u32)))
    }

    fn defined(self) -> bool {
        self.fp.defined()
    }
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
                val: s.val.shift(-(off as i64)),
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
    let mut at = off;
    let mut i = a;
    for p in pieces {
        let pend = at + p.len;
        let pv = p.val.shift(off as i64);
        if !reduce {
            push(Seg {
                start: at,
                end: pend,
                val: pv,
            });
        }
        while reduce && at < pend {
            let o = v[i];
            // A sum is plain: cut where either side's block ends.
            let seg_end = (o.end.min(pend) as u64)
                .min(o.val.block_end(at))
                .min(pv.block_end(at)) as u32;
            let (x, y) = (o.val.at(at), pv.at(at));
            if !x.defined() || !y.defined() {
                return Err(format!("reduces undefined element {at}"));
            }
            if x.delta != y.delta {
                return Err(format!(
                    "reduces element {at} with a different element ({} and {})",
                    at as i64 + x.delta,
                    at as i64 + y.delta
                ));
            }
            push(Seg {
                start: at,
                end: seg_end,
                val: Val::plain(x.delta, x.fp.add(y.fp)),
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
    /// [`LAST`] and [`DONE`].
    flags: u8,
    /// The peer, or the source offset of a local action.
    peer: u32,
    off: u32,
    len: u32,
}

/// Flag of the last action of a step.
const LAST: u8 = 1;
/// Flag of a send or receive the proof has matched.
const DONE: u8 = 2;

impl Act {
    fn last(&self) -> bool {
        self.flags & LAST != 0
    }

    fn done(&self) -> bool {
        self.flags & DONE != 0
    }
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
/// [`LAST`] (an empty step is one `Nop`), so walking a schedule touches one array. Within a
/// step the local actions come first in schedule order, then the sends and then the receives,
/// each sorted by peer and, for one peer, in schedule order (the order a pair's messages match
/// in): finding a peer's next message is a search in the step, with no index built per step.
struct Plan {
    acts: Vec<Act>,
    steps: usize,
    scratch: u32,
}

impl Plan {
    fn len(&self) -> usize {
        self.steps
    }
}

/// Index in `acts` (sorted by peer, a peer's matched actions first) of the first unmatched
/// action with `peer` of `n`. A big step's peers are spread over all ranks (a mesh step lists
/// every one), so the search starts where an even spread puts `peer` and widens from there: a
/// cache line or two instead of a binary search's dozen.
fn seek(acts: &[Act], peer: u32, n: u32) -> Option<usize> {
    let before = |a: &Act| a.peer < peer || (a.peer == peer && a.done());
    let len = acts.len();
    let (lo, hi) = if len <= 8 {
        (0, len)
    } else {
        let g = ((peer as u64 * len as u64 / n.max(1) as u64) as usize).min(len - 1);
        let mut step = 1;
        if before(&acts[g]) {
            let mut lo = g + 1;
            loop {
                let hi = (lo + step).min(len);
                if hi == len || !before(&acts[hi - 1]) {
                    break (lo, hi);
                }
                lo = hi;
                step *= 2;
            }
        } else {
            let mut hi = g;
            loop {
                let lo = hi.saturating_sub(step);
                if lo == 0 || before(&acts[lo]) {
                    break (lo, hi);
                }
                hi = lo;
                step *= 2;
            }
        }
    };
    let i = lo + acts[lo..hi].partition_point(before);
    (i < len && acts[i].peer == peer && !acts[i].done()).then_some(i)
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
                flags: LAST,
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
                    flags: 0,
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
                    flags: 0,
                    peer: small(src.off)?,
                    off: small(dst.off)?,
                    len: small(dst.len)?,
                })
            };
            let act = match *a {
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
            acts.push(act);
        }
        // Locals, then sends, then receives; stable, so a pair's messages keep their order.
        let first = acts.len() - step.actions.len();
        acts[first..].sort_by_key(|a| match a.kind {
            Kind::Send => (1, a.peer),
            Kind::Recv | Kind::RecvReduce => (2, a.peer),
            _ => (0, 0),
        });
        if let Some(l) = acts.last_mut() {
            l.flags |= LAST;
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

/// One rank's buffers and progress.
struct RankState {
    bufs: [Runs; 3],
    /// Current step.
    at: usize,
    /// Its first action, and the next step's.
    pos: usize,
    next: usize,
    posted: bool,
    /// The current step's sends and receives: `[tx, rx)` and `[rx, next)` of the plan.
    tx: usize,
    rx: usize,
    /// Its sends and receives not matched yet.
    open: usize,
}

/// The proof's run over compact plans.
struct Prover<'a> {
    plans: &'a mut [Plan],
    ranks: Vec<RankState>,
    work: Vec<u32>,
    pieces: Vec<Piece>,
    segs: Vec<Seg>,
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
            if !p.val.defined() {
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
        let ri = r as usize;
        let pos = self.ranks[ri].pos;
        let (mut tx, mut rx) = (None, None);
        let mut i = pos;
        loop {
            let a = self.plans[ri].acts[i];
            match a.kind {
                Kind::Copy | Kind::Reduce => {
                    self.read(r, a.sbuf, a.peer, a.len)?;
                    self.write(r, a.buf, a.off, a.kind == Kind::Reduce)?;
                }
                Kind::Send => {
                    tx.get_or_insert(i);
                }
                Kind::Recv | Kind::RecvReduce => {
                    rx.get_or_insert(i);
                }
                Kind::Nop => {}
            }
            i += 1;
            if a.last() {
                break;
            }
        }
        let st = &mut self.ranks[ri];
        st.next = i;
        st.rx = rx.unwrap_or(i);
        st.tx = tx.unwrap_or(st.rx);
        st.open = i - st.tx;
        st.posted = true;
        let (tx, rx) = (st.tx, st.rx);
        // Each distinct peer once: receives match the peers' posted sends, sends their
        // posted receives.
        for k in tx..i {
            let p = self.plans[ri].acts[k].peer;
            if k == tx || k == rx || self.plans[ri].acts[k - 1].peer != p {
                if k < rx {
                    self.exchange(r, p)?;
                } else {
                    self.exchange(p, r)?;
                }
            }
        }
        Ok(())
    }

    /// Marks action `k` of rank `r` matched; queues `r` when its step is complete.
    fn take(&mut self, r: u32, k: usize) {
        self.plans[r as usize].acts[k].flags |= DONE;
        let st = &mut self.ranks[r as usize];
        st.open -= 1;
        if st.open == 0 {
            self.work.push(r);
        }
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
            let (sa, da) = (&self.plans[s as usize].acts, &self.plans[d as usize].acts);
            let Some(gi) = seek(&sa[ss.tx..ss.rx], d, n).map(|i| ss.tx + i) else {
                return Ok(());
            };
            let Some(gj) = seek(&da[ds.rx..ds.next], s, n).map(|j| ds.rx + j) else {
                return Ok(());
            };
            let (send, recv) = (sa[gi], da[gj]);
            if send.len != recv.len {
                return Err(self.fail(
                    d,
                    format!("expected {} elements from {s}, got {}", recv.len, send.len),
                ));
            }
            self.read(s, send.buf, send.off, send.len)?;
            self.write(d, recv.buf, recv.off, recv.kind == Kind::RecvReduce)
                .map_err(|e| format!("{e} (from {s})"))?;
            self.take(s, gi);
            self.take(d, gj);
        }
    }

    /// Moves every rank as far as it can go.
    fn run(&mut self) -> Result<(), String> {
        while let Some(r) = self.work.pop() {
            loop {
                let st = &mut self.ranks[r as usize];
                if st.posted {
                    if st.open > 0 {
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

/// What a rank starts with and must end with, in fingerprint form.
struct Want {
    send: u32,
    recv: u32,
    init: Val,
    /// Output ranges `(off, len, value, contributors)`; `None`: one rank per block, as the
    /// value's stripe says.
    out: Vec<(u32, u32, Val, Option<RankSet>)>,
}

/// `symbolic::expect` of rank `r` of `n` in fingerprint form. An AllGather's output (every
/// rank's input in rank order) is one striped range, not one range per rank: proving it costs
/// no more than its messages.
fn want(w: &Weights, r: u32, n: u32, coll_of: &dyn Fn(u32) -> Coll) -> Result<Want, String> {
    let coll = coll_of(r);
    if let Coll::AllGather { count } = coll {
        let c = small(count)?;
        let recv = small(count * n as usize)?;
        let out = if c == 0 {
            Vec::new()
        } else {
            vec![(0, recv, Val::input(0, c), None)]
        };
        return Ok(Want {
            send: c,
            recv,
            init: Val::UNDEF,
            out,
        });
    }
    let e = symbolic::expect(&coll, r, n, coll_of);
    let mut out = Vec::with_capacity(e.out.len());
    for (off, len, delta, set) in e.out {
        out.push((
            small(off)?,
            small(len)?,
            Val::plain(delta, w.set(&set)),
            Some(set),
        ));
    }
    Ok(Want {
        send: small(e.send)?,
        recv: small(e.recv)?,
        init: e
            .recv_init
            .as_ref()
            .map_or(Val::UNDEF, |v| Val::plain(v.delta, w.set(&v.set))),
        out,
    })
}

/// Proves compact `plans` (one per rank) against what `coll_of(rank)` must produce.
fn prove(plans: &mut [Plan], coll_of: &dyn Fn(u32) -> Coll) -> Result<(), String> {
    let n = plans.len() as u32;
    let w = Weights::new(n);
    let mut ranks = Vec::with_capacity(n as usize);
    for (r, plan) in plans.iter().enumerate() {
        let e = want(&w, r as u32, n, coll_of)?;
        ranks.push(RankState {
            bufs: [
                Runs::new(e.send, Val::input(r as u32, e.send)),
                Runs::new(e.recv, e.init),
                Runs::new(plan.scratch, Val::UNDEF),
            ],
            at: 0,
            pos: 0,
            next: 0,
            posted: false,
            tx: 0,
            rx: 0,
            open: 0,
        });
    }
    let mut pr = Prover {
        plans,
        ranks,
        work: (0..n).rev().collect(),
        pieces: Vec::new(),
        segs: Vec::new(),
    };
    pr.run()?;
    let stuck: Vec<(usize, usize)> = (0..n as usize)
        .filter(|&r| pr.ranks[r].at < pr.plans[r].len())
        .map(|r| (r, pr.ranks[r].at))
        .take(8)
        .collect();
    if !stuck.is_empty() {
        return Err(format!("deadlock: (rank, step) stuck at {stuck:?}"));
    }
    let mut pieces = Vec::new();
    for r in 0..n {
        let e = want(&w, r, n, coll_of)?;
        let out = &pr.ranks[r as usize].bufs[1];
        for (off, len, want, set) in &e.out {
            let (off, len, want) = (*off, *len, *want);
            pieces.clear();
            out.read(off, len, &mut pieces)
                .map_err(|e| format!("rank {r} output {e}"))?;
            let mut at = off;
            for p in &pieces {
                let pv = p.val.shift(off as i64);
                let end = at + p.len;
                while at < end {
                    if pv == want {
                        at = end;
                        continue;
                    }
                    // Compare block by block where the two are cut differently.
                    let cut = (end as u64).min(pv.block_end(at)).min(want.block_end(at)) as u32;
                    let (x, y) = (pv.at(at), want.at(at));
                    if x != y {
                        let holds = if !x.defined() {
                            "nothing".to_string()
                        } else if x.delta != y.delta {
                            format!("input element offset {}", x.delta)
                        } else {
                            "another set of contributions (one missing or counted twice)"
                                .to_string()
                        };
                        let whose = match set {
                            Some(s) => format!("ranks {:?}", s.intervals()),
                            None => {
                                format!("rank {}", (at as i64 - want.origin) / want.width as i64)
                            }
                        };
                        return Err(format!(
                            "rank {r} output [{at}, {cut}) should hold {whose} (element offset \
                             {}), holds {holds}",
                            y.delta
                        ));
                    }
                    at = cut;
                }
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
    prove(&mut plans, coll_of)?;
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
    prove(&mut plans, coll_of)?;
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
                    processes: false,
                    crowded: false,
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
        let v = |d: i64, r: u32| Val::plain(d, Fp::rank(r));
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
    fn gathered_blocks_stay_one_run_and_reduce_per_block() {
        let mut b = Runs::new(20, Val::UNDEF);
        let mut scratch = Vec::new();
        // Ranks 3, 2, 1, 0 write their 5-element inputs to blocks 3..0: one striped run.
        for r in (0..4u32).rev() {
            let p = [Piece {
                len: 5,
                val: Val::input(r, 5),
            }];
            b.write(r * 5, &p, false, &mut scratch).unwrap();
        }
        let mut out = Vec::new();
        b.read(0, 20, &mut out).unwrap();
        assert_eq!(out.len(), 1, "{out:?}");
        // Each block holds input elements 0..5 of its rank.
        let whole = out[0].val;
        for pos in 0..20u32 {
            let x = whole.at(pos);
            assert_eq!(x, Val::plain(-((pos / 5 * 5) as i64), Fp::rank(pos / 5)));
        }
        // Adding rank 7's elements 0..5 to block 1 sums per block; across a block boundary the
        // input elements differ, which is an error.
        let p = [Piece {
            len: 5,
            val: Val::plain(0, Fp::rank(7)),
        }];
        b.write(5, &p, true, &mut scratch).unwrap();
        out.clear();
        b.read(5, 5, &mut out).unwrap();
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].val, Val::plain(0, Fp::rank(1).add(Fp::rank(7))));
        let e = b.write(12, &p, true, &mut scratch).unwrap_err();
        assert!(e.contains("different element"), "{e}");
    }

    #[test]
    fn catches_a_block_gathered_into_the_wrong_place() {
        let topo = Topo::uniform(8, 8);
        let coll = Coll::AllGather { count: 3 };
        let mut s = scheds(&topo, &coll, Algo::Direct);
        assert!(run(&s, &|_| coll.clone()).is_ok());
        // Rank 10 stores the blocks of its second and third receives in each other's places
        // (same lengths, same input elements): only whose contribution they hold is wrong.
        let recvs: Vec<(usize, usize)> = s[10]
            .steps
            .iter()
            .enumerate()
            .flat_map(|(k, st)| {
                st.actions
                    .iter()
                    .enumerate()
                    .filter(|(_, a)| matches!(a, Action::Recv { .. }))
                    .map(move |(i, _)| (k, i))
            })
            .collect();
        let dst = |s: &Vec<Schedule>, (k, i): (usize, usize)| match s[10].steps[k].actions[i] {
            Action::Recv { dst, .. } => dst,
            _ => unreachable!(),
        };
        let (a, b) = (dst(&s, recvs[1]), dst(&s, recvs[2]));
        for (at, to) in [(recvs[1], b), (recvs[2], a)] {
            if let Action::Recv { dst, .. } = &mut s[10].steps[at.0].actions[at.1] {
                *dst = to;
            }
        }
        let e = run(&s, &|_| coll.clone()).unwrap_err();
        assert!(e.contains("another set of contributions"), "{e}");
        assert!(symbolic::run(&s, &|_| coll.clone()).is_err());
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
