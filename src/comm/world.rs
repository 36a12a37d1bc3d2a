//! The launcher's world: how a process started by a launcher (mpirun, torchrun, `hcclrun`)
//! learns its rank, and how the root info reaches every rank.
//!
//! Used by the testers, `hccl_diag` and the Python package. Each process is one rank. Its rank and the number of ranks come from the first
//! of these variable sets that is present:
//!
//! | launcher | rank | ranks | local rank | ranks on this host |
//! |---|---|---|---|---|
//! | ours | `HCCL_RANK` | `HCCL_WORLD_SIZE` | `HCCL_LOCAL_RANK` | `HCCL_LOCAL_WORLD_SIZE` |
//! | Open MPI | `OMPI_COMM_WORLD_RANK` | `OMPI_COMM_WORLD_SIZE` | `OMPI_COMM_WORLD_LOCAL_RANK` | `OMPI_COMM_WORLD_LOCAL_SIZE` |
//! | MPICH/Hydra | `PMI_RANK` | `PMI_SIZE` | `MPI_LOCALRANKID` | `MPI_LOCALNRANKS` |
//! | torchrun | `RANK` | `WORLD_SIZE` | `LOCAL_RANK` | `LOCAL_WORLD_SIZE` |
//! | Slurm (`srun`) | `SLURM_PROCID` | `SLURM_NTASKS` | `SLURM_LOCALID` | `SLURM_STEP_TASKS_PER_NODE` at `SLURM_NODEID`, else `SLURM_NTASKS_PER_NODE` |
//!
//! Slurm's variables count only inside a job step (`SLURM_STEP_NODELIST` set), and after every
//! other launcher's, because `mpirun` or `torchrun` run inside a Slurm allocation see them too.
//! With none of them, the process is a single rank.
//!
//! Rank 0 calls `HcclGetRootInfo` and serves the 4108-byte blob over TCP (the "info server");
//! every other rank connects, retrying, until `HCCL_CONNECT_TIMEOUT` seconds (default 120) have
//! passed. Where the info server listens, first rule that applies:
//!
//! 1. `HCCL_ROOT_ADDR=host:port`: exactly there (`HCCL_ROOT_ADDR=host` alone: that host, port
//!    as in rule 4);
//! 2. `MASTER_ADDR` and `MASTER_PORT`: there, except that under a real torchrun (which sets
//!    `TORCHELASTIC_RUN_ID` and whose agent already listens on `MASTER_PORT`) port
//!    `MASTER_PORT + 1` is used; `MASTER_ADDR` alone: that host, port as in rule 4;
//! 3. under Slurm, on the first host of `SLURM_STEP_NODELIST` (rank 0's node), port as in
//!    rule 4;
//! 4. otherwise on 127.0.0.1 — so all ranks must share one host; when the launcher says they
//!    do not (local size < size) the run stops and asks for `MASTER_ADDR` — at port
//!    `20000 + FNV-1a(job key) mod 10000`, or the first free one of the 8 ports from there.
//!
//! The job key names the job every rank belongs to, so it is built only from what all ranks
//! share, whatever process started each of them: the launcher's job id, the first of
//! `HCCL_JOB_ID`, `OMPI_MCA_orte_ess_jobid`, `OMPI_MCA_ess_base_jobid`, `PMIX_NAMESPACE`,
//! `PMI_KVSNAME`, `TORCHELASTIC_RUN_ID`, `SLURM_JOB_ID` (with `SLURM_STEP_ID`); without one, the
//! rendezvous itself: the port of rule 1 or 2 (the address is implied: a rank that reached the
//! server used it, however it spelled it), or the host named without a port. Only when nothing
//! at all is shared (no job id, no address) is it the parent process id, which the ranks of
//! one launcher on one host have in common; ranks started separately then need `HCCL_JOB_ID`
//! or an address.
//!
//! Clients send the job key, the number of ranks and their rank; the server answers only a
//! matching request and tells a refused client its own key and size, so a neighbouring job on a
//! nearby port is skipped, not joined, and a rank that disagrees with its rank 0 is told why:
//! at an exact address (rules 1 and 2) it fails at once with both keys.

use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::base::limits::{MAX_ENV_VALUE_BYTES, MAX_RANKS};
use crate::comm::slurm;
use crate::ffi::types::HCCL_ROOT_INFO_BYTES;

/// First port of the derived range.
pub const DERIVED_PORT_BASE: u16 = 20000;
/// Width of the derived range.
pub const DERIVED_PORT_SPAN: u16 = 10000;
/// Consecutive ports tried from the derived one.
pub const PORT_TRIES: u16 = 8;

const MAGIC: &[u8; 8] = b"HCCLTI01";
const IO_TIMEOUT: Duration = Duration::from_secs(5);

/// Where the info server listens.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Rendezvous {
    /// Exactly this host and port.
    Fixed {
        /// Host name or address.
        host: String,
        /// Port.
        port: u16,
    },
    /// This host, at the first free of [`PORT_TRIES`] ports from `base`.
    Derived {
        /// Host name or address.
        host: String,
        /// First port tried.
        base: u16,
    },
}

