//! The time of a collective on a network whose links are shared: every rank's schedule runs as
//! a sequence of events, every message is a flow over the links between its two ranks, and
//! flows that share a link share its bandwidth max-min fairly (what competing TCP streams
//! approach; each flow gets an equal share of its most contended link, and what a flow cannot
//! use there goes to the others).
//!
//! Links: each host's NICs (one per direction; local rank j uses NIC j mod `nics`), the
//! uplinks of leaf or rail switches when traffic crosses them ([`Fabric`]), and within a host
//! a port per rank and direction (level0 `mesh_beta`: how fast one rank moves data to all its
//! peers at once) plus, optionally, the host's memory shared by all of them. A flow between
//! ranks of one host is also capped at level0 β, and a reducing receive at the reduction rate
//! γ (the receiver folds data in as it arrives).
//!
//! Steps: a rank starts step k when step k−1 is complete, spends its local copies and
//! reductions (both at γ), pays the per-peer cost of posting to more than one peer (`peer` of the
//! level), then posts its sends and receives. A send and the matching receive (in order per
//! rank pair, as the transports match them) become a flow once both are posted, after the
//! level's latency α. A step completes when all its flows have. Pipelined schedules overlap
//! pieces across steps exactly as their steps say, so pipelining shows.
//!
//! Events at the same instant are processed together and rates are recomputed only for the
//! flows connected (through shared links) to those that started or ended, so symmetric
//! schedules cost about one rate computation per step.

use std::cmp::Ordering;
use std::collections::BinaryHeap;

use super::cost::CostModel;
use super::fabric::{Fabric, Layout};
use super::schedule::{Action, Schedule};
use super::{Algo, Coll, Topo};

/// The links of a fabric for one rank layout, and where each rank sits.
struct Net {
    cap: Vec<f64>,
    nic_tx: Vec<u32>,
    nic_rx: Vec<u32>,
    port_tx: Vec<u32>,
    port_rx: Vec<u32>,
    /// Host memory link of each host, when limited.
    mem: Vec<Option<u32>>,
    host: Vec<u32>,
    /// Uplink pair (up, down) of each leaf (tree) or rail (rail), when crossed.
    up: Vec<(u32, u32)>,
    leaf: Vec<u32>,
    rail: Vec<u32>,
    layout: Layout,
    has_uplinks: bool,
}

impl Net {
    fn new(topo: &Topo, f: &Fabric, m: &CostModel) -> Net {
        let nic_bw = f.nic_bw.unwrap_or(m.level1.beta);
        let hosts = topo.hosts().len() as u32;
        let mut cap = Vec::new();
        let mut link = |c: f64| {
            cap.push(c);
            (cap.len() - 1) as u32
        };
        let nics = f.nics.max(1);
        let mut nic = Vec::new();
        for _ in 0..hosts * nics {
            nic.push((link(nic_bw), link(nic_bw)));
        }
        let mem: Vec<Option<u32>> = (0..hosts).map(|_| f.host_mem_bw.map(&mut link)).collect();
        let n = topo.n();
        let mut port_tx = Vec::with_capacity(n as usize);
        let mut port_rx = Vec::with_capacity(n as usize);
        let (mut nic_tx, mut nic_rx, mut leaf, mut rail) = (vec![], vec![], vec![], vec![]);
        for r in 0..n {
            port_tx.push(link(m.level0.mesh_beta));
            port_rx.push(link(m.level0.mesh_beta));
            let h = topo.host(r);
            let i = f.nic_of(topo.local_index(r));
            let (tx, rx) = nic[(h * nics + i) as usize];
            nic_tx.push(tx);
            nic_rx.push(rx);
            leaf.push(f.leaf_of(h));
            rail.push(i);
        }
        let uplink = f.uplink_bw(nic_bw, hosts);
        let groups = match f.layout {
            Layout::Tree => f.leaf_of(hosts.saturating_sub(1)) + 1,
            Layout::Rail => nics,
        };
        let up = match uplink {
            Some(bw) => (0..groups).map(|_| (link(bw), link(bw))).collect(),
            None => Vec::new(),
        };
        Net {
            cap,
            nic_tx,
            nic_rx,
            port_tx,
            port_rx,
            mem,
            host: (0..n).map(|r| topo.host(r)).collect(),
            has_uplinks: !up.is_empty(),
            up,
            leaf,
            rail,
            layout: f.layout,
        }
    }

