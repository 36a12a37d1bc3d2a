//! Link between ranks on different hosts through a net plugin ([`super::plugin`]).
//!
//! # Set-up
//! Peers on other hosts are first connected over TCP by the usual bootstrap (the communicator's
//! key checked by the acceptor). Over that connection each pair then agrees on a plugin comm:
//! the higher rank listens and sends its handle, the lower rank connects, both poll until
//! connected, and both confirm; if either side cannot, the pair keeps the TCP connection as an
//! ordinary TCP link. The TCP connection otherwise stays open, idle, as the liveness signal: when
//! a peer process dies the kernel closes it, and a waiting rank notices within a wait slice.
//!
//! # Data path
//! Each direction has registered staging buffers ("slots") of up to [`MAX_SLOT_BYTES`], no
//! larger than the device's largest message, and enough of them to keep [`IN_FLIGHT_BYTES`]
//! moving (at least [`MIN_SLOTS`]). A message is cut into chunks that each carry a 64-byte
//! header (magic, kind, message length, offset, the operation tag) and up to a slot less 64
//! bytes; the sender copies a chunk into a free slot and posts it, so every slot can be in
//! flight while the next is copied. Where the plugin has `isendHead` and the device needs no
//! registration, the sender copies nothing: each chunk leaves as its header followed by the
//! payload straight from the send buffer, and its slot only counts it in flight. The receiver
//! keeps a receive posted on every slot; chunks are consumed in posting order, the first chunk
//! of a message checked against the receive posted for it (operation tag and size, as on every
//! link) before a byte is delivered, then copied or reduced into the destination. Completion is
//! checked under the endpoint's waiting policy: polled for a short budget, then slept on in the
//! plugin's wait descriptor (the provider's completion-queue wait object, [`Wake::Fds`]) beside
//! the liveness connection, in short slices since a provider may not signal every kind of
//! progress on it; a plugin without one is polled between short sleeps ([`Wake::Poll`]).
//!
//! # Failures
//! A rank that aborts writes a notice (its error code and reason) on the liveness connection,
//! posts an abort record through the plugin as well, and shuts the liveness connection down.
//! The notice travels on its own connection so that the reason arrives even when the plugin
//! link fails first (the aborting rank closes its plugin comm, and the peer's pending operations
//! fail): a rank whose plugin link fails, or whose liveness connection wakes, reads the notice
//! and reports the peer's reason (a disagreement between ranks stays `HCCL_E_PARA` naming both
//! calls), else that the peer is gone.

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::link::{Link, LinkInfo, Reach, Shared, Wake};
use super::plugin::{NetPlugin, FLAG_REG_REQUIRED, HANDLE_BYTES};
use super::tag::{Tag, TAG_LEN};
use super::ReduceFn;
use crate::base::error::{Error, ErrorKind, Result};

/// Largest staging buffer (header included).
pub const MAX_SLOT_BYTES: usize = 512 << 10;
/// Staging bytes per direction the slots add up to (when slots are small).
pub const IN_FLIGHT_BYTES: usize = 2 << 20;
/// Fewest staging buffers per direction.
pub const MIN_SLOTS: usize = 4;
const HDR: usize = 64;

/// Slot size and count per direction for a device whose largest message is `max_message`:
/// slots a multiple of 64 bytes (so chunks hold whole elements), `None` when a slot could not
/// even hold a header and a few bytes.
pub fn slot_layout(max_message: u64) -> Option<(usize, usize)> {
    let bytes = (max_message.min(MAX_SLOT_BYTES as u64) as usize) & !63;
    if bytes < 2 * HDR {
        return None;
    }
    Some((bytes, (IN_FLIGHT_BYTES / bytes).max(MIN_SLOTS)))
}
const MAGIC: u32 = 0x484e_4554;
const KIND_DATA: u32 = 1;
const KIND_ABORT: u32 = 2;
/// The plugin tag every chunk travels under (one tag: chunks stay in order).
const WIRE_TAG: u32 = 7;
const HELLO_MAGIC: u64 = 0x4f4c_4c45_4854_454e;
const HELLO_LEN: usize = 16 + HANDLE_BYTES;

type Ptr = *mut std::ffi::c_void;

#[derive(Clone, Copy)]
struct ChunkHdr {
    kind: u32,
    chunk: u32,
    total: u64,
    off: u64,
    tag: Tag,
}

