//! Listening, connecting and the data path.
//!
//! Every comm owns one endpoint with its own completion queue, so every completion on that
//! queue belongs to it: immediate data of RMA writes needs no routing and closing a comm cannot
//! leave stray completions to others.
//!
//! On a device with connected endpoints (`FI_EP_MSG`, [`Device::msg`]) the listener is a
//! passive endpoint; the connector sends {magic, nonce} as the connection request's data and
//! the listener accepts only requests carrying its nonce. Each comm is one connection; the
//! plugin's tag travels as the message's completion data and is checked against the receive's
//! (messages match receives in order, `HCCL_NET_FLAG_IN_ORDER`).
//!
//! On a device with reliable-datagram endpoints (`FI_EP_RDM`) every comm and listener also owns
//! an address vector, and the handshake is made of tagged messages with the top tag bit set,
//! which user tags never have:
//! the connector opens an endpoint, sends HELLO {nonce, its address} to the listener's
//! address from the handle and posts a receive for ACK; the listener's accept opens a new
//! endpoint for the comm and answers ACK {nonce, that endpoint's address}. The nonce, random
//! per listener and carried in the handle, rejects hellos and acks of anyone else.

use crate::abi::{MrDesc, NetHandle, HANDLE_BYTES};
use crate::error::{NetError, NetResult};
use crate::fabric::Device;
use crate::handles::{self, Obj};
use crate::log;
use crate::mr::Mr;
use crate::sys::{self, Cqe, HnoEp};
use std::collections::{HashMap, VecDeque};
use std::ffi::c_void;
use std::sync::{Arc, Mutex, MutexGuard};

/// Bytes reserved per operation for libfabric's `struct fi_context2`.
pub const CONTEXT_BYTES: usize = 64;

const CTRL_TAG: u64 = 1 << 63;
const TAG_HELLO: u64 = CTRL_TAG | 1;
const TAG_ACK: u64 = CTRL_TAG | 2;
/// "HNO1": marks handles and control messages of this plugin.
const MAGIC: u32 = 0x484e_4f31;
const WIRE_VERSION: u16 = 1;
const CTRL_HEADER: usize = 16;
/// Largest endpoint address a handle carries.
pub const MAX_ADDR: usize = HANDLE_BYTES - CTRL_HEADER;
/// Completion-queue entries read per progress call, at most.
const PROGRESS_BATCHES: usize = 8;

type CtrlBuf = Box<[u8; HANDLE_BYTES]>;

/// A handle or control message: the listener's nonce and an endpoint address.
#[derive(Debug, PartialEq, Eq)]
pub struct Ctrl {
    pub nonce: u64,
    pub addr: Vec<u8>,
}

impl Ctrl {
    /// Layout: magic u32, version u16, address length u16, nonce u64 (little endian), address.
    pub fn encode(&self) -> [u8; HANDLE_BYTES] {
        let mut b = [0u8; HANDLE_BYTES];
        b[0..4].copy_from_slice(&MAGIC.to_le_bytes());
        b[4..6].copy_from_slice(&WIRE_VERSION.to_le_bytes());
        b[6..8].copy_from_slice(&(self.addr.len() as u16).to_le_bytes());
        b[8..16].copy_from_slice(&self.nonce.to_le_bytes());
        b[CTRL_HEADER..CTRL_HEADER + self.addr.len()].copy_from_slice(&self.addr);
        b
    }

    pub fn decode(b: &[u8; HANDLE_BYTES]) -> NetResult<Ctrl> {
        let magic = u32::from_le_bytes(b[0..4].try_into().expect("4 bytes"));
        if magic != MAGIC {
            return Err(NetError::Invalid(format!(
                "not a handle of this plugin (magic {magic:#x})"
            )));
        }
        let version = u16::from_le_bytes(b[4..6].try_into().expect("2 bytes"));
        if version != WIRE_VERSION {
            return Err(NetError::Invalid(format!(
                "handle of wire version {version}, this plugin speaks {WIRE_VERSION}"
            )));
        }
        let len = u16::from_le_bytes(b[6..8].try_into().expect("2 bytes")) as usize;
        if len == 0 || len > MAX_ADDR {
            return Err(NetError::Invalid(format!(
                "handle address length {len} outside 1..{MAX_ADDR}"
            )));
        }
        Ok(Ctrl {
            nonce: u64::from_le_bytes(b[8..16].try_into().expect("8 bytes")),
            addr: b[CTRL_HEADER..CTRL_HEADER + len].to_vec(),
        })
    }
}

/// A random 64-bit value (std's per-process random hash keys, mixed with the time).
fn nonce() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    h.write_u128(t);
    h.write_u32(std::process::id());
    h.finish()
}

/// An endpoint of the shim, closed on drop.
struct Ep(*mut HnoEp);

// SAFETY: the endpoint belongs to a FI_THREAD_SAFE domain and is only used under its owner's lock.
unsafe impl Send for Ep {}

impl Drop for Ep {
    fn drop(&mut self) {
        // SAFETY: opened by hno_ep_open, closed once. Closing discards the operations still
        // posted, so their contexts may be freed afterwards (see EpState's field order).
        unsafe { sys::hno_ep_close(self.0) };
    }
}

fn open_ep(dev: &Device) -> NetResult<(Ep, Vec<u8>)> {
    let mut raw: *mut HnoEp = std::ptr::null_mut();
    // SAFETY: live domain; raw receives an owned endpoint.
    let rc = unsafe { sys::hno_ep_open(dev.domain(), &mut raw) };
    if rc != 0 {
        return Err(NetError::fabric("fi_endpoint", rc as i64));
    }
    let ep = Ep(raw);
    let addr = ep_name(&ep)?;
    Ok((ep, addr))
}

