//! `hccl_diag`: is this host (or cluster) able to run HCCL jobs, and how fast are its links?
//!
//! Two ways to start it:
//! - `hccl_diag --size N` on one host: starts N ranks of itself through [`crate::launcher`];
//! - under any launcher [`hccl::comm::world`] understands (`mpirun`, `hcclrun`, torchrun-style
//!   `RANK`/`WORLD_SIZE`/`MASTER_ADDR`), one rank per process across hosts; with
//!   `--rank-table FILE` the communicator comes from the rank table instead of the root info.
//!
//! Every rank first inspects its host (chosen interface and address, free ports of
//! `HCCL_IF_BASE_PORT`'s range and of `HCCL_HOST_SOCKET_PORT_RANGE`, `/dev/shm`, single-copy
//! `process_vm_readv`, RDMA devices, host name resolution). Then the ranks build a communicator
//! with the library's own API, exchange those findings with `HcclAllGather`, and test every pair
//! of ranks with `HcclSend`/`HcclRecv`: a small-message ping-pong (latency) and a large one
//! (bandwidth), each checked byte for byte. Rank 0 prints the findings, the per-pair matrices and
//! a verdict; a failure comes with a hint (port blocked, name not resolvable, interface
//! mismatch, timeout). Exit status 0 means healthy, 1 a failed check, 2 a usage error; the
//! verdict is rank 0's status (other ranks fail only on errors of their own), so a launcher that
//! stops the job at the first failure still lets rank 0 print the report.

use std::ffi::{CString, OsString};
use std::fmt::Write as _;
use std::net::{IpAddr, Ipv4Addr, TcpListener, ToSocketAddrs};
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::process::ExitCode;
use std::ptr::null_mut;
use std::time::{Duration, Instant};

use clap::Parser;
use hccl::base::env::{EnvConfig, IF_PORT_COUNT};
use hccl::ffi::coll_api::{HcclAllGather, HcclRecv, HcclSend};
use hccl::ffi::comm_api::HcclCommInitClusterInfo;
use hccl::ffi::types::{HcclComm, HcclRootInfo, HCCL_ROOT_INFO_BYTES};

use hccl::comm::world::{self, World};

const UINT8: u32 = 7;
/// Bytes of one rank's host record in the exchange.
const RECORD_BYTES: usize = 512;
/// Environment variable that makes rank 1 corrupt what it received from rank 0 (value
/// `corrupt`), so tests can prove that a damaged link is reported.
pub const FAULT_ENV: &str = "HCCL_DIAG_FAULT_INJECT";

/// Command-line options.
#[derive(Clone, Debug, PartialEq)]
pub struct Options {
    /// Ranks to start on this host when no launcher started us.
    pub size: u32,
    /// Rank table to build the communicator from.
    pub rank_table: Option<PathBuf>,
    /// Message size of the bandwidth test.
    pub bytes: u64,
    /// Round trips of the latency test.
    pub iters: u32,
    /// Connect and execution timeout given to the library.
    pub timeout: Duration,
}

/// `hccl_diag`'s flags.
#[derive(Parser, Debug)]
#[command(
    name = "hccl_diag",
    about = "Checks this host, then bootstraps a communicator and tests every pair of ranks.\n\
             Alone: starts --size ranks on this host. Under mpirun, srun, hcclrun or with\n\
             RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT: one rank per process, across hosts.",
    after_help = "Exit status: 0 healthy, 1 a check failed, 2 usage error.",
    disable_version_flag = true
)]
struct Args {
    /// Ranks to start on this host
    #[arg(short = 'n', long = "size", value_name = "N", default_value_t = 2,
          value_parser = clap::value_parser!(u32).range(1..=64))]
    size: u32,
    /// Build the communicator from this rank table (HcclCommInitClusterInfo)
    #[arg(long, value_name = "FILE")]
    rank_table: Option<PathBuf>,
    /// Bandwidth message size (K, M, G suffixes), at most 1G
    #[arg(long, value_name = "SIZE", default_value = "4M", value_parser = message_size)]
    bytes: u64,
    /// Latency round trips per pair
    #[arg(long, value_name = "N", default_value_t = 20,
          value_parser = clap::value_parser!(u32).range(1..=100_000))]
    iters: u32,
    /// HCCL_CONNECT_TIMEOUT/HCCL_EXEC_TIMEOUT in seconds when unset
    #[arg(long, value_name = "SECS", default_value_t = 30,
          value_parser = clap::value_parser!(u64).range(1..=7200))]
    timeout: u64,
}

