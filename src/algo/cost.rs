//! The α-β cost model: a message of b bytes over a link costs α + b/β, a reduction of b bytes
//! costs b/γ. Each algorithm's time is predicted in closed form from the rank count, the host
//! layout and the message size, with level0 links (within a host) and level1 links (across
//! hosts) priced separately. The selector takes the cheapest; the simulator prints the table.

use super::fabric::Fabric;
use super::{Algo, Coll, Ctx, Topo};

/// Cost of one link level.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LinkCost {
    /// Per-message latency, seconds.
    pub alpha: f64,
    /// Bandwidth, bytes per second (per rank, per direction).
    pub beta: f64,
    /// Extra cost per additional peer in a one-step (mesh) exchange, seconds: a rank posting
    /// n−1 transfers at once pays for each, and on few cores the peers contend.
    pub peer: f64,
    /// Bandwidth of a mesh step (all peers at once), bytes per second.
    pub mesh_beta: f64,
    /// Messages shorter than this many bytes are staged: copied into a ring shared with the
    /// peer and out of it again, where longer ones are read once from the sender's buffer
    /// (processes of one host; see `transport::shm::SINGLE_COPY_MIN`). 0: none is staged.
    pub staged_below: f64,
    /// How much longer a staged message's bytes take than a single-copy message's (≥ 1).
    pub staged_cost: f64,
    /// Latency a single-copy message adds where messages may be staged (`staged_below` > 0),
    /// seconds: the receiver's system call, and the sender's wait until its buffer has been
    /// read, which a staged send (complete once its bytes are in the ring) does not make.
    pub single_copy_alpha: f64,
}

impl LinkCost {
    /// Time of one message of `bytes`.
    pub fn msg(&self, bytes: f64) -> f64 {
        self.alpha + bytes / self.beta + self.staged_extra(bytes, self.beta)
    }

    /// The time the way it moves adds to a message of `bytes` at bandwidth `beta`: staging's
    /// extra copy below `staged_below`, the single-copy handshake from there up (exactly 0
    /// where nothing is staged, so those prices stay as they were).
    pub fn staged_extra(&self, bytes: f64, beta: f64) -> f64 {
        if self.staged_below > 0.0 && bytes >= self.staged_below {
            return self.single_copy_alpha;
        }
        self.staged_share(bytes) * bytes / beta
    }

    /// The share of a single-copy message's byte time that staging adds to a message of
    /// `bytes`: `staged_cost − 1` below `staged_below`, else 0.
    pub fn staged_share(&self, bytes: f64) -> f64 {
        if bytes < self.staged_below {
            self.staged_cost - 1.0
        } else {
            0.0
        }
    }
}

/// Link kinds with default costs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LinkKind {
    /// Threads of one process, or processes of one host over shared memory.
    Memory,
    /// Processes of one host over loopback sockets.
    HostIpc,
    /// Hosts over the network.
    Network,
}

impl LinkKind {
    /// Default cost. `Memory` is fitted to forced-algorithm runs of the benchmark tools on
    /// this project's 2-core x86 VM (2, 4 and 8 processes over shared memory: a dependent step
    /// costs ~1.1 µs per rank sharing a core, ~4 µs with 8 ranks on 2 cores; each extra mesh
    /// peer ~1 µs; mesh steps move data ~1.4× faster than ring steps);
    /// `HostIpc` is loopback TCP on the same VM; `Network` a 10 GbE-class figure.
    pub fn default_cost(self) -> LinkCost {
        match self {
            LinkKind::Memory => LinkCost {
                alpha: 4e-6,
                beta: 1.5e9,
                peer: 1e-6,
                mesh_beta: 2.1e9,
                staged_below: 0.0,
                staged_cost: STAGED_COST,
                single_copy_alpha: SINGLE_COPY_ALPHA,
            },
            LinkKind::HostIpc => LinkCost {
                alpha: 25e-6,
                beta: 1.0e9,
                peer: 10e-6,
                mesh_beta: 1.0e9,
                staged_below: 0.0,
                staged_cost: 1.0,
                single_copy_alpha: 0.0,
            },
            LinkKind::Network => LinkCost {
                alpha: 50e-6,
                beta: 1.2e9,
                peer: 12e-6,
                mesh_beta: 1.2e9,
                staged_below: 0.0,
                staged_cost: 1.0,
                single_copy_alpha: 0.0,
            },
        }
    }
}

/// Copies the ranks of one host make at the same time when many of them read one buffer (a
/// one-step Broadcast over memory): its cores, fitted like the default link costs to this
/// project's 2-core VM. Measured there (4 and 8 processes, 32 KiB-4 MiB, forced algorithms):
/// the one-step Broadcast was as fast as the two-level and chain forms or faster at every
/// size from 32 KiB to 64 MiB, which the old price of (n − 1) serial copies from the root
/// had ruled out from 4 ranks and 2 MiB or 8 ranks and 32 KiB up.
pub const HOST_COPY_LANES: f64 = 2.0;

/// How much longer a staged byte takes than a single-copy one between processes of one host
/// (see [`LinkCost::staged_cost`]): the sender's copy into the ring and the receiver's copy
/// out of it both run on the host's cores, where a single-copy message is read once. With 8
/// processes on the 2-core VM this prices AllGather's 16 KiB blocks (128 KiB) above
/// halving-doubling's larger single-copy ones, where the one-step form measured 0.67x Open MPI.
pub const STAGED_COST: f64 = 2.0;