/// The address of an open endpoint or listener, as peers connect to it.
fn ep_name(ep: &Ep) -> NetResult<Vec<u8>> {
    let mut addr = vec![0u8; MAX_ADDR];
    let mut len = MAX_ADDR;
    // SAFETY: addr has len writable bytes.
    let rc = unsafe { sys::hno_ep_name(ep.0, addr.as_mut_ptr().cast(), &mut len) };
    if rc != 0 {
        return Err(NetError::fabric("fi_getname", rc as i64));
    }
    addr.truncate(len);
    Ok(addr)
}

/// A listening passive endpoint (connected-endpoint devices) and its address.
fn open_msg_listener(dev: &Device) -> NetResult<(Ep, Vec<u8>)> {
    let mut raw: *mut HnoEp = std::ptr::null_mut();
    // SAFETY: live domain; raw receives an owned listener.
    let rc = unsafe { sys::hno_msg_listen(dev.domain(), &mut raw) };
    if rc != 0 {
        return Err(NetError::fabric("fi_listen", rc as i64));
    }
    let ep = Ep(raw);
    let addr = ep_name(&ep)?;
    Ok((ep, addr))
}

/// Bytes of a connection request's data: magic u32, nonce u64 (little endian).
const CONNREQ_BYTES: usize = 12;

fn connreq_data(nonce: u64) -> [u8; CONNREQ_BYTES] {
    let mut b = [0u8; CONNREQ_BYTES];
    b[0..4].copy_from_slice(&MAGIC.to_le_bytes());
    b[4..12].copy_from_slice(&nonce.to_le_bytes());
    b
}

fn av_insert(ep: &Ep, addr: &[u8]) -> NetResult<u64> {
    let mut fi_addr = 0u64;
    // SAFETY: addr holds an endpoint address of the provider's format (the provider checks it).
    let rc = unsafe { sys::hno_av_insert(ep.0, addr.as_ptr().cast(), &mut fi_addr) };
    if rc != 0 {
        return Err(NetError::fabric("fi_av_insert", rc as i64));
    }
    Ok(fi_addr)
}

/// The context libfabric carries for one operation; its address comes back in the completion.
#[repr(C, align(8))]
struct OpCtx {
    scratch: [u8; CONTEXT_BYTES],
    id: u64,
}

#[derive(Clone, Debug)]
enum OpState {
    Pending,
    Done(usize),
    Failed(NetError),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    /// A send or write posted by the caller; reaped by test().
    UserSend,
    /// A receive posted by the caller; reaped by test().
    UserRecv,
    /// A control send; reaped by progress.
    CtrlSend,
    /// A control receive; reaped by the handshake.
    CtrlRecv,
}

struct Op {
    ctx: Box<OpCtx>,
    kind: Kind,
    state: OpState,
    size: usize,
    /// The tag a receive on a connected endpoint expects (its message carries the tag as
    /// completion data).
    tag: Option<u32>,
    /// The request handle of a user operation (removed when the comm closes).
    handle: usize,
    _mr: Option<Arc<Mr>>,
    buf: Option<CtrlBuf>,
}

impl Op {
    /// Bytes moved or the error, once the operation has finished; `None` while it is pending.
    fn outcome(&self) -> Option<NetResult<usize>> {
        match &self.state {
            OpState::Pending => None,
            OpState::Done(n) => Some(Ok(*n)),
            OpState::Failed(e) => Some(Err(e.clone())),
        }
    }
}

/// An endpoint and its operations in flight. Field order matters: the endpoint is dropped
/// (closed) before the contexts of the operations it may still reference.
struct EpState {
    ep: Option<Ep>,
    ops: HashMap<u64, Op>,
    next_id: u64,
    imm: VecDeque<u32>,
    /// Set when the endpoint failed as a whole; every later call reports it.
    broken: Option<NetError>,
    what: String,
}

impl EpState {
    fn new(ep: Ep, what: String) -> EpState {
        EpState {
            ep: Some(ep),
            ops: HashMap::new(),
            next_id: 1,
            imm: VecDeque::new(),
            broken: None,
            what,
        }
    }

    fn ep(&self) -> NetResult<*mut HnoEp> {
        self.ep
            .as_ref()
            .map(|e| e.0)
            .ok_or_else(|| NetError::Invalid(format!("{} is closed", self.what)))
    }

    /// Posts one operation through `f`, which receives the context pointer.
    fn post(
        &mut self,
        call: &str,
        kind: Kind,
        size: usize,
        mr: Option<Arc<Mr>>,
        buf: Option<CtrlBuf>,
        f: impl FnOnce(*mut HnoEp, *mut c_void, *mut u8) -> isize,
    ) -> NetResult<u64> {
        let ep = self.ep()?;
        let id = self.next_id;
        let mut ctx = Box::new(OpCtx {
            scratch: [0; CONTEXT_BYTES],
            id,
        });
        let mut buf = buf;
        let bufp = buf
            .as_mut()
            .map_or(std::ptr::null_mut(), |b| b.as_mut_ptr());
        let rc = f(ep, (&mut *ctx as *mut OpCtx).cast(), bufp);
        if rc < 0 {
            // SAFETY: constant query.
            if rc == -(unsafe { sys::hno_err_again() } as isize) {
                self.progress();
                return Err(NetError::Again);
            }
            return Err(NetError::fabric(call, rc as i64));
        }
        self.next_id += 1;
        self.ops.insert(
            id,
            Op {
                ctx,
                kind,
                state: OpState::Pending,
                size,
                tag: None,
                handle: 0,
                _mr: mr,
                buf,
            },
        );
        Ok(id)
    }

