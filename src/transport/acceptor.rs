//! The process-wide listener for data connections between ranks of different processes.
//!
//! One listener serves every communicator of the process. A connecting rank first sends a
//! handshake naming the communicator key, the (source, destination) ranks and which of the
//! link's sockets this is (index and count); the acceptor answers and parks the socket under
//! that name until the communicator being built claims it. This lets sub-communicators connect
//! without a new rendezvous through a root. The connecting side chooses the socket count, so
//! the two ends of a link always agree on it.
//!
//! The key of a communicator is its job's token from the root info (or derived from it, for
//! sub-communicators), and a communicator registers it ([`Acceptor::expect`]) while it connects.
//! Only a handshake naming a registered key, a rank of this process as destination and a valid
//! source is parked; a handshake naming an unknown key is answered "unknown" and closed (the
//! connecting rank retries until its connect timeout: its peer may not have started connecting
//! yet), anything malformed or silent past [`HANDSHAKE_DEADLINE`] is closed. Handshakes are
//! read concurrently by one thread through a [`Gate`] (no thread per connection, a cap on
//! handshakes in progress, a pause instead of a busy loop when descriptors run out).
//!
//! With `HCCL_WHITELIST_DISABLE=0`, connections from addresses not listed under `host_ip` in
//! `HCCL_WHITELIST_FILE` (`{"host_ip": ["ip", ...], "device_ip": [...]}`, the vendor format;
//! `device_ip` is accepted and, as in the vendor library, not used) are refused before anything
//! is read, logged at error level, and the refusal is reported to the connecting rank. The file
//! is read with the rank table's bounds (size, nesting, no key twice in one object).

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use super::gate::{Arrival, Gate, GateConfig, Listener};
use crate::base::env::EnvConfig;
use crate::base::error::{Error, ErrorKind, Result};
use crate::base::limits::{MAX_RANKS, MAX_RANK_TABLE_BYTES, MAX_RANK_TABLE_DEPTH};
use crate::base::strict_json;

const HS_MAGIC: u32 = 0x4843_4444;
/// Bytes of a handshake.
pub const HS_LEN: usize = 32;
const ACK_MAGIC: u32 = 0x4843_4441;
const ACK_LEN: usize = 8;
const ACK_OK: u32 = 0;
const ACK_REFUSED: u32 = 1;
const ACK_UNKNOWN: u32 = 2;
/// How long a connection may take to send its handshake.
pub const HANDSHAKE_DEADLINE: Duration = Duration::from_secs(3);
/// Most handshakes in progress at once; beyond it the oldest connection is dropped.
pub const MAX_PENDING_HANDSHAKES: usize = 256;
/// Most sockets one link may have (`HCCL_SOCKET_NUM_PER_PEER` allows up to 16).
pub const MAX_LINK_SOCKETS: u16 = 64;

/// (communicator key, source rank, destination rank, socket index).
pub type ConnKey = (u128, u32, u32, u16);

/// A communicator being connected in this process: its rank count and which of its ranks live
/// here (each registered by its own [`Expecting`]).
struct Known {
    n: u32,
    ranks: Vec<u32>,
}

#[derive(Default)]
struct State {
    known: HashMap<u128, Known>,
    /// Parked sockets with the socket count their connector announced.
    parked: HashMap<ConnKey, (TcpStream, u16)>,
}

/// The process-wide data-connection listener.
pub struct Acceptor {
    addr: SocketAddr,
    state: Mutex<State>,
    arrived: Condvar,
}

/// Registration of one rank of a communicator being connected: while it lives, the acceptor
/// parks connections addressed to that rank; dropping it forgets them.
pub struct Expecting {
    acc: &'static Acceptor,
    key: u128,
    rank: u32,
}

impl Drop for Expecting {
    fn drop(&mut self) {
        let mut st = self.acc.state.lock();
        if let Some(k) = st.known.get_mut(&self.key) {
            k.ranks.retain(|&r| r != self.rank);
            if k.ranks.is_empty() {
                st.known.remove(&self.key);
            }
        }
        let (key, rank) = (self.key, self.rank);
        st.parked.retain(|k, _| !(k.0 == key && k.2 == rank));
    }
}

