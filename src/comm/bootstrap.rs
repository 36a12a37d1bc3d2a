//! Rendezvous through a root: every rank reports where it lives and how to reach it, and the
//! root answers each with the whole table once all ranks have arrived.
//!
//! The root is a thread of the process that called `HcclGetRootInfo` (or of rank 0 for rank
//! table initialisation). It serves one communicator and exits when done or when the connect
//! timeout expires, telling every waiting rank which ranks never arrived.
//!
//! The root listens through a [`Gate`]: hellos are read concurrently under a short deadline
//! ([`HELLO_DEADLINE`]) and a cap ([`MAX_PENDING_HELLOS`]), so idle or garbage connections
//! cannot delay the ranks, and only a hello carrying this job's token (from the root info) is
//! answered with anything but a refusal. Every number a hello carries is checked before the
//! root allocates by it: a rank count beyond [`MAX_RANKS`], or one that disagrees with the
//! other ranks', fails the rendezvous for every rank at once with a message naming it.
//!
//! Wire format (little endian). Hello, [`HELLO`] bytes: magic, protocol version, token (16
//! bytes), rank count, rank, then the rank's record ([`RECORD`] bytes: rank, address family,
//! port, address, host id, process id, pid). Answer: status (0 or an `HcclResult` code) and a
//! length; then either `length` records (the table) or a message of `length` bytes.

use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpStream};
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::time::{Duration, Instant};

use crate::base::error::{Error, ErrorKind, Result};
use crate::base::limits::{MAX_RANKS, MAX_REPORTED_RANKS, MAX_WIRE_MESSAGE};
use crate::base::topology::Location;
use crate::transport::acceptor::Whitelist;
use crate::transport::gate::{Arrival, Gate, GateConfig, Listener, Stream};

const HELLO_MAGIC: u32 = 0x4842_4348; // "HCBH"
/// 3: rank records carry their host's core count ([`RankRecord::cores`]), which the ranks'
/// choice of schedule depends on, so a rank of an earlier version is refused.
const PROTO_VERSION: u32 = 3;
/// Bytes of a rank record.
pub const RECORD: usize = 64;
/// Bytes of a hello.
pub const HELLO: usize = 32 + RECORD;
/// How long a connection to the root may take to send its hello.
pub const HELLO_DEADLINE: Duration = Duration::from_secs(3);
/// Most hellos in progress at once; beyond it the oldest connection is dropped.
pub const MAX_PENDING_HELLOS: usize = 64;
/// How long the root waits to write an answer to a rank that does not read it.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(5);

/// What every rank tells the others about itself.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RankRecord {
    /// Rank in the communicator.
    pub rank: u32,
    /// Where its process accepts data connections.
    pub data_addr: SocketAddr,
    /// Host and process identity.
    pub loc: Location,
    /// Process id (diagnostics).
    pub pid: u32,
    /// The CPUs its host gives its ranks ([`crate::transport::backoff::host_cores`]): with the
    /// host of every record, every rank works out alike which hosts run more ranks than cores.
    pub cores: u32,
}

impl RankRecord {
    /// Writes the record into the first [`RECORD`] bytes of `b`.
    pub fn encode(&self, b: &mut [u8]) {
        b[..RECORD].fill(0);
        b[0..4].copy_from_slice(&self.rank.to_le_bytes());
        match self.data_addr.ip() {
            IpAddr::V4(a) => {
                b[4] = 4;
                b[8..12].copy_from_slice(&a.octets());
            }
            IpAddr::V6(a) => {
                b[4] = 6;
                b[8..24].copy_from_slice(&a.octets());
            }
        }
        b[6..8].copy_from_slice(&self.data_addr.port().to_le_bytes());
        b[24..32].copy_from_slice(&self.loc.host.to_le_bytes());
        b[32..48].copy_from_slice(&self.loc.process.to_le_bytes());
        b[48..52].copy_from_slice(&self.pid.to_le_bytes());
        b[52..56].copy_from_slice(&self.cores.to_le_bytes());
    }