impl Rendezvous {
    fn host(&self) -> &str {
        match self {
            Rendezvous::Fixed { host, .. } | Rendezvous::Derived { host, .. } => host,
        }
    }

    fn ports(&self) -> Vec<u16> {
        match *self {
            Rendezvous::Fixed { port, .. } => vec![port],
            Rendezvous::Derived { base, .. } => (0..PORT_TRIES)
                .filter_map(|k| base.checked_add(k))
                .collect(),
        }
    }
}

/// This process's place in a multi-process run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct World {
    /// This process's rank.
    pub rank: u32,
    /// Number of ranks.
    pub size: u32,
    /// Rank among the ranks of this host, when the launcher says.
    pub local_rank: Option<u32>,
    /// Ranks on this host, when the launcher says.
    pub local_size: Option<u32>,
    /// Which launcher's variables were used.
    pub source: &'static str,
    /// Where the root info is served.
    pub rendezvous: Rendezvous,
    /// Key every rank of the job agrees on.
    pub key: String,
    /// How long to wait for the root info.
    pub timeout: Duration,
}

const SOURCES: [(&str, [&str; 4]); 4] = [
    (
        "hccl",
        [
            "HCCL_RANK",
            "HCCL_WORLD_SIZE",
            "HCCL_LOCAL_RANK",
            "HCCL_LOCAL_WORLD_SIZE",
        ],
    ),
    (
        "openmpi",
        [
            "OMPI_COMM_WORLD_RANK",
            "OMPI_COMM_WORLD_SIZE",
            "OMPI_COMM_WORLD_LOCAL_RANK",
            "OMPI_COMM_WORLD_LOCAL_SIZE",
        ],
    ),
    (
        "mpich",
        ["PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS"],
    ),
    (
        "torchrun",
        ["RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"],
    ),
];

/// Launcher job ids, first found wins; each is the same in every rank of one job.
const JOB_KEYS: [&str; 7] = [
    "HCCL_JOB_ID",
    "OMPI_MCA_orte_ess_jobid",
    "OMPI_MCA_ess_base_jobid",
    "PMIX_NAMESPACE",
    "PMI_KVSNAME",
    "TORCHELASTIC_RUN_ID",
    "SLURM_JOB_ID",
];

/// What the job key is built from: the launcher's job id, else the rendezvous (`host` empty:
/// none given), else the parent process id. Never anything that differs between the ranks of
/// one job however they were started.
fn job_basis(get: &dyn Fn(&str) -> Option<String>, host: &str, port: Option<u16>) -> String {
    let id = JOB_KEYS
        .iter()
        .find_map(|&k| get(k).filter(|v| !v.is_empty()).map(|v| (k, v)));
    match (id, port) {
        (Some(("SLURM_JOB_ID", job)), _) => {
            let step = get("SLURM_STEP_ID").unwrap_or_default();
            format!("job:slurm.{job}.{step}")
        }
        (Some((_, job)), _) => format!("job:{job}"),
        (None, Some(port)) => format!("port:{port}"),
        (None, None) if !host.is_empty() => format!("host:{host}"),
        // SAFETY: getppid has no preconditions.
        (None, None) => format!("ppid:{}", unsafe { libc::getppid() }),
    }
}

/// 64-bit FNV-1a.
pub fn fnv1a(s: &str) -> u64 {
    s.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ b as u64).wrapping_mul(0x0100_0000_01b3)
    })
}

fn num(get: &dyn Fn(&str) -> Option<String>, name: &str) -> Result<Option<u32>, String> {
    match get(name) {
        None => Ok(None),
        Some(v) => v
            .trim()
            .parse::<u32>()
            .map(Some)
            .map_err(|_| format!("environment variable {name}='{v}' is not a number")),
    }
}

fn split_host_port(s: &str) -> (String, Option<u16>) {
    if let Some(rest) = s.strip_prefix('[') {
        if let Some((h, p)) = rest.split_once(']') {
            return (
                h.to_string(),
                p.strip_prefix(':').and_then(|p| p.parse().ok()),
            );
        }
    }
    match s.rsplit_once(':') {
        Some((h, p)) if !h.contains(':') => (h.to_string(), p.parse().ok()),
        _ => (s.to_string(), None),
    }
}

/// Reads the launch environment through `get` (the process environment in real runs).
/// `Ok(None)`: no launcher variables, a single-rank run. A world of more than
/// [`MAX_RANKS`] ranks, or a variable longer than [`MAX_ENV_VALUE_BYTES`], is an error.
pub fn detect(get: &dyn Fn(&str) -> Option<String>) -> Result<Option<World>, String> {
    let too_long = std::cell::Cell::new(None);
    let bounded = |name: &str| {
        let v = get(name)?;
        if v.len() > MAX_ENV_VALUE_BYTES {
            too_long.set(Some(format!(
                "environment variable {name} is {} bytes long; at most {MAX_ENV_VALUE_BYTES} \
                 are accepted",
                v.len()
            )));
            return None;
        }
        Some(v)
    };
    let found = detect_bounded(&bounded);
    match too_long.take() {
        Some(e) => Err(e),
        None => found,
    }
}

