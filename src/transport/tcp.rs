//! Link between ranks in different processes over one TCP connection.
//!
//! The socket is non-blocking; sends and receives queue in posting order and advance whenever
//! the endpoint's progress loop finds the socket ready, so both directions flow at once and no
//! pair of ranks can deadlock on full socket buffers. Each message carries a 16-byte header
//! (magic, length) so a mismatched send/receive pair is detected instead of corrupting data.

use std::collections::VecDeque;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::fd::AsRawFd;

use super::ReduceFn;
use crate::base::error::{Error, ErrorKind, Result};

const MSG_MAGIC: u32 = 0x4843_4d31;
const HDR: usize = 16;
/// Staging buffer for receive-and-reduce; a multiple of every element size.
const STAGE: usize = 1 << 20;
/// Kernel socket buffers: large enough to keep a fast link busy between progress calls.
const SOCK_BUF: libc::c_int = 4 << 20;

#[derive(Debug)]
struct TxOp {
    hdr: [u8; HDR],
    ptr: usize,
    len: usize,
    done: usize,
}

#[derive(Debug)]
struct RxOp {
    ptr: usize,
    len: usize,
    hdr_got: usize,
    got: usize,
    reduce: Option<ReduceFn>,
}

/// One connected peer.
#[derive(Debug)]
pub struct TcpLink {
    stream: TcpStream,
    peer: u32,
    tx: VecDeque<TxOp>,
    rx: VecDeque<RxOp>,
    rx_hdr: [u8; HDR],
    stage: Vec<u8>,
    stage_fill: usize,
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

impl TcpLink {
    /// Wraps a connected stream to `peer`, switching it to non-blocking mode.
    pub fn new(stream: TcpStream, peer: u32) -> Result<TcpLink> {
        tune_socket(&stream);
        stream.set_nonblocking(true)?;
        Ok(TcpLink {
            stream,
            peer,
            tx: VecDeque::new(),
            rx: VecDeque::new(),
            rx_hdr: [0; HDR],
            stage: Vec::new(),
            stage_fill: 0,
        })
    }

    /// Queues a send.
    ///
    /// # Safety
    /// `ptr` must stay valid for reads of `len` bytes until `idle` is true.
    pub unsafe fn post_send(&mut self, ptr: *const u8, len: usize) {
        let mut hdr = [0u8; HDR];
        hdr[0..4].copy_from_slice(&MSG_MAGIC.to_le_bytes());
        hdr[8..16].copy_from_slice(&(len as u64).to_le_bytes());
        self.tx.push_back(TxOp {
            hdr,
            ptr: ptr as usize,
            len,
            done: 0,
        });
    }

    /// Queues a receive (with reduction into the destination when `reduce` is given).
    ///
    /// # Safety
    /// `ptr` must stay valid for writes (and reads when reducing) of `len` bytes until `idle`.
    pub unsafe fn post_recv(&mut self, ptr: *mut u8, len: usize, reduce: Option<ReduceFn>) {
        if reduce.is_some() && self.stage.is_empty() {
            self.stage = vec![0u8; STAGE];
        }
        self.rx.push_back(RxOp {
            ptr: ptr as usize,
            len,
            hdr_got: 0,
            got: 0,
            reduce,
        });
    }

    /// Whether no operation is pending.
    pub fn idle(&self) -> bool {
        self.tx.is_empty() && self.rx.is_empty()
    }

    /// The poll events this link waits for.
    pub fn poll_events(&self) -> i16 {
        let mut ev = 0;
        if !self.tx.is_empty() {
            ev |= libc::POLLOUT;
        }
        if !self.rx.is_empty() {
            ev |= libc::POLLIN;
        }
        ev
    }

    /// The socket descriptor, for polling.
    pub fn fd(&self) -> i32 {
        self.stream.as_raw_fd()
    }

    /// Drops pending operations and shuts the socket down so the peer notices at once.
    pub fn abort(&mut self) {
        self.tx.clear();
        self.rx.clear();
        let _ = self.stream.shutdown(std::net::Shutdown::Both);
    }

    fn io_err(&self, what: &str, e: std::io::Error) -> Error {
        let kind = match e.kind() {
            std::io::ErrorKind::UnexpectedEof
            | std::io::ErrorKind::ConnectionReset
            | std::io::ErrorKind::BrokenPipe
            | std::io::ErrorKind::ConnectionAborted => ErrorKind::TcpTransfer,
            _ => ErrorKind::TcpTransfer,
        };
        Error::new(kind, format!("{what} peer rank {}: {e}", self.peer))
    }