    /// Removes operation `id` once it has finished and returns it with its outcome; `None`
    /// while it is pending or unknown.
    fn take_finished(&mut self, id: u64) -> Option<(Op, NetResult<usize>)> {
        let outcome = self.ops.get(&id)?.outcome()?;
        let op = self.ops.remove(&id).expect("present");
        Some((op, outcome))
    }

    /// The control message a control receive delivered, once it has finished.
    fn take_ctrl(&mut self, id: u64) -> Option<NetResult<Ctrl>> {
        let (op, outcome) = self.take_finished(id)?;
        let buf = op.buf.expect("control receive has a buffer");
        Some(outcome.and_then(|_| Ctrl::decode(&buf)))
    }

    /// Reads the completion queue and records what completed; returns how many completions
    /// it read.
    fn progress(&mut self) -> usize {
        let Some(ep) = self.ep.as_ref().map(|e| e.0) else {
            return 0;
        };
        let mut read = 0;
        // SAFETY: constant queries.
        let (remote_cq_data, etrunc) =
            unsafe { (sys::hno_flag_remote_cq_data(), sys::hno_err_truncated()) };
        let mut cqe = [Cqe::default(); 16];
        let mut msg = [0 as std::ffi::c_char; 128];
        for _ in 0..PROGRESS_BATCHES {
            // SAFETY: cqe and msg are writable arrays of the given lengths.
            let n = unsafe {
                sys::hno_cq_read(ep, cqe.as_mut_ptr(), cqe.len(), msg.as_mut_ptr(), msg.len())
            };
            if n < 0 {
                let e = NetError::fabric("fi_cq_read", n as i64);
                log::error(&format!("{}: {e}", self.what));
                self.broken.get_or_insert(e);
                return read + 1;
            }
            if n == 0 {
                return read;
            }
            read += n as usize;
            for c in &cqe[..n as usize] {
                self.complete(c, remote_cq_data, etrunc, &msg);
            }
        }
        read
    }

    fn complete(&mut self, c: &Cqe, remote_cq_data: u64, etrunc: i32, msg: &[std::ffi::c_char]) {
        if c.context.is_null() {
            if c.err == 0 && c.flags & remote_cq_data != 0 {
                self.imm.push_back(c.data as u32);
            } else if c.err != 0 {
                let e = NetError::Remote(format!(
                    "{}: an incoming operation failed: {} ({})",
                    self.what,
                    sys::strerror(c.err as i64),
                    cstr(msg)
                ));
                log::error(&e.to_string());
                self.broken.get_or_insert(e);
            }
            return;
        }
        // SAFETY: every context we post points to an OpCtx kept alive in `ops` until its
        // completion has been read (here) or the endpoint is closed.
        let id = unsafe { (*(c.context as *const OpCtx)).id };
        let what = self.what.clone();
        let Some(op) = self.ops.get_mut(&id) else {
            log::warn(&format!("{what}: completion of unknown operation {id}"));
            return;
        };
        debug_assert_eq!(op.ctx.id, id);
        let carried = (c.flags & remote_cq_data != 0).then_some(c.data as u32);
        op.state = if c.err == 0 && op.tag.is_some() && carried != op.tag {
            OpState::Failed(NetError::Invalid(format!(
                "{what}: a receive for tag {} met a message of {} (messages match receives in \
                 order on this device)",
                op.tag.unwrap_or_default(),
                carried.map_or_else(|| "no tag".to_string(), |t| format!("tag {t}"))
            )))
        } else if c.err == 0 {
            // A receive reports the message's length; a send or write its own size.
            OpState::Done(if op.kind == Kind::UserRecv {
                (c.len as usize).min(op.size)
            } else {
                op.size
            })
        } else if c.err == etrunc {
            OpState::Failed(NetError::Truncated(format!(
                "{what}: the message is longer than the {}-byte receive buffer",
                op.size
            )))
        } else {
            OpState::Failed(NetError::Remote(format!(
                "{what}: operation failed: {} ({})",
                sys::strerror(c.err as i64),
                cstr(msg)
            )))
        };
        // A failed operation ends the comm: providers disagree on what survives (tcp;ofi_rxm
        // drops the connection after a truncated message), so no later call may count on it.
        if let OpState::Failed(e) = &op.state {
            self.broken.get_or_insert_with(|| {
                NetError::Remote(format!("{what} is unusable after an earlier failure ({e})"))
            });
        }
        if op.kind == Kind::CtrlSend {
            let op = self.ops.remove(&id).expect("present");
            if let OpState::Failed(e) = op.state {
                log::error(&format!("handshake message not delivered: {e}"));
            }
        }
    }
}

fn cstr(msg: &[std::ffi::c_char]) -> String {
    let bytes: Vec<u8> = msg
        .iter()
        .take_while(|&&c| c != 0)
        .map(|&c| c as u8)
        .collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

fn lock<T>(m: &Mutex<T>) -> NetResult<MutexGuard<'_, T>> {
    m.lock()
        .map_err(|_| NetError::Internal("state poisoned by an earlier panic".into()))
}

/// A listener: accepts comms.
pub struct ListenComm {
    pub dev: Arc<Device>,
    st: Mutex<ListenState>,
}

struct ListenState {
    eps: EpState,
    nonce: u64,
    hello: Option<u64>,
    /// Accepted comms whose ACK has not left yet; accept() drives them and hands them out
    /// once it has, so the connector completes while the acceptor polls accept alone.
    accepting: Vec<Comm>,
}