/// The single-copy handshake's latency between processes of one host (see
/// [`LinkCost::single_copy_alpha`]): a system call and a wait on the peer, half the VM's ~4 µs
/// dependent step with 8 ranks on 2 cores.
pub const SINGLE_COPY_ALPHA: f64 = 2e-6;

/// The model: one link cost per level plus the local reduction rate, and optionally the
/// network the hosts share.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CostModel {
    /// Within a host.
    pub level0: LinkCost,
    /// Across hosts.
    pub level1: LinkCost,
    /// Reduction throughput, bytes per second.
    pub gamma: f64,
    /// The shared-link view of the network: a host's ranks share its NICs (level1 β is then a
    /// NIC's bandwidth, not a rank's) and switch uplinks may be oversubscribed. `None`: every
    /// rank has level1 β to itself.
    pub fabric: Option<Fabric>,
}

impl CostModel {
    /// Defaults for a communicator; level1 is the network. Level0 is host IPC when the ranks
    /// of a single host talk over sockets (`HCCL_INTRA_ROCE_ENABLE`), memory otherwise: within
    /// a host ranks use process memory or shared memory, and when sockets appear among several
    /// hosts they carry only the traffic between hosts.
    pub fn for_ctx(ctx: &Ctx) -> CostModel {
        let l0 = if ctx.network && ctx.topo.hosts().len() <= 1 {
            LinkKind::HostIpc
        } else {
            LinkKind::Memory
        };
        CostModel {
            level0: l0.default_cost(),
            level1: LinkKind::Network.default_cost(),
            gamma: 3e9,
            fabric: Some(Fabric::default()),
        }
    }
}

impl CostModel {
    /// This model with the overrides of `text` applied (`HCCL_COST_MODEL` syntax):
    /// sections separated by `;`, each `level0:` or `level1:` followed by `key=value` pairs
    /// separated by `,` (keys `alpha` and `peer` in seconds, `beta` and `mesh_beta` in bytes
    /// per second, `staged_below` in bytes, `staged_cost` a factor), or `gamma=value`
    /// (reduction bytes per second). Setting `beta` alone scales `mesh_beta` by the same factor. Values are positive finite numbers (`3e-6`, `1.25e8`).
    pub fn with_overrides(mut self, text: &str) -> std::result::Result<CostModel, String> {
        const HELP: &str = "expected sections like \"level0:alpha=3e-6,beta=1.5e9\", \
                            \"level1:alpha=1e-3,beta=1.25e8,peer=1e-5,mesh_beta=1.2e8\" or \
                            \"gamma=3e9\", separated by ';' (seconds, bytes per second)";
        let num = |k: &str, v: &str| -> std::result::Result<f64, String> {
            match v.trim().parse::<f64>() {
                Ok(x) if x.is_finite() && x > 0.0 => Ok(x),
                _ => Err(format!("{k}={v:?} is not a positive number; {HELP}")),
            }
        };
        for sec in text.split(';').map(str::trim).filter(|s| !s.is_empty()) {
            let (level, body) = match sec.split_once(':') {
                Some((l, b)) => (Some(l.trim().to_ascii_lowercase()), b),
                None => (None, sec),
            };
            let link = match level.as_deref() {
                None => None,
                Some("level0") => Some(&mut self.level0),
                Some("level1") => Some(&mut self.level1),
                Some(l) => return Err(format!("unknown level {l:?}; {HELP}")),
            };
            match link {
                None => {
                    let (k, v) = body
                        .split_once('=')
                        .ok_or_else(|| format!("{sec:?} is not key=value; {HELP}"))?;
                    if k.trim() != "gamma" {
                        return Err(format!(
                            "unknown key {:?} outside a level; {HELP}",
                            k.trim()
                        ));
                    }
                    self.gamma = num("gamma", v)?;
                }
                Some(l) => {
                    let mut mesh_set = false;
                    for kv in body.split(',').map(str::trim).filter(|s| !s.is_empty()) {
                        let (k, v) = kv
                            .split_once('=')
                            .ok_or_else(|| format!("{kv:?} is not key=value; {HELP}"))?;
                        let k = k.trim();
                        let x = num(k, v)?;
                        match k {
                            "alpha" => l.alpha = x,
                            "peer" => l.peer = x,
                            "staged_below" => l.staged_below = x,
                            "staged_cost" => l.staged_cost = x,
                            "single_copy_alpha" => l.single_copy_alpha = x,
                            "mesh_beta" => {
                                l.mesh_beta = x;
                                mesh_set = true;
                            }
                            "beta" => {
                                if !mesh_set {
                                    l.mesh_beta *= x / l.beta;
                                }
                                l.beta = x;
                            }
                            _ => return Err(format!("unknown key {k:?}; {HELP}")),
                        }
                    }
                }
            }
        }
        Ok(self)
    }
}

/// The shape of a topology that the formulas need.
#[derive(Clone, Copy, Debug)]
pub struct Shape {
    /// Ranks.
    pub n: f64,
    /// Hosts.
    pub hosts: f64,
    /// Most ranks on one host.
    pub per_host: f64,
}

impl Shape {
    /// From a topology.
    pub fn of(t: &Topo) -> Shape {
        Shape {
            n: t.n() as f64,
            hosts: t.hosts().len() as f64,
            per_host: t.max_per_host() as f64,
        }
    }
}

/// One mesh step with `peers` peers moving `bytes` in total.
fn mesh_step(l: &LinkCost, peers: f64, bytes: f64) -> f64 {
    let each = if peers > 0.0 { bytes / peers } else { bytes };
    l.alpha + peers * l.peer + bytes / l.mesh_beta + peers * l.staged_extra(each, l.mesh_beta)
}