fn message_size(s: &str) -> Result<u64, String> {
    match crate::cli::parse_size(s)? {
        b @ 1..=0x4000_0000 => Ok(b),
        _ => Err("the size must be in 1..=1G".into()),
    }
}

/// Parses the arguments (without the program name).
pub fn parse(args: impl IntoIterator<Item = OsString>) -> Result<Options, clap::Error> {
    let argv = std::iter::once(OsString::from("hccl_diag")).chain(args);
    let a = Args::try_parse_from(argv)?;
    Ok(Options {
        size: a.size,
        rank_table: a.rank_table,
        bytes: a.bytes,
        iters: a.iters,
        timeout: Duration::from_secs(a.timeout),
    })
}

/// What one rank found out about its host.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HostReport {
    /// Host identity: `HCCL_HOST_ID` when set, else the host name.
    pub host: String,
    /// Whether the machine's host name (not `HCCL_HOST_ID`) resolves to an address.
    pub host_resolves: bool,
    /// Interface the library will use, or the error choosing it.
    pub ifname: String,
    /// Address the library will use (empty when none).
    pub addr: String,
    /// `HCCL_IF_BASE_PORT` and the free ports among its 32.
    pub base_port: u16,
    /// Free ports of the bootstrap range.
    pub base_free: u16,
    /// `HCCL_HOST_SOCKET_PORT_RANGE` and how many of the first 64 of it are free (`None`: auto).
    pub data_ports: Option<(u16, u16, u16)>,
    /// `/dev/shm`: writable and free MiB, or why not.
    pub shm: String,
    /// Single-copy (`process_vm_readv`) availability.
    pub single_copy: String,
    /// RDMA devices under /sys/class/infiniband.
    pub rdma: Vec<String>,
    /// The net plugin level1 links use: plugin, provider, fabric and device, or why none.
    pub net_plugin: String,
}

fn free_ports(ip: IpAddr, ports: impl Iterator<Item = u16>) -> u16 {
    ports
        .filter(|&p| TcpListener::bind((ip, p)).is_ok())
        .count() as u16
}

fn shm_status() -> String {
    let dir = std::path::Path::new("/dev/shm");
    let path = dir.join(format!("hccl_diag.{}", std::process::id()));
    let writable = std::fs::File::create(&path).is_ok();
    let _ = std::fs::remove_file(&path);
    let c = CString::new("/dev/shm").unwrap_or_default();
    // SAFETY: zeroed statvfs is a valid out buffer; `c` is NUL-terminated.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: as above: a valid path and an out buffer of the right type.
    let free_mib = (unsafe { libc::statvfs(c.as_ptr(), &mut st) } == 0)
        .then(|| (st.f_bavail as u64 * st.f_frsize as u64) >> 20);
    match (writable, free_mib) {
        (true, Some(m)) => format!("available ({m} MiB free)"),
        (false, _) => "NOT available (/dev/shm is missing or not writable)".into(),
        (true, None) => "available (free space unknown)".into(),
    }
}

fn single_copy_status() -> String {
    let src = [0x5au8; 64];
    let mut dst = [0u8; 64];
    let local = libc::iovec {
        iov_base: dst.as_mut_ptr().cast(),
        iov_len: dst.len(),
    };
    let remote = libc::iovec {
        iov_base: src.as_ptr() as *mut _,
        iov_len: src.len(),
    };
    // SAFETY: both iovecs describe live buffers of this process.
    let n = unsafe { libc::process_vm_readv(libc::getpid(), &local, 1, &remote, 1, 0) };
    let scope = std::fs::read_to_string("/proc/sys/kernel/yama/ptrace_scope")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "none".into());
    if n == 64 && dst == src {
        let peers = if scope == "0" || scope == "none" {
            "between any processes of the user"
        } else {
            "restricted by yama ptrace_scope; peers need PR_SET_PTRACER"
        };
        format!("available (process_vm_readv, ptrace_scope {scope}: {peers})")
    } else {
        format!(
            "NOT available (process_vm_readv: {})",
            std::io::Error::last_os_error()
        )
    }
}

