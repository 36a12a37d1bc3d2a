//! A listener that cannot be stalled or exhausted: it accepts connections and reads each one's
//! fixed-size handshake concurrently, from one thread, under a per-connection deadline and a
//! cap on handshakes in progress.
//!
//! - A connection from an address outside the whitelist is answered with the caller's refusal
//!   and closed before anything is read from it.
//! - A connection that has not sent its whole handshake within [`Gate::new`]'s deadline is
//!   closed; when the cap is reached the oldest handshake in progress makes room.
//! - When the process runs out of descriptors (`EMFILE`, `ENFILE`) the gate stops accepting
//!   for a moment ([`BACKOFF`]) rather than spinning on a listener that stays readable, and
//!   says so once (again at most every [`EXHAUSTION_LOG_EVERY`]).
//!
//! Both the bootstrap root and the data listener are gates; what a complete handshake means is
//! theirs to decide.

use std::collections::VecDeque;
use std::io::{Read, Write};
use std::net::{IpAddr, TcpListener, TcpStream};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::time::{Duration, Instant};

use super::acceptor::Whitelist;

/// How long accepting pauses after the process ran out of descriptors.
pub const BACKOFF: Duration = Duration::from_millis(100);
/// Running out of descriptors is logged at most this often.
pub const EXHAUSTION_LOG_EVERY: Duration = Duration::from_secs(600);
/// Connections accepted per wake-up at most, so handshakes in progress keep being served.
const ACCEPT_BURST: usize = 64;

/// A listening socket: TCP, or an abstract Unix socket.
pub enum Listener {
    /// TCP.
    Tcp(TcpListener),
    /// Unix (abstract name).
    Unix(UnixListener),
}

/// A connected stream of either kind.
pub enum Stream {
    /// TCP.
    Tcp(TcpStream),
    /// Unix.
    Unix(UnixStream),
}

impl Stream {
    /// Switches blocking mode.
    pub fn set_nonblocking(&self, on: bool) -> std::io::Result<()> {
        match self {
            Stream::Tcp(s) => s.set_nonblocking(on),
            Stream::Unix(s) => s.set_nonblocking(on),
        }
    }

    /// Bounds every later blocking read and write.
    pub fn set_timeout(&self, d: Option<Duration>) -> std::io::Result<()> {
        match self {
            Stream::Tcp(s) => {
                s.set_read_timeout(d)?;
                s.set_write_timeout(d)
            }
            Stream::Unix(s) => {
                s.set_read_timeout(d)?;
                s.set_write_timeout(d)
            }
        }
    }

    /// The TCP stream, when it is one.
    pub fn into_tcp(self) -> Option<TcpStream> {
        match self {
            Stream::Tcp(s) => Some(s),
            Stream::Unix(_) => None,
        }
    }
}

impl Read for Stream {
    fn read(&mut self, b: &mut [u8]) -> std::io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.read(b),
            Stream::Unix(s) => s.read(b),
        }
    }
}

impl Write for Stream {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.write(b),
            Stream::Unix(s) => s.write(b),
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl AsRawFd for Stream {
    fn as_raw_fd(&self) -> RawFd {
        match self {
            Stream::Tcp(s) => s.as_raw_fd(),
            Stream::Unix(s) => s.as_raw_fd(),
        }
    }
}

impl Listener {
    fn fd(&self) -> RawFd {
        match self {
            Listener::Tcp(l) => l.as_raw_fd(),
            Listener::Unix(l) => l.as_raw_fd(),
        }
    }

    fn set_nonblocking(&self) -> std::io::Result<()> {
        match self {
            Listener::Tcp(l) => l.set_nonblocking(true),
            Listener::Unix(l) => l.set_nonblocking(true),
        }
    }

    fn accept(&self) -> std::io::Result<(Stream, Option<IpAddr>)> {
        Ok(match self {
            Listener::Tcp(l) => {
                let (s, a) = l.accept()?;
                let _ = s.set_nodelay(true);
                (Stream::Tcp(s), Some(a.ip()))
            }
            Listener::Unix(l) => (Stream::Unix(l.accept()?.0), None),
        })
    }
}

/// A complete handshake: the connection (non-blocking), its bytes and where it came from.
pub struct Arrival {
    /// The connection.
    pub stream: Stream,
    /// The handshake bytes.
    pub hello: Vec<u8>,
    /// The peer's IP address (TCP).
    pub peer: Option<IpAddr>,
}

struct Waiting {
    stream: Stream,
    buf: Vec<u8>,
    got: usize,
    since: Instant,
    peer: Option<IpAddr>,
}

/// Settings of a gate.
#[derive(Clone, Debug)]
pub struct GateConfig {
    /// Names the listener in log lines.
    pub what: &'static str,
    /// Names its connections in log lines (`data connection`).
    pub conn: &'static str,
    /// Bytes of a handshake.
    pub hello_len: usize,
    /// How long a connection may take to send its handshake.
    pub deadline: Duration,
    /// Most handshakes in progress at once.
    pub cap: usize,
    /// Addresses admitted (`None`: all).
    pub whitelist: Option<Whitelist>,
    /// Written to a connection from outside the whitelist before it is closed.
    pub refusal: Vec<u8>,
}

/// The listener and the handshakes in progress.
pub struct Gate {
    listener: Listener,
    cfg: GateConfig,
    waiting: VecDeque<Waiting>,
    paused_until: Option<Instant>,
    /// When running out of descriptors was last logged.
    exhaustion_logged: Option<Instant>,
    /// The descriptors of the last `poll`, kept: a gate served for the life of the process
    /// wakes at least once a second, and must not allocate then (the process's steady state
    /// allocates nothing).
    fds: Vec<libc::pollfd>,
}

impl Gate {
    /// A gate over `listener` (switched to non-blocking mode).
    pub fn new(listener: Listener, cfg: GateConfig) -> std::io::Result<Gate> {
        listener.set_nonblocking()?;
        Ok(Gate {
            listener,
            cfg,
            waiting: VecDeque::new(),
            paused_until: None,
            exhaustion_logged: None,
            fds: Vec::new(),
        })
    }