    /// The links a message from `a` to `b` crosses.
    fn path(&self, a: u32, b: u32) -> Path {
        let (a, b) = (a as usize, b as usize);
        let mut p = Path::default();
        if self.host[a] == self.host[b] {
            p.push(self.port_tx[a]);
            p.push(self.port_rx[b]);
            if let Some(l) = self.mem[self.host[a] as usize] {
                p.push(l);
            }
            return p;
        }
        p.push(self.nic_tx[a]);
        p.push(self.nic_rx[b]);
        if self.has_uplinks {
            let (ga, gb) = match self.layout {
                Layout::Tree => (self.leaf[a], self.leaf[b]),
                Layout::Rail => (self.rail[a], self.rail[b]),
            };
            if ga != gb {
                p.push(self.up[ga as usize].0);
                p.push(self.up[gb as usize].1);
            }
        }
        p
    }
}

/// Up to four links.
#[derive(Clone, Copy, Debug, Default)]
struct Path {
    links: [u32; 4],
    len: u8,
}

impl Path {
    fn push(&mut self, l: u32) {
        self.links[self.len as usize] = l;
        self.len += 1;
    }

    fn links(&self) -> &[u32] {
        &self.links[..self.len as usize]
    }
}

/// One action in compact form.
#[derive(Clone, Copy, Debug)]
struct Act {
    kind: Kind,
    /// Last action of its step.
    last: bool,
    peer: u32,
    bytes: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Nop,
    Send,
    Recv,
    RecvReduce,
    Copy,
    Reduce,
}

/// One rank's schedule: steps back to back, each ending with an action marked `last`.
struct Plan {
    acts: Vec<Act>,
}

fn compact(s: &Schedule) -> Plan {
    let mut acts = Vec::with_capacity(s.steps.iter().map(|st| st.actions.len().max(1)).sum());
    for st in &s.steps {
        if st.actions.is_empty() {
            acts.push(Act {
                kind: Kind::Nop,
                last: true,
                peer: 0,
                bytes: 0,
            });
        }
        for (i, a) in st.actions.iter().enumerate() {
            let (kind, peer, bytes) = match *a {
                Action::Send { peer, src } => (Kind::Send, peer, src.len),
                Action::Recv { peer, dst } => (Kind::Recv, peer, dst.len),
                Action::RecvReduce { peer, dst } => (Kind::RecvReduce, peer, dst.len),
                Action::Copy { dst, .. } => (Kind::Copy, 0, dst.len),
                Action::Reduce { dst, .. } => (Kind::Reduce, 0, dst.len),
            };
            acts.push(Act {
                kind,
                last: i + 1 == st.actions.len(),
                peer,
                bytes: bytes as u64,
            });
        }
    }
    Plan { acts }
}

/// A posted send or receive of a rank's current step.
#[derive(Clone, Copy, Debug)]
struct Entry {
    peer: u32,
    matched: bool,
    act: Act,
}

#[derive(Default)]
struct RankState {
    /// Index of the current step's first action, and of the next step's.
    pos: usize,
    next: usize,
    posted: bool,
    done: bool,
    /// Sends and receives of the current step, by peer (stable).
    tx: Vec<Entry>,
    rx: Vec<Entry>,
    /// Flows of the current step not yet complete.
    open: usize,
    finish: f64,
}

