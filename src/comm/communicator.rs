//! The communicator: one rank's membership in a group of ranks, its links to the others, and
//! the entry point that runs collectives on them.

use std::collections::HashMap;
use std::net::TcpStream;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::ThreadId;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use super::bootstrap::{self, RankRecord, RootAddr, RootListener};
use super::calibrate;
use super::compressed::{self, Compressed};
use super::config::CommConfig;
use super::order::Order;
use super::rank_table::RankTable;
use super::registry::Pinned;
use super::root_info::RootInfo;
use super::segment;
use super::stats::{CommStats, StatCells, Traffic};
use crate::algo::cost::CostModel;
use crate::algo::{self, Algo, Coll, Ctx};
use crate::base::biased_mutex::BiasedMutex;
use crate::base::dtype::{DataType, ReduceOp};
use crate::base::env::{Deterministic, EnvConfig};
use crate::base::error::{Error, ErrorKind, Result};
use crate::base::limits::MAX_RANKS;
use crate::base::topology::{self, fnv64, Location};
use crate::exec::executor::{self, Buffers};
use crate::exec::identity::{self, Inbound, Notice, OpTags, P2pCounters};
use crate::exec::push;
use crate::exec::small::{self, Small};
use crate::exec::trace::{OpTrace, PeerTraffic, StepTrace, Tracer};
use crate::transport::acceptor::{self, Acceptor, Whitelist};
use crate::transport::doorbell::Doorbell;
use crate::transport::inproc::InprocFabric;
use crate::transport::inproc::MemoryLink;
use crate::transport::local::LocalLink;
use crate::transport::tag::{OpTag, Tag};
use crate::transport::tcp::TcpLink;
use crate::transport::{plugin, plugin_link};
use crate::transport::{Endpoint, Link, Reach, SendHint};

/// One collective call with its buffers, after argument validation.
#[derive(Clone, Debug)]
pub struct OpArgs {
    /// Operation name for logs (`AllReduce`, ...).
    pub name: &'static str,
    /// The collective and its counts.
    pub coll: Coll,
    /// Element type.
    pub dtype: DataType,
    /// Reduction operator, for reducing collectives.
    pub op: Option<ReduceOp>,
    /// Input buffer address.
    pub send: usize,
    /// Output buffer address.
    pub recv: usize,
    /// Extra buffers (point-to-point items).
    pub ext: Vec<usize>,
    /// Compression of an AllReduce (`HcclExtAllReduceCompressed`); `None` runs it exact,
    /// unless `HCCL_COMPRESSION` applies.
    pub compress: Option<Box<Compressed>>,
}

/// One schedule of a plan, where its buffers start (in bytes from the operation's buffers),
/// and the notices it posts (see [`identity`]).
#[derive(Clone)]
struct Part {
    sched: Arc<algo::Schedule>,
    send_off: usize,
    recv_off: usize,
    notices: Arc<[Notice]>,
}

/// The schedules chosen for one (operation, element size), reused by later calls of the same
/// shape so the hot path neither selects nor builds: one schedule, or several run in turn over
/// segments of the data when one would need more scratch than the staging budget; and what the
/// operation receives from each peer.
struct PlanData {
    parts: Vec<Part>,
    inbound: Vec<Inbound>,
    /// What the tags of every call of this shape share (see [`identity::template`]).
    template: OpTag,
    /// What the parts move, for the counters.
    traffic: Traffic,
    /// The small-message path that runs instead of the parts (which are then empty).
    small: Option<Small>,
    /// Whether the write path between threads ([`push`]) runs instead of the parts (empty).
    push: bool,
    /// What the parts' sends tell their links: the whole operation's size, which segments and
    /// pipelined chunks do not show.
    send_hint: SendHint,
}

type Plan = Arc<PlanData>;

/// Plans kept per communicator; beyond this the cache starts over (shapes rarely vary much).
const MAX_PLANS: usize = 256;

struct Inner {
    ep: Endpoint,
    /// Link costs the selector prices algorithms with (same on every rank).
    model: CostModel,
    scratch: Vec<u64>,
    logged: Vec<(&'static str, &'static str, u32)>,
    plans: HashMap<(Coll, usize), Plan>,
    /// Collectives run so far: the sequence number the next one carries on the wire.
    seq: u32,
    /// Point-to-point messages exchanged so far, per peer and direction.
    p2p: P2pCounters,
    /// The previous call's shape, plan and tag.
    last: Option<Last>,
    /// Buffers of compressed AllReduce, kept between calls.
    compress_work: compressed::Workspace,
    /// The stage of the write path between threads (see [`push`]), kept between calls.
    push_stage: Vec<u8>,
}

/// The previous call of a communicator: a call of the same shape reuses its plan (and its tag,
/// with a new sequence number, when type and operator match too).
struct Last {
    coll: Coll,
    elem: usize,
    plan: Plan,
    dtype: DataType,
    op: Option<ReduceOp>,
    tag: Tag,
}

/// The bit of [`Communicator::state`] that marks it destroyed; the bits below count the threads
/// inside it.
const DESTROYED: u64 = 1 << 63;

/// One rank of a communicator.
pub struct Communicator {
    key: u128,
    name: String,
    rank: u32,
    size: u32,
    device: i32,
    table: Vec<RankRecord>,
    cfg: CommConfig,
    network: bool,
    /// Ranks of one host are processes over shared memory ([`Ctx::processes`]).
    processes: bool,
    /// Some host runs more ranks than it has cores ([`Ctx::crowded`]).
    crowded: bool,
    /// Which ranks share a host, as the algorithms see it.
    topo: algo::Topo,
    creator: ThreadId,
    /// Biased towards the thread that repeats small calls (see [`Self::run_repeat`]).
    inner: BiasedMutex<Inner>,
    /// Threads inside, and [`DESTROYED`]: one word, so entering costs no lock. Shared with the
    /// handle registry's per-thread cache, which reads it before it touches the communicator
    /// (see [`super::registry::pin`]).
    state: Arc<AtomicU64>,
    async_err: Mutex<Option<Error>>,
    /// Where operations are traced (`HCCL_TRACE_FILE`), if anywhere.
    trace: Option<Tracer>,
    /// Recorded under `inner`'s lock, read without it.
    stats: StatCells,
    /// The issue order of this communicator's operations (see [`super::dispatch`]).
    order: Order,
}

/// Marks a communicator in use for the lifetime of the guard.
pub struct BusyGuard<'a>(&'a Communicator);

impl Drop for BusyGuard<'_> {
    fn drop(&mut self) {
        leave(&self.0.state);
    }
}

/// Counts the calling thread in at `state` unless the communicator is destroyed (then leaves it
/// as it was and answers false). Counted first, checked after: a destroy either sees this thread
/// inside and refuses, or came first and this thread backs out.
pub(crate) fn try_enter(state: &AtomicU64) -> bool {
    if state.fetch_add(1, Ordering::Acquire) & DESTROYED != 0 {
        state.fetch_sub(1, Ordering::Release);
        return false;
    }
    true
}

/// Counts the calling thread out again after a [`try_enter`] that answered true.
pub(crate) fn leave(state: &AtomicU64) {
    state.fetch_sub(1, Ordering::Release);
}

/// Whether `state` marks its communicator destroyed (for a thread that announced itself
/// elsewhere first, see [`super::registry::pin`]).
pub(crate) fn destroyed(state: &AtomicU64) -> bool {
    state.load(Ordering::Relaxed) & DESTROYED != 0
}

fn deadline(cfg: &CommConfig) -> Instant {
    Instant::now() + cfg.connect_timeout
}

/// Creates the root of a new communicator: starts its rendezvous listener and returns the info
/// to ship to every rank.
pub fn create_root_info(env: &EnvConfig) -> Result<RootInfo> {
    let local = crate::transport::net::choose_local_addr(env)?;
    let base = env.if_base_port;
    let top = base.saturating_add(crate::base::env::IF_PORT_COUNT - 1);
    let listener = acceptor::bind_in_range(local.addr, Some((base, top)))?;
    let addr = listener.local_addr()?;
    let token = topology::random_u128();
    bootstrap::serve_root(
        RootListener::Tcp(listener),
        token,
        Instant::now() + env.connect_timeout,
        Whitelist::from_env(env)?,
    )?;
    log::info!("root info: rendezvous at {addr} (interface {})", local.name);
    Ok(RootInfo {
        addr,
        token,
        pid: std::process::id(),
        host: topology::local(env.host_id.as_deref()).host,
    })
}