    /// Handshakes in progress.
    pub fn in_progress(&self) -> usize {
        self.waiting.len()
    }

    /// Waits at most `timeout` for activity and returns the handshakes completed meanwhile.
    pub fn poll(&mut self, timeout: Duration) -> Vec<Arrival> {
        let now = Instant::now();
        if self.paused_until.is_some_and(|t| now >= t) {
            self.paused_until = None;
        }
        let mut wait = timeout;
        if let Some(first) = self.waiting.front() {
            wait = wait.min((first.since + self.cfg.deadline).saturating_duration_since(now));
        }
        if let Some(t) = self.paused_until {
            wait = wait.min(t.saturating_duration_since(now));
        }
        let listening = self.paused_until.is_none();
        let mut fds = std::mem::take(&mut self.fds);
        fds.clear();
        if listening {
            fds.push(libc::pollfd {
                fd: self.listener.fd(),
                events: libc::POLLIN,
                revents: 0,
            });
        }
        fds.extend(self.waiting.iter().map(|w| libc::pollfd {
            fd: w.stream.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        }));
        let ms = wait.as_millis().clamp(0, 1000) as i32;
        // A wait that rounds down to 0 ms but is not over yet still sleeps 1 ms: no spinning.
        let ms = if ms == 0 && !wait.is_zero() { 1 } else { ms };
        // SAFETY: valid pollfd array of the stated length.
        let r = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, ms) };
        let mut done = Vec::new();
        if r > 0 {
            let ready: Vec<bool> = fds.iter().map(|f| f.revents != 0).collect();
            let (listen_ready, conn_ready) = if listening {
                (ready[0], &ready[1..])
            } else {
                (false, &ready[..])
            };
            // Connections first: accepting may evict the oldest, which shifts indices.
            let mut i = 0;
            let mut k = 0;
            while i < self.waiting.len() {
                let is_ready = conn_ready.get(k).copied().unwrap_or(false);
                k += 1;
                if !is_ready {
                    i += 1;
                    continue;
                }
                match self.read_some(i) {
                    Step::Pending => i += 1,
                    Step::Drop => {
                        self.waiting.remove(i);
                    }
                    Step::Done => {
                        let w = self.waiting.remove(i).expect("index in range");
                        done.push(Arrival {
                            stream: w.stream,
                            hello: w.buf,
                            peer: w.peer,
                        });
                    }
                }
            }
            if listen_ready {
                self.accept_some();
            }
        }
        self.expire();
        self.fds = fds;
        done
    }

    fn read_some(&mut self, i: usize) -> Step {
        let w = &mut self.waiting[i];
        loop {
            match w.stream.read(&mut w.buf[w.got..]) {
                Ok(0) => return Step::Drop,
                Ok(k) => {
                    w.got += k;
                    if w.got == w.buf.len() {
                        return Step::Done;
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return Step::Pending,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(_) => return Step::Drop,
            }
        }
    }

    fn accept_some(&mut self) {
        for _ in 0..ACCEPT_BURST {
            match self.listener.accept() {
                Ok((stream, peer)) => {
                    if let (Some(w), Some(ip)) = (&self.cfg.whitelist, peer) {
                        if !w.admits(ip) {
                            log::error!(
                                "{}: refused {} from {ip}: address not in the whitelist {} \
                                 (HCCL_WHITELIST_DISABLE=0)",
                                self.cfg.what,
                                self.cfg.conn,
                                w.path()
                            );
                            refuse(stream, &self.cfg.refusal);
                            continue;
                        }
                    }
                    if stream.set_nonblocking(true).is_err() {
                        continue;
                    }
                    if self.waiting.len() >= self.cfg.cap {
                        // The oldest has had the longest to speak.
                        self.waiting.pop_front();
                    }
                    self.waiting.push_back(Waiting {
                        stream,
                        buf: vec![0u8; self.cfg.hello_len],
                        got: 0,
                        since: Instant::now(),
                        peer,
                    });
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) if matches!(e.raw_os_error(), Some(libc::EMFILE | libc::ENFILE)) => {
                    if self
                        .exhaustion_logged
                        .is_none_or(|t| t.elapsed() >= EXHAUSTION_LOG_EVERY)
                    {
                        log::error!(
                            "{}: out of file descriptors ({e}); pausing new connections for {} ms \
                             at a time until descriptors are free (logged once every {} s)",
                            self.cfg.what,
                            BACKOFF.as_millis(),
                            EXHAUSTION_LOG_EVERY.as_secs()
                        );
                        self.exhaustion_logged = Some(Instant::now());
                    }
                    // Handshakes in progress hold descriptors too: the oldest goes first.
                    self.waiting.pop_front();
                    self.paused_until = Some(Instant::now() + BACKOFF);
                    return;
                }
                Err(e) => {
                    // Connection-specific failures (ECONNABORTED, ...): try the next one.
                    log::debug!("{}: accept: {e}", self.cfg.what);
                    if matches!(e.raw_os_error(), Some(libc::ENOBUFS | libc::ENOMEM)) {
                        self.paused_until = Some(Instant::now() + BACKOFF);
                        return;
                    }
                }
            }
        }
    }

    fn expire(&mut self) {
        let now = Instant::now();
        let deadline = self.cfg.deadline;
        self.waiting
            .retain(|w| now.duration_since(w.since) < deadline);
    }
}

enum Step {
    Pending,
    Drop,
    Done,
}

/// Writes `refusal` without blocking (best effort) and closes the connection.
fn refuse(stream: Stream, refusal: &[u8]) {
    let mut stream = stream;
    if !refusal.is_empty() && stream.set_nonblocking(true).is_ok() {
        let _ = stream.write(refusal);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::SocketAddr;

    fn gate(cap: usize, deadline: Duration, whitelist: Option<Whitelist>) -> (Gate, SocketAddr) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let g = Gate::new(
            Listener::Tcp(l),
            GateConfig {
                what: "test gate",
                conn: "test connection",
                hello_len: 4,
                deadline,
                cap,
                whitelist,
                refusal: b"NO".to_vec(),
            },
        )
        .unwrap();
        (g, addr)
    }

    /// Polls until `want` arrivals or `limit` polls.
    fn collect(g: &mut Gate, want: usize) -> Vec<Arrival> {
        let mut got = Vec::new();
        for _ in 0..200 {
            got.extend(g.poll(Duration::from_millis(20)));
            if got.len() >= want {
                break;
            }
        }
        got
    }

    #[test]
    fn silent_and_slow_connections_do_not_hold_up_others() {
        let (mut g, addr) = gate(8, Duration::from_secs(30), None);
        let _idle: Vec<TcpStream> = (0..3).map(|_| TcpStream::connect(addr).unwrap()).collect();
        let mut half = TcpStream::connect(addr).unwrap();
        half.write_all(b"ab").unwrap();
        let mut good = TcpStream::connect(addr).unwrap();
        good.write_all(b"WXYZ").unwrap();
        let got = collect(&mut g, 1);
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].hello, b"WXYZ");
        half.write_all(b"cd").unwrap();
        let got = collect(&mut g, 1);
        assert_eq!(got[0].hello, b"abcd");
    }

    #[test]
    fn the_cap_evicts_the_oldest_and_the_deadline_closes() {
        let (mut g, addr) = gate(2, Duration::from_millis(200), None);
        let mut first = TcpStream::connect(addr).unwrap();
        let _second = TcpStream::connect(addr).unwrap();
        let _third = TcpStream::connect(addr).unwrap();
        for _ in 0..50 {
            g.poll(Duration::from_millis(5));
            if g.in_progress() == 2 {
                break;
            }
        }
        assert_eq!(g.in_progress(), 2);
        // The first was evicted: the gate closed it.
        first
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        let mut b = [0u8; 1];
        assert_eq!(first.read(&mut b).unwrap_or(0), 0);
        // The others expire at the deadline (polls return in between, no busy loop needed).
        let t0 = Instant::now();
        while g.in_progress() > 0 {
            g.poll(Duration::from_millis(50));
            assert!(t0.elapsed() < Duration::from_secs(10), "never expired");
        }
    }

    #[test]
    fn whitelist_refuses_before_reading() {
        let w = Whitelist::parse("w.json", r#"{"host_ip": ["198.18.0.9"]}"#).unwrap();
        let (mut g, addr) = gate(8, Duration::from_secs(30), Some(w));
        let mut c = TcpStream::connect(addr).unwrap();
        c.write_all(b"WXYZ").unwrap();
        c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut got = Vec::new();
        for _ in 0..100 {
            assert!(g.poll(Duration::from_millis(20)).is_empty());
            if g.in_progress() == 0 {
                let mut b = [0u8; 8];
                if let Ok(k) = c.read(&mut b) {
                    got.extend_from_slice(&b[..k]);
                    break;
                }
            }
        }
        assert_eq!(got, b"NO");
        assert_eq!(g.in_progress(), 0);
    }
}
