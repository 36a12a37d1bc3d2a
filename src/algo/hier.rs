//! Two-level (hierarchical) algorithms: level0 is a mesh among the ranks of one host, level1
//! runs across hosts. Hosts may hold different numbers of ranks.
//!
//! Shards: a buffer is cut into M shards (M = most ranks on any host); on a host with m ranks,
//! local rank j owns shards j, j+m, …, and the owners of shard s on all hosts form its level1
//! group (one rank per host, in host order). Zero-length shards are skipped on every rank.
//!
//! Stages and pipelining: each form is written as stages on a clock shared by all ranks, and a
//! message cut into P pieces runs stage s of piece p in step p + s, so one step carries level0
//! work of one piece and level1 work of others. A message's send and receive sit in the same
//! step on both ranks, and within a step actions follow piece, then shard order on every rank,
//! so messages between a pair match in order and the lowest unfinished step can always finish
//! (no deadlock). P = bytes / piece size (at least one, at most [`MAX_PIECES`]).
//!
//! Level0 reduce-scatter (AllReduce, Reduce): every rank sends the shards it does not own
//! straight from its input to their owners. The owner starts from its own contribution and adds
//! its host peers' in local-rank order: from scratch slots in the next step's local actions when
//! reductions must be deterministic (one set of slots, reused by every piece: a piece's slots
//! are read before the next piece's receives are posted), by reducing receives otherwise (no
//! scratch).
//!
//! AllReduce (pipelined): per piece, (0) level0 reduce-scatter into the output; (1…h−1) ring
//! reduce-scatter of each shard across its group; (h…2h−2) ring allgather; (2h−1) owners send
//! their shards to the other ranks of their host. Scratch: none, or when deterministic
//! (m−1) × the owned part of one piece (about (m−1)/m of a piece on uniform hosts).
//!
//! Reduce: as AllReduce up to the ring reduce-scatter, then (h) the group member on the root's
//! host gathers the reduced sub-blocks, and (h+1) the owners on the root's host send their
//! shards to the root. The root works in its output; the others never touch theirs (it may be
//! absent) and keep their shards packed in scratch.
//!
//! Broadcast: per piece, (0) the root sends each shard to its owner on the root's host; then
//! each shard runs down a chain of its group's members in host order from the root's host,
//! the member at position q receiving in stage q; (q+1) a member forwards the shard to the
//! next host and to the other ranks of its host. Everything happens in the output buffer.
//!
//! ReduceScatter(V): column c holds the blocks of the local-c ranks of every host (host order).
//! The owner of column c on each host (local rank c mod m) (0) collects its host's inputs of
//! the column's blocks, folding as above, then (1…h−1) ring reduce-scatters the column with
//! the other owners, after which each member holds the full block of its host's local-c rank:
//! its own block for column j. The columns live in scratch (with the deterministic slots:
//! m × the owned columns).
//!
//! AllGather: for each local index j, the ranks owning j (local rank j % m on each host) ring-
//! allgather the blocks of the local-j ranks of every host; then each rank hands its own block
//! and what its rings brought in to the other ranks of its host.
//!
//! Every rank reserves the same scratch (communicators segment large operations by it alike):
//! the largest need of any (host size, local index).

use super::schedule::{even_blocks, Action, Buf, Schedule, Span};
use super::Ctx;

/// Smallest pipeline piece of AllReduce, Reduce and Broadcast: big enough that a step's fixed
/// cost stays small against moving a piece.
pub const PIECE_BYTES: usize = 2 << 20;

/// Most pipeline pieces: each adds a step to the schedule.
pub const MAX_PIECES: usize = 16;

/// Number of pipeline pieces for a message of `bytes` with pieces of at least `piece_bytes`.
pub fn pieces(bytes: usize, piece_bytes: usize) -> usize {
    (bytes / piece_bytes.max(1)).clamp(1, MAX_PIECES)
}

/// Actions by step of the shared clock, filled stage by stage.
#[derive(Default)]
struct Stages(Vec<Vec<Action>>);

impl Stages {
    fn at(&mut self, step: usize) -> &mut Vec<Action> {
        if self.0.len() <= step {
            self.0.resize_with(step + 1, Vec::new);
        }
        &mut self.0[step]
    }

    fn into_schedule(self, s: &mut Schedule) {
        for st in self.0 {
            s.step().extend(st);
        }
    }
}