/// Addresses admitted when the whitelist is on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Whitelist {
    path: String,
    hosts: Vec<IpAddr>,
}

impl Whitelist {
    /// Parses a whitelist document; `path` names it in messages.
    pub fn parse(path: &str, text: &str) -> Result<Whitelist> {
        let bad = |why: String| {
            Error::new(
                ErrorKind::Para,
                format!("HCCL_WHITELIST_FILE {path}: {why}"),
            )
        };
        let doc = strict_json::parse(text, MAX_RANK_TABLE_DEPTH).map_err(|e| bad(e.into_msg()))?;
        let list = doc
            .get("host_ip")
            .ok_or_else(|| bad("no \"host_ip\" list".into()))?
            .as_array()
            .ok_or_else(|| bad("\"host_ip\" must be a list of address strings".into()))?;
        let mut hosts = Vec::with_capacity(list.len());
        for (i, v) in list.iter().enumerate() {
            let a = v
                .as_str()
                .and_then(|t| t.trim().parse::<IpAddr>().ok())
                .ok_or_else(|| bad(format!("host_ip[{i}] is not an IP address")))?;
            hosts.push(canonical(a));
        }
        if let Some(d) = doc.get("device_ip") {
            if d.as_array().is_none() {
                return Err(bad("\"device_ip\" must be a list".into()));
            }
        }
        Ok(Whitelist {
            path: path.to_string(),
            hosts,
        })
    }

    /// Loads the whitelist the configuration asks for (`None` when it is disabled).
    pub fn from_env(env: &EnvConfig) -> Result<Option<Whitelist>> {
        if env.whitelist_disable {
            return Ok(None);
        }
        let Some(path) = &env.whitelist_file else {
            return Err(Error::new(
                ErrorKind::Para,
                "HCCL_WHITELIST_DISABLE=0 but HCCL_WHITELIST_FILE is not set",
            ));
        };
        let shown = path.display().to_string();
        let unreadable = |e: std::io::Error| {
            Error::new(
                ErrorKind::OpenFile,
                format!("cannot read HCCL_WHITELIST_FILE {shown}: {e}"),
            )
        };
        // Bounded like a rank table: one byte past the bound is read, never more.
        let mut bytes = Vec::new();
        std::fs::File::open(path)
            .and_then(|f| f.take(MAX_RANK_TABLE_BYTES + 1).read_to_end(&mut bytes))
            .map_err(unreadable)?;
        if bytes.len() as u64 > MAX_RANK_TABLE_BYTES {
            return Err(Error::new(
                ErrorKind::Para,
                format!("HCCL_WHITELIST_FILE {shown} is larger than {MAX_RANK_TABLE_BYTES} bytes"),
            ));
        }
        let text = String::from_utf8(bytes).map_err(|_| {
            Error::new(
                ErrorKind::Para,
                format!("HCCL_WHITELIST_FILE {shown} is not UTF-8 text"),
            )
        })?;
        Whitelist::parse(&shown, &text).map(Some)
    }

    /// The file the whitelist came from.
    pub fn path(&self) -> &str {
        &self.path
    }

    /// Whether connections from `ip` are admitted.
    pub fn admits(&self, ip: IpAddr) -> bool {
        self.hosts.contains(&canonical(ip))
    }
}

/// IPv4-mapped IPv6 addresses compare as the IPv4 address they carry.
fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