impl ListenComm {
    /// Opens a listening endpoint on `dev` and fills `handle`.
    pub fn open(dev: &Arc<Device>) -> NetResult<(ListenComm, NetHandle)> {
        let (ep, addr) = if dev.msg {
            open_msg_listener(dev)?
        } else {
            open_ep(dev)?
        };
        let nonce = nonce();
        let handle = NetHandle {
            bytes: Ctrl { nonce, addr }.encode(),
        };
        let l = ListenComm {
            dev: dev.clone(),
            st: Mutex::new(ListenState {
                eps: EpState::new(ep, format!("listener on device {}", dev.index)),
                nonce,
                hello: None,
                accepting: Vec::new(),
            }),
        };
        Ok((l, handle))
    }

    /// A new comm when a valid hello has arrived.
    pub fn accept(&self) -> NetResult<Option<Comm>> {
        let mut g = lock(&self.st)?;
        let st = &mut *g;
        if let Some(e) = &st.eps.broken {
            return Err(e.clone());
        }
        if let Some(c) = Self::ready_one(&mut st.accepting) {
            return Ok(Some(c));
        }
        if self.dev.msg {
            self.take_connreqs(st)?;
            return Ok(Self::ready_one(&mut st.accepting));
        }
        if st.hello.is_none() {
            let buf: CtrlBuf = Box::new([0; HANDLE_BYTES]);
            let id = st.eps.post(
                "fi_trecv",
                Kind::CtrlRecv,
                HANDLE_BYTES,
                None,
                Some(buf),
                |ep, ctx, b| {
                    // SAFETY: b is the op's own buffer of HANDLE_BYTES, alive until the op is removed.
                    unsafe {
                        sys::hno_trecv(
                            ep,
                            b.cast(),
                            HANDLE_BYTES,
                            std::ptr::null_mut(),
                            TAG_HELLO,
                            ctx,
                        )
                    }
                },
            );
            match id {
                Ok(id) => st.hello = Some(id),
                Err(NetError::Again) => return Ok(None),
                Err(e) => return Err(e),
            }
        }
        st.eps.progress();
        let id = st.hello.expect("posted above");
        let Some(hello) = st.eps.take_ctrl(id) else {
            return Ok(None);
        };
        st.hello = None;
        match hello {
            Ok(h) if h.nonce == st.nonce => {
                let comm = Comm::accepted(&self.dev, &h.addr, st.nonce)?;
                st.accepting.push(comm);
                Ok(Self::ready_one(&mut st.accepting))
            }
            Ok(_) => {
                log::warn("listener: ignored a hello carrying another listener's nonce");
                Ok(None)
            }
            Err(e) => {
                log::warn(&format!("listener: ignored a malformed hello: {e}"));
                Ok(None)
            }
        }
    }

    /// Accepts the connection requests that carry this listener's nonce (connected-endpoint
    /// devices), refuses the others.
    fn take_connreqs(&self, st: &mut ListenState) -> NetResult<()> {
        let ep = st.eps.ep()?;
        loop {
            let mut info: *mut sys::FiInfo = std::ptr::null_mut();
            let mut data = [0u8; 64];
            let mut len = data.len();
            // SAFETY: a live listener; info, data and len are writable locals.
            let rc =
                unsafe { sys::hno_msg_connreq(ep, &mut info, data.as_mut_ptr().cast(), &mut len) };
            if rc == 0 {
                return Ok(());
            }
            if rc < 0 {
                log::warn(&format!(
                    "listener: an incoming connection failed: {}",
                    NetError::fabric("fi_eq_read", rc as i64)
                ));
                continue;
            }
            if len != CONNREQ_BYTES || data[..CONNREQ_BYTES] != connreq_data(st.nonce) {
                log::warn("listener: refused a connection request without this listener's nonce");
                // SAFETY: info came with the request and is consumed here.
                unsafe { sys::hno_msg_reject(ep, info) };
                continue;
            }
            let mut raw: *mut HnoEp = std::ptr::null_mut();
            // SAFETY: live domain; info came with the request and is consumed here.
            let rc = unsafe { sys::hno_msg_accept(self.dev.domain(), info, &mut raw) };
            if rc != 0 {
                log::warn(&format!(
                    "listener: {}",
                    NetError::fabric("fi_accept", rc as i64)
                ));
                continue;
            }
            let st_comm = CommState {
                eps: EpState::new(Ep(raw), format!("comm on device {}", self.dev.index)),
                peer: None,
                phase: Phase::Joining,
                nonce: st.nonce,
                ctrl_out: None,
                waiting: false,
            };
            st.accepting.push(Comm {
                dev: self.dev.clone(),
                st: Mutex::new(st_comm),
            });
        }
    }

    /// Drives the accepted comms; takes out the first whose ACK has left (failed ones are
    /// dropped: their connector sees its connect fail or time out).
    fn ready_one(accepting: &mut Vec<Comm>) -> Option<Comm> {
        let mut i = 0;
        while i < accepting.len() {
            match accepting[i].ack_sent() {
                Ok(true) => return Some(accepting.remove(i)),
                Ok(false) => i += 1,
                Err(e) => {
                    log::warn(&format!(
                        "listener: dropped a connection whose ACK failed: {e}"
                    ));
                    accepting.remove(i);
                }
            }
        }
        None
    }

    /// Closes the endpoint.
    pub fn close(&self) -> NetResult<()> {
        let mut st = lock(&self.st)?;
        for c in st.accepting.drain(..) {
            let _ = c.close();
        }
        st.eps.ep = None;
        st.eps.ops.clear();
        Ok(())
    }
}

enum Phase {
    /// Waiting for the listener's ACK (the receive's operation id).
    Connecting(u64),
    /// A connected endpoint waiting for its connection to be established.
    Joining,
    Ready,
}

/// A connected (or connecting) comm.
pub struct Comm {
    pub dev: Arc<Device>,
    st: Mutex<CommState>,
}