/// This rank's place in the two-level layout.
struct Place<'a> {
    me: u32,
    hosts: &'a [Vec<u32>],
    /// This rank's host.
    hi: usize,
    /// The ranks of this host.
    local: &'a [u32],
    /// This rank's index on its host.
    j: usize,
    /// Shards (or columns): the most ranks on any host.
    nsh: usize,
}

impl<'a> Place<'a> {
    fn new(ctx: &Ctx<'a>) -> Place<'a> {
        let topo = ctx.topo;
        let hosts = topo.hosts();
        let hi = topo.host(ctx.me) as usize;
        Place {
            me: ctx.me,
            hosts,
            hi,
            local: &hosts[hi],
            j: topo.local_index(ctx.me) as usize,
            nsh: topo.max_per_host() as usize,
        }
    }

    fn m(&self) -> usize {
        self.local.len()
    }

    fn h(&self) -> usize {
        self.hosts.len()
    }

    fn owner(&self, sh: usize) -> u32 {
        self.local[sh % self.m()]
    }

    fn owns(&self, sh: usize) -> bool {
        sh % self.m() == self.j
    }

    /// The owners of shard `sh` on every host, in host order (this rank is member `hi`).
    fn group(&self, sh: usize) -> Vec<u32> {
        self.hosts.iter().map(|h| h[sh % h.len()]).collect()
    }

    /// The other ranks of this host, in local order.
    fn peers(&self) -> impl Iterator<Item = u32> + '_ {
        self.local.iter().copied().filter(move |&p| p != self.me)
    }

    /// Non-empty shards this rank owns (`shards[sh]` = (first, len)).
    fn mine(&self, shards: &[(usize, usize)]) -> Vec<usize> {
        (0..self.nsh)
            .filter(|&sh| self.owns(sh) && shards[sh].1 > 0)
            .collect()
    }

    /// Every (ranks on the host, local index) some rank has: scratch is sized for the largest
    /// need among them, so that every rank reserves the same.
    fn places(&self) -> Vec<(usize, usize)> {
        let mut sizes: Vec<usize> = self.hosts.iter().map(Vec::len).collect();
        sizes.sort_unstable();
        sizes.dedup();
        sizes
            .into_iter()
            .flat_map(|m| (0..m).map(move |j| (m, j)))
            .collect()
    }

    /// Non-empty shards other ranks of this host own.
    fn others(&self, shards: &[(usize, usize)]) -> Vec<usize> {
        (0..self.nsh)
            .filter(|&sh| !self.owns(sh) && shards[sh].1 > 0)
            .collect()
    }
}

/// Elements of `shards` that local rank `j` of a host of `m` ranks owns.
fn owned_by(m: usize, j: usize, shards: &[(usize, usize)]) -> usize {
    shards.iter().skip(j).step_by(m).map(|s| s.1).sum()
}

/// Elements of a piece's shards this rank owns.
fn owned_len(pl: &Place, shards: &[(usize, usize)]) -> usize {
    owned_by(pl.m(), pl.j, shards)
}

/// `(first, len)` of every shard of the piece `(first, len)`.
fn shards_of(piece: (usize, usize), nsh: usize) -> Vec<(usize, usize)> {
    even_blocks(piece.1, nsh)
        .into_iter()
        .map(|(f, l)| (piece.0 + f, l))
        .collect()
}

/// `(first, len)` of every pipeline piece of `count` elements.
fn pieces_of(ctx: &Ctx, count: usize, piece_bytes: usize) -> Vec<(usize, usize)> {
    let np = pieces(count * ctx.elem, piece_bytes).min(count.max(1));
    even_blocks(count, np)
}

/// `len` elements at element `at` within `sp`.
fn sub(sp: Span, es: usize, at: usize, len: usize) -> Span {
    Span::new(sp.buf, sp.off + at * es, len * es)
}