    /// Parses a record from the first [`RECORD`] bytes of `b`.
    pub fn decode(b: &[u8]) -> Result<RankRecord> {
        let bad = |why: &str| Error::new(ErrorKind::Para, format!("bad rank record: {why}"));
        let b: &[u8; RECORD] = b
            .get(..RECORD)
            .and_then(|b| b.try_into().ok())
            .ok_or_else(|| bad("too short"))?;
        let ip = match b[4] {
            4 => IpAddr::V4(Ipv4Addr::new(b[8], b[9], b[10], b[11])),
            6 => IpAddr::V6(Ipv6Addr::from(le16(&b[8..24]))),
            _ => return Err(bad("unknown address family")),
        };
        Ok(RankRecord {
            rank: le32(&b[0..4]),
            data_addr: SocketAddr::new(ip, u16::from_le_bytes([b[6], b[7]])),
            loc: Location {
                host: u64::from_le_bytes(b[24..32].try_into().expect("8 bytes")),
                process: u128::from_le_bytes(le16(&b[32..48])),
            },
            pid: le32(&b[48..52]),
            cores: le32(&b[52..56]),
        })
    }
}

fn le32(b: &[u8]) -> u32 {
    u32::from_le_bytes(b[..4].try_into().expect("4 bytes"))
}

fn le16(b: &[u8]) -> [u8; 16] {
    b[..16].try_into().expect("16 bytes")
}

/// A rank's hello to the root.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Hello {
    /// The job token from the root info.
    pub token: u128,
    /// The rank count the rank was called with (not yet checked against any bound).
    pub n: u32,
    /// Its rank.
    pub rank: u32,
    /// Where it lives.
    pub record: RankRecord,
}

impl Hello {
    /// The bytes on the wire.
    pub fn encode(&self) -> [u8; HELLO] {
        let mut h = [0u8; HELLO];
        h[0..4].copy_from_slice(&HELLO_MAGIC.to_le_bytes());
        h[4..8].copy_from_slice(&PROTO_VERSION.to_le_bytes());
        h[8..24].copy_from_slice(&self.token.to_le_bytes());
        h[24..28].copy_from_slice(&self.n.to_le_bytes());
        h[28..32].copy_from_slice(&self.rank.to_le_bytes());
        self.record.encode(&mut h[32..]);
        h
    }

    /// Parses a hello: magic, version and record must be sound; the counts are left to the
    /// root to judge (a rank with a bad count still deserves a precise answer).
    pub fn decode(h: &[u8]) -> Result<Hello> {
        if h.len() < HELLO || le32(&h[0..4]) != HELLO_MAGIC || le32(&h[4..8]) != PROTO_VERSION {
            return Err(Error::new(
                ErrorKind::Para,
                "not a bootstrap hello of this version",
            ));
        }
        Ok(Hello {
            token: u128::from_le_bytes(le16(&h[8..24])),
            n: le32(&h[24..28]),
            rank: le32(&h[28..32]),
            record: RankRecord::decode(&h[32..])?,
        })
    }
}

/// The root's answer header: `Ok(len)` announces a table of `len` records; an error carries the
/// announced message length in its text's place (read it with `read_answer`).
pub fn decode_answer_head(head: &[u8; 8]) -> (u32, u32) {
    (le32(&head[0..4]), le32(&head[4..8]))
}

/// Parses a table of `n` records, which must list ranks 0..n in order.
pub fn decode_table(n: u32, body: &[u8]) -> Result<Vec<RankRecord>> {
    if body.len() != n as usize * RECORD {
        return Err(Error::new(
            ErrorKind::Internal,
            "bootstrap root sent a table of the wrong size",
        ));
    }
    let table = body
        .chunks_exact(RECORD)
        .map(RankRecord::decode)
        .collect::<Result<Vec<_>>>()?;
    if table.iter().enumerate().any(|(i, r)| r.rank as usize != i) {
        return Err(Error::new(
            ErrorKind::Internal,
            "bootstrap table out of order",
        ));
    }
    Ok(table)
}

/// Where the root listens.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RootAddr {
    /// A TCP address (root info, or a rank table with rank 0's device address).
    Tcp(SocketAddr),
    /// An abstract Unix socket name (single-host rank tables without addresses).
    Unix(String),
}