fn my_record(rank: u32, cfg: &CommConfig) -> Result<RankRecord> {
    let acc = Acceptor::global(&cfg.env)?;
    Ok(RankRecord {
        rank,
        data_addr: acc.addr(),
        loc: topology::local(cfg.env.host_id.as_deref()),
        pid: std::process::id(),
        cores: crate::transport::backoff::host_cores() as u32,
    })
}

impl Communicator {
    /// Joins the communicator described by `info` as `rank` of `n`. A rank count out of
    /// bounds is refused before anything is allocated, and reported to the root so that the
    /// other ranks fail at once rather than at the connect timeout.
    pub fn init_root_info(
        n: u32,
        info: &RootInfo,
        rank: u32,
        cfg: CommConfig,
    ) -> Result<Communicator> {
        if let Err(e) = check_rank(rank, n) {
            if n == 0 || n > MAX_RANKS {
                // Bounded: the other ranks' hellos are what the root is waiting for.
                let dl = Instant::now() + cfg.connect_timeout.min(REPORT_TIMEOUT);
                let root = RootAddr::Tcp(info.addr);
                if bootstrap::report_bad_count(&root, info.token, n, rank, dl).is_some() {
                    return Err(Error::new(
                        e.kind,
                        format!(
                            "{} (reported to the root, which failed the rendezvous for every \
                             rank)",
                            e.msg
                        ),
                    ));
                }
            }
            return Err(e);
        }
        let me = my_record(rank, &cfg)?;
        let dl = deadline(&cfg);
        let table = bootstrap::exchange(&RootAddr::Tcp(info.addr), info.token, n, &me, dl)?;
        let name = cfg
            .name
            .clone()
            .unwrap_or_else(|| format!("hccl_{:016x}", info.token as u64));
        Communicator::connect(info.token, name, rank, table, cfg, -1, dl)?.calibrated(dl)
    }

    /// Joins the communicator described by a rank table file.
    pub fn init_cluster(path: &str, rank: u32, cfg: CommConfig) -> Result<Communicator> {
        let rt = RankTable::load(std::path::Path::new(path))?;
        let n = rt.rank_count();
        check_rank(rank, n)?;
        let key = rt.fingerprint();
        let dl = deadline(&cfg);
        let (_, dev0) = rt
            .rank(0)
            .ok_or_else(|| Error::new(ErrorKind::Para, "rank table has no rank 0"))?;
        let root = match (dev0.device_ip, dev0.device_port) {
            (Some(ip), Some(port)) => RootAddr::Tcp(std::net::SocketAddr::new(ip, port)),
            _ => RootAddr::Unix(format!("hccl-bootstrap-{key:032x}")),
        };
        if rank == 0 {
            let listener = match &root {
                RootAddr::Tcp(a) => RootListener::Tcp(std::net::TcpListener::bind(a).map_err(|e| {
                    Error::new(ErrorKind::Network, format!("rank 0 cannot listen on {a} from the rank table: {e}"))
                })?),
                RootAddr::Unix(name) => bootstrap::bind_unix(name).map_err(|e| {
                    e.context("rank 0 cannot create the rendezvous socket (is another job using this rank table?)")
                })?,
            };
            bootstrap::serve_root(listener, key, dl, Whitelist::from_env(&cfg.env)?)?;
        }
        let mut me = my_record(rank, &cfg)?;
        let (server, dev) = rt.rank(rank).expect("rank checked");
        // The table says which ranks share a host: those of one server_id, whatever the
        // machines' own identities say (HCCL_HOST_ID still wins when set).
        if cfg.env.host_id.is_none() {
            me.loc.host = fnv64(format!("server_id:{}", server.server_id).as_bytes());
        }
        let table = bootstrap::exchange(&root, key, n, &me, dl)?;
        let name = cfg
            .name
            .clone()
            .unwrap_or_else(|| format!("hccl_table_{:016x}", key as u64));
        Communicator::connect(key, name, rank, table, cfg, dev.device_id as i32, dl)?.calibrated(dl)
    }

    /// Creates `ndev` ranks in this process at once (all links are memory).
    pub fn init_all(devices: &[i32], cfg: CommConfig) -> Result<Vec<Communicator>> {
        let n = devices.len() as u32;
        let key = topology::random_u128();
        let loc = topology::local(cfg.env.host_id.as_deref());
        let cores = crate::transport::backoff::host_cores() as u32;
        let table: Vec<RankRecord> = (0..n)
            .map(|r| RankRecord {
                rank: r,
                data_addr: "0.0.0.0:0".parse().expect("literal address"),
                loc,
                pid: std::process::id(),
                cores,
            })
            .collect();
        let name = cfg
            .name
            .clone()
            .unwrap_or_else(|| format!("hccl_all_{:016x}", key as u64));
        let dl = deadline(&cfg);
        let mut cfg = cfg;
        // All ranks live in this thread's process: there is no network to force.
        cfg.force_network = false;
        (0..n)
            .map(|r| {
                Communicator::connect(
                    key,
                    name.clone(),
                    r,
                    table.clone(),
                    cfg.clone(),
                    devices[r as usize],
                    dl,
                )
            })
            .collect()
    }

    /// Creates a sub-communicator of the ranks `ranks` of `self` (in that order); this rank is
    /// `sub_rank` of it. Every member calls this; no rendezvous through a root is needed
    /// because the parent already knows how to reach every member.
    pub fn create_sub(
        &self,
        ranks: &[u32],
        sub_id: u64,
        sub_rank: u32,
        cfg: CommConfig,
    ) -> Result<Communicator> {
        let n = ranks.len() as u32;
        check_rank(sub_rank, n)?;
        let mut seen = vec![false; self.size as usize];
        for &r in ranks {
            if r >= self.size {
                return Err(Error::new(
                    ErrorKind::Para,
                    format!(
                        "rank id {r} is not a rank of the parent communicator (size {})",
                        self.size
                    ),
                ));
            }
            if std::mem::replace(&mut seen[r as usize], true) {
                return Err(Error::new(
                    ErrorKind::Para,
                    format!("rank id {r} listed twice"),
                ));
            }
        }
        if ranks[sub_rank as usize] != self.rank {
            return Err(Error::new(
                ErrorKind::Para,
                format!(
                    "subCommRankId {sub_rank} maps to parent rank {}, but the caller is parent rank {}",
                    ranks[sub_rank as usize], self.rank
                ),
            ));
        }
        let mut h = Vec::with_capacity(32 + 4 * ranks.len());
        h.extend_from_slice(&self.key.to_le_bytes());
        h.extend_from_slice(&sub_id.to_le_bytes());
        for r in ranks {
            h.extend_from_slice(&r.to_le_bytes());
        }
        let key = ((fnv64(&h) as u128) << 64) | fnv64(&[&h[..], b"sub"].concat()) as u128;
        let table = ranks
            .iter()
            .enumerate()
            .map(|(i, &r)| RankRecord {
                rank: i as u32,
                ..self.table[r as usize]
            })
            .collect();
        let name = cfg
            .name
            .clone()
            .unwrap_or_else(|| format!("{}_sub{sub_id}", self.name));
        let dl = deadline(&cfg);
        Communicator::connect(key, name, sub_rank, table, cfg, self.device, dl)?.calibrated(dl)
    }

    /// The communicator with its link costs measured when `HCCL_COST_CALIBRATE` is set, then
    /// `HCCL_COST_MODEL` overrides applied again (explicit figures win over measured ones).
    /// Collective: every rank runs it in its own thread. `InitAll` creates all ranks from one
    /// thread and so keeps the model's defaults.
    fn calibrated(self, deadline: Instant) -> Result<Communicator> {
        if !self.cfg.env.cost_calibrate {
            return Ok(self);
        }
        {
            let mut inner = self.inner.lock();
            let ctx = self.ctx(1);
            let base = inner.model;
            let t0 = Instant::now();
            let m = calibrate::calibrate(&mut inner.ep, &ctx, base, deadline).map_err(|e| {
                e.context(format!(
                    "comm {} rank {}: cost calibration",
                    self.name, self.rank
                ))
            })?;
            let m = with_overrides(m, &self.cfg)?;
            if self.rank == 0 {
                log::info!(
                    "comm {}: calibrated link costs in {:.1} ms: level0 alpha {:.2e} s beta \
                     {:.3e} B/s; level1 alpha {:.2e} s beta {:.3e} B/s",
                    self.name,
                    t0.elapsed().as_secs_f64() * 1e3,
                    m.level0.alpha,
                    m.level0.beta,
                    m.level1.alpha,
                    m.level1.beta
                );
            }
            inner.model = m;
        }
        Ok(self)
    }