impl HostReport {
    /// Inspects this host as the library is configured by `env`.
    pub fn gather(env: &EnvConfig) -> HostReport {
        // The library's own host identity, so hosts simulated with HCCL_HOST_ID count as hosts.
        let real = hostname();
        let host = env.host_id.clone().unwrap_or_else(|| real.clone());
        let host_resolves = (real.as_str(), 0u16)
            .to_socket_addrs()
            .is_ok_and(|mut a| a.next().is_some());
        let (ifname, addr, ip) = match hccl::transport::net::choose_local_addr(env) {
            Ok(i) => (i.name, i.addr.to_string(), i.addr),
            Err(e) => (
                format!("none ({e})"),
                String::new(),
                Ipv4Addr::UNSPECIFIED.into(),
            ),
        };
        let base = env.if_base_port;
        let base_free = free_ports(ip, (0..IF_PORT_COUNT).filter_map(|k| base.checked_add(k)));
        let data_ports = env.host_port_range.map(|(a, b)| {
            let upto = b.min(a.saturating_add(63));
            (a, b, free_ports(ip, a..=upto))
        });
        let rdma = std::fs::read_dir("/sys/class/infiniband")
            .map(|d| {
                let mut v: Vec<String> = d
                    .filter_map(|e| e.ok())
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect();
                v.sort();
                v
            })
            .unwrap_or_default();
        HostReport {
            host,
            host_resolves,
            ifname,
            addr,
            base_port: base,
            base_free,
            data_ports,
            shm: shm_status(),
            single_copy: single_copy_status(),
            rdma,
            net_plugin: match hccl::transport::plugin::global(env) {
                Ok(Some(p)) => p.describe(),
                Ok(None) => "none: level1 links use the built-in TCP (the log says why)".into(),
                Err(e) => format!("NOT usable: {e}"),
            },
        }
    }

    fn encode(&self) -> [u8; RECORD_BYTES] {
        let d = self
            .data_ports
            .map_or(String::new(), |(a, b, f)| format!("{a}-{b}:{f}"));
        let text = [
            self.host.clone(),
            u8::from(self.host_resolves).to_string(),
            self.ifname.clone(),
            self.addr.clone(),
            format!("{}:{}", self.base_port, self.base_free),
            d,
            self.shm.clone(),
            self.single_copy.clone(),
            self.rdma.join(","),
            self.net_plugin.clone(),
        ]
        .join("\x1f");
        let mut out = [0u8; RECORD_BYTES];
        let n = text.len().min(RECORD_BYTES);
        out[..n].copy_from_slice(&text.as_bytes()[..n]);
        out
    }

    fn decode(b: &[u8]) -> HostReport {
        let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
        let text = String::from_utf8_lossy(&b[..end]).into_owned();
        let f: Vec<&str> = text.split('\x1f').collect();
        let get = |i: usize| f.get(i).copied().unwrap_or("").to_string();
        let pair = |s: &str| {
            s.split_once(':')
                .map(|(a, b)| (a.parse().unwrap_or(0), b.parse().unwrap_or(0)))
                .unwrap_or((0, 0))
        };
        let (base_port, base_free) = pair(&get(4));
        let data_ports = get(5).split_once('-').and_then(|(a, rest)| {
            let (b, f) = rest.split_once(':')?;
            Some((a.parse().ok()?, b.parse().ok()?, f.parse().ok()?))
        });
        HostReport {
            host: get(0),
            host_resolves: get(1) == "1",
            ifname: get(2),
            addr: get(3),
            base_port,
            base_free,
            data_ports,
            shm: get(6),
            single_copy: get(7),
            rdma: get(8)
                .split(',')
                .filter(|s| !s.is_empty())
                .map(String::from)
                .collect(),
            net_plugin: get(9),
        }
    }

    fn print(&self, ranks: &str) {
        println!("host {} (ranks {ranks})", self.host);
        let res = if self.host_resolves {
            "resolves"
        } else {
            "does NOT resolve (hint: name not resolvable; add it to /etc/hosts or DNS)"
        };
        println!("  host name           {res}");
        println!("  interface           {} {}", self.ifname, self.addr);
        println!(
            "  bootstrap ports     {}-{}: {} of {} free",
            self.base_port,
            self.base_port.saturating_add(IF_PORT_COUNT - 1),
            self.base_free,
            IF_PORT_COUNT
        );
        match self.data_ports {
            Some((a, b, f)) => println!(
                "  data ports          {a}-{b}: {f} of the first {} free",
                (b - a).min(63) + 1
            ),
            None => println!("  data ports          auto (kernel-assigned)"),
        }
        println!("  shared memory       {}", self.shm);
        println!("  single copy         {}", self.single_copy);
        let rdma = if self.rdma.is_empty() {
            "none (hosts talk over TCP)".to_string()
        } else {
            self.rdma.join(", ")
        };
        println!("  RDMA devices        {rdma}");
        println!("  net plugin          {}", self.net_plugin);
    }
}