/// How the network prices a message when several ranks use it at once (the shared-link
/// model of [`Fabric`]); without a fabric every rank has level1 to itself, as before.
struct Net {
    /// Level1 costs, with the fabric's latency.
    l1: LinkCost,
    /// Whether links are shared (a fabric is given and ranks span hosts).
    shared: bool,
    /// Bandwidth of one NIC, NICs per host.
    nic: f64,
    nics: f64,
    /// Capacity of a leaf or rail uplink, and the hosts under one leaf (tree layout).
    uplink: Option<f64>,
    leaf: f64,
    rail: bool,
    /// Ranks per host, ranks, hosts.
    m: f64,
    n: f64,
    h: f64,
    level0: LinkCost,
}

impl Net {
    fn new(model: &CostModel, sh: Shape) -> Net {
        let f = model.fabric.unwrap_or_default();
        let nic = f.nic_bw.unwrap_or(model.level1.beta);
        let l1 = LinkCost {
            alpha: f.latency.unwrap_or(model.level1.alpha),
            ..model.level1
        };
        Net {
            l1: if model.fabric.is_some() {
                l1
            } else {
                model.level1
            },
            shared: model.fabric.is_some() && sh.hosts > 1.0,
            nic,
            nics: f.nics.max(1) as f64,
            uplink: f.uplink_bw(nic, sh.hosts as u32),
            leaf: if f.hosts_per_leaf == 0 {
                sh.hosts
            } else {
                f.hosts_per_leaf as f64
            },
            rail: f.layout == super::fabric::Layout::Rail,
            m: sh.per_host,
            n: sh.n,
            h: sh.hosts,
            level0: model.level0,
        }
    }

    /// The cost of one of `c` messages that each host's ranks send across hosts at once
    /// (ranks share their host's NICs), `u` of which cross each switch uplink.
    fn flow(&self, c: f64, u: f64) -> LinkCost {
        if !self.shared {
            return self.l1;
        }
        let mut beta = self.nic * (self.nics / c.max(1.0)).min(1.0);
        if let (Some(up), true) = (self.uplink, u > 0.0) {
            beta = beta.min(up / u);
        }
        LinkCost {
            beta,
            mesh_beta: beta,
            ..self.l1
        }
    }

    /// A ring or chain edge between hosts: one flow per host; in a rail layout it changes
    /// rails (and crosses the spine, with every host's edge) unless the last local rank and
    /// the first share a NIC index.
    fn edge(&self) -> LinkCost {
        let u = if self.rail {
            if !(self.m as u32)
                .saturating_sub(1)
                .is_multiple_of((self.nics as u32).max(1))
            {
                self.h
            } else {
                0.0
            }
        } else {
            1.0
        };
        self.flow(1.0, u)
    }

    /// All ranks of every host exchange with peers `d` ranks away (`d` ≥ ranks per host):
    /// in a tree layout the whole leaf crosses its uplink once `d` spans a leaf; in a rail
    /// layout partners share a local index, so a rail.
    fn all(&self, d: f64) -> LinkCost {
        let u = if !self.rail && d >= self.m * self.leaf {
            self.m * self.leaf
        } else {
            0.0
        };
        self.flow(self.m, u)
    }

    /// One ring per local rank across hosts (the two-level forms): each host's ranks all
    /// send across, each ring once over each leaf boundary; rings keep to their rail.
    fn rings(&self) -> LinkCost {
        let u = if self.rail { 0.0 } else { self.m };
        self.flow(self.m, u)
    }

    /// Time of a mesh step in which every rank sends `b` bytes to each of its `n − 1` peers
    /// (level `flat` without sharing).
    fn mesh(&self, flat: &LinkCost, b: f64) -> f64 {
        let n = self.n;
        if !self.shared {
            return mesh_step(flat, n - 1.0, (n - 1.0) * b);
        }
        let (m, l0) = (self.m, &self.level0);
        let inside = (m - 1.0) * b / l0.mesh_beta;
        let nic = m * (n - m) * b / (self.nics * self.nic);
        let leaf = m * self.leaf;
        let up = match self.uplink {
            Some(cap) if !self.rail && leaf < n => leaf * (n - leaf) * b / cap,
            Some(cap) if self.rail => {
                // Flows to another local index mod nics change rails.
                let per_rail = self.h * m / self.nics;
                per_rail * (n - n / self.nics) * b / cap
            }
            _ => 0.0,
        };
        self.l1.alpha + (m - 1.0) * l0.peer + (n - m) * self.l1.peer + inside.max(nic).max(up)
    }

    /// Time of every rank sending `b` bytes to one rank (or one rank to every rank): that
    /// rank's own link carries them all.
    fn fan(&self, flat: &LinkCost, b: f64) -> f64 {
        let n = self.n;
        if !self.shared {
            return mesh_step(flat, n - 1.0, (n - 1.0) * b);
        }
        let (m, l0) = (self.m, &self.level0);
        let inside = (m - 1.0) * b / l0.mesh_beta;
        let far = (n - m) * b / self.nic;
        self.l1.alpha + (m - 1.0) * l0.peer + (n - m) * self.l1.peer + inside.max(far)
    }
}

/// Time of `np` pipeline pieces of a two-level schedule whose level0 part costs `l0` a piece
/// and whose level1 part costs `l1` a piece over `k` steps of latency `a1`: pieces in level1
/// share steps, so that latency is paid once a step; the busier level sets the pace and the
/// other adds one piece's worth (pipeline fill and drain).
fn hier_pipeline(np: f64, l0: f64, l1: f64, k: f64, a1: f64) -> f64 {
    let t0 = np * l0;
    let t1 = if k > 0.0 {
        np * (l1 - k * a1) + (np + k - 1.0) * a1
    } else {
        0.0
    };
    if t1 >= t0 {
        t1 + l0
    } else {
        t0 + l1
    }
}