    /// The algorithms' view of this rank for elements of `elem` bytes.
    fn ctx(&self, elem: usize) -> Ctx<'_> {
        Ctx {
            me: self.rank,
            n: self.size,
            elem,
            network: self.network,
            topo: &self.topo,
            deterministic: self.cfg.deterministic != Deterministic::Off,
            processes: self.processes,
            crowded: self.crowded,
        }
    }

    /// The algorithm this communicator runs `coll` with (elements of `elem` bytes): the one
    /// `HCCL_ALGO` forces, else the cheapest under its cost model.
    pub fn algorithm_for(&self, coll: &Coll, elem: usize) -> Algo {
        let model = self.inner.lock().model;
        self.cfg
            .algo_spec
            .forced(coll)
            .unwrap_or_else(|| algo::select::choose_with(coll, &self.ctx(elem), &model))
    }

    /// The schedules (their algorithms' names, one per segment) that executing `coll` on
    /// elements of `elem` bytes runs, once it has been executed: read from the plan that
    /// [`execute`](Self::execute) reuses, so it names what actually ran, fallbacks included.
    pub fn schedules_run(&self, coll: &Coll, elem: usize) -> Option<Vec<&'static str>> {
        let inner = self.inner.lock();
        let plan = inner.plans.get(&(coll.clone(), elem))?;
        Some(plan.parts.iter().map(|p| p.sched.algo).collect())
    }

    /// The link costs the selector uses.
    pub fn cost_model(&self) -> CostModel {
        self.inner.lock().model
    }

    fn connect(
        key: u128,
        name: String,
        rank: u32,
        table: Vec<RankRecord>,
        cfg: CommConfig,
        device: i32,
        dl: Instant,
    ) -> Result<Communicator> {
        let n = table.len() as u32;
        let me = table[rank as usize];
        // Ranks of this host share its cores; the doorbell spins less when they outnumber them.
        let host_ranks = table.iter().filter(|p| p.loc.host == me.loc.host).count();
        let bell = Arc::new(Doorbell::new(host_ranks)?);
        let same_proc = |p: &RankRecord| p.loc.process == me.loc.process && !cfg.force_network;
        let local = table.iter().filter(|p| same_proc(p)).count();
        let fabric = if local > 1 {
            Some(InprocFabric::join(
                key,
                n as usize,
                local,
                rank as usize,
                bell.clone(),
            )?)
        } else {
            None
        };
        let mut streams: Vec<Option<Vec<TcpStream>>> = (0..n).map(|_| None).collect();
        // The connecting side decides how many sockets a link has; the acceptor follows it.
        let sockets =
            cfg.env
                .sockets_per_peer
                .unwrap_or(crate::transport::tcp::DEFAULT_SOCKETS_PER_PEER) as u16;
        let network_peers: Vec<u32> = (0..n)
            .filter(|&p| p != rank && !same_proc(&table[p as usize]))
            .collect();
        // Other processes on this host get shared memory, introduced over one connection that
        // then stays open as the liveness signal (HCCL_INTRA_ROCE_ENABLE=1 keeps TCP).
        let same_host = |p: u32| table[p as usize].loc.host == me.loc.host && !cfg.force_network;
        let mut shm_links: Vec<Option<Box<crate::transport::shm::ShmLink>>> =
            (0..n).map(|_| None).collect();
        let mut net_links: Vec<Option<Box<plugin_link::PluginLink>>> =
            (0..n).map(|_| None).collect();
        // The lower rank of each pair connects; the higher accepts through the process listener,
        // which parks connections for this communicator only while it connects.
        let _expecting = if network_peers.iter().any(|&p| p < rank) {
            Some(Acceptor::global(&cfg.env)?.expect(key, rank, n))
        } else {
            None
        };
        let res: Result<()> = (|| {
            for &p in network_peers.iter().filter(|&&p| p > rank) {
                streams[p as usize] = Some(acceptor::connect_link(
                    table[p as usize].data_addr,
                    key,
                    rank,
                    p,
                    if same_host(p) { 1 } else { sockets },
                    dl,
                )?);
            }
            if network_peers.iter().any(|&p| p < rank) {
                let acc = Acceptor::global(&cfg.env)?;
                for &p in network_peers.iter().filter(|&&p| p < rank) {
                    streams[p as usize] = Some(acc.take_link(key, p, rank, dl)?);
                }
            }
            let mut local: Vec<(u32, TcpStream)> = Vec::new();
            for &p in network_peers.iter().filter(|&&p| same_host(p)) {
                if let Some(mut v) = streams[p as usize].take_if(|v| v.len() == 1) {
                    local.push((p, v.remove(0)));
                }
            }
            if !local.is_empty() {
                // The count this rank's record carries, which the algorithms' crowding reads.
                let cores = me.cores as usize;
                let on_host = table.iter().filter(|r| r.loc.host == me.loc.host).count();
                let below =
                    crate::transport::shm::single_copy_max(cfg.env.shm_single_copy, local.len());
                log::info!(
                    "comm {name}: rank {rank}: {} shared-memory peer(s), single copy {}",
                    local.len(),
                    match below {
                        0 => "off".to_string(),
                        usize::MAX => "on".to_string(),
                        b => format!("on for exchanges and operations up to {b} bytes"),
                    }
                );
                let opts = crate::transport::shm::ShmOptions {
                    budget: cfg.buffer_bytes,
                    single_copy_max: below,
                    crowded: on_host > cores,
                    share_copies: cfg.env.shm_share,
                    stream_stores: cfg.env.shm_stream,
                };
                for (p, a) in crate::transport::shm::introduce(rank, local, opts, dl)? {
                    match a {
                        crate::transport::shm::Attached::Shm(l) => shm_links[p as usize] = Some(l),
                        crate::transport::shm::Attached::Tcp(s) => {
                            streams[p as usize] = Some(vec![s])
                        }
                    }
                }
            }
            // Peers on other hosts: through the net plugin when one is loaded.
            let remote: Vec<u32> = network_peers
                .iter()
                .copied()
                .filter(|&p| {
                    !same_host(p) && streams[p as usize].as_ref().is_some_and(|v| v.len() == 1)
                })
                .collect();
            if !remote.is_empty() {
                if let Some(plugin) = plugin::global(&cfg.env)? {
                    let list = remote
                        .iter()
                        .filter_map(|&p| Some((p, streams[p as usize].take()?.remove(0))))
                        .collect();
                    for (p, a) in plugin_link::introduce(&plugin, rank, list, dl)? {
                        match a {
                            plugin_link::Attached::Net(l) => net_links[p as usize] = Some(l),
                            plugin_link::Attached::Tcp(s) => streams[p as usize] = Some(vec![s]),
                        }
                    }
                }
            }
            Ok(())
        })();
        if let Err(e) = res {
            return Err(e.context(format!("comm {name} rank {rank}: connecting to peers")));
        }
        let mut links: Vec<Box<dyn Link>> = Vec::with_capacity(n as usize);
        for p in 0..n {
            links.push(if p == rank {
                Box::new(LocalLink::new())
            } else if let Some(l) = shm_links[p as usize].take() {
                l
            } else if let Some(l) = net_links[p as usize].take() {
                l
            } else if let Some(s) = streams[p as usize].take() {
                Box::new(TcpLink::new(s, rank, p)?)
            } else if let Some(f) = &fabric {
                Box::new(MemoryLink::new(f.clone(), rank, p))
            } else {
                return Err(Error::new(
                    ErrorKind::Internal,
                    format!("comm {name}: rank {rank} has no link to peer rank {p}"),
                ));
            });
        }
        let ep = Endpoint::new(rank, links, bell)?;
        let reach = |p: u32| ep.link_info(p).reach;
        let network = (0..n).any(|p| reach(p) == Reach::Network);
        let count = |k: Reach| (0..n).filter(|&p| reach(p) == k).count();
        log::info!(
            "comm {name}: rank {rank} of {n} ready ({} memory peers, {} shm peers, {} network \
             peers)",
            count(Reach::Process),
            count(Reach::Host),
            count(Reach::Network)
        );
        let topo = algo_topology(&name, rank, &table, &cfg);
        if let (Some(m), 0) = (cfg.env.compression, rank) {
            log::warn!(
                "comm {name}: HCCL_COMPRESSION={m}: the cross-host part of SUM AllReduces on \
                 fp32/fp16/bf16 is compressed, so their results are no longer exact{}",
                if topo.hosts().len() > 1 {
                    ""
                } else {
                    " (not on this communicator: its ranks share one host)"
                }
            );
        }
        let mut model = CostModel::for_ctx(&Ctx {
            me: rank,
            n,
            elem: 1,
            network,
            topo: &topo,
            deterministic: false,
            processes: false,
            crowded: false,
        });
        model.level0.staged_below =
            staged_below(&table, cfg.force_network, cfg.env.shm_single_copy);
        let processes = model.level0.staged_below > 0.0;
        let crowded = crowded_host(&table);
        let model = with_overrides(model, &cfg)?;
        // A trace is a diagnostic: a file that cannot be opened is logged, never fatal.
        let trace = cfg.env.trace_file.as_deref().and_then(|t| {
            Tracer::open(t, rank, &name)
                .map_err(|e| log::error!("comm {name} rank {rank}: {}; not tracing", e.msg))
                .ok()
        });
        Ok(Communicator {
            trace,
            key,
            name,
            rank,
            size: n,
            device,
            table,
            cfg,
            network,
            processes,
            crowded,
            topo,
            creator: std::thread::current().id(),
            inner: BiasedMutex::new(Inner {
                ep,
                model,
                scratch: Vec::new(),
                logged: Vec::new(),
                plans: HashMap::new(),
                seq: 0,
                p2p: P2pCounters::new(n),
                last: None,
                compress_work: compressed::Workspace::default(),
                push_stage: Vec::new(),
            }),
            state: Arc::new(AtomicU64::new(0)),
            async_err: Mutex::new(None),
            stats: StatCells::default(),
            order: Order::default(),
        })
    }

    /// This rank.
    pub fn rank(&self) -> u32 {
        self.rank
    }

    /// Number of ranks.
    pub fn size(&self) -> u32 {
        self.size
    }

    /// Communicator name (same on every rank).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Device id this rank was created for (-1 when none was given).
    pub fn device(&self) -> i32 {
        self.device
    }

    /// The merged configuration.
    pub fn config(&self) -> &CommConfig {
        &self.cfg
    }

    /// The thread that created this communicator handle.
    pub fn creator(&self) -> ThreadId {
        self.creator
    }

    /// The location of every rank.
    pub fn locations(&self) -> Vec<Location> {
        self.table.iter().map(|r| r.loc).collect()
    }

    /// The issue order of this communicator's operations.
    pub fn order(&self) -> &Order {
        &self.order
    }

    /// Marks the communicator busy; fails once it has been destroyed.
    pub fn enter(&self) -> Result<BusyGuard<'_>> {
        if !try_enter(&self.state) {
            return Err(Error::new(
                ErrorKind::Unavail,
                format!("comm {} rank {} has been destroyed", self.name, self.rank),
            ));
        }
        Ok(BusyGuard(self))
    }

    /// The word that counts the threads inside and marks the communicator destroyed.
    pub(crate) fn state(&self) -> &Arc<AtomicU64> {
        &self.state
    }

    /// Marks the communicator destroyed, unless another thread is inside it.
    pub fn mark_destroyed(&self) -> Result<()> {
        let busy = |v: u64| v & !DESTROYED > 0;
        let r = self
            .state
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |v| {
                (!busy(v)).then_some(v | DESTROYED)
            });
        if r.is_err() {
            return Err(self.busy_error());
        }
        Ok(())
    }

    /// Takes back [`Self::mark_destroyed`] when a thread turned out to be inside after all
    /// (one that announced itself without counting in, see [`super::registry::pin`]).
    pub(crate) fn unmark_destroyed(&self) -> Error {
        self.state.fetch_and(!DESTROYED, Ordering::AcqRel);
        self.busy_error()
    }

    fn busy_error(&self) -> Error {
        Error::new(
            ErrorKind::Unavail,
            format!(
                "comm {} rank {}: cannot destroy while another thread is inside an operation on it",
                self.name, self.rank
            ),
        )
    }

    /// The first error of an operation that failed on this communicator, if any.
    pub fn async_error(&self) -> Option<Error> {
        self.async_err.lock().clone()
    }

    /// Records an error of an operation that ran detached from its caller (stream order).
    pub fn record_async_error(&self, e: &Error) {
        let mut a = self.async_err.lock();
        if a.is_none() {
            *a = Some(e.clone());
        }
    }

    /// Runs one collective to completion, counting it in the communicator's statistics.
    ///
    /// Its messages carry its identity (kind, counts, type, operator, root, compression and its
    /// place in this communicator's sequence), so a peer that called something else makes it
    /// fail on every rank instead of exchanging wrong data (see [`identity`]). Such a failure,
    /// like any that leaves messages half exchanged, breaks the communicator: every later call
    /// fails with `HCCL_E_UNAVAIL` naming the first error, and the communicator can only be
    /// destroyed.
    ///
    /// A call on the small-message path reads no clock unless it waits (see [`small::run`]),
    /// so it is not counted in the busy time.
    pub fn execute(&self, args: &OpArgs) -> Result<()> {
        let _busy = self.enter()?;
        let mut inner = self.inner.lock();
        let comp = self.compression_of(args);
        let (r, ns) = match &comp {
            Some(c) => {
                // The one clock read of a call: it times the call and starts its deadline.
                let t0 = Instant::now();
                let r = self.run_compressed(&mut inner, args, c, t0);
                (r, t0.elapsed().as_nanos() as u64)
            }
            None => {
                let mut ns = 0;
                (self.run_plan(&mut inner, args, &mut ns), ns)
            }
        };
        let (ok, traffic) = match &r {
            Ok(t) => (true, *t),
            Err(_) => (false, Traffic::default()),
        };
        // Under the lock: one recorder at a time.
        self.stats.record(ok, comp.is_some(), traffic, ns);
        r.map(|_| ())
    }

    /// The counters of this rank.
    pub fn stats(&self) -> CommStats {
        self.stats.get()
    }

    /// Starts the counters of this rank over from zero (once a running operation has
    /// recorded its own).
    pub fn reset_stats(&self) {
        let _inner = self.inner.lock();
        self.stats.reset();
    }

    /// The compression an operation runs with: its own, or `HCCL_COMPRESSION`'s for a SUM
    /// AllReduce on a floating type across hosts.
    fn compression_of(&self, args: &OpArgs) -> Option<Compressed> {
        if let Some(c) = &args.compress {
            return Some(**c);
        }
        let method = self.cfg.env.compression?;
        let applies = matches!(args.coll, Coll::AllReduce { .. })
            && args.op == Some(ReduceOp::Sum)
            && compressed::dtype_ok(args.dtype)
            && self.topo.hosts().len() > 1;
        applies.then_some(Compressed {
            spec: crate::base::compress::Spec {
                method,
                level0: false,
            },
            residual: None,
        })
    }

    /// Fails when an earlier failure broke the links; otherwise numbers the operation that is
    /// about to reach the wire (point-to-point calls are numbered per pair instead).
    ///
    /// Only operations that reach the wire take a number, so a call refused before this point
    /// leaves every rank's sequence alike.
    #[inline]
    fn next_seq(&self, ep: &Endpoint, seq: &mut u32, args: &OpArgs) -> Result<u32> {
        if let Some(e) = ep.broken() {
            return Err(self.unusable(e, args));
        }
        if matches!(args.coll, Coll::P2p { .. }) {
            return Ok(0);
        }
        *seq = seq.wrapping_add(1);
        Ok(*seq)
    }

    /// [`Self::next_seq`]'s error, out of line.
    #[cold]
    #[inline(never)]
    fn unusable(&self, e: &Error, args: &OpArgs) -> Error {
        Error::new(
            ErrorKind::Unavail,
            format!(
                "comm {} rank {} {}: communicator unusable after an earlier failure: {}",
                self.name, self.rank, args.name, e.msg
            ),
        )
    }

    /// The fast path of a call that repeats the previous call on the small path (same shape,
    /// type and operator), run on the calling thread: `None` when the call is not such a
    /// repeat, when another thread holds the communicator, or when an operation issued earlier
    /// has not finished, and the caller then takes the ordinary way (ticket, [`Self::execute`]).
    ///
    /// Without a ticket the call keeps the issue order all the same: it runs under the lock
    /// and only while no ticket is outstanding, so whatever was issued before it has finished
    /// and whatever is issued while it runs waits for the lock. Every check of the ordinary
    /// way stays (broken links, the tag every message carries), and the call is counted in the
    /// statistics alike. The caller's pin counts it inside the communicator, which therefore
    /// cannot be destroyed meanwhile.
    #[inline]
    pub fn run_repeat(&self, args: &OpArgs, pin: &Pinned) -> Option<Result<()>> {
        debug_assert!(std::ptr::eq(&***pin, self), "pinned another communicator");
        if args.compress.is_some() {
            return None;
        }
        let mut inner = self.inner.try_lock_biased()?;
        if !self.order.idle() {
            return None;
        }
        let r = self.run_small_repeat(&mut inner, args)?;
        let (ok, traffic) = match &r {
            Ok(t) => (true, *t),
            Err(_) => (false, Traffic::default()),
        };
        // Under the lock, as in `execute`: one recorder at a time.
        self.stats.record(ok, false, traffic, 0);
        Some(r.map(|_| ()))
    }

    /// Runs `args` as a repeat of the previous small call when it is one (same shape, type
    /// and operator): it borrows plan, inbound list and tag from `last` (no plan reference
    /// taken, no scratch sizing: the scratch never shrinks and was sized for this plan when
    /// `last` was set). `None` when `args` is not such a repeat. The previous call ran
    /// uncompressed (only such calls set `last`), and whether a call is compressed follows
    /// from its shape, type and operator, so a repeat without compression of its own is
    /// uncompressed too.
    // Inlined into the dispatcher with `run_repeat`: fewer saved registers on every repeat
    // (see `base::error` on why a small call's stores count).
    #[inline(always)]
    fn run_small_repeat(&self, inner: &mut Inner, args: &OpArgs) -> Option<Result<Traffic>> {
        let Inner {
            ep,
            scratch,
            seq,
            p2p,
            last,
            ..
        } = inner;
        let l = last.as_ref()?;
        if l.elem != args.dtype.size()
            || l.dtype != args.dtype
            || l.op != args.op
            || !same_coll(&l.coll, &args.coll)
        {
            return None;
        }
        let s = l.plan.small.as_ref()?;
        let call = match self.next_seq(ep, seq, args) {
            Ok(q) => l.tag.with_seq(q),
            Err(e) => return Some(Err(e)),
        };
        let mut tags = OpTags::new(self.rank, &args.coll, call, Some(&l.plan.inbound), p2p);
        let red = args.op.map(|op| executor::reduce_fn(args.dtype, op));
        let scratch = scratch.as_mut_ptr() as usize;
        let timeout = self.cfg.exec_timeout;
        Some(
            self.run_small(ep, args, s, red, timeout, scratch, &mut tags)
                .map(|()| l.plan.traffic),
        )
    }

    /// Runs a compressed AllReduce (see [`compressed`]), traced when tracing is on.
    fn run_compressed(
        &self,
        inner: &mut Inner,
        args: &OpArgs,
        c: &Compressed,
        t0: Instant,
    ) -> Result<Traffic> {
        let Coll::AllReduce { count } = args.coll else {
            return Err(Error::new(
                ErrorKind::Internal,
                format!("{}: compression is for AllReduce only", args.name),
            ));
        };
        let context = |e: Error| {
            e.context(format!(
                "comm {} rank {} {} (compressed {})",
                self.name, self.rank, args.name, c.spec
            ))
        };
        let plan = compressed::prepare(
            &self.topo,
            self.rank,
            count,
            args.dtype,
            &c.spec,
            self.cfg.buffer_bytes,
            self.cfg.deterministic != Deterministic::Off,
        );
        let seq = self.next_seq(&inner.ep, &mut inner.seq, args)?;
        let call = compressed::call_tag(count, args.dtype, &c.spec, seq).encode();
        let inbound = compressed::inbound(&plan, self.rank);
        let mut tags = OpTags::new(self.rank, &args.coll, call, Some(&inbound), &mut inner.p2p);
        let dl = self.cfg.exec_timeout.map(|d| t0 + d);
        let start = Instant::now();
        let mut steps = self.trace.as_ref().map(|_| Vec::new());
        // SAFETY: the ffi layer validated the buffers and the residual against `count`.
        let r = unsafe {
            compressed::run(
                &mut inner.ep,
                &mut inner.compress_work,
                &plan,
                &self.topo,
                args.dtype,
                args.send,
                args.recv,
                c,
                dl,
                &mut tags,
                steps.as_mut(),
            )
        }
        .map_err(|e| {
            let e = context(e);
            if inner.ep.broken().is_some() {
                self.record_async_error(&e);
            }
            e
        });
        if let (Some(t), Some(steps)) = (&self.trace, &steps) {
            t.record(&OpTrace {
                op: args.name,
                dtype: args.dtype.name(),
                count: count as u64,
                reduce: Some(ReduceOp::Sum.name()),
                algorithms: &[algo::compressed::ALGO],
                start,
                end: Instant::now(),
                error: r.as_ref().err().map(|e| e.msg.as_str()),
                steps,
            });
        }
        r
    }

    /// Runs `args` through its (cached) plan of schedules, setting `ns` to the time it took
    /// (left alone on the small path, which reads no clock unless it waits).
    fn run_plan(&self, inner: &mut Inner, args: &OpArgs, ns: &mut u64) -> Result<Traffic> {
        let elem = args.dtype.size();
        if let Some(r) = self.run_small_repeat(inner, args) {
            return r;
        }
        // A call of the same shape as the previous one takes its plan without hashing, and its
        // tag too when type and operator are the same.
        let last = inner
            .last
            .as_ref()
            .filter(|l| l.elem == elem && same_coll(&l.coll, &args.coll))
            .map(|l| {
                let same = l.dtype == args.dtype && l.op == args.op;
                (l.plan.clone(), same.then_some(l.tag))
            });
        let mut t0 = None;
        let (plan, last_tag) = match last {
            Some(hit) => hit,
            None => {
                t0 = Some(Instant::now());
                let key = (args.coll.clone(), elem);
                let plan = match inner.plans.get(&key) {
                    Some(p) => p.clone(),
                    None => {
                        let plan = self.make_plan(inner, args, &self.ctx(elem))?;
                        if inner.plans.len() >= MAX_PLANS {
                            inner.plans.clear();
                        }
                        inner.plans.insert(key, plan.clone());
                        plan
                    }
                };
                (plan, None)
            }
        };
        let seq = self.next_seq(&inner.ep, &mut inner.seq, args)?;
        let words = plan
            .parts
            .iter()
            .map(|p| p.sched.scratch)
            .max()
            .unwrap_or(0)
            .max(plan.small.as_ref().map_or(0, Small::scratch_bytes))
            .div_ceil(8);
        if inner.scratch.len() < words {
            inner.scratch.resize(words, 0);
        }
        let red = args.op.map(|op| executor::reduce_fn(args.dtype, op));
        let scratch = inner.scratch.as_mut_ptr() as usize;
        let call = match last_tag {
            Some(t) => t.with_seq(seq),
            None => {
                let t = identity::call_tag(&plan.template, &args.coll, args.dtype, args.op, seq)
                    .encode();
                inner.last = Some(Last {
                    coll: args.coll.clone(),
                    elem,
                    plan: plan.clone(),
                    dtype: args.dtype,
                    op: args.op,
                    tag: t,
                });
                t
            }
        };
        let mut tags = OpTags::new(
            self.rank,
            &args.coll,
            call,
            Some(&plan.inbound),
            &mut inner.p2p,
        );
        if let Some(s) = &plan.small {
            let timeout = self.cfg.exec_timeout;
            return self
                .run_small(&mut inner.ep, args, s, red, timeout, scratch, &mut tags)
                .map(|()| plan.traffic);
        }
        let t0 = t0.unwrap_or_else(Instant::now);
        let dl = self.cfg.exec_timeout.map(|d| t0 + d);
        if plan.push {
            let stage = &mut inner.push_stage;
            let r = self.run_push(&mut inner.ep, stage, args, red, dl, &call, plan.traffic);
            *ns = t0.elapsed().as_nanos() as u64;
            return r.map(|()| plan.traffic);
        }
        let r = match &self.trace {
            Some(t) => {
                self.execute_traced(&mut inner.ep, args, &plan, red, dl, scratch, &mut tags, t)
            }
            None => self.run_parts(&mut inner.ep, args, &plan, red, dl, scratch, &mut tags),
        };
        *ns = t0.elapsed().as_nanos() as u64;
        r.map(|()| plan.traffic)
    }

    /// Runs the parts of `plan` in turn.
    #[allow(clippy::too_many_arguments)]
    fn run_parts(
        &self,
        ep: &mut Endpoint,
        args: &OpArgs,
        plan: &PlanData,
        red: Option<crate::transport::ReduceFn>,
        dl: Option<Instant>,
        scratch: usize,
        tags: &mut OpTags,
    ) -> Result<()> {
        for part in plan.parts.iter() {
            let bufs = Buffers {
                send: args.send + part.send_off,
                recv: args.recv + part.recv_off,
                scratch,
                ext: args.ext.clone(),
                send_hint: plan.send_hint,
            };
            // SAFETY: the ffi layer validated buffer sizes against the operation's counts, and
            // every segment addresses a slice of the operation's buffers.
            let r = unsafe { executor::run(ep, &part.sched, &bufs, red, dl, tags, &part.notices) };
            r.map_err(|e| {
                let e = e.context(format!(
                    "comm {} rank {} {} ({} algorithm)",
                    self.name, self.rank, args.name, part.sched.algo
                ));
                // Only failures that broke the links poison the communicator; a call rejected
                // before anything moved leaves it healthy.
                if ep.broken().is_some() {
                    self.record_async_error(&e);
                }
                e
            })?;
        }
        Ok(())
    }

    /// Runs `args` on the small-message path (see [`small`]), traced as one step (its single
    /// exchange) when tracing is on.
    #[allow(clippy::too_many_arguments)]
    fn run_small(
        &self,
        ep: &mut Endpoint,
        args: &OpArgs,
        s: &Small,
        red: Option<crate::transport::ReduceFn>,
        timeout: Option<Duration>,
        scratch: usize,
        tags: &mut OpTags,
    ) -> Result<()> {
        let start = self.trace.as_ref().map(|_| Instant::now());
        let bufs = small::Bufs {
            send: args.send,
            recv: args.recv,
            scratch,
            ext: &args.ext,
        };
        // SAFETY: the ffi layer validated the buffers against the operation's counts, and the
        // scratch holds what the path needs (grown before the call).
        let r = unsafe { small::run(ep, s, &bufs, red, timeout, tags) };
        let peers = s.partners().map(|p| {
            let (sent, received) = s.traffic_with(p);
            (p, sent, received)
        });
        self.one_step_done(ep, args, small::ALGO, start, r, peers)
    }

    /// Ends a call that ran as one step on the path `algo` (the small path, the write path
    /// between threads), started at `start` when tracing is on: names the call in its error,
    /// records an error that broke the links as the communicator's async error, and traces the
    /// call as one step with `peers` (each: peer, bytes sent to it, bytes received from it).
    fn one_step_done(
        &self,
        ep: &Endpoint,
        args: &OpArgs,
        algo: &'static str,
        start: Option<Instant>,
        r: Result<()>,
        peers: impl Iterator<Item = (u32, u64, u64)>,
    ) -> Result<()> {
        let r = r.map_err(|e| {
            let e = e.context(format!(
                "comm {} rank {} {} ({algo} path)",
                self.name, self.rank, args.name
            ));
            if ep.broken().is_some() {
                self.record_async_error(&e);
            }
            e
        });
        if let (Some(t), Some(start)) = (&self.trace, start) {
            let end = Instant::now();
            let peers = peers
                .map(|(peer, sent, received)| PeerTraffic {
                    peer,
                    sent,
                    received,
                    link: ep.link_info(peer),
                })
                .collect();
            t.record(&OpTrace {
                op: args.name,
                dtype: args.dtype.name(),
                count: element_count(&args.coll, args.dtype.size()),
                reduce: args.op.map(|o| o.name()),
                algorithms: &[algo],
                start,
                end,
                error: r.as_ref().err().map(|e| e.msg.as_str()),
                steps: &[StepTrace { start, end, peers }],
            });
        }
        r
    }

    /// [`execute`](Self::execute)'s run of `plan` with every step timed, and the operation
    /// written to the trace whether it succeeded or not.
    #[allow(clippy::too_many_arguments)]
    fn execute_traced(
        &self,
        ep: &mut Endpoint,
        args: &OpArgs,
        plan: &Plan,
        red: Option<crate::transport::ReduceFn>,
        dl: Option<Instant>,
        scratch: usize,
        tags: &mut OpTags,
        t: &Tracer,
    ) -> Result<()> {
        let start = Instant::now();
        let mut steps = Vec::new();
        let mut res = Ok(());
        for part in plan.parts.iter() {
            let bufs = Buffers {
                send: args.send + part.send_off,
                recv: args.recv + part.recv_off,
                scratch,
                ext: args.ext.clone(),
                send_hint: plan.send_hint,
            };
            // SAFETY: as in `execute`.
            res = unsafe {
                executor::run_traced(
                    ep,
                    &part.sched,
                    &bufs,
                    red,
                    dl,
                    tags,
                    &part.notices,
                    Some(&mut steps),
                )
            }
            .map_err(|e| {
                let e = e.context(format!(
                    "comm {} rank {} {} ({} algorithm)",
                    self.name, self.rank, args.name, part.sched.algo
                ));
                if ep.broken().is_some() {
                    self.record_async_error(&e);
                }
                e
            });
            if res.is_err() {
                break;
            }
        }
        let algorithms: Vec<&'static str> = plan.parts.iter().map(|p| p.sched.algo).collect();
        let error = res.as_ref().err().map(|e| e.msg.as_str());
        t.record(&OpTrace {
            op: args.name,
            dtype: args.dtype.name(),
            count: element_count(&args.coll, args.dtype.size()),
            reduce: args.op.map(|o| o.name()),
            algorithms: &algorithms,
            start,
            end: Instant::now(),
            error,
            steps: &steps,
        });
        res
    }

    /// Scratch bytes this communicator holds now.
    pub fn scratch_bytes(&self) -> usize {
        self.inner.lock().scratch.len() * 8
    }

    /// Chooses and builds the schedules of `args`: the whole operation when its scratch fits
    /// the staging budget, otherwise as few equal segments as bring every schedule within it.
    fn make_plan(&self, inner: &mut Inner, args: &OpArgs, ctx: &Ctx) -> Result<Plan> {
        if let Some(plan) = self.small_plan(args, &inner.ep) {
            return Ok(plan);
        }
        if let Some(plan) = self.push_plan(args, &inner.ep) {
            return Ok(plan);
        }
        let mut parts: Vec<Part> = if self.size > 1 && nothing_to_move(&args.coll) {
            // Nothing to move, but the ranks must still agree that nothing is what they called:
            // the empty operation runs as a barrier of tagged messages.
            vec![Part {
                sched: Arc::new(algo::build(&Coll::Barrier, ctx, Algo::Direct)),
                send_off: 0,
                recv_off: 0,
                notices: Arc::from([]),
            }]
        } else {
            self.schedules(inner, args, ctx).to_vec()
        };
        let with_notices = identity::needs_notices(identity::kind_of(&args.coll));
        let mut done: Vec<(Arc<algo::Schedule>, Arc<[Notice]>)> = Vec::new();
        for part in &mut parts {
            if let Some((_, n)) = done.iter().find(|(s, _)| Arc::ptr_eq(s, &part.sched)) {
                part.notices = n.clone();
                continue;
            }
            executor::check_self_pairs(self.rank, &part.sched)?;
            if with_notices {
                part.notices = Arc::from(identity::notices(&part.sched, self.rank));
            }
            done.push((part.sched.clone(), part.notices.clone()));
        }
        let inbound = identity::inbound(self.rank, done.iter().map(|(s, n)| (&**s, &n[..])));
        let traffic = parts
            .iter()
            .map(|p| Traffic::of(&p.sched, self.rank, &self.topo))
            .fold(Traffic::default(), Traffic::plus);
        // A Reduce between a few processes stages its messages unless `HCCL_SHM_SINGLE_COPY`
        // says otherwise: the senders' copies then overlap the receivers' reductions (see
        // `transport::shm::STAGED_REDUCE_MAX_RANKS` and `STAGED_REDUCE_MIN_RANKS`).
        let staged = matches!(args.coll, Coll::Reduce { .. })
            && self.processes
            && (crate::transport::shm::STAGED_REDUCE_MIN_RANKS
                ..=crate::transport::shm::STAGED_REDUCE_MAX_RANKS)
                .contains(&self.size)
            && self.cfg.env.shm_single_copy.is_none()
            && parts.iter().all(|p| p.sched.algo == "direct");
        Ok(Arc::new(PlanData {
            parts,
            inbound,
            template: identity::template(&args.coll),
            traffic,
            small: None,
            push: false,
            send_hint: SendHint {
                op_bytes: algo::select::model_bytes(&args.coll, ctx.elem, self.size),
                stored: args.coll.stores_only(),
                staged,
                reduce: matches!(args.coll, Coll::Reduce { .. })
                    .then(|| args.op.map(|op| executor::reduce_fn(args.dtype, op)))
                    .flatten(),
            },
        }))
    }

    /// The plan of `args` on the small-message path, when it takes it: every rank on one host
    /// (so every rank decides alike) and no algorithm forced by `HCCL_ALGO`; pairs over eager
    /// links complete one-way messages eagerly (see [`small::eager_link`]).
    fn small_plan(&self, args: &OpArgs, ep: &Endpoint) -> Option<Plan> {
        if self.topo.hosts().len() != 1 || self.cfg.algo_spec.forced(&args.coll).is_some() {
            return None;
        }
        let s = Small::of(&args.coll, args.dtype.size(), self.rank, self.size)?
            .eager_over(|p| small::eager_link(ep.link_info(p)));
        let (sent, recv) = s.traffic();
        Some(Arc::new(PlanData {
            parts: Vec::new(),
            inbound: s.inbound().to_vec(),
            template: identity::template(&args.coll),
            traffic: Traffic {
                sent: [sent, 0],
                recv: [recv, 0],
            },
            small: Some(s),
            push: false,
            send_hint: SendHint::default(),
        }))
    }

    /// The plan of `args` on the write path between threads (see [`push`]), when it takes it:
    /// a large AllReduce, every peer a thread of this process (so every rank decides alike) and
    /// no algorithm forced by `HCCL_ALGO`.
    fn push_plan(&self, args: &OpArgs, ep: &Endpoint) -> Option<Plan> {
        let Coll::AllReduce { count } = args.coll else {
            return None;
        };
        let bytes = count * args.dtype.size();
        if !push::applies(ep, bytes) || self.cfg.algo_spec.forced(&args.coll).is_some() {
            return None;
        }
        // This rank reads its block of every peer's input and writes it into every peer's
        // output.
        let n = self.size as u64;
        let moved = (n - 1) * (bytes as u64 / n);
        Some(Arc::new(PlanData {
            parts: Vec::new(),
            inbound: Vec::new(),
            template: identity::template(&args.coll),
            traffic: Traffic {
                sent: [moved, 0],
                recv: [moved, 0],
            },
            small: None,
            push: true,
            send_hint: SendHint::default(),
        }))
    }

    /// Runs the AllReduce `args` of `count` elements tagged `call` on the write path (see
    /// [`push`]), traced as one step when tracing is on.
    #[allow(clippy::too_many_arguments)]
    fn run_push(
        &self,
        ep: &mut Endpoint,
        stage: &mut Vec<u8>,
        args: &OpArgs,
        red: Option<crate::transport::ReduceFn>,
        dl: Option<Instant>,
        call: &Tag,
        traffic: Traffic,
    ) -> Result<()> {
        let start = self.trace.as_ref().map(|_| Instant::now());
        let count = element_count(&args.coll, args.dtype.size()) as usize;
        let red =
            red.ok_or_else(|| Error::new(ErrorKind::Internal, "AllReduce without an operator"))?;
        // SAFETY: the ffi layer validated both buffers against the operation's count.
        let r = unsafe { push::allreduce(ep, args.send, args.recv, count, &red, stage, dl, call) };
        let others = self.size as u64 - 1;
        let peers = (0..self.size)
            .filter(|&p| p != self.rank)
            .map(|p| (p, traffic.sent[0] / others, traffic.recv[0] / others));
        self.one_step_done(ep, args, push::ALGO, start, r, peers)
    }

    /// The schedules of `args` (see [`Communicator::make_plan`]).
    fn schedules(&self, inner: &mut Inner, args: &OpArgs, ctx: &Ctx) -> Arc<[Part]> {
        let forced = self.cfg.algo_spec.forced(&args.coll);
        let model = inner.model;
        let algo = forced.unwrap_or_else(|| algo::select::choose_with(&args.coll, ctx, &model));
        self.log_choice(inner, args, algo, forced.is_some());
        let whole = algo::build(&args.coll, ctx, algo);
        let limit = self.cfg.buffer_bytes.max(1);
        let one = |sched| {
            Arc::from(vec![Part {
                sched,
                send_off: 0,
                recv_off: 0,
                notices: Arc::from([]),
            }])
        };
        if whole.scratch <= limit {
            return one(Arc::new(whole));
        }
        let most = segment::max_parts(&args.coll);
        let mut parts = whole.scratch.div_ceil(limit).min(most);
        while let Some(segs) = segment::split(&args.coll, ctx.elem, ctx.me, ctx.n, parts) {
            let mut built: Vec<(Coll, Part)> = Vec::with_capacity(segs.len());
            for seg in segs {
                // Equal segments share one schedule.
                let sched = match built.iter().find(|(c, _)| *c == seg.coll) {
                    Some((_, p)) => p.sched.clone(),
                    None => {
                        let a = forced
                            .unwrap_or_else(|| algo::select::choose_with(&seg.coll, ctx, &model));
                        Arc::new(algo::build(&seg.coll, ctx, a))
                    }
                };
                let part = Part {
                    sched,
                    send_off: seg.send_off,
                    recv_off: seg.recv_off,
                    notices: Arc::from([]),
                };
                built.push((seg.coll, part));
            }
            if built.iter().all(|(_, p)| p.sched.scratch <= limit) || parts >= most {
                log::info!(
                    "comm {} rank {}: {} would need {} bytes of scratch in one piece; it runs as \
                     {parts} segments within the {limit} byte staging budget (HCCL_BUFFSIZE)",
                    self.name,
                    self.rank,
                    args.name,
                    whole.scratch,
                );
                return built.into_iter().map(|(_, p)| p).collect();
            }
            parts = (parts * 2).min(most);
        }
        log::warn!(
            "comm {} rank {}: {} needs {} bytes of scratch, above the {limit} byte staging \
             budget, and has no segmented form",
            self.name,
            self.rank,
            args.name,
            whole.scratch,
        );
        one(Arc::new(whole))
    }

    /// The host layout the algorithms use.
    pub fn topology(&self) -> &algo::Topo {
        &self.topo
    }

    /// Logs the algorithm once per (operation, power-of-two size bucket, algorithm).
    fn log_choice(&self, inner: &mut Inner, args: &OpArgs, algo: Algo, forced: bool) {
        let bytes = algo::select::model_bytes(&args.coll, args.dtype.size(), self.size);
        let bucket = usize::BITS - bytes.leading_zeros();
        let k = (args.name, algo.name(), bucket);
        if !inner.logged.contains(&k) {
            inner.logged.push(k);
            log::info!(
                "comm {} rank {}: {} of ~2^{bucket} bytes on {} ranks / {} hosts uses the {} \
                 algorithm ({})",
                self.name,
                self.rank,
                args.name,
                self.size,
                self.topo.hosts().len(),
                algo.name(),
                if forced {
                    "forced by HCCL_ALGO"
                } else {
                    "cheapest under the cost model"
                }
            );
        }
    }
}