impl ChunkHdr {
    fn write(&self, b: &mut [u8]) {
        b[0..4].copy_from_slice(&MAGIC.to_le_bytes());
        b[4..8].copy_from_slice(&self.kind.to_le_bytes());
        b[8..12].copy_from_slice(&self.chunk.to_le_bytes());
        b[16..24].copy_from_slice(&self.total.to_le_bytes());
        b[24..32].copy_from_slice(&self.off.to_le_bytes());
        b[32..32 + TAG_LEN].copy_from_slice(&self.tag.0);
    }

    fn read(b: &[u8], max_chunk: usize) -> Option<ChunkHdr> {
        let u32_at = |o: usize| u32::from_le_bytes(b[o..o + 4].try_into().expect("4 bytes"));
        let u64_at = |o: usize| u64::from_le_bytes(b[o..o + 8].try_into().expect("8 bytes"));
        if b.len() < HDR || u32_at(0) != MAGIC {
            return None;
        }
        let mut tag = Tag::default();
        tag.0.copy_from_slice(&b[32..32 + TAG_LEN]);
        let h = ChunkHdr {
            kind: u32_at(4),
            chunk: u32_at(8),
            total: u64_at(16),
            off: u64_at(24),
            tag,
        };
        let fits = h.chunk as usize <= max_chunk && h.chunk as usize + HDR <= b.len();
        (matches!(h.kind, KIND_DATA | KIND_ABORT) && fits).then_some(h)
    }
}

#[derive(Clone, Copy)]
struct Op {
    ptr: usize,
    len: usize,
    reduce: Option<ReduceFn>,
    tag: Tag,
    /// Bytes handed to slots (sends) or delivered (receives).
    done: usize,
}

/// A posted receive on a staging slot, or its completed chunk (bytes received).
#[derive(Clone, Copy)]
enum RxSlot {
    Posted(usize, Ptr),
    Arrived(usize, usize),
    /// Not posted: the plugin asked to try again later.
    Idle(usize),
}

struct State {
    plugin: Arc<NetPlugin>,
    comm: Ptr,
    mr: Ptr,
    /// `2 * slots` staging buffers: sends first, then receives.
    stage: Vec<u8>,
    /// Bytes of one staging buffer (header included).
    slot_bytes: usize,
    me: u32,
    peer: u32,
    addr: String,
    tx: VecDeque<Op>,
    /// Send slots in flight (slot, request), oldest first, and the free ones.
    tx_busy: VecDeque<(usize, Ptr)>,
    tx_free: Vec<usize>,
    /// Chunks leave straight from the caller's buffer behind their header (the plugin's
    /// `isendHead`, where the device needs no registration) instead of being copied into their
    /// slot first; the slot then only counts the chunk in flight.
    direct: bool,
    rx: VecDeque<Op>,
    /// Receive slots in posting order: chunks are consumed from the front.
    rx_slots: VecDeque<RxSlot>,
    /// Progress made inside `ready` (reported by the next `progress`), or its error.
    early: bool,
    failed: Option<Error>,
}

/// The link to one peer on another host through the net plugin.
pub struct PluginLink {
    st: RefCell<State>,
    stream: TcpStream,
    /// Bytes of the peer's notice read so far from the liveness connection.
    notice: RefCell<Vec<u8>>,
    /// Whether the plugin offers a descriptor to sleep on for this comm (until it says no).
    sleeps: Cell<bool>,
}

const NOTICE_MAGIC: u32 = 0x4e4f_5443;
const NOTICE_HDR: usize = 12;
/// Longest reason a notice carries.
const NOTICE_TEXT_MAX: usize = 4096;
/// How long a rank whose plugin link failed waits for the peer's notice to arrive.
const NOTICE_WAIT: Duration = Duration::from_millis(500);

/// A notice: magic, error code, text length (u32 little endian each), then the text.
fn notice_record(why: &Error) -> Vec<u8> {
    let text = &why.msg.as_bytes()[..why.msg.len().min(NOTICE_TEXT_MAX)];
    let mut b = Vec::with_capacity(NOTICE_HDR + text.len());
    b.extend_from_slice(&NOTICE_MAGIC.to_le_bytes());
    b.extend_from_slice(&why.kind.code().to_le_bytes());
    b.extend_from_slice(&(text.len() as u32).to_le_bytes());
    b.extend_from_slice(text);
    b
}

