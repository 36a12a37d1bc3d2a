//! Rendezvous through a root: every rank reports where it lives and how to reach it, and the
//! root answers each with the whole table once all ranks have arrived.
//!
//! The root is a thread of the process that called `HcclGetRootInfo` (or of rank 0 for rank
//! table initialisation). It serves one communicator and exits when done or when the connect
//! timeout expires, telling every waiting rank which ranks never arrived.

use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::time::{Duration, Instant};

use crate::base::error::{Error, ErrorKind, Result};
use crate::base::topology::Location;
use crate::transport::acceptor::Whitelist;

const HELLO_MAGIC: u32 = 0x4842_4348; // "HCBH"
const PROTO_VERSION: u32 = 1;
const RECORD: usize = 64;
const HELLO: usize = 32 + RECORD;

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
}

impl RankRecord {
    fn encode(&self, b: &mut [u8]) {
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
    }

    fn decode(b: &[u8]) -> Result<RankRecord> {
        let ip = match b[4] {
            4 => IpAddr::V4(Ipv4Addr::new(b[8], b[9], b[10], b[11])),
            6 => IpAddr::V6(Ipv6Addr::from(<[u8; 16]>::try_from(&b[8..24]).unwrap())),
            _ => {
                return Err(Error::new(
                    ErrorKind::Para,
                    "bad address family in rank record",
                ))
            }
        };
        Ok(RankRecord {
            rank: u32::from_le_bytes(b[0..4].try_into().unwrap()),
            data_addr: SocketAddr::new(ip, u16::from_le_bytes(b[6..8].try_into().unwrap())),
            loc: Location {
                host: u64::from_le_bytes(b[24..32].try_into().unwrap()),
                process: u128::from_le_bytes(b[32..48].try_into().unwrap()),
            },
            pid: u32::from_le_bytes(b[48..52].try_into().unwrap()),
        })
    }
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
pub enum RootListener {
    /// TCP.
    Tcp(TcpListener),
    /// Abstract Unix socket.
    Unix(UnixListener),
}

trait Conn: Read + Write + Send {
    fn set_timeout(&self, d: Option<Duration>) -> std::io::Result<()>;
}

impl Conn for TcpStream {
    fn set_timeout(&self, d: Option<Duration>) -> std::io::Result<()> {
        self.set_read_timeout(d)?;
        self.set_write_timeout(d)
    }
}

impl Conn for UnixStream {
    fn set_timeout(&self, d: Option<Duration>) -> std::io::Result<()> {
        self.set_read_timeout(d)?;
        self.set_write_timeout(d)
    }
}

impl RootListener {
    /// Binds an abstract Unix socket named `name`.
    pub fn bind_unix(name: &str) -> Result<RootListener> {
        let addr = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes())?;
        Ok(RootListener::Unix(UnixListener::bind_addr(&addr)?))
    }

    fn fd(&self) -> i32 {
        match self {
            RootListener::Tcp(l) => l.as_raw_fd(),
            RootListener::Unix(l) => l.as_raw_fd(),
        }
    }

    /// Accepts one connection, with the peer's IP address for TCP.
    fn accept(&self) -> std::io::Result<(Box<dyn Conn>, Option<IpAddr>)> {
        Ok(match self {
            RootListener::Tcp(l) => {
                let (s, a) = l.accept()?;
                s.set_nonblocking(false)?;
                let _ = s.set_nodelay(true);
                (Box::new(s), Some(a.ip()))
            }
            RootListener::Unix(l) => {
                let (s, _) = l.accept()?;
                s.set_nonblocking(false)?;
                (Box::new(s), None)
            }
        })
    }
}

/// Starts the root of one communicator on its own thread; with a whitelist, ranks connecting
/// from other addresses are refused.
pub fn serve_root(
    listener: RootListener,
    token: u128,
    deadline: Instant,
    whitelist: Option<Whitelist>,
) -> Result<()> {
    std::thread::Builder::new()
        .name("hccl-root".into())
        .spawn(move || {
            if let Err(e) = root_loop(listener, token, deadline, whitelist.as_ref()) {
                log::error!("bootstrap root: {e}");
            }
        })
        .map(|_| ())
        .map_err(|e| Error::new(ErrorKind::Syscall, format!("spawn root thread: {e}")))
}

