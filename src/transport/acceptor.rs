//! The process-wide listener for data connections between ranks of different processes.
//!
//! One listener serves every communicator of the process. A connecting rank first sends a
//! handshake naming the communicator key, the (source, destination) ranks and which of the
//! link's sockets this is (index and count); the acceptor answers accept or refuse and parks
//! the socket under that name until the communicator being built claims it. This lets
//! sub-communicators connect without a new rendezvous through a root. The connecting side
//! chooses the socket count, so the two ends of a link always agree on it.
//!
//! With `HCCL_WHITELIST_DISABLE=0`, connections from addresses not listed under `host_ip` in
//! `HCCL_WHITELIST_FILE` (`{"host_ip": ["ip", ...], "device_ip": [...]}`, the vendor format;
//! `device_ip` is accepted and, as in the vendor library, not used) are refused, logged at
//! error level, and the refusal is reported to the connecting rank. The file is read with the
//! rank table's bounds (size, nesting, no key twice in one object).

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use crate::base::env::EnvConfig;
use crate::base::error::{Error, ErrorKind, Result};
use crate::base::limits::{MAX_RANK_TABLE_BYTES, MAX_RANK_TABLE_DEPTH};
use crate::base::strict_json;

const HS_MAGIC: u32 = 0x4843_4443;
const HS_LEN: usize = 32;
const ACK_MAGIC: u32 = 0x4843_4441;
const ACK_LEN: usize = 8;
const ACK_OK: u32 = 0;
const ACK_REFUSED: u32 = 1;

/// (communicator key, source rank, destination rank, socket index).
type ConnKey = (u128, u32, u32, u16);