struct CommState {
    eps: EpState,
    peer: Option<u64>,
    phase: Phase,
    nonce: u64,
    /// A control message not yet accepted by the provider: (tag, destination, payload).
    ctrl_out: Option<(u64, u64, CtrlBuf)>,
    /// The caller sleeps on the wait descriptor ([`Comm::wait_fd`]) and calls again when it
    /// turns readable: the background thread leaves the comm alone meanwhile, since
    /// completions it read would leave the descriptor quiet while the caller's wait for them
    /// ends only at its timeout. Any call on the comm clears it.
    waiting: bool,
}

/// Open comms, progressed in the background (see [`watch`]).
static WATCHED: Mutex<Vec<std::sync::Weak<Comm>>> = Mutex::new(Vec::new());
/// Pause between two background sweeps.
const SWEEP_EVERY: std::time::Duration = std::time::Duration::from_millis(1);
/// Pause of the background thread while no comm is open.
const IDLE_PAUSE: std::time::Duration = std::time::Duration::from_millis(100);
/// Sweeps a closing comm makes before closing its endpoint.
const CLOSE_SWEEPS: u32 = 10;

/// Keeps `c` progressed in the background until it closes.
///
/// A send completes once the provider has taken the data, not once it left: libfabric's tcp
/// provider copies the tail of a message that does not fit the socket into its own staging
/// buffer and sends it when the endpoint is next progressed. A caller that is done with a comm
/// (its last send completed) stops calling it, so without this the tail waits, and the peer
/// with it, until the caller happens to use the comm again. One thread sweeps every open comm
/// every millisecond, skipping those in use.
pub fn watch(c: &Arc<Comm>) {
    static STARTED: std::sync::Once = std::sync::Once::new();
    if let Ok(mut w) = WATCHED.lock() {
        w.push(Arc::downgrade(c));
    }
    STARTED.call_once(|| {
        let spawned = std::thread::Builder::new()
            .name("hccl-net-ofi-progress".into())
            .spawn(|| {
                let mut pause = SWEEP_EVERY;
                loop {
                    std::thread::sleep(pause);
                    let comms: Vec<Arc<Comm>> = match WATCHED.lock() {
                        Ok(mut w) => {
                            w.retain(|c| c.strong_count() > 0);
                            w.iter().filter_map(|c| c.upgrade()).collect()
                        }
                        Err(_) => return,
                    };
                    // Without comms the thread only looks now and then.
                    pause = if comms.is_empty() {
                        IDLE_PAUSE
                    } else {
                        SWEEP_EVERY
                    };
                    for c in comms {
                        c.sweep();
                    }
                }
            });
        if let Err(e) = spawned {
            log::warn(&format!("no background progress thread: {e}"));
        }
    });
}

/// A posted operation, named by a request handle.
pub struct Request {
    pub comm: Arc<Comm>,
    pub id: u64,
}

impl Comm {
    /// Starts connecting to the listener described by `handle`.
    pub fn connect(dev: &Arc<Device>, handle: &NetHandle) -> NetResult<Comm> {
        let target = Ctrl::decode(&handle.bytes)?;
        if dev.msg {
            let data = connreq_data(target.nonce);
            let mut raw: *mut HnoEp = std::ptr::null_mut();
            // SAFETY: live domain; the address and data are readable for their lengths (the
            // provider checks the address's format); raw receives an owned endpoint.
            let rc = unsafe {
                sys::hno_msg_connect(
                    dev.domain(),
                    target.addr.as_ptr().cast(),
                    data.as_ptr().cast(),
                    data.len(),
                    &mut raw,
                )
            };
            if rc != 0 {
                return Err(NetError::fabric("fi_connect", rc as i64));
            }
            return Ok(Comm {
                dev: dev.clone(),
                st: Mutex::new(CommState {
                    eps: EpState::new(Ep(raw), format!("comm on device {}", dev.index)),
                    peer: None,
                    phase: Phase::Joining,
                    nonce: target.nonce,
                    ctrl_out: None,
                    waiting: false,
                }),
            });
        }
        let (ep, addr) = open_ep(dev)?;
        let listener = av_insert(&ep, &target.addr)?;
        let mut st = CommState {
            eps: EpState::new(ep, format!("comm on device {}", dev.index)),
            peer: None,
            phase: Phase::Ready,
            nonce: target.nonce,
            ctrl_out: None,
            waiting: false,
        };
        let buf: CtrlBuf = Box::new([0; HANDLE_BYTES]);
        // The ACK receive must be posted before the HELLO leaves: a provider without
        // unexpected-message buffering would otherwise drop a fast answer.
        let mut tries = 0;
        let ack = loop {
            tries += 1;
            match st.eps.post(
                "fi_trecv",
                Kind::CtrlRecv,
                HANDLE_BYTES,
                None,
                Some(buf.clone()),
                |ep, ctx, b| {
                    // SAFETY: b is the op's own buffer of HANDLE_BYTES, alive until the op is removed.
                    unsafe {
                        sys::hno_trecv(
                            ep,
                            b.cast(),
                            HANDLE_BYTES,
                            std::ptr::null_mut(),
                            TAG_ACK,
                            ctx,
                        )
                    }
                },
            ) {
                Err(NetError::Again) if tries < 1000 => continue,
                Err(NetError::Again) => {
                    return Err(NetError::Internal("a new endpoint refuses receives".into()))
                }
                other => break other?,
            }
        };
        st.phase = Phase::Connecting(ack);
        st.ctrl_out = Some((
            TAG_HELLO,
            listener,
            Box::new(
                Ctrl {
                    nonce: target.nonce,
                    addr,
                }
                .encode(),
            ),
        ));
        st.drive();
        Ok(Comm {
            dev: dev.clone(),
            st: Mutex::new(st),
        })
    }