fn log2c(x: f64) -> f64 {
    if x <= 1.0 {
        0.0
    } else {
        x.log2().ceil()
    }
}

/// Predicted seconds for `algo` on `coll` (`bytes`: AllReduce/Reduce/Broadcast message;
/// AllGather/ReduceScatter total output/input of all ranks; AlltoAll bytes sent per rank).
/// `None` when the algorithm has no schedule of its own for the operation. With a fabric in
/// the model, messages that several of a host's ranks send across hosts at once share its
/// NICs (and leaf or rail uplinks), step by step.
pub fn predict(
    algo: Algo,
    coll: &Coll,
    bytes: f64,
    sh: Shape,
    m: &CostModel,
    memory: bool,
) -> Option<f64> {
    if !algo.supports(coll) {
        return None;
    }
    let n = sh.n;
    if n <= 1.0 {
        return Some(0.0);
    }
    // Reductions are priced without staging: a reduced message costs the same either way, its
    // bytes reduced out of the ring slot they were staged in or out of the cache-resident
    // chunk a single-copy receive fetches them into (`transport::shm`). Priced with staging,
    // 8 processes chose halving-doubling at 128 KiB, where the one-step AllReduce and
    // ReduceScatter measured 1.9-2.2x faster.
    // Ranks of one host are processes when the model stages messages between them.
    let processes = m.level0.staged_below > 0.0;
    let unstaged;
    let m = if matches!(
        coll,
        Coll::AllReduce { .. }
            | Coll::ReduceScatter { .. }
            | Coll::ReduceScatterV { .. }
            | Coll::Reduce { .. }
    ) {
        unstaged = CostModel {
            level0: LinkCost {
                staged_below: 0.0,
                ..m.level0
            },
            ..*m
        };
        &unstaged
    } else {
        m
    };
    let net = Net::new(m, sh);
    let level1 = net.l1;
    // Flat algorithms run at the pace of their slowest link.
    let flat = if sh.hosts > 1.0 { level1 } else { m.level0 };
    let g = |b: f64| b / m.gamma;
    let mesh = |l: &LinkCost, b: f64| net.mesh(l, b);
    // Log-step algorithms change partner every step; on this VM such a step costs half a
    // mesh peer more than a ring step, whose fixed neighbours keep their channels warm.
    let hop = |l: &LinkCost| LinkCost {
        alpha: l.alpha + 0.5 * l.peer,
        ..*l
    };
    let (flat_hop, l0_hop) = (hop(&flat), hop(&m.level0));
    // A ring edge between hosts, and a log step at distance d: on level0 below the ranks per
    // host (hosts hold consecutive ranks), else across hosts with every rank of each host.
    let edge = if sh.hosts > 1.0 { net.edge() } else { flat };
    let step_at = |d: f64| {
        if d < sh.per_host {
            l0_hop
        } else if net.shared {
            hop(&net.all(d))
        } else {
            flat_hop
        }
    };
    // Bytes a log-step phase moves per rank at distances 1, 2, 4, … below `p` (each step
    // moves d/p of `bytes`), priced step by step when links are shared.
    let doubling = |p: f64, bytes: f64| -> f64 {
        if !net.shared {
            let mut staged = 0.0;
            let mut d = 1.0;
            while d < p {
                staged += flat.staged_extra(d / p * bytes, flat.beta);
                d *= 2.0;
            }
            return log2c(p) * flat_hop.alpha + (p - 1.0) / p * bytes / flat.beta + staged;
        }
        let mut t = 0.0;
        let mut d = 1.0;
        while d < p {
            let l = step_at(d);
            t += l.alpha + d / p * bytes / l.beta;
            d *= 2.0;
        }
        t
    };
    let p = 2f64.powf(n.log2().floor());
    let folded = p < n;
    // Folding pairs neighbouring ranks, which share a host when hosts hold two or more.
    let fold = if net.shared && sh.per_host >= 2.0 {
        m.level0
    } else {
        flat
    };
    // Two-level forms work in pipeline pieces: (hosts, pieces, shard bytes), and their level1
    // rings (one per local rank) share each host's NICs.
    let hier_piece = {
        let np = super::hier::pieces(bytes as usize, super::hier::PIECE_BYTES) as f64;
        (sh.hosts, np, bytes / np / sh.per_host)
    };
    let rings = net.rings();
    // Level0 of a two-level piece: a mesh reduce-scatter into shards, copies folded in order
    // (one more pass than direct), and the matching allgather or gather.
    let hier_fold = |shard: f64| {
        let mm = sh.per_host;
        if mm > 1.0 {
            2.0 * mesh_step(&m.level0, mm - 1.0, (mm - 1.0) * shard) + 2.0 * g((mm - 1.0) * shard)
        } else {
            0.0
        }
    };
    let t = match (algo, coll) {
        (Algo::Direct, Coll::AllReduce { .. }) => {
            if memory && bytes > 4096.0 {
                2.0 * mesh_step(&flat, n - 1.0, (n - 1.0) * bytes / n) + g((n - 1.0) * bytes / n)
            } else {
                mesh(&flat, bytes) + g((n - 1.0) * bytes)
            }
        }
        (Algo::Ring, Coll::AllReduce { .. }) => {
            // Pipelined: C chunks per block add C−1 steps of latency; over the network the
            // reductions of one chunk overlap the transfers of others.
            let c = super::ring::chunks_for((bytes / n) as usize) as f64;
            let red = g((n - 1.0) * bytes / n);
            (2.0 * (n - 1.0) + c - 1.0) * edge.alpha
                + 2.0 * (n - 1.0) * bytes / n / edge.beta
                + 2.0 * (n - 1.0) * c * edge.staged_extra(bytes / n / c, edge.beta)
                + if memory { red } else { red / c }
        }
        (Algo::Rhd, Coll::AllReduce { .. }) => {
            let mut t = 0.0;
            let mut d = p / 2.0;
            let mut part = bytes / 2.0;
            while d >= 1.0 {
                t += 2.0 * step_at(d).msg(part) + g(part);
                part /= 2.0;
                d /= 2.0;
            }
            if folded {
                t += 2.0 * fold.msg(bytes) + g(bytes);
            }
            t
        }
        (Algo::Tree, Coll::AllReduce { .. }) => {
            let k = (bytes / 2.0 / super::tree::CHUNK_BYTES as f64)
                .ceil()
                .clamp(1.0, super::tree::MAX_CHUNKS as f64);
            let c = bytes / 2.0 / k;
            let rounds = k + 2.0 * log2c(n + 1.0);
            if net.shared {
                // Latency every round; bandwidth where the pipeline is full: an inner node
                // moves three chunks a round, and a host's NICs carry one per tree edge leaving
                // it. Filling and draining the pipeline moves a chunk across each tree level
                // above the hosts (the levels within a host run at memory speed).
                let cross = super::tree::crossing_edges(n as u32, sh.per_host as u32) as f64;
                let mut full = k * c * 3f64.max(cross / net.nics) / net.nic;
                if let (Some(up), false) = (net.uplink, net.rail) {
                    let leaf = (sh.per_host * net.leaf) as u32;
                    let out = super::tree::crossing_edges(n as u32, leaf) as f64;
                    full = full.max(k * c * out / up);
                }
                let fill = 2.0 * log2c(sh.hosts) * c / net.nic;
                rounds * flat_hop.alpha + full + fill + g(bytes)
            } else {
                // Three messages of a chunk a round (each staged or not).
                let (l, three) = (&flat_hop, 3.0 * c);
                rounds * (l.alpha + three / l.beta + 3.0 * l.staged_extra(c, l.beta)) + g(bytes)
            }
        }
        (Algo::Hier, Coll::AllReduce { .. }) => {
            let (h, np, shard) = hier_piece;
            // Per piece: level0 reduce-scatter (copies folded in order: one more pass than
            // direct) and allgather; level1 a ring allreduce of each shard across hosts.
            let l0 = hier_fold(shard);
            let l1 = if h > 1.0 {
                2.0 * (h - 1.0) * rings.msg(shard / h) + g((h - 1.0) * shard / h)
            } else {
                0.0
            };
            hier_pipeline(np, l0, l1, 2.0 * (h - 1.0), level1.alpha)
        }
        (Algo::Hier, Coll::Reduce { .. }) => {
            let (h, np, shard) = hier_piece;
            // Per piece: level0 reduce-scatter and gather to the root; level1 a ring
            // reduce-scatter of each shard and a gather to the root's host.
            let l0 = hier_fold(shard);
            let (l1, k) = if h > 1.0 {
                let part = (h - 1.0) * shard / h;
                let t =
                    (h - 1.0) * rings.msg(shard / h) + g(part) + mesh_step(&rings, h - 1.0, part);
                (t, h)
            } else {
                (0.0, 0.0)
            };
            hier_pipeline(np, l0, l1, k, level1.alpha)
        }
        (Algo::Hier, Coll::Broadcast { .. }) => {
            let ((h, np, shard), mm) = (hier_piece, sh.per_host);
            // Every step the root's host scatters a piece, hosts spread pieces they received
            // and each chain moves a shard one host on: np + h − 2 steps carry both levels.
            // On a single host no chain overlaps the host's allgather: the ranks' cores copy
            // each piece's shards in the scatter and again in the allgather, so a step costs
            // both (with two ranks that is the whole piece: direct with more steps).
            if memory && h <= 1.0 && mm > 1.0 {
                // One host: every byte one rank receives is a copy made on the host's cores,
                // (mm − 1) shards from the root and mm (mm − 1) in the allgather per piece,
                // more than the one-step form's (n − 1) messages (see HOST_COPY_LANES).
                let lanes = (mm - 1.0).min(HOST_COPY_LANES);
                let copies = (mm + 1.0) * (mm - 1.0) / mm * bytes;
                let l = &m.level0;
                return Some(
                    (np + 1.0) * (l.alpha + (mm - 1.0) * l.peer)
                        + copies / lanes / l.mesh_beta
                        + l.staged_share(shard) * copies / lanes / l.mesh_beta,
                );
            }
            let per_step = if h > 1.0 { 1.0 } else { 2.0 };
            let l0 = if mm > 1.0 {
                mesh_step(&m.level0, mm - 1.0, per_step * (mm - 1.0) * shard)
            } else {
                0.0
            };
            let l1 = if h > 1.0 { rings.msg(shard) } else { 0.0 };
            2.0 * l0 + (np + h - 2.0) * l0.max(l1)
        }
        (Algo::Hier, Coll::ReduceScatter { .. } | Coll::ReduceScatterV { .. }) => {
            let (mm, h) = (sh.per_host, sh.hosts);
            // Level0: each rank hands its blocks of the other columns to their owners on its
            // host (folded in order); level1: a ring reduce-scatter per column, a block a step.
            let moved = (mm - 1.0) / mm * bytes;
            let l0 = if mm <= 1.0 {
                0.0
            } else if net.shared {
                // Receives fold the blocks in as they arrive.
                mesh_step(&m.level0, mm - 1.0, moved)
            } else {
                mesh_step(&m.level0, mm - 1.0, moved) + 2.0 * g(moved)
            };
            let l1 = if h > 1.0 {
                (h - 1.0) * rings.msg(bytes / n) + g((h - 1.0) * bytes / n)
            } else {
                0.0
            };
            l0 + l1
        }
        (Algo::Direct, Coll::AllGather { .. } | Coll::AllGatherV { .. }) => mesh(&flat, bytes / n),
        (Algo::Ring, Coll::AllGather { .. } | Coll::AllGatherV { .. }) => {
            (n - 1.0) * edge.msg(bytes / n)
        }
        (Algo::Rhd, Coll::AllGather { .. } | Coll::AllGatherV { .. }) => {
            let mut t = doubling(p, bytes);
            if folded {
                t += fold.msg(bytes / n) + fold.msg(bytes);
            }
            t
        }
        (Algo::Bruck, Coll::AllGather { .. } | Coll::AllGatherV { .. }) => {
            if !net.shared {
                let mut staged = 0.0;
                let mut d = 1.0;
                while d < n {
                    staged += flat.staged_extra(d.min(n - d) * bytes / n, flat.beta);
                    d *= 2.0;
                }
                log2c(n) * flat_hop.alpha + (n - 1.0) / n * bytes / flat.beta + staged
            } else {
                // Round d: every rank sends min(d, n − d) blocks to the rank d below; the
                // ranks of a host below local index d reach the previous host.
                let mut t = 0.0;
                let mut d = 1.0;
                while d < n {
                    let c = d.min(sh.per_host);
                    let l = hop(&net.flow(c, if d >= sh.per_host { c } else { 1.0 }));
                    t += l.alpha + d.min(n - d) * bytes / n / l.beta;
                    d *= 2.0;
                }
                t
            }
        }
        (Algo::Hier, Coll::AllGather { .. }) => {
            let h = sh.hosts;
            let mm = sh.per_host;
            let l1 = if h > 1.0 {
                (h - 1.0) * rings.msg(bytes / n)
            } else {
                0.0
            };
            let l0 = if mm > 1.0 {
                mesh_step(&m.level0, mm - 1.0, (mm - 1.0) * h * bytes / n)
            } else {
                0.0
            };
            l1 + l0
        }
        (Algo::Direct, Coll::ReduceScatter { .. } | Coll::ReduceScatterV { .. }) => {
            mesh(&flat, bytes / n) + g((n - 1.0) * bytes / n)
        }
        (Algo::Ring, Coll::ReduceScatter { .. } | Coll::ReduceScatterV { .. }) => {
            if net.shared {
                // The input is first copied to scratch; receives then fold in as they arrive.
                g(bytes) + (n - 1.0) * edge.msg(bytes / n)
            } else {
                (n - 1.0) * edge.msg(bytes / n) + g((n - 1.0) * bytes / n)
            }
        }
        (Algo::Rhd, Coll::ReduceScatter { .. } | Coll::ReduceScatterV { .. }) => {
            let mut t = doubling(p, bytes) + g(bytes);
            if folded {
                t += fold.msg(bytes) + fold.msg(bytes / n) + g(bytes);
            }
            t
        }
        (Algo::Direct, Coll::Broadcast { .. }) => {
            if memory && sh.hosts <= 1.0 {
                // Every receiver copies the whole message out of the root's buffer (single
                // copy) at the same time, so the host's cores, not the root, set the pace.
                // A staged message is also copied into each receiver's ring by the root.
                let lanes = (n - 1.0).min(HOST_COPY_LANES);
                let whole = LinkCost {
                    staged_below: 0.0,
                    ..flat
                };
                mesh_step(&whole, n - 1.0, (n - 1.0) * bytes / lanes)
                    + (n - 1.0) / lanes * flat.staged_extra(bytes, flat.mesh_beta)
            } else {
                net.fan(&flat, bytes)
            }
        }
        (Algo::Ring | Algo::Chain, Coll::Broadcast { .. }) => {
            let k = (bytes / super::chain::CHUNK_BYTES as f64).ceil().max(1.0);
            if net.shared {
                // The pipeline's pace is the slowest hop (between hosts); filling it takes a
                // step per hop, most of them inside hosts.
                let h = sh.hosts;
                (k + h - 2.0) * edge.msg(bytes / k) + (n - h) * m.level0.msg(bytes / k)
            } else if memory && sh.hosts <= 1.0 {
                // One host: the n − 1 copies of the message share its cores (HOST_COPY_LANES).
                let lanes = (n - 1.0).min(HOST_COPY_LANES);
                (k + n - 2.0) * edge.alpha
                    + (n - 1.0) * bytes / lanes / edge.beta
                    + (n - 1.0) * k / lanes * edge.staged_extra(bytes / k, edge.beta)
            } else {
                (k + n - 2.0) * edge.msg(bytes / k)
            }
        }
        (Algo::Direct, Coll::Reduce { .. }) if n == 2.0 && memory && processes => {
            // `direct::one_message_reduce`: the leaf's staged copy into the ring overlaps the
            // root's reduction out of it, both cores at once as in a mesh step, so the message
            // costs the slower of the two. Measured 2-3x the reduce-scatter and gather form
            // (2-64 MiB) and reading the leaf's buffer single-copy (128 KiB-1 MiB), where the
            // root copies and reduces alone.
            flat.alpha + (bytes / flat.mesh_beta).max(g(bytes))
        }
        (Algo::Direct, Coll::Reduce { .. }) => {
            // Also the price of the one-message form two ranks of one host run up to
            // `direct::ONE_STEP_REDUCE_MAX`: priced as one message and a whole reduction, the
            // model (whose α undercounts a step's wait) preferred hier there, which ran
            // slower in a spot check (209 against 20 µs at 256 KiB, loaded machine).
            mesh(&flat, bytes / n) + net.fan(&flat, bytes / n) + g((n - 1.0) * bytes / n)
        }
        (Algo::Ring, Coll::Reduce { .. }) => {
            let gather = if net.shared {
                net.fan(&flat, bytes / n)
            } else {
                flat.msg((n - 1.0) * bytes / n)
            };
            (n - 1.0) * edge.msg(bytes / n) + gather + g((n - 1.0) * bytes / n)
        }
        (Algo::Direct, Coll::Scatter { .. }) => {
            if net.shared {
                net.fan(&flat, bytes / n)
            } else {
                mesh_step(&flat, n - 1.0, bytes)
            }
        }
        (Algo::Direct, Coll::AlltoAllV { .. }) => {
            if net.shared {
                mesh(&flat, bytes / n)
            } else {
                mesh_step(&flat, n - 1.0, bytes)
            }
        }
        (Algo::Pairwise, Coll::AlltoAllV { .. }) => {
            if net.shared {
                // n − 1 rounds; in those that cross hosts every rank of a host does.
                let mm = sh.per_host;
                let across = net.all(mm);
                (n - 1.0) * flat.alpha
                    + (mm - 1.0) * bytes / n / m.level0.beta
                    + (n - mm) * bytes / n / across.beta
            } else {
                (n - 1.0) * flat.alpha
                    + bytes / flat.beta
                    + (n - 1.0) * flat.staged_extra(bytes / n, flat.beta)
            }
        }
        (Algo::Direct, Coll::P2p { .. } | Coll::Barrier) => log2c(n) * flat.alpha,
        _ => return None,
    };
    Some(t)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overrides_parse_and_reject() {
        let base = CostModel {
            level0: LinkKind::Memory.default_cost(),
            level1: LinkKind::Network.default_cost(),
            gamma: 3e9,
            fabric: None,
        };
        let m = base
            .with_overrides(" level1: alpha=1e-3, beta=6.25e7 ; gamma=5e9;level0:peer=2e-6")
            .unwrap();
        assert_eq!(m.level1.alpha, 1e-3);
        assert_eq!(m.level1.beta, 6.25e7);
        // mesh_beta follows beta when not given.
        let want = base.level1.mesh_beta * 6.25e7 / base.level1.beta;
        assert!((m.level1.mesh_beta - want).abs() < 1.0);
        assert_eq!(m.gamma, 5e9);
        assert_eq!(m.level0.peer, 2e-6);
        assert_eq!(m.level0.alpha, base.level0.alpha);
        assert_eq!(base.with_overrides("").unwrap(), base);
        for bad in [
            "level2:alpha=1",
            "level1:alpha=-1",
            "level1:alpha=0",
            "level1:speed=1",
            "level1:alpha",
            "gamma=x",
            "delta=1",
            "level0:beta=inf",
        ] {
            assert!(base.with_overrides(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn ring_beats_folded_rhd_only_when_bandwidth_bound() {
        let m = CostModel {
            level0: LinkKind::Network.default_cost(),
            level1: LinkKind::Network.default_cost(),
            gamma: 3e9,
            fabric: None,
        };
        // 48 ranks: RHD folds 16 of them, paying two extra full-size transfers.
        let sh = Shape::of(&Topo::flat(48));
        let c = Coll::AllReduce { count: 1 };
        let at = |a, b| predict(a, &c, b, sh, &m, false).unwrap();
        assert!(at(Algo::Rhd, 1024.0) < at(Algo::Ring, 1024.0));
        assert!(at(Algo::Ring, 256e6) < at(Algo::Rhd, 256e6));
        assert!(predict(Algo::Bruck, &c, 1.0, sh, &m, false).is_none());
    }

    #[test]
    fn two_ranks_of_one_host_broadcast_directly() {
        // The two-level form splits each piece between the two ranks and sends both halves
        // from the root anyway: direct with more steps (it measured 35-40% slower at 4-8 MiB).
        let m = CostModel {
            level0: LinkKind::Memory.default_cost(),
            level1: LinkKind::Network.default_cost(),
            gamma: 3e9,
            fabric: None,
        };
        let sh = Shape::of(&Topo::flat(2));
        let c = Coll::Broadcast { count: 1, root: 0 };
        let at = |a, b| predict(a, &c, b, sh, &m, true).unwrap();
        let mut b = 64.0 * 1024.0;
        while b <= 256e6 {
            assert!(at(Algo::Direct, b) < at(Algo::Hier, b), "{b} bytes");
            b *= 2.0;
        }
        // With more ranks the host's cores copy more in the two-level form than in direct.
        let sh = Shape::of(&Topo::flat(8));
        let at = |a, b| predict(a, &c, b, sh, &m, true).unwrap();
        assert!(at(Algo::Direct, 64e6) < at(Algo::Hier, 64e6));
    }

    /// The level0 of processes of one host: messages below the shared-memory link's
    /// single-copy threshold are staged.
    fn processes() -> CostModel {
        let mut m = CostModel {
            level0: LinkKind::Memory.default_cost(),
            level1: LinkKind::Network.default_cost(),
            gamma: 3e9,
            fabric: None,
        };
        m.level0.staged_below = crate::transport::shm::SINGLE_COPY_MIN as f64;
        m
    }

    #[test]
    fn two_process_reduce_is_one_message_at_every_size() {
        // 2 processes, 32 KiB-64 MiB: the one-message form measured 1.2-3.5x Open MPI and up to
        // 3x the reduce-scatter and gather form; its price is one staged message overlapped
        // with the reduction, below the two-step price it had.
        let topo = Topo::flat(2);
        let ctx = Ctx {
            me: 0,
            n: 2,
            elem: 4,
            network: false,
            topo: &topo,
            deterministic: false,
            processes: true,
            crowded: false,
        };
        let sh = Shape::of(&topo);
        let mut b = 32usize << 10;
        while b <= 64 << 20 {
            let coll = Coll::Reduce {
                count: b / 4,
                root: 0,
            };
            assert!(crate::algo::direct::one_message_reduce(&coll, &ctx));
            assert_eq!(
                crate::algo::select::choose_with(&coll, &ctx, &processes()),
                Algo::Direct,
                "{b} bytes"
            );
            let one = predict(Algo::Direct, &coll, b as f64, sh, &processes(), true).unwrap();
            let mut threads = processes();
            threads.level0.staged_below = 0.0;
            let two = predict(Algo::Direct, &coll, b as f64, sh, &threads, true).unwrap();
            assert!(one < two, "{b} bytes: {one} vs {two}");
            b *= 2;
        }
    }

    #[test]
    fn free_staging_changes_no_price() {
        // Staging and single copy that cost nothing extra price every algorithm exactly as no
        // staging does (threads, sockets), so only processes of one host see the new terms.
        // The two-process Reduce is another schedule there (one staged message), priced apart.
        let staged = processes();
        let mut free = staged;
        free.level0.staged_cost = 1.0;
        free.level0.single_copy_alpha = 0.0;
        let mut none = staged;
        none.level0.staged_below = 0.0;
        for n in [2u32, 3, 4, 8] {
            let sh = Shape::of(&Topo::flat(n));
            for coll in [
                Coll::AllReduce { count: 1 },
                Coll::AllGather { count: 1 },
                Coll::ReduceScatter { count: 1 },
                Coll::Broadcast { count: 1, root: 0 },
                Coll::Reduce { count: 1, root: 0 },
            ] {
                let mut b = 8.0;
                while b <= 64e6 {
                    for a in Algo::ALL {
                        if n == 2 && a == Algo::Direct && matches!(coll, Coll::Reduce { .. }) {
                            continue;
                        }
                        let t = |m: &CostModel| predict(a, &coll, b, sh, m, true);
                        assert_eq!(t(&free), t(&none), "{a:?} {coll:?} {n} ranks {b} B");
                        if let (Some(x), Some(y)) = (t(&staged), t(&none)) {
                            assert!(x >= y, "{a:?} {coll:?} {n} ranks {b} B");
                        }
                    }
                    b *= 2.0;
                }
            }
        }
    }

    #[test]
    fn staged_blocks_steer_eight_process_allgather_off_the_mesh() {
        // 8 processes on the 2-core VM: at 128 KiB each rank's 16 KiB block is copied twice
        // through the rings to each of 7 peers in the one-step form; halving-doubling sends
        // blocks of 2 and 4 ranks single-copy. Between threads (nothing staged) the one-step
        // form stays.
        let topo = Topo::flat(8);
        let ctx = Ctx {
            me: 0,
            n: 8,
            elem: 4,
            network: false,
            topo: &topo,
            deterministic: false,
            processes: false,
            crowded: false,
        };
        let coll = Coll::AllGather { count: 4096 };
        let procs = crate::algo::select::choose_with(&coll, &ctx, &processes());
        assert!(matches!(procs, Algo::Rhd | Algo::Bruck), "{procs:?}");
        let mut threads = processes();
        threads.level0.staged_below = 0.0;
        assert_eq!(
            crate::algo::select::choose_with(&coll, &ctx, &threads),
            Algo::Direct
        );
        // 4 processes at 64 KiB: halving-doubling would copy less (16 KiB staged, 32 KiB
        // single-copy) but waits on one handshake and one more step; the one-step form
        // measured about 2x faster there (loaded machine, forced algorithms).
        let topo = Topo::flat(4);
        let ctx = Ctx {
            n: 4,
            topo: &topo,
            ..ctx
        };
        let coll = Coll::AllGather { count: 4096 };
        assert_eq!(
            crate::algo::select::choose_with(&coll, &ctx, &processes()),
            Algo::Direct
        );
    }

    #[test]
    fn one_host_broadcast_is_one_step_at_cache_sizes() {
        // 4 and 8 processes on the 2-core VM, 32 KiB-4 MiB: direct measured fastest at every
        // size; the old price (the root's n − 1 copies in series) chose the two-level form
        // (8 ranks) or the chain (4 ranks, 2-4 MiB), 1.2-5x slower there.
        for n in [3u32, 4, 8] {
            let topo = Topo::flat(n);
            let ctx = Ctx {
                me: 0,
                n,
                elem: 4,
                network: false,
                topo: &topo,
                deterministic: false,
                processes: false,
                crowded: false,
            };
            let mut b = 32usize << 10;
            while b <= 4 << 20 {
                let coll = Coll::Broadcast {
                    count: b / 4,
                    root: 0,
                };
                assert_eq!(
                    crate::algo::select::choose(&coll, &ctx),
                    Algo::Direct,
                    "{n} ranks, {b} B"
                );
                b *= 2;
            }
        }
    }
}