/// A bound root listener.
pub type RootListener = Listener;

/// Binds an abstract Unix socket named `name`.
pub fn bind_unix(name: &str) -> Result<RootListener> {
    let addr = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes())?;
    Ok(Listener::Unix(UnixListener::bind_addr(&addr)?))
}

/// Starts the root of one communicator on its own thread; with a whitelist, ranks connecting
/// from other addresses are refused.
pub fn serve_root(
    listener: RootListener,
    token: u128,
    deadline: Instant,
    whitelist: Option<Whitelist>,
) -> Result<()> {
    let gate = Gate::new(
        listener,
        GateConfig {
            what: "bootstrap root",
            conn: "a rank connection",
            hello_len: HELLO,
            deadline: HELLO_DEADLINE,
            cap: MAX_PENDING_HELLOS,
            whitelist,
            refusal: answer_error(ErrorKind::Para, "address not in the root's whitelist"),
        },
    )?;
    std::thread::Builder::new()
        .name("hccl-root".into())
        .spawn(move || Root::new(gate, token).run(deadline))
        .map(|_| ())
        .map_err(|e| Error::new(ErrorKind::Syscall, format!("spawn root thread: {e}")))
}

/// An error answer: code, length, message (at most [`MAX_WIRE_MESSAGE`] bytes).
fn answer_error(kind: ErrorKind, msg: &str) -> Vec<u8> {
    let msg = &msg.as_bytes()[..msg.len().min(MAX_WIRE_MESSAGE)];
    let mut b = Vec::with_capacity(8 + msg.len());
    b.extend_from_slice(&kind.code().to_le_bytes());
    b.extend_from_slice(&(msg.len() as u32).to_le_bytes());
    b.extend_from_slice(msg);
    b
}

/// Writes an answer, waiting at most [`ANSWER_TIMEOUT`] for a rank that does not read.
fn answer(c: &mut Stream, bytes: &[u8]) -> std::io::Result<()> {
    c.set_nonblocking(false)?;
    c.set_timeout(Some(ANSWER_TIMEOUT))?;
    c.write_all(bytes)
}

/// `ranks` as a list for a message: at most [`MAX_REPORTED_RANKS`] of them.
pub fn rank_list(ranks: impl ExactSizeIterator<Item = usize>) -> String {
    let total = ranks.len();
    let shown: Vec<String> = ranks
        .take(MAX_REPORTED_RANKS)
        .map(|r| r.to_string())
        .collect();
    if total > shown.len() {
        format!("[{}, ... {} more]", shown.join(", "), total - shown.len())
    } else {
        format!("[{}]", shown.join(", "))
    }
}

/// The root's state.
struct Root {
    gate: Gate,
    token: u128,
    /// The rank count, once a valid hello gave it.
    expected: Option<u32>,
    ranks: Vec<Option<(RankRecord, Stream)>>,
    arrived: u32,
    /// Why the rendezvous failed: every rank of the job hears it.
    failed: Option<(ErrorKind, String)>,
    /// The rank whose out-of-bounds rank count failed the rendezvous before any rank had
    /// joined: a valid call from that same rank (a caller that corrected its argument) starts
    /// the rendezvous afresh, since nobody else has been told.
    retry_by: Option<u32>,
}

impl Root {
    fn new(gate: Gate, token: u128) -> Root {
        Root {
            gate,
            token,
            expected: None,
            ranks: Vec::new(),
            arrived: 0,
            failed: None,
            retry_by: None,
        }
    }

    fn run(mut self, deadline: Instant) {
        loop {
            if self.failed.is_none() && self.expected.is_some_and(|n| self.arrived == n) {
                return self.send_table();
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return self.time_out();
            }
            for a in self.gate.poll(left.min(Duration::from_secs(1))) {
                self.arrival(a);
            }
        }
    }