/// A message in flight.
#[derive(Clone, Copy, Debug)]
struct Flow {
    path: Path,
    /// Position of this flow in each of its links' lists.
    at: [u32; 4],
    /// Rate cap of the flow itself (in-host copy speed, reduction rate), bytes/s.
    cap: f64,
    left: f64,
    rate: f64,
    /// When `left` was last brought up to date.
    since: f64,
    /// Bumped whenever the completion time changes (and on reuse of the slot), so stale
    /// completion events are dropped.
    version: u32,
    from: u32,
    to: u32,
    active: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Ev {
    /// Rank starts its next step.
    Step(u32),
    /// Rank posts its current step's communication.
    Post(u32),
    /// Flow starts moving bytes.
    Start(u32),
    /// Flow completes (if its version still matches).
    End(u32, u32),
}

#[derive(Clone, Copy, Debug)]
struct Timed {
    t: f64,
    seq: u64,
    ev: Ev,
}

impl PartialEq for Timed {
    fn eq(&self, o: &Self) -> bool {
        self.cmp(o) == Ordering::Equal
    }
}
impl Eq for Timed {}
impl PartialOrd for Timed {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Timed {
    /// Reversed: the heap pops the earliest, and among equal times the first pushed.
    fn cmp(&self, o: &Self) -> Ordering {
        o.t.total_cmp(&self.t).then(o.seq.cmp(&self.seq))
    }
}

/// What a simulated run found.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Outcome {
    /// Completion time of the slowest rank, seconds.
    pub time: f64,
    /// Messages sent.
    pub messages: usize,
    /// Rate computations (a measure of the simulation's own cost).
    pub solves: usize,
    /// When each rank finished, seconds.
    pub finish: Vec<f64>,
}

const NONE: u32 = u32::MAX;

/// The simulation of one collective.
struct Sim<'a> {
    net: Net,
    model: &'a CostModel,
    latency1: f64,
    plans: &'a [Plan],
    ranks: Vec<RankState>,
    flows: Vec<Flow>,
    free: Vec<u32>,
    /// Active flows on each link.
    on: Vec<Vec<u32>>,
    heap: BinaryHeap<Timed>,
    seq: u64,
    now: f64,
    /// Flows started and links whose load changed since the last rate computation.
    new_flows: Vec<u32>,
    dirty_links: Vec<u32>,
    /// Per link: its index in the component being solved, or [`NONE`].
    slot: Vec<u32>,
    /// Per flow: whether it is in the component being solved.
    seen: Vec<bool>,
    peers: Vec<u32>,
    out: Outcome,
}