/// The notice in `b`, once complete: `Some(None)` when `b` holds something else.
fn parse_notice(b: &[u8]) -> Option<Option<Error>> {
    let u32_at = |o: usize| u32::from_le_bytes(b[o..o + 4].try_into().expect("4 bytes"));
    if b.len() >= 4 && u32_at(0) != NOTICE_MAGIC {
        return Some(None);
    }
    if b.len() < NOTICE_HDR {
        return None;
    }
    let len = u32_at(8) as usize;
    if len > NOTICE_TEXT_MAX {
        return Some(None);
    }
    let text = b.get(NOTICE_HDR..NOTICE_HDR + len)?;
    let kind = if u32_at(4) == ErrorKind::Para.code() {
        ErrorKind::Para
    } else {
        ErrorKind::Remote
    };
    Some(Some(Error::new(
        kind,
        String::from_utf8_lossy(text).into_owned(),
    )))
}

// SAFETY: the raw pointers are plugin handles (callable from any thread per the interface) and
// this link's own staging memory; the link is used by one thread at a time.
unsafe impl Send for State {}

impl State {
    fn slot(&mut self, i: usize) -> *mut u8 {
        // SAFETY: i < 2 * slots, inside the staging buffer.
        unsafe { self.stage.as_mut_ptr().add(i * self.slot_bytes) }
    }

    /// Payload bytes of one chunk.
    fn chunk(&self) -> usize {
        self.slot_bytes - HDR
    }

    fn mh(&self) -> Ptr {
        self.mr
    }

    fn net_err(&self, what: &str, code: i32) -> Error {
        Error::new(
            ErrorKind::RoceTransfer,
            format!(
                "{what} peer rank {} ({}) through the net plugin failed (code {code})",
                self.peer, self.addr
            ),
        )
    }

    /// Keeps a receive posted on every receive slot that has none.
    fn post_receives(&mut self) -> Result<()> {
        for k in 0..self.rx_slots.len() {
            if let RxSlot::Idle(i) = self.rx_slots[k] {
                let p = self.slot(i);
                // SAFETY: the slot is this link's, valid until the comm is closed.
                let r = unsafe {
                    self.plugin
                        .irecv(self.comm, p, self.slot_bytes, WIRE_TAG, self.mh())
                };
                match r {
                    Ok(Some(req)) => self.rx_slots[k] = RxSlot::Posted(i, req),
                    Ok(None) => break,
                    Err(e) => return Err(self.net_err("receive from", e)),
                }
            }
        }
        Ok(())
    }