    /// Fails the rendezvous: every rank that joined, the one on `c` and every later one of the
    /// job hear why.
    fn fail(&mut self, c: Option<&mut Stream>, kind: ErrorKind, msg: String) {
        log::error!("bootstrap root: {msg}");
        let ans = answer_error(kind, &msg);
        for c in self.ranks.iter_mut().flatten().map(|(_, c)| c).chain(c) {
            let _ = answer(c, &ans);
        }
        self.ranks.clear();
        self.failed = Some((kind, msg));
        self.retry_by = None;
    }

    fn arrival(&mut self, a: Arrival) {
        let mut c = a.stream;
        let from = a
            .peer
            .map_or_else(|| "a local process".to_string(), |ip| ip.to_string());
        let h = match Hello::decode(&a.hello) {
            Ok(h) => h,
            Err(e) => {
                log::warn!(
                    "bootstrap root: refused a connection from {from}: {}",
                    e.msg
                );
                let _ = answer(&mut c, &answer_error(ErrorKind::Para, &e.msg));
                return;
            }
        };
        if h.token != self.token {
            log::warn!("bootstrap root: refused a rank from {from} carrying another job's token");
            let _ = answer(
                &mut c,
                &answer_error(ErrorKind::Para, "root info belongs to another job"),
            );
            return;
        }
        let (n, rank) = (h.n, h.rank);
        let valid = n != 0 && n <= MAX_RANKS;
        if valid && self.retry_by == Some(rank) {
            log::info!("bootstrap root: rank {rank} called again with nRanks={n}; starting afresh");
            (self.failed, self.retry_by) = (None, None);
        }
        if let Some((kind, msg)) = &self.failed {
            let _ = answer(&mut c, &answer_error(*kind, msg));
            if self.retry_by != Some(rank) {
                // Another rank has now been told: the failure stands for everyone.
                self.retry_by = None;
            }
            return;
        }
        if !valid {
            let first = self.arrived == 0;
            self.fail(
                Some(&mut c),
                ErrorKind::Para,
                format!(
                    "rank {rank} was called with nRanks={n}; a communicator has 1 to {MAX_RANKS} \
                     ranks"
                ),
            );
            if first {
                self.retry_by = Some(rank);
            }
            return;
        }
        match self.expected {
            None => {
                self.expected = Some(n);
                self.ranks = (0..n).map(|_| None).collect();
            }
            Some(m) if m != n => {
                return self.fail(
                    Some(&mut c),
                    ErrorKind::Para,
                    format!("the ranks disagree on nRanks: rank {rank} says {n}, others said {m}"),
                );
            }
            _ => {}
        }
        if rank >= n || h.record.rank != rank || self.ranks[rank as usize].is_some() {
            let msg = format!("rank {rank} is out of range or already joined (rank count {n})");
            log::warn!("bootstrap root: refused a rank from {from}: {msg}");
            let _ = answer(&mut c, &answer_error(ErrorKind::Para, &msg));
            return;
        }
        self.ranks[rank as usize] = Some((h.record, c));
        self.arrived += 1;
    }

    fn time_out(mut self) {
        if self.failed.is_some() {
            return;
        }
        let missing = rank_list(
            self.ranks
                .iter()
                .enumerate()
                .filter(|(_, r)| r.is_none())
                .map(|(i, _)| i)
                .collect::<Vec<_>>()
                .into_iter(),
        );
        let msg = match self.expected {
            Some(_) => {
                format!("rank(s) {missing} did not reach the root before the connect timeout")
            }
            None => "no rank reached the root before the connect timeout".to_string(),
        };
        self.fail(None, ErrorKind::Timeout, msg);
    }

    fn send_table(mut self) {
        let n = self.ranks.len();
        let mut table = Vec::with_capacity(8 + n * RECORD);
        table.extend_from_slice(&0u32.to_le_bytes());
        table.extend_from_slice(&(n as u32).to_le_bytes());
        for (rec, _) in self.ranks.iter().flatten() {
            let mut b = [0u8; RECORD];
            rec.encode(&mut b);
            table.extend_from_slice(&b);
        }
        for (rec, c) in self.ranks.iter_mut().flatten() {
            if let Err(e) = answer(c, &table) {
                log::warn!("bootstrap root: could not answer rank {}: {e}", rec.rank);
            }
        }
    }
}