fn detect_bounded(get: &dyn Fn(&str) -> Option<String>) -> Result<Option<World>, String> {
    let mut found: Option<Found> = None;
    for (source, [r, s, lr, ls]) in SOURCES {
        if let (Some(rank), Some(size)) = (num(get, r)?, num(get, s)?) {
            found = Some((source, rank, size, num(get, lr)?, num(get, ls)?, r, s));
            break;
        }
    }
    if found.is_none() {
        found = slurm_step(get)?;
    }
    let Some((source, rank, size, local_rank, local_size, rv, sv)) = found else {
        return Ok(None);
    };
    if size == 0 || size > MAX_RANKS {
        return Err(format!("{sv}={size} must be in 1..={MAX_RANKS}"));
    }
    if rank >= size {
        return Err(format!("{rv}={rank} is out of range for {sv}={size}"));
    }
    // Where the info server is, as far as the environment says (the port may be derived).
    let master = get("MASTER_ADDR").filter(|v| !v.is_empty());
    let (host, port) = if let Some(addr) = get("HCCL_ROOT_ADDR").filter(|v| !v.is_empty()) {
        split_host_port(&addr)
    } else if let Some(host) = master {
        let port = match num(get, "MASTER_PORT")? {
            Some(p) => {
                let bump = u16::from(get("TORCHELASTIC_RUN_ID").is_some());
                let port = u16::try_from(p)
                    .ok()
                    .and_then(|p| p.checked_add(bump))
                    .ok_or_else(|| format!("MASTER_PORT={p} is not a valid port"))?;
                Some(port)
            }
            None => None,
        };
        (host, port)
    } else if source == "slurm" {
        // Rank 0 is the first task of the step, which Slurm places on the first node.
        let list = get("SLURM_STEP_NODELIST").unwrap_or_default();
        let host = slurm::first_host(&list).map_err(|e| format!("SLURM_STEP_NODELIST: {e}"))?;
        (host, None)
    } else {
        if local_size.is_some_and(|l| l < size) {
            return Err(format!(
                "the {size} ranks span several hosts ({} here): set MASTER_ADDR (and \
                 MASTER_PORT) or HCCL_ROOT_ADDR to rank 0's host so the root info can be shipped",
                local_size.unwrap_or(0)
            ));
        }
        (String::new(), None)
    };
    let key = format!("{source}/{}/{size}", job_basis(get, &host, port));
    let host = if host.is_empty() {
        Ipv4Addr::LOCALHOST.to_string()
    } else {
        host
    };
    let rendezvous = match port {
        Some(port) => Rendezvous::Fixed { host, port },
        None => Rendezvous::Derived {
            host,
            base: DERIVED_PORT_BASE + (fnv1a(&key) % DERIVED_PORT_SPAN as u64) as u16,
        },
    };
    let secs = get("HCCL_CONNECT_TIMEOUT")
        .and_then(|v| v.trim().parse::<u64>().ok())
        .filter(|&s| s > 0)
        .unwrap_or(120);
    Ok(Some(World {
        rank,
        size,
        local_rank,
        local_size,
        source,
        rendezvous,
        key,
        timeout: Duration::from_secs(secs),
    }))
}

/// What [`detect_bounded`] finds for a launcher: source, rank, size, local rank, local size,
/// and the names of the rank and size variables (for messages).
type Found = (
    &'static str,
    u32,
    u32,
    Option<u32>,
    Option<u32>,
    &'static str,
    &'static str,
);

/// A task of a Slurm job step (started by `srun`): `SLURM_PROCID` of `SLURM_NTASKS`, local rank
/// `SLURM_LOCALID`, and this node's task count from `SLURM_STEP_TASKS_PER_NODE` (indexed by
/// `SLURM_NODEID`), else `SLURM_NTASKS_PER_NODE`. Only inside a step: a batch script also has
/// `SLURM_PROCID` and `SLURM_NTASKS` but no `SLURM_STEP_NODELIST`, and is one process, not a
/// rank of many.
fn slurm_step(get: &dyn Fn(&str) -> Option<String>) -> Result<Option<Found>, String> {
    let (rv, sv) = ("SLURM_PROCID", "SLURM_NTASKS");
    if get("SLURM_STEP_NODELIST").is_none() {
        return Ok(None);
    }
    let (Some(rank), Some(size)) = (num(get, rv)?, num(get, sv)?) else {
        return Ok(None);
    };
    let local_size = match (get("SLURM_STEP_TASKS_PER_NODE"), num(get, "SLURM_NODEID")?) {
        (Some(per_node), Some(node)) => Some(
            slurm::tasks_on_node(&per_node, node)
                .map_err(|e| format!("SLURM_STEP_TASKS_PER_NODE: {e}"))?,
        ),
        _ => num(get, "SLURM_NTASKS_PER_NODE")?,
    };
    Ok(Some((
        "slurm",
        rank,
        size,
        num(get, "SLURM_LOCALID")?,
        local_size,
        rv,
        sv,
    )))
}

