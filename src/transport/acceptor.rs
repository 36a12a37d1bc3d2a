//! The process-wide listener for data connections between ranks of different processes.
//!
//! One listener serves every communicator of the process. A connecting rank first sends a
//! handshake naming the communicator key and the (source, destination) ranks; the acceptor
//! parks the socket under that name until the communicator being built claims it. This lets
//! sub-communicators connect without a new rendezvous through a root.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use crate::base::env::EnvConfig;
use crate::base::error::{Error, ErrorKind, Result};

const HS_MAGIC: u32 = 0x4843_4443;
const HS_LEN: usize = 32;

type ConnKey = (u128, u32, u32);

/// The process-wide data-connection listener.
pub struct Acceptor {
    addr: SocketAddr,
    parked: Mutex<HashMap<ConnKey, TcpStream>>,
    arrived: Condvar,
}

/// The listener of this process: (pid that started it, listener). A forked child inherits the
/// parent's entry but not its accept thread, so it starts its own.
static ACCEPTOR: Mutex<Option<(u32, &'static Acceptor)>> = Mutex::new(None);

fn encode_handshake(key: u128, src: u32, dst: u32) -> [u8; HS_LEN] {
    let mut b = [0u8; HS_LEN];
    b[0..4].copy_from_slice(&HS_MAGIC.to_le_bytes());
    b[8..24].copy_from_slice(&key.to_le_bytes());
    b[24..28].copy_from_slice(&src.to_le_bytes());
    b[28..32].copy_from_slice(&dst.to_le_bytes());
    b
}

fn decode_handshake(b: &[u8; HS_LEN]) -> Option<ConnKey> {
    if u32::from_le_bytes(b[0..4].try_into().ok()?) != HS_MAGIC {
        return None;
    }
    Some((
        u128::from_le_bytes(b[8..24].try_into().ok()?),
        u32::from_le_bytes(b[24..28].try_into().ok()?),
        u32::from_le_bytes(b[28..32].try_into().ok()?),
    ))
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
        let local = super::net::choose_local_addr(env)?;
        let listener = bind_in_range(local.addr, env.host_port_range)?;
        let addr = listener.local_addr()?;
        log::info!("data listener on {addr} (interface {})", local.name);
        std::thread::Builder::new()
            .name("hccl-acceptor".into())
            .spawn(move || accept_loop(listener))
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

    /// Waits for the connection from rank `src` to rank `dst` of communicator `key`.
    pub fn take(&self, key: u128, src: u32, dst: u32, deadline: Instant) -> Result<TcpStream> {
        let mut parked = self.parked.lock();
        loop {
            if let Some(s) = parked.remove(&(key, src, dst)) {
                return Ok(s);
            }
            if self.arrived.wait_until(&mut parked, deadline).timed_out() {
                if let Some(s) = parked.remove(&(key, src, dst)) {
                    return Ok(s);
                }
                return Err(Error::new(
                    ErrorKind::Timeout,
                    format!("rank {src} did not connect to rank {dst} before the connect timeout"),
                ));
            }
        }
    }

    /// Drops parked connections of a communicator that no longer needs them.
    pub fn forget(&self, key: u128) {
        self.parked.lock().retain(|k, _| k.0 != key);
    }
}

fn accept_loop(listener: TcpListener) {
    for conn in listener.incoming() {
        let Ok(stream) = conn else { continue };
        // Handshakes are read off the accept thread so a silent client cannot stall others.
        let _ = std::thread::Builder::new()
            .name("hccl-handshake".into())
            .spawn(move || {
                if let Err(e) = park(stream) {
                    log::warn!("rejected data connection: {e}");
                }
            });
    }
}

fn park(mut stream: TcpStream) -> Result<()> {
    let peer = stream.peer_addr()?;
    stream.set_read_timeout(Some(Duration::from_secs(30)))?;
    let mut hs = [0u8; HS_LEN];
    stream.read_exact(&mut hs)?;
    stream.set_read_timeout(None)?;
    let key = decode_handshake(&hs)
        .ok_or_else(|| Error::new(ErrorKind::Para, format!("bad handshake from {peer}")))?;
    let acc = Acceptor::existing()
        .ok_or_else(|| Error::new(ErrorKind::Internal, "acceptor not initialised"))?;
    acc.parked.lock().insert(key, stream);
    acc.arrived.notify_all();
    Ok(())
}

/// Connects to the listener at `addr` as rank `src` reaching rank `dst` of communicator `key`,
/// retrying refused connections until `deadline`.
pub fn connect(
    addr: SocketAddr,
    key: u128,
    src: u32,
    dst: u32,
    deadline: Instant,
) -> Result<TcpStream> {
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
                s.write_all(&encode_handshake(key, src, dst))?;
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
        let b = encode_handshake(0x1234_5678_9abc, 3, 7);
        assert_eq!(decode_handshake(&b), Some((0x1234_5678_9abc, 3, 7)));
        let mut bad = b;
        bad[0] ^= 1;
        assert_eq!(decode_handshake(&bad), None);
    }
}