/// Level0 reduce-scatter of one piece in step `t`: every rank sends each shard it does not own
/// from its input to the owner, which copies its own contribution into `work(sh)` and adds its
/// peers' in local-rank order. With `slots` (a scratch byte offset) the peers' copies land
/// there and are folded by step `t + 1`'s local actions; without, receives reduce in place.
fn level0_reduce_scatter(
    st: &mut Stages,
    t: usize,
    es: usize,
    pl: &Place,
    shards: &[(usize, usize)],
    work: &dyn Fn(usize) -> Span,
    slots: Option<usize>,
) {
    let input = |sh: usize| Span::new(Buf::Send, shards[sh].0 * es, shards[sh].1 * es);
    let mine = pl.mine(shards);
    let stage = st.at(t);
    for &sh in &mine {
        super::schedule::push_copy(stage, input(sh), work(sh));
    }
    for sh in pl.others(shards) {
        stage.push(Action::Send {
            peer: pl.owner(sh),
            src: input(sh),
        });
    }
    let Some(base) = slots else {
        for &sh in &mine {
            for peer in pl.peers() {
                stage.push(Action::RecvReduce {
                    peer,
                    dst: work(sh),
                });
            }
        }
        return;
    };
    let own = owned_len(pl, shards);
    let mut folds = Vec::new();
    let mut at = 0;
    for &sh in &mine {
        let len = shards[sh].1;
        for (qi, peer) in pl.peers().enumerate() {
            let slot = Span::new(Buf::Scratch, base + (qi * own + at) * es, len * es);
            stage.push(Action::Recv { peer, dst: slot });
            folds.push(Action::Reduce {
                dst: work(sh),
                src: slot,
            });
        }
        at += len;
    }
    st.at(t + 1).extend(folds);
}

/// Level0 allgather of one piece in step `t`: owners send `span(sh)` to the other ranks of
/// their host, which receive it at the same place.
fn level0_allgather(
    st: &mut Stages,
    t: usize,
    pl: &Place,
    shards: &[(usize, usize)],
    span: &dyn Fn(usize) -> Span,
) {
    if pl.m() == 1 {
        return;
    }
    let stage = st.at(t);
    for sh in pl.mine(shards) {
        for peer in pl.peers() {
            stage.push(Action::Send {
                peer,
                src: span(sh),
            });
        }
    }
    for sh in pl.others(shards) {
        stage.push(Action::Recv {
            peer: pl.owner(sh),
            dst: span(sh),
        });
    }
}

/// Block `i - k` of `blocks` (one per ring member), for `k <= 2 * blocks.len()`.
fn behind(blocks: &[Span], i: usize, k: usize) -> Span {
    let h = blocks.len();
    blocks[(i + 2 * h - k) % h]
}

/// Ring reduce-scatter among `group` (this rank is member `i`) over `blocks` (one per member)
/// in steps `t … t+h−2`: step k sends block i−1−k right and reduces block i−2−k from the left
/// into place, so member i ends with block i complete. Empty blocks are not sent.
fn ring_reduce_scatter(st: &mut Stages, t: usize, group: &[u32], i: usize, blocks: &[Span]) {
    ring_pass(st, t, group, i, blocks, true);
}

/// Ring allgather among `group` (member `i` starts with block i) in steps `t … t+h−2`.
fn ring_allgather(st: &mut Stages, t: usize, group: &[u32], i: usize, blocks: &[Span]) {
    ring_pass(st, t, group, i, blocks, false);
}

/// One ring pass of h−1 steps from step `t`: step k sends block i−k (one further back when
/// reducing) right and receives the block behind it from the left, reducing it in when
/// `reduce` is set.
fn ring_pass(st: &mut Stages, t: usize, group: &[u32], i: usize, blocks: &[Span], reduce: bool) {
    let h = group.len();
    let lag = usize::from(reduce);
    for k in 0..h.saturating_sub(1) {
        let (out, inc) = (behind(blocks, i, k + lag), behind(blocks, i, k + lag + 1));
        let stage = st.at(t + k);
        if out.len > 0 {
            stage.push(Action::Send {
                peer: group[(i + 1) % h],
                src: out,
            });
        }
        if inc.len > 0 {
            let peer = group[(i + h - 1) % h];
            stage.push(if reduce {
                Action::RecvReduce { peer, dst: inc }
            } else {
                Action::Recv { peer, dst: inc }
            });
        }
    }
}

/// The level1 sub-blocks of a shard held at `work`: one per host.
fn sub_blocks(work: Span, es: usize, h: usize) -> Vec<Span> {
    even_blocks(work.len / es, h)
        .into_iter()
        .map(|(f, l)| sub(work, es, f, l))
        .collect()
}