fn hostname() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: buf is writable for its length.
    if unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) } != 0 {
        return "unknown".into();
    }
    let end = buf.iter().position(|&c| c == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..end]).into_owned()
}

/// A hint for an error message, by what it says.
pub fn hint(err: &str) -> &'static str {
    let e = err.to_ascii_lowercase();
    if e.contains("lookup") || e.contains("not known") || e.contains("name resolution") {
        "name not resolvable: use an IP address, or add the host to /etc/hosts or DNS"
    } else if e.contains("refused") {
        "port blocked or nothing listening: is rank 0 running, are MASTER_ADDR/MASTER_PORT \
         (or HCCL_ROOT_ADDR) right, and does the firewall allow HCCL_IF_BASE_PORT..+31?"
    } else if e.contains("unreachable") || e.contains("no route") {
        "interface mismatch: the peer address is not reachable from here; set \
         HCCL_SOCKET_IFNAME or HCCL_IF_IP to an interface the other hosts can reach"
    } else if e.contains("in use") {
        "port in use: choose another HCCL_IF_BASE_PORT or MASTER_PORT"
    } else if e.contains("timed out") || e.contains("timeout") || e.contains("within") {
        "timeout: a peer did not answer in time; check that every rank started, that the \
         firewall does not drop the ports, and raise --timeout on slow clusters"
    } else {
        "see the error text; rerun with HCCL_LOG_LEVEL=INFO for the library's log"
    }
}

/// Pairs of each round of a round-robin tournament, so that every rank is in at most one pair
/// per round and every pair meets exactly once.
pub fn rounds(n: u32) -> Vec<Vec<(u32, u32)>> {
    let m = n + n % 2;
    let mut out = Vec::new();
    for r in 0..m.saturating_sub(1) {
        let mut pairs = Vec::new();
        for k in 0..m / 2 {
            let a = if k == 0 { m - 1 } else { (r + k) % (m - 1) };
            let b = (r + m - 1 - k) % (m - 1);
            if a < n && b < n {
                pairs.push((a.min(b), a.max(b)));
            }
        }
        out.push(pairs);
    }
    out
}

/// Result of one pair test, as seen from the lower rank.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct PairResult {
    /// One-way latency of a 8-byte message, µs.
    pub lat_us: f64,
    /// Ping-pong bandwidth, GB/s.
    pub bw_gbs: f64,
    /// Data arrived intact in both directions.
    pub ok: bool,
}

fn fill(buf: &mut [u8], from: u32, to: u32, round: u32) {
    for (i, b) in buf.iter_mut().enumerate() {
        *b = (i as u32)
            .wrapping_mul(31)
            .wrapping_add(from * 7 + to * 13 + round) as u8;
    }
}

fn intact(buf: &[u8], from: u32, to: u32, round: u32) -> bool {
    let mut want = vec![0u8; buf.len()];
    fill(&mut want, from, to, round);
    want == buf
}

fn p2p(send: bool, buf: &mut [u8], peer: u32, comm: HcclComm, me: u32) -> Result<(), String> {
    // SAFETY: `buf` is live for its length; `comm` is a live communicator.
    let r = unsafe {
        if send {
            HcclSend(
                buf.as_mut_ptr().cast(),
                buf.len() as u64,
                UINT8,
                peer,
                comm,
                null_mut(),
            )
        } else {
            HcclRecv(
                buf.as_mut_ptr().cast(),
                buf.len() as u64,
                UINT8,
                peer,
                comm,
                null_mut(),
            )
        }
    };
    let what = if send { "HcclSend" } else { "HcclRecv" };
    crate::hccl(&format!("rank {me}: {what} with peer {peer}"), r)
}