/// The algorithms' host layout: the real hosts of the rank table, or the `HCCL_RANK_HOST_MAP`
/// test override when it lists exactly one label per rank of this communicator.
fn algo_topology(name: &str, rank: u32, table: &[RankRecord], cfg: &CommConfig) -> algo::Topo {
    let real = || algo::Topo::from_labels(&table.iter().map(|r| r.loc.host).collect::<Vec<_>>());
    match &cfg.env.rank_host_map {
        Some(map) if map.len() == table.len() => algo::Topo::from_labels(map),
        Some(map) => {
            if rank == 0 {
                log::warn!(
                    "comm {name}: HCCL_RANK_HOST_MAP lists {} ranks, the communicator has {}; \
                     using the real host layout",
                    map.len(),
                    table.len()
                );
            }
            real()
        }
        None => real(),
    }
}

impl Drop for Communicator {
    fn drop(&mut self) {
        if let Some(acc) = Acceptor::existing() {
            acc.forget(self.key);
        }
    }
}

/// Bytes below which messages between processes of one host are staged (the model's level0
/// `staged_below`): shared-memory links read larger ones single-copy unless
/// `HCCL_SHM_SINGLE_COPY=0`; between threads, and with no two processes on a host sharing
/// memory, nothing is staged. Worked out from the rank table every rank holds, so the ranks
/// still choose alike.
fn staged_below(table: &[RankRecord], force_network: bool, single_copy: Option<bool>) -> f64 {
    let mut first = HashMap::new();
    let shm = !force_network
        && table
            .iter()
            .any(|r| *first.entry(r.loc.host).or_insert(r.loc.process) != r.loc.process);
    match (shm, single_copy) {
        (false, _) => 0.0,
        (true, Some(false)) => f64::INFINITY,
        (true, _) => crate::transport::shm::SINGLE_COPY_MIN as f64,
    }
}