/// Pipelined hierarchical AllReduce in the output buffer, with pieces of at least
/// `piece_bytes` (normally [`PIECE_BYTES`]).
pub fn allreduce(ctx: &Ctx, count: usize, piece_bytes: usize) -> Schedule {
    let mut s = Schedule::new("hier");
    if count == 0 {
        return s;
    }
    let es = ctx.elem;
    let pl = Place::new(ctx);
    let h = pl.h();
    let pieces = pieces_of(ctx, count, piece_bytes);
    let slots = (ctx.deterministic && pl.m() > 1).then_some(0);
    if ctx.deterministic {
        // Piece 0 is the largest, and so is each of its shards.
        let first = shards_of(pieces[0], pl.nsh);
        let most = pl
            .places()
            .into_iter()
            .map(|(m, j)| (m - 1) * owned_by(m, j, &first));
        s.need_scratch(most.max().unwrap_or(0) * es);
    }
    let mut st = Stages::default();
    for (p, &piece) in pieces.iter().enumerate() {
        let shards = shards_of(piece, pl.nsh);
        let out = |sh: usize| Span::new(Buf::Recv, shards[sh].0 * es, shards[sh].1 * es);
        level0_reduce_scatter(&mut st, p, es, &pl, &shards, &out, slots);
        for sh in pl.mine(&shards) {
            let group = pl.group(sh);
            let blocks = sub_blocks(out(sh), es, h);
            ring_reduce_scatter(&mut st, p + 1, &group, pl.hi, &blocks);
            ring_allgather(&mut st, p + h, &group, pl.hi, &blocks);
        }
        level0_allgather(&mut st, p + 2 * h - 1, &pl, &shards, &out);
    }
    st.into_schedule(&mut s);
    s
}

/// Hierarchical Reduce to `root`, with pipeline pieces of at least `piece_bytes`.
pub fn reduce(ctx: &Ctx, count: usize, root: u32, piece_bytes: usize) -> Schedule {
    let mut s = Schedule::new("hier");
    if count == 0 {
        return s;
    }
    let es = ctx.elem;
    let pl = Place::new(ctx);
    let h = pl.h();
    let hr = ctx.topo.host(root) as usize;
    let at_root = ctx.me == root;
    let pieces = pieces_of(ctx, count, piece_bytes);
    let shards: Vec<Vec<(usize, usize)>> = pieces.iter().map(|&p| shards_of(p, pl.nsh)).collect();
    // Off the root, owned shards are packed in scratch piece after piece; slots follow.
    let packed = |m: usize, j: usize| shards.iter().map(|sh| owned_by(m, j, sh)).sum::<usize>();
    let slots_len = |m: usize, j: usize| {
        if ctx.deterministic {
            (m - 1) * owned_by(m, j, &shards[0])
        } else {
            0
        }
    };
    let need = pl
        .places()
        .into_iter()
        .map(|(m, j)| packed(m, j) + slots_len(m, j));
    s.need_scratch(need.max().unwrap_or(0) * es);
    let work_len = if at_root { 0 } else { packed(pl.m(), pl.j) };
    let slots = (ctx.deterministic && pl.m() > 1).then_some(work_len * es);
    let mut st = Stages::default();
    let mut at = 0;
    for (p, shards) in shards.iter().enumerate() {
        let mut base = vec![0; pl.nsh];
        for sh in pl.mine(shards) {
            base[sh] = at;
            at += shards[sh].1;
        }
        let work = |sh: usize| {
            let (first, len) = shards[sh];
            if at_root {
                Span::new(Buf::Recv, first * es, len * es)
            } else {
                Span::new(Buf::Scratch, base[sh] * es, len * es)
            }
        };
        level0_reduce_scatter(&mut st, p, es, &pl, shards, &work, slots);
        for sh in pl.mine(shards) {
            let group = pl.group(sh);
            let blocks = sub_blocks(work(sh), es, h);
            ring_reduce_scatter(&mut st, p + 1, &group, pl.hi, &blocks);
            if h < 2 {
                continue;
            }
            // The member on the root's host collects the reduced sub-blocks.
            let stage = st.at(p + h);
            if pl.hi == hr {
                for (g, &b) in blocks.iter().enumerate() {
                    if g != hr && b.len > 0 {
                        stage.push(Action::Recv {
                            peer: group[g],
                            dst: b,
                        });
                    }
                }
            } else if blocks[pl.hi].len > 0 {
                stage.push(Action::Send {
                    peer: group[hr],
                    src: blocks[pl.hi],
                });
            }
        }
        if pl.hi == hr && pl.m() > 1 {
            let stage = st.at(p + if h > 1 { h + 1 } else { 1 });
            if at_root {
                for sh in pl.others(shards) {
                    let (first, len) = shards[sh];
                    stage.push(Action::Recv {
                        peer: pl.owner(sh),
                        dst: Span::new(Buf::Recv, first * es, len * es),
                    });
                }
            } else {
                for sh in pl.mine(shards) {
                    stage.push(Action::Send {
                        peer: root,
                        src: work(sh),
                    });
                }
            }
        }
    }
    st.into_schedule(&mut s);
    s
}