/// The process environment as a lookup function for [`detect`].
pub fn process_env(name: &str) -> Option<String> {
    std::env::var(name).ok()
}

fn bind_addr(host: &str) -> IpAddr {
    match host.parse::<IpAddr>() {
        Ok(ip) if ip.is_loopback() => ip,
        Ok(IpAddr::V6(_)) => IpAddr::V6(Ipv6Addr::UNSPECIFIED),
        _ => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
    }
}

/// The info server of rank 0, running until every other rank has the blob or time is up.
pub struct InfoServer {
    handle: JoinHandle<Result<(), String>>,
    /// The address it listens on.
    pub addr: SocketAddr,
}

impl InfoServer {
    /// Binds per `w.rendezvous` and starts serving `blob` in a thread.
    pub fn start(w: &World, blob: [u8; HCCL_ROOT_INFO_BYTES]) -> Result<InfoServer, String> {
        let ip = bind_addr(w.rendezvous.host());
        let mut last = String::new();
        let mut listener = None;
        for port in w.rendezvous.ports() {
            match TcpListener::bind((ip, port)) {
                Ok(l) => {
                    listener = Some(l);
                    break;
                }
                Err(e) => last = format!("{}: {e}", std::net::SocketAddr::new(ip, port)),
            }
        }
        let listener = listener.ok_or_else(|| {
            format!("info server: cannot listen ({last}); set MASTER_PORT to a free port")
        })?;
        let addr = listener.local_addr().map_err(|e| e.to_string())?;
        let (key, size, deadline) = (w.key.clone(), w.size, Instant::now() + w.timeout);
        let handle = std::thread::Builder::new()
            .name("hccl-world-info".into())
            .spawn(move || serve(listener, &blob, &key, size, deadline))
            .map_err(|e| e.to_string())?;
        Ok(InfoServer { handle, addr })
    }

    /// Waits for the server to finish (it stops by itself at its deadline).
    pub fn join(self) -> Result<(), String> {
        self.handle
            .join()
            .unwrap_or_else(|_| Err("info server panicked".into()))
    }

    /// Waits for the server after rank 0's own initialisation failed with `e`, and adds what
    /// the server saw (ranks that never came, or were refused as another job) to `e`.
    pub fn explain(self, e: String) -> String {
        match self.join() {
            Ok(()) => e,
            Err(s) => format!("{e}; {s}"),
        }
    }
}

fn serve(
    l: TcpListener,
    blob: &[u8],
    key: &str,
    size: u32,
    deadline: Instant,
) -> Result<(), String> {
    l.set_nonblocking(true).map_err(|e| e.to_string())?;
    let mut served = vec![false; size as usize];
    served[0] = true;
    let mut left = size as usize - 1;
    // The last request refused, to explain a timeout: ranks that disagree about the job.
    let mut refused: Option<(SocketAddr, Hello)> = None;
    while left > 0 {
        if Instant::now() >= deadline {
            let why = match &refused {
                Some((from, h)) => format!(
                    "; refused {from}, which asked for job '{}' of {} ranks (rank {}) while this \
                     is job '{key}' of {size}: set HCCL_JOB_ID to one value on every rank",
                    h.key, h.size, h.rank
                ),
                None => String::new(),
            };
            return Err(format!(
                "info server: {left} rank(s) never fetched the root info{why}"
            ));
        }
        match l.accept() {
            Ok((s, from)) => match answer(s, blob, key, size) {
                Some(Ok(r)) if !served[r as usize] => {
                    served[r as usize] = true;
                    left -= 1;
                }
                Some(Err(h)) => refused = Some((from, h)),
                Some(Ok(_)) | None => {}
            },
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(5))
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(format!("info server: accept: {e}")),
        }
    }
    Ok(())
}

/// A request: which job, how many ranks, which rank.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Hello {
    key: String,
    size: u32,
    rank: u32,
}

impl Hello {
    /// `MAGIC`, size, rank, key length, key.
    fn encode(&self) -> Vec<u8> {
        let mut m = MAGIC.to_vec();
        m.extend_from_slice(&self.size.to_le_bytes());
        m.extend_from_slice(&self.rank.to_le_bytes());
        m.extend_from_slice(&(self.key.len() as u16).to_le_bytes());
        m.extend_from_slice(self.key.as_bytes());
        m
    }

    /// Reads what [`Hello::encode`] wrote, after its `MAGIC`.
    fn read(s: &mut impl Read) -> std::io::Result<Hello> {
        let mut head = [0u8; 10];
        s.read_exact(&mut head)?;
        let klen = u16::from_le_bytes([head[8], head[9]]) as usize;
        let mut k = vec![0u8; klen];
        s.read_exact(&mut k)?;
        Ok(Hello {
            key: String::from_utf8_lossy(&k).into_owned(),
            size: u32::from_le_bytes([head[0], head[1], head[2], head[3]]),
            rank: u32::from_le_bytes([head[4], head[5], head[6], head[7]]),
        })
    }
}