    fn progress(&mut self) -> Result<bool> {
        let mut any = false;
        // Sends: retire completed chunks, then fill free slots.
        while let Some(&(slot, req)) = self.tx_busy.front() {
            match self.plugin.test(req) {
                Ok(Some(_)) => {
                    self.tx_busy.pop_front();
                    self.tx_free.push(slot);
                    any = true;
                }
                Ok(None) => break,
                Err(e) => {
                    self.tx_busy.pop_front();
                    return Err(self.net_err("send to", e));
                }
            }
        }
        while let (Some(op), Some(&slot)) = (self.tx.front().copied(), self.tx_free.last()) {
            let n = (op.len - op.done).min(self.chunk());
            let hdr = ChunkHdr {
                kind: KIND_DATA,
                chunk: n as u32,
                total: op.len as u64,
                off: op.done as u64,
                tag: op.tag,
            };
            let r = if self.direct {
                let mut head = [0u8; HDR];
                hdr.write(&mut head);
                // SAFETY: post_send's contract: op.ptr stays readable and unmodified for op.len
                // bytes until the link is idle, which it is not before this request completes
                // (tx_busy).
                let r = unsafe {
                    self.plugin.isend_head(
                        self.comm,
                        &head,
                        (op.ptr as *const u8).add(op.done),
                        n,
                        WIRE_TAG,
                    )
                };
                if r == Err(super::plugin::E_NOT_SUPPORTED) {
                    self.direct = false;
                    continue;
                }
                r
            } else {
                let p = self.slot(slot);
                // SAFETY: the slot holds slot_bytes = HDR + chunk() bytes.
                let buf = unsafe { std::slice::from_raw_parts_mut(p, HDR + n) };
                hdr.write(&mut buf[..HDR]);
                if n > 0 {
                    // SAFETY: post_send's contract: op.ptr readable for op.len bytes.
                    let src = unsafe {
                        std::slice::from_raw_parts((op.ptr as *const u8).add(op.done), n)
                    };
                    buf[HDR..].copy_from_slice(src);
                }
                // SAFETY: the slot stays untouched until the request completes.
                unsafe {
                    self.plugin
                        .isend(self.comm, p, HDR + n, WIRE_TAG, self.mh())
                }
            };
            match r {
                Ok(Some(req)) => {
                    self.tx_free.pop();
                    self.tx_busy.push_back((slot, req));
                    any = true;
                }
                Ok(None) => break,
                Err(e) => return Err(self.net_err("send to", e)),
            }
            let op = self.tx.front_mut().expect("front exists");
            op.done += n;
            if op.done == op.len {
                // Copied out: the caller's buffer is free again.
                self.tx.pop_front();
            }
        }
        // Receives: test in posting order up to the first still pending (chunks of one tag
        // arrive in that order, so the later ones are pending too), consume arrived chunks
        // from the front.
        for k in 0..self.rx_slots.len() {
            if let RxSlot::Posted(i, req) = self.rx_slots[k] {
                match self.plugin.test(req) {
                    Ok(Some(bytes)) => {
                        self.rx_slots[k] = RxSlot::Arrived(i, bytes);
                        any = true;
                    }
                    Ok(None) => break,
                    Err(e) => {
                        self.rx_slots[k] = RxSlot::Idle(i);
                        return Err(self.net_err("receive from", e));
                    }
                }
            }
        }
        while let Some(&RxSlot::Arrived(i, bytes)) = self.rx_slots.front() {
            let p = self.slot(i);
            // SAFETY: the plugin wrote `bytes` (<= slot_bytes) into the slot.
            let chunk = unsafe { std::slice::from_raw_parts(p as *const u8, bytes) };
            let Some(h) = ChunkHdr::read(chunk, self.chunk()) else {
                return Err(Error::new(
                    ErrorKind::RoceTransfer,
                    format!(
                        "corrupt chunk header from peer rank {} ({})",
                        self.peer, self.addr
                    ),
                ));
            };
            if h.kind == KIND_ABORT {
                let text = String::from_utf8_lossy(&chunk[HDR..HDR + h.chunk as usize]);
                let code = u32::from_le_bytes(h.tag.0[0..4].try_into().expect("4 bytes"));
                let why = Error::new(
                    if code == ErrorKind::Para.code() {
                        ErrorKind::Para
                    } else {
                        ErrorKind::Remote
                    },
                    text.into_owned(),
                );
                return Err(super::propagated(
                    why,
                    &format!("peer rank {} ({})", self.peer, self.addr),
                ));
            }
            let Some(op) = self.rx.front_mut() else {
                break;
            };
            if op.done == 0 {
                Tag::check(&h.tag, &op.tag, self.peer, self.me)?;
            }
            if h.total != op.len as u64 || h.off != op.done as u64 {
                return Err(Error::new(
                    ErrorKind::Para,
                    format!(
                        "message size mismatch: peer rank {} sent {} bytes, this rank expected \
                         {}",
                        self.peer, h.total, op.len
                    ),
                ));
            }
            let n = h.chunk as usize;
            if n > op.len - op.done {
                return Err(Error::new(
                    ErrorKind::RoceTransfer,
                    format!(
                        "peer rank {} sent a chunk past the end of a {}-byte message",
                        self.peer, op.len
                    ),
                ));
            }
            if n > 0 {
                // SAFETY: post_recv's contract: the destination is valid for op.len bytes;
                // chunks hold whole elements (slots and HDR are multiples of 64).
                unsafe {
                    let dst = (op.ptr as *mut u8).add(op.done);
                    let src = chunk.as_ptr().add(HDR);
                    match op.reduce {
                        None => std::ptr::copy_nonoverlapping(src, dst, n),
                        Some(r) => r.apply(dst, src, n),
                    }
                }
            }
            op.done += n;
            if op.done == op.len {
                self.rx.pop_front();
            }
            self.rx_slots.pop_front();
            self.rx_slots.push_back(RxSlot::Idle(i));
            any = true;
        }
        self.post_receives()?;
        Ok(any)
    }

    fn stray_tag(&self) -> Option<Tag> {
        if !self.rx.is_empty() {
            return None;
        }
        let RxSlot::Arrived(i, bytes) = *self.rx_slots.front()? else {
            return None;
        };
        let chunk = &self.stage[i * self.slot_bytes..i * self.slot_bytes + bytes];
        ChunkHdr::read(chunk, self.chunk())
            .filter(|h| h.kind == KIND_DATA && h.off == 0)
            .map(|h| h.tag)
    }
}