/// The listener of this process: (pid that started it, listener). A forked child inherits the
/// parent's entry but not its accept thread, so it starts its own.
static ACCEPTOR: Mutex<Option<(u32, &'static Acceptor)>> = Mutex::new(None);

/// The handshake naming socket `key.3` of a link of `count` sockets.
pub fn encode_handshake(key: ConnKey, count: u16) -> [u8; HS_LEN] {
    let mut b = [0u8; HS_LEN];
    b[0..4].copy_from_slice(&HS_MAGIC.to_le_bytes());
    b[4..6].copy_from_slice(&key.3.to_le_bytes());
    b[6..8].copy_from_slice(&count.to_le_bytes());
    b[8..24].copy_from_slice(&key.0.to_le_bytes());
    b[24..28].copy_from_slice(&key.1.to_le_bytes());
    b[28..32].copy_from_slice(&key.2.to_le_bytes());
    b
}

/// The connection's name and the link's socket count, for a well-formed handshake (socket
/// index below a count of at most [`MAX_LINK_SOCKETS`], ranks below [`MAX_RANKS`] and distinct).
pub fn decode_handshake(b: &[u8]) -> Option<(ConnKey, u16)> {
    let b: &[u8; HS_LEN] = b.get(..HS_LEN)?.try_into().ok()?;
    if u32::from_le_bytes(b[0..4].try_into().ok()?) != HS_MAGIC {
        return None;
    }
    let idx = u16::from_le_bytes(b[4..6].try_into().ok()?);
    let count = u16::from_le_bytes(b[6..8].try_into().ok()?);
    if count == 0 || idx >= count || count > MAX_LINK_SOCKETS {
        return None;
    }
    let (src, dst) = (
        u32::from_le_bytes(b[24..28].try_into().ok()?),
        u32::from_le_bytes(b[28..32].try_into().ok()?),
    );
    if src >= MAX_RANKS || dst >= MAX_RANKS || src == dst {
        return None;
    }
    Some((
        (
            u128::from_le_bytes(b[8..24].try_into().ok()?),
            u32::from_le_bytes(b[24..28].try_into().ok()?),
            u32::from_le_bytes(b[28..32].try_into().ok()?),
            idx,
        ),
        count,
    ))
}

fn encode_ack(status: u32) -> [u8; ACK_LEN] {
    let mut b = [0u8; ACK_LEN];
    b[0..4].copy_from_slice(&ACK_MAGIC.to_le_bytes());
    b[4..8].copy_from_slice(&status.to_le_bytes());
    b
}

/// Binds a listener on `ip`, in `range` when given (first free port), else on an ephemeral port.
pub fn bind_in_range(ip: IpAddr, range: Option<(u16, u16)>) -> Result<TcpListener> {
    if let Some((lo, hi)) = range {
        for port in lo..=hi {
            if let Ok(l) = TcpListener::bind(SocketAddr::new(ip, port)) {
                return Ok(l);
            }
        }
        log::warn!("no free port in {lo}-{hi} on {ip}; using an ephemeral port");
    }
    TcpListener::bind(SocketAddr::new(ip, 0))
        .map_err(|e| Error::new(ErrorKind::Network, format!("cannot listen on {ip}: {e}")))
}

impl Acceptor {
    /// The listener of this process, started on first use on the address chosen from `env`.
    pub fn global(env: &EnvConfig) -> Result<&'static Acceptor> {
        let pid = std::process::id();
        let mut g = ACCEPTOR.lock();
        if let Some((p, a)) = *g {
            if p == pid {
                return Ok(a);
            }
        }
        let (acc, gate) = Acceptor::bind(env)?;
        // Leaked on purpose: the accept thread serves the process until it exits.
        let a: &'static Acceptor = Box::leak(Box::new(acc));
        std::thread::Builder::new()
            .name("hccl-acceptor".into())
            .spawn(move || a.serve(gate))
            .map_err(|e| Error::new(ErrorKind::Syscall, format!("spawn acceptor: {e}")))?;
        *g = Some((pid, a));
        Ok(a)
    }

    /// The listener of this process if it has been started.
    pub fn existing() -> Option<&'static Acceptor> {
        match *ACCEPTOR.lock() {
            Some((p, a)) if p == std::process::id() => Some(a),
            _ => None,
        }
    }

    fn bind(env: &EnvConfig) -> Result<(Acceptor, Gate)> {
        let whitelist = Whitelist::from_env(env)?;
        let local = super::net::choose_local_addr(env)?;
        let listener = bind_in_range(local.addr, env.host_port_range)?;
        let addr = listener.local_addr()?;
        log::info!("data listener on {addr} (interface {})", local.name);
        if let Some(w) = &whitelist {
            log::info!(
                "whitelist {} admits {} address(es) to the data listener",
                w.path,
                w.hosts.len()
            );
        }
        Ok((Acceptor::new(addr), gate(listener, whitelist)?))
    }

    fn new(addr: SocketAddr) -> Acceptor {
        Acceptor {
            addr,
            state: Mutex::new(State::default()),
            arrived: Condvar::new(),
        }
    }

    /// Serves the listener for the life of the process.
    fn serve(&self, mut gate: Gate) {
        loop {
            for a in gate.poll(Duration::from_secs(1)) {
                self.arrival(a);
            }
        }
    }

    /// Parks a connection whose handshake names a rank of this process of a communicator being
    /// connected; answers and closes anything else.
    fn arrival(&self, a: Arrival) {
        let from = a.peer.map_or_else(|| "?".to_string(), |ip| ip.to_string());
        let Some(stream) = a.stream.into_tcp() else {
            return;
        };
        let Some((key, count)) = decode_handshake(&a.hello) else {
            log::warn!("data listener: closed a connection from {from}: not an HCCL handshake");
            return;
        };
        let mut st = self.state.lock();
        let known = st
            .known
            .get(&key.0)
            .is_some_and(|k| key.1 < k.n && k.ranks.contains(&key.2));
        if !known || st.parked.contains_key(&key) {
            drop(st);
            log::debug!(
                "data listener: closed a connection from {from} for an unknown communicator or \
                 rank, or a socket already connected"
            );
            let _ = (&stream).write(&encode_ack(ACK_UNKNOWN));
            return;
        }
        // A fresh socket takes 8 bytes without blocking; later users expect blocking mode.
        if (&stream).write_all(&encode_ack(ACK_OK)).is_err()
            || stream.set_nonblocking(false).is_err()
        {
            return;
        }
        st.parked.insert(key, (stream, count));
        drop(st);
        self.arrived.notify_all();
    }

    /// Registers rank `rank` (of `n`) of communicator `key` in this process as connecting:
    /// connections addressed to it are parked until the returned registration is dropped.
    pub fn expect(&'static self, key: u128, rank: u32, n: u32) -> Expecting {
        let mut st = self.state.lock();
        let k = st.known.entry(key).or_insert(Known {
            n,
            ranks: Vec::new(),
        });
        if !k.ranks.contains(&rank) {
            k.ranks.push(rank);
        }
        Expecting {
            acc: self,
            key,
            rank,
        }
    }

    /// The address peers connect to.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    fn take_one(&self, k: ConnKey, deadline: Instant) -> Result<(TcpStream, u16)> {
        let mut st = self.state.lock();
        loop {
            if let Some(s) = st.parked.remove(&k) {
                return Ok(s);
            }
            if self.arrived.wait_until(&mut st, deadline).timed_out() {
                if let Some(s) = st.parked.remove(&k) {
                    return Ok(s);
                }
                return Err(Error::new(
                    ErrorKind::Timeout,
                    format!(
                        "rank {} did not connect (socket {}) to rank {} before the connect timeout",
                        k.1, k.3, k.2
                    ),
                ));
            }
        }
    }

    /// Waits for every socket of the link from rank `src` to rank `dst` of communicator `key`
    /// (as many as the connecting rank opened), in socket order.
    pub fn take_link(
        &self,
        key: u128,
        src: u32,
        dst: u32,
        deadline: Instant,
    ) -> Result<Vec<TcpStream>> {
        let (first, count) = self.take_one((key, src, dst, 0), deadline)?;
        let mut out = Vec::with_capacity(count as usize);
        out.push(first);
        for i in 1..count {
            let (s, c) = self.take_one((key, src, dst, i), deadline)?;
            if c != count {
                return Err(Error::new(
                    ErrorKind::Para,
                    format!("rank {src} announced {count} and {c} sockets to rank {dst}"),
                ));
            }
            out.push(s);
        }
        Ok(out)
    }

    /// Drops parked connections of a communicator that no longer needs them.
    pub fn forget(&self, key: u128) {
        self.state.lock().parked.retain(|k, _| k.0 != key);
    }

    /// Connections parked and not yet claimed.
    pub fn parked(&self) -> usize {
        self.state.lock().parked.len()
    }
}