    fn accepted(dev: &Arc<Device>, peer_addr: &[u8], nonce: u64) -> NetResult<Comm> {
        let (ep, addr) = open_ep(dev)?;
        let peer = av_insert(&ep, peer_addr)?;
        let mut st = CommState {
            eps: EpState::new(ep, format!("comm on device {}", dev.index)),
            peer: Some(peer),
            phase: Phase::Ready,
            nonce,
            ctrl_out: Some((TAG_ACK, peer, Box::new(Ctrl { nonce, addr }.encode()))),
            waiting: false,
        };
        st.drive();
        Ok(Comm {
            dev: dev.clone(),
            st: Mutex::new(st),
        })
    }

    fn state(&self) -> NetResult<MutexGuard<'_, CommState>> {
        let mut st = lock(&self.st)?;
        st.eps.ep()?;
        st.waiting = false;
        Ok(st)
    }

    /// Whether this accepted comm's ACK has been sent (drives it).
    fn ack_sent(&self) -> NetResult<bool> {
        let mut st = self.state()?;
        st.drive();
        st.usable()?;
        Ok(matches!(st.phase, Phase::Ready)
            && st.ctrl_out.is_none()
            && !st.eps.ops.values().any(|o| o.kind == Kind::CtrlSend))
    }

    /// Whether the handshake has finished.
    pub fn connect_test(&self) -> NetResult<bool> {
        let mut st = self.state()?;
        st.drive();
        if let Some(e) = &st.eps.broken {
            return Err(e.clone());
        }
        // An accepted comm is connected from the start (its ACK may still be leaving; isend
        // waits for that).
        Ok(matches!(st.phase, Phase::Ready))
    }

    fn check_buffer(&self, mr: &Option<Arc<Mr>>, data: usize, size: usize) -> NetResult<()> {
        if data == 0 && size > 0 {
            return Err(NetError::Invalid("data is NULL".into()));
        }
        if size as u64 > self.dev.max_msg {
            return Err(NetError::Invalid(format!(
                "size {size} exceeds the device's maximum message of {} bytes",
                self.dev.max_msg
            )));
        }
        match mr {
            Some(m) => m.covers(&self.dev, data, size),
            None if self.dev.mr_local && size > 0 => Err(NetError::Invalid(
                "this device needs registered buffers (HCCL_NET_FLAG_REG_REQUIRED): pass the memory handle".into(),
            )),
            None => Ok(()),
        }
    }

    fn request(self: &Arc<Self>, st: &mut CommState, id: u64) -> *mut c_void {
        let h = handles::insert(Obj::Request(Arc::new(Request {
            comm: self.clone(),
            id,
        })));
        if let Some(op) = st.eps.ops.get_mut(&id) {
            op.handle = h as usize;
        }
        h
    }

    /// Posts a tagged send.
    pub fn isend(
        self: &Arc<Self>,
        data: *const c_void,
        size: usize,
        tag: u32,
        mr: Option<Arc<Mr>>,
    ) -> NetResult<*mut c_void> {
        self.check_buffer(&mr, data as usize, size)?;
        let mut st = self.state()?;
        st.usable()?;
        let Some(peer) = st.peer.filter(|_| st.ctrl_out.is_none()) else {
            st.drive();
            return Err(NetError::Again);
        };
        let desc = mr.as_ref().map_or(std::ptr::null_mut(), |m| m.desc());
        let msg = self.dev.msg;
        let call = if msg { "fi_senddata" } else { "fi_tsend" };
        let id = st
            .eps
            .post(call, Kind::UserSend, size, mr, None, |ep, ctx, _| {
                // SAFETY: the caller vouches for [data, data + size) until the request completes.
                unsafe {
                    if msg {
                        sys::hno_senddata(ep, data, size, desc, tag as u64, ctx)
                    } else {
                        sys::hno_tsend(ep, data, size, desc, peer, tag as u64, ctx)
                    }
                }
            })?;
        Ok(self.request(&mut st, id))
    }

    /// Posts one message of `head` (copied here) followed by `[data, data + size)` (used in
    /// place), as [`Comm::isend`] would send them joined.
    pub fn isend_head(
        self: &Arc<Self>,
        head: &[u8],
        data: *const c_void,
        size: usize,
        tag: u32,
        mr: Option<Arc<Mr>>,
    ) -> NetResult<*mut c_void> {
        if self.dev.mr_local {
            return Err(NetError::NotSupported(format!(
                "provider {} needs registered buffers: no unregistered head",
                self.dev.provider
            )));
        }
        self.check_buffer(&mr, data as usize, size)?;
        if (size as u64).saturating_add(head.len() as u64) > self.dev.max_msg {
            return Err(NetError::Invalid(format!(
                "head and data of {} bytes exceed the device's maximum message of {} bytes",
                head.len() + size,
                self.dev.max_msg
            )));
        }
        let mut buf: CtrlBuf = Box::new([0; HANDLE_BYTES]);
        buf[..head.len()].copy_from_slice(head);
        let head_len = head.len();
        let mut st = self.state()?;
        st.usable()?;
        let Some(peer) = st.peer.filter(|_| st.ctrl_out.is_none()) else {
            st.drive();
            return Err(NetError::Again);
        };
        let msg = self.dev.msg;
        let id = st.eps.post(
            "fi_sendmsg",
            Kind::UserSend,
            head_len + size,
            mr,
            Some(buf),
            |ep, ctx, b| {
                // SAFETY: b is the op's own copy of the head, alive until the op completes; the
                // caller vouches for [data, data + size) until the request completes.
                unsafe {
                    sys::hno_send_head(
                        ep,
                        msg as i32,
                        b.cast(),
                        head_len,
                        data,
                        size,
                        tag as u64,
                        peer,
                        ctx,
                    )
                }
            },
        )?;
        Ok(self.request(&mut st, id))
    }

    /// Posts a tagged receive.
    pub fn irecv(
        self: &Arc<Self>,
        data: *mut c_void,
        size: usize,
        tag: u32,
        mr: Option<Arc<Mr>>,
    ) -> NetResult<*mut c_void> {
        self.check_buffer(&mr, data as usize, size)?;
        let mut st = self.state()?;
        st.usable()?;
        if !matches!(st.phase, Phase::Ready) {
            st.drive();
            return Err(NetError::Again);
        }
        let desc = mr.as_ref().map_or(std::ptr::null_mut(), |m| m.desc());
        let msg = self.dev.msg;
        let call = if msg { "fi_recv" } else { "fi_trecv" };
        let id = st
            .eps
            .post(call, Kind::UserRecv, size, mr, None, |ep, ctx, _| {
                // SAFETY: the caller vouches for [data, data + size) until the request completes.
                unsafe {
                    if msg {
                        sys::hno_recv(ep, data, size, desc, ctx)
                    } else {
                        sys::hno_trecv(ep, data, size, desc, tag as u64, ctx)
                    }
                }
            })?;
        if msg {
            if let Some(op) = st.eps.ops.get_mut(&id) {
                op.tag = Some(tag);
            }
        }
        Ok(self.request(&mut st, id))
    }

    /// Posts an RMA write with immediate data.
    pub fn iwrite(
        self: &Arc<Self>,
        data: *const c_void,
        size: usize,
        mr: Option<Arc<Mr>>,
        remote: &MrDesc,
        offset: u64,
        imm: u32,
    ) -> NetResult<*mut c_void> {
        if !self.dev.rma {
            return Err(NetError::NotSupported(format!(
                "provider {} offers no RMA write with immediate data",
                self.dev.provider
            )));
        }
        self.check_buffer(&mr, data as usize, size)?;
        let end = offset.checked_add(size as u64);
        if end.is_none_or(|e| e > remote.size) {
            return Err(NetError::Invalid(format!(
                "write of {size} bytes at offset {offset} exceeds the remote region of {} bytes",
                remote.size
            )));
        }
        let addr = remote.base.checked_add(offset).ok_or_else(|| {
            NetError::Invalid(format!(
                "remote base {:#x} + offset {offset} overflows",
                remote.base
            ))
        })?;
        let key = remote.key;
        let mut st = self.state()?;
        st.usable()?;
        let Some(peer) = st.peer.filter(|_| st.ctrl_out.is_none()) else {
            st.drive();
            return Err(NetError::Again);
        };
        let desc = mr.as_ref().map_or(std::ptr::null_mut(), |m| m.desc());
        let id = st.eps.post(
            "fi_writedata",
            Kind::UserSend,
            size,
            mr,
            None,
            |ep, ctx, _| {
                // SAFETY: the caller vouches for [data, data + size) until the request completes;
                // the remote side is checked by the provider against the key.
                unsafe {
                    sys::hno_writedata(ep, data, size, desc, imm as u64, peer, addr, key, ctx)
                }
            },
        )?;
        Ok(self.request(&mut st, id))
    }

    /// The oldest immediate value received, if any.
    pub fn poll_imm(&self) -> NetResult<Option<u32>> {
        if !self.dev.rma {
            return Err(NetError::NotSupported(format!(
                "provider {} offers no RMA write with immediate data",
                self.dev.provider
            )));
        }
        let mut st = self.state()?;
        st.drive();
        if let Some(v) = st.eps.imm.pop_front() {
            return Ok(Some(v));
        }
        st.usable()?;
        Ok(None)
    }

    /// Some(bytes) once operation `id` completed (then it is forgotten), None while pending.
    pub fn test(&self, id: u64) -> NetResult<Option<usize>> {
        let mut st = self.state()?;
        // One completion-queue read reaps many completions: a request it already finished
        // needs no further progress (which costs the provider's socket calls) to be reported.
        if st.eps.ops.get(&id).is_none_or(|op| op.outcome().is_none()) {
            st.drive();
        }
        let Some(op) = st.eps.ops.get(&id) else {
            return Err(NetError::Invalid(format!(
                "request {id} is not pending on this comm"
            )));
        };
        // A request still pending on a broken endpoint never finishes: it fails now.
        let outcome = match (op.outcome(), &st.eps.broken) {
            (None, None) => return Ok(None),
            (None, Some(e)) => Err(e.clone()),
            (Some(r), _) => r,
        };
        let op = st.eps.ops.remove(&id).expect("present");
        handles::remove(op.handle as *mut c_void);
        outcome.map(Some)
    }

    /// The descriptor to sleep on until this comm may progress (`waitFd` of the interface):
    /// progresses the endpoint first and answers `Again` when that found completions (or the
    /// provider says some are pending), `NotSupported` when the provider's completion queue
    /// has no wait object.
    pub fn wait_fd(&self) -> NetResult<i32> {
        let mut st = self.state()?;
        st.usable()?;
        let ep = st.eps.ep()?;
        // SAFETY: a live endpoint.
        let fd = unsafe { sys::hno_ep_wait_fd(ep) };
        if fd < 0 {
            return Err(NetError::NotSupported(format!(
                "provider {}: the completion queue has no wait descriptor",
                self.dev.provider
            )));
        }
        // Connection events do not wake the completion queue's descriptor.
        if st.drive() > 0 || st.ctrl_out.is_some() || !matches!(st.phase, Phase::Ready) {
            return Err(NetError::Again);
        }
        st.usable()?;
        // SAFETY: a live endpoint.
        let rc = unsafe { sys::hno_ep_trywait(ep) };
        // SAFETY: constant query.
        if rc == -unsafe { sys::hno_err_again() } {
            return Err(NetError::Again);
        }
        if rc != 0 {
            return Err(NetError::NotSupported(format!(
                "provider {}: {}",
                self.dev.provider,
                NetError::fabric("fi_trywait", rc as i64)
            )));
        }
        st.waiting = true;
        Ok(fd)
    }

    /// Progresses the endpoint unless another thread is using it or its caller waits on it.
    fn sweep(&self) {
        if let Ok(mut st) = self.st.try_lock() {
            if st.eps.ep.is_some() && st.eps.broken.is_none() && !st.waiting {
                st.drive();
            }
        }
    }

    /// Closes the endpoint; requests still pending are abandoned and their handles removed.
    /// Data the provider still holds for completed sends is given a few progress sweeps to
    /// leave first.
    pub fn close(&self) -> NetResult<()> {
        for _ in 0..CLOSE_SWEEPS {
            self.sweep();
            std::thread::sleep(SWEEP_EVERY);
        }
        let mut st = lock(&self.st)?;
        st.eps.ep = None;
        for (_, op) in st.eps.ops.drain() {
            if op.handle != 0 {
                handles::remove(op.handle as *mut c_void);
            }
        }
        Ok(())
    }
}