/// Whether some host of `table` runs more ranks than the fewest cores any of them reports
/// there. Worked out from the rank table every rank holds, so the ranks choose alike.
fn crowded_host(table: &[RankRecord]) -> bool {
    let mut hosts: HashMap<u64, (u32, u32)> = HashMap::new();
    for r in table {
        let h = hosts.entry(r.loc.host).or_insert((0, u32::MAX));
        h.0 += 1;
        h.1 = h.1.min(r.cores.max(1));
    }
    hosts.values().any(|&(ranks, cores)| ranks > cores)
}

/// `model` with the `HCCL_COST_MODEL` overrides of `cfg` applied, and the network of its
/// `HCCL_TOPOLOGY_FILE` when one is given.
fn with_overrides(model: CostModel, cfg: &CommConfig) -> Result<CostModel> {
    let mut model = match &cfg.env.cost_model {
        None => model,
        Some(t) => model
            .with_overrides(t)
            .map_err(|e| Error::new(ErrorKind::Para, format!("HCCL_COST_MODEL: {e}")))?,
    };
    if let Some(f) = cfg.fabric {
        model.fabric = Some(f);
    }
    Ok(model)
}

/// `a == b`, with the shapes that carry no lists compared inline: every call compares its
/// shape with the previous call's, and the derived comparison is a call over every variant.
/// Forced inline so that a repeat of a list-free shape costs a few compares, not a call.
#[inline(always)]
fn same_coll(a: &Coll, b: &Coll) -> bool {
    match (a, b) {
        (Coll::AllReduce { count: x }, Coll::AllReduce { count: y })
        | (Coll::AllGather { count: x }, Coll::AllGather { count: y })
        | (Coll::ReduceScatter { count: x }, Coll::ReduceScatter { count: y }) => x == y,
        (Coll::Broadcast { count: x, root: r }, Coll::Broadcast { count: y, root: q })
        | (Coll::Reduce { count: x, root: r }, Coll::Reduce { count: y, root: q })
        | (Coll::Scatter { count: x, root: r }, Coll::Scatter { count: y, root: q }) => {
            x == y && r == q
        }
        (Coll::Barrier, Coll::Barrier) => true,
        _ => same_coll_lists(a, b),
    }
}