fn reply_error(c: &mut dyn Conn, kind: ErrorKind, msg: &str) {
    let mut b = Vec::with_capacity(8 + msg.len());
    b.extend_from_slice(&kind.code().to_le_bytes());
    b.extend_from_slice(&(msg.len() as u32).to_le_bytes());
    b.extend_from_slice(msg.as_bytes());
    let _ = c.write_all(&b);
}

fn root_loop(
    listener: RootListener,
    token: u128,
    deadline: Instant,
    whitelist: Option<&Whitelist>,
) -> Result<()> {
    let mut expected: Option<u32> = None;
    let mut ranks: Vec<Option<(RankRecord, Box<dyn Conn>)>> = Vec::new();
    let mut arrived = 0u32;
    loop {
        if let Some(n) = expected {
            if arrived == n {
                break;
            }
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            let missing: Vec<usize> = match expected {
                Some(_) => ranks
                    .iter()
                    .enumerate()
                    .filter(|(_, r)| r.is_none())
                    .map(|(i, _)| i)
                    .collect(),
                None => Vec::new(),
            };
            let msg =
                format!("rank(s) {missing:?} did not reach the root before the connect timeout");
            log::error!("bootstrap root: {msg}");
            for (_, c) in ranks.iter_mut().flatten() {
                reply_error(c.as_mut(), ErrorKind::Timeout, &msg);
            }
            return Ok(());
        }
        let mut pfd = libc::pollfd {
            fd: listener.fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: polls one valid descriptor.
        let r = unsafe { libc::poll(&mut pfd, 1, left.as_millis().clamp(1, 1000) as i32) };
        if r <= 0 {
            continue;
        }
        let Ok((mut c, peer_ip)) = listener.accept() else {
            continue;
        };
        if let (Some(w), Some(ip)) = (whitelist, peer_ip) {
            if !w.admits(ip) {
                log::error!(
                    "bootstrap root: refused a rank connecting from {ip}: address not in the \
                     whitelist (HCCL_WHITELIST_DISABLE=0)"
                );
                reply_error(
                    c.as_mut(),
                    ErrorKind::Para,
                    "address not in the root's whitelist",
                );
                continue;
            }
        }
        let _ = c.set_timeout(Some(Duration::from_secs(10)));
        let mut h = [0u8; HELLO];
        if c.read_exact(&mut h).is_err() {
            continue;
        }
        let u32_at = |o: usize| u32::from_le_bytes(h[o..o + 4].try_into().unwrap());
        if u32_at(0) != HELLO_MAGIC || u32_at(4) != PROTO_VERSION {
            reply_error(
                c.as_mut(),
                ErrorKind::Para,
                "not a bootstrap hello of this version",
            );
            continue;
        }
        if u128::from_le_bytes(h[8..24].try_into().unwrap()) != token {
            log::warn!("bootstrap root: refused a rank carrying another job's token");
            reply_error(
                c.as_mut(),
                ErrorKind::Para,
                "root info belongs to another job",
            );
            continue;
        }
        let n = u32_at(24);
        let rank = u32_at(28);
        let rec = match RankRecord::decode(&h[32..]) {
            Ok(r) => r,
            Err(e) => {
                reply_error(c.as_mut(), ErrorKind::Para, &e.msg);
                continue;
            }
        };
        match expected {
            None => {
                expected = Some(n);
                ranks = (0..n).map(|_| None).collect();
            }
            Some(m) if m != n => {
                reply_error(
                    c.as_mut(),
                    ErrorKind::Para,
                    &format!("rank {rank} says there are {n} ranks, others said {m}"),
                );
                continue;
            }
            _ => {}
        }
        if rank >= n || ranks[rank as usize].is_some() {
            reply_error(
                c.as_mut(),
                ErrorKind::Para,
                &format!("rank {rank} is out of range or already joined (rank count {n})"),
            );
            continue;
        }
        ranks[rank as usize] = Some((rec, c));
        arrived += 1;
    }
    let n = ranks.len();
    let mut table = Vec::with_capacity(8 + n * RECORD);
    table.extend_from_slice(&0u32.to_le_bytes());
    table.extend_from_slice(&(n as u32).to_le_bytes());
    for (rec, _) in ranks.iter().flatten() {
        let mut b = [0u8; RECORD];
        rec.encode(&mut b);
        table.extend_from_slice(&b);
    }
    for (rec, c) in ranks.iter_mut().flatten() {
        if let Err(e) = c.write_all(&table) {
            log::warn!("bootstrap root: could not answer rank {}: {e}", rec.rank);
        }
    }
    Ok(())
}

fn connect_root(addr: &RootAddr, deadline: Instant) -> Result<Box<dyn Conn>> {
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
        let res: std::io::Result<Box<dyn Conn>> = match addr {
            RootAddr::Tcp(a) => TcpStream::connect_timeout(a, left).map(|s| {
                let _ = s.set_nodelay(true);
                Box::new(s) as Box<dyn Conn>
            }),
            RootAddr::Unix(name) => {
                std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes())
                    .and_then(|a| UnixStream::connect_addr(&a))
                    .map(|s| Box::new(s) as Box<dyn Conn>)
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

/// Joins the rendezvous at `addr` as `me.rank` of `n` ranks; returns every rank's record.
pub fn exchange(
    addr: &RootAddr,
    token: u128,
    n: u32,
    me: &RankRecord,
    deadline: Instant,
) -> Result<Vec<RankRecord>> {
    let mut c = connect_root(addr, deadline)?;
    let mut h = [0u8; HELLO];
    h[0..4].copy_from_slice(&HELLO_MAGIC.to_le_bytes());
    h[4..8].copy_from_slice(&PROTO_VERSION.to_le_bytes());
    h[8..24].copy_from_slice(&token.to_le_bytes());
    h[24..28].copy_from_slice(&n.to_le_bytes());
    h[28..32].copy_from_slice(&me.rank.to_le_bytes());
    me.encode(&mut h[32..]);
    c.write_all(&h)?;
    // The root answers when all ranks arrived or at its own deadline; allow slack past ours so
    // its explanation (which ranks are missing) reaches us.
    let left = deadline.saturating_duration_since(Instant::now()) + Duration::from_secs(2);
    c.set_timeout(Some(left))?;
    let mut head = [0u8; 8];
    c.read_exact(&mut head).map_err(|e| {
        Error::new(
            ErrorKind::Timeout,
            format!("no answer from the bootstrap root: {e}"),
        )
    })?;
    let status = u32::from_le_bytes(head[0..4].try_into().unwrap());
    let len = u32::from_le_bytes(head[4..8].try_into().unwrap());
    if status != 0 {
        let mut msg = vec![0u8; len.min(4096) as usize];
        let _ = c.read_exact(&mut msg);
        let kind = match status {
            9 => ErrorKind::Timeout,
            _ => ErrorKind::Para,
        };
        return Err(Error::new(
            kind,
            format!(
                "bootstrap root refused rank {}: {}",
                me.rank,
                String::from_utf8_lossy(&msg)
            ),
        ));
    }
    if len != n {
        return Err(Error::new(
            ErrorKind::Internal,
            "bootstrap root sent a table of the wrong size",
        ));
    }
    let mut body = vec![0u8; n as usize * RECORD];
    c.read_exact(&mut body)?;
    let table = body
        .chunks_exact(RECORD)
        .map(RankRecord::decode)
        .collect::<Result<Vec<_>>>()?;
    for (i, r) in table.iter().enumerate() {
        if r.rank as usize != i {
            return Err(Error::new(
                ErrorKind::Internal,
                "bootstrap table out of order",
            ));
        }
    }
    Ok(table)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(rank: u32) -> RankRecord {
        RankRecord {
            rank,
            data_addr: "127.0.0.1:5000".parse().unwrap(),
            loc: Location {
                host: 7,
                process: 1000 + rank as u128,
            },
            pid: 1,
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
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = RootAddr::Tcp(l.local_addr().unwrap());
        let deadline = Instant::now() + Duration::from_secs(20);
        serve_root(RootListener::Tcp(l), 42, deadline, None).unwrap();
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
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = RootAddr::Tcp(l.local_addr().unwrap());
        let deadline = Instant::now() + Duration::from_millis(300);
        serve_root(RootListener::Tcp(l), 1, deadline, None).unwrap();
        let e = exchange(&addr, 1, 2, &rec(0), deadline).unwrap_err();
        assert_eq!(e.kind, ErrorKind::Timeout, "{e}");
        assert!(e.msg.contains("[1]"), "{e}");
    }
}