/// The gate of a data listener.
fn gate(listener: TcpListener, whitelist: Option<Whitelist>) -> Result<Gate> {
    Gate::new(
        Listener::Tcp(listener),
        GateConfig {
            what: "data listener",
            conn: "data connection",
            hello_len: HS_LEN,
            deadline: HANDSHAKE_DEADLINE,
            cap: MAX_PENDING_HANDSHAKES,
            whitelist,
            refusal: encode_ack(ACK_REFUSED).to_vec(),
        },
    )
    .map_err(|e| Error::new(ErrorKind::Network, format!("data listener: {e}")))
}

/// Opens the `count` sockets (1..=65535) of the link from rank `src` to rank `dst` of
/// communicator `key` at the listener `addr`, retrying refused connections until `deadline`.
pub fn connect_link(
    addr: SocketAddr,
    key: u128,
    src: u32,
    dst: u32,
    count: u16,
    deadline: Instant,
) -> Result<Vec<TcpStream>> {
    (0..count.max(1))
        .map(|i| connect_one(addr, (key, src, dst, i), count.max(1), deadline))
        .collect()
}

/// Reads the acceptor's answer: `Ok(true)` parked, `Ok(false)` communicator not known there
/// (yet).
fn await_ack(s: &mut TcpStream, k: ConnKey, addr: SocketAddr, deadline: Instant) -> Result<bool> {
    let (src, dst) = (k.1, k.2);
    let left = deadline.saturating_duration_since(Instant::now());
    s.set_read_timeout(Some(left.max(Duration::from_millis(1))))?;
    let mut ack = [0u8; ACK_LEN];
    s.read_exact(&mut ack).map_err(|e| {
        // Out of time while the listener had not answered yet: the connect timeout, not a
        // broken listener.
        let kind = match e.kind() {
            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => ErrorKind::Timeout,
            _ => ErrorKind::TcpConnect,
        };
        Error::new(
            kind,
            format!(
                "rank {src} connecting to rank {dst} at {addr}: no answer to the handshake: {e}"
            ),
        )
    })?;
    s.set_read_timeout(None)?;
    let magic = u32::from_le_bytes(ack[0..4].try_into().expect("4 bytes"));
    let status = u32::from_le_bytes(ack[4..8].try_into().expect("4 bytes"));
    match (magic, status) {
        (ACK_MAGIC, ACK_OK) => Ok(true),
        (ACK_MAGIC, ACK_UNKNOWN) => Ok(false),
        (ACK_MAGIC, ACK_REFUSED) => Err(Error::new(
            ErrorKind::TcpConnect,
            format!(
                "rank {src} connecting to rank {dst} at {addr}: refused, this host's address {} \
                 is not in the whitelist (HCCL_WHITELIST_FILE) of rank {dst}'s host",
                s.local_addr()
                    .map_or_else(|_| "?".into(), |a| a.ip().to_string())
            ),
        )),
        _ => Err(Error::new(
            ErrorKind::TcpConnect,
            format!("rank {src} connecting to rank {dst} at {addr}: not an HCCL data listener"),
        )),
    }
}