/// [`same_coll`] for the shapes that carry lists (and any pair of different kinds).
#[inline(never)]
fn same_coll_lists(a: &Coll, b: &Coll) -> bool {
    match (a, b) {
        (
            Coll::AlltoAllV {
                send_counts: sc,
                send_displs: sd,
                recv_counts: rc,
                recv_displs: rd,
            },
            Coll::AlltoAllV {
                send_counts: sc2,
                send_displs: sd2,
                recv_counts: rc2,
                recv_displs: rd2,
            },
        ) => {
            // A few entries each (one per rank): compared in line, not by four `memcmp` calls.
            let same = |x: &[usize], y: &[usize]| x.iter().eq(y);
            same(sc, sc2) && same(sd, sd2) && same(rc, rc2) && same(rd, rd2)
        }
        _ => a == b,
    }
}

/// Whether a collective moves no data at all (every count zero). Point-to-point transfers and
/// barriers are never empty: their messages are what they are about.
fn nothing_to_move(coll: &Coll) -> bool {
    match coll {
        Coll::AllReduce { count }
        | Coll::Broadcast { count, .. }
        | Coll::Reduce { count, .. }
        | Coll::AllGather { count }
        | Coll::ReduceScatter { count }
        | Coll::Scatter { count, .. } => *count == 0,
        Coll::AllGatherV { counts, .. } | Coll::ReduceScatterV { counts, .. } => {
            counts.iter().all(|&c| c == 0)
        }
        Coll::AlltoAllV {
            send_counts,
            recv_counts,
            ..
        } => send_counts.iter().chain(recv_counts).all(|&c| c == 0),
        Coll::P2p { .. } | Coll::Barrier => false,
    }
}