/// Ping-pong between `me` and `peer`; the lower rank starts. Returns (seconds for `iters` round
/// trips, data intact).
fn ping_pong(
    me: u32,
    peer: u32,
    bytes: usize,
    iters: u32,
    comm: HcclComm,
) -> Result<(f64, bool), String> {
    let mut out = vec![0u8; bytes];
    let mut inb = vec![0u8; bytes];
    fill(&mut out, me, peer, iters);
    let first = me < peer;
    let t0 = Instant::now();
    for _ in 0..iters {
        if first {
            p2p(true, &mut out, peer, comm, me)?;
            p2p(false, &mut inb, peer, comm, me)?;
        } else {
            p2p(false, &mut inb, peer, comm, me)?;
            p2p(true, &mut out, peer, comm, me)?;
        }
    }
    let t = t0.elapsed().as_secs_f64();
    if me == 1 && peer == 0 && std::env::var(FAULT_ENV).is_ok_and(|v| v == "corrupt") {
        inb[0] ^= 0xff;
    }
    Ok((t, intact(&inb, peer, me, iters)))
}

fn all_gather(mine: &mut [u8], comm: HcclComm, n: u32, what: &str) -> Result<Vec<u8>, String> {
    let mut all = vec![0u8; mine.len() * n as usize];
    // SAFETY: `mine` holds `len` bytes and `all` n × len; `comm` is live.
    let r = unsafe {
        HcclAllGather(
            mine.as_mut_ptr().cast(),
            all.as_mut_ptr().cast(),
            mine.len() as u64,
            UINT8,
            comm,
            null_mut(),
        )
    };
    crate::hccl(&format!("HcclAllGather ({what})"), r)?;
    Ok(all)
}

fn bootstrap(w: &World, o: &Options) -> Result<HcclComm, String> {
    if let Some(path) = &o.rank_table {
        let c = CString::new(path.as_os_str().as_encoded_bytes())
            .map_err(|_| format!("rank table path {} contains NUL", path.display()))?;
        let mut comm: HcclComm = null_mut();
        // SAFETY: NUL-terminated path; `comm` is a valid out pointer.
        let r = unsafe { HcclCommInitClusterInfo(c.as_ptr(), w.rank, &mut comm) };
        crate::hccl(
            &format!(
                "rank {}: HcclCommInitClusterInfo({})",
                w.rank,
                path.display()
            ),
            r,
        )?;
        return Ok(comm);
    }
    let ri = if w.rank == 0 {
        let ri = crate::root_info()?;
        if w.size > 1 {
            let blob: [u8; HCCL_ROOT_INFO_BYTES] = ri.internal.map(|c| c as u8);
            let server = world::InfoServer::start(w, blob)?;
            let comm = match crate::init_comm(w.size, &ri, w.rank) {
                Ok(c) => c,
                Err(e) => return Err(server.explain(e)),
            };
            server.join()?;
            return Ok(comm);
        }
        ri
    } else {
        let blob = world::fetch(w)?;
        HcclRootInfo {
            internal: blob.map(|b| b as std::os::raw::c_char),
        }
    };
    crate::init_comm(w.size, &ri, w.rank)
}

/// Per-pair results of every rank, gathered on all ranks.
#[derive(Clone, Debug, PartialEq)]
pub struct Matrix {
    /// Ranks.
    pub n: u32,
    /// Row-major n × n, filled above the diagonal (and mirrored).
    pub cells: Vec<Option<PairResult>>,
}

impl Matrix {
    fn get(&self, a: u32, b: u32) -> Option<PairResult> {
        let (a, b) = (a.min(b), a.max(b));
        self.cells[(a * self.n + b) as usize]
    }

    /// Pairs whose test failed.
    pub fn failures(&self) -> Vec<(u32, u32)> {
        let mut v = Vec::new();
        for a in 0..self.n {
            for b in a + 1..self.n {
                if !self.get(a, b).is_some_and(|p| p.ok) {
                    v.push((a, b));
                }
            }
        }
        v
    }

    /// The latency and bandwidth tables.
    pub fn render(&self) -> String {
        let mut s = String::new();
        for (title, lat) in [
            ("latency (us, one way, 8 B)", true),
            ("bandwidth (GB/s)", false),
        ] {
            let _ = writeln!(s, "{title}");
            let _ = write!(s, "{:>6}", "");
            for b in 0..self.n {
                let _ = write!(s, "{:>10}", format!("r{b}"));
            }
            s.push('\n');
            for a in 0..self.n {
                let _ = write!(s, "{:>6}", format!("r{a}"));
                for b in 0..self.n {
                    let cell = if a == b {
                        "-".to_string()
                    } else {
                        match self.get(a, b) {
                            Some(p) if p.ok && lat => format!("{:.1}", p.lat_us),
                            Some(p) if p.ok => format!("{:.3}", p.bw_gbs),
                            Some(_) => "FAIL".into(),
                            None => "not run".into(),
                        }
                    };
                    let _ = write!(s, "{cell:>10}");
                }
                s.push('\n');
            }
        }
        s
    }
}