/// Hierarchical Broadcast from `root` in the output buffer, with pipeline pieces of at least
/// `piece_bytes`.
pub fn broadcast(ctx: &Ctx, count: usize, root: u32, piece_bytes: usize) -> Schedule {
    let mut s = Schedule::new("hier");
    if count == 0 || ctx.n == 1 {
        return s;
    }
    let es = ctx.elem;
    let pl = Place::new(ctx);
    let h = pl.h();
    let hr = ctx.topo.host(root) as usize;
    // This host's position in every chain.
    let pos = (pl.hi + h - hr) % h;
    let mut st = Stages::default();
    for (p, &piece) in pieces_of(ctx, count, piece_bytes).iter().enumerate() {
        let shards = shards_of(piece, pl.nsh);
        let out = |sh: usize| Span::new(Buf::Recv, shards[sh].0 * es, shards[sh].1 * es);
        if pl.hi == hr {
            let stage = st.at(p);
            if ctx.me == root {
                for sh in pl.others(&shards) {
                    stage.push(Action::Send {
                        peer: pl.owner(sh),
                        src: out(sh),
                    });
                }
            } else {
                for sh in pl.mine(&shards) {
                    stage.push(Action::Recv {
                        peer: root,
                        dst: out(sh),
                    });
                }
            }
        }
        for sh in pl.mine(&shards) {
            let group = pl.group(sh);
            if pos > 0 {
                st.at(p + pos).push(Action::Recv {
                    peer: group[(pl.hi + h - 1) % h],
                    dst: out(sh),
                });
            }
            let stage = st.at(p + pos + 1);
            if pos + 1 < h {
                stage.push(Action::Send {
                    peer: group[(pl.hi + 1) % h],
                    src: out(sh),
                });
            }
            for peer in pl.peers().filter(|&q| q != root) {
                stage.push(Action::Send { peer, src: out(sh) });
            }
        }
        if ctx.me != root {
            let stage = st.at(p + pos + 1);
            for sh in pl.others(&shards) {
                stage.push(Action::Recv {
                    peer: pl.owner(sh),
                    dst: out(sh),
                });
            }
        }
    }
    st.into_schedule(&mut s);
    s
}

/// Hierarchical ReduceScatter(V): rank r ends with the reduction of every rank's input block
/// `(displs[r], counts[r])`.
pub fn reduce_scatter(ctx: &Ctx, counts: &[usize], displs: &[usize]) -> Schedule {
    let mut s = Schedule::new("hier");
    let es = ctx.elem;
    let pl = Place::new(ctx);
    let h = pl.h();
    let input = |r: u32| {
        let r = r as usize;
        Span::new(Buf::Send, displs[r] * es, counts[r] * es)
    };
    // The rank of column c on host g, if that host has one.
    let target = |c: usize, g: usize| pl.hosts[g].get(c).copied();
    let len_of = |c: usize, g: usize| target(c, g).map_or(0, |r| counts[r as usize]);
    let owned: Vec<usize> = (0..pl.nsh).filter(|&c| pl.owns(c)).collect();
    let col_len = |c: usize| (0..h).map(|g| len_of(c, g)).sum::<usize>();
    let folding = ctx.deterministic && pl.m() > 1;
    let need = pl.places().into_iter().map(|(m, j)| {
        let cols: usize = (j..pl.nsh).step_by(m).map(col_len).sum();
        cols * if ctx.deterministic { m } else { 1 }
    });
    s.need_scratch(need.max().unwrap_or(0) * es);
    // Owned columns in scratch, one block per host.
    let mut at = 0;
    let cols: Vec<Vec<Span>> = owned
        .iter()
        .map(|&c| {
            (0..h)
                .map(|g| {
                    let len = len_of(c, g);
                    at += len;
                    Span::new(Buf::Scratch, (at - len) * es, len * es)
                })
                .collect()
        })
        .collect();
    let total = at;
    let mut st = Stages::default();
    let stage = st.at(0);
    for (&c, col) in owned.iter().zip(&cols) {
        for (g, &b) in col.iter().enumerate() {
            if let (Some(r), true) = (target(c, g), b.len > 0) {
                super::schedule::push_copy(stage, input(r), b);
            }
        }
    }
    for c in (0..pl.nsh).filter(|&c| !pl.owns(c)) {
        for g in 0..h {
            if let (Some(r), true) = (target(c, g), len_of(c, g) > 0) {
                stage.push(Action::Send {
                    peer: pl.owner(c),
                    src: input(r),
                });
            }
        }
    }
    let mut folds = Vec::new();
    for col in &cols {
        for &b in col.iter().filter(|b| b.len > 0) {
            for (qi, peer) in pl.peers().enumerate() {
                if folding {
                    let slot = Span::new(Buf::Scratch, b.off + (qi + 1) * total * es, b.len);
                    stage.push(Action::Recv { peer, dst: slot });
                    folds.push(Action::Reduce { dst: b, src: slot });
                } else {
                    stage.push(Action::RecvReduce { peer, dst: b });
                }
            }
        }
    }
    st.at(1).extend(folds);
    for (&c, col) in owned.iter().zip(&cols) {
        ring_reduce_scatter(&mut st, 1, &pl.group(c), pl.hi, col);
    }
    let mine = cols[0][pl.hi];
    if mine.len > 0 {
        st.at(h.max(1)).push(Action::Copy {
            src: mine,
            dst: Span::new(Buf::Recv, 0, mine.len),
        });
    }
    st.into_schedule(&mut s);
    s
}