impl Sim<'_> {
    fn push(&mut self, t: f64, ev: Ev) {
        self.seq += 1;
        self.heap.push(Timed {
            t,
            seq: self.seq,
            ev,
        });
    }

    fn same_host(&self, a: u32, b: u32) -> bool {
        self.net.host[a as usize] == self.net.host[b as usize]
    }

    /// Starts rank `r`'s next step at the current time: local work, then posting.
    fn step(&mut self, r: u32) {
        let plans = self.plans;
        let acts = &plans[r as usize].acts;
        let st = &mut self.ranks[r as usize];
        if st.posted {
            st.pos = st.next;
            st.posted = false;
        }
        if st.pos >= acts.len() {
            st.done = true;
            st.finish = self.now;
            return;
        }
        let m = self.model;
        let mut local = 0.0;
        let mut peers = std::mem::take(&mut self.peers);
        peers.clear();
        let mut i = st.pos;
        loop {
            let a = acts[i];
            match a.kind {
                // A local copy or fold runs at memory speed, like a reduction.
                Kind::Copy | Kind::Reduce => local += a.bytes as f64 / m.gamma,
                Kind::Nop => {}
                _ => peers.push(a.peer),
            }
            i += 1;
            if a.last {
                break;
            }
        }
        st.next = i;
        peers.sort_unstable();
        peers.dedup();
        let near = peers.iter().filter(|&&p| self.same_host(r, p)).count();
        let far = peers.len() - near;
        let extra = |k: usize, per: f64| k.saturating_sub(1) as f64 * per;
        let post = local + extra(near, m.level0.peer) + extra(far, m.level1.peer);
        self.peers = peers;
        self.push(self.now + post, Ev::Post(r));
    }

    /// Posts rank `r`'s current step and matches it against its peers' posted steps.
    fn post(&mut self, r: u32) {
        let plans = self.plans;
        let acts = &plans[r as usize].acts;
        let st = &mut self.ranks[r as usize];
        let (mut tx, mut rx) = (std::mem::take(&mut st.tx), std::mem::take(&mut st.rx));
        tx.clear();
        rx.clear();
        for &a in &acts[st.pos..st.next] {
            let e = Entry {
                peer: a.peer,
                matched: false,
                act: a,
            };
            match a.kind {
                Kind::Send => tx.push(e),
                Kind::Recv | Kind::RecvReduce => rx.push(e),
                _ => {}
            }
        }
        // Stable: messages between a pair match in action order.
        tx.sort_by_key(|e| e.peer);
        rx.sort_by_key(|e| e.peer);
        st.open = tx.len() + rx.len();
        st.posted = true;
        let peers_rx = distinct(&rx);
        let peers_tx = distinct(&tx);
        st.tx = tx;
        st.rx = rx;
        if st.open == 0 {
            self.push(self.now, Ev::Step(r));
            return;
        }
        for p in peers_rx {
            self.pair(p, r);
        }
        for q in peers_tx {
            self.pair(r, q);
        }
    }

    /// Turns the posted sends of `s` to `d` and receives of `d` from `s`, matched in order,
    /// into flows.
    fn pair(&mut self, s: u32, d: u32) {
        loop {
            let (ss, ds) = (&self.ranks[s as usize], &self.ranks[d as usize]);
            if !ss.posted || !ds.posted {
                return;
            }
            let Some(i) = first_unmatched(&ss.tx, d) else {
                return;
            };
            let Some(j) = first_unmatched(&ds.rx, s) else {
                return;
            };
            let recv = ds.rx[j].act;
            self.ranks[s as usize].tx[i].matched = true;
            self.ranks[d as usize].rx[j].matched = true;
            let inside = self.same_host(s, d);
            let m = self.model;
            let mut cap = if inside { m.level0.beta } else { f64::INFINITY };
            if recv.kind == Kind::RecvReduce {
                cap = cap.min(m.gamma);
            }
            let mut f = Flow {
                path: self.net.path(s, d),
                at: [NONE; 4],
                cap,
                left: recv.bytes as f64,
                rate: 0.0,
                since: self.now,
                version: 0,
                from: s,
                to: d,
                active: false,
            };
            let id = match self.free.pop() {
                Some(id) => {
                    f.version = self.flows[id as usize].version.wrapping_add(1);
                    self.flows[id as usize] = f;
                    id
                }
                None => {
                    self.flows.push(f);
                    self.seen.push(false);
                    (self.flows.len() - 1) as u32
                }
            };
            self.out.messages += 1;
            let alpha = if inside {
                m.level0.alpha
            } else {
                self.latency1
            };
            self.push(self.now + alpha, Ev::Start(id));
        }
    }

    fn start(&mut self, id: u32) {
        let f = &mut self.flows[id as usize];
        f.active = true;
        f.since = self.now;
        if f.left <= 0.0 {
            f.version = f.version.wrapping_add(1);
            let v = f.version;
            self.push(self.now, Ev::End(id, v));
            return;
        }
        let path = f.path;
        for (k, &l) in path.links().iter().enumerate() {
            let list = &mut self.on[l as usize];
            self.flows[id as usize].at[k] = list.len() as u32;
            list.push(id);
        }
        self.new_flows.push(id);
    }

    /// A flow has moved all its bytes: both ends' steps may complete.
    fn end(&mut self, id: u32) {
        let f = self.flows[id as usize];
        for (k, &l) in f.path.links().iter().enumerate() {
            let list = &mut self.on[l as usize];
            let at = f.at[k] as usize;
            list.swap_remove(at);
            if let Some(&moved) = list.get(at) {
                let mf = &mut self.flows[moved as usize];
                let kk = mf
                    .path
                    .links()
                    .iter()
                    .position(|&x| x == l)
                    .expect("on link");
                mf.at[kk] = at as u32;
            }
            self.dirty_links.push(l);
        }
        let f = &mut self.flows[id as usize];
        f.active = false;
        f.version = f.version.wrapping_add(1);
        self.free.push(id);
        for r in [f.from, f.to] {
            let st = &mut self.ranks[r as usize];
            st.open -= 1;
            if st.open == 0 {
                self.push(self.now, Ev::Step(r));
            }
        }
    }

    /// Recomputes the max-min fair rates of every flow connected, through shared links, to
    /// one that started or to a link one left, and reschedules their completions.
    fn solve(&mut self) {
        if self.new_flows.is_empty() && self.dirty_links.is_empty() {
            return;
        }
        self.out.solves += 1;
        let mut comp: Vec<u32> = Vec::new();
        let mut links: Vec<u32> = Vec::new();
        let mut stack: Vec<u32> = std::mem::take(&mut self.new_flows);
        let dirty = std::mem::take(&mut self.dirty_links);
        let visit_link = |sim: &mut Sim, l: u32, links: &mut Vec<u32>, stack: &mut Vec<u32>| {
            if sim.slot[l as usize] == NONE {
                sim.slot[l as usize] = links.len() as u32;
                links.push(l);
                stack.extend_from_slice(&sim.on[l as usize]);
            }
        };
        for l in dirty {
            visit_link(self, l, &mut links, &mut stack);
        }
        while let Some(id) = stack.pop() {
            if !self.flows[id as usize].active || self.seen[id as usize] {
                continue;
            }
            self.seen[id as usize] = true;
            comp.push(id);
            let path = self.flows[id as usize].path;
            for &l in path.links() {
                visit_link(self, l, &mut links, &mut stack);
            }
        }
        // Progressive filling: raise every unfixed flow's rate together until a link (or a
        // flow's own cap) is full, fix the flows it limits, repeat.
        let mut left: Vec<f64> = links.iter().map(|&l| self.net.cap[l as usize]).collect();
        let mut count: Vec<u32> = links
            .iter()
            .map(|&l| self.on[l as usize].len() as u32)
            .collect();
        let mut rate = vec![0.0f64; comp.len()];
        let mut unfixed: Vec<usize> = (0..comp.len()).collect();
        let mut full = vec![false; links.len()];
        while !unfixed.is_empty() {
            let mut share = f64::INFINITY;
            for (k, &c) in count.iter().enumerate() {
                if c > 0 {
                    share = share.min(left[k] / c as f64);
                }
            }
            for &u in &unfixed {
                share = share.min(self.flows[comp[u] as usize].cap);
            }
            let tight = share * (1.0 + 1e-9);
            for (k, &c) in count.iter().enumerate() {
                full[k] = c > 0 && left[k] / c as f64 <= tight;
            }
            let before = unfixed.len();
            let flows = &self.flows;
            let slot = &self.slot;
            unfixed.retain(|&u| {
                let f = &flows[comp[u] as usize];
                let limited = f.cap <= tight
                    || f.path
                        .links()
                        .iter()
                        .any(|&l| full[slot[l as usize] as usize]);
                if limited {
                    rate[u] = share;
                    for &l in f.path.links() {
                        let k = slot[l as usize] as usize;
                        left[k] = (left[k] - share).max(0.0);
                        count[k] -= 1;
                    }
                }
                !limited
            });
            if unfixed.len() == before {
                // Cannot happen with positive capacities; guard against a numerical corner.
                for &u in &unfixed {
                    rate[u] = share;
                }
                break;
            }
        }
        let now = self.now;
        for (u, &id) in comp.iter().enumerate() {
            self.seen[id as usize] = false;
            let f = &mut self.flows[id as usize];
            f.left = (f.left - f.rate * (now - f.since)).max(0.0);
            f.since = now;
            if f.rate == rate[u] {
                continue;
            }
            f.rate = rate[u];
            f.version = f.version.wrapping_add(1);
            let (v, done) = (f.version, now + f.left / f.rate);
            self.push(done, Ev::End(id, v));
        }
        for &l in &links {
            self.slot[l as usize] = NONE;
        }
    }

    /// Runs every rank to the end; the completion time of the slowest.
    fn run(&mut self) -> Result<(), String> {
        for r in 0..self.ranks.len() as u32 {
            self.push(0.0, Ev::Step(r));
        }
        while let Some(top) = self.heap.peek() {
            self.now = top.t;
            while let Some(e) = self.heap.peek().copied().filter(|e| e.t <= self.now) {
                self.heap.pop();
                match e.ev {
                    Ev::Step(r) => self.step(r),
                    Ev::Post(r) => self.post(r),
                    Ev::Start(id) => self.start(id),
                    Ev::End(id, v) => {
                        let f = &self.flows[id as usize];
                        if f.active && f.version == v {
                            self.end(id);
                        }
                    }
                }
            }
            self.solve();
        }
        let stuck: Vec<usize> = (0..self.ranks.len())
            .filter(|&r| !self.ranks[r].done)
            .take(8)
            .collect();
        if !stuck.is_empty() {
            return Err(format!("deadlock: ranks {stuck:?} never finish"));
        }
        self.out.finish = self.ranks.iter().map(|r| r.finish).collect();
        self.out.time = self.out.finish.iter().copied().fold(0.0, f64::max);
        Ok(())
    }
}