impl Drop for State {
    fn drop(&mut self) {
        self.plugin.close_comm(self.comm);
        if !self.mr.is_null() {
            self.plugin.dereg_mr(self.mr);
        }
    }
}

impl PluginLink {
    fn new(
        plugin: Arc<NetPlugin>,
        comm: Ptr,
        stream: TcpStream,
        me: u32,
        peer: u32,
    ) -> Result<PluginLink> {
        let addr = stream
            .peer_addr()
            .map(|a| a.ip().to_string())
            .unwrap_or_else(|_| "?".into());
        let (slot_bytes, slots) =
            slot_layout(plugin.properties().max_message_bytes).ok_or_else(|| {
                Error::new(
                    ErrorKind::RoceConnect,
                    "net plugin: the device's largest message is too small for a chunk",
                )
            })?;
        let direct = plugin.sends_head();
        let mut st = State {
            plugin,
            comm,
            mr: std::ptr::null_mut(),
            stage: vec![0u8; 2 * slots * slot_bytes],
            slot_bytes,
            me,
            peer,
            addr,
            tx: VecDeque::new(),
            tx_busy: VecDeque::new(),
            tx_free: (0..slots).rev().collect(),
            direct,
            rx: VecDeque::new(),
            rx_slots: (slots..2 * slots).map(RxSlot::Idle).collect(),
            early: false,
            failed: None,
        };
        let (p, len) = (st.stage.as_mut_ptr(), st.stage.len());
        match st.plugin.reg_mr(comm, p, len) {
            Ok(mh) => st.mr = mh,
            Err(e) if st.plugin.properties().flags & FLAG_REG_REQUIRED != 0 => return Err(e),
            Err(e) => log::debug!("{e}; continuing unregistered"),
        }
        st.post_receives()?;
        Ok(PluginLink {
            st: RefCell::new(st),
            stream,
            notice: RefCell::new(Vec::new()),
            sleeps: Cell::new(true),
        })
    }

    fn check_alive(&self) -> Result<()> {
        let mut p = libc::pollfd {
            fd: self.stream.as_raw_fd(),
            events: libc::POLLIN | libc::POLLRDHUP,
            revents: 0,
        };
        // SAFETY: one valid pollfd, no wait.
        let r = unsafe { libc::poll(&mut p, 1, 0) };
        if r > 0 && p.revents != 0 {
            if let Some(e) = self.peer_notice(NOTICE_WAIT) {
                return Err(e);
            }
            let st = self.st.borrow();
            return Err(Error::new(
                ErrorKind::RoceTransfer,
                format!(
                    "peer rank {} ({}) is gone: its connection closed while this rank waited \
                     for it",
                    st.peer, st.addr
                ),
            ));
        }
        Ok(())
    }
}

impl PluginLink {
    /// The peer's reason from its notice on the liveness connection, waiting up to `wait` for
    /// the rest of it; `None` when the connection holds no notice (closed, or nothing came).
    fn peer_notice(&self, wait: Duration) -> Option<Error> {
        let until = Instant::now() + wait;
        let mut got = self.notice.borrow_mut();
        loop {
            match parse_notice(&got) {
                Some(Some(why)) => {
                    let st = self.st.try_borrow().ok()?;
                    return Some(super::propagated(
                        why,
                        &format!("peer rank {} ({})", st.peer, st.addr),
                    ));
                }
                Some(None) => return None,
                None => {}
            }
            let mut buf = [0u8; 1024];
            match (&self.stream).read(&mut buf) {
                Ok(0) => return None,
                Ok(k) => got.extend_from_slice(&buf[..k]),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    let left = until.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        return None;
                    }
                    let mut p = libc::pollfd {
                        fd: self.stream.as_raw_fd(),
                        events: libc::POLLIN,
                        revents: 0,
                    };
                    // SAFETY: one valid pollfd; waits at most 10 ms.
                    unsafe { libc::poll(&mut p, 1, left.as_millis().min(10) as i32) };
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(_) => return None,
            }
        }
    }

    /// A failure of the plugin link, or the peer's reason when it aborted first.
    fn explain(&self, e: Error) -> Error {
        if e.kind == ErrorKind::RoceTransfer {
            self.peer_notice(NOTICE_WAIT).unwrap_or(e)
        } else {
            e
        }
    }
}

impl Link for PluginLink {
    fn info(&self) -> LinkInfo {
        LinkInfo {
            name: "net",
            reach: Reach::Network,
            single_copy: false,
        }
    }

