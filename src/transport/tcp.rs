//! Link between ranks in different processes over one or more TCP connections.
//!
//! Sends and receives queue in posting order. Every socket of the link carries its own part of
//! each message, so the sockets stream in parallel and no socket waits for another:
//! - a message of at least [`STRIPE_MIN`] bytes is cut into one contiguous part per socket,
//!   part boundaries on multiples of [`ALIGN`] bytes (so never inside an element);
//! - a smaller message travels whole on socket `seq % sockets`, `seq` being its place in the
//!   posting order, which both ends count alike.
//!
//! Each part starts with a 40-byte header (magic, socket index and count, message length, the
//! message's operation tag, see [`super::tag`]) so a mismatched send/receive pair is detected
//! and fails the receive. Headers and payload move with vectored I/O straight between the socket
//! and the caller's buffer (so bytes read together with a refused header may land in the buffer
//! of the receive that fails, never in a later one); a receive that reduces goes through a small
//! per-socket staging buffer and is reduced as it arrives, after its header was accepted.
//!
//! A rank that aborts writes, on every socket that stands between two messages, an abort record
//! (a header with its own magic, then the reason) before shutting the socket down, so the peer
//! reports why rather than only that the connection closed.
//!
//! Sockets are non-blocking and advance whenever the endpoint's progress loop finds them ready,
//! so both directions flow at once and no pair of ranks can deadlock on full socket buffers.
//! With several sockets the link exposes one epoll descriptor, so the endpoint polls one
//! descriptor per peer whatever the socket count.

use std::cell::Cell;
use std::collections::VecDeque;
use std::io::{IoSlice, IoSliceMut, Read, Write};
use std::net::TcpStream;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

use super::link::{Link, LinkInfo, Reach, Shared, Wake};
use super::tag::{Tag, TAG_LEN};
use super::ReduceFn;
use crate::base::error::{Error, ErrorKind, Result};

/// Sockets per peer when `HCCL_SOCKET_NUM_PER_PEER` is unset (chosen by measurement on veth
/// links; see the README's multi-host section).
pub const DEFAULT_SOCKETS_PER_PEER: u32 = 1;
/// Smallest message striped over all sockets of a link; smaller ones travel whole on one.
pub const STRIPE_MIN: usize = 256 << 10;
/// Stripe boundaries are multiples of this (a multiple of every element size).
pub const ALIGN: usize = 64;

const MSG_MAGIC: u32 = 0x4843_4d33;
const ABORT_MAGIC: u32 = 0x4843_4142;
const HDR: usize = 16 + TAG_LEN;
/// Longest abort reason sent or read.
const REASON_MAX: usize = 4096;
/// Staging buffer per socket for receive-and-reduce; a multiple of every element size.
const STAGE: usize = 512 << 10;
/// Kernel socket buffers: large enough to keep a fast link busy between progress calls.
const SOCK_BUF: libc::c_int = 4 << 20;

/// The part of message `seq` (`len` bytes) that socket `s` of `n` carries: (offset, length),
/// or `None` when it carries nothing of it.
pub fn part_of(seq: u64, len: usize, n: usize, s: usize) -> Option<(usize, usize)> {
    if n <= 1 || len < STRIPE_MIN {
        return (seq % n.max(1) as u64 == s as u64).then_some((0, len));
    }
    let share = len.div_ceil(n).next_multiple_of(ALIGN);
    let off = (s * share).min(len);
    let end = ((s + 1) * share).min(len);
    (end > off).then_some((off, end - off))
}

#[derive(Clone, Copy, Debug)]
struct Op {
    ptr: usize,
    len: usize,
    reduce: Option<ReduceFn>,
    tag: Tag,
}

/// One socket of a link and where it stands in the send and receive queues.
#[derive(Debug)]
struct Sock {
    stream: TcpStream,
    /// Message this socket sends next (absolute sequence number).
    tx_seq: u64,
    /// Bytes of header + part already sent for `tx_seq`.
    tx_done: usize,
    /// Message this socket receives next.
    rx_seq: u64,
    rx_hdr: [u8; HDR],
    rx_hdr_got: usize,
    /// Payload bytes of the current part that are in the destination (reduced, if reducing).
    rx_got: usize,
    stage: Vec<u8>,
    stage_fill: usize,
    /// Epoll interest currently registered (0: not registered).
    interest: Cell<u32>,
}

/// One connected peer.
#[derive(Debug)]
pub struct TcpLink {
    socks: Vec<Sock>,
    me: u32,
    peer: u32,
    addr: String,
    tx: VecDeque<Op>,
    tx_base: u64,
    rx: VecDeque<Op>,
    rx_base: u64,
    epoll: Option<OwnedFd>,
}