fn distinct(list: &[Entry]) -> Vec<u32> {
    let mut v: Vec<u32> = list.iter().map(|e| e.peer).collect();
    v.dedup();
    v
}

fn first_unmatched(list: &[Entry], peer: u32) -> Option<usize> {
    let mut i = list.partition_point(|e| e.peer < peer);
    while i < list.len() && list[i].peer == peer {
        if !list[i].matched {
            return Some(i);
        }
        i += 1;
    }
    None
}

/// Simulates `scheds` (one per rank, spans in bytes) on `topo` with the links of `fabric`,
/// priced by `model`.
pub fn simulate(
    scheds: &[Schedule],
    topo: &Topo,
    model: &CostModel,
    fabric: &Fabric,
) -> Result<Outcome, String> {
    let plans: Vec<Plan> = scheds.iter().map(compact).collect();
    run(&plans, topo, model, fabric)
}

fn run(plans: &[Plan], topo: &Topo, model: &CostModel, fabric: &Fabric) -> Result<Outcome, String> {
    if plans.len() != topo.n() as usize {
        return Err(format!("{} schedules for {} ranks", plans.len(), topo.n()));
    }
    let net = Net::new(topo, fabric, model);
    let links = net.cap.len();
    let mut sim = Sim {
        net,
        model,
        latency1: fabric.latency.unwrap_or(model.level1.alpha),
        plans,
        ranks: (0..plans.len()).map(|_| RankState::default()).collect(),
        flows: Vec::new(),
        free: Vec::new(),
        on: vec![Vec::new(); links],
        heap: BinaryHeap::new(),
        seq: 0,
        now: 0.0,
        new_flows: Vec::new(),
        dirty_links: Vec::new(),
        slot: vec![NONE; links],
        seen: Vec::new(),
        peers: Vec::new(),
        out: Outcome::default(),
    };
    sim.run()?;
    Ok(sim.out)
}