fn connect_root(addr: &RootAddr, deadline: Instant) -> Result<Stream> {
    let mut delay = Duration::from_millis(2);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(Error::new(
                ErrorKind::Timeout,
                format!(
                    "could not reach the bootstrap root at {addr:?} before the connect timeout"
                ),
            ));
        }
        let res: std::io::Result<Stream> = match addr {
            RootAddr::Tcp(a) => TcpStream::connect_timeout(a, left).map(|s| {
                let _ = s.set_nodelay(true);
                Stream::Tcp(s)
            }),
            RootAddr::Unix(name) => {
                std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes())
                    .and_then(|a| UnixStream::connect_addr(&a))
                    .map(Stream::Unix)
            }
        };
        match res {
            Ok(c) => return Ok(c),
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::ConnectionRefused | std::io::ErrorKind::NotFound
                ) =>
            {
                std::thread::sleep(delay.min(left));
                delay = (delay * 2).min(Duration::from_millis(100));
            }
            Err(e) => {
                return Err(Error::new(
                    ErrorKind::TcpConnect,
                    format!("connecting to the bootstrap root at {addr:?}: {e}"),
                ))
            }
        }
    }
}

/// Sends `hello` to the root at `addr` and reads its answer header, waiting at most until
/// `deadline` (plus slack, so the root's own timeout message reaches us).
fn ask_root(addr: &RootAddr, hello: &Hello, deadline: Instant) -> Result<(Stream, u32, u32)> {
    let mut c = connect_root(addr, deadline)?;
    c.set_timeout(Some(ANSWER_TIMEOUT))?;
    // A root that refuses this address answers without reading: its answer says more than the
    // failed write would.
    let sent = c.write_all(&hello.encode());
    let left = deadline.saturating_duration_since(Instant::now()) + Duration::from_secs(2);
    c.set_timeout(Some(left))?;
    let mut head = [0u8; 8];
    if let Err(e) = c.read_exact(&mut head) {
        return Err(match sent {
            Err(w) => Error::new(
                ErrorKind::TcpConnect,
                format!("sending the hello to the bootstrap root at {addr:?}: {w}"),
            ),
            Ok(()) => Error::new(
                ErrorKind::Timeout,
                format!("no answer from the bootstrap root: {e}"),
            ),
        });
    }
    let (status, len) = decode_answer_head(&head);
    Ok((c, status, len))
}

/// The root's error answer (`status`, message of `len` bytes) for rank `rank`.
fn refusal(c: &mut Stream, status: u32, len: u32, rank: u32) -> Error {
    let mut msg = vec![0u8; (len as usize).min(MAX_WIRE_MESSAGE)];
    let _ = c.read_exact(&mut msg);
    let kind = if status == ErrorKind::Timeout.code() {
        ErrorKind::Timeout
    } else {
        ErrorKind::Para
    };
    Error::new(
        kind,
        format!(
            "bootstrap root refused rank {rank}: {}",
            String::from_utf8_lossy(&msg)
        ),
    )
}

/// Joins the rendezvous at `addr` as `me.rank` of `n` ranks; returns every rank's record.
pub fn exchange(
    addr: &RootAddr,
    token: u128,
    n: u32,
    me: &RankRecord,
    deadline: Instant,
) -> Result<Vec<RankRecord>> {
    let hello = Hello {
        token,
        n,
        rank: me.rank,
        record: *me,
    };
    let (mut c, status, len) = ask_root(addr, &hello, deadline)?;
    if status != 0 {
        return Err(refusal(&mut c, status, len, me.rank));
    }
    if len != n || n > MAX_RANKS {
        return Err(Error::new(
            ErrorKind::Internal,
            "bootstrap root sent a table of the wrong size",
        ));
    }
    let mut body = vec![0u8; n as usize * RECORD];
    c.read_exact(&mut body)?;
    decode_table(n, &body)
}