/// Answers one request: `Some(Ok(rank))` when that rank got the blob, `Some(Err(request))`
/// when it was refused (it is told this server's job), `None` when it was not a request.
fn answer(mut s: TcpStream, blob: &[u8], key: &str, size: u32) -> Option<Result<u32, Hello>> {
    s.set_nonblocking(false).ok()?;
    s.set_read_timeout(Some(IO_TIMEOUT)).ok()?;
    s.set_write_timeout(Some(IO_TIMEOUT)).ok()?;
    let mut magic = [0u8; 8];
    s.read_exact(&mut magic).ok()?;
    if &magic != MAGIC {
        return None;
    }
    let h = Hello::read(&mut s).ok()?;
    let ok = h.size == size && h.key == key && h.rank < size;
    let mut reply = MAGIC.to_vec();
    if ok {
        reply.push(0);
        reply.extend_from_slice(blob);
    } else {
        // Refused: say whose server this is, so the client can explain.
        reply.push(1);
        reply.extend_from_slice(
            &Hello {
                key: key.to_string(),
                size,
                rank: 0,
            }
            .encode()[MAGIC.len()..],
        );
    }
    s.write_all(&reply).ok()?;
    Some(if ok { Ok(h.rank) } else { Err(h) })
}

/// Fetches the root info from rank 0's info server, retrying until `w.timeout`. A server that
/// refuses the request at an exact address (`Rendezvous::Fixed`) is this job's rank 0
/// disagreeing about the job, so that fails at once, naming both jobs; among derived ports a
/// refusal is a neighbouring job and the search goes on.
pub fn fetch(w: &World) -> Result<[u8; HCCL_ROOT_INFO_BYTES], String> {
    let deadline = Instant::now() + w.timeout;
    let host = w.rendezvous.host();
    let ports = w.rendezvous.ports();
    let fixed = matches!(w.rendezvous, Rendezvous::Fixed { .. });
    let mut last = String::from("no attempt");
    let mut refused: Option<String> = None;
    loop {
        for &port in &ports {
            let addrs = match (host, port).to_socket_addrs() {
                Ok(a) => a.collect::<Vec<_>>(),
                Err(e) => {
                    last = format!("{host}: {e}");
                    continue;
                }
            };
            for a in addrs {
                let left = deadline.saturating_duration_since(Instant::now());
                let t = left
                    .min(Duration::from_secs(1))
                    .max(Duration::from_millis(10));
                match TcpStream::connect_timeout(&a, t).and_then(|s| request(s, w)) {
                    Ok(Ok(blob)) => return Ok(blob),
                    Ok(Err(theirs)) => {
                        let why = format!(
                            "the info server at {a} refused rank {}: it serves job '{}' of {} \
                             ranks, this rank is in job '{}' of {} ranks",
                            w.rank, theirs.key, theirs.size, w.key, w.size
                        );
                        if fixed {
                            return Err(format!(
                                "{why}; every rank must agree on the number of ranks and the \
                                 job (set HCCL_JOB_ID to one value on every rank, or unset it \
                                 everywhere)"
                            ));
                        }
                        refused = Some(why);
                    }
                    Err(e) => last = format!("{a}: {e}"),
                }
            }
        }
        if Instant::now() >= deadline {
            let mut msg = format!(
                "rank {}: no root info from rank 0 at {host} ports {:?} within {:?} (last: {last})",
                w.rank, ports, w.timeout
            );
            if let Some(why) = refused {
                msg.push_str(&format!("; {why} (another job, or ranks that disagree)"));
            }
            if w.key.contains("/ppid:") {
                msg.push_str(
                    "; with no launcher job id and no MASTER_ADDR/MASTER_PORT or HCCL_ROOT_ADDR \
                     the job is known only by the parent process, so ranks started separately \
                     never meet: set HCCL_JOB_ID to one value on every rank, or MASTER_ADDR and \
                     MASTER_PORT",
                );
            } else {
                msg.push_str("; check MASTER_ADDR/MASTER_PORT or HCCL_ROOT_ADDR");
            }
            return Err(msg);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// One request: `Ok(Ok(blob))`, or `Ok(Err(server's job))` when refused.
fn request(
    mut s: TcpStream,
    w: &World,
) -> std::io::Result<Result<[u8; HCCL_ROOT_INFO_BYTES], Hello>> {
    s.set_read_timeout(Some(IO_TIMEOUT))?;
    s.set_write_timeout(Some(IO_TIMEOUT))?;
    let me = Hello {
        key: w.key.clone(),
        size: w.size,
        rank: w.rank,
    };
    s.write_all(&me.encode())?;
    let mut head = [0u8; 9];
    s.read_exact(&mut head)?;
    if &head[..8] != MAGIC {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            "not an info server",
        ));
    }
    if head[8] != 0 {
        return Ok(Err(Hello::read(&mut s)?));
    }
    let mut blob = [0u8; HCCL_ROOT_INFO_BYTES];
    s.read_exact(&mut blob)?;
    Ok(Ok(blob))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let m: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |k| m.get(k).cloned()
    }

    #[test]
    fn no_launcher_is_single_rank() {
        assert_eq!(detect(&env(&[])).unwrap(), None);
    }

    /// The variables `srun -N 2 -n 6` gives the task of rank 4 (second node, 3 tasks there).
    const SRUN: [(&str, &str); 9] = [
        ("SLURM_PROCID", "4"),
        ("SLURM_NTASKS", "6"),
        ("SLURM_LOCALID", "1"),
        ("SLURM_NODEID", "1"),
        ("SLURM_STEP_TASKS_PER_NODE", "3(x2)"),
        ("SLURM_STEP_NODELIST", "node[07-08]"),
        ("SLURM_JOB_ID", "4242"),
        ("SLURM_STEP_ID", "0"),
        ("SLURM_NTASKS_PER_NODE", "9"),
    ];

    #[test]
    fn slurm_step_gives_ranks_and_the_first_node_as_rendezvous() {
        let w = detect(&env(&SRUN)).unwrap().unwrap();
        assert_eq!(
            (w.rank, w.size, w.local_rank, w.local_size, w.source),
            (4, 6, Some(1), Some(3), "slurm")
        );
        assert_eq!(w.key, "slurm/job:slurm.4242.0/6");
        let Rendezvous::Derived { host, base } = &w.rendezvous else {
            panic!("expected a derived port: {:?}", w.rendezvous);
        };
        assert_eq!(host, "node07");
        assert_eq!(
            *base,
            DERIVED_PORT_BASE + (fnv1a(&w.key) % DERIVED_PORT_SPAN as u64) as u16
        );
        // Uneven nodes: the count of this node, not the first.
        let mut uneven = SRUN.to_vec();
        uneven[4] = ("SLURM_STEP_TASKS_PER_NODE", "4,2");
        assert_eq!(detect(&env(&uneven)).unwrap().unwrap().local_size, Some(2));
        // Without the step's per-node counts, --ntasks-per-node's value.
        let fallback: Vec<_> = SRUN
            .iter()
            .copied()
            .filter(|(k, _)| *k != "SLURM_STEP_TASKS_PER_NODE")
            .collect();
        assert_eq!(
            detect(&env(&fallback)).unwrap().unwrap().local_size,
            Some(9)
        );
        // An explicit address still wins.
        let mut fixed = SRUN.to_vec();
        fixed.push(("HCCL_ROOT_ADDR", "10.1.2.3:5000"));
        assert_eq!(
            detect(&env(&fixed)).unwrap().unwrap().rendezvous,
            Rendezvous::Fixed {
                host: "10.1.2.3".into(),
                port: 5000
            }
        );
    }

    #[test]
    fn slurm_counts_only_inside_a_step_and_after_other_launchers() {
        // A batch script: SLURM_PROCID and SLURM_NTASKS, but no step.
        let batch: Vec<_> = SRUN
            .iter()
            .copied()
            .filter(|(k, _)| *k != "SLURM_STEP_NODELIST")
            .collect();
        assert_eq!(detect(&env(&batch)).unwrap(), None);
        // mpirun inside an allocation: Open MPI's variables win.
        let mut mpi = SRUN.to_vec();
        mpi.extend([
            ("OMPI_COMM_WORLD_RANK", "0"),
            ("OMPI_COMM_WORLD_SIZE", "2"),
            ("OMPI_COMM_WORLD_LOCAL_SIZE", "2"),
        ]);
        let w = detect(&env(&mpi)).unwrap().unwrap();
        assert_eq!((w.rank, w.size, w.source), (0, 2, "openmpi"));
        assert_eq!(w.rendezvous.host(), "127.0.0.1");
    }

    #[test]
    fn bad_slurm_values_are_errors_naming_the_variable() {
        let with = |k: &'static str, v: &'static str| {
            let mut e = SRUN.to_vec();
            e.retain(|(n, _)| *n != k);
            e.push((k, v));
            detect(&env(&e)).unwrap_err()
        };
        assert!(with("SLURM_PROCID", "x").contains("SLURM_PROCID"));
        assert!(with("SLURM_PROCID", "6").contains("out of range for SLURM_NTASKS=6"));
        assert!(with("SLURM_NTASKS", "0").contains("SLURM_NTASKS=0"));
        assert!(with("SLURM_STEP_NODELIST", "node[07-").contains("SLURM_STEP_NODELIST"));
        assert!(with("SLURM_STEP_TASKS_PER_NODE", "3(x1)").contains("no entry for node 1"));
        assert!(with("SLURM_LOCALID", "-1").contains("SLURM_LOCALID"));
    }

    #[test]
    fn openmpi_single_host_derives_port_from_job() {
        let e = env(&[
            ("OMPI_COMM_WORLD_RANK", "1"),
            ("OMPI_COMM_WORLD_SIZE", "4"),
            ("OMPI_COMM_WORLD_LOCAL_SIZE", "4"),
            ("OMPI_MCA_orte_ess_jobid", "123456"),
        ]);
        let w = detect(&e).unwrap().unwrap();
        assert_eq!((w.rank, w.size, w.source), (1, 4, "openmpi"));
        let Rendezvous::Derived { host, base } = w.rendezvous else {
            panic!("expected a derived port");
        };
        assert_eq!(host, "127.0.0.1");
        assert!((DERIVED_PORT_BASE..DERIVED_PORT_BASE + DERIVED_PORT_SPAN).contains(&base));
        assert_eq!(w.key, "openmpi/job:123456/4");
    }

    #[test]
    fn job_key_is_what_every_rank_shares() {
        let key = |pairs: &[(&str, &str)]| detect(&env(pairs)).unwrap().unwrap().key;
        let torch = [
            ("RANK", "1"),
            ("WORLD_SIZE", "2"),
            ("MASTER_ADDR", "node0"),
            ("MASTER_PORT", "29500"),
        ];
        // Rendezvous port, whatever the spelling of the address or the parent process.
        assert_eq!(key(&torch), "torchrun/port:29500/2");
        let mut other_spelling = torch.to_vec();
        other_spelling[2] = ("MASTER_ADDR", "10.0.0.1");
        assert_eq!(key(&other_spelling), key(&torch));
        assert_eq!(
            key(&[
                ("HCCL_RANK", "0"),
                ("HCCL_WORLD_SIZE", "2"),
                ("HCCL_ROOT_ADDR", "10.0.0.1:4000"),
            ]),
            "hccl/port:4000/2"
        );
        assert_eq!(
            key(&[("RANK", "0"), ("WORLD_SIZE", "2"), ("MASTER_ADDR", "node0")]),
            "torchrun/host:node0/2"
        );
        // A launcher's job id wins over the rendezvous.
        let mut elastic = torch.to_vec();
        elastic.push(("TORCHELASTIC_RUN_ID", "run7"));
        assert_eq!(key(&elastic), "torchrun/job:run7/2");
        let mut slurm = torch.to_vec();
        slurm.extend([("SLURM_JOB_ID", "88"), ("SLURM_STEP_ID", "3")]);
        assert_eq!(key(&slurm), "torchrun/job:slurm.88.3/2");
        // Nothing shared at all: the parent process (one launcher on one host).
        let bare = key(&[("RANK", "0"), ("WORLD_SIZE", "2")]);
        // SAFETY: getppid has no preconditions.
        let ppid = unsafe { libc::getppid() };
        assert_eq!(bare, format!("torchrun/ppid:{ppid}/2"));
    }

    #[test]
    fn multi_host_without_master_addr_is_refused() {
        let e = env(&[
            ("PMI_RANK", "0"),
            ("PMI_SIZE", "4"),
            ("MPI_LOCALNRANKS", "2"),
        ]);
        assert!(detect(&e).unwrap_err().contains("MASTER_ADDR"));
    }

    #[test]
    fn torchrun_uses_master_port_and_skips_the_agent_port() {
        let base = [
            ("RANK", "0"),
            ("WORLD_SIZE", "2"),
            ("MASTER_ADDR", "10.0.0.1"),
            ("MASTER_PORT", "29500"),
        ];
        let w = detect(&env(&base)).unwrap().unwrap();
        assert_eq!(
            w.rendezvous,
            Rendezvous::Fixed {
                host: "10.0.0.1".into(),
                port: 29500
            }
        );
        let mut with_agent = base.to_vec();
        with_agent.push(("TORCHELASTIC_RUN_ID", "abc"));
        let w = detect(&env(&with_agent)).unwrap().unwrap();
        assert!(matches!(
            w.rendezvous,
            Rendezvous::Fixed { port: 29501, .. }
        ));
    }

    #[test]
    fn own_variables_win_and_root_addr_parses() {
        let e = env(&[
            ("HCCL_RANK", "2"),
            ("HCCL_WORLD_SIZE", "3"),
            ("HCCL_ROOT_ADDR", "[::1]:4000"),
            ("RANK", "0"),
            ("WORLD_SIZE", "2"),
        ]);
        let w = detect(&e).unwrap().unwrap();
        assert_eq!((w.rank, w.size, w.source), (2, 3, "hccl"));
        assert_eq!(
            w.rendezvous,
            Rendezvous::Fixed {
                host: "::1".into(),
                port: 4000
            }
        );
    }

    #[test]
    fn bad_values_are_errors() {
        assert!(detect(&env(&[("RANK", "x"), ("WORLD_SIZE", "2")])).is_err());
        assert!(detect(&env(&[("RANK", "2"), ("WORLD_SIZE", "2")])).is_err());
        // The torchrun port bump must not overflow (u32 + 1 or port 65535 + 1).
        let e = detect(&env(&[
            ("RANK", "0"),
            ("WORLD_SIZE", "1"),
            ("MASTER_ADDR", "h"),
            ("MASTER_PORT", "65535"),
            ("TORCHELASTIC_RUN_ID", "x"),
        ]));
        assert!(e.unwrap_err().contains("MASTER_PORT=65535"));
        let e = detect(&env(&[
            ("RANK", "0"),
            ("WORLD_SIZE", "1"),
            ("MASTER_ADDR", "h"),
            ("MASTER_PORT", "4294967295"),
            ("TORCHELASTIC_RUN_ID", "x"),
        ]));
        assert!(e.unwrap_err().contains("not a valid port"));
    }

    #[test]
    fn world_size_and_value_lengths_at_and_past_the_bound() {
        let at = MAX_RANKS.to_string();
        let past = (MAX_RANKS + 1).to_string();
        let w = detect(&env(&[("RANK", "0"), ("WORLD_SIZE", &at)]))
            .unwrap()
            .unwrap();
        assert_eq!(w.size, MAX_RANKS);
        let e = detect(&env(&[("RANK", "0"), ("WORLD_SIZE", &past)])).unwrap_err();
        assert!(e.contains("WORLD_SIZE=65537"), "{e}");
        let job_at = "j".repeat(MAX_ENV_VALUE_BYTES);
        let job_past = "j".repeat(MAX_ENV_VALUE_BYTES + 1);
        let base = [("RANK", "0"), ("WORLD_SIZE", "1")];
        let w = detect(&env(&[base[0], base[1], ("HCCL_JOB_ID", &job_at)])).unwrap();
        assert!(w.unwrap().key.contains(&job_at));
        let e = detect(&env(&[base[0], base[1], ("HCCL_JOB_ID", &job_past)])).unwrap_err();
        assert!(e.contains("HCCL_JOB_ID is 4097 bytes"), "{e}");
    }

    #[test]
    fn server_serves_matching_ranks_and_skips_foreign_jobs() {
        let w = |rank, key: &str| World {
            rank,
            size: 3,
            local_rank: None,
            local_size: None,
            source: "hccl",
            rendezvous: Rendezvous::Fixed {
                host: "127.0.0.1".into(),
                port: 0,
            },
            key: key.into(),
            timeout: Duration::from_secs(5),
        };
        let blob = [7u8; HCCL_ROOT_INFO_BYTES];
        let srv = InfoServer::start(&w(0, "job"), blob).unwrap();
        let at = Rendezvous::Fixed {
            host: "127.0.0.1".into(),
            port: srv.addr.port(),
        };
        // At an exact address a refusal is final and names both jobs.
        let mut foreign = w(1, "other");
        foreign.rendezvous = at.clone();
        let t = Instant::now();
        let e = fetch(&foreign).unwrap_err();
        assert!(t.elapsed() < foreign.timeout, "{e}");
        assert!(
            e.contains("refused rank 1") && e.contains("'job' of 3") && e.contains("'other' of 3"),
            "{e}"
        );
        let mut wrong_size = w(1, "job");
        wrong_size.size = 4;
        wrong_size.rendezvous = at.clone();
        assert!(fetch(&wrong_size).unwrap_err().contains("'job' of 3"));
        for r in 1..3 {
            let mut c = w(r, "job");
            c.rendezvous = at.clone();
            assert_eq!(fetch(&c).unwrap(), blob);
        }
        srv.join().unwrap();
    }

    #[test]
    fn server_timeout_names_the_refused_job() {
        let w = |rank, key: &str, port| World {
            rank,
            size: 2,
            local_rank: None,
            local_size: None,
            source: "hccl",
            rendezvous: Rendezvous::Fixed {
                host: "127.0.0.1".into(),
                port,
            },
            key: key.into(),
            timeout: Duration::from_secs(2),
        };
        let srv = InfoServer::start(&w(0, "ours", 0), [1u8; HCCL_ROOT_INFO_BYTES]).unwrap();
        let e = fetch(&w(1, "theirs", srv.addr.port())).unwrap_err();
        assert!(e.contains("'ours' of 2"), "{e}");
        let e = srv.join().unwrap_err();
        assert!(
            e.contains("never fetched") && e.contains("job 'theirs' of 2 ranks (rank 1)"),
            "{e}"
        );
    }

    #[test]
    fn derived_ports_skip_a_neighbouring_job() {
        // A neighbouring job's server holds the first derived port; this job's rank 0 takes a
        // later one, and its rank 1, refused by the neighbour, goes on and finds it.
        let world = |rank, key: &str, rendezvous| World {
            rank,
            size: 2,
            local_rank: None,
            local_size: None,
            source: "hccl",
            rendezvous,
            key: key.into(),
            timeout: Duration::from_secs(10),
        };
        let any = Rendezvous::Fixed {
            host: "127.0.0.1".into(),
            port: 0,
        };
        let neighbour =
            InfoServer::start(&world(0, "neighbour", any), [2u8; HCCL_ROOT_INFO_BYTES]).unwrap();
        let derived = Rendezvous::Derived {
            host: "127.0.0.1".into(),
            base: neighbour.addr.port(),
        };
        let mine = InfoServer::start(
            &world(0, "mine", derived.clone()),
            [3u8; HCCL_ROOT_INFO_BYTES],
        )
        .unwrap();
        assert_ne!(mine.addr.port(), neighbour.addr.port());
        assert_eq!(
            fetch(&world(1, "mine", derived.clone())).unwrap(),
            [3u8; HCCL_ROOT_INFO_BYTES]
        );
        mine.join().unwrap();
        assert_eq!(
            fetch(&world(1, "neighbour", derived)).unwrap(),
            [2u8; HCCL_ROOT_INFO_BYTES]
        );
        neighbour.join().unwrap();
    }
}