/// Tunes a connected socket for bulk transfer with low latency.
pub fn tune_socket(stream: &TcpStream) {
    let _ = stream.set_nodelay(true);
    let fd = stream.as_raw_fd();
    for opt in [libc::SO_SNDBUF, libc::SO_RCVBUF] {
        // SAFETY: setsockopt with a valid int option value.
        unsafe {
            libc::setsockopt(
                fd,
                libc::SOL_SOCKET,
                opt,
                (&SOCK_BUF as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
    }
}

/// A part's header on the wire.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PartHeader {
    /// Whether this is an abort record (then `len` is the reason's length and `tag` carries the
    /// error kind in its first four bytes).
    pub abort: bool,
    /// Socket index of the part.
    pub sock: u16,
    /// Socket count of the link.
    pub socks: u16,
    /// Length of the whole message (or of the abort reason).
    pub len: u64,
    /// The message's operation tag.
    pub tag: Tag,
}

impl PartHeader {
    /// The bytes on the wire.
    pub fn encode(&self) -> [u8; HDR] {
        let mut h = [0u8; HDR];
        let magic = if self.abort { ABORT_MAGIC } else { MSG_MAGIC };
        h[0..4].copy_from_slice(&magic.to_le_bytes());
        h[4..6].copy_from_slice(&self.sock.to_le_bytes());
        h[6..8].copy_from_slice(&self.socks.to_le_bytes());
        h[8..16].copy_from_slice(&self.len.to_le_bytes());
        h[16..].copy_from_slice(&self.tag.0);
        h
    }

    /// Parses a header; `None` for bytes that are not one (bad magic, socket index not below
    /// the count, an abort reason longer than this library sends).
    pub fn decode(h: &[u8]) -> Option<PartHeader> {
        let h: &[u8; HDR] = h.get(..HDR)?.try_into().ok()?;
        let abort = match u32::from_le_bytes(h[0..4].try_into().ok()?) {
            MSG_MAGIC => false,
            ABORT_MAGIC => true,
            _ => return None,
        };
        let sock = u16::from_le_bytes(h[4..6].try_into().ok()?);
        let socks = u16::from_le_bytes(h[6..8].try_into().ok()?);
        let len = u64::from_le_bytes(h[8..16].try_into().ok()?);
        if sock >= socks || (abort && len > REASON_MAX as u64) {
            return None;
        }
        Some(PartHeader {
            abort,
            sock,
            socks,
            len,
            tag: Tag(h[16..].try_into().ok()?),
        })
    }
}

/// The abort record for `why`: header and (truncated) reason.
fn abort_record(s: usize, n: usize, why: &Error) -> Vec<u8> {
    let text = &why.msg.as_bytes()[..why.msg.len().min(REASON_MAX)];
    let mut tag = Tag::default();
    tag.0[0..4].copy_from_slice(&why.kind.code().to_le_bytes());
    let h = PartHeader {
        abort: true,
        sock: s as u16,
        socks: n as u16,
        len: text.len() as u64,
        tag,
    };
    let mut b = h.encode().to_vec();
    b.extend_from_slice(text);
    b
}

impl TcpLink {
    /// Wraps rank `me`'s connected streams to `peer` (socket `i` of the link is `streams[i]`,
    /// in the same order on both ends), switching them to non-blocking mode.
    pub fn new(streams: Vec<TcpStream>, me: u32, peer: u32) -> Result<TcpLink> {
        if streams.is_empty() || streams.len() > u16::MAX as usize {
            return Err(Error::new(
                ErrorKind::Internal,
                format!(
                    "TCP link to peer rank {peer} with {} sockets",
                    streams.len()
                ),
            ));
        }
        let addr = streams[0]
            .peer_addr()
            .map(|a| a.to_string())
            .unwrap_or_else(|_| "?".into());
        let mut socks = Vec::with_capacity(streams.len());
        for stream in streams {
            tune_socket(&stream);
            stream.set_nonblocking(true)?;
            socks.push(Sock {
                stream,
                tx_seq: 0,
                tx_done: 0,
                rx_seq: 0,
                rx_hdr: [0; HDR],
                rx_hdr_got: 0,
                rx_got: 0,
                stage: Vec::new(),
                stage_fill: 0,
                interest: Cell::new(0),
            });
        }
        let epoll = if socks.len() > 1 {
            // SAFETY: plain syscall; the descriptor is owned below.
            let fd = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
            if fd < 0 {
                return Err(Error::new(
                    ErrorKind::Syscall,
                    format!(
                        "epoll_create1 for peer rank {peer}: {}",
                        std::io::Error::last_os_error()
                    ),
                ));
            }
            // SAFETY: fd is a fresh descriptor we own.
            Some(unsafe { OwnedFd::from_raw_fd(fd) })
        } else {
            None
        };
        Ok(TcpLink {
            socks,
            me,
            peer,
            addr,
            tx: VecDeque::new(),
            tx_base: 0,
            rx: VecDeque::new(),
            rx_base: 0,
            epoll,
        })
    }

    /// Number of sockets of this link.
    pub fn sockets(&self) -> usize {
        self.socks.len()
    }

    fn tx_pending(&self, s: &Sock) -> bool {
        s.tx_seq < self.tx_base + self.tx.len() as u64
    }

    fn rx_pending(&self, s: &Sock) -> bool {
        s.rx_seq < self.rx_base + self.rx.len() as u64
    }

    /// The poll events to wait for on [`TcpLink::fd`]. With several sockets this also brings
    /// the epoll interest of each socket up to date.
    pub fn poll_events(&self) -> i16 {
        let Some(ep) = &self.epoll else {
            let s = &self.socks[0];
            let mut ev = 0;
            if self.tx_pending(s) {
                ev |= libc::POLLOUT;
            }
            if self.rx_pending(s) {
                ev |= libc::POLLIN;
            }
            return ev;
        };
        let mut any = false;
        for (i, s) in self.socks.iter().enumerate() {
            let mut want = 0u32;
            if self.tx_pending(s) {
                want |= libc::EPOLLOUT as u32;
            }
            if self.rx_pending(s) {
                want |= libc::EPOLLIN as u32;
            }
            any |= want != 0;
            let had = s.interest.get();
            if want == had {
                continue;
            }
            // An idle socket is removed rather than registered with no events: epoll would
            // still report its hang-up and make the endpoint spin while other sockets wait.
            let op = match (had, want) {
                (0, _) => libc::EPOLL_CTL_ADD,
                (_, 0) => libc::EPOLL_CTL_DEL,
                _ => libc::EPOLL_CTL_MOD,
            };
            let mut ev = libc::epoll_event {
                events: want,
                u64: i as u64,
            };
            // SAFETY: valid epoll and socket descriptors, valid event struct.
            let r = unsafe { libc::epoll_ctl(ep.as_raw_fd(), op, s.stream.as_raw_fd(), &mut ev) };
            if r == 0 {
                s.interest.set(want);
            } else {
                log::warn!(
                    "epoll_ctl for peer rank {} socket {i}: {}",
                    self.peer,
                    std::io::Error::last_os_error()
                );
            }
        }
        if any {
            libc::POLLIN
        } else {
            0
        }
    }

    /// The tag of a message that has arrived when no receive is posted (read without consuming
    /// it; an abort record is left for the next receive to report).
    fn peek_tag(&self) -> Option<Tag> {
        if !self.rx.is_empty() {
            return None;
        }
        for s in &self.socks {
            let mut h = [0u8; HDR];
            // SAFETY: reads at most HDR bytes into `h` without consuming or blocking.
            let r = unsafe {
                libc::recv(
                    s.stream.as_raw_fd(),
                    h.as_mut_ptr().cast(),
                    HDR,
                    libc::MSG_PEEK | libc::MSG_DONTWAIT,
                )
            };
            if r == HDR as isize {
                if let Some(p) = PartHeader::decode(&h).filter(|p| !p.abort) {
                    return Some(p.tag);
                }
            }
        }
        None
    }

    /// The descriptor to poll: the socket, or the link's epoll descriptor when it has several.
    pub fn fd(&self) -> i32 {
        match &self.epoll {
            Some(ep) => ep.as_raw_fd(),
            None => self.socks[0].stream.as_raw_fd(),
        }
    }

    fn where_(&self, s: usize) -> String {
        if self.socks.len() == 1 {
            format!("peer rank {} ({})", self.peer, self.addr)
        } else {
            format!(
                "peer rank {} ({}, socket {}/{})",
                self.peer,
                self.addr,
                s,
                self.socks.len()
            )
        }
    }

    fn io_err(&self, what: &str, s: usize, e: std::io::Error) -> Error {
        Error::new(
            ErrorKind::TcpTransfer,
            format!("{what} {}: {e}", self.where_(s)),
        )
    }

    fn closed(&self, s: usize) -> Error {
        Error::new(
            ErrorKind::TcpTransfer,
            format!("{} closed the connection", self.where_(s)),
        )
    }

    fn send_on(&mut self, s: usize) -> Result<bool> {
        let n = self.socks.len();
        let mut any = false;
        loop {
            let sock = &mut self.socks[s];
            let idx = (sock.tx_seq - self.tx_base) as usize;
            let Some(op) = self.tx.get(idx).copied() else {
                return Ok(any);
            };
            let Some((off, len)) = part_of(sock.tx_seq, op.len, n, s) else {
                sock.tx_seq += 1;
                continue;
            };
            let hdr = PartHeader {
                abort: false,
                sock: s as u16,
                socks: n as u16,
                len: op.len as u64,
                tag: op.tag,
            }
            .encode();
            let done = sock.tx_done;
            // SAFETY: post_send's contract keeps the buffer valid.
            let data = unsafe { std::slice::from_raw_parts((op.ptr as *const u8).add(off), len) };
            let r = if done < HDR {
                send_vectored(
                    &sock.stream,
                    &[IoSlice::new(&hdr[done..]), IoSlice::new(data)],
                )
            } else {
                sock.stream.write(&data[done - HDR..])
            };
            match r {
                Ok(0) if HDR + len > done => {
                    return Err(self.io_err("send to", s, std::io::ErrorKind::WriteZero.into()))
                }
                Ok(k) => {
                    any = true;
                    sock.tx_done += k;
                    if sock.tx_done == HDR + len {
                        sock.tx_done = 0;
                        sock.tx_seq += 1;
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return Ok(any),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => {
                    let e = self.io_err("send to", s, e);
                    return Err(self.peer_abort(s).unwrap_or(e));
                }
            }
        }
    }

    /// The reason the peer gave when it aborted, if its abort record is the next thing to read
    /// on socket `s` (a send that fails because the peer shut the link down finds it there), or
    /// the disagreement that the header of the peer's next message shows against the receive
    /// posted for it.
    #[cold]
    fn peer_abort(&mut self, s: usize) -> Option<Error> {
        if self.socks[s].rx_hdr_got != 0 || self.socks[s].rx_got != 0 {
            return None;
        }
        let fd = self.socks[s].stream.as_raw_fd();
        let mut h = [0u8; HDR];
        // SAFETY: reads at most HDR bytes into `h` without consuming or blocking.
        let r = unsafe {
            libc::recv(
                fd,
                h.as_mut_ptr().cast(),
                HDR,
                libc::MSG_PEEK | libc::MSG_DONTWAIT,
            )
        };
        let ph = PartHeader::decode(&h).filter(|_| r == HDR as isize)?;
        if !ph.abort {
            // A peer that refused this rank's message shuts the link down in the middle of its
            // own message, where no abort record fits; its header, waiting here, names what it
            // called, which is the reason.
            let idx = (self.socks[s].rx_seq - self.rx_base) as usize;
            let op = self.rx.get(idx)?;
            return Tag::check(&ph.tag, &op.tag, self.peer, self.me).err();
        }
        // SAFETY: consumes the HDR bytes just seen.
        unsafe { libc::recv(fd, h.as_mut_ptr().cast(), HDR, libc::MSG_DONTWAIT) };
        Some(self.read_abort(s, &ph, &[]))
    }

    /// Checks the header of the next message on socket `s` against the receive `op`; `landed`
    /// is what arrived after the header in the same read (the start of an abort reason).
    fn check_header(&mut self, s: usize, op: &Op, landed: &[u8]) -> Result<()> {
        let Some(h) = PartHeader::decode(&self.socks[s].rx_hdr) else {
            return Err(Error::new(
                ErrorKind::TcpTransfer,
                format!("corrupt message header from {}", self.where_(s)),
            ));
        };
        if h.abort {
            return Err(self.read_abort(s, &h, landed));
        }
        if h.sock as usize != s || h.socks as usize != self.socks.len() {
            return Err(Error::new(
                ErrorKind::TcpTransfer,
                format!("corrupt message header from {}", self.where_(s)),
            ));
        }
        Tag::check(&h.tag, &op.tag, self.peer, self.me)?;
        let (len, want_len) = (h.len, op.len);
        if len != want_len as u64 {
            return Err(Error::new(
                ErrorKind::Para,
                format!(
                    "message size mismatch: peer rank {} sent {len} bytes, this rank expected \
                     {want_len}",
                    self.peer
                ),
            ));
        }
        Ok(())
    }

    /// The peer's abort reason announced by header `h` on socket `s`: `landed` holds its first
    /// bytes, the rest is read with a short bounded wait (the peer wrote it in one go).
    #[cold]
    fn read_abort(&mut self, s: usize, h: &PartHeader, landed: &[u8]) -> Error {
        let want = h.len as usize;
        let mut text = landed[..landed.len().min(want)].to_vec();
        let deadline = std::time::Instant::now() + std::time::Duration::from_millis(500);
        let stream = &mut self.socks[s].stream;
        while text.len() < want && std::time::Instant::now() < deadline {
            let mut buf = vec![0u8; want - text.len()];
            match stream.read(&mut buf) {
                Ok(0) => break,
                Ok(k) => text.extend_from_slice(&buf[..k]),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    let mut p = libc::pollfd {
                        fd: stream.as_raw_fd(),
                        events: libc::POLLIN,
                        revents: 0,
                    };
                    // SAFETY: one valid pollfd.
                    unsafe { libc::poll(&mut p, 1, 10) };
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(_) => break,
            }
        }
        let code = u32::from_le_bytes(h.tag.0[0..4].try_into().expect("4 bytes"));
        let why = Error::new(
            if code == ErrorKind::Para.code() {
                ErrorKind::Para
            } else {
                ErrorKind::Remote
            },
            String::from_utf8_lossy(&text).into_owned(),
        );
        super::propagated(why, &self.where_(s))
    }

    fn recv_on(&mut self, s: usize) -> Result<bool> {
        let n = self.socks.len();
        let mut any = false;
        loop {
            let sock = &mut self.socks[s];
            let idx = (sock.rx_seq - self.rx_base) as usize;
            let Some(op) = self.rx.get(idx).copied() else {
                return Ok(any);
            };
            let Some((off, len)) = part_of(sock.rx_seq, op.len, n, s) else {
                sock.rx_seq += 1;
                continue;
            };
            if sock.rx_hdr_got == HDR && sock.rx_got == len {
                sock.rx_hdr_got = 0;
                sock.rx_got = 0;
                sock.rx_seq += 1;
                any = true;
                continue;
            }
            // Destination of the next payload bytes: the caller's buffer, or the free part of
            // the staging buffer when reducing.
            let dst: &mut [u8] = match op.reduce {
                None => unsafe {
                    // SAFETY: post_recv's contract keeps the destination valid; the range lies
                    // inside it.
                    std::slice::from_raw_parts_mut(
                        (op.ptr as *mut u8).add(off + sock.rx_got),
                        len - sock.rx_got,
                    )
                },
                Some(_) => {
                    if sock.stage.is_empty() {
                        sock.stage = vec![0u8; STAGE];
                    }
                    let want = (len - sock.rx_got - sock.stage_fill).min(STAGE - sock.stage_fill);
                    &mut sock.stage[sock.stage_fill..sock.stage_fill + want]
                }
            };
            let hdr_got = sock.rx_hdr_got;
            let asked = HDR - hdr_got + dst.len();
            let r = if hdr_got < HDR {
                sock.stream.read_vectored(&mut [
                    IoSliceMut::new(&mut sock.rx_hdr[hdr_got..]),
                    IoSliceMut::new(dst),
                ])
            } else {
                sock.stream.read(dst)
            };
            let k = match r {
                Ok(0) if asked > 0 => return Err(self.closed(s)),
                Ok(k) => k,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return Ok(any),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(self.io_err("receive from", s, e)),
            };
            any = true;
            let h = k.min(HDR - hdr_got);
            sock.rx_hdr_got += h;
            let payload = k - h;
            if h > 0 && sock.rx_hdr_got == HDR {
                // Where this read's payload bytes went (the start of an abort reason, if any).
                let landed: *const u8 = match op.reduce {
                    None => (op.ptr as *const u8).wrapping_add(off + sock.rx_got),
                    Some(_) => sock.stage.as_ptr().wrapping_add(sock.stage_fill),
                };
                // SAFETY: those `payload` bytes were just written there by the read.
                let landed = unsafe { std::slice::from_raw_parts(landed, payload) };
                self.check_header(s, &op, landed)?;
            }
            let sock = &mut self.socks[s];
            match &op.reduce {
                None => sock.rx_got += payload,
                Some(r) => {
                    sock.stage_fill += payload;
                    let whole = sock.stage_fill / r.elem_size * r.elem_size;
                    if whole > 0 {
                        // SAFETY: destination valid per contract; the stage holds `whole`
                        // bytes; parts start on element boundaries (ALIGN).
                        unsafe {
                            r.apply(
                                (op.ptr as *mut u8).add(off + sock.rx_got),
                                sock.stage.as_ptr(),
                                whole,
                            )
                        };
                        sock.rx_got += whole;
                        sock.stage.copy_within(whole..sock.stage_fill, 0);
                        sock.stage_fill -= whole;
                    }
                }
            }
        }
    }
}

impl Link for TcpLink {
    fn info(&self) -> LinkInfo {
        LinkInfo {
            name: "tcp",
            reach: Reach::Network,
            single_copy: false,
        }
    }

    unsafe fn post_send(&mut self, ptr: *const u8, len: usize, tag: Tag) -> Result<()> {
        self.tx.push_back(Op {
            ptr: ptr as usize,
            len,
            reduce: None,
            tag,
        });
        Ok(())
    }

    /// A reducing receive is reduced as it arrives, without taking a turn.
    unsafe fn post_recv(
        &mut self,
        ptr: *mut u8,
        len: usize,
        reduce: Option<ReduceFn>,
        tag: Tag,
        _shared: &mut Shared,
    ) -> Result<()> {
        self.rx.push_back(Op {
            ptr: ptr as usize,
            len,
            reduce,
            tag,
        });
        Ok(())
    }

    /// Moves as many bytes as the sockets take or give without blocking.
    fn progress(&mut self, _shared: &mut Shared) -> Result<bool> {
        let mut any = false;
        for s in 0..self.socks.len() {
            any |= self.send_on(s)?;
            any |= self.recv_on(s)?;
        }
        let done_tx = self.socks.iter().map(|s| s.tx_seq).min().unwrap_or(0);
        while self.tx_base < done_tx {
            self.tx.pop_front();
            self.tx_base += 1;
        }
        let done_rx = self.socks.iter().map(|s| s.rx_seq).min().unwrap_or(0);
        while self.rx_base < done_rx {
            self.rx.pop_front();
            self.rx_base += 1;
        }
        Ok(any)
    }

    fn idle(&self) -> bool {
        self.tx.is_empty() && self.rx.is_empty()
    }

    fn wake(&self) -> Wake {
        Wake::Fd(libc::pollfd {
            fd: self.fd(),
            events: self.poll_events(),
            revents: 0,
        })
    }

    fn stray_tag(&self) -> Option<Tag> {
        self.peek_tag()
    }

    fn hangup_fd(&self) -> Option<RawFd> {
        Some(self.fd())
    }

    /// Whether the peer has closed or reset any socket of this link (checked without waiting).
    fn hung_up(&self) -> bool {
        let mut fds: Vec<libc::pollfd> = self
            .socks
            .iter()
            .map(|s| libc::pollfd {
                fd: s.stream.as_raw_fd(),
                events: libc::POLLRDHUP,
                revents: 0,
            })
            .collect();
        // SAFETY: polls valid descriptors without blocking.
        let r = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, 0) };
        r > 0
            && fds
                .iter()
                .any(|f| f.revents & (libc::POLLRDHUP | libc::POLLHUP | libc::POLLERR) != 0)
    }

    /// Drops pending operations, tells the peer `why` on every socket that stands between two
    /// messages, and shuts the sockets down so the peer notices at once.
    fn abort(&mut self, why: &Error) {
        self.tx.clear();
        self.rx.clear();
        let n = self.socks.len();
        for (i, s) in self.socks.iter_mut().enumerate() {
            if s.tx_done == 0 {
                // Best effort and never blocking: a full socket buffer only loses the reason.
                let _ = s.stream.write(&abort_record(i, n, why));
            }
            let _ = s.stream.shutdown(std::net::Shutdown::Both);
            s.tx_done = 0;
            s.rx_hdr_got = 0;
            s.rx_got = 0;
            s.stage_fill = 0;
        }
        // Sequence numbers stay consistent with the (now empty) queues.
        let end_tx = self.socks.iter().map(|s| s.tx_seq).max().unwrap_or(0);
        let end_rx = self.socks.iter().map(|s| s.rx_seq).max().unwrap_or(0);
        for s in &mut self.socks {
            s.tx_seq = end_tx;
            s.rx_seq = end_rx;
        }
        self.tx_base = end_tx;
        self.rx_base = end_rx;
    }
}

/// `writev` that cannot raise SIGPIPE: a peer that has closed its end makes this an `EPIPE`
/// error for the caller, never a signal that would kill a host program that has not ignored
/// SIGPIPE (single-buffer writes through `TcpStream` already pass `MSG_NOSIGNAL`).
fn send_vectored(stream: &TcpStream, bufs: &[IoSlice<'_>]) -> std::io::Result<usize> {
    // SAFETY: msghdr is plain old data; all-zero is an empty header without address or control.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = bufs.as_ptr() as *mut libc::iovec;
    msg.msg_iovlen = bufs.len() as _;
    // SAFETY: IoSlice is ABI-compatible with iovec on Unix, the slices outlive the call, the
    // kernel only reads them, and the descriptor belongs to the open stream.
    let n = unsafe { libc::sendmsg(stream.as_raw_fd(), &msg, libc::MSG_NOSIGNAL) };
    if n < 0 {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(n as usize)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_vectored_send_to_a_closed_peer_is_an_error_not_a_signal() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let a = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        drop(l.accept().unwrap().0);
        // SAFETY: the child only restores SIGPIPE's default action, sends and exits; the
        // parent waits for it.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0, "fork failed");
        if pid == 0 {
            let big = vec![0u8; 1 << 20];
            // SAFETY: signal and _exit are async-signal-safe.
            unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
            let mut code = 1;
            for _ in 0..100 {
                match send_vectored(&a, &[IoSlice::new(b"hdr"), IoSlice::new(&big)]) {
                    Ok(_) => continue,
                    Err(e) if e.raw_os_error() == Some(libc::EPIPE) => {
                        code = 0;
                        break;
                    }
                    Err(e) if e.raw_os_error() == Some(libc::ECONNRESET) => continue,
                    Err(_) => break,
                }
            }
            // SAFETY: ends the forked child without running the parent's destructors.
            unsafe { libc::_exit(code) };
        }
        let mut status = 0;
        // SAFETY: waits for the child forked above.
        assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
        assert!(
            !libc::WIFSIGNALED(status),
            "killed by signal {}",
            libc::WTERMSIG(status)
        );
        assert_eq!(libc::WEXITSTATUS(status), 0, "no EPIPE from the send");
    }
    use crate::transport::tag::{OpKind, OpTag};
    use std::net::TcpListener;

    const T: Tag = Tag([0; TAG_LEN]);

    #[test]
    fn header_roundtrip_and_rejects() {
        let h = PartHeader {
            abort: false,
            sock: 2,
            socks: 3,
            len: u64::MAX,
            tag: OpTag::new(OpKind::Reduce).encode(),
        };
        assert_eq!(PartHeader::decode(&h.encode()), Some(h));
        let bad_index = PartHeader { sock: 3, ..h };
        assert_eq!(PartHeader::decode(&bad_index.encode()), None);
        let long_abort = PartHeader { abort: true, ..h };
        assert_eq!(PartHeader::decode(&long_abort.encode()), None);
        let mut b = h.encode();
        b[0] ^= 1;
        assert_eq!(PartHeader::decode(&b), None);
        assert_eq!(PartHeader::decode(&h.encode()[..HDR - 1]), None);
    }

    #[test]
    fn message_of_another_operation_is_refused() {
        let (mut a, mut b) = pair(1);
        let want = OpTag {
            count: 10,
            ..OpTag::new(OpKind::AllGather)
        };
        let sent = OpTag { count: 11, ..want };
        let s = [9u8; 64];
        let mut d = [0u8; 64];
        // SAFETY: the buffers outlive the transfers, driven to the end below.
        unsafe {
            a.post_send(s.as_ptr(), 64, sent.encode()).unwrap();
            b.post_recv(
                d.as_mut_ptr(),
                64,
                None,
                want.encode(),
                &mut Shared::default(),
            )
            .unwrap();
        }
        let e = drive(&mut a, &mut b).unwrap_err();
        assert_eq!(e.kind, ErrorKind::Para);
        assert!(
            e.msg.contains("rank 0 called AllGather count=11") && e.msg.contains("rank 1 count=10"),
            "{}",
            e.msg
        );
    }

    #[test]
    fn abort_reason_reaches_the_peer() {
        for (kind, text) in [
            (
                ErrorKind::Para,
                "operation mismatch: rank 0 called X".to_string(),
            ),
            (ErrorKind::Timeout, "x".repeat(REASON_MAX + 100)),
        ] {
            let (mut a, mut b) = pair(2);
            let mut d = vec![0u8; 100];
            // SAFETY: the buffers outlive the transfers, driven to the end below.
            unsafe {
                b.post_recv(d.as_mut_ptr(), 100, None, T, &mut Shared::default())
                    .unwrap()
            };
            a.abort(&Error::new(kind, text.clone()));
            let t0 = std::time::Instant::now();
            let e = loop {
                match b.progress(&mut Shared::default()) {
                    Err(e) => break e,
                    Ok(_) => assert!(t0.elapsed().as_secs() < 10, "no error"),
                }
            };
            let want = if kind == ErrorKind::Para {
                ErrorKind::Para
            } else {
                ErrorKind::Remote
            };
            assert_eq!(e.kind, want, "{e}");
            assert!(e.msg.contains(&text[..30.min(text.len())]), "{}", e.msg);
            assert!(e.msg.contains("peer rank 0"), "{}", e.msg);
        }
    }

    #[test]
    fn parts_cover_each_message_once() {
        for n in 1..=16usize {
            for len in [
                0,
                1,
                64,
                STRIPE_MIN - 1,
                STRIPE_MIN,
                STRIPE_MIN + 7,
                64 << 20,
            ] {
                for seq in 0..3u64 {
                    let mut covered = 0;
                    let mut next = 0;
                    for s in 0..n {
                        if let Some((off, l)) = part_of(seq, len, n, s) {
                            assert_eq!(off, next, "n {n} len {len} seq {seq} s {s}");
                            assert!(off % ALIGN == 0);
                            next = off + l;
                            covered += 1;
                        }
                    }
                    assert_eq!(next, len);
                    if len < STRIPE_MIN || n == 1 {
                        assert_eq!(covered, 1);
                    } else {
                        assert_eq!(covered, n);
                    }
                }
            }
        }
    }

    fn pair(n: usize) -> (TcpLink, TcpLink) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let mut a = Vec::new();
        let mut b = Vec::new();
        for _ in 0..n {
            a.push(TcpStream::connect(addr).unwrap());
            b.push(l.accept().unwrap().0);
        }
        (
            TcpLink::new(a, 0, 1).unwrap(),
            TcpLink::new(b, 1, 0).unwrap(),
        )
    }

    fn drive(a: &mut TcpLink, b: &mut TcpLink) -> Result<()> {
        let t0 = std::time::Instant::now();
        while !(a.idle() && b.idle()) {
            a.progress(&mut Shared::default())?;
            b.progress(&mut Shared::default())?;
            assert!(t0.elapsed().as_secs() < 30, "link did not drain");
        }
        Ok(())
    }

    unsafe fn add_u32(
        _: crate::base::dtype::DataType,
        _: crate::base::dtype::ReduceOp,
        d: *mut u8,
        a: *const u8,
        b: *const u8,
        n: usize,
    ) {
        for i in 0..n {
            // SAFETY: the caller passes n words at each pointer.
            unsafe {
                let x = (a as *const u32).add(i).read_unaligned();
                let y = (b as *const u32).add(i).read_unaligned();
                (d as *mut u32).add(i).write_unaligned(x.wrapping_add(y));
            }
        }
    }

    #[test]
    fn striped_messages_arrive_in_order_and_reduce() {
        for n in [1, 3, 4] {
            let (mut a, mut b) = pair(n);
            let sizes = [0usize, 5, 4096, STRIPE_MIN + 4 * 333, 3 << 20];
            let srcs: Vec<Vec<u8>> = sizes
                .iter()
                .enumerate()
                .map(|(k, &l)| (0..l).map(|i| (i * 7 + k) as u8).collect())
                .collect();
            let mut dsts: Vec<Vec<u8>> = sizes.iter().map(|&l| vec![0xee; l]).collect();
            for (s, d) in srcs.iter().zip(dsts.iter_mut()) {
                // SAFETY: the buffers outlive the transfers, driven to the end below.
                unsafe {
                    a.post_send(s.as_ptr(), s.len(), T).unwrap();
                    b.post_recv(d.as_mut_ptr(), d.len(), None, T, &mut Shared::default())
                        .unwrap();
                }
            }
            // A reducing receive of u32 words.
            let words = (STRIPE_MIN + 4 * 1001) / 4;
            let src: Vec<u32> = (0..words as u32).collect();
            let mut acc: Vec<u32> = (0..words as u32).map(|i| i * 3).collect();
            let red = ReduceFn {
                kernel: add_u32,
                dtype: crate::base::dtype::DataType::Int32,
                op: crate::base::dtype::ReduceOp::Sum,
                elem_size: 4,
                left: 0,
            };
            // SAFETY: the buffers outlive the transfers, driven to the end below.
            unsafe {
                a.post_send(src.as_ptr().cast(), words * 4, T).unwrap();
                b.post_recv(
                    acc.as_mut_ptr().cast(),
                    words * 4,
                    Some(red),
                    T,
                    &mut Shared::default(),
                )
                .unwrap();
            }
            drive(&mut a, &mut b).unwrap();
            assert_eq!(srcs, dsts, "{n} sockets");
            assert!(acc.iter().enumerate().all(|(i, &v)| v == 4 * i as u32));
        }
    }

    #[test]
    fn size_mismatch_is_reported() {
        let (mut a, mut b) = pair(2);
        let s = [1u8; 100];
        let mut d = vec![0u8; 99];
        // SAFETY: the buffers outlive the transfers, driven to the end below.
        unsafe {
            a.post_send(s.as_ptr(), s.len(), T).unwrap();
            b.post_recv(d.as_mut_ptr(), d.len(), None, T, &mut Shared::default())
                .unwrap();
        }
        let e = drive(&mut a, &mut b).unwrap_err();
        assert!(e.msg.contains("sent 100 bytes"), "{}", e.msg);
    }

    #[test]
    fn closed_peer_is_named() {
        let (mut a, b) = pair(2);
        drop(b);
        let mut d = vec![0u8; 10];
        // SAFETY: the buffers outlive the transfers, driven to the end below.
        unsafe {
            a.post_recv(d.as_mut_ptr(), 10, None, T, &mut Shared::default())
                .unwrap()
        };
        let t0 = std::time::Instant::now();
        let e = loop {
            match a.progress(&mut Shared::default()) {
                Err(e) => break e,
                Ok(_) => assert!(t0.elapsed().as_secs() < 10, "no error"),
            }
        };
        assert!(e.msg.contains("peer rank 1"), "{}", e.msg);
        assert!(a.hung_up());
        let (c, _d) = pair(3);
        assert!(!c.hung_up());
    }
}