    unsafe fn post_send(&mut self, ptr: *const u8, len: usize, tag: Tag) -> Result<()> {
        self.st.get_mut().tx.push_back(Op {
            ptr: ptr as usize,
            len,
            reduce: None,
            tag,
            done: 0,
        });
        Ok(())
    }

    /// A reducing receive is reduced chunk by chunk as it arrives, without taking a turn.
    unsafe fn post_recv(
        &mut self,
        ptr: *mut u8,
        len: usize,
        reduce: Option<ReduceFn>,
        tag: Tag,
        _shared: &mut Shared,
    ) -> Result<()> {
        self.st.get_mut().rx.push_back(Op {
            ptr: ptr as usize,
            len,
            reduce,
            tag,
            done: 0,
        });
        Ok(())
    }

    fn progress(&mut self, _shared: &mut Shared) -> Result<bool> {
        let st = self.st.get_mut();
        let r = match st.failed.take() {
            Some(e) => Err(e),
            None => st
                .progress()
                .map(|moved| moved | std::mem::take(&mut st.early)),
        };
        r.map_err(|e| self.explain(e))
    }

    /// A zero-length send still travels as one chunk; a send is done once copied out, but the
    /// link stays busy until its chunks have left (the plugin moves them only when called).
    fn idle(&self) -> bool {
        let st = self.st.borrow();
        st.tx.is_empty() && st.rx.is_empty() && st.tx_busy.is_empty()
    }

    /// The plugin's wait descriptor together with the liveness connection's hang-up, once
    /// the plugin has progressed the comm and found nothing; polled when the plugin has no
    /// descriptor or something to report already.
    fn wake(&self) -> Wake {
        let Ok(st) = self.st.try_borrow() else {
            return Wake::Poll;
        };
        if !self.sleeps.get() || st.failed.is_some() {
            return Wake::Poll;
        }
        match st.plugin.wait_fd(st.comm) {
            Ok(Some(fd)) => Wake::Fds([
                libc::pollfd {
                    fd,
                    events: libc::POLLIN,
                    revents: 0,
                },
                libc::pollfd {
                    fd: self.stream.as_raw_fd(),
                    events: libc::POLLRDHUP,
                    revents: 0,
                },
            ]),
            Ok(None) => Wake::Poll,
            Err(code) => {
                log::debug!(
                    "net plugin: no wait descriptor for peer rank {} (code {code}); polling it",
                    st.peer
                );
                self.sleeps.set(false);
                Wake::Poll
            }
        }
    }

    fn ready(&self) -> bool {
        let Ok(mut st) = self.st.try_borrow_mut() else {
            return false;
        };
        if st.failed.is_some() {
            return true;
        }
        match st.progress() {
            Ok(true) => {
                st.early = true;
                true
            }
            Ok(false) => false,
            Err(e) => {
                st.failed = Some(e);
                true
            }
        }
    }

    fn check_peer(&self, thorough: bool) -> Result<()> {
        if thorough {
            self.check_alive()
        } else {
            Ok(())
        }
    }

    fn stray_tag(&self) -> Option<Tag> {
        self.st.borrow().stray_tag()
    }

    fn hangup_fd(&self) -> Option<RawFd> {
        Some(self.stream.as_raw_fd())
    }

    fn hung_up(&self) -> bool {
        self.check_alive().is_err()
    }

    fn abort(&mut self, why: &Error) {
        // First, before the plugin comm can fail the peer's operations: the reason, best effort
        // and never blocking (the connection is otherwise idle, so its buffer has room).
        let _ = (&self.stream).write(&notice_record(why));
        let st = self.st.get_mut();
        st.tx.clear();
        st.rx.clear();
        // Best effort: an abort record in a free slot, given a moment to leave.
        if let Some(slot) = st.tx_free.pop() {
            let text = &why.msg.as_bytes()[..why.msg.len().min(st.chunk())];
            let p = st.slot(slot);
            // SAFETY: the slot holds slot_bytes bytes.
            let buf = unsafe { std::slice::from_raw_parts_mut(p, HDR + text.len()) };
            let mut tag = Tag::default();
            tag.0[0..4].copy_from_slice(&why.kind.code().to_le_bytes());
            ChunkHdr {
                kind: KIND_ABORT,
                chunk: text.len() as u32,
                total: 0,
                off: 0,
                tag,
            }
            .write(&mut buf[..HDR]);
            buf[HDR..].copy_from_slice(text);
            // SAFETY: the slot stays untouched until the comm is closed.
            let r = unsafe {
                st.plugin
                    .isend(st.comm, p, HDR + text.len(), WIRE_TAG, st.mh())
            };
            if let Ok(Some(req)) = r {
                let until = Instant::now() + Duration::from_millis(100);
                while Instant::now() < until && matches!(st.plugin.test(req), Ok(None)) {
                    std::thread::yield_now();
                }
            }
        }
        let _ = self.stream.shutdown(std::net::Shutdown::Both);
    }
}