    /// Moves as many bytes as the socket takes or gives without blocking.
    /// Returns whether any progress was made.
    pub fn progress(&mut self) -> Result<bool> {
        let mut any = false;
        while let Some(op) = self.tx.front_mut() {
            let total = HDR + op.len;
            let n = if op.done < HDR {
                let bufs = [
                    std::io::IoSlice::new(&op.hdr[op.done..]),
                    // SAFETY: post_send's contract keeps the buffer valid.
                    std::io::IoSlice::new(unsafe {
                        std::slice::from_raw_parts(op.ptr as *const u8, op.len)
                    }),
                ];
                self.stream.write_vectored(&bufs)
            } else {
                let off = op.done - HDR;
                // SAFETY: as above.
                let rest = unsafe {
                    std::slice::from_raw_parts((op.ptr as *const u8).add(off), op.len - off)
                };
                self.stream.write(rest)
            };
            match n {
                Ok(0) => return Err(self.io_err("send to", std::io::ErrorKind::WriteZero.into())),
                Ok(k) => {
                    any = true;
                    op.done += k;
                    if op.done == total {
                        self.tx.pop_front();
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(self.io_err("send to", e)),
            }
        }
        while !self.rx.is_empty() {
            match self.recv_some() {
                Ok(true) => any = true,
                Ok(false) => break,
                Err(e) => return Err(e),
            }
        }
        Ok(any)
    }

    /// One read for the head receive; Ok(false) when the socket has nothing now.
    fn recv_some(&mut self) -> Result<bool> {
        let peer = self.peer;
        let op = self.rx.front_mut().expect("caller checked");
        if op.hdr_got < HDR {
            match self.stream.read(&mut self.rx_hdr[op.hdr_got..]) {
                Ok(0) => {
                    return Err(Error::new(
                        ErrorKind::TcpTransfer,
                        format!("peer rank {peer} closed the connection"),
                    ))
                }
                Ok(k) => {
                    op.hdr_got += k;
                    if op.hdr_got == HDR {
                        let magic = u32::from_le_bytes(self.rx_hdr[0..4].try_into().unwrap());
                        let len = u64::from_le_bytes(self.rx_hdr[8..16].try_into().unwrap());
                        if magic != MSG_MAGIC {
                            return Err(Error::new(
                                ErrorKind::TcpTransfer,
                                format!("corrupt message header from peer rank {peer}"),
                            ));
                        }
                        if len != op.len as u64 {
                            return Err(Error::new(
                                ErrorKind::Para,
                                format!(
                                    "message size mismatch: peer rank {peer} sent {len} bytes, \
                                     this rank expected {}",
                                    op.len
                                ),
                            ));
                        }
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return Ok(false),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => return Ok(true),
                Err(e) => return Err(self.io_err("receive from", e)),
            }
        }
        let op = self.rx.front_mut().expect("caller checked");
        if op.hdr_got == HDR && op.got == op.len {
            self.rx.pop_front();
            return Ok(true);
        }
        if op.hdr_got < HDR {
            return Ok(true);
        }
        let res = match &op.reduce {
            None => {
                // SAFETY: post_recv's contract keeps the destination valid.
                let dst = unsafe {
                    std::slice::from_raw_parts_mut((op.ptr as *mut u8).add(op.got), op.len - op.got)
                };
                self.stream.read(dst)
            }
            Some(_) => {
                let want = (op.len - op.got - self.stage_fill).min(STAGE - self.stage_fill);
                self.stream
                    .read(&mut self.stage[self.stage_fill..self.stage_fill + want])
            }
        };
        match res {
            Ok(0) => Err(Error::new(
                ErrorKind::TcpTransfer,
                format!("peer rank {peer} closed the connection"),
            )),
            Ok(k) => {
                if let Some(r) = &op.reduce {
                    let es = r.elem_size;
                    self.stage_fill += k;
                    let whole = self.stage_fill / es * es;
                    // `got` counts bytes already reduced into the destination.
                    if whole > 0 {
                        // SAFETY: destination valid per contract; stage holds `whole` bytes.
                        unsafe {
                            r.apply((op.ptr as *mut u8).add(op.got), self.stage.as_ptr(), whole)
                        };
                        op.got += whole;
                        self.stage.copy_within(whole..self.stage_fill, 0);
                        self.stage_fill -= whole;
                    }
                } else {
                    op.got += k;
                }
                if op.got == op.len {
                    self.rx.pop_front();
                }
                Ok(true)
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => Ok(false),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => Ok(true),
            Err(e) => Err(self.io_err("receive from", e)),
        }
    }
}