/// Builds every rank's schedule of `coll_of(rank)` with `algo` (elements of `elem` bytes,
/// network links, reductions in any order unless `deterministic`) and simulates it.
pub fn predict(
    topo: &Topo,
    coll_of: &(dyn Fn(u32) -> Coll + Sync),
    algo: Algo,
    elem: usize,
    deterministic: bool,
    model: &CostModel,
    fabric: &Fabric,
) -> Result<Outcome, String> {
    let plans = super::build_each(topo, coll_of, algo, elem, deterministic, |_, s| {
        Ok(compact(&s))
    })?;
    run(&plans, topo, model, fabric)
}

#[cfg(test)]
mod tests {
    use super::super::cost::{LinkCost, LinkKind};
    use super::super::schedule::{Buf, Span};
    use super::super::{chain, Ctx};
    use super::*;

    const B: f64 = 1e8;
    const A: f64 = 1e-4;
    const S: usize = 1 << 20;

    /// Network links of bandwidth [`B`] and latency [`A`], no per-peer cost; fast memory.
    fn model() -> CostModel {
        let net = LinkCost {
            alpha: A,
            beta: B,
            peer: 0.0,
            mesh_beta: B,
            staged_below: 0.0,
            staged_cost: 1.0,
            single_copy_alpha: 0.0,
        };
        CostModel {
            level0: LinkCost {
                alpha: 0.0,
                peer: 0.0,
                ..LinkKind::Memory.default_cost()
            },
            level1: net,
            gamma: 1e12,
            fabric: None,
        }
    }

    /// One step per rank: the listed (from, to) messages of `S` bytes.
    fn one_step(n: u32, msgs: &[(u32, u32)]) -> Vec<Schedule> {
        let mut v: Vec<Schedule> = (0..n).map(|_| Schedule::new("t")).collect();
        for s in v.iter_mut() {
            s.step();
        }
        for &(a, b) in msgs {
            v[a as usize].steps[0].actions.push(Action::Send {
                peer: b,
                src: Span::new(Buf::Send, 0, S),
            });
            v[b as usize].steps[0].actions.push(Action::Recv {
                peer: a,
                dst: Span::new(Buf::Recv, 0, S),
            });
        }
        v
    }

    fn close(got: f64, want: f64) -> bool {
        (got - want).abs() <= 1e-9 * want.abs().max(1e-12)
    }