/// Tells the root at `addr` that rank `rank` was called with the rank count `n`, which is out
/// of bounds, so that the root fails the rendezvous for every rank at once instead of letting
/// them wait for the connect timeout; returns the root's answer, if any (best effort).
pub fn report_bad_count(
    addr: &RootAddr,
    token: u128,
    n: u32,
    rank: u32,
    deadline: Instant,
) -> Option<String> {
    let hello = Hello {
        token,
        n,
        rank,
        record: RankRecord {
            rank,
            data_addr: SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), 0),
            loc: Location {
                host: 0,
                process: 0,
            },
            pid: std::process::id(),
            cores: 0,
        },
    };
    let (mut c, status, len) = ask_root(addr, &hello, deadline).ok()?;
    (status != 0).then(|| refusal(&mut c, status, len, rank).into_msg())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    fn root(token: u128, deadline: Instant) -> RootAddr {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = RootAddr::Tcp(l.local_addr().unwrap());
        serve_root(Listener::Tcp(l), token, deadline, None).unwrap();
        addr
    }

    #[test]
    fn hello_roundtrip_and_rejects() {
        let h = Hello {
            token: u128::MAX - 5,
            n: u32::MAX,
            rank: 7,
            record: rec(7),
        };
        assert_eq!(Hello::decode(&h.encode()).unwrap(), h);
        let good = h.encode();
        for (i, v) in [(0usize, 0u8), (4, 1), (36, 5)] {
            let mut b = good;
            b[i] = v;
            assert!(Hello::decode(&b).is_err(), "byte {i} = {v}");
        }
        assert!(Hello::decode(&good[..HELLO - 1]).is_err());
        assert!(RankRecord::decode(&[4u8; RECORD - 1]).is_err());
        let mut t = vec![0u8; 2 * RECORD];
        rec(0).encode(&mut t);
        rec(1).encode(&mut t[RECORD..]);
        assert_eq!(decode_table(2, &t).unwrap(), vec![rec(0), rec(1)]);
        assert!(decode_table(3, &t).is_err());
        rec(0).encode(&mut t[RECORD..]);
        assert!(decode_table(2, &t).is_err(), "out of order");
    }

    #[test]
    fn rank_lists_stay_short() {
        assert_eq!(rank_list([1usize, 2].into_iter()), "[1, 2]");
        let long = rank_list(0..1usize << 24);
        assert!(
            long.len() < 200 && long.ends_with("16777200 more]"),
            "{long}"
        );
    }

    /// A rank called with a rank count beyond the bound makes the root fail the rendezvous for
    /// every rank at once; the root allocates nothing by it and keeps serving.
    #[test]
    fn out_of_bounds_rank_count_fails_every_rank_at_once() {
        for bad in [u32::MAX, 1 << 24, 0] {
            let deadline = Instant::now() + Duration::from_secs(60);
            let addr = root(9, deadline);
            let a = addr.clone();
            let good = std::thread::spawn(move || exchange(&a, 9, 2, &rec(0), deadline));
            let said = report_bad_count(&addr, 9, bad, 1, deadline).expect("the root answers");
            assert!(said.contains(&format!("nRanks={bad}")), "{said}");
            let e = good.join().unwrap().unwrap_err();
            assert_eq!(e.kind, ErrorKind::Para, "{e}");
            assert!(e.msg.contains(&format!("nRanks={bad}")), "{e}");
            // Later ranks of the job hear the same at once.
            let late = exchange(&addr, 9, 2, &rec(1), deadline).unwrap_err();
            assert!(late.msg.contains(&format!("nRanks={bad}")), "{late}");
        }
    }

    /// A rank that corrected its out-of-bounds rank count before any other rank joined starts
    /// the rendezvous afresh; once another rank has been told of the failure, it stands.
    #[test]
    fn corrected_rank_count_retries_only_while_nobody_was_told() {
        let deadline = Instant::now() + Duration::from_secs(60);
        let addr = root(7, deadline);
        assert!(report_bad_count(&addr, 7, u32::MAX, 0, deadline).is_some());
        let table = exchange(&addr, 7, 1, &rec(0), deadline).expect("a corrected call succeeds");
        assert_eq!(table.len(), 1);

        let addr = root(8, deadline);
        assert!(report_bad_count(&addr, 8, 1 << 24, 1, deadline).is_some());
        let told = exchange(&addr, 8, 2, &rec(0), deadline).unwrap_err();
        assert!(told.msg.contains("nRanks=16777216"), "{told}");
        let again = exchange(&addr, 8, 2, &rec(1), deadline).unwrap_err();
        assert!(again.msg.contains("nRanks=16777216"), "{again}");
    }

    /// Idle, half-sent and garbage connections to the root delay nobody: the ranks meet long
    /// before a silent connection's hello deadline runs out.
    #[test]
    fn idle_and_garbage_connections_do_not_delay_the_ranks() {
        let deadline = Instant::now() + Duration::from_secs(60);
        let addr = root(11, deadline);
        let RootAddr::Tcp(sa) = addr else {
            unreachable!()
        };
        let mut junk: Vec<TcpStream> = Vec::new();
        for i in 0..(2 * MAX_PENDING_HELLOS) {
            let mut c = TcpStream::connect(sa).unwrap();
            match i % 3 {
                0 => {}
                1 => c.write_all(&[0x5a; HELLO / 2]).unwrap(),
                _ => c.write_all(&[0xa5; HELLO]).unwrap(),
            }
            junk.push(c);
        }
        let t0 = Instant::now();
        let hs: Vec<_> = (0..2)
            .map(|r| {
                let a = addr.clone();
                std::thread::spawn(move || exchange(&a, 11, 2, &rec(r), deadline))
            })
            .collect();
        for h in hs {
            assert_eq!(h.join().unwrap().unwrap(), vec![rec(0), rec(1)]);
        }
        assert!(
            t0.elapsed() < HELLO_DEADLINE,
            "the ranks waited {:?} for silent connections",
            t0.elapsed()
        );
    }

    fn rec(rank: u32) -> RankRecord {
        RankRecord {
            rank,
            data_addr: "127.0.0.1:5000".parse().unwrap(),
            loc: Location {
                host: 7,
                process: 1000 + rank as u128,
            },
            pid: 1,
            cores: 2 + rank,
        }
    }

    #[test]
    fn record_roundtrip() {
        let r = rec(5);
        let mut b = [0u8; RECORD];
        r.encode(&mut b);
        assert_eq!(RankRecord::decode(&b).unwrap(), r);
    }

    #[test]
    fn three_ranks_meet_and_foreign_token_is_refused() {
        let deadline = Instant::now() + Duration::from_secs(20);
        let addr = root(42, deadline);
        let foreign = exchange(&addr, 43, 3, &rec(0), deadline).unwrap_err();
        assert_eq!(foreign.kind, ErrorKind::Para);
        let hs: Vec<_> = (0..3)
            .map(|r| {
                let a = addr.clone();
                std::thread::spawn(move || exchange(&a, 42, 3, &rec(r), deadline))
            })
            .collect();
        for h in hs {
            let t = h.join().unwrap().unwrap();
            assert_eq!(t, vec![rec(0), rec(1), rec(2)]);
        }
    }

    #[test]
    fn root_refuses_addresses_outside_its_whitelist() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = RootAddr::Tcp(l.local_addr().unwrap());
        let deadline = Instant::now() + Duration::from_secs(20);
        let w = Whitelist::parse("test", r#"{"host_ip": ["198.18.0.9"]}"#).unwrap();
        serve_root(RootListener::Tcp(l), 5, deadline, Some(w)).unwrap();
        let e = exchange(&addr, 5, 1, &rec(0), deadline).unwrap_err();
        assert_eq!(e.kind, ErrorKind::Para, "{e}");
        assert!(e.msg.contains("whitelist"), "{e}");
    }

    #[test]
    fn missing_rank_times_out() {
        let deadline = Instant::now() + Duration::from_millis(300);
        let addr = root(1, deadline);
        let e = exchange(&addr, 1, 2, &rec(0), deadline).unwrap_err();
        assert_eq!(e.kind, ErrorKind::Timeout, "{e}");
        assert!(e.msg.contains("[1]"), "{e}");
    }
}