/// The ranks whose blocks rank `x` hands to the other ranks of its host in the final level0
/// step of [`allgather`]: itself, then what its level1 rings brought in.
fn forwarded(ctx: &Ctx, x: u32) -> Vec<u32> {
    let topo = ctx.topo;
    let hosts = topo.hosts();
    let h = topo.host(x) as usize;
    let m = hosts[h].len();
    let i = topo.local_index(x) as usize;
    let mut out = vec![x];
    for j in (0..topo.max_per_host() as usize).filter(|&j| j % m == i) {
        for (g, host) in hosts.iter().enumerate() {
            if g != h && j < host.len() {
                out.push(host[j]);
            }
        }
    }
    out
}

/// Hierarchical AllGather (equal blocks of `count` elements) in the output buffer.
pub fn allgather(ctx: &Ctx, count: usize) -> Schedule {
    let mut s = Schedule::new("hier");
    let (es, me) = (ctx.elem, ctx.me);
    let bytes = count * es;
    let block = |r: u32| Span::new(Buf::Recv, r as usize * bytes, bytes);
    s.step().push(Action::Copy {
        src: Span::new(Buf::Send, 0, bytes),
        dst: block(me),
    });
    if count == 0 {
        return s;
    }
    let topo = ctx.topo;
    let hosts = topo.hosts();
    let hi = topo.host(me) as usize;
    let local = &hosts[hi];
    let m = local.len();
    let j0 = topo.local_index(me) as usize;
    let nh = hosts.len();
    let mut fresh = false;
    for j in (0..topo.max_per_host() as usize).filter(|&j| j % m == j0) {
        // Ring allgather among the owners of j; host g contributes the block of its local-j
        // rank if it has one.
        let group: Vec<u32> = hosts.iter().map(|h| h[j % h.len()]).collect();
        let piece = |g: usize| hosts[g].get(j).copied();
        let right = group[(hi + 1) % nh];
        let left = group[(hi + nh - 1) % nh];
        for k in 0..nh.saturating_sub(1) {
            // The first ring step shares the copy's step; later groups start afresh.
            let st = if k == 0 && !fresh {
                s.current()
            } else {
                s.step()
            };
            if let Some(r) = piece((hi + nh - k) % nh) {
                st.push(Action::Send {
                    peer: right,
                    src: block(r),
                });
            }
            if let Some(r) = piece((hi + 2 * nh - k - 1) % nh) {
                st.push(Action::Recv {
                    peer: left,
                    dst: block(r),
                });
            }
        }
        fresh = true;
    }
    if m > 1 {
        let st = s.step();
        for &peer in local.iter().filter(|&&p| p != me) {
            for r in forwarded(ctx, me) {
                st.push(Action::Send {
                    peer,
                    src: block(r),
                });
            }
        }
        for &peer in local.iter().filter(|&&p| p != me) {
            for r in forwarded(ctx, peer) {
                st.push(Action::Recv {
                    peer,
                    dst: block(r),
                });
            }
        }
    }
    s
}