/// How long a rank with an out-of-bounds rank count waits to tell the root.
const REPORT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

fn check_rank(rank: u32, n: u32) -> Result<()> {
    if n == 0 {
        return Err(Error::new(ErrorKind::Para, "rank count must be at least 1"));
    }
    if n > MAX_RANKS {
        return Err(Error::new(
            ErrorKind::Para,
            format!("rank count nRanks={n} exceeds the maximum of {MAX_RANKS} ranks"),
        ));
    }
    if rank >= n {
        return Err(Error::new(
            ErrorKind::Para,
            format!("rank {rank} is out of range for {n} ranks"),
        ));
    }
    Ok(())
}

/// Elements an operation moves, for traces: the count of the plain forms, the sum over blocks of
/// the V forms (sends of AlltoAllV), and of the items' bytes over `elem` for point-to-point.
fn element_count(coll: &Coll, elem: usize) -> u64 {
    let sum = |v: &[usize]| v.iter().map(|&c| c as u64).sum::<u64>();
    match coll {
        Coll::AllReduce { count }
        | Coll::Broadcast { count, .. }
        | Coll::Reduce { count, .. }
        | Coll::AllGather { count }
        | Coll::ReduceScatter { count }
        | Coll::Scatter { count, .. } => *count as u64,
        Coll::AllGatherV { counts, .. } | Coll::ReduceScatterV { counts, .. } => sum(counts),
        Coll::AlltoAllV { send_counts, .. } => sum(send_counts),
        Coll::P2p { items } => {
            items.iter().map(|i| i.bytes as u64).sum::<u64>() / elem.max(1) as u64
        }
        Coll::Barrier => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(rank: u32, host: u64, process: u128) -> RankRecord {
        RankRecord {
            rank,
            data_addr: "127.0.0.1:5000".parse().unwrap(),
            loc: Location { host, process },
            pid: 1,
            cores: 2,
        }
    }

    #[test]
    fn only_processes_sharing_a_host_stage() {
        let threads = [rec(0, 1, 9), rec(1, 1, 9), rec(2, 2, 8), rec(3, 2, 8)];
        let procs = [rec(0, 1, 9), rec(1, 1, 7), rec(2, 2, 8)];
        let min = crate::transport::shm::SINGLE_COPY_MIN as f64;
        assert_eq!(staged_below(&threads, false, None), 0.0);
        assert_eq!(staged_below(&procs, false, None), min);
        assert_eq!(staged_below(&procs, false, Some(true)), min);
        assert_eq!(staged_below(&procs, false, Some(false)), f64::INFINITY);
        // Sockets between the processes of a host: nothing goes through the rings.
        assert_eq!(staged_below(&procs, true, None), 0.0);
    }
}