fn encode_results(n: u32, me: u32, mine: &[(u32, PairResult)]) -> Vec<u8> {
    // Per peer: latency, bandwidth, status (1 intact, 0 corrupted, -1 not tested by me).
    let mut v = vec![0f64; 3 * n as usize];
    for p in 0..n {
        v[3 * p as usize + 2] = -1.0;
    }
    for &(peer, r) in mine {
        if me < peer {
            let i = 3 * peer as usize;
            v[i] = r.lat_us;
            v[i + 1] = r.bw_gbs;
            v[i + 2] = f64::from(u8::from(r.ok));
        }
    }
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn decode_results(n: u32, all: &[u8]) -> Matrix {
    let f: Vec<f64> = all
        .chunks_exact(8)
        .map(|c| f64::from_le_bytes(c.try_into().unwrap_or([0; 8])))
        .collect();
    let mut cells = vec![None; (n * n) as usize];
    for a in 0..n {
        for b in a + 1..n {
            let i = (a as usize * n as usize + b as usize) * 3;
            if f[i + 2] >= 0.0 {
                cells[(a * n + b) as usize] = Some(PairResult {
                    lat_us: f[i],
                    bw_gbs: f[i + 1],
                    ok: f[i + 2] == 1.0,
                });
            }
        }
    }
    Matrix { n, cells }
}

/// Problems visible from the exchanged host reports: (rank, problem, hint).
pub fn cluster_problems(hosts: &[HostReport]) -> Vec<(u32, String, &'static str)> {
    let mut out = Vec::new();
    let many_hosts = hosts.iter().any(|h| h.host != hosts[0].host);
    for (r, h) in hosts.iter().enumerate() {
        let r = r as u32;
        if h.addr.is_empty() {
            out.push((
                r,
                format!("no usable interface: {}", h.ifname),
                "interface mismatch: check HCCL_SOCKET_IFNAME / HCCL_IF_IP",
            ));
        } else if many_hosts && h.addr.parse::<IpAddr>().is_ok_and(|a| a.is_loopback()) {
            out.push((
                r,
                format!("uses loopback {} while the ranks span several hosts", h.addr),
                "interface mismatch: set HCCL_SOCKET_IFNAME or HCCL_IF_IP to an interface the other hosts can reach",
            ));
        }
        if h.addr.contains(':') != hosts[0].addr.contains(':') {
            out.push((
                r,
                format!(
                    "address family differs from rank 0 ({} vs {})",
                    h.addr, hosts[0].addr
                ),
                "interface mismatch: use the same HCCL_SOCKET_FAMILY everywhere",
            ));
        }
        if !h.host_resolves {
            out.push((
                r,
                format!("host name {} does not resolve", h.host),
                "name not resolvable: add it to /etc/hosts or DNS",
            ));
        }
    }
    out
}

fn worker(w: &World, o: &Options) -> Result<bool, String> {
    let env = EnvConfig::global().map_err(|e| format!("configuration: {e}"))?;
    let me = HostReport::gather(&env);
    let t0 = Instant::now();
    let comm = bootstrap(w, o).map_err(|e| {
        format!(
            "bootstrap FAIL on rank {} ({} {}): {e}\n  hint: {}",
            w.rank,
            me.ifname,
            me.addr,
            hint(&e)
        )
    })?;
    let boot = t0.elapsed();
    let n = w.size;
    let all = all_gather(&mut me.encode(), comm, n, "host reports")?;
    let hosts: Vec<HostReport> = all
        .chunks_exact(RECORD_BYTES)
        .map(HostReport::decode)
        .collect();
    let mut mine = Vec::new();
    let bw_iters = 5u32;
    for round in rounds(n) {
        let Some(&(a, b)) = round.iter().find(|(a, b)| *a == w.rank || *b == w.rank) else {
            continue;
        };
        let peer = if a == w.rank { b } else { a };
        let ctx = |e: String| format!("{e}\n  hint: {}", hint(&e));
        // One untimed round trip first, so connection set-up is not measured.
        ping_pong(w.rank, peer, 8, 1, comm).map_err(ctx)?;
        let (t_lat, ok_lat) = ping_pong(w.rank, peer, 8, o.iters, comm).map_err(ctx)?;
        let (t_bw, ok_bw) =
            ping_pong(w.rank, peer, o.bytes as usize, bw_iters, comm).map_err(ctx)?;
        mine.push((
            peer,
            PairResult {
                lat_us: t_lat / f64::from(o.iters) / 2.0 * 1e6,
                bw_gbs: 2.0 * o.bytes as f64 * f64::from(bw_iters) / t_bw / 1e9,
                ok: ok_lat && ok_bw,
            },
        ));
    }
    // A corrupted pair is reported by the receiver too: fold both views into the lower rank's.
    let mut status = vec![1u8; n as usize];
    for &(peer, r) in &mine {
        status[peer as usize] = u8::from(r.ok);
    }
    let all_status = all_gather(&mut status, comm, n, "pair status")?;
    for (peer, r) in mine.iter_mut() {
        r.ok &= all_status[(*peer * n + w.rank) as usize] == 1;
    }
    let res = all_gather(
        &mut encode_results(n, w.rank, &mine),
        comm,
        n,
        "pair results",
    )?;
    let m = decode_results(n, &res);
    crate::destroy(comm)?;
    let problems = cluster_problems(&hosts);
    let failures = m.failures();
    if w.rank == 0 {
        let mut by_host: Vec<(String, Vec<u32>)> = Vec::new();
        for (r, h) in hosts.iter().enumerate() {
            match by_host.iter_mut().find(|(k, _)| *k == h.host) {
                Some((_, v)) => v.push(r as u32),
                None => by_host.push((h.host.clone(), vec![r as u32])),
            }
        }
        for (host, ranks) in &by_host {
            let first = ranks[0] as usize;
            let list: Vec<String> = ranks.iter().map(u32::to_string).collect();
            let _ = host;
            hosts[first].print(&list.join(","));
        }
        println!(
            "bootstrap           ok: {n} ranks ({}) in {:.1} ms",
            if o.rank_table.is_some() {
                "rank table"
            } else {
                w.source
            },
            boot.as_secs_f64() * 1e3
        );
        for (r, h) in hosts.iter().enumerate() {
            println!("  rank {r:<3} {} {} {}", h.host, h.ifname, h.addr);
        }
        print!("{}", m.render());
        for (a, b) in &failures {
            println!(
                "pair r{a}-r{b}: FAIL (data corrupted or not tested)\n  hint: compare the two \
                 hosts' interfaces above; rerun with HCCL_LOG_LEVEL=INFO"
            );
        }
        for (r, p, h) in &problems {
            println!("rank {r}: FAIL: {p}\n  hint: {h}");
        }
        let pairs = n * n.saturating_sub(1) / 2;
        let verdict = if failures.is_empty() && problems.is_empty() {
            "HEALTHY"
        } else {
            "UNHEALTHY"
        };
        println!(
            "{verdict}: {} of {pairs} pairs passed, {} host problem(s)",
            pairs as usize - failures.len(),
            problems.len()
        );
    }
    // Rank 0 alone carries the verdict: another rank failing first would make a launcher stop
    // rank 0 before it printed the report.
    Ok(w.rank != 0 || (failures.is_empty() && problems.is_empty()))
}

fn set_default(var: &str, secs: u64) {
    if std::env::var_os(var).is_none_or(|v| v.is_empty()) {
        // Still single-threaded here, before the library reads its configuration.
        std::env::set_var(var, secs.to_string());
    }
}

/// `hccl_diag`'s entry point.
pub fn main() -> ExitCode {
    crate::quiet_on_closed_pipe();
    let args: Vec<OsString> = std::env::args_os().skip(1).collect();
    let o = parse(args.clone()).unwrap_or_else(|e| e.exit());
    for v in ["HCCL_CONNECT_TIMEOUT", "HCCL_EXEC_TIMEOUT"] {
        set_default(v, o.timeout.as_secs());
    }
    let world = match world::detect(&world::process_env) {
        Ok(w) => w,
        Err(e) => {
            eprintln!("hccl_diag: error: {e}\n  hint: {}", hint(&e));
            return ExitCode::FAILURE;
        }
    };
    if let Some(w) = world {
        return match worker(&w, &o) {
            Ok(true) => ExitCode::SUCCESS,
            Ok(false) => ExitCode::FAILURE,
            Err(e) => {
                eprintln!("hccl_diag: rank {}: {e}", w.rank);
                ExitCode::FAILURE
            }
        };
    }
    if o.rank_table.is_some() {
        eprintln!(
            "hccl_diag: error: --rank-table needs a launcher (mpirun, hcclrun, or RANK/WORLD_SIZE) \
             to say which rank this process is"
        );
        return ExitCode::from(2);
    }
    let exe = match std::env::current_exe() {
        Ok(p) => p,
        Err(e) => {
            eprintln!("hccl_diag: error: cannot find my own executable: {e}");
            return ExitCode::FAILURE;
        }
    };
    let mut command = vec![exe.into_os_string()];
    command.extend(args);
    let run = crate::launcher::Options {
        ranks: o.size,
        command,
        // Bootstrap plus every pair test each have the library timeout; leave room for both.
        timeout: Some(o.timeout * 3 + Duration::from_secs(10)),
        grace: Duration::from_secs(2),
        prefix: false,
    };
    match crate::launcher::run(&run) {
        Ok(crate::launcher::Outcome::Success) => ExitCode::SUCCESS,
        Ok(out) => {
            match &out {
                crate::launcher::Outcome::Failed { status, .. }
                    if status.signal() == Some(libc::SIGPIPE) =>
                {
                    // The report's reader went away (`hccl_diag | head`): end as quietly.
                    crate::die_of_sigpipe()
                }
                crate::launcher::Outcome::Failed { rank, .. } => {
                    eprintln!("hccl_diag: UNHEALTHY: rank {rank} failed (see above)")
                }
                crate::launcher::Outcome::TimedOut { running } => eprintln!(
                    "hccl_diag: UNHEALTHY: ranks {running:?} did not finish in time\n  hint: {}",
                    hint("timeout")
                ),
                _ => eprintln!("hccl_diag: interrupted"),
            }
            ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("hccl_diag: error: {e}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_robin_covers_every_pair_once() {
        for n in 1..=9u32 {
            let mut seen = std::collections::HashSet::new();
            for round in rounds(n) {
                let mut busy = std::collections::HashSet::new();
                for (a, b) in round {
                    assert!(a < b && b < n);
                    assert!(
                        busy.insert(a) && busy.insert(b),
                        "n={n}: rank twice in a round"
                    );
                    assert!(seen.insert((a, b)), "n={n}: pair twice");
                }
            }
            assert_eq!(seen.len() as u32, n * n.saturating_sub(1) / 2, "n={n}");
        }
    }

    #[test]
    fn hints_by_error_text() {
        assert!(
            hint("10.0.0.1:60000: Connection refused (os error 111)").starts_with("port blocked")
        );
        assert!(
            hint("failed to lookup address information: Name or service not known")
                .starts_with("name not resolvable")
        );
        assert!(hint("no root info from rank 0 within 30s").starts_with("timeout"));
        assert!(hint("No route to host (os error 113)").starts_with("interface mismatch"));
    }

    #[test]
    fn host_report_round_trips_and_mismatch_is_found() {
        let h = HostReport {
            host: "a".into(),
            host_resolves: true,
            ifname: "eth0".into(),
            addr: "10.0.0.1".into(),
            base_port: 60000,
            base_free: 31,
            data_ports: Some((40000, 40100, 64)),
            shm: "available".into(),
            single_copy: "available".into(),
            rdma: vec!["mlx5_0".into()],
            net_plugin: "ofi (/x/libhccl_net_ofi.so): provider tcp;ofi_rxm, fabric 10.0.0.0/24, \
                         device eth0"
                .into(),
        };
        assert_eq!(HostReport::decode(&h.encode()), h);
        let mut lo = h.clone();
        lo.host = "b".into();
        lo.addr = "127.0.0.1".into();
        let p = cluster_problems(&[h.clone(), lo]);
        assert_eq!(p.len(), 1);
        assert!(p[0].2.starts_with("interface mismatch"));
        assert!(cluster_problems(&[h.clone(), h]).is_empty());
    }

    #[test]
    fn results_round_trip() {
        let r = PairResult {
            lat_us: 3.5,
            bw_gbs: 1.25,
            ok: true,
        };
        let n = 3;
        let mut all = encode_results(n, 0, &[(1, r), (2, PairResult { ok: false, ..r })]);
        all.extend(encode_results(n, 1, &[(0, r), (2, r)]));
        all.extend(encode_results(n, 2, &[(0, r), (1, r)]));
        let m = decode_results(n, &all);
        assert_eq!(m.get(1, 0), Some(r));
        assert_eq!(m.failures(), [(0, 2)]);
        assert!(m.render().contains("FAIL"));
    }
}