/// The process-wide data-connection listener.
pub struct Acceptor {
    addr: SocketAddr,
    /// Parked sockets with the socket count their connector announced.
    parked: Mutex<HashMap<ConnKey, (TcpStream, u16)>>,
    arrived: Condvar,
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
        let doc = strict_json::parse(text, MAX_RANK_TABLE_DEPTH).map_err(|e| bad(e.msg))?;
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

fn encode_handshake(key: ConnKey, count: u16) -> [u8; HS_LEN] {
    let mut b = [0u8; HS_LEN];
    b[0..4].copy_from_slice(&HS_MAGIC.to_le_bytes());
    b[4..6].copy_from_slice(&key.3.to_le_bytes());
    b[6..8].copy_from_slice(&count.to_le_bytes());
    b[8..24].copy_from_slice(&key.0.to_le_bytes());
    b[24..28].copy_from_slice(&key.1.to_le_bytes());
    b[28..32].copy_from_slice(&key.2.to_le_bytes());
    b
}

/// The connection's name and the link's socket count, for a well-formed handshake.
fn decode_handshake(b: &[u8; HS_LEN]) -> Option<(ConnKey, u16)> {
    if u32::from_le_bytes(b[0..4].try_into().ok()?) != HS_MAGIC {
        return None;
    }
    let idx = u16::from_le_bytes(b[4..6].try_into().ok()?);
    let count = u16::from_le_bytes(b[6..8].try_into().ok()?);
    if count == 0 || idx >= count {
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
        // Leaked on purpose: the accept thread serves the process until it exits.
        let a: &'static Acceptor = Box::leak(Box::new(Acceptor::start(env)?));
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

    fn start(env: &EnvConfig) -> Result<Acceptor> {
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
        std::thread::Builder::new()
            .name("hccl-acceptor".into())
            .spawn(move || accept_loop(listener, whitelist))
            .map_err(|e| Error::new(ErrorKind::Syscall, format!("spawn acceptor: {e}")))?;
        Ok(Acceptor {
            addr,
            parked: Mutex::new(HashMap::new()),
            arrived: Condvar::new(),
        })
    }

    /// The address peers connect to.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    fn take_one(&self, k: ConnKey, deadline: Instant) -> Result<(TcpStream, u16)> {
        let mut parked = self.parked.lock();
        loop {
            if let Some(s) = parked.remove(&k) {
                return Ok(s);
            }
            if self.arrived.wait_until(&mut parked, deadline).timed_out() {
                if let Some(s) = parked.remove(&k) {
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
        self.parked.lock().retain(|k, _| k.0 != key);
    }
}

fn accept_loop(listener: TcpListener, whitelist: Option<Whitelist>) {
    let whitelist = std::sync::Arc::new(whitelist);
    for conn in listener.incoming() {
        let Ok(stream) = conn else { continue };
        let whitelist = whitelist.clone();
        // Handshakes are read off the accept thread so a silent client cannot stall others.
        let _ = std::thread::Builder::new()
            .name("hccl-handshake".into())
            .spawn(move || {
                if let Err(e) = park(stream, whitelist.as_ref().as_ref()) {
                    log::warn!("rejected data connection: {e}");
                }
            });
    }
}

fn park(mut stream: TcpStream, whitelist: Option<&Whitelist>) -> Result<()> {
    let peer = stream.peer_addr()?;
    stream.set_read_timeout(Some(Duration::from_secs(30)))?;
    let mut hs = [0u8; HS_LEN];
    stream.read_exact(&mut hs)?;
    stream.set_read_timeout(None)?;
    if let Some(w) = whitelist {
        if !w.admits(peer.ip()) {
            // The handshake has been read, so closing sends a clean FIN after the answer.
            log::error!(
                "refused data connection from {}: address not in the whitelist {} \
                 (HCCL_WHITELIST_DISABLE=0)",
                peer.ip(),
                w.path
            );
            let _ = stream.write_all(&encode_ack(ACK_REFUSED));
            return Ok(());
        }
    }
    let (key, count) = decode_handshake(&hs)
        .ok_or_else(|| Error::new(ErrorKind::Para, format!("bad handshake from {peer}")))?;
    let acc = Acceptor::existing()
        .ok_or_else(|| Error::new(ErrorKind::Internal, "acceptor not initialised"))?;
    stream.write_all(&encode_ack(ACK_OK))?;
    acc.parked.lock().insert(key, (stream, count));
    acc.arrived.notify_all();
    Ok(())
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

fn await_ack(s: &mut TcpStream, k: ConnKey, addr: SocketAddr, deadline: Instant) -> Result<()> {
    let (src, dst) = (k.1, k.2);
    let left = deadline.saturating_duration_since(Instant::now());
    s.set_read_timeout(Some(left.max(Duration::from_millis(1))))?;
    let mut ack = [0u8; ACK_LEN];
    s.read_exact(&mut ack).map_err(|e| {
        Error::new(
            ErrorKind::TcpConnect,
            format!(
                "rank {src} connecting to rank {dst} at {addr}: no answer to the handshake: {e}"
            ),
        )
    })?;
    s.set_read_timeout(None)?;
    let magic = u32::from_le_bytes(ack[0..4].try_into().expect("4 bytes"));
    let status = u32::from_le_bytes(ack[4..8].try_into().expect("4 bytes"));
    match (magic, status) {
        (ACK_MAGIC, ACK_OK) => Ok(()),
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
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(Error::new(
                ErrorKind::Timeout,
                format!("rank {src} could not connect to rank {dst} at {addr} before the connect timeout"),
            ));
        }
        match TcpStream::connect_timeout(&addr, left) {
            Ok(mut s) => {
                s.write_all(&encode_handshake(k, count))?;
                await_ack(&mut s, k, addr, deadline)?;
                return Ok(s);
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
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let w = Whitelist::parse("w.json", r#"{"host_ip": ["198.18.0.9"]}"#).unwrap();
        std::thread::spawn(move || accept_loop(l, Some(w)));
        let dl = Instant::now() + Duration::from_secs(10);
        let e = connect_link(addr, 5, 0, 1, 1, dl).unwrap_err();
        assert!(e.msg.contains("not in the whitelist"), "{}", e.msg);
        assert_eq!(e.kind, ErrorKind::TcpConnect);
    }
}