    #[test]
    fn two_flows_share_a_nic() {
        // Hosts of two ranks: ranks 0 and 1 both send across; the host's one NIC halves.
        let topo = Topo::uniform(2, 2);
        let s = one_step(4, &[(0, 2), (1, 3)]);
        let o = simulate(&s, &topo, &model(), &Fabric::default()).unwrap();
        assert!(close(o.time, A + 2.0 * S as f64 / B), "{}", o.time);
        // With two NICs each rank has its own.
        let two = Fabric {
            nics: 2,
            ..Fabric::default()
        };
        let o = simulate(&s, &topo, &model(), &two).unwrap();
        assert!(close(o.time, A + S as f64 / B), "{}", o.time);
        // One flow alone runs at the NIC's speed.
        let o = simulate(&one_step(4, &[(0, 2)]), &topo, &model(), &Fabric::default()).unwrap();
        assert!(close(o.time, A + S as f64 / B), "{}", o.time);
    }

    #[test]
    fn an_oversubscribed_uplink_is_shared() {
        // Four hosts, two per leaf, 4:1 oversubscribed: a leaf's uplink carries half a NIC.
        let topo = Topo::uniform(4, 1);
        let f = Fabric {
            hosts_per_leaf: 2,
            oversub: 4.0,
            ..Fabric::default()
        };
        // Two flows leave leaf 0 and share its B/2 uplink; a third stays inside leaf 1.
        let s = one_step(4, &[(0, 2), (1, 3), (3, 2)]);
        let o = simulate(&s, &topo, &model(), &f).unwrap();
        // Host 2's NIC receives two flows; they are limited at the uplink (B/4 each), and the
        // leaf-local one takes the rest of host 2's NIC (3B/4), finishing first.
        assert!(close(o.finish[3], A + 4.0 * S as f64 / B), "{:?}", o.finish);
        assert!(close(o.time, A + 4.0 * S as f64 / B), "{}", o.time);
        let t32 = A + S as f64 / (0.75 * B);
        // Rank 2 receives from both; rank 3's send to 2 completes before its receive.
        assert!(o.finish.iter().all(|&t| t >= t32 - 1e-12));
        // Without oversubscription every flow gets half of host 2's NIC at worst.
        let flat = simulate(&s, &topo, &model(), &Fabric::default()).unwrap();
        assert!(close(flat.time, A + 2.0 * S as f64 / B), "{}", flat.time);
    }

    #[test]
    fn max_min_gives_spare_capacity_to_others() {
        // Host 0 sends to hosts 1 and 2; hosts 3 and 4 also send to host 2. Host 2's NIC
        // splits three ways (B/3), so host 0's flow to host 1 takes the other 2B/3.
        let topo = Topo::uniform(5, 1);
        let s = one_step(5, &[(0, 1), (0, 2), (3, 2), (4, 2)]);
        let o = simulate(&s, &topo, &model(), &Fabric::default()).unwrap();
        assert!(close(o.finish[1], A + 1.5 * S as f64 / B), "{:?}", o.finish);
        assert!(close(o.time, A + 3.0 * S as f64 / B), "{}", o.time);
    }

    #[test]
    fn a_pipelined_chain_overlaps_its_chunks() {
        // Broadcast of k chunks down a chain of n hosts: k + n − 2 steps of one chunk each.
        let (n, k) = (4u32, 3usize);
        let topo = Topo::uniform(n, 1);
        let bytes = k * chain::CHUNK_BYTES;
        let scheds: Vec<Schedule> = (0..n)
            .map(|me| {
                let ctx = Ctx {
                    me,
                    n,
                    elem: 1,
                    network: true,
                    topo: &topo,
                    deterministic: false,
                    processes: false,
                    crowded: false,
                };
                chain::broadcast(&ctx, bytes, 0).finish()
            })
            .collect();
        let o = simulate(&scheds, &topo, &model(), &Fabric::default()).unwrap();
        let step = A + chain::CHUNK_BYTES as f64 / B;
        let want = (k + n as usize - 2) as f64 * step;
        assert!(close(o.time, want), "{} vs {want}", o.time);
        // Unpipelined (one step per hop of the whole message) it would take (n−1)·k·step.
        assert!(o.time < (n as f64 - 1.0) * k as f64 * step * 0.7);
    }