impl CommState {
    /// Reads a joining connected endpoint's connection event.
    fn join(&mut self) {
        let Ok(ep) = self.eps.ep() else { return };
        // SAFETY: a live connected endpoint.
        let rc = unsafe { sys::hno_msg_event(ep) };
        let e = match rc {
            0 => return,
            1 => {
                self.peer = Some(0);
                self.phase = Phase::Ready;
                return;
            }
            2 => NetError::Remote("the peer shut the connection down while connecting".into()),
            rc => NetError::Remote(format!(
                "connection failed: {}",
                NetError::fabric("fi_connect", rc as i64)
            )),
        };
        log::error(&format!("{}: {e}", self.eps.what));
        self.eps.broken.get_or_insert(e);
    }

    fn usable(&self) -> NetResult<()> {
        match &self.eps.broken {
            Some(e) => Err(e.clone()),
            None => Ok(()),
        }
    }

    /// Posts a waiting control message, reads completions and finishes the handshake; returns
    /// how many completions it read.
    fn drive(&mut self) -> usize {
        if let Some((tag, dest, payload)) = self.ctrl_out.take() {
            let r = self.eps.post(
                "fi_tsend",
                Kind::CtrlSend,
                HANDLE_BYTES,
                None,
                Some(payload.clone()),
                |ep, ctx, b| {
                    // SAFETY: b is the op's own copy of the payload, alive until the op completes.
                    unsafe {
                        sys::hno_tsend(
                            ep,
                            b.cast(),
                            HANDLE_BYTES,
                            std::ptr::null_mut(),
                            dest,
                            tag,
                            ctx,
                        )
                    }
                },
            );
            match r {
                Ok(_) => {}
                Err(NetError::Again) => self.ctrl_out = Some((tag, dest, payload)),
                Err(e) => {
                    self.eps.broken.get_or_insert(e);
                }
            }
        }
        let read = self.eps.progress();
        if matches!(self.phase, Phase::Joining) {
            self.join();
            return read;
        }
        let Phase::Connecting(id) = self.phase else {
            return read;
        };
        let Some(ack) = self.eps.take_ctrl(id) else {
            return read;
        };
        let r = ack.and_then(|a| {
            if a.nonce != self.nonce {
                return Err(NetError::Remote(
                    "the acceptor answered with another listener's nonce".into(),
                ));
            }
            let ep = self
                .eps
                .ep
                .as_ref()
                .ok_or_else(|| NetError::Invalid("comm is closed".into()))?;
            av_insert(ep, &a.addr)
        });
        match r {
            Ok(peer) => {
                self.peer = Some(peer);
                self.phase = Phase::Ready;
            }
            Err(e) => {
                log::error(&format!("connect failed: {e}"));
                self.eps.broken.get_or_insert(e);
            }
        }
        read
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handles_round_trip_and_reject_garbage() {
        let c = Ctrl {
            nonce: 0x0123_4567_89ab_cdef,
            addr: vec![2, 0, 0x1f, 0x90, 127, 0, 0, 1],
        };
        let b = c.encode();
        assert_eq!(Ctrl::decode(&b).expect("valid"), c);

        let mut bad = b;
        bad[0] ^= 1;
        assert!(matches!(Ctrl::decode(&bad), Err(NetError::Invalid(_))));
        let mut bad = b;
        bad[4] = 9;
        assert!(matches!(Ctrl::decode(&bad), Err(NetError::Invalid(_))));
        for len in [0u16, (MAX_ADDR + 1) as u16, u16::MAX] {
            let mut bad = b;
            bad[6..8].copy_from_slice(&len.to_le_bytes());
            assert!(
                matches!(Ctrl::decode(&bad), Err(NetError::Invalid(_))),
                "{len}"
            );
        }
        assert!(Ctrl::decode(&[0; HANDLE_BYTES]).is_err());
    }

    #[test]
    fn connection_data_carries_magic_and_nonce() {
        let d = connreq_data(0x0102_0304_0506_0708);
        assert_eq!(d[0..4], MAGIC.to_le_bytes());
        assert_eq!(d[4..12], 0x0102_0304_0506_0708u64.to_le_bytes());
        assert_ne!(connreq_data(1), connreq_data(2));
    }

    #[test]
    fn nonces_differ() {
        assert_ne!(nonce(), nonce());
    }
}