fn connect_one(addr: SocketAddr, k: ConnKey, count: u16, deadline: Instant) -> Result<TcpStream> {
    let (src, dst) = (k.1, k.2);
    let mut delay = Duration::from_millis(2);
    let mut unknown = false;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            let why = if unknown {
                ": its process does not know this communicator (that rank has not started \
                 connecting, or belongs to another job)"
            } else {
                ""
            };
            return Err(Error::new(
                ErrorKind::Timeout,
                format!(
                    "rank {src} could not connect to rank {dst} at {addr} before the connect \
                     timeout{why}"
                ),
            ));
        }
        match TcpStream::connect_timeout(&addr, left) {
            Ok(mut s) => {
                // A listener that refuses this address answers without reading: its answer
                // says more than a failed write would.
                let sent = s.write_all(&encode_handshake(k, count));
                match await_ack(&mut s, k, addr, deadline) {
                    Ok(true) => return Ok(s),
                    Ok(false) => unknown = true,
                    // The deadline passed while waiting for the answer: report it as above,
                    // with what earlier answers said.
                    Err(e) if e.kind == ErrorKind::Timeout => continue,
                    Err(e) => return Err(sent.err().map_or(e, Error::from)),
                }
                std::thread::sleep(delay.min(left));
                delay = (delay * 2).min(Duration::from_millis(200));
            }
            Err(e) if matches!(e.kind(), std::io::ErrorKind::ConnectionRefused) => {
                std::thread::sleep(delay.min(left));
                delay = (delay * 2).min(Duration::from_millis(200));
            }
            Err(e) => {
                return Err(Error::new(
                    ErrorKind::TcpConnect,
                    format!("rank {src} connecting to rank {dst} at {addr}: {e}"),
                ))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An acceptor of its own on loopback (tests run in parallel).
    fn local(whitelist: Option<Whitelist>) -> (&'static Acceptor, SocketAddr) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let a: &'static Acceptor = Box::leak(Box::new(Acceptor::new(addr)));
        let g = gate(l, whitelist).unwrap();
        std::thread::spawn(move || a.serve(g));
        (a, addr)
    }

    #[test]
    fn handshake_roundtrip() {
        let k = (0x1234_5678_9abc, 3, 7, 2);
        let b = encode_handshake(k, 4);
        assert_eq!(decode_handshake(&b), Some((k, 4)));
        let mut bad = b;
        bad[0] ^= 1;
        assert_eq!(decode_handshake(&bad), None);
        // Socket index must lie below the count.
        assert_eq!(decode_handshake(&encode_handshake(k, 2)), None);
        assert_eq!(
            decode_handshake(&encode_handshake(k, MAX_LINK_SOCKETS + 1)),
            None
        );
        assert_eq!(decode_handshake(&encode_handshake((1, 3, 3, 0), 1)), None);
        assert_eq!(
            decode_handshake(&encode_handshake((1, MAX_RANKS, 0, 0), 1)),
            None
        );
        assert_eq!(decode_handshake(&b[..HS_LEN - 1]), None);
    }

    #[test]
    fn only_registered_ranks_get_connections() {
        let (acc, addr) = local(None);
        let dl = Instant::now() + Duration::from_secs(20);
        // Unknown communicator: refused again and again until the connector gives up.
        // Long enough for an answer to arrive on a loaded machine before the connector gives up.
        let short = Instant::now() + Duration::from_secs(3);
        let e = connect_link(addr, 77, 0, 1, 1, short).unwrap_err();
        assert_eq!(e.kind, ErrorKind::Timeout);
        assert!(
            e.msg.contains("does not know this communicator"),
            "{}",
            e.msg
        );
        assert_eq!(acc.parked(), 0);
        // Registered: parked and claimed, one link of two sockets.
        let reg = acc.expect(77, 1, 2);
        let t = std::thread::spawn(move || connect_link(addr, 77, 0, 1, 2, dl).unwrap());
        let got = acc.take_link(77, 0, 1, dl).unwrap();
        assert_eq!(got.len(), 2);
        drop(t.join().unwrap());
        // A source out of range, or a destination that is not the registered rank: refused.
        let short = Instant::now() + Duration::from_millis(200);
        assert!(connect_link(addr, 77, 5, 1, 1, short).is_err());
        assert!(connect_link(addr, 77, 1, 0, 1, short).is_err());
        assert_eq!(acc.parked(), 0);
        // Parked but never claimed: forgotten with the registration.
        connect_link(addr, 77, 0, 1, 1, dl).unwrap();
        assert_eq!(acc.parked(), 1);
        drop(reg);
        assert_eq!(acc.parked(), 0);
    }

    #[test]
    fn whitelist_parsing() {
        let w = Whitelist::parse(
            "w.json",
            r#"{"host_ip": ["198.18.0.1", " 198.18.0.2 "], "device_ip": []}"#,
        )
        .unwrap();
        assert!(w.admits("198.18.0.2".parse().unwrap()));
        assert!(w.admits("::ffff:198.18.0.1".parse().unwrap()));
        assert!(!w.admits("198.18.0.3".parse().unwrap()));
        for bad in [
            r#"{"device_ip": ["198.18.0.1"]}"#,
            r#"{"host_ip": "198.18.0.1"}"#,
            r#"{"host_ip": ["198.18.0"]}"#,
            r#"{"host_ip": [], "device_ip": 3}"#,
            r#"{"host_ip": ["198.18.0.1"], "host_ip": ["198.18.0.2"]}"#,
            r#"{"host_ip": ["198.18.0.1"]} trailing"#,
            r#"{"host_ip": ["198.18.0.1"]"#,
            "not json",
        ] {
            let e = Whitelist::parse("w.json", bad).unwrap_err();
            assert!(e.msg.contains("HCCL_WHITELIST_FILE w.json"), "{}", e.msg);
        }
        let e =
            Whitelist::parse("w.json", r#"{"host_ip": ["1.2.3.4"], "host_ip": []}"#).unwrap_err();
        assert!(e.msg.contains("host_ip"), "{}", e.msg);
        let deep = format!("{}{}", "[".repeat(200_000), "]".repeat(200_000));
        let e = Whitelist::parse("w.json", &deep).unwrap_err();
        assert!(e.msg.contains("nested more than"), "{}", e.msg);
    }

    #[test]
    fn whitelist_file_is_read_with_a_bound() {
        let dir = std::env::temp_dir().join(format!("hccl-wl-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let env = |path: &std::path::Path| {
            let path = path.display().to_string();
            EnvConfig::from_lookup(|k| match k {
                "HCCL_WHITELIST_DISABLE" => Some("0".into()),
                "HCCL_WHITELIST_FILE" => Some(path.clone()),
                _ => None,
            })
            .unwrap()
        };
        let ok = dir.join("ok.json");
        std::fs::write(&ok, r#"{"host_ip": ["10.0.0.1"]}"#).unwrap();
        let w = Whitelist::from_env(&env(&ok)).unwrap().unwrap();
        assert!(w.admits("10.0.0.1".parse().unwrap()));
        let big = dir.join("big.json");
        let mut text = br#"{"host_ip": ["10.0.0.1"]}"#.to_vec();
        text.resize(MAX_RANK_TABLE_BYTES as usize + 1, b' ');
        std::fs::write(&big, text).unwrap();
        let e = Whitelist::from_env(&env(&big)).unwrap_err();
        assert!(
            e.msg.contains("larger than") && e.msg.contains("big.json"),
            "{}",
            e.msg
        );
        let missing = dir.join("missing.json");
        let e = Whitelist::from_env(&env(&missing)).unwrap_err();
        assert_eq!(e.kind, ErrorKind::OpenFile);
        assert!(e.msg.contains("missing.json"), "{}", e.msg);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn whitelist_refuses_and_tells_the_connector() {
        let w = Whitelist::parse("w.json", r#"{"host_ip": ["198.18.0.9"]}"#).unwrap();
        let (_, addr) = local(Some(w));
        let dl = Instant::now() + Duration::from_secs(10);
        let e = connect_link(addr, 5, 0, 1, 1, dl).unwrap_err();
        assert!(e.msg.contains("not in the whitelist"), "{}", e.msg);
        assert_eq!(e.kind, ErrorKind::TcpConnect);
    }
}