    #[test]
    fn flows_inside_a_host_use_memory_not_the_nic() {
        let topo = Topo::uniform(2, 2);
        // Ranks 0 → 1 inside host 0 while 2 → 0 crosses: no sharing between them.
        let s = one_step(4, &[(0, 1), (2, 0)]);
        let m = model();
        let o = simulate(&s, &topo, &m, &Fabric::default()).unwrap();
        assert!(
            close(o.finish[1], S as f64 / m.level0.beta),
            "{:?}",
            o.finish
        );
        assert!(close(o.time, A + S as f64 / B), "{}", o.time);
    }

    /// The selector's closed form of this model picks, on each of several fabrics, layouts,
    /// operations and sizes, an algorithm whose simulated time is close to the best simulated.
    #[test]
    fn the_selectors_formulas_track_the_simulation() {
        use super::super::cost::{predict, Shape};
        let fabrics = [
            "nic_bandwidth 30MB\nlatency 100us",
            "nic_bandwidth 10Gbit\nlatency 20us",
            "nics 2\nnic_bandwidth 10Gbit\nlatency 20us",
            "nic_bandwidth 10Gbit\nlatency 20us\nhosts_per_leaf 2\noversubscription 4",
            "nics 4\nlayout rail\nnic_bandwidth 10Gbit\nlatency 20us\noversubscription 4",
        ];
        let mut worst = (1.0f64, String::new());
        for text in fabrics {
            let f = Fabric::parse(text).unwrap();
            let m = CostModel {
                level0: LinkKind::Memory.default_cost(),
                level1: LinkKind::Network.default_cost(),
                gamma: 3e9,
                fabric: Some(f),
            };
            for (h, per) in [(2, 2), (4, 4), (8, 4)] {
                let topo = Topo::uniform(h, per);
                let n = topo.n() as usize;
                for bytes in [1usize << 20, 64 << 20] {
                    let count = bytes / 4;
                    for coll in [
                        Coll::AllReduce { count },
                        Coll::AllGather { count: count / n },
                    ] {
                        let sim = |a: Algo| predict_with(&topo, &coll, a, 4, &m, &f).unwrap().time;
                        let cands: Vec<Algo> = Algo::ALL
                            .into_iter()
                            .filter(|a| a.supports(&coll))
                            .collect();
                        let best = cands.iter().map(|&a| sim(a)).fold(f64::MAX, f64::min);
                        let model_bytes = match coll {
                            Coll::AllReduce { .. } => bytes as f64,
                            _ => (count / n * n * 4) as f64,
                        };
                        let pick = cands
                            .iter()
                            .copied()
                            .min_by(|&a, &b| {
                                let t =
                                    |x| predict(x, &coll, model_bytes, Shape::of(&topo), &m, false);
                                t(a).unwrap().total_cmp(&t(b).unwrap())
                            })
                            .unwrap();
                        let r = sim(pick) / best;
                        if r > worst.0 {
                            worst = (r, format!("{text:?} {h}x{per} {coll:?} picks {pick:?}"));
                        }
                    }
                }
            }
        }
        assert!(
            worst.0 <= 1.6,
            "selector's pick {:.2}x the best: {}",
            worst.0,
            worst.1
        );
    }

    /// Simulates one collective without the threads of [`predict`].
    fn predict_with(
        topo: &Topo,
        coll: &Coll,
        algo: Algo,
        elem: usize,
        m: &CostModel,
        f: &Fabric,
    ) -> Result<Outcome, String> {
        let scheds: Vec<Schedule> = (0..topo.n())
            .map(|me| {
                let ctx = Ctx {
                    me,
                    n: topo.n(),
                    elem,
                    network: true,
                    topo,
                    deterministic: false,
                    processes: false,
                    crowded: false,
                };
                super::super::build(coll, &ctx, algo)
            })
            .collect();
        simulate(&scheds, topo, m, f)
    }

    #[test]
    fn a_deadlocked_schedule_is_an_error() {
        let topo = Topo::uniform(2, 1);
        let mut s = one_step(2, &[(0, 1)]);
        s[0].steps[0].actions.clear();
        assert!(simulate(&s, &topo, &model(), &Fabric::default())
            .unwrap_err()
            .contains("deadlock"));
    }
}