/// What a peer on another host ended up as after the introduction.
pub enum Attached {
    /// A link through the net plugin.
    Net(Box<PluginLink>),
    /// The plugin could not connect the pair: keep the connection as a TCP link.
    Tcp(TcpStream),
}

fn io_ctx(peer: u32, what: &str, e: std::io::Error) -> Error {
    Error::new(
        ErrorKind::TcpTransfer,
        format!("net plugin introduction with peer rank {peer}: {what}: {e}"),
    )
}

fn set_deadline(s: &TcpStream, dl: Instant) -> std::io::Result<()> {
    let left = dl
        .saturating_duration_since(Instant::now())
        .max(Duration::from_millis(1));
    s.set_read_timeout(Some(left))?;
    s.set_write_timeout(Some(left))
}

/// Connects rank `me` to each peer of `peers` (on other hosts, over their connected single TCP
/// stream) through `plugin`, falling back to TCP per pair when either side cannot.
pub fn introduce(
    plugin: &Arc<NetPlugin>,
    me: u32,
    peers: Vec<(u32, TcpStream)>,
    dl: Instant,
) -> Result<Vec<(u32, Attached)>> {
    struct Pair {
        peer: u32,
        s: TcpStream,
        listen: Option<Ptr>,
        comm: Option<Ptr>,
        connected: bool,
        ok: bool,
    }
    let mut pairs: Vec<Pair> = Vec::with_capacity(peers.len());
    let usable = slot_layout(plugin.properties().max_message_bytes).is_some();
    if !usable {
        log::info!(
            "net plugin: the device's largest message ({} bytes) cannot hold a chunk: peers on \
             other hosts stay on TCP",
            plugin.properties().max_message_bytes
        );
    }
    // Hellos first: writes never wait for the peer, so no order of pairs can deadlock.
    for (peer, mut s) in peers {
        s.set_nonblocking(false)
            .and_then(|_| set_deadline(&s, dl))
            .map_err(|e| io_ctx(peer, "socket set-up", e))?;
        let mut listen = None;
        let mut hello = [0u8; HELLO_LEN];
        hello[0..8].copy_from_slice(&HELLO_MAGIC.to_le_bytes());
        hello[8] = 1;
        if !usable {
            hello[8] = 0;
        } else if me > peer {
            match plugin.listen() {
                Ok((lc, h)) => {
                    listen = Some(lc);
                    hello[16..].copy_from_slice(&h.bytes);
                }
                Err(e) => {
                    log::info!("{e}: peer rank {peer} stays on TCP");
                    hello[8] = 0;
                }
            }
        }
        s.write_all(&hello)
            .map_err(|e| io_ctx(peer, "sending the hello", e))?;
        pairs.push(Pair {
            peer,
            s,
            listen,
            comm: None,
            connected: false,
            ok: hello[8] == 1,
        });
    }
    for p in &mut pairs {
        let mut hello = [0u8; HELLO_LEN];
        p.s.read_exact(&mut hello)
            .map_err(|e| io_ctx(p.peer, "reading the hello", e))?;
        if u64::from_le_bytes(hello[0..8].try_into().expect("8 bytes")) != HELLO_MAGIC {
            return Err(Error::new(
                ErrorKind::TcpTransfer,
                format!(
                    "net plugin introduction with peer rank {}: bad hello",
                    p.peer
                ),
            ));
        }
        p.ok &= hello[8] == 1;
        if p.ok && me < p.peer {
            let mut h = super::plugin::Handle {
                bytes: [0; HANDLE_BYTES],
            };
            h.bytes.copy_from_slice(&hello[16..]);
            match plugin.connect(&h) {
                Ok(c) => p.comm = Some(c),
                Err(e) => {
                    log::info!("{e}: peer rank {} stays on TCP", p.peer);
                    p.ok = false;
                }
            }
        }
    }
    // Connect and accept in one loop: a connect completes only while its peer accepts.
    loop {
        let mut pending = false;
        for p in pairs.iter_mut().filter(|p| p.ok && !p.connected) {
            let r = if me < p.peer {
                plugin.connect_test(p.comm.expect("connecting comm"))
            } else {
                plugin.accept(p.listen.expect("listen comm")).map(|c| {
                    p.comm = c;
                    c.is_some()
                })
            };
            match r {
                Ok(true) => p.connected = true,
                Ok(false) => pending = true,
                Err(e) => {
                    log::info!("{e}: peer rank {} stays on TCP", p.peer);
                    p.ok = false;
                }
            }
        }
        if !pending {
            break;
        }
        if Instant::now() >= dl {
            for p in pairs.iter_mut().filter(|p| p.ok && !p.connected) {
                log::info!(
                    "net plugin: connecting to peer rank {} timed out; it stays on TCP",
                    p.peer
                );
                p.ok = false;
            }
            break;
        }
        std::thread::yield_now();
    }
    // Both sides confirm; either one failing keeps the pair on TCP.
    for p in &mut pairs {
        if let Some(lc) = p.listen.take() {
            plugin.close_listen(lc);
        }
        p.s.write_all(&[p.ok as u8])
            .map_err(|e| io_ctx(p.peer, "sending the confirmation", e))?;
    }
    let mut out = Vec::with_capacity(pairs.len());
    for mut p in pairs {
        let mut b = [0u8; 1];
        p.s.read_exact(&mut b)
            .map_err(|e| io_ctx(p.peer, "reading the confirmation", e))?;
        let both = p.ok && b[0] == 1;
        p.s.set_read_timeout(None)
            .and_then(|_| p.s.set_write_timeout(None))
            .map_err(|e| io_ctx(p.peer, "socket set-up", e))?;
        match (both, p.comm) {
            (true, Some(c)) => {
                p.s.set_nonblocking(true)
                    .map_err(|e| io_ctx(p.peer, "socket set-up", e))?;
                let l = PluginLink::new(plugin.clone(), c, p.s, me, p.peer)?;
                out.push((p.peer, Attached::Net(Box::new(l))));
            }
            (_, c) => {
                if let Some(c) = c {
                    plugin.close_comm(c);
                }
                out.push((p.peer, Attached::Tcp(p.s)));
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn notices_round_trip_and_reject_garbage() {
        let why = Error::new(ErrorKind::Para, "rank 1 called AllReduce count=4");
        let rec = notice_record(&why);
        for cut in 0..rec.len() {
            assert!(parse_notice(&rec[..cut]).is_none(), "{cut} bytes");
        }
        let got = parse_notice(&rec).expect("complete").expect("a notice");
        assert_eq!(
            (got.kind, got.msg.as_str()),
            (ErrorKind::Para, why.msg.as_str())
        );
        let other = Error::new(ErrorKind::Timeout, "x");
        let got = parse_notice(&notice_record(&other)).unwrap().unwrap();
        assert_eq!(got.kind, ErrorKind::Remote);
        assert!(matches!(parse_notice(b"GET / HTTP"), Some(None)));
        let mut long = rec.clone();
        long[8..12].copy_from_slice(&(NOTICE_TEXT_MAX as u32 + 1).to_le_bytes());
        assert!(matches!(parse_notice(&long), Some(None)));
    }

    #[test]
    fn slots_follow_the_device_largest_message() {
        assert_eq!(slot_layout(u64::MAX), Some((MAX_SLOT_BYTES, MIN_SLOTS)));
        // libfabric 1.17's tcp;ofi_rxm: 256 KiB messages (the eager limit the plugin sets),
        // 8 slots keep 2 MiB in flight; 16 KiB (rxm's default) takes 128 slots.
        assert_eq!(slot_layout(256 << 10), Some((256 << 10, 8)));
        assert_eq!(slot_layout(128 << 10), Some((128 << 10, 16)));
        assert_eq!(slot_layout(16 << 10), Some((16 << 10, 128)));
        // Rounded down to whole 64-byte lines.
        assert_eq!(slot_layout((16 << 10) + 63), Some((16 << 10, 128)));
        assert_eq!(
            slot_layout(2 * HDR as u64),
            Some((2 * HDR, IN_FLIGHT_BYTES / (2 * HDR)))
        );
        assert_eq!(slot_layout(2 * HDR as u64 - 1), None);
        assert_eq!(slot_layout(0), None);
    }
}
