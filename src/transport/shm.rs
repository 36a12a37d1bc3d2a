//! Shared-memory link between ranks that are different processes on one host (our level0 link,
//! the role HCCS plays between NPUs of one server).
//!
//! # Segments
//! Every rank of a communicator that has same-host peers in other processes creates one
//! anonymous `memfd` segment holding its *outbound* channels, one per such peer. Nothing is ever
//! named in `/dev/shm` or any file system, so nothing can be left behind, even when a rank is
//! killed: the kernel frees the memory with the last mapping. Peers are introduced over the TCP
//! connection that `connect()` opens to every other-process peer anyway (no extra rendezvous):
//! each side sends its pid and the segment's descriptor number, the other side opens
//! `/proc/<pid>/fd/<n>` and maps it, then both confirm; the creator closes its descriptor once
//! every peer has answered. The TCP connection stays open, idle, as a liveness signal: when a
//! peer process dies the kernel closes it, and a waiting rank notices within one sleep tick.
//! If either side cannot attach, the pair keeps using that connection as a normal TCP link.
//!
//! # Channels
//! A channel is a ring of `nslots` slots, each a 64-byte header (a sequence word, chunk length,
//! flags, message length, sender address, and in a message's first slot its operation tag, see
//! [`super::tag`]) and `slot_bytes` of data. The sender publishes slot
//! `k` by storing `k + 1` into its sequence word (release); the receiver consumes it and
//! advances the channel's `consumed` counter, which frees the slot. Flags are the only
//! synchronisation: no locks anywhere.
//!
//! A message is sent either *staged* (copied through slots in chunks, so sender and receiver
//! copy concurrently) or, when large and the kernel allows it, *single-copy*: one slot carries
//! the sender's buffer address and the receiver copies straight out of the sender's memory with
//! `process_vm_readv` (see [`super::cma`]); the send completes when the receiver has consumed
//! that slot. Reductions read either from the slot or from a small cache-resident chunk fetched
//! from the sender, so the reduced data makes one pass through memory.
//!
//! Beside its slots a channel has a *lane* of [`LANE_CELLS`] one-line cells for messages of at
//! most [`LANE_MAX`] bytes, so a sender of small messages runs far ahead of its receiver without
//! deepening (and spreading over more memory) the staged ring. A lane message records the
//! ring's write position when it was sent, which orders it against the ring's messages.
//!
//! # Memory
//! A rank's segment holds its outbound rings, `min(1 MiB, HCCL_BUFFSIZE / peers)` each, so at
//! most `HCCL_BUFFSIZE` in all, plus a 4 KiB lane per peer and a 4 KiB header; its endpoint
//! adds one 256 KiB chunk for single-copy reductions. Nothing is allocated per operation:
//! queues keep their capacity.
//!
//! # Waiting
//! Each segment's header carries a doorbell: one *chime* word per peer, which that peer bumps
//! with a plain store whenever it publishes or frees something for the owner, a 32-bit futex
//! word and a sleeper count. The doorbell's value is the sum of the futex word and the chimes.
//! A waiting rank polls that value under its [`Backoff`] policy (short spins between yields; no
//! spins when the host has more ranks than cores, so ranks that have work get the CPU), then
//! sleeps on the futex with a bounded timeout; a peer bumps the futex word and calls
//! `FUTEX_WAKE` only when the owner sleeps. A chime takes no atomic read-modify-write, which
//! would make the sender wait for its message store to reach the receiver's core; the sleeper
//! pays instead, with a barrier across processes (`membarrier`, see [`ShmLink`]'s `chime`). A
//! rank whose wait ends with nothing to do checks its peers' failure flags, and when the wait
//! timed out also their liveness connections, so a lost peer fails the operation at once
//! instead of at `HCCL_EXEC_TIMEOUT`.

use std::collections::VecDeque;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::backoff::{host_cores, publish_cpu, Backoff, Wait, NO_CPU};
use super::link::{Link, LinkInfo, Medium, Reach, SendHint, Shared, Wake};
use super::local_mem::{self, LocalMem, ShareDesc};
use super::peer_mem::{PeerMem, Refusal};
use super::ring_stores;
use super::tag::{Tag, TAG_LEN};
use super::{cma, ReduceFn};
use crate::base::error::{Error, ErrorKind, Result};
use crate::base::fence as asym;
use crate::base::short_copy::{copy_short, SHORT_COPY_MAX};
use crate::base::stream::{fence, stream_unfenced};

const MAGIC: u64 = 0x314d_4853_4c43_4348;
const HEADER_BYTES: usize = 4096;
const CTL_BYTES: usize = 64;
const SLOT_HDR: usize = 64;
/// Slots per channel.
pub const NSLOTS: usize = 8;
/// Cells of a channel's small-message lane, one cache line each, beside its slots. A message of
/// at most [`LANE_MAX`] bytes goes by the lane while it has room, so a sender of small messages
/// runs this many lines ahead instead of [`NSLOTS`] messages: with more ranks than cores, eight
/// slots left a Broadcast root waiting for its leaves after every eighth message and the ranks
/// taking turns per message (half the time in context switches). Deepening the ring itself cost
/// 8-process small AllReduce 0.6x (every slot a page of its own) and shrank the staged chunks.
pub const LANE_CELLS: usize = 64;
const CELL: usize = 64;
const LANE_BYTES: usize = LANE_CELLS * CELL;
/// Largest message sent by the lane: its header cell carries 32 bytes of it, each further
/// cell 64.
pub const LANE_MAX: usize = 1024;
/// Largest message that goes by the lane, when it has room, on a host that is not crowded and
/// while the peer sends to this rank too: two cells (up to 96 bytes). A one-way message
/// ([`Link::send_one_way`]: a root's, a Reduce leaf's) goes by the lane up to
/// [`LANE_ONE_WAY_MAX`], and any message on a crowded host up to [`LANE_MAX`]. A ring message
/// takes a header line, its data lines and the receiver's store to `consumed`, which the sender
/// reads back every [`NSLOTS`] messages; a lane message takes its cells. Two processes on cores
/// that share no cache (cache-line round trip 0.29 µs), one launch of `lib_ab` per row, lane
/// over ring time: Reduce 48-64 B 0.11-0.12 µs against 0.25-0.33, 96 B 0.18-0.19 against
/// 0.28-0.31, 128-512 B 0.78-0.91x; Broadcast 128-512 B 0.66-0.85x, Scatter 128-512 B
/// 0.47-0.90x; 1 KiB messages 1.05-1.44x; AllReduce, AllGather and AlltoAll 48-96 B
/// 0.79-0.96x, but AllReduce 128-512 B 1.03-1.30x (as before: 20-30% slower at 32-256 B).
pub const LANE_EXCHANGE_MAX: usize = LANE_FIRST + CELL;
/// Largest one-way message that goes by the lane on a host that is not crowded: all the lane
/// takes. The figures quoted for [`LANE_EXCHANGE_MAX`] predate claiming cells ahead
/// (`LANE_CLAIM_AHEAD`) and waiting for a full lane (`LANE_FULL_WAIT`); with both, one-way
/// messages of 768 B-1 KiB take 0.50-0.94x the ring's time (same placement, `lib_ab`).
pub const LANE_ONE_WAY_MAX: usize = LANE_MAX;
/// The receiver publishes how far it has read the lane (`lane_consumed`) once per this many
/// cells, not per message: the sender reads the word only when the lane looks full, and a
/// sender that runs ahead finds it full at every message, so a store per message bounced the
/// line between the two cores once per message.
const LANE_PUBLISH_EVERY: u64 = 16;
/// How long a one-way sender that finds the lane full spends rereading how far the receiver has
/// got before it sends by the ring instead (a host that is not crowded): 32 pauses of the
/// 2-core VM, where a pause takes 9.4 ns. Otherwise a receiver that falls behind gets a share of
/// its messages by the ring, each costing it a header line, a data line and a fenced store to
/// `consumed`, and stays behind for good. Counted in pauses ([`LANE_FULL_SPINS_MIN`]..=
/// [`LANE_FULL_SPINS_MAX`]) from the pause's measured length (`base::pause`): a CPU whose pause
/// takes 140 cycles would otherwise wait 2 µs.
const LANE_FULL_WAIT: Duration = Duration::from_nanos(300);
/// Fewest rereads of a full lane, however long a pause takes.
const LANE_FULL_SPINS_MIN: u32 = 4;
/// Most rereads of a full lane, however short a pause is.
const LANE_FULL_SPINS_MAX: u32 = 128;
/// A one-way sender asks for ownership of the free lane cells up to this many past its next
/// message's header as it publishes each message (see `ShmLink::lane_put`), so that its next
/// messages' stores find their lines owned. Two processes on cores that share no cache, one
/// `lib_ab` launch per row: Reduce, Broadcast and Scatter with this and [`LANE_FULL_WAIT`] take
/// 0.64-0.88x the time of the wait alone at 16 B, 0.44-0.71x at 96-256 B, 0.45-0.73x at 512 B,
/// 0.67-0.68x at 1 KiB; against the build before them and the lazy `lane_consumed`, 0.36-0.64x at 96-512 B (Reduce 128 B 0.078 µs against
/// 0.215, Open MPI 0.136).
const LANE_CLAIM_AHEAD: u64 = 16;
/// A lane cell: sequence word (the low 32 bits of the cell's position plus one, stored last),
/// message length (u16), the staged ring's write position when the message was sent (u16, low
/// bits: the receiver's read position is never more than [`NSLOTS`] behind it), tag, and the
/// message's first bytes. Narrow header words leave 32 bytes of data, so an fp32 message of
/// eight elements still takes one line.
const LANE_LEN_OFF: usize = 4;
const LANE_POS_OFF: usize = 6;
const LANE_TAG_OFF: usize = 8;
const LANE_DATA_OFF: usize = LANE_TAG_OFF + TAG_LEN;
const LANE_FIRST: usize = CELL - LANE_DATA_OFF;
// A header cell's bytes are copied without a `memcpy` call.
const _: () = assert!(LANE_FIRST <= SHORT_COPY_MAX);
const _: () = assert!(MAPPED_COPY_MIN <= SINGLE_COPY_MIN_OWN_CORE);
const _: () = assert!(SINGLE_COPY_MIN_OWN_CORE <= SINGLE_COPY_MIN);
const _: () = assert!(LANE_CELLS <= 64 && LANE_CELLS.is_power_of_two());
// A receiver that has taken everything leaves the longest message room (one spare cell, and
// fewer than LANE_PUBLISH_EVERY cells taken but not yet published).
const _: () = assert!(lane_cells(LANE_MAX) + LANE_PUBLISH_EVERY <= LANE_CELLS as u64);
const _: () = assert!(LANE_MAX <= u16::MAX as usize && NSLOTS < 1 << 15);
const _: () = assert!(LANE_EXCHANGE_MAX <= LANE_ONE_WAY_MAX && LANE_ONE_WAY_MAX <= LANE_MAX);
/// Largest ring per channel: enough to keep staged copies pipelined and cache-resident.
pub const MAX_RING_BYTES: usize = 1 << 20;
const MIN_SLOT_BYTES: usize = 4096;
/// Messages at least this large go single-copy when permitted. A message that fills only a
/// slot or two is not pipelined when staged: its two copies run one after the other, and from
/// 32 KiB the kernel copy's fixed cost (a system call, pinning the pages) is the smaller loss.
pub const SINGLE_COPY_MIN: usize = 32 << 10;
/// [`SINGLE_COPY_MIN`] for a message of an operation whose receives only store
/// ([`SendHint::stored`]) on a host with a core per rank, where the receiver reads at once and
/// the sender's wait is short: a system call reads 16 KiB in 0.7 µs there, where staging moves
/// each line across the cores twice. Measured on the 2-core VM, 2 processes, host memory,
/// three launches alternating with 32 KiB, 16 KiB messages: Broadcast 1.5-1.9 against 2.1 µs,
/// Send/Recv 2.1-2.3 against 3.3, AllGather 1.8 against 2.0-2.1, AlltoAll 1.8-2.0 against
/// 2.1-2.2, Scatter 1.8-2.0 against 2.2. At 8 KiB the results were mixed (Scatter 5% slower,
/// Send/Recv 10% faster). On a crowded host single copy lost from 8 to 16 KiB (4 processes:
/// Broadcast 6.2-6.9 against 3.3-4.3 µs): there the staged sender goes on at once, while a
/// single-copy one waits for a receiver that may not be running. A reduced message keeps
/// [`SINGLE_COPY_MIN`]: two-process AllReduce of 32 KiB, whose 16 KiB halves are exchanged and
/// reduced, took 7.7-8.0 µs single-copy against 5.7-5.9 staged.
pub const SINGLE_COPY_MIN_OWN_CORE: usize = 16 << 10;
/// [`SINGLE_COPY_MIN`] for a message whose buffer the peer can map ([`FLAG_MAPPED`]): the
/// receiver reads it in place, with no system call or page pinning, only the sender's wait
/// until it has been read. Measured on the 2-core VM, device memory, loaded, medians of 4-5
/// interleaved launches under `chrt -f 5`, staged against mapped time: 8-process
/// ReduceScatter 128 KiB (16 KiB blocks) 77 against 50 µs, 64 KiB 48 against 38; 8-process
/// AllGather 64 KiB 91 against 38; 2-process AllReduce 16 KiB 10.3 against 7.5, 32 KiB 18.8
/// against 12.4. Blocks of 4 KiB gained nothing measurable.
const MAPPED_COPY_MIN: usize = 8 << 10;
/// With one same-host peer and `HCCL_SHM_SINGLE_COPY` unset, reduced messages and one-way
/// messages of operations that reduce, from [`SINGLE_COPY_MIN`] up, are read single-copy when
/// their operation ([`SendHint`]) is at most this large, staged otherwise; plain exchanges and
/// operations whose receives only store go single-copy at any size (see
/// `ShmLink::single_copy_for`). Staging costs each byte two copies, the sender's into the ring
/// and the receiver's out of it; in an operation that fits the cache the two overlap badly and
/// single copy measured 1.2-2x faster. In a larger one both processes copying at once, out of
/// cache-resident rings, beats one reading the sender's cold buffer while the sender idles.
/// A reducing exchange out of a buffer the peer maps is read in place at any size
/// (`ShmLink::maps_exchange`): neither side idles there.
pub const SINGLE_COPY_MAX_ONE_PEER: usize = 1 << 20;
/// Same-host peers a rank needs before it reads every large message single-copy when
/// `HCCL_SHM_SINGLE_COPY` is unset. With more peers the rings a rank cycles through outgrow
/// the cache, each staged byte costs a memory write and read more, and single copy pays at any
/// size.
pub const SINGLE_COPY_MIN_PEERS: usize = 2;
/// Largest communicator whose Reduce stages every shared-memory message (see
/// [`SendHint::staged`]), on a host with a core per rank. Measured on a 2-core VM, staged over
/// single copy: 2 processes 2-3x from 128 KiB to 64 MiB; 8 processes 0.6-0.85x from 256 KiB to
/// 1 MiB (their rings outgrow the cache) and 1.1-1.4x from 2 MiB, left single-copy. On a host
/// with more ranks than cores no message is staged for that reason: 3 and 4 processes on the
/// 2-core VM, host memory, three alternating launches each, single copy took 0.63-1.0x the
/// staged time from 256 KiB to 4 MiB (4 processes at 4 MiB: 1.33-1.47 ms against 1.54-1.73),
/// and 0.93-1.27x at 128 KiB; an earlier measurement had found staging 1.5-2x faster at 4
/// processes.
pub const STAGED_REDUCE_MAX_RANKS: u32 = 4;
/// Smallest communicator whose Reduce stages every shared-memory message. Two processes stage
/// too since the ring is written with streaming stores ([`STAGED_STREAM_MIN`]): before, their
/// staged copies collapsed to ~0.3-2 GB/s whenever the two cores did not share a cache, and
/// single copy held only 0.7-1x Open MPI.
pub const STAGED_REDUCE_MIN_RANKS: u32 = 2;
/// Largest Reduce ([`SendHint::op_bytes`]) whose messages a link with one same-host peer reads
/// single-copy out of a mapping of the sender's buffer (`super::peer_mem`) where the operation
/// asks for staging ([`SendHint::staged`]); with more peers, any size. A mapped read pays no
/// system call or page pinning, only the receiver's one pass that reduces the mapped bytes,
/// against staging's copy into the ring, hand-over per piece and pass out of it. Measured on
/// the 2-core VM, device memory, staged ÷ mapped time, medians of 5 interleaved launches under
/// `chrt -f 5` (cores apart, machine loaded): 2 processes 2.1-2.4x from 64 KiB to 256 KiB,
/// 1.7-1.1x from 512 KiB to 4 MiB, 0.77x at 8 MiB (one core reading from memory loses to two
/// copying at once); 4 processes 1.3-1.5x from 1 MiB to 8 MiB (without `chrt`: 2-4x from 128
/// KiB to 4 MiB). A sender that can reduce for its receiver ([`SendHint::reduce`]) has no such
/// limit: where the receiver's buffers map too it shares the reduction (`SHARED_REDUCE_MIN`),
/// both cores work, and mapped beat staged at every size, 2 processes, device memory, µs,
/// two launches each: 8 MiB 442-549 against 834-836, 16 MiB 926-946 against 1,696-1,749,
/// 64 MiB 6,516-6,542 against 12,274-12,436.
pub const MAPPED_REDUCE_MAX_ONE_PEER: usize = 4 << 20;

/// Messages at least this large that go through the ring (staged, not single-copy) are
/// copied into it with streaming stores (`base::stream`) on a link whose cache-line round
/// trip, measured at set-up and again while the link runs, says the two cores share no cache
/// (`transport::ring_stores`; `HCCL_SHM_STREAM` fixes the choice).
/// Plain stores leave the data in the sender's cache, from where the receiver reads it fast
/// only while both cores share a last-level cache; when they do not (a VM whose two virtual
/// CPUs the host placed on different core complexes: the cache-line round trip measured
/// ~0.4 µs instead of ~0.07 µs), every line crosses the fabric twice per pass of the ring, and
/// staged Reduce between two processes fell from 15-29 GB/s to 0.3-1.2 GB/s from 32 KiB to
/// 1 MiB. With streaming stores it held 8-17 GB/s from 256 KiB to 1 MiB in either placement
/// (the receiver reads from memory). Smaller messages are read back at once and stay plain.
/// The 512 KiB chunks of a staged 4 MiB AllReduce between two processes behave alike: apart,
/// 250-300 µs per chunk with plain stores against 80-140 µs streaming; sharing a cache, 45-85
/// µs plain against 85-105 µs streaming.
pub const STAGED_STREAM_MIN: usize = 32 << 10;

/// A staged operation's message ([`SendHint::staged`]) goes out in at least this many chunks
/// (of at least [`STAGED_PIECE_MIN`] bytes) even when it fits one slot, so the sender's copy
/// into the ring and the receiver's reduction out of it overlap.
pub const STAGED_PIECES: usize = 4;
/// Smallest chunk [`STAGED_PIECES`] splits a staged message into: below it a slot's hand-over
/// costs more than the overlap gains. Measured on the 2-core VM, two-process Reduce, host
/// memory, µs, two launches per column, 16 against 32 KiB: with plain stores 32 KiB 3.1-3.7
/// against 2.4-2.5, 64 KiB 5.7-6.9 against 4.1-4.4; with streaming stores 32 KiB 4.7 against
/// 3.6-3.7, 64 KiB 8.7-9.1 against 6.5-6.8; from 128 KiB to 1 MiB alike.
pub const STAGED_PIECE_MIN: usize = 32 << 10;

/// The largest message a rank with `peers` same-host peers in other processes reads
/// single-copy (from [`SINGLE_COPY_MIN`] bytes up): as `setting` (`HCCL_SHM_SINGLE_COPY`) says
/// (`0`: none, `1`: any size), or when unset, any size with at least [`SINGLE_COPY_MIN_PEERS`]
/// of them, up to [`SINGLE_COPY_MAX_ONE_PEER`] with one. Below [`SINGLE_COPY_MIN`] (`0`): single
/// copy is off.
pub fn single_copy_max(setting: Option<bool>, peers: usize) -> usize {
    match setting {
        Some(false) => 0,
        Some(true) => usize::MAX,
        None if peers >= SINGLE_COPY_MIN_PEERS => usize::MAX,
        None => SINGLE_COPY_MAX_ONE_PEER,
    }
}

/// Bytes a single-copy receive that is not shared moves per progress call, so other links
/// keep moving meanwhile. Large, because the calls cost more than their count suggests:
/// measured on the 2-core VM, two-process AllGather of host memory (each rank reading the
/// other's half with `process_vm_readv` at once), five interleaved launches, 1 MiB steps
/// against 16 MiB: 16 MiB output 1.37-1.54 against 1.23-1.53 ms, 32 MiB 4.97-5.35 against
/// 4.35-5.07 (Open MPI, one call per message: 1.41-1.53 and 5.09-5.38); in an earlier set of
/// three launches 32 MiB took 4.2-4.7 ms in 1 MiB steps, 3.2-3.8 in 16 MiB ones and 3.0-3.7 in
/// one call.
const CMA_STEP: usize = 16 << 20;
/// Largest chunk of a shared copy: the receiver and its sender claim chunks one at a time, so
/// a sender called away elsewhere leaves at most this much for the receiver to wait on.
const SHARE_CHUNK_MAX: usize = 1 << 20;
/// Single-copy messages that a plain receive (no reduction) stores from this size up are
/// shared: the receiver reads chunks from the sender's buffer while the sender, waiting for
/// that read anyway, writes other chunks into the receiver's buffer (`process_vm_writev`), so
/// both processes' cores copy. Measured on the 2-core VM (two processes, chunks claimed from
/// one counter): 1 MiB in 45 against 81 µs read by the receiver alone, 256 KiB 13 against 20,
/// 64 KiB 6 against 9.
const SHARED_COPY_MIN: usize = 64 << 10;
/// [`SHARED_COPY_MIN`] on a host with more ranks than cores, where the sender's core is
/// another receiver's too: 4 processes on the 2-core VM, one-step Broadcast, sharing measured
/// 10-15% slower at 64-128 KiB and 1.15-1.5x faster from 256 KiB to 4 MiB (loaded machine).
const SHARED_COPY_MIN_CROWDED: usize = 256 << 10;

/// Mapped single-copy messages that a receive reduces are shared from this size up, like
/// plain ones ([`SHARED_COPY_MIN`]): the sender, waiting for its buffer to be read anyway,
/// reduces chunks of it into the receiver's destination through mappings of the receiver's
/// operands, with the same kernel and operands as the receiver (the bytes are the same
/// whichever side reduces a chunk). Only where both of the receiver's operands (the
/// destination and the left operand, [`ReduceFn::left`]) can be mapped. Measured on the 2-core
/// VM, 2 processes, device memory, Reduce, µs, three interleaved launches, the root alone
/// against shared: 128 KiB 4.4-4.6 against 3.3, 256 KiB 8.1-8.3 against 4.9-5.8, 512 KiB
/// 16.7-17.8 against 9.0, 1 MiB 95-97 against 18-20 (each core's part now fits its cache),
/// 2 MiB 216-219 against 90-93, 4 MiB 436-446 against 218-220.
const SHARED_REDUCE_MIN: usize = 64 << 10;

/// The smallest mapped message a reducing receive shares, on a `crowded` host or not (there
/// none: the sender's core is other ranks' too, and 4 processes on the 2-core VM, device
/// memory, Reduce from 64 KiB to 16 MiB, took as long shared as not).
fn shared_reduce_min(crowded: bool) -> usize {
    if crowded {
        usize::MAX
    } else {
        SHARED_REDUCE_MIN
    }
}

/// The smallest message a plain single-copy receive shares, on a `crowded` host or not.
fn shared_copy_min(crowded: bool) -> usize {
    if crowded {
        SHARED_COPY_MIN_CROWDED
    } else {
        SHARED_COPY_MIN
    }
}

/// Smallest chunk of a shared copy: below about 32 KiB each system call's fixed cost (pinning
/// the pages) halved the copy rate in the same measurement.
const SHARE_CHUNK_MIN: usize = 32 << 10;
/// Low bits of the share word that count claimed chunks; the bits above name the slot.
const SHARE_CHUNK_BITS: u32 = 20;

/// Chunks a shared copy is cut into where the receiver is its sender's only same-host peer: an
/// idle sender takes one half while the receiver reads the other, and a sender busy elsewhere
/// leaves the receiver both. Measured on the 2-core VM, 2 processes, host memory, µs, three
/// launches per column, quarters against halves: Broadcast (the sender idle) 128 KiB 6.3-6.8
/// against 4.2-5.5, 256 KiB 8.4-9.5 against 6.3-7.5, 1 MiB 26-32 against 20-25; Scatter (the
/// root copies its own block too) of 256 KiB messages 9.4-9.9 against 11-12.4, of 1 MiB 59-60
/// against 50-52. Thirds, and chunks that halve what is left, lost to both at most sizes.
const SHARE_PARTS_ONE_PEER: usize = 2;
/// [`SHARE_PARTS_ONE_PEER`] where the sender has more same-host peers, each of which may ask
/// it for help at once: smaller chunks spread it over them. 4 processes on the 2-core VM,
/// host-memory Broadcast, halves took 1.05-1.4x as long as quarters from 256 KiB to 4 MiB.
const SHARE_PARTS: usize = 4;

/// The chunk size of a shared copy of `len` bytes cut into about `parts` chunks (whole pages),
/// between [`SHARE_CHUNK_MIN`] and [`SHARE_CHUNK_MAX`]. Both ends of a link use the same `parts`
/// (`ShmLink::share_parts`): they claim chunks by number.
fn share_chunk(len: usize, parts: usize) -> usize {
    (len / parts)
        .next_multiple_of(4096)
        .clamp(SHARE_CHUNK_MIN, SHARE_CHUNK_MAX)
}

/// Claims the next chunk of the shared copy of the message in slot `slot` (its sequence
/// number plus one) from the share word `word`: `None` once all `nchunks` are claimed or the
/// word names another message.
fn claim_chunk(word: &AtomicU64, slot: u64, nchunks: usize) -> Option<usize> {
    let mut w = word.load(Ordering::Acquire);
    loop {
        let k = (w & ((1 << SHARE_CHUNK_BITS) - 1)) as usize;
        if w >> SHARE_CHUNK_BITS != slot || k >= nchunks {
            return None;
        }
        match word.compare_exchange_weak(w, w + 1, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => return Some(k),
            Err(x) => w = x,
        }
    }
}

/// Chunk fetched from the sender before reducing it: small enough to stay in L2.
pub const REDUCE_CHUNK: usize = 256 << 10;
/// Looks at the next slot a direct receive ([`Link::recv_now`]) of a small message makes
/// before it leaves the wait to the endpoint: one round of the backoff's spins, about the time
/// a peer a step behind in the same small operation takes to publish. None on a crowded host
/// or while the peer was last seen on this CPU, where the peer cannot publish before this rank
/// yields.
const RECV_SPINS: u32 = 64;
/// Longest single futex sleep: bounds how late a dead peer is noticed.
pub const SLEEP_TICK: Duration = Duration::from_millis(50);

const FLAG_FIRST: u32 = 1;
const FLAG_CMA: u32 = 2;
/// The chunk sits in the header's last 24 bytes: a small message costs one cache line. An inline
/// first chunk is the whole message, so its header holds the tag where the message length and
/// sender address would be.
const FLAG_INLINE: u32 = 4;
/// A single-copy slot whose sender's buffer lies in shareable memory: the slot's data area
/// starts with its [`ShareDesc`], and the receiver copies out of a mapping of it
/// ([`super::peer_mem`]) instead of with `process_vm_readv`. The address stays in the header,
/// for a receiver that cannot map the file. A receiver sharing the copy stores its own buffer's
/// descriptor after it (none: number -1), so the sender writes its chunks the same way.
const FLAG_MAPPED: u32 = 8;
/// Where a mapped slot's descriptors sit: the sender's, then the sharing receiver's.
const DESC_OFF: usize = SLOT_HDR;
const RECV_DESC_OFF: usize = SLOT_HDR + ShareDesc::BYTES;
/// Where a receiver that shares a reduction ([`SHARED_REDUCE_MIN`]) names the buffer holding
/// its left operand ([`ReduceFn::left`]); [`ShareDesc::NONE`] when that is the destination.
const LEFT_DESC_OFF: usize = RECV_DESC_OFF + ShareDesc::BYTES;
/// Where a receiver that shares a copy says what the sender does with its chunks: 0 stores
/// them, else [`share_reduce_word`] names the reduction.
const SHARE_REDUCE_OFF: usize = LEFT_DESC_OFF + ShareDesc::BYTES;
const _: () = assert!(SHARE_REDUCE_OFF + 8 <= MIN_SLOT_BYTES);

/// The word at [`SHARE_REDUCE_OFF`] that asks a sender to reduce with `r`: its element type
/// and operator (ABI values), never 0.
fn share_reduce_word(r: &ReduceFn) -> u64 {
    1 | (r.dtype.raw() as u64) << 8 | (r.op.raw() as u64) << 16
}
const INLINE_OFF: usize = 16 + TAG_LEN;
const INLINE_MAX: usize = SLOT_HDR - INLINE_OFF;
/// Where a first slot's tag sits: after the chunk length and flags when inline, else after the
/// message length and sender address.
const TAG_OFF_INLINE: usize = 16;
const TAG_OFF: usize = 32;

/// Bit 0: the owner's process is registered for the expedited barrier across processes
/// (`crate::base::fence::shared_expedited`), so a peer that is registered too may chime
/// without a fence.
const OFF_FLAGS: usize = 16;
const OFF_FAILED: usize = 64;
/// The futex word: bumped by a peer that finds the owner asleep (and by the owner's own abort).
const OFF_BELL: usize = 128;
const OFF_SLEEPERS: usize = 132;
/// The CPU the owner last waited on, on a line of its own: peers read it while the owner's
/// bell line bounces between them.
const OFF_CPU: usize = 192;
/// One word per peer, which that peer alone bumps with a plain store whenever it publishes or
/// frees something for the owner: peer `i` (the owner's channel `i` is its inbound one) at
/// `OFF_CHIMES + 4 i`, for the first [`MAX_CHIMES`] peers; the others bump the bell itself.
/// The owner's doorbell value ([`Segment::bell_seq`]) is the sum of the bell and the chimes.
const OFF_CHIMES: usize = 256;
const MAX_CHIMES: usize = 64;
/// Why the owner aborted: error kind (u32), text length (u32), text; written before the failure
/// flag is raised, so a peer that sees the flag reads a complete reason.
const OFF_REASON: usize = OFF_CHIMES + 4 * MAX_CHIMES;
const REASON_MAX: usize = OFF_STUCK - OFF_REASON - 8;
/// The tag of the operation the owner last found itself stuck in (see
/// `Medium::publish_stuck`): a version word (odd while being written, 0 before the first) and
/// the tag, on the header's last line.
const OFF_STUCK: usize = HEADER_BYTES - 64;

const HELLO_LEN: usize = 64;
const HELLO_MAGIC: u64 = 0x4f4c_4c45_484d_4853;

/// A shared mapping, unmapped on drop.
#[derive(Debug)]
struct Mapping {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: the mapping is plain shared memory; every concurrent access to it goes through
// atomics or through slots whose ownership the atomics hand over.
unsafe impl Send for Mapping {}
// SAFETY: as above.
unsafe impl Sync for Mapping {}

impl Mapping {
    fn map(fd: i32, len: usize) -> std::io::Result<Mapping> {
        // SAFETY: maps `len` bytes of a descriptor we hold; checked for failure below.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        Ok(Mapping { ptr: p.cast(), len })
    }

    fn u32_at(&self, off: usize) -> &AtomicU32 {
        debug_assert!(off + 4 <= self.len && off.is_multiple_of(4));
        // SAFETY: in bounds and aligned (the mapping is page-aligned).
        unsafe { &*(self.ptr.add(off) as *const AtomicU32) }
    }

    fn u64_at(&self, off: usize) -> &AtomicU64 {
        debug_assert!(off + 8 <= self.len && off.is_multiple_of(8));
        // SAFETY: in bounds and aligned.
        unsafe { &*(self.ptr.add(off) as *const AtomicU64) }
    }

    fn failed(&self) -> bool {
        self.u32_at(OFF_FAILED).load(Ordering::SeqCst) != 0
    }

    fn bell(&self) -> &AtomicU32 {
        self.u32_at(OFF_BELL)
    }

    /// Wakes the segment's owner: bump the doorbell, and enter the kernel only if it sleeps.
    fn ring(&self) {
        self.bell().fetch_add(1, Ordering::SeqCst);
        if self.u32_at(OFF_SLEEPERS).load(Ordering::SeqCst) != 0 {
            futex_wake(self.bell());
        }
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly what `map` mapped.
        unsafe { libc::munmap(self.ptr.cast(), self.len) };
    }
}

fn futex_wait(word: &AtomicU32, seen: u32, timeout: Duration) {
    super::futex::wait(word, seen, timeout, true);
}

fn futex_wake(word: &AtomicU32) {
    super::futex::wake(word, true);
}

/// Geometry of one rank's channels.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Geometry {
    nchan: usize,
    slot_bytes: usize,
}

impl Geometry {
    /// Rings share the communicator's staging budget (`HCCL_BUFFSIZE`) among the peers.
    fn new(nchan: usize, budget: usize) -> Geometry {
        let ring = (budget / nchan.max(1)).min(MAX_RING_BYTES);
        let slot_bytes = (ring / NSLOTS / 64 * 64).max(MIN_SLOT_BYTES);
        Geometry { nchan, slot_bytes }
    }

    fn chan_bytes(&self) -> usize {
        CTL_BYTES + LANE_BYTES + NSLOTS * (SLOT_HDR + self.slot_bytes)
    }

    fn chan_off(&self, i: usize) -> usize {
        HEADER_BYTES + i * self.chan_bytes()
    }

    fn total(&self) -> usize {
        self.chan_off(self.nchan).div_ceil(4096) * 4096
    }
}

/// One rank's own segment: its outbound channels and its doorbell.
#[derive(Debug)]
pub struct Segment {
    map: Mapping,
    geo: Geometry,
    backoff: Backoff,
}

impl Segment {
    /// Creates a segment with `nchan` outbound channels sized from `budget` bytes; `crowded`
    /// when the host has more ranks than cores (waits then yield rather than spin).
    fn create(nchan: usize, budget: usize, crowded: bool) -> Result<(Arc<Segment>, OwnedFd)> {
        let geo = Geometry::new(nchan, budget);
        // SAFETY: plain syscall with a NUL-terminated name.
        let fd = unsafe { libc::memfd_create(c"hccl-shm".as_ptr(), libc::MFD_CLOEXEC) };
        if fd < 0 {
            return Err(Error::new(
                ErrorKind::Syscall,
                format!("memfd_create: {}", std::io::Error::last_os_error()),
            ));
        }
        // SAFETY: fd is fresh and ours.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        let len = geo.total();
        // SAFETY: resizes our memfd.
        if unsafe { libc::ftruncate(fd.as_raw_fd(), len as libc::off_t) } != 0 {
            return Err(Error::new(
                ErrorKind::Memory,
                format!(
                    "sizing the {len}-byte shared segment: {}",
                    std::io::Error::last_os_error()
                ),
            ));
        }
        let map = Mapping::map(fd.as_raw_fd(), len).map_err(|e| {
            Error::new(
                ErrorKind::Memory,
                format!("mapping the {len}-byte shared segment: {e}"),
            )
        })?;
        map.u64_at(0).store(MAGIC, Ordering::Relaxed);
        map.u32_at(OFF_CPU).store(NO_CPU, Ordering::Relaxed);
        map.u32_at(OFF_FLAGS)
            .store(u32::from(asym::shared_expedited()), Ordering::Relaxed);
        map.u64_at(8)
            .store(std::process::id() as u64, Ordering::Release);
        Ok((
            Arc::new(Segment {
                map,
                geo,
                backoff: Backoff::new(crowded).sharing(nchan + 1, host_cores()),
            }),
            fd,
        ))
    }

    /// Current doorbell value; compare before scanning work and pass to [`Segment::wait`].
    pub fn bell_seq(&self) -> u32 {
        let chimes = (0..self.geo.nchan.min(MAX_CHIMES))
            .map(|i| self.map.u32_at(OFF_CHIMES + 4 * i).load(Ordering::Acquire));
        chimes.fold(self.map.bell().load(Ordering::SeqCst), u32::wrapping_add)
    }

    /// Records the CPU this rank runs on, for peers deciding whether to yield to it.
    pub fn set_cpu(&self, cpu: u32) {
        publish_cpu(self.map.u32_at(OFF_CPU), cpu);
    }

    /// Waits until the doorbell differs from `seen`, `also` is ready or `max` passes: polls
    /// under the backoff policy, then sleeps on the futex (at most [`SLEEP_TICK`]; `also` is
    /// not checked while asleep). Returns whether the doorbell moved or `also` was ready.
    pub fn wait(&self, seen: u32, max: Duration, also: &mut (impl Wait + ?Sized)) -> bool {
        struct SegWait<'a, W: Wait + ?Sized> {
            seg: &'a Segment,
            seen: u32,
            also: &'a mut W,
        }
        impl<W: Wait + ?Sized> Wait for SegWait<'_, W> {
            fn ready(&mut self) -> bool {
                self.seg.bell_seq() != self.seen || self.also.ready()
            }
            fn slow(&mut self) -> bool {
                self.also.slow()
            }
            fn here(&mut self, cpu: u32) -> bool {
                self.also.here(cpu)
            }
            fn crowd(&mut self, cpu: u32, share: u32) -> bool {
                self.also.crowd(cpu, share)
            }
        }
        let mut w = SegWait {
            seg: self,
            seen,
            also,
        };
        let Some(left) = self.backoff.run(max, &mut w) else {
            return true;
        };
        let bell = self.map.bell();
        let sleepers = self.map.u32_at(OFF_SLEEPERS);
        sleepers.fetch_add(1, Ordering::SeqCst);
        // Publishing the sleeper before looking at the chimes again pairs with a chime's
        // store-then-check (see `ShmLink::chime`): one of the two always sees the other, so no
        // wake-up is lost. Peers that chime without a fence are reached by the barrier across
        // processes; should it fail, sleeps are kept short, as such a wake-up may be missed.
        let paired = asym::heavy_shared();
        let tick = if paired || !asym::shared_expedited() {
            SLEEP_TICK
        } else {
            Duration::from_millis(1)
        };
        // The futex sleeps only while the bell keeps this value, read before the last look.
        let rung = bell.load(Ordering::SeqCst);
        if !w.ready() && !left.is_zero() {
            let t0 = Instant::now();
            futex_wait(bell, rung, left.min(tick));
            self.backoff.slept(t0.elapsed(), w.ready());
        }
        sleepers.fetch_sub(1, Ordering::SeqCst);
        w.ready()
    }

    /// Marks this rank failed for the reason `why` (peers stop waiting for it and report the
    /// reason) and wakes it. Only the first failure is recorded.
    pub fn mark_failed(&self, why: &Error) {
        if !self.map.failed() {
            let text = &why.msg.as_bytes()[..why.msg.len().min(REASON_MAX)];
            self.map
                .u32_at(OFF_REASON)
                .store(why.kind.code(), Ordering::Relaxed);
            self.map
                .u32_at(OFF_REASON + 4)
                .store(text.len() as u32, Ordering::Relaxed);
            // SAFETY: the reason area lies inside the header and only the owner writes it, once,
            // before raising the flag below.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    text.as_ptr(),
                    self.map.ptr.add(OFF_REASON + 8),
                    text.len(),
                )
            };
            self.map.u32_at(OFF_FAILED).store(1, Ordering::SeqCst);
        }
        self.map.ring();
    }

    /// Bytes of shared memory this segment holds.
    pub fn bytes(&self) -> usize {
        self.map.len
    }
}

/// One direction's ring, inside some segment's mapping.
#[derive(Clone, Copy, Debug)]
struct Channel {
    base: *mut u8,
    slot_bytes: usize,
}

// SAFETY: see Mapping; the channel never outlives the mapping its link keeps alive.
unsafe impl Send for Channel {}

impl Channel {
    fn consumed(&self) -> &AtomicU64 {
        // SAFETY: the control word is the first 8 bytes of the channel, 64-byte aligned.
        unsafe { &*(self.base as *const AtomicU64) }
    }

    /// Set by a sender that found the ring full: the receiver then rings it after consuming.
    /// Otherwise freeing a staged slot wakes nobody (the sender does not wait for it).
    fn want_space(&self) -> &AtomicU32 {
        // SAFETY: bytes 8..12 of the channel's control line.
        unsafe { &*(self.base.add(8) as *const AtomicU32) }
    }

    /// The shared copy in progress (see [`SHARED_COPY_MIN`]), written by the receiver: the
    /// single-copy slot's sequence number plus one above [`SHARE_CHUNK_BITS`], the chunks
    /// claimed so far below. Either side claims a chunk by raising the count.
    fn share(&self) -> &AtomicU64 {
        // SAFETY: bytes 16..24 of the channel's control line.
        unsafe { &*(self.base.add(16) as *const AtomicU64) }
    }

    /// The receiver's destination address of the shared copy named by [`Channel::share`].
    fn share_dst(&self) -> &AtomicU64 {
        // SAFETY: bytes 24..32 of the channel's control line.
        unsafe { &*(self.base.add(24) as *const AtomicU64) }
    }

    /// Bytes of the shared copy that either side has finished.
    fn share_done(&self) -> &AtomicU64 {
        // SAFETY: bytes 32..40 of the channel's control line.
        unsafe { &*(self.base.add(32) as *const AtomicU64) }
    }

    /// The set-up round trip's ping word and result (`ring_stores::measure_round_trip`),
    /// used once, before any message, in the lower rank's outbound channel.
    fn round_trip_words(&self) -> (&AtomicU64, &AtomicU64) {
        // SAFETY: bytes 48..64 of the channel's control line.
        unsafe {
            (
                &*(self.base.add(48) as *const AtomicU64),
                &*(self.base.add(56) as *const AtomicU64),
            )
        }
    }

    /// Lane cells the receiver has consumed (bytes 40..48 of the control line); read by the
    /// sender only when the lane looks full.
    fn lane_consumed(&self) -> &AtomicU64 {
        // SAFETY: bytes 40..48 of the channel's control line.
        unsafe { &*(self.base.add(40) as *const AtomicU64) }
    }

    fn cell(&self, k: u64) -> *mut u8 {
        let i = (k % LANE_CELLS as u64) as usize;
        // SAFETY: i < LANE_CELLS, inside the channel's lane.
        unsafe { self.base.add(CTL_BYTES + i * CELL) }
    }

    fn cell_seq(&self, k: u64) -> &AtomicU32 {
        // SAFETY: the sequence word is the first 4 bytes of the 64-byte aligned cell.
        unsafe { &*(self.cell(k) as *const AtomicU32) }
    }

    /// Calls `f(at, off, n)` for the runs of a `len`-byte lane message whose header is cell
    /// `k`: `n` bytes of the message from `off` lie at `at` (the header cell's tail, then whole
    /// cells, split where the lane wraps).
    fn lane_runs(&self, k: u64, len: usize, mut f: impl FnMut(*mut u8, usize, usize)) {
        let first = len.min(LANE_FIRST);
        // SAFETY: the header cell's data area holds LANE_FIRST bytes.
        f(unsafe { self.cell(k).add(LANE_DATA_OFF) }, 0, first);
        let (mut off, mut c) = (first, k + 1);
        while off < len {
            let run = (LANE_CELLS - (c % LANE_CELLS as u64) as usize) * CELL;
            let n = (len - off).min(run);
            f(self.cell(c), off, n);
            off += n;
            c += n.div_ceil(CELL) as u64;
        }
    }

    fn slot(&self, k: u64) -> *mut u8 {
        let i = (k % NSLOTS as u64) as usize;
        // SAFETY: i < NSLOTS, inside the channel.
        unsafe {
            self.base
                .add(CTL_BYTES + LANE_BYTES + i * (SLOT_HDR + self.slot_bytes))
        }
    }

    fn seq(&self, k: u64) -> &AtomicU64 {
        // SAFETY: the sequence word is the first 8 bytes of the slot header.
        unsafe { &*(self.slot(k) as *const AtomicU64) }
    }
}

/// Starts a run-time probe of the round trip when one is due (see `ring_stores::Prober`), as
/// a staged message from [`STAGED_STREAM_MIN`] starts in either direction; not on a crowded
/// host, where each trip may wait for a time slice.
fn start_probe(prober: &mut Option<ring_stores::Prober>, own: &Segment, out: &Channel) {
    if let Some(p) = prober {
        if !own.backoff.crowded() {
            p.start_if_due(out.round_trip_words().0, Instant::now());
        }
    }
}

/// The sequence word that publishes lane cell `k`. Never zero in the first lap (fresh memory),
/// and a header position is cleared to its complement, so neither looks published.
const fn cell_seq_of(k: u64) -> u32 {
    (k + 1) as u32
}

/// Which way a pair's small messages flow, which decides how a sender uses the lane.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Flow {
    /// The peer sends to this rank in the same call (see [`LANE_EXCHANGE_MAX`]).
    Exchange,
    /// Only this rank sends ([`Link::send_one_way`]).
    OneWay,
}

impl Flow {
    /// The longest message that goes by the lane on a host that is not crowded.
    fn lane_max(self) -> usize {
        match self {
            Flow::Exchange => LANE_EXCHANGE_MAX,
            Flow::OneWay => LANE_ONE_WAY_MAX,
        }
    }
}

/// Asks for the cache line at `p` to be read into this core's caches (a hint: never faults).
#[inline(always)]
fn prefetch_read(p: *const u8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch is a hint; it neither faults nor changes memory.
    unsafe {
        std::arch::x86_64::_mm_prefetch(p as *const i8, std::arch::x86_64::_MM_HINT_T0)
    };
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

/// Asks for ownership of the cache line at `p`, ahead of stores to it (a hint: never faults;
/// `prefetchw` runs as a no-op on x86 processors without it).
#[inline(always)]
fn prefetch_write(p: *const u8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch is a hint; it neither faults nor changes memory.
    unsafe {
        std::arch::asm!("prefetchw [{}]", in(reg) p, options(nostack, preserves_flags, readonly))
    };
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

/// Lane cells a `len`-byte message takes.
const fn lane_cells(len: usize) -> u64 {
    if len <= LANE_FIRST {
        1
    } else {
        1 + (len - LANE_FIRST).div_ceil(CELL) as u64
    }
}

/// Where the peer's next message is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Next {
    Nothing,
    Lane,
    Ring,
}

#[derive(Clone, Copy, Debug)]
struct SlotHdr {
    len: u32,
    flags: u32,
    total: u64,
    addr: u64,
}

/// Writes a slot header; `tag` goes into a message's first slot. Senders write it after the
/// slot's data, right before the sequence word: a receiver spinning on the header's line then
/// takes it from the sender once, not once between the header and the sequence word too.
///
/// # Safety
/// `slot` must point to a whole slot (64-byte aligned header) that this rank owns: published
/// by no one, or consumed by the peer.
unsafe fn write_hdr(slot: *mut u8, h: SlotHdr, tag: &Tag) {
    // SAFETY: every offset lies inside the 64-byte header (the tag ends at TAG_OFF + TAG_LEN
    // <= SLOT_HDR), aligned for its type since slots are 64-byte aligned; the slot is ours.
    unsafe {
        std::ptr::write(slot.add(8) as *mut u32, h.len);
        std::ptr::write(slot.add(12) as *mut u32, h.flags);
        let tag_off = if h.flags & FLAG_INLINE != 0 {
            TAG_OFF_INLINE
        } else {
            std::ptr::write(slot.add(16) as *mut u64, h.total);
            std::ptr::write(slot.add(24) as *mut u64, h.addr);
            TAG_OFF
        };
        if h.flags & FLAG_FIRST != 0 {
            std::ptr::copy_nonoverlapping(tag.0.as_ptr(), slot.add(tag_off), TAG_LEN);
        }
    }
}

/// Reads a slot header.
///
/// # Safety
/// `slot` must point to a whole slot that the peer has published and this rank not consumed.
unsafe fn read_hdr(slot: *const u8) -> SlotHdr {
    // SAFETY: offsets inside the aligned 64-byte header of a published slot. Volatile: the
    // memory is shared with another process (the acquire on the sequence word ordered it).
    unsafe {
        let len = std::ptr::read_volatile(slot.add(8) as *const u32);
        let flags = std::ptr::read_volatile(slot.add(12) as *const u32);
        if flags & FLAG_INLINE != 0 {
            return SlotHdr {
                len,
                flags,
                total: len as u64,
                addr: 0,
            };
        }
        SlotHdr {
            len,
            flags,
            total: std::ptr::read_volatile(slot.add(16) as *const u64),
            addr: std::ptr::read_volatile(slot.add(24) as *const u64),
        }
    }
}

/// The tag of a message's first slot whose header `h` has been read.
///
/// # Safety
/// As for [`read_hdr`].
unsafe fn read_tag(slot: *const u8, h: &SlotHdr) -> Tag {
    let off = if h.flags & FLAG_INLINE != 0 {
        TAG_OFF_INLINE
    } else {
        TAG_OFF
    };
    let mut t = Tag::default();
    // SAFETY: the tag lies inside the published slot's header (see `write_hdr`).
    unsafe { std::ptr::copy_nonoverlapping(slot.add(off), t.0.as_mut_ptr(), TAG_LEN) };
    t
}

#[derive(Debug)]
struct TxOp {
    ptr: usize,
    len: usize,
    tag: Tag,
    /// The size of the operation the message belongs to ([`SendHint::op_bytes`]).
    op_bytes: usize,
    /// Whether its receives only store ([`SendHint::stored`]).
    stored: bool,
    /// [`SendHint::staged`].
    staged: bool,
    /// [`SendHint::reduce`]: lets this rank reduce part of the message into the receiver's
    /// buffer when asked to ([`SHARED_REDUCE_MIN`]).
    reduce: Option<ReduceFn>,
    off: usize,
    cma: bool,
    published: bool,
    last_slot: u64,
}

#[derive(Debug)]
struct RxOp {
    ptr: usize,
    len: usize,
    tag: Tag,
    got: usize,
    reduce: Option<ReduceFn>,
    order: Option<u64>,
    started: bool,
    /// Whether the sender has been asked to write part of this single-copy message.
    shared: bool,
    /// Bytes of the shared copy this rank claimed, and finished, itself.
    own_claimed: usize,
    own_done: usize,
}

/// The link to one same-host peer process.
#[derive(Debug)]
pub struct ShmLink {
    me: u32,
    peer: u32,
    pid: i32,
    own: Arc<Segment>,
    out: Channel,
    peer_map: Mapping,
    inp: Channel,
    /// This rank's chime word in the peer's header (see [`OFF_CHIMES`]), if it has one.
    chime: Option<usize>,
    /// Whether both processes are registered for the barrier across processes, so that a
    /// chime needs no fence before it looks for a sleeping peer (see [`ShmLink::chime`]).
    light_chime: bool,
    single_copy: bool,
    /// Whether this rank's plain single-copy receives ask the peer to share the copy (see
    /// [`SHARED_COPY_MIN`]): the peer may access this process (`single_copy`), and no shared
    /// copy has been left unconfirmed by an abort (`retract_share`).
    share_copies: bool,
    /// Messages from [`SINGLE_COPY_MIN`] up to this size go single-copy (when `single_copy`;
    /// see `single_copy_for`).
    single_copy_max: usize,
    /// Whether staged messages from [`STAGED_STREAM_MIN`] up are written with streaming stores.
    stream_stores: bool,
    /// The run-time re-measurements of the round trip that decides `stream_stores`, when
    /// `HCCL_SHM_STREAM` leaves it to the link: the lower rank pings, the higher one answers.
    prober: Option<ring_stores::Prober>,
    responder: Option<ring_stores::Responder>,
    /// Whether a round trip measured on this link saw where the two cores are
    /// (`ring_stores::placement_seen`): both ends see the same measurements, so they agree.
    placement_seen: bool,
    stream: TcpStream,
    tx: VecDeque<TxOp>,
    rx: VecDeque<RxOp>,
    wr: u64,
    consumed_seen: u64,
    rd: u64,
    /// Lane cells written, the receiver's count of consumed ones as last read, and cells read.
    lane_wr: u64,
    lane_seen: u64,
    lane_rd: u64,
    /// Outbound lane cells whose first word holds message data rather than a sequence word:
    /// one that becomes the next header position is cleared first (see `lane_put`).
    lane_dirty: u64,
    /// Outbound lane cells before this one have been claimed ahead (see `lane_put`).
    lane_claimed: u64,
    /// Rereads of a full lane by a one-way sender (see [`LANE_FULL_WAIT`]).
    lane_full_spins: u32,
    /// Chunks a shared copy is cut into ([`SHARE_PARTS_ONE_PEER`], [`SHARE_PARTS`]): the same
    /// at both ends, which have the same number of same-host peers.
    share_parts: usize,
    /// Which of this process's buffers the peer can map (see [`FLAG_MAPPED`]).
    local_mem: LocalMem,
    /// The peer's buffers mapped here.
    peer_mem: PeerMem,
}

impl ShmLink {
    /// This rank's own segment (its doorbell).
    pub fn segment(&self) -> &Arc<Segment> {
        &self.own
    }

    /// Whether messages to this peer may go single-copy.
    pub fn single_copy(&self) -> bool {
        self.single_copy
    }

    /// Whether a `len`-byte send of an `op_bytes`-byte operation ([`SendHint`]) goes
    /// single-copy, decided when its first slot is published (every transfer of the step is
    /// posted by then). Without a size limit, from [`SINGLE_COPY_MIN`] up. With one (a single
    /// peer), by what the peer sends this rank meanwhile: while it sends too and this rank only
    /// stores what arrives (an exchange), staging would cost both cores two copies per byte,
    /// and single copy measured faster at every size; otherwise (one-way sends, and while this
    /// rank reduces what arrives: AllReduce, Reduce) only when the operation is within the
    /// limit. The chunks of a large AllReduce stay staged: there the receiver reading cold
    /// pages while the sender idles lost to both copying at once (3.3 against 4.3 GB/s at
    /// 64 MiB), while an operation that fits the cache gains up to 2x single-copy. An
    /// operation whose receives only store ([`SendHint::stored`]) goes single-copy at any size:
    /// its one-way messages are shared copies ([`SHARED_COPY_MIN`]), 1.4-2x faster than staged
    /// ones from 2 to 8 MiB (two-process Broadcast), which swung 7x between launches. Only the
    /// sender decides (the slot says which way the message comes), so ranks that decide
    /// differently still deliver the same bytes. A message its operation wants staged
    /// ([`SendHint::staged`]) is staged at any size.
    fn single_copy_for(
        &self,
        len: usize,
        op_bytes: usize,
        stored: bool,
        staged: bool,
        min: usize,
    ) -> bool {
        if staged || !self.single_copy || len < min || self.single_copy_max < SINGLE_COPY_MIN {
            return false;
        }
        if self.single_copy_max == usize::MAX || stored {
            return true;
        }
        // A chunk of a larger operation is priced as that operation: its source streams from
        // memory, where both cores copying (staged) beat one reading cold pages (single copy).
        let size = len.max(op_bytes);
        let (mut exchange, mut reducing) = (false, false);
        for r in self.rx.iter().filter(|r| r.got < r.len) {
            if r.reduce.is_some() {
                reducing = true;
            } else {
                exchange = true;
            }
        }
        (exchange && !reducing) || size <= self.single_copy_max
    }

    /// The smallest single-copy message for a `len`-byte one at `ptr` of an operation whose
    /// receives only store or not (`stored`): [`MAPPED_COPY_MIN`] when the peer can map its
    /// buffer, else [`SINGLE_COPY_MIN_OWN_CORE`] for a stored message on a host with a core
    /// per rank and [`SINGLE_COPY_MIN`] otherwise (the buffer is looked up only for a length
    /// in between).
    fn copy_min(&mut self, ptr: usize, len: usize, stored: bool) -> usize {
        let min = if stored && !self.own.backoff.crowded() {
            SINGLE_COPY_MIN_OWN_CORE
        } else {
            SINGLE_COPY_MIN
        };
        let between = (MAPPED_COPY_MIN..min).contains(&len);
        if between && self.single_copy && self.local_mem.find(ptr, len).is_some() {
            MAPPED_COPY_MIN
        } else {
            min
        }
    }

    /// Whether a `len`-byte message at `ptr` of an `op_bytes`-byte operation that asks for
    /// staging ([`SendHint::staged`]) goes single-copy instead, because the peer can map its
    /// buffer ([`FLAG_MAPPED`]; see [`MAPPED_REDUCE_MAX_ONE_PEER`]). A sender that can reduce
    /// for its receiver (`helps`, see [`SHARED_REDUCE_MIN`]) maps at any size.
    fn maps_instead(
        &mut self,
        ptr: usize,
        len: usize,
        op_bytes: usize,
        min: usize,
        helps: bool,
    ) -> bool {
        self.single_copy
            && len >= min
            && (self.single_copy_max == usize::MAX
                || helps
                || len.max(op_bytes) <= MAPPED_REDUCE_MAX_ONE_PEER)
            && self.local_mem.find(ptr, len).is_some()
    }

    /// Whether a `len`-byte message at `ptr`, which [`Self::single_copy_for`] would stage, goes
    /// single-copy because the peer can map its buffer ([`FLAG_MAPPED`]) and this rank receives
    /// from the peer too (an exchange, such as a two-process AllReduce's): each side then reads
    /// and reduces the other's buffer in place, both cores busy, with no system call or page
    /// pinning. Measured with two processes and device memory, AllReduce medians of 5
    /// interleaved launches, staged against mapped: 2 MiB 388 against 232 µs, 8 MiB 2,626 against
    /// 1,603, 64 MiB 26,113 against 13,939. Read through the kernel instead (`malloc` buffers),
    /// single copy gained nothing there, so only a mapped buffer qualifies.
    fn maps_exchange(&mut self, ptr: usize, len: usize, min: usize) -> bool {
        self.single_copy
            && len >= min
            && self.rx.iter().any(|r| r.got < r.len)
            && self.local_mem.find(ptr, len).is_some()
    }

    /// Publishes a message of at most [`LANE_MAX`] bytes in the lane when it has room (without
    /// ringing the peer's bell); false when it has not, or when it is longer than `flow`
    /// allows on a host that is not crowded ([`Flow::lane_max`]). The
    /// cell records the ring's write position, so the receiver takes it before any slot
    /// published after it and after every slot published before it.
    ///
    /// # Safety
    /// `ptr` must hold `len` bytes.
    // Inlined into the sends: an out-of-line call saves registers, and a small call's stores
    // queue behind the message's (see `base::error`).
    #[inline(always)]
    unsafe fn lane_put(&mut self, ptr: *const u8, len: usize, tag: &Tag, flow: Flow) -> bool {
        if len > LANE_MAX || (len > flow.lane_max() && !self.own.backoff.crowded()) {
            return false;
        }
        let n = lane_cells(len);
        // One cell more than the message: the next header position, cleared below when a
        // message's data covers it, must not be one the receiver still reads.
        let room = |seen: u64| self.lane_wr + n + 1 - seen <= LANE_CELLS as u64;
        if !room(self.lane_seen) {
            self.lane_seen = self.out.lane_consumed().load(Ordering::Acquire);
            // A one-way sender that finds the lane full waits a moment for the receiver to free
            // cells rather than turn to the ring (see `LANE_FULL_WAIT`).
            let mut spins = if flow == Flow::OneWay && !self.own.backoff.crowded() {
                self.lane_full_spins
            } else {
                0
            };
            while !room(self.lane_seen) {
                if spins == 0 {
                    return false;
                }
                spins -= 1;
                std::hint::spin_loop();
                self.lane_seen = self.out.lane_consumed().load(Ordering::Acquire);
            }
        }
        let k = self.lane_wr;
        let cell = self.out.cell(k);
        // The further cells first, the header cell last (as for slots, see `write_hdr`).
        // SAFETY: cells k..=k+n are ours (consumed by the receiver or never published: checked
        // above); the header fields lie inside the 64-byte aligned cell; `ptr` holds `len`
        // bytes (the caller's contract) and the runs cover exactly the message's cells.
        unsafe {
            if n > 1 {
                self.out.lane_runs(k, len, |at, off, m| {
                    if off > 0 {
                        std::ptr::copy_nonoverlapping(ptr.add(off), at, m)
                    }
                });
            }
            std::ptr::write(cell.add(LANE_LEN_OFF) as *mut u16, len as u16);
            std::ptr::write(cell.add(LANE_POS_OFF) as *mut u16, self.wr as u16);
            std::ptr::copy_nonoverlapping(tag.0.as_ptr(), cell.add(LANE_TAG_OFF), TAG_LEN);
            copy_short(ptr, cell.add(LANE_DATA_OFF), len.min(LANE_FIRST));
        }
        let bit = |c: u64| 1u64 << (c % LANE_CELLS as u64);
        let mut dirty = self.lane_dirty & !bit(k);
        if n > 1 {
            for c in k + 1..k + n {
                dirty |= bit(c);
            }
        }
        // A receiver polling the next header position must never find there data that happens
        // to equal the sequence word it waits for.
        if dirty & bit(k + n) != 0 {
            self.out
                .cell_seq(k + n)
                .store(!cell_seq_of(k + n), Ordering::Relaxed);
            dirty &= !bit(k + n);
        }
        self.lane_dirty = dirty;
        self.out
            .cell_seq(k)
            .store(cell_seq_of(k), Ordering::Release);
        self.lane_wr = k + n;
        if flow == Flow::OneWay {
            // A one-way sender's next message most likely has this one's size: ownership of its
            // free cells is asked for now, while this call returns and the next one starts, not
            // when its stores reach them. (Where the peer answers, it polls the next header
            // position at once, and taking that line from it costs a transfer each way.)
            // Only cells the receiver is known to have read: it still needs the others.
            let end = (k + n + LANE_CLAIM_AHEAD).min(self.lane_seen + LANE_CELLS as u64);
            for c in self.lane_claimed.max(k + n)..end {
                prefetch_write(self.out.cell(c));
            }
            self.lane_claimed = self.lane_claimed.max(end);
        }
        true
    }

    /// Publishes a message straight into the lane when it has room and the message is at most
    /// `lane_max` bytes (see [`ShmLink::lane_put`]), else into one slot of the ring: header, tag
    /// and data (inline in the header's line up to `INLINE_MAX` bytes), then the sequence word,
    /// then one ring of the peer's bell, which enters the kernel only when the peer sleeps. The
    /// slot is exactly what the queued path would publish for the same message (messages this
    /// small never go single-copy), so the receiving side cannot tell the two apart.
    ///
    /// # Safety
    /// `ptr` must hold `len` bytes.
    #[inline(always)]
    unsafe fn send_direct(&mut self, ptr: *const u8, len: usize, tag: &Tag, flow: Flow) -> bool {
        if !self.tx.is_empty() || len > self.out.slot_bytes || len >= MAPPED_COPY_MIN {
            return false;
        }
        // SAFETY: `ptr` holds `len` bytes (the caller's contract).
        if unsafe { self.lane_put(ptr, len, tag, flow) } {
            self.chime();
            return true;
        }
        if self.wr - self.consumed_seen >= NSLOTS as u64 {
            self.consumed_seen = self.out.consumed().load(Ordering::Acquire);
            if self.wr - self.consumed_seen >= NSLOTS as u64 {
                // Full: the queued path asks the receiver for a ring and waits.
                return false;
            }
        }
        let slot = self.out.slot(self.wr);
        let inline = len <= INLINE_MAX;
        let flags = FLAG_FIRST | if inline { FLAG_INLINE } else { 0 };
        // SAFETY: the slot is ours until published (wr - consumed < NSLOTS); `ptr` holds `len`
        // bytes (the caller's contract), which fit the slot's data area (inline: INLINE_MAX).
        // The data lines first, the header line last (see `write_hdr`).
        unsafe {
            if len > 0 {
                let off = if inline { INLINE_OFF } else { SLOT_HDR };
                std::ptr::copy_nonoverlapping(ptr, slot.add(off), len);
            }
            write_hdr(
                slot,
                SlotHdr {
                    len: len as u32,
                    flags,
                    total: len as u64,
                    addr: ptr as u64,
                },
                tag,
            );
        }
        self.out.seq(self.wr).store(self.wr + 1, Ordering::Release);
        self.wr += 1;
        self.chime();
        true
    }

    /// Tells the peer that something was published or freed for it (see [`chime`]).
    fn chime(&self) {
        chime(&self.peer_map, self.chime, self.light_chime);
    }

    /// Where the peer's next message (or the next chunk of the one in progress) is. A lane
    /// message comes first when the ring stood where this rank reads now as it was sent;
    /// otherwise the ring's next slot, if published. The slot is looked at first: when it is
    /// published, so is every lane message sent before it.
    fn next_src(&self) -> Next {
        let ring = self.inp.seq(self.rd).load(Ordering::Acquire) == self.rd + 1;
        if self.inp.cell_seq(self.lane_rd).load(Ordering::Acquire) == cell_seq_of(self.lane_rd) {
            // SAFETY: the cell is published (acquire above) and ours until consumed.
            let pos = unsafe {
                std::ptr::read_volatile(self.inp.cell(self.lane_rd).add(LANE_POS_OFF) as *const u16)
            };
            if pos == self.rd as u16 {
                return Next::Lane;
            }
        }
        if ring {
            Next::Ring
        } else {
            Next::Nothing
        }
    }

    /// The length and tag of the published lane message at `lane_rd`.
    fn lane_head(&self) -> (usize, Tag) {
        let cell = self.inp.cell(self.lane_rd);
        let mut t = Tag::default();
        // SAFETY: the cell is published (see `next_src`) and ours until consumed; the fields
        // lie inside it.
        let len = unsafe {
            std::ptr::copy_nonoverlapping(cell.add(LANE_TAG_OFF), t.0.as_mut_ptr(), TAG_LEN);
            std::ptr::read_volatile(cell.add(LANE_LEN_OFF) as *const u16)
        };
        (len as usize, t)
    }

    /// Copies (or reduces with `reduce`) the published `len`-byte lane message at `lane_rd`
    /// into `dst` and frees its cells.
    ///
    /// # Safety
    /// `dst` must hold `len` bytes, `len` at most [`LANE_MAX`].
    // Inlined into the receives, as `lane_put` is into the sends.
    #[inline(always)]
    unsafe fn lane_take(
        &mut self,
        dst: *mut u8,
        len: usize,
        reduce: Option<ReduceFn>,
        behind: bool,
    ) {
        // SAFETY: the runs lie in the published message's cells; `dst` holds `len` bytes.
        // The header cell's run (at most `LANE_FIRST` bytes) needs no `memcpy` call.
        self.inp.lane_runs(self.lane_rd, len, |at, off, m| unsafe {
            match reduce {
                None => copy_short(at, dst.add(off), m),
                Some(r) => r.apply(dst.add(off), at, m),
            }
        });
        let was = self.lane_rd;
        self.lane_rd += lane_cells(len);
        // The sender reads it only when the lane looks full, and never waits for it: a message
        // that finds no room goes by the ring.
        if was / LANE_PUBLISH_EVERY != self.lane_rd / LANE_PUBLISH_EVERY {
            self.inp
                .lane_consumed()
                .store(self.lane_rd, Ordering::Release);
        }
        if behind {
            self.lane_prefetch_next();
        }
    }

    /// Starts loading the further cells of the next lane message when it is published already:
    /// its header's line is then read while this call returns and the next one starts, and
    /// the lines its length names follow without waiting for the next receive. Only for a
    /// receiver that found this message waiting (it runs behind its sender): one that is not
    /// would take the next header's line from the sender before the sender has written it.
    #[inline(always)]
    fn lane_prefetch_next(&self) {
        let next = self.lane_rd;
        if self.inp.cell_seq(next).load(Ordering::Relaxed) != cell_seq_of(next) {
            return;
        }
        // SAFETY: the field lies inside the cell; a value read while the sender rewrites the
        // cell only misdirects prefetches, which never fault.
        let len =
            unsafe { std::ptr::read_volatile(self.inp.cell(next).add(LANE_LEN_OFF) as *const u16) };
        for c in 1..lane_cells((len as usize).min(LANE_MAX)) {
            prefetch_read(self.inp.cell(next + c));
        }
    }

    /// Takes this rank's part in a run-time probe of the round trip (see
    /// `ring_stores::Prober`) and applies the choice of stores a finished one makes: both ranks
    /// see the same measurement, so both ends of the link agree again.
    fn probe_stores(&mut self) {
        let rtt = if let Some(p) = self.prober.as_mut().filter(|p| p.pending()) {
            let chan = self.out;
            let (word, result) = chan.round_trip_words();
            p.poll(word, result).flatten()
        } else if let Some(r) = &mut self.responder {
            let chan = self.inp;
            let (word, result) = chan.round_trip_words();
            r.poll(word, result)
        } else {
            None
        };
        if let Some(rtt) = rtt {
            let stream = ring_stores::streams_after(self.stream_stores, rtt, self.placement_seen);
            if !self.placement_seen && ring_stores::placement_seen(rtt) {
                self.placement_seen = true;
                if let Some(p) = &mut self.prober {
                    p.placement_seen();
                }
            }
            if stream != self.stream_stores {
                log::debug!(
                    "rank {}: cache-line round trip to peer rank {} now {} ns: staged messages \
                     switch to {} stores",
                    self.me,
                    self.peer,
                    rtt.as_nanos(),
                    if stream { "streaming" } else { "plain" }
                );
            }
            self.stream_stores = stream;
        }
    }

    fn progress_tx(&mut self) -> bool {
        if self.tx.is_empty() {
            // Nothing to publish or retire: leave the receiver's `consumed` line alone.
            return false;
        }
        let mut any = false;
        let mut published = false;
        for i in 0..self.tx.len() {
            if self.tx[i].published {
                continue;
            }
            if self.tx[i].off == 0 {
                let op = &self.tx[i];
                {
                    let (ptr, len, tag) = (op.ptr as *const u8, op.len, op.tag);
                    // SAFETY: the source holds `len` bytes (post_send's contract).
                    if unsafe { self.lane_put(ptr, len, &tag, Flow::Exchange) } {
                        let op = &mut self.tx[i];
                        op.off = len;
                        op.published = true;
                        published = true;
                        continue;
                    }
                }
                let op = &self.tx[i];
                let (ptr, len, op_bytes, staged) = (op.ptr, op.len, op.op_bytes, op.staged);
                let (stored, helps) = (op.stored, op.reduce.is_some());
                let min = self.copy_min(ptr, len, stored);
                self.tx[i].cma = self.single_copy_for(len, op_bytes, stored, staged, min)
                    || (staged && self.maps_instead(ptr, len, op_bytes, min, helps))
                    || (!staged && self.maps_exchange(ptr, len, min));
            }
            loop {
                if self.wr - self.consumed_seen >= NSLOTS as u64 {
                    self.consumed_seen = self.out.consumed().load(Ordering::Acquire);
                    if self.wr - self.consumed_seen >= NSLOTS as u64 {
                        // Ask for a ring, then look again: the receiver stores `consumed`
                        // before reading the flag, so one of the two sees the other.
                        self.out.want_space().store(1, Ordering::SeqCst);
                        self.consumed_seen = self.out.consumed().load(Ordering::SeqCst);
                        if self.wr - self.consumed_seen >= NSLOTS as u64 {
                            break;
                        }
                    }
                }
                let op = &mut self.tx[i];
                let slot = self.out.slot(self.wr);
                let n = if op.cma {
                    0
                } else if op.staged {
                    // At least STAGED_PIECES chunks, so the receiver reduces one while the
                    // sender fills the next: a message of one slot left them taking turns.
                    let piece = (op.len / STAGED_PIECES)
                        .next_multiple_of(64)
                        .max(STAGED_PIECE_MIN);
                    (op.len - op.off).min(self.out.slot_bytes).min(piece)
                } else {
                    (op.len - op.off).min(self.out.slot_bytes)
                };
                let mut flags = if op.off == 0 { FLAG_FIRST } else { 0 };
                let mut desc = None;
                if op.cma {
                    flags |= FLAG_CMA;
                    desc = self.local_mem.find(op.ptr, op.len);
                    if desc.is_some() {
                        flags |= FLAG_MAPPED;
                    }
                } else if n <= INLINE_MAX {
                    flags |= FLAG_INLINE;
                }
                let data_off = if flags & FLAG_INLINE != 0 {
                    INLINE_OFF
                } else {
                    SLOT_HDR
                };
                // SAFETY: the slot is ours until we publish it (wr - consumed < NSLOTS); the
                // source is valid per post_send.
                unsafe {
                    let (src, dst) = ((op.ptr as *const u8).add(op.off), slot.add(data_off));
                    if op.off == 0 && !op.cma && op.len >= STAGED_STREAM_MIN {
                        start_probe(&mut self.prober, &self.own, &self.out);
                    }
                    if self.stream_stores && !op.cma && op.len >= STAGED_STREAM_MIN {
                        // Fenced before the release store below publishes the slot.
                        stream_unfenced(src, dst, n);
                        fence();
                    } else if n > 0 {
                        std::ptr::copy_nonoverlapping(src, dst, n);
                    }
                    if let Some(d) = desc {
                        // The data area is unused by a single-copy slot (n == 0).
                        d.write(slot.add(DESC_OFF));
                    }
                    write_hdr(
                        slot,
                        SlotHdr {
                            len: n as u32,
                            flags,
                            total: op.len as u64,
                            addr: op.ptr as u64,
                        },
                        &op.tag,
                    );
                }
                self.out.seq(self.wr).store(self.wr + 1, Ordering::Release);
                op.last_slot = self.wr;
                self.wr += 1;
                op.off = if op.cma { op.len } else { op.off + n };
                published = true;
                if op.off == op.len {
                    op.published = true;
                    break;
                }
            }
            if !self.tx[i].published {
                // Later sends must not overtake this one in the ring.
                break;
            }
        }
        if published {
            self.chime();
            any = true;
        }
        // Only a single-copy send waits for its slot to be consumed: otherwise the receiver's
        // counter line is left alone (it is read when the ring looks full).
        let consumed = if self.tx.iter().any(|op| op.cma && op.published) {
            let c = self.out.consumed().load(Ordering::Acquire);
            self.consumed_seen = c;
            c
        } else {
            self.consumed_seen
        };
        let before = self.tx.len();
        self.tx
            .retain(|op| !(op.published && (!op.cma || consumed > op.last_slot)));
        any | (self.tx.len() != before)
    }

    fn progress_rx(&mut self, shared: &mut Shared) -> Result<bool> {
        let mut any = false;
        while let Some(op) = self.rx.front() {
            if op.order.is_some_and(|k| !shared.my_turn(k)) {
                break;
            }
            match self.next_src() {
                Next::Nothing => break,
                Next::Ring => {}
                Next::Lane => {
                    let (len, tag) = self.lane_head();
                    if op.started || len > LANE_MAX {
                        return Err(Error::new(
                            ErrorKind::Internal,
                            format!(
                                "peer rank {} sent a {len}-byte small message {}",
                                self.peer,
                                if op.started {
                                    "inside another message"
                                } else {
                                    "larger than its lane holds"
                                }
                            ),
                        ));
                    }
                    Tag::check(&tag, &op.tag, self.peer, self.me)?;
                    if len != op.len {
                        return Err(Error::new(
                            ErrorKind::Para,
                            format!(
                                "message size mismatch: peer rank {} sent {len} bytes, rank {} \
                                 expected {}",
                                self.peer, self.me, op.len
                            ),
                        ));
                    }
                    let (ptr, reduce, ordered) = (op.ptr as *mut u8, op.reduce, op.order.is_some());
                    // SAFETY: the receive buffer holds `len` bytes (post_recv's contract).
                    unsafe { self.lane_take(ptr, len, reduce, false) };
                    if ordered {
                        shared.turn_done();
                    }
                    self.rx.pop_front();
                    any = true;
                    continue;
                }
            }
            let Some(op) = self.rx.front_mut() else {
                break;
            };
            let slot = self.inp.slot(self.rd);
            // SAFETY: the slot was published (acquire above) and stays ours until we advance
            // `consumed`.
            let h = unsafe { read_hdr(slot) };
            if !op.started {
                if h.flags & FLAG_FIRST != 0 {
                    // SAFETY: a first slot carries a tag; the slot is ours (see above).
                    let tag = unsafe { read_tag(slot, &h) };
                    Tag::check(&tag, &op.tag, self.peer, self.me)?;
                }
                if h.flags & FLAG_FIRST == 0 || h.total != op.len as u64 {
                    return Err(Error::new(
                        ErrorKind::Para,
                        format!(
                            "message size mismatch: peer rank {} sent {} bytes, rank {} \
                             expected {}",
                            self.peer,
                            if h.flags & FLAG_FIRST == 0 {
                                "a continuation of".to_string()
                            } else {
                                h.total.to_string()
                            },
                            self.me,
                            op.len
                        ),
                    ));
                }
                op.started = true;
                // A rank that only receives such messages (a Reduce's root) probes too: the
                // choice is its peer's.
                if h.flags & FLAG_CMA == 0 && op.len >= STAGED_STREAM_MIN {
                    start_probe(&mut self.prober, &self.own, &self.out);
                }
            }
            if h.flags & FLAG_CMA != 0 {
                let step = (op.len - op.got).min(CMA_STEP);
                let mapped = if h.flags & FLAG_MAPPED != 0 {
                    // SAFETY: a mapped slot's data area holds the descriptor; the slot is ours.
                    let d = unsafe { ShareDesc::read(slot.add(DESC_OFF)) };
                    map_peer(&mut self.peer_mem, &d, op.len, false, self.me, self.peer)?
                } else {
                    None
                };
                let (peer, pid) = (self.peer, self.pid);
                let peer_map = &self.peer_map;
                let read = |remote: usize, local: *mut u8, n: usize| -> Result<()> {
                    if let Some(src) = mapped {
                        // SAFETY: `remote` lies in the message (h.addr + an offset below its
                        // length) and `src` maps all of it; local is valid per post_recv.
                        unsafe {
                            std::ptr::copy_nonoverlapping(
                                src.add(remote - h.addr as usize),
                                local,
                                n,
                            )
                        };
                        return Ok(());
                    }
                    // SAFETY: local is valid per post_recv (or the stage buffer).
                    unsafe { cma::read_from(pid, remote, local, n) }.map_err(|e| {
                        // A peer that aborted (and perhaps exited) says why.
                        if peer_map.failed() {
                            return peer_failure(peer_map, peer, pid);
                        }
                        Error::new(
                            ErrorKind::Remote,
                            format!("single-copy read from peer rank {peer} (pid {pid}): {e}"),
                        )
                    })
                };
                // Only one-way messages are shared: in an exchange both sides copy already,
                // and sharing measured 1.3-1.6x slower (two-process AllGather, 64 KiB-4 MiB).
                // A mapped message is shared only when the sender can map this rank's buffer
                // too: its kernel writes would be the slowest chunks of a memcpy.
                let own = if op.shared || op.got != 0 || mapped.is_none() {
                    None
                } else {
                    self.local_mem.find(op.ptr, op.len)
                };
                // A reduction is shared only in place: the sender reduces into a mapping of the
                // destination, reading the left operand through one too (`NONE`: the
                // destination itself).
                let left = match (op.reduce, own) {
                    (Some(r), Some(_)) if r.left == 0 => Some(ShareDesc::NONE),
                    (Some(r), Some(_)) => self
                        .local_mem
                        .find(op.ptr.wrapping_add_signed(r.left), op.len),
                    _ => None,
                };
                let crowded = self.own.backoff.crowded();
                let share = op.shared
                    || (op.got == 0
                        && self.share_copies
                        && self.tx.is_empty()
                        && match op.reduce {
                            None => {
                                (mapped.is_none() || own.is_some())
                                    && op.len >= shared_copy_min(crowded)
                            }
                            Some(_) => left.is_some() && op.len >= shared_reduce_min(crowded),
                        });
                if share {
                    let (chunk, slot_no, ctl) = (
                        share_chunk(op.len, self.share_parts),
                        self.rd + 1,
                        &self.inp,
                    );
                    if !op.shared {
                        if h.flags & FLAG_MAPPED != 0 {
                            // SAFETY: the slot is ours until consumed and its data area unused
                            // past the sender's descriptor; stored before the share word.
                            unsafe {
                                own.unwrap_or(ShareDesc::NONE)
                                    .write(slot.add(RECV_DESC_OFF))
                            };
                        }
                        let word = match (op.reduce, left) {
                            (Some(r), Some(l)) => {
                                // SAFETY: as above.
                                unsafe { l.write(slot.add(LEFT_DESC_OFF)) };
                                share_reduce_word(&r)
                            }
                            _ => 0,
                        };
                        // SAFETY: as above; the word is 8-byte aligned in the slot.
                        unsafe { slot.add(SHARE_REDUCE_OFF).cast::<u64>().write(word) };
                        ctl.share_dst().store(op.ptr as u64, Ordering::Relaxed);
                        ctl.share_done().store(0, Ordering::Relaxed);
                        ctl.share()
                            .store(slot_no << SHARE_CHUNK_BITS, Ordering::Release);
                        op.shared = true;
                        // The sender may be asleep until this slot is consumed.
                        chime(&self.peer_map, self.chime, self.light_chime);
                    }
                    if let Some(k) = claim_chunk(ctl.share(), slot_no, op.len.div_ceil(chunk)) {
                        let (off, n) = (k * chunk, chunk.min(op.len - k * chunk));
                        op.own_claimed += n;
                        // SAFETY: off + n <= len, inside the receive buffer.
                        let to = unsafe { (op.ptr as *mut u8).add(off) };
                        match (op.reduce, mapped) {
                            // SAFETY: the mapping holds the whole message; `to + n` lies in
                            // the receive buffer (and its left operand in its own).
                            (Some(r), Some(src)) => unsafe { r.apply(to, src.add(off), n) },
                            _ => read(h.addr as usize + off, to, n)?,
                        }
                        op.own_done += n;
                        ctl.share_done().fetch_add(n as u64, Ordering::AcqRel);
                        // Yield to the other links; the loop comes back at once.
                        return Ok(true);
                    }
                    if ctl.share_done().load(Ordering::Acquire) < op.len as u64 {
                        // The sender still writes its last chunks and rings when it is done.
                        break;
                    }
                    op.got = op.len;
                }
                let remote = h.addr as usize + op.got;
                // SAFETY: got + step <= len, inside the receive buffer.
                let dst = unsafe { (op.ptr as *mut u8).add(op.got) };
                match op.reduce {
                    _ if share => {}
                    None => read(remote, dst, step)?,
                    Some(r) if mapped.is_some() => {
                        if let Some(src) = mapped {
                            // SAFETY: the mapping holds the whole message; dst + step lies in
                            // the receive buffer.
                            unsafe { r.apply(dst, src.add(op.got), step) }
                        }
                    }
                    Some(r) => {
                        let stage = &mut shared.stage;
                        if stage.len() < REDUCE_CHUNK {
                            stage.resize(REDUCE_CHUNK, 0);
                        }
                        let mut done = 0;
                        while done < step {
                            let c = (step - done).min(REDUCE_CHUNK);
                            read(remote + done, stage.as_mut_ptr(), c)?;
                            // SAFETY: dst + done .. + c lies in the receive buffer.
                            unsafe { r.apply(dst.add(done), stage.as_ptr(), c) };
                            done += c;
                        }
                    }
                }
                if !share {
                    op.got += step;
                }
                if op.got < op.len {
                    // Yield to the other links; the loop comes back at once.
                    return Ok(true);
                }
                // A sender that gave up may have handed its buffer back to its caller: only
                // data read before it raised its flag counts.
                if self.peer_map.failed() {
                    return Err(self.peer_failure());
                }
            } else {
                let n = h.len as usize;
                let cap = if h.flags & FLAG_INLINE != 0 {
                    INLINE_MAX
                } else {
                    self.inp.slot_bytes
                };
                if n > op.len - op.got || n > cap {
                    return Err(Error::new(
                        ErrorKind::Internal,
                        format!(
                            "peer rank {} sent a {n}-byte chunk past the end of a {}-byte message",
                            self.peer, op.len
                        ),
                    ));
                }
                if n > 0 {
                    let data_off = if h.flags & FLAG_INLINE != 0 {
                        INLINE_OFF
                    } else {
                        SLOT_HDR
                    };
                    // SAFETY: slot data holds n bytes; destination valid per post_recv.
                    unsafe {
                        let src = slot.add(data_off) as *const u8;
                        let dst = (op.ptr as *mut u8).add(op.got);
                        match op.reduce {
                            None => std::ptr::copy_nonoverlapping(src, dst, n),
                            Some(r) => r.apply(dst, src, n),
                        }
                    }
                }
                op.got += n;
            }
            let done = op.got == op.len;
            if done {
                if op.order.is_some() {
                    shared.turn_done();
                }
                self.rx.pop_front();
            }
            self.consume(h.flags);
            any = true;
        }
        Ok(any)
    }

    /// The tag of the peer's next message when it has arrived and no receive is posted for it.
    fn peek_tag(&self) -> Option<Tag> {
        if !self.rx.is_empty() {
            return None;
        }
        match self.next_src() {
            Next::Nothing => return None,
            Next::Lane => return Some(self.lane_head().1),
            Next::Ring => {}
        }
        let slot = self.inp.slot(self.rd);
        // SAFETY: the slot is published (acquire above) and nobody consumes it meanwhile: this
        // link is the only reader of its channel.
        let h = unsafe { read_hdr(slot) };
        // SAFETY: as above; a first slot carries a tag.
        (h.flags & FLAG_FIRST != 0).then(|| unsafe { read_tag(slot, &h) })
    }

    /// Frees the slot just read (header flags `flags`) and wakes the sender when it waits for
    /// that: always for a single-copy slot (its buffer is in use until then), and when it asked
    /// for space; otherwise nobody needs the wake-up.
    fn consume(&mut self, flags: u32) {
        self.inp.consumed().store(self.rd + 1, Ordering::SeqCst);
        self.rd += 1;
        let want = self.inp.want_space();
        if flags & FLAG_CMA != 0
            || (want.load(Ordering::SeqCst) != 0 && want.swap(0, Ordering::SeqCst) != 0)
        {
            self.chime();
        }
    }

    /// Writes one chunk of a single-copy message this rank sent into the receiver's buffer when
    /// the receiver shares that copy (see [`SHARED_COPY_MIN`]): the send waits for the read to
    /// end anyway. The receiver counts the chunk once it is written and frees the slot (which
    /// completes the send) only when every chunk is.
    fn help_peer(&mut self) -> Result<bool> {
        let mut cma = self
            .tx
            .iter()
            .filter(|op| op.cma && op.published)
            .peekable();
        if cma.peek().is_none() {
            return Ok(false);
        }
        let slot_no = self.out.share().load(Ordering::Acquire) >> SHARE_CHUNK_BITS;
        let Some(op) = cma.find(|op| op.last_slot + 1 == slot_no) else {
            return Ok(false);
        };
        let chunk = share_chunk(op.len, self.share_parts);
        let (len, ptr, reduce, tx_slot) = (op.len, op.ptr, op.reduce, op.last_slot);
        let slot = self.out.slot(tx_slot);
        // SAFETY: the slot is this rank's, published and not consumed; the receiver stored the
        // word (and a mapped slot's descriptors) before the share word read above (acquire).
        let (word, flags) = unsafe {
            (
                slot.add(SHARE_REDUCE_OFF).cast::<u64>().read(),
                read_hdr(slot).flags,
            )
        };
        let fold = if word == 0 {
            None
        } else {
            // Reduced in place: only with the receiver's reduction, and with both of its
            // operands mapped here; otherwise the receiver reduces every chunk itself.
            let Some(f) = reduce.filter(|f| share_reduce_word(f) == word) else {
                return Ok(false);
            };
            if flags & FLAG_MAPPED == 0 {
                return Ok(false);
            }
            // SAFETY: as above; the descriptors lie inside the slot's data area.
            let (d, l) = unsafe {
                (
                    ShareDesc::read(slot.add(RECV_DESC_OFF)),
                    ShareDesc::read(slot.add(LEFT_DESC_OFF)),
                )
            };
            if d.fd < 0 {
                return Ok(false);
            }
            let (me, peer) = (self.me, self.peer);
            let Some(to) = map_peer(&mut self.peer_mem, &d, len, true, me, peer)? else {
                return Ok(false);
            };
            let left = if l.fd < 0 {
                to
            } else {
                let Some(a) = map_peer(&mut self.peer_mem, &l, len, false, me, peer)? else {
                    return Ok(false);
                };
                // Mapping the left operand may have unmapped the destination's file.
                if !self.peer_mem.holds(&d, true) {
                    return Ok(false);
                }
                a
            };
            Some((f, to, left))
        };
        let Some(k) = claim_chunk(self.out.share(), slot_no, len.div_ceil(chunk)) else {
            return Ok(false);
        };
        // Stored before the claimed word was (release/acquire), for this message.
        let dst = self.out.share_dst().load(Ordering::Relaxed) as usize;
        let (off, n) = (k * chunk, chunk.min(len - k * chunk));
        if let Some((f, to, left)) = fold {
            // SAFETY: off + n <= len, inside the send buffer and both mappings, which the
            // receiver keeps until every claimed chunk is counted; n is whole elements (chunks
            // are whole pages, the message whole elements).
            unsafe {
                (f.kernel)(
                    f.dtype,
                    f.op,
                    to.add(off),
                    left.add(off),
                    (ptr as *const u8).add(off),
                    n / f.elem_size,
                )
            };
            self.chunk_written(len, n);
            return Ok(true);
        }
        // SAFETY: as above.
        let mapped = if flags & FLAG_MAPPED != 0 {
            // SAFETY: as above; the descriptor lies inside the slot's data area.
            let d = unsafe { ShareDesc::read(slot.add(RECV_DESC_OFF)) };
            if d.fd < 0 {
                None
            } else {
                map_peer(&mut self.peer_mem, &d, len, true, self.me, self.peer)?
            }
        } else {
            None
        };
        if let Some(to) = mapped {
            // SAFETY: off + n <= len, inside the send buffer and the mapped receive buffer,
            // which the receiver keeps until every claimed chunk is counted.
            unsafe { std::ptr::copy_nonoverlapping((ptr as *const u8).add(off), to.add(off), n) };
            Ok(())
        } else {
            // SAFETY: off + n <= len, inside the send buffer (valid per post_send); the
            // receiver named its receive buffer of `len` bytes at `dst` and keeps it until
            // every claimed chunk is counted (`retract_share` on its abort), and the kernel
            // checks the range.
            unsafe { cma::write_to(self.pid, (ptr as *const u8).add(off), dst + off, n) }
        }
        .map_err(|e| {
            Error::new(
                ErrorKind::Remote,
                format!(
                    "single-copy write to peer rank {} (pid {}): {e}",
                    self.peer, self.pid
                ),
            )
        })?;
        self.chunk_written(len, n);
        Ok(true)
    }

    /// Counts `n` bytes of a shared copy of a `len`-byte message as written, waking the
    /// receiver when that completes it.
    fn chunk_written(&mut self, len: usize, n: usize) {
        let len = len as u64;
        if self.out.share_done().fetch_add(n as u64, Ordering::AcqRel) + n as u64 == len {
            self.chime();
        }
    }

    /// Ends the shared copy of the receive in progress before an abort hands its buffer back:
    /// no chunk can be claimed any more, and the chunks the sender claimed are waited for while
    /// it lives, for at most a second; when they do not end, this link shares no more copies.
    fn retract_share(&mut self) {
        let Some(op) = self.rx.front().filter(|op| op.shared) else {
            return;
        };
        let w = self.inp.share().swap(0, Ordering::AcqRel);
        let chunk = share_chunk(op.len, self.share_parts);
        let claimed = ((w & ((1 << SHARE_CHUNK_BITS) - 1)) as usize).min(op.len.div_ceil(chunk));
        let theirs = (claimed * chunk).min(op.len) - op.own_claimed;
        let own_done = op.own_done;
        let deadline = Instant::now() + Duration::from_secs(1);
        while (self.inp.share_done().load(Ordering::Acquire) as usize).saturating_sub(own_done)
            < theirs
        {
            // Giving up leaves one race: a sender that claimed a chunk and then did not run
            // for the whole second (stopped, or descheduled between its claim and the end of
            // its `process_vm_writev`) still writes that chunk after the abort handed the
            // buffer back with an error: at most one chunk (a sender claims one at a time,
            // <= SHARE_CHUNK_MAX) of this message's own bytes, at their place in the receive buffer.
            // Nothing is wrong for a caller that treats the failed receive's buffer as
            // undefined; one that reuses that memory within the sender's stall may see those
            // bytes overwrite it. A longer wait would only narrow this (a stopped sender may
            // never run again), so the wait is bounded and this link shares no copy any more.
            if Instant::now() > deadline || self.check_alive().is_err() {
                log::warn!(
                    "rank {}: peer rank {} did not finish its part of a shared single-copy \
                     receive before the abort; no more shared copies with it",
                    self.me,
                    self.peer
                );
                self.share_copies = false;
                return;
            }
            std::thread::yield_now();
        }
    }

    /// Where the peer's next message is ([`ShmLink::next_src`]), looking for a while when
    /// `spin`.
    fn next_published(&self, spin: bool) -> Next {
        let next = self.next_src();
        if next != Next::Nothing || !spin {
            return next;
        }
        for _ in 0..RECV_SPINS {
            std::hint::spin_loop();
            let next = self.next_src();
            if next != Next::Nothing {
                return next;
            }
        }
        Next::Nothing
    }

    /// Fails when the peer has aborted (raised its failure flag): one shared-memory load.
    pub fn check_aborted(&self) -> Result<()> {
        if self.peer_map.failed() {
            return Err(self.peer_failure());
        }
        Ok(())
    }

    /// The error for a peer that raised its failure flag, with the reason it recorded.
    fn peer_failure(&self) -> Error {
        peer_failure(&self.peer_map, self.peer, self.pid)
    }
}

/// The mapping of the `len` bytes that a peer's descriptor `d` names (`write`: to store into
/// them), or `None` when the file cannot be mapped (the kernel copies instead; said once per
/// peer). A descriptor that names another file or a range outside it is the peer's error.
fn map_peer(
    mem: &mut PeerMem,
    d: &ShareDesc,
    len: usize,
    write: bool,
    me: u32,
    peer: u32,
) -> Result<Option<*mut u8>> {
    match mem.resolve(d, len, write) {
        Ok(p) => Ok(Some(p)),
        Err(Refusal::Unusable(why)) => {
            if mem.first_refusal() {
                log::info!(
                    "rank {me}: cannot map a buffer of peer rank {peer} ({why}); its single-copy \
                     messages use process_vm_{}",
                    if write { "writev" } else { "readv" }
                );
            }
            Ok(None)
        }
        Err(Refusal::Bad(why)) => Err(Error::new(
            ErrorKind::Internal,
            format!("peer rank {peer} named a buffer of its memory that is not there: {why}"),
        )),
    }
}

/// The error for rank `peer` (process `pid`, segment `m`) that raised its failure flag, with
/// the reason it recorded.
fn peer_failure(m: &Mapping, peer: u32, pid: i32) -> Error {
    {
        let code = m.u32_at(OFF_REASON).load(Ordering::Relaxed);
        let len = (m.u32_at(OFF_REASON + 4).load(Ordering::Relaxed) as usize).min(REASON_MAX);
        let mut text = vec![0u8; len];
        // SAFETY: the reason area lies inside the peer's header mapping; the peer wrote it
        // before raising the flag this rank saw (SeqCst).
        unsafe { std::ptr::copy_nonoverlapping(m.ptr.add(OFF_REASON + 8), text.as_mut_ptr(), len) };
        let text = String::from_utf8_lossy(&text);
        let why = Error::new(
            if code == ErrorKind::Para.code() {
                ErrorKind::Para
            } else {
                ErrorKind::Remote
            },
            if text.is_empty() {
                "no reason recorded".to_string()
            } else {
                text.into_owned()
            },
        );
        super::propagated(why, &format!("peer rank {peer} (pid {pid})"))
    }
}

impl ShmLink {
    /// Fails when the peer has aborted or its process is gone (its liveness connection closed).
    pub fn check_alive(&self) -> Result<()> {
        self.check_aborted()?;
        let mut p = libc::pollfd {
            fd: self.stream.as_raw_fd(),
            events: libc::POLLIN | libc::POLLRDHUP,
            revents: 0,
        };
        // SAFETY: one valid pollfd, no wait.
        let r = unsafe { libc::poll(&mut p, 1, 0) };
        if r > 0 && p.revents != 0 {
            return Err(Error::new(
                ErrorKind::Remote,
                format!(
                    "peer rank {} (pid {}) is gone: its connection closed while this rank \
                     waited for it",
                    self.peer, self.pid
                ),
            ));
        }
        Ok(())
    }
}

impl Medium for Segment {
    /// Raised before any link is released, so a peer that finishes a single-copy read of this
    /// rank's buffer afterwards sees it and discards what it read.
    fn fail(&self, why: &Error) {
        self.mark_failed(why);
    }

    fn set_cpu(&self, cpu: u32) {
        Segment::set_cpu(self, cpu);
    }

    fn bell_seq(&self) -> Option<u32> {
        Some(Segment::bell_seq(self))
    }

    fn wait(&self, seen: u32, max: Duration, also: &mut dyn Wait) -> bool {
        Segment::wait(self, seen, max, also)
    }

    fn publish_stuck(&self, _me: u32, tag: &Tag) {
        let ver = self.map.u64_at(OFF_STUCK);
        let v = ver.load(Ordering::Relaxed);
        ver.store(v + 1, Ordering::Relaxed);
        std::sync::atomic::fence(Ordering::Release);
        for (i, w) in tag.0.chunks_exact(8).enumerate() {
            let w = u64::from_le_bytes(w.try_into().expect("8 bytes"));
            self.map
                .u64_at(OFF_STUCK + 8 + 8 * i)
                .store(w, Ordering::Relaxed);
        }
        ver.store(v + 2, Ordering::Release);
    }
}

/// What the owner of segment `m` last published itself stuck in (see
/// `Medium::publish_stuck`): a consistent copy, or `None` when there is none or it is being
/// rewritten.
fn read_stuck(m: &Mapping) -> Option<Tag> {
    let ver = m.u64_at(OFF_STUCK);
    let v = ver.load(Ordering::Acquire);
    if v == 0 || v % 2 == 1 {
        return None;
    }
    let mut t = Tag::default();
    for (i, w) in t.0.chunks_exact_mut(8).enumerate() {
        w.copy_from_slice(
            &m.u64_at(OFF_STUCK + 8 + 8 * i)
                .load(Ordering::Relaxed)
                .to_le_bytes(),
        );
    }
    std::sync::atomic::fence(Ordering::Acquire);
    (ver.load(Ordering::Relaxed) == v).then_some(t)
}

impl Link for ShmLink {
    fn info(&self) -> LinkInfo {
        LinkInfo {
            name: "shm",
            reach: Reach::Host,
            single_copy: self.single_copy,
        }
    }

    fn medium(&self) -> Option<Arc<dyn Medium>> {
        Some(self.own.clone())
    }

    unsafe fn post_send(&mut self, ptr: *const u8, len: usize, tag: Tag) -> Result<()> {
        // SAFETY: forwarded under the same contract.
        unsafe { self.post_send_hinted(ptr, len, tag, SendHint::default()) }
    }

    /// The hint's operation size decides, with the message's, whether it goes single-copy
    /// (`single_copy_for`).
    unsafe fn post_send_hinted(
        &mut self,
        ptr: *const u8,
        len: usize,
        tag: Tag,
        hint: SendHint,
    ) -> Result<()> {
        self.tx.push_back(TxOp {
            ptr: ptr as usize,
            len,
            tag,
            op_bytes: hint.op_bytes,
            stored: hint.stored,
            // On a crowded host the ranks that would overlap their copies share cores: the
            // receiver's single copy moves fewer bytes (see `STAGED_REDUCE_MAX_RANKS`).
            staged: hint.staged && !self.own.backoff.crowded(),
            reduce: hint.reduce,
            off: 0,
            // Decided at the first slot (`single_copy_for`).
            cma: false,
            published: false,
            last_slot: 0,
        });
        Ok(())
    }

    /// Reducing receives take turns across the endpoint's links (see [`Shared`]).
    unsafe fn post_recv(
        &mut self,
        ptr: *mut u8,
        len: usize,
        reduce: Option<ReduceFn>,
        tag: Tag,
        shared: &mut Shared,
    ) -> Result<()> {
        self.rx.push_back(RxOp {
            ptr: ptr as usize,
            len,
            tag,
            got: 0,
            reduce,
            order: reduce.map(|_| shared.reduce_turn()),
            started: false,
            shared: false,
            own_claimed: 0,
            own_done: 0,
        });
        Ok(())
    }

    /// Takes an inline or one-slot message straight from the ring: the tag and size are
    /// compared with what is expected, the data copied out and the slot freed, with no queue
    /// entry, progress pass or wait. Spins briefly for a message of at most [`LANE_MAX`] bytes
    /// that has not arrived, only where the waiting policy would spin too (not on a crowded
    /// host, not while the peer was last seen on this CPU).
    unsafe fn recv_now(&mut self, ptr: *mut u8, len: usize, tag: &Tag) -> bool {
        if !self.rx.is_empty() || !self.tx.is_empty() || len > self.inp.slot_bytes {
            return false;
        }
        // Senders write a message's header line (slot or lane cell) last, with its sequence
        // word, so polling it does not take the line away between their writes.
        // One that has arrived already is taken all the same.
        // The CPU is read only when the message has not arrived: a receive that finds it needs
        // no spin, and the rank that does spin publishes where it runs (see below).
        let mut next = self.next_src();
        let behind = next != Next::Nothing;
        if next == Next::Nothing && len <= LANE_MAX && !self.own.backoff.crowded() && {
            // SAFETY: no arguments; glibc reads it from the thread's rseq area.
            let cpu = unsafe { libc::sched_getcpu() };
            let cpu = if cpu < 0 { NO_CPU } else { cpu as u32 };
            // Published here too: a rank whose messages keep arriving in time never waits in
            // the backoff, which otherwise keeps the record its peers' spins depend on.
            self.own.set_cpu(cpu);
            cpu == NO_CPU || self.peer_cpu() != cpu
        } {
            next = self.next_published(true);
        }
        match next {
            Next::Nothing => return false,
            Next::Lane => {
                let (n, t) = self.lane_head();
                if n != len || len > LANE_MAX || t != *tag {
                    return false;
                }
                // SAFETY: `ptr` holds `len` bytes (the caller's contract), at most LANE_MAX.
                unsafe { self.lane_take(ptr, len, None, behind) };
                return true;
            }
            Next::Ring => {}
        }
        let slot = self.inp.slot(self.rd);
        // SAFETY: the slot was published (acquire in `next_published`) and stays ours until
        // `consume`; only this link reads its channel.
        let h = unsafe { read_hdr(slot) };
        let whole = FLAG_FIRST | FLAG_CMA;
        let inline = h.flags & FLAG_INLINE != 0;
        if h.flags & whole != FLAG_FIRST
            || h.total != len as u64
            || h.len as usize != len
            || (inline && len > INLINE_MAX)
        {
            return false;
        }
        // SAFETY: as above; a first slot carries a tag.
        if unsafe { read_tag(slot, &h) } != *tag {
            return false;
        }
        if len > 0 {
            let off = if inline { INLINE_OFF } else { SLOT_HDR };
            // SAFETY: the slot holds `len` bytes at `off` (an inline chunk is at most
            // INLINE_MAX, a staged one at most `slot_bytes`, and `len` equals the chunk's);
            // `ptr` is valid for `len` bytes (the caller's contract).
            unsafe { std::ptr::copy_nonoverlapping(slot.add(off), ptr, len) };
        }
        self.consume(h.flags);
        true
    }

    /// Publishes a message that fits the lane or one slot straight into the link (see
    /// `ShmLink::send_direct`).
    #[inline(always)]
    unsafe fn send_now(&mut self, ptr: *const u8, len: usize, tag: &Tag) -> bool {
        // SAFETY: forwarded.
        unsafe { self.send_direct(ptr, len, tag, Flow::Exchange) }
    }

    /// [`Link::send_now`] with the lane open up to [`LANE_ONE_WAY_MAX`] bytes.
    unsafe fn send_one_way(&mut self, ptr: *const u8, len: usize, tag: &Tag) -> bool {
        // SAFETY: forwarded.
        unsafe { self.send_direct(ptr, len, tag, Flow::OneWay) }
    }

    /// Single-copy reductions read through `shared.stage`, grown once to [`REDUCE_CHUNK`].
    fn progress(&mut self, shared: &mut Shared) -> Result<bool> {
        let mut any = self.progress_tx();
        any |= self.help_peer()?;
        any |= self.progress_rx(shared)?;
        self.probe_stores();
        Ok(any)
    }

    fn idle(&self) -> bool {
        self.tx.is_empty() && self.rx.is_empty()
    }

    fn wake(&self) -> Wake {
        Wake::Medium
    }

    /// The failure flag is one load; the liveness connection costs a system call.
    fn check_peer(&self, thorough: bool) -> Result<()> {
        if thorough {
            self.check_alive()
        } else {
            self.check_aborted()
        }
    }

    fn stray_tag(&self) -> Option<Tag> {
        self.peek_tag()
    }

    fn peer_stuck(&self) -> Option<Tag> {
        read_stuck(&self.peer_map)
    }

    fn peer_cpu(&self) -> u32 {
        self.peer_map.u32_at(OFF_CPU).load(Ordering::Relaxed)
    }

    /// Drops queued work and closes the liveness connection so the peer notices at once.
    fn abort(&mut self, _why: &Error) {
        self.retract_share();
        self.tx.clear();
        self.rx.clear();
        let _ = self.stream.shutdown(std::net::Shutdown::Both);
        self.chime();
    }
}

/// What a same-host peer ended up as after the introduction.
#[derive(Debug)]
pub enum Attached {
    /// Shared memory.
    Shm(Box<ShmLink>),
    /// The introduction failed on one side: keep the connection as a TCP link.
    Tcp(TcpStream),
}

/// Settings for introducing same-host peers.
#[derive(Clone, Copy, Debug)]
pub struct ShmOptions {
    /// Staging budget for this rank's outbound rings (`HCCL_BUFFSIZE`).
    pub budget: usize,
    /// Messages from [`SINGLE_COPY_MIN`] bytes up to this size are read straight from the
    /// sender where the kernel allows it (see [`single_copy_max`]).
    pub single_copy_max: usize,
    /// Whether the host runs more ranks than it has cores.
    pub crowded: bool,
    /// Whether senders may write part of a single-copy message the receiver stores
    /// (`HCCL_SHM_SHARE`).
    pub share_copies: bool,
    /// Whether staged messages are written with streaming stores (`HCCL_SHM_STREAM`; `None`:
    /// per link by its measured round trip, re-measured while it runs, see
    /// `transport::ring_stores`).
    pub stream_stores: Option<bool>,
}

fn io_ctx(peer: u32, what: &str, e: std::io::Error) -> Error {
    Error::new(
        ErrorKind::TcpTransfer,
        format!("shared-memory introduction with peer rank {peer}: {what}: {e}"),
    )
}

fn set_deadline(s: &TcpStream, dl: Instant) -> std::io::Result<()> {
    let left = dl
        .saturating_duration_since(Instant::now())
        .max(Duration::from_millis(1));
    s.set_nonblocking(false)?;
    s.set_read_timeout(Some(left))?;
    s.set_write_timeout(Some(left))
}

struct Hello {
    pid: u32,
    fd: i32,
    seg_len: u64,
    chan_off: u64,
    slot_bytes: u64,
    probe: u64,
}

impl Hello {
    fn encode(&self) -> [u8; HELLO_LEN] {
        let mut b = [0u8; HELLO_LEN];
        b[0..8].copy_from_slice(&HELLO_MAGIC.to_le_bytes());
        b[8..12].copy_from_slice(&self.pid.to_le_bytes());
        b[12..16].copy_from_slice(&self.fd.to_le_bytes());
        b[16..24].copy_from_slice(&self.seg_len.to_le_bytes());
        b[24..32].copy_from_slice(&self.chan_off.to_le_bytes());
        b[32..40].copy_from_slice(&self.slot_bytes.to_le_bytes());
        b[40..48].copy_from_slice(&self.probe.to_le_bytes());
        b
    }

    fn decode(b: &[u8; HELLO_LEN]) -> Option<Hello> {
        let u64_at = |o: usize| u64::from_le_bytes(b[o..o + 8].try_into().expect("8 bytes"));
        let u32_at = |o: usize| u32::from_le_bytes(b[o..o + 4].try_into().expect("4 bytes"));
        if u64_at(0) != HELLO_MAGIC {
            return None;
        }
        Some(Hello {
            pid: u32_at(8),
            fd: u32_at(12) as i32,
            seg_len: u64_at(16),
            chan_off: u64_at(24),
            slot_bytes: u64_at(32),
            probe: u64_at(40),
        })
    }
}

/// Tells the owner of `peer_map` that something was published or freed for it: a plain store
/// to this rank's chime word at `off` in its header, which its doorbell value includes, then
/// the bell and a futex wake only when it sleeps (without a chime word: the bell alone). No
/// atomic read-modify-write on the way: the first one after a message store would wait for
/// that store to reach the peer's core. A peer about to sleep counts itself among the
/// sleepers, then runs the barrier across processes (or a fence), then looks at the chimes
/// again; this side stores, then reads the sleeper count after a compiler fence (`light`, when
/// both processes are registered for that barrier) or a full fence. Either this side sees the
/// sleeper or the peer sees the chime.
fn chime(peer_map: &Mapping, off: Option<usize>, light: bool) {
    let Some(off) = off else {
        peer_map.ring();
        return;
    };
    // One writer per word: the link to this peer.
    let w = peer_map.u32_at(off);
    w.store(w.load(Ordering::Relaxed).wrapping_add(1), Ordering::Release);
    if light {
        asym::light_shared();
    } else {
        std::sync::atomic::fence(Ordering::SeqCst);
    }
    if peer_map.u32_at(OFF_SLEEPERS).load(Ordering::Relaxed) != 0 {
        peer_map.ring();
    }
}

/// Where this rank's chime word lies in the peer's header: at the index of the peer's channel
/// to this rank, which the hello's channel offset gives; `None` past [`MAX_CHIMES`].
fn chime_of(h: &Hello) -> Option<usize> {
    let geo = Geometry {
        nchan: 0,
        slot_bytes: h.slot_bytes as usize,
    };
    let off = (h.chan_off as usize).checked_sub(HEADER_BYTES)?;
    let i = off / geo.chan_bytes();
    (off % geo.chan_bytes() == 0 && i < MAX_CHIMES).then_some(OFF_CHIMES + 4 * i)
}

/// Maps a peer's segment through `/proc/<pid>/fd/<fd>` and checks it is what the hello says.
fn attach(h: &Hello) -> std::io::Result<Mapping> {
    let path = format!("/proc/{}/fd/{}", h.pid, h.fd);
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&path)?;
    let len = h.seg_len as usize;
    if f.metadata()?.len() != h.seg_len || len < HEADER_BYTES {
        return Err(std::io::Error::other(format!(
            "{path} is not the announced {len}-byte segment"
        )));
    }
    let m = Mapping::map(f.as_raw_fd(), len)?;
    let chan_end =
        h.chan_off as usize + CTL_BYTES + LANE_BYTES + NSLOTS * (SLOT_HDR + h.slot_bytes as usize);
    if m.u64_at(0).load(Ordering::Acquire) != MAGIC
        || m.u64_at(8).load(Ordering::Acquire) != h.pid as u64
        || chan_end > len
        || !(h.slot_bytes as usize).is_multiple_of(64)
    {
        return Err(std::io::Error::other(format!(
            "{path} does not hold the peer's segment"
        )));
    }
    Ok(m)
}

/// Introduces rank `me` to its same-host peers over their connected streams and returns, per
/// peer, a shared-memory link or (when either side could not attach) the stream back.
/// Three phases (all hellos out, all attachments answered, all answers read) so no ordering of
/// peers can deadlock; every read is bounded by `deadline`.
pub fn introduce(
    me: u32,
    peers: Vec<(u32, TcpStream)>,
    opts: ShmOptions,
    deadline: Instant,
) -> Result<Vec<(u32, Attached)>> {
    if peers.is_empty() {
        return Ok(Vec::new());
    }
    let (seg, fd) = Segment::create(peers.len(), opts.budget, opts.crowded)?;
    let geo = seg.geo;
    let pid = std::process::id();
    for (i, (p, s)) in peers.iter().enumerate() {
        set_deadline(s, deadline).map_err(|e| io_ctx(*p, "socket set-up", e))?;
        let hello = Hello {
            pid,
            fd: fd.as_raw_fd(),
            seg_len: geo.total() as u64,
            chan_off: geo.chan_off(i) as u64,
            slot_bytes: geo.slot_bytes as u64,
            probe: seg.map.ptr as u64,
        };
        (&*s)
            .write_all(&hello.encode())
            .map_err(|e| io_ctx(*p, "sending the segment", e))?;
    }
    let mut maps: Vec<Option<(Hello, Mapping, bool)>> = Vec::with_capacity(peers.len());
    for (p, s) in &peers {
        let mut b = [0u8; HELLO_LEN];
        (&*s)
            .read_exact(&mut b)
            .map_err(|e| io_ctx(*p, "receiving the peer's segment", e))?;
        let hello = Hello::decode(&b).ok_or_else(|| {
            Error::new(
                ErrorKind::TcpTransfer,
                format!("shared-memory introduction with peer rank {p}: malformed hello"),
            )
        })?;
        let got = match attach(&hello) {
            Ok(m) => {
                let cma = opts.single_copy_max >= SINGLE_COPY_MIN
                    && cma::probe(hello.pid as i32, hello.probe as usize, MAGIC);
                Some((hello, m, cma))
            }
            Err(e) => {
                log::warn!(
                    "rank {me}: cannot map the shared segment of peer rank {p} (pid {}): {e}; \
                     using TCP to it",
                    hello.pid
                );
                None
            }
        };
        let answer = [got.is_some() as u8, got.as_ref().is_some_and(|g| g.2) as u8];
        (&*s)
            .write_all(&answer)
            .map_err(|e| io_ctx(*p, "answering", e))?;
        maps.push(got);
    }
    let mut out = Vec::with_capacity(peers.len());
    for (i, ((p, s), got)) in peers.into_iter().zip(maps).enumerate() {
        let mut answer = [0u8; 2];
        (&s).read_exact(&mut answer)
            .map_err(|e| io_ctx(p, "receiving the peer's answer", e))?;
        match got {
            Some((hello, peer_map, _)) if answer[0] == 1 => {
                s.set_nonblocking(true)
                    .map_err(|e| io_ctx(p, "socket set-up", e))?;
                let out_chan = Channel {
                    // SAFETY: offsets checked against the mappings' lengths in
                    // `attach`/`Geometry`.
                    base: unsafe { seg.map.ptr.add(geo.chan_off(i)) },
                    slot_bytes: geo.slot_bytes,
                };
                let inp = Channel {
                    // SAFETY: as above.
                    base: unsafe { peer_map.ptr.add(hello.chan_off as usize) },
                    slot_bytes: hello.slot_bytes as usize,
                };
                let chime = chime_of(&hello);
                let light_chime = asym::shared_expedited()
                    && peer_map.u32_at(OFF_FLAGS).load(Ordering::Acquire) & 1 != 0;
                out.push((
                    p,
                    Attached::Shm(Box::new(ShmLink {
                        me,
                        peer: p,
                        pid: hello.pid as i32,
                        own: seg.clone(),
                        out: out_chan,
                        peer_map,
                        inp,
                        chime,
                        light_chime,
                        single_copy: answer[1] == 1,
                        share_copies: answer[1] == 1 && opts.share_copies,
                        single_copy_max: opts.single_copy_max,
                        stream_stores: true,
                        prober: None,
                        responder: None,
                        placement_seen: false,
                        stream: s,
                        tx: VecDeque::new(),
                        rx: VecDeque::new(),
                        wr: 0,
                        consumed_seen: 0,
                        rd: 0,
                        lane_wr: 0,
                        lane_seen: 0,
                        lane_rd: 0,
                        lane_dirty: 0,
                        lane_claimed: 0,
                        lane_full_spins: crate::base::pause::rounds(
                            LANE_FULL_WAIT,
                            LANE_FULL_SPINS_MIN,
                            LANE_FULL_SPINS_MAX,
                        ),
                        share_parts: SHARE_PARTS,
                        local_mem: LocalMem::new(local_mem::find()),
                        peer_mem: PeerMem::new(hello.pid as i32),
                    })),
                ));
            }
            _ => out.push((p, Attached::Tcp(s))),
        }
    }
    // Every peer has answered, so every mapping that will exist exists: the descriptor can go,
    // and the memory now lives exactly as long as the mappings.
    drop(fd);
    // One pair at a time, in the order of (lower rank, higher rank), which every rank's order
    // of its peers follows: the pair that comes first overall always has both ranks waiting.
    let share_parts = if out.len() == 1 {
        SHARE_PARTS_ONE_PEER
    } else {
        SHARE_PARTS
    };
    let mut order: Vec<usize> = (0..out.len()).collect();
    order.sort_by_key(|&i| out[i].0);
    for i in order {
        if let (p, Attached::Shm(l)) = &mut out[i] {
            let chan = if me < *p { l.out } else { l.inp };
            let (word, result) = chan.round_trip_words();
            let rtt = ring_stores::measure_round_trip(word, result, me < *p, *p, deadline)?;
            l.stream_stores = ring_stores::streams(opts.stream_stores, Some(rtt));
            l.placement_seen = ring_stores::placement_seen(rtt);
            l.share_parts = share_parts;
            if opts.stream_stores.is_none() {
                if me < *p {
                    l.prober = Some(ring_stores::Prober::new(Instant::now(), l.placement_seen));
                } else {
                    l.responder = Some(ring_stores::Responder::default());
                }
            }
            log::debug!(
                "rank {me}: cache-line round trip to peer rank {p}: {} ns{}; staged messages \
                 are written with {} stores; a full lane is reread {} times (a pause takes \
                 {:.1} ns)",
                rtt.as_nanos(),
                if l.placement_seen {
                    ""
                } else {
                    " (one CPU for both: probed again soon)"
                },
                if l.stream_stores {
                    "streaming"
                } else {
                    "plain"
                },
                l.lane_full_spins,
                crate::base::pause::pause_ns()
            );
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::base::dtype::{DataType, ReduceOp};
    use crate::transport::backoff::Until;
    use std::net::TcpListener;

    fn pair() -> (TcpStream, TcpStream) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let a = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (b, _) = l.accept().unwrap();
        (a, b)
    }

    /// The encoded tag of an operation of `kind` over `count` elements.
    fn op_tag(kind: crate::transport::tag::OpKind, count: u64) -> Tag {
        crate::transport::tag::OpTag {
            count,
            ..crate::transport::tag::OpTag::new(kind)
        }
        .encode()
    }

    fn links(budget: usize, single_copy: bool) -> (Box<ShmLink>, Box<ShmLink>) {
        links_max(budget, if single_copy { usize::MAX } else { 0 })
    }

    fn links_max(budget: usize, max: usize) -> (Box<ShmLink>, Box<ShmLink>) {
        links_opts(budget, max, false)
    }

    /// `crowded`: as on a host with more ranks than cores (messages of several lane cells go
    /// by the lane only there).
    fn links_opts(budget: usize, max: usize, crowded: bool) -> (Box<ShmLink>, Box<ShmLink>) {
        let opts = ShmOptions {
            budget,
            single_copy_max: max,
            crowded,
            share_copies: true,
            stream_stores: None,
        };
        links_from(opts)
    }

    /// Links with the round trip's store choice fixed (`stream`) and one peer's single-copy
    /// limit.
    fn links_stores(stream: bool, crowded: bool) -> (Box<ShmLink>, Box<ShmLink>) {
        links_from(ShmOptions {
            budget: 1 << 20,
            single_copy_max: SINGLE_COPY_MAX_ONE_PEER,
            crowded,
            share_copies: true,
            stream_stores: Some(stream),
        })
    }

    fn links_from(opts: ShmOptions) -> (Box<ShmLink>, Box<ShmLink>) {
        let (a, b) = pair();
        let dl = Instant::now() + Duration::from_secs(20);
        let t = std::thread::spawn(move || introduce(1, vec![(0, b)], opts, dl).unwrap());
        let mut la = introduce(0, vec![(1, a)], opts, dl).unwrap();
        let mut lb = t.join().unwrap();
        match (la.pop().unwrap().1, lb.pop().unwrap().1) {
            (Attached::Shm(x), Attached::Shm(y)) => (x, y),
            _ => panic!("same-host introduction fell back to TCP"),
        }
    }

    /// Sends `len` pattern bytes one way from `a` to `b` under `hint`, drives both ends to the
    /// end and checks that they arrived whole (`what` names the case); returns whether the
    /// message went single-copy.
    fn one_way(a: &mut ShmLink, b: &mut ShmLink, len: usize, hint: SendHint, what: &str) -> bool {
        let src: Vec<u8> = (0..len).map(|i| (i * 13 + len) as u8).collect();
        let mut dst = vec![0u8; len];
        // SAFETY: buffers outlive the drive below.
        unsafe {
            a.post_send_hinted(src.as_ptr(), len, T, hint).unwrap();
            b.post_recv(dst.as_mut_ptr(), len, None, T, &mut Shared::default())
                .unwrap();
        }
        assert!(a.progress_tx(), "{what}");
        let cma = a.tx.front().is_some_and(|op| op.cma);
        drive(a, b).unwrap();
        assert!(src == dst, "{what}");
        cma
    }

    /// Drives both ends until idle (single thread: both links live in this process).
    fn drive(a: &mut ShmLink, b: &mut ShmLink) -> Result<()> {
        let (mut sa, mut sb) = (Shared::default(), Shared::default());
        for _ in 0..1_000_000 {
            a.progress(&mut sa)?;
            b.progress(&mut sb)?;
            if a.idle() && b.idle() {
                return Ok(());
            }
        }
        panic!("links did not go idle");
    }

    const T: Tag = Tag([0; TAG_LEN]);

    fn sum_f32() -> ReduceFn {
        crate::exec::executor::reduce_fn(DataType::Fp32, ReduceOp::Sum)
    }

    #[test]
    fn staged_and_single_copy_messages_arrive_in_order() {
        for single_copy in [false, true] {
            let (mut a, mut b) = links(64 << 10, single_copy);
            assert_eq!(a.single_copy(), single_copy);
            let sizes = [0usize, 1, 4095, 70_000, 300_000];
            let srcs: Vec<Vec<u8>> = sizes
                .iter()
                .map(|&n| (0..n).map(|i| (i * 31 + n) as u8).collect())
                .collect();
            let mut dsts: Vec<Vec<u8>> = sizes.iter().map(|&n| vec![0u8; n]).collect();
            for (s, d) in srcs.iter().zip(dsts.iter_mut()) {
                // SAFETY: the buffers outlive the transfer (driven to the end below).
                unsafe {
                    a.post_send(s.as_ptr(), s.len(), T).unwrap();
                    b.post_recv(d.as_mut_ptr(), d.len(), None, T, &mut Shared::default())
                        .unwrap();
                }
            }
            drive(&mut a, &mut b).unwrap();
            assert_eq!(srcs, dsts, "single_copy={single_copy}");
        }
    }

    #[test]
    fn reducing_receive_sums_both_paths() {
        for single_copy in [false, true] {
            let (mut a, mut b) = links(1 << 20, single_copy);
            let n = 200_000usize;
            let src: Vec<f32> = (0..n).map(|i| i as f32).collect();
            let mut dst: Vec<f32> = vec![1.0; n];
            // SAFETY: the buffers outlive the transfer (driven to the end below).
            unsafe {
                a.post_send(src.as_ptr().cast(), n * 4, T).unwrap();
                b.post_recv(
                    dst.as_mut_ptr().cast(),
                    n * 4,
                    Some(sum_f32()),
                    T,
                    &mut Shared::default(),
                )
                .unwrap();
            }
            drive(&mut a, &mut b).unwrap();
            assert!(dst.iter().enumerate().all(|(i, &v)| v == i as f32 + 1.0));
        }
    }

    #[test]
    fn size_mismatch_and_abort_are_reported() {
        let (mut a, mut b) = links(64 << 10, true);
        let src = [0u8; 10];
        let mut dst = [0u8; 12];
        // SAFETY: the buffers outlive the transfer (driven to the end below).
        unsafe {
            a.post_send(src.as_ptr(), 10, T).unwrap();
            b.post_recv(dst.as_mut_ptr(), 12, None, T, &mut Shared::default())
                .unwrap();
        }
        let e = drive(&mut a, &mut b).unwrap_err();
        assert!(e.msg.contains("size mismatch"), "{}", e.msg);
        assert!(b.check_alive().is_ok());
        a.segment()
            .mark_failed(&Error::new(ErrorKind::Para, "rank 0 saw a mismatch"));
        a.abort(&Error::new(ErrorKind::Para, "rank 0 saw a mismatch"));
        let e = b.check_alive().unwrap_err();
        assert!(e.msg.contains("peer rank 0"), "{}", e.msg);
        assert_eq!(e.kind, ErrorKind::Para, "{e}");
        assert!(e.msg.contains("rank 0 saw a mismatch"), "{}", e.msg);
    }

    #[test]
    fn direct_receive_takes_only_the_expected_whole_message() {
        use crate::transport::tag::OpKind;
        let tag = |count| op_tag(OpKind::AllReduce, count);
        // 32 KiB for one peer: 4 KiB slots, so 5000 bytes take two.
        let (mut a, mut b) = links(32 << 10, false);
        let mut shared = Shared::default();
        for len in [8usize, 24, 4000, 4096, 5000] {
            let src: Vec<u8> = (0..len).map(|i| (i * 7 + len) as u8).collect();
            let mut dst = vec![0u8; len];
            // SAFETY: `dst` holds `len` bytes; nothing has been sent yet.
            assert!(!unsafe { b.recv_now(dst.as_mut_ptr(), len, &tag(len as u64)) });
            // SAFETY: `src` outlives the transfer (published by the progress below).
            unsafe { a.post_send(src.as_ptr(), len, tag(len as u64)).unwrap() };
            a.progress(&mut shared).unwrap();
            assert!(a.idle(), "a small send retires once published");
            // Another operation's tag, another size: left for the queued path, nothing taken.
            for (l, t) in [(len, tag(len as u64 + 1)), (len - 1, tag(len as u64))] {
                // SAFETY: `dst` holds at least `l` bytes.
                assert!(!unsafe { b.recv_now(dst.as_mut_ptr(), l, &t) });
            }
            assert!(dst.iter().all(|&x| x == 0), "{len}: nothing delivered");
            // SAFETY: `dst` holds `len` bytes.
            let direct = unsafe { b.recv_now(dst.as_mut_ptr(), len, &tag(len as u64)) };
            // A message of more than one slot always takes the queued path.
            assert_eq!(direct, len <= 4096, "{len}");
            if !direct {
                // SAFETY: `dst` outlives the transfer (driven to the end below).
                unsafe {
                    b.post_recv(dst.as_mut_ptr(), len, None, tag(len as u64), &mut shared)
                        .unwrap()
                };
                drive(&mut a, &mut b).unwrap();
            }
            assert_eq!(src, dst, "{len}");
            assert!(
                b.idle() && b.peek_tag().is_none(),
                "{len}: the slot is freed"
            );
        }
        // Many more messages than slots: the ring keeps turning through direct receives.
        for i in 0..(4 * NSLOTS as u64) {
            let src = i.to_le_bytes();
            let mut dst = [0u8; 8];
            // SAFETY: as above.
            unsafe { a.post_send(src.as_ptr(), 8, tag(8)).unwrap() };
            a.progress(&mut shared).unwrap();
            // SAFETY: as above.
            assert!(unsafe { b.recv_now(dst.as_mut_ptr(), 8, &tag(8)) });
            assert_eq!(src, dst);
        }
        // With a receive queued, a direct one must not overtake it.
        let src = [1u8; 8];
        let mut first = [0u8; 8];
        let mut second = [0u8; 8];
        // SAFETY: the buffers outlive the transfers (driven to the end below).
        unsafe {
            b.post_recv(first.as_mut_ptr(), 8, None, tag(8), &mut shared)
                .unwrap();
            a.post_send(src.as_ptr(), 8, tag(8)).unwrap();
            a.progress(&mut shared).unwrap();
            assert!(!b.recv_now(second.as_mut_ptr(), 8, &tag(8)));
        }
        drive(&mut a, &mut b).unwrap();
        assert_eq!((first, second), (src, [0u8; 8]));
    }

    #[test]
    fn direct_send_publishes_what_the_queued_path_would() {
        use crate::transport::tag::OpKind;
        let tag = |count| op_tag(OpKind::Broadcast, count);
        // 32 KiB for one peer: 4 KiB slots.
        let (mut a, mut b) = links(32 << 10, false);
        let mut shared = Shared::default();
        for len in [0usize, 8, 24, 25, 4096] {
            let mut src: Vec<u8> = (0..len).map(|i| (i * 5 + len) as u8).collect();
            // SAFETY: `src` holds `len` bytes.
            let sent = unsafe { a.send_now(src.as_ptr(), len, &tag(len as u64)) };
            assert!(sent, "{len}");
            assert!(a.idle(), "{len}: nothing queued");
            // The bytes were copied at the call: the buffer is the caller's again.
            src.iter_mut().for_each(|x| *x = !*x);
            let mut dst = vec![0u8; len];
            // Checked by the queued receive as any message.
            // SAFETY: `dst` outlives the transfer (driven to the end below).
            unsafe {
                b.post_recv(dst.as_mut_ptr(), len, None, tag(len as u64), &mut shared)
                    .unwrap()
            };
            drive(&mut a, &mut b).unwrap();
            let want: Vec<u8> = (0..len).map(|i| (i * 5 + len) as u8).collect();
            assert_eq!(dst, want, "{len}");
        }
        // More than a slot holds: the caller posts it instead.
        let big = vec![7u8; 4097];
        // SAFETY: `big` holds 4097 bytes.
        assert!(!unsafe { a.send_now(big.as_ptr(), 4097, &tag(4097)) });
        // A full lane and ring refuse, and so does a link with a send queued: later messages
        // must not overtake it. The lane keeps one cell spare (see `lane_put`), and the cells
        // the receiver has taken since it last published its position are not free yet.
        let unpublished = a.lane_wr - a.out.lane_consumed().load(Ordering::Acquire);
        assert!(unpublished < LANE_PUBLISH_EVERY);
        let full = LANE_CELLS - 1 - unpublished as usize + NSLOTS;
        let words: Vec<[u8; 8]> = (0..full as u64 + 2).map(|i| i.to_le_bytes()).collect();
        for w in &words[..full] {
            // SAFETY: each word holds 8 bytes.
            assert!(unsafe { a.send_now(w.as_ptr(), 8, &tag(8)) });
        }
        // SAFETY: as above.
        assert!(!unsafe { a.send_now(words[full].as_ptr(), 8, &tag(8)) });
        // SAFETY: the words outlive the transfers (driven to the end below).
        unsafe { a.post_send(words[full].as_ptr(), 8, tag(8)).unwrap() };
        let mut got = [0u8; 8];
        // SAFETY: `got` holds 8 bytes.
        assert!(unsafe { b.recv_now(got.as_mut_ptr(), 8, &tag(8)) });
        assert_eq!(got, words[0]);
        // Room again, but a send is still queued.
        // SAFETY: as above.
        assert!(!unsafe { a.send_now(words[full + 1].as_ptr(), 8, &tag(8)) });
        for w in &words[1..=full] {
            a.progress(&mut shared).unwrap();
            // SAFETY: as above.
            assert!(unsafe { b.recv_now(got.as_mut_ptr(), 8, &tag(8)) });
            assert_eq!(got, *w, "in order");
        }
        assert!(a.idle() && b.idle());
    }

    #[test]
    fn small_messages_go_by_the_lane_in_order_up_to_their_limit() {
        use crate::transport::tag::OpKind;
        let tag = |count| op_tag(OpKind::Scatter, count);
        let (mut a, mut b) = links(32 << 10, false);
        let mut shared = Shared::default();
        // Messages of an exchange by the lane up to two cells, one-way ones up to
        // LANE_ONE_WAY_MAX, larger ones by the ring, interleaved: the receiver takes them in the
        // order sent, directly or by the queued path, bit for bit.
        let two = LANE_EXCHANGE_MAX;
        let sends = [
            (two, false),
            (256, false),
            (25, false),
            (256, true),
            (8, false),
            (two, false),
            (LANE_ONE_WAY_MAX, true),
            (LANE_FIRST + 1, false),
            (two + 1, false),
            (LANE_ONE_WAY_MAX + 1, true),
        ];
        let msgs: Vec<Vec<u8>> = sends
            .iter()
            .enumerate()
            .map(|(k, &(len, _))| (0..len).map(|i| (i * 7 + k) as u8).collect())
            .collect();
        for (k, (m, &(len, one_way))) in msgs.iter().zip(&sends).enumerate() {
            let (lane, ring) = (a.lane_wr, a.wr);
            let t = tag(len as u64);
            // SAFETY: `m` holds its length in bytes.
            let sent = unsafe {
                match one_way {
                    true => a.send_one_way(m.as_ptr(), len, &t),
                    false => a.send_now(m.as_ptr(), len, &t),
                }
            };
            assert!(sent, "{k}");
            let by_lane = len <= if one_way { LANE_ONE_WAY_MAX } else { two };
            assert_eq!(a.lane_wr > lane, by_lane, "{k}: by the lane");
            assert_eq!(a.wr > ring, !by_lane, "{k}: by the ring");
        }
        for (k, m) in msgs.iter().enumerate() {
            let mut dst = vec![0u8; m.len()];
            let t = tag(m.len() as u64);
            if k % 2 == 0 {
                // SAFETY: `dst` holds its length in bytes.
                assert!(unsafe { b.recv_now(dst.as_mut_ptr(), m.len(), &t) }, "{k}");
            } else {
                // SAFETY: `dst` outlives the transfer (driven to the end below).
                unsafe {
                    b.post_recv(dst.as_mut_ptr(), m.len(), None, t, &mut shared)
                        .unwrap()
                };
                drive(&mut a, &mut b).unwrap();
            }
            assert_eq!(&dst, m, "{k}");
        }
        assert!(a.idle() && b.idle());
    }

    #[test]
    fn tagged_messages_are_checked_before_anything_is_delivered() {
        use crate::transport::tag::{OpKind, OpTag};
        let tag = |kind, count| OpTag {
            count,
            ..OpTag::new(kind)
        };
        // Inline (small) and slot (staged) first chunks, and single-copy.
        for (len, single_copy) in [(8usize, false), (4000, false), (100_000, true)] {
            let (mut a, mut b) = links(1 << 20, single_copy);
            let src = vec![5u8; len];
            let mut dst = vec![0u8; len];
            let mut ok = vec![0u8; len];
            let mut sh = Shared::default();
            // SAFETY: the buffers outlive the transfers (driven to the end below).
            unsafe {
                a.post_send(src.as_ptr(), len, tag(OpKind::AllReduce, 2).encode())
                    .unwrap();
                b.post_recv(
                    ok.as_mut_ptr(),
                    len,
                    None,
                    tag(OpKind::AllReduce, 2).encode(),
                    &mut sh,
                )
                .unwrap();
                a.post_send(src.as_ptr(), len, tag(OpKind::AllReduce, 3).encode())
                    .unwrap();
                b.post_recv(
                    dst.as_mut_ptr(),
                    len,
                    None,
                    tag(OpKind::AllReduce, 4).encode(),
                    &mut sh,
                )
                .unwrap();
            }
            let e = drive(&mut a, &mut b).unwrap_err();
            assert_eq!(e.kind, ErrorKind::Para);
            assert!(
                e.msg.contains("rank 0 called AllReduce count=3")
                    && e.msg.contains("rank 1 count=4"),
                "{len}: {}",
                e.msg
            );
            assert_eq!(ok, src, "{len}: the matching message arrived");
            assert!(
                dst.iter().all(|&x| x == 0),
                "{len}: nothing of the other one"
            );
        }
    }

    #[test]
    fn doorbell_wait_returns_on_ring_and_times_out_otherwise() {
        let (a, b) = links(64 << 10, false);
        let seg = b.segment().clone();
        let seen = seg.bell_seq();
        let t0 = Instant::now();
        let mut nothing = Until(|| false);
        assert!(!seg.wait(seen, Duration::from_millis(20), &mut nothing));
        assert!(t0.elapsed() >= Duration::from_millis(15));
        // Ring once the waiter has published that it sleeps on the futex (not after a sleep
        // that is hoped to be long enough).
        let watch = seg.clone();
        let t = std::thread::spawn(move || {
            let sleepers = watch.map.u32_at(OFF_SLEEPERS);
            while sleepers.load(Ordering::SeqCst) == 0 {
                std::thread::yield_now();
            }
            a.peer_map.ring();
            a
        });
        // Each wait sleeps at most SLEEP_TICK: a few hundred of them without the ring means it
        // never came.
        let mut waits = 0;
        while !seg.wait(seen, Duration::from_secs(5), &mut nothing) {
            waits += 1;
            assert!(waits < 400, "the ring never ended the wait");
        }
        assert_ne!(seg.bell_seq(), seen);
        t.join().unwrap();
    }

    /// Chimes that land while the receiver goes to sleep wake it: the sender chimes after a
    /// random delay that spans the receiver's spin budget (so it lands before, during and after
    /// the receiver's sleep sets in), and the waits end soon after their chimes. A lost wake-up
    /// ends only at the futex's timeout ([`SLEEP_TICK`]); a receiver on a busy machine can be
    /// late now and then, so a few late rounds pass. (The fence pairing itself is tested in
    /// `base::fence`.)
    #[test]
    fn chimes_reach_a_receiver_going_to_sleep() {
        const ROUNDS: u32 = 300;
        let (a, b) = links(64 << 10, false);
        assert!(a.chime.is_some(), "a chime word for the first peer");
        let seg = b.segment().clone();
        let start = Arc::new(AtomicU64::new(0));
        let chimed_ns = Arc::new(AtomicU64::new(0));
        let epoch = Instant::now();
        let sender = {
            let (start, chimed_ns) = (start.clone(), chimed_ns.clone());
            std::thread::spawn(move || {
                let mut x = 0x9e37_79b9_7f4a_7c15u64;
                for r in 1..=ROUNDS as u64 {
                    while start.load(Ordering::Acquire) != r {
                        std::hint::spin_loop();
                    }
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    let delay = Duration::from_micros(x % 2500);
                    let t = Instant::now();
                    while t.elapsed() < delay {
                        std::hint::spin_loop();
                    }
                    chimed_ns.store(epoch.elapsed().as_nanos() as u64, Ordering::Release);
                    a.chime();
                }
                a
            })
        };
        let mut late = 0;
        for r in 1..=ROUNDS as u64 {
            let seen = seg.bell_seq();
            start.store(r, Ordering::Release);
            let mut nothing = Until(|| false);
            while !seg.wait(seen, Duration::from_secs(5), &mut nothing) {}
            let woke = epoch.elapsed().as_nanos() as u64;
            let lag = woke.saturating_sub(chimed_ns.load(Ordering::Acquire));
            if lag > SLEEP_TICK.as_nanos() as u64 * 3 / 5 {
                late += 1;
            }
        }
        sender.join().unwrap();
        assert!(late <= ROUNDS / 50, "{late} of {ROUNDS} waits ended late");
    }

    #[test]
    fn single_copy_by_default_capped_with_one_peer() {
        assert_eq!(single_copy_max(None, 1), SINGLE_COPY_MAX_ONE_PEER);
        assert_eq!(single_copy_max(None, 2), usize::MAX);
        assert_eq!(single_copy_max(None, 7), usize::MAX);
        assert_eq!(single_copy_max(Some(true), 1), usize::MAX);
        assert_eq!(single_copy_max(Some(false), 7), 0);
    }

    #[test]
    fn stored_messages_go_single_copy_whichever_stores_the_ring_takes() {
        let st = |len: usize| SendHint {
            op_bytes: len,
            stored: true,
            ..SendHint::default()
        };
        let (min, mid, big) = (SINGLE_COPY_MIN, 256 << 10, (4 << 20) + 4);
        // (streaming stores, crowded, length, hint, both ways at once)
        for (stream, crowded, len, hint, both) in [
            (true, false, min, st(min), false),
            (true, false, 300_007, st(300_007), false),
            (true, false, big, st(big), false),
            // An exchange; a crowded host.
            (true, false, mid, st(mid), true),
            (true, true, min, st(min), false),
            // Plain stores (a shared cache).
            (false, false, min, st(min), false),
            (false, true, mid, st(mid), true),
        ] {
            let (mut a, mut b) = links_stores(stream, crowded);
            let sa: Vec<u8> = (0..len).map(|i| (i * 7 + 1) as u8).collect();
            let sb: Vec<u8> = (0..len).map(|i| (i * 5 + 3) as u8).collect();
            let (mut da, mut db) = (vec![0u8; len], vec![0u8; len]);
            let (mut sha, mut shb) = (Shared::default(), Shared::default());
            // SAFETY: buffers outlive the drive below.
            unsafe {
                a.post_send_hinted(sa.as_ptr(), len, T, hint).unwrap();
                b.post_recv(db.as_mut_ptr(), len, None, T, &mut shb)
                    .unwrap();
                if both {
                    b.post_send_hinted(sb.as_ptr(), len, T, hint).unwrap();
                    a.post_recv(da.as_mut_ptr(), len, None, T, &mut sha)
                        .unwrap();
                }
            }
            assert!(a.progress_tx());
            let what = format!("stream {stream} crowded {crowded} {len} B {hint:?} both {both}");
            assert!(a.tx.front().is_some_and(|op| op.cma), "{what}");
            drive(&mut a, &mut b).unwrap();
            assert!(sa == db, "{what}");
            assert!(!both || sb == da, "{what}");
        }
    }

    #[test]
    fn stored_messages_go_single_copy_from_a_lower_size_on_a_host_with_a_core_per_rank() {
        let (own, all) = (SINGLE_COPY_MIN_OWN_CORE, SINGLE_COPY_MIN);
        // (crowded host, receives only store, smallest single-copy message)
        for (crowded, stored, min) in [
            (false, true, own),
            (false, false, all),
            (true, true, all),
            (true, false, all),
        ] {
            let (mut a, mut b) = links_opts(1 << 20, usize::MAX, crowded);
            for (len, want) in [(min - 4, false), (min, true)] {
                let hint = SendHint {
                    op_bytes: len,
                    stored,
                    ..SendHint::default()
                };
                let what = format!("crowded {crowded}, stored {stored}, {len} bytes");
                assert_eq!(one_way(&mut a, &mut b, len, hint, &what), want, "{what}");
            }
        }
    }

    #[test]
    fn single_copy_up_to_its_limit_and_in_plain_exchanges() {
        let max = SINGLE_COPY_MAX_ONE_PEER;
        let (mut a, mut b) = links_max(1 << 20, max);
        assert!(a.single_copy() && b.single_copy());
        // One way: the size alone decides (a staged message that fits the ring is published
        // and retired at once; the others wait in the queue).
        let cases = [
            (SINGLE_COPY_MIN - 4, false),
            (SINGLE_COPY_MIN, true),
            (max, true),
            (max + 4, false),
        ];
        for (k, &(len, want)) in cases.iter().enumerate() {
            let src: Vec<u8> = (0..len).map(|i| (i * 7 + k) as u8).collect();
            let mut dst = vec![0u8; len];
            // SAFETY: buffers outlive the drive below.
            unsafe {
                a.post_send(src.as_ptr(), len, T).unwrap();
                b.post_recv(dst.as_mut_ptr(), len, None, T, &mut Shared::default())
                    .unwrap();
            }
            assert!(a.progress_tx());
            assert_eq!(a.tx.front().is_some_and(|op| op.cma), want, "{len} bytes");
            drive(&mut a, &mut b).unwrap();
            assert!(src == dst, "{len} bytes");
        }
        // Both ways at once: single copy at any size when the receives store; when they reduce,
        // up to the limit.
        for (len, reducing, want) in [
            (max + 4, false, true),
            (max + 4, true, false),
            (max, true, true),
            (max * 2, true, false),
        ] {
            let (sa, sb) = (vec![1u8; len], vec![2u8; len]);
            let (mut da, mut db) = (vec![0u8; len], vec![0u8; len]);
            let reduce =
                reducing.then(|| crate::exec::executor::reduce_fn(DataType::Uint8, ReduceOp::Sum));
            let (mut sha, mut shb) = (Shared::default(), Shared::default());
            // SAFETY: buffers outlive the drive below.
            unsafe {
                a.post_send(sa.as_ptr(), len, T).unwrap();
                b.post_send(sb.as_ptr(), len, T).unwrap();
                a.post_recv(da.as_mut_ptr(), len, reduce, T, &mut sha)
                    .unwrap();
                b.post_recv(db.as_mut_ptr(), len, reduce, T, &mut shb)
                    .unwrap();
            }
            assert!(a.progress_tx());
            let cma = a.tx.front().is_some_and(|op| op.cma);
            assert_eq!(cma, want, "{len} bytes, reducing={reducing}");
            drive(&mut a, &mut b).unwrap();
            assert!(da.iter().all(|&v| v == 2) && db.iter().all(|&v| v == 1));
        }
        let big = max + 4;
        // Without a limit every size from the minimum goes single-copy, reducing or not.
        let (mut a, mut b) = links(1 << 20, true);
        let (sa, sb) = (vec![1u8; big], vec![2u8; big]);
        let (mut da, mut db) = (vec![0u8; big], vec![0u8; big]);
        let sum = crate::exec::executor::reduce_fn(DataType::Uint8, ReduceOp::Sum);
        let (mut sha, mut shb) = (Shared::default(), Shared::default());
        // SAFETY: buffers outlive the drive below.
        unsafe {
            a.post_send(sa.as_ptr(), big, T).unwrap();
            b.post_send(sb.as_ptr(), big, T).unwrap();
            a.post_recv(da.as_mut_ptr(), big, Some(sum), T, &mut sha)
                .unwrap();
            b.post_recv(db.as_mut_ptr(), big, Some(sum), T, &mut shb)
                .unwrap();
        }
        assert!(a.progress_tx());
        assert!(a.tx[0].cma);
        drive(&mut a, &mut b).unwrap();
        assert!(da.iter().all(|&v| v == 2) && db.iter().all(|&v| v == 1));
    }

    #[test]
    fn the_operation_size_decides_for_chunks_and_never_changes_what_arrives() {
        let max = SINGLE_COPY_MAX_ONE_PEER;
        let chunk = 256 << 10;
        let (mut a, mut b) = links_max(1 << 20, max);
        let big = SendHint {
            op_bytes: 64 << 20,
            ..SendHint::default()
        };
        let fits = SendHint {
            op_bytes: max,
            ..SendHint::default()
        };
        let sum = crate::exec::executor::reduce_fn(DataType::Uint8, ReduceOp::Sum);
        // (a's hint, b's hint, whether the receives reduce, a's choice, b's choice)
        for (ha, hb, reducing, want_a, want_b) in [
            // Chunks of a large AllReduce: staged.
            (big, big, true, false, false),
            // Of one that fits the cache: single copy.
            (fits, fits, true, true, true),
            // A plain exchange: single copy whatever the operation.
            (big, big, false, true, true),
            // Ranks that disagree: each sender's own choice, the same bytes.
            (big, fits, true, false, true),
        ] {
            let (sa, sb) = (vec![1u8; chunk], vec![2u8; chunk]);
            let (mut da, mut db) = (vec![3u8; chunk], vec![5u8; chunk]);
            let reduce = reducing.then_some(sum);
            let (mut sha, mut shb) = (Shared::default(), Shared::default());
            // SAFETY: buffers outlive the drive below.
            unsafe {
                a.post_send_hinted(sa.as_ptr(), chunk, T, ha).unwrap();
                b.post_send_hinted(sb.as_ptr(), chunk, T, hb).unwrap();
                a.post_recv(da.as_mut_ptr(), chunk, reduce, T, &mut sha)
                    .unwrap();
                b.post_recv(db.as_mut_ptr(), chunk, reduce, T, &mut shb)
                    .unwrap();
            }
            // A staged message that fits the ring is published and retired at once; a
            // single-copy one waits for the peer's read.
            assert!(a.progress_tx() && b.progress_tx());
            let what = format!("{ha:?} {hb:?} reducing={reducing}");
            assert_eq!(a.tx.front().is_some_and(|op| op.cma), want_a, "{what}");
            assert_eq!(b.tx.front().is_some_and(|op| op.cma), want_b, "{what}");
            drive(&mut a, &mut b).unwrap();
            let (ea, eb) = if reducing { (5, 6) } else { (2, 1) };
            assert!(da.iter().all(|&v| v == ea), "{what}");
            assert!(db.iter().all(|&v| v == eb), "{what}");
        }
        // One way: the operation's size decides, unless its receives only store; without a
        // hint, the message's own.
        let stored = SendHint {
            stored: true,
            ..big
        };
        for (hint, want) in [
            (big, false),
            (fits, true),
            (SendHint::default(), true),
            (stored, true),
        ] {
            let what = format!("{hint:?}");
            assert_eq!(one_way(&mut a, &mut b, chunk, hint, &what), want, "{what}");
        }
    }

    #[test]
    fn shared_single_copy_receives_arrive_whole_with_both_sides_copying() {
        let (mut a, mut b) = links(1 << 20, true);
        for len in [SHARED_COPY_MIN, 100_003, (1 << 20) + 3, (5 << 20) + 1] {
            let src: Vec<u8> = (0..len).map(|i| (i * 31 + 7) as u8).collect();
            let mut dst = vec![0u8; len];
            let mut sb = Shared::default();
            // SAFETY: buffers outlive the drive below.
            unsafe {
                a.post_send(src.as_ptr(), len, T).unwrap();
                b.post_recv(dst.as_mut_ptr(), len, None, T, &mut sb)
                    .unwrap();
            }
            assert!(a.progress_tx() && a.tx[0].cma);
            // The receiver asks for help and reads a chunk; the sender then writes one.
            assert!(b.progress_rx(&mut sb).unwrap() && b.rx[0].shared);
            assert!(a.help_peer().unwrap(), "{len}");
            assert!(b.rx[0].own_done < len);
            drive(&mut a, &mut b).unwrap();
            assert!(src == dst, "{len}");
        }
        // A reducing receive reads alone.
        let len = 1 << 20;
        let (src, mut dst) = (vec![1f32; len / 4], vec![2f32; len / 4]);
        let mut sb = Shared::default();
        // SAFETY: buffers outlive the drive below.
        unsafe {
            a.post_send(src.as_ptr().cast(), len, T).unwrap();
            b.post_recv(dst.as_mut_ptr().cast(), len, Some(sum_f32()), T, &mut sb)
                .unwrap();
        }
        assert!(a.progress_tx());
        // Read and reduced whole in one pass, no chunk left for the sender.
        assert!(b.progress_rx(&mut sb).unwrap() && b.rx.is_empty());
        assert!(!a.help_peer().unwrap());
        drive(&mut a, &mut b).unwrap();
        assert!(dst.iter().all(|&v| v == 3.0));
    }

    #[test]
    fn single_copy_receives_longer_than_a_step_arrive_whole() {
        // Neither is shared (an exchange; a reduction out of memory the sender cannot map), so
        // the receiver reads each in steps of CMA_STEP bytes and one shorter last step.
        let len = CMA_STEP + 4100;
        let (mut a, mut b) = links(1 << 20, true);
        let sa: Vec<u8> = (0..len).map(|i| (i * 7 + 1) as u8).collect();
        let sb: Vec<u8> = (0..len).map(|i| (i * 5 + 3) as u8).collect();
        let (mut da, mut db) = (vec![0u8; len], vec![0u8; len]);
        let (mut sha, mut shb) = (Shared::default(), Shared::default());
        // SAFETY: buffers outlive the drive below.
        unsafe {
            a.post_send(sa.as_ptr(), len, T).unwrap();
            b.post_recv(db.as_mut_ptr(), len, None, T, &mut shb)
                .unwrap();
            b.post_send(sb.as_ptr(), len, T).unwrap();
            a.post_recv(da.as_mut_ptr(), len, None, T, &mut sha)
                .unwrap();
        }
        assert!(a.progress_tx() && a.tx[0].cma);
        assert!(b.progress_tx() && b.tx[0].cma);
        // One step read, the rest still to come.
        assert!(b.progress_rx(&mut shb).unwrap());
        assert!(b
            .rx
            .front()
            .is_some_and(|op| op.got == CMA_STEP && !op.shared));
        drive(&mut a, &mut b).unwrap();
        assert!(sa == db && sb == da);

        let n = len / 4;
        let src: Vec<f32> = (0..n).map(|i| (i % 1000) as f32).collect();
        let mut dst: Vec<f32> = (0..n).map(|i| (i % 7) as f32 * 0.5).collect();
        let want: Vec<f32> = dst.iter().zip(&src).map(|(d, s)| d + s).collect();
        // SAFETY: buffers outlive the drive below.
        unsafe {
            a.post_send(src.as_ptr().cast(), len, T).unwrap();
            b.post_recv(dst.as_mut_ptr().cast(), len, Some(sum_f32()), T, &mut shb)
                .unwrap();
        }
        assert!(a.progress_tx() && a.tx[0].cma);
        assert!(b.progress_rx(&mut shb).unwrap());
        assert!(b.rx.front().is_some_and(|op| op.got == CMA_STEP));
        drive(&mut a, &mut b).unwrap();
        assert!(dst == want);
    }

    #[test]
    fn an_aborted_shared_receive_ends_the_share_before_its_buffer_goes_back() {
        let (mut a, mut b) = links(1 << 20, true);
        // Four chunks: two claimed before the abort, two never.
        assert_eq!(
            (a.share_parts, b.share_parts),
            (2, 2),
            "halves with one peer"
        );
        let len = 4 * SHARE_CHUNK_MAX;
        assert_eq!(len.div_ceil(share_chunk(len, a.share_parts)), 4);
        let src = vec![9u8; len];
        let mut dst = vec![0u8; len];
        let mut sb = Shared::default();
        // SAFETY: buffers outlive the links' use of them (abort below).
        unsafe {
            a.post_send(src.as_ptr(), len, T).unwrap();
            b.post_recv(dst.as_mut_ptr(), len, None, T, &mut sb)
                .unwrap();
        }
        assert!(a.progress_tx());
        assert!(b.progress_rx(&mut sb).unwrap());
        assert!(a.help_peer().unwrap());
        b.abort(&Error::new(ErrorKind::Internal, "test"));
        // Nothing more can be claimed: the sender writes no further chunk.
        assert!(!a.help_peer().unwrap());
        assert!(b.share_copies);
        assert_eq!(
            dst.iter().filter(|&&v| v == 9).count(),
            2 * share_chunk(len, a.share_parts)
        );
    }

    #[test]
    fn a_staged_message_of_one_slot_goes_in_pieces_the_receiver_reduces_exactly() {
        let staged = SendHint {
            staged: true,
            ..SendHint::default()
        };
        let sum = crate::exec::executor::reduce_fn(DataType::Uint8, ReduceOp::Sum);
        let (mut a, mut b) = links_max(1 << 20, 0);
        let src: Vec<u8> = (0..100_003).map(|i| (i * 13) as u8).collect();
        assert!(src.len() <= a.out.slot_bytes, "one slot");
        // Sends the first `len` bytes of `src` staged into a receive holding `i * k`, checks
        // the sum and returns how many chunks the sender published at once.
        let mut run = |len: usize, k: usize| {
            let mut dst: Vec<u8> = (0..len).map(|i| (i * k) as u8).collect();
            // SAFETY: buffers outlive the drive below.
            unsafe {
                a.post_send_hinted(src.as_ptr(), len, T, staged).unwrap();
                b.post_recv(dst.as_mut_ptr(), len, Some(sum), T, &mut Shared::default())
                    .unwrap();
            }
            let before = a.wr;
            assert!(a.progress_tx());
            let published = a.wr - before;
            drive(&mut a, &mut b).unwrap();
            let want = |i: usize| ((i * 13) as u8).wrapping_add((i * k) as u8);
            assert!((0..len).all(|i| dst[i] == want(i)), "{len}");
            published
        };
        assert_eq!(run(src.len(), 7), STAGED_PIECES as u64, "chunks published");
        // A smaller message is cut into fewer pieces, none below STAGED_PIECE_MIN: 64 KiB in
        // two (in four with 16 KiB pieces, which measured slower).
        assert_eq!(run(64 << 10, 5), 2, "chunks published");
    }

    #[test]
    fn a_staged_hint_stages_at_any_size_unless_crowded_and_delivers_the_same_reduction() {
        let len = 3 << 20;
        let staged = SendHint {
            staged: true,
            ..SendHint::default()
        };
        let sum = crate::exec::executor::reduce_fn(DataType::Uint8, ReduceOp::Sum);
        // Single copy at any size (several peers) and up to its limit (one peer); on a crowded
        // host the hint is ignored.
        for (max, crowded) in [
            (usize::MAX, false),
            (SINGLE_COPY_MAX_ONE_PEER, false),
            (usize::MAX, true),
        ] {
            let (mut a, mut b) = links_opts(1 << 20, max, crowded);
            let single = max == usize::MAX;
            for (hint, want) in [(staged, single && crowded), (SendHint::default(), single)] {
                let src: Vec<u8> = (0..len).map(|i| (i * 13) as u8).collect();
                let mut dst: Vec<u8> = (0..len).map(|i| (i * 7) as u8).collect();
                // SAFETY: buffers outlive the drive below.
                unsafe {
                    a.post_send_hinted(src.as_ptr(), len, T, hint).unwrap();
                    b.post_recv(dst.as_mut_ptr(), len, Some(sum), T, &mut Shared::default())
                        .unwrap();
                }
                assert!(a.progress_tx());
                let what = format!("max {max} crowded {crowded} {hint:?}");
                assert_eq!(a.tx.front().is_some_and(|op| op.cma), want, "{what}");
                drive(&mut a, &mut b).unwrap();
                let exact =
                    (0..len).all(|i| dst[i] == ((i * 13) as u8).wrapping_add((i * 7) as u8));
                assert!(exact, "{what}");
            }
        }
    }

    #[test]
    fn both_ends_of_a_link_make_the_same_store_choice_and_the_setting_fixes_it() {
        for setting in [None, Some(true), Some(false)] {
            let (a, b) = pair();
            let opts = ShmOptions {
                budget: 1 << 20,
                single_copy_max: 0,
                crowded: false,
                share_copies: false,
                stream_stores: setting,
            };
            let dl = Instant::now() + Duration::from_secs(20);
            let t = std::thread::spawn(move || introduce(1, vec![(0, b)], opts, dl).unwrap());
            let mut la = introduce(0, vec![(1, a)], opts, dl).unwrap();
            let mut lb = t.join().unwrap();
            let (Attached::Shm(x), Attached::Shm(y)) = (la.pop().unwrap().1, lb.pop().unwrap().1)
            else {
                panic!("same-host introduction fell back to TCP");
            };
            assert_eq!(x.stream_stores, y.stream_stores, "{setting:?}");
            if let Some(s) = setting {
                assert_eq!(x.stream_stores, s);
            }
            // Only a measured choice is measured again while the link runs.
            assert_eq!(x.prober.is_some(), setting.is_none());
            assert_eq!(y.responder.is_some(), setting.is_none());
            assert!(x.responder.is_none() && y.prober.is_none());
        }
    }

    #[test]
    fn a_run_time_probe_leaves_both_ends_agreeing_and_the_data_exact() {
        let (a, b) = pair();
        let opts = ShmOptions {
            budget: 1 << 20,
            single_copy_max: 0,
            crowded: false,
            share_copies: false,
            stream_stores: None,
        };
        let dl = Instant::now() + Duration::from_secs(20);
        let t = std::thread::spawn(move || introduce(1, vec![(0, b)], opts, dl).unwrap());
        let mut la = introduce(0, vec![(1, a)], opts, dl).unwrap();
        let mut lb = t.join().unwrap();
        let (Attached::Shm(mut x), Attached::Shm(mut y)) =
            (la.pop().unwrap().1, lb.pop().unwrap().1)
        else {
            panic!("same-host introduction fell back to TCP");
        };
        let len = 3 << 20;
        let src: Vec<u8> = (0..len).map(|i| (i * 13) as u8).collect();
        let mut dst: Vec<u8> = (0..len).map(|i| (i * 7) as u8).collect();
        let sum = crate::exec::executor::reduce_fn(DataType::Uint8, ReduceOp::Sum);
        // The pinging side (rank 0) only receives, as a Reduce's root does; its probe is due.
        // SAFETY: both buffers outlive the threads below, which drive the message to its end.
        unsafe {
            y.post_send_hinted(src.as_ptr(), len, T, SendHint::default())
                .unwrap();
            x.post_recv(dst.as_mut_ptr(), len, Some(sum), T, &mut Shared::default())
                .unwrap();
        }
        x.prober = Some(ring_stores::Prober::new(
            Instant::now() - ring_stores::PROBE_EVERY,
            true,
        ));
        let chan = x.out;
        let word = || chan.round_trip_words().0.load(Ordering::Acquire);
        assert_eq!(word(), u64::MAX, "the set-up measurement's end");
        let done = std::sync::atomic::AtomicBool::new(false);
        let end = Instant::now() + Duration::from_secs(20);
        std::thread::scope(|s| {
            s.spawn(|| {
                let mut sh = Shared::default();
                while !x.idle() || x.prober.as_ref().unwrap().pending() {
                    x.progress(&mut sh).unwrap();
                    assert!(Instant::now() < end, "rank 0 stuck");
                }
                done.store(true, Ordering::Release);
            });
            let mut sh = Shared::default();
            loop {
                let over = done.load(Ordering::Acquire);
                y.progress(&mut sh).unwrap();
                if over && y.idle() {
                    break;
                }
                assert!(Instant::now() < end, "rank 1 stuck");
            }
        });
        assert_ne!(word(), u64::MAX, "no probe started");
        assert_eq!(x.stream_stores, y.stream_stores);
        assert!((0..len).all(|i| dst[i] == ((i * 13) as u8).wrapping_add((i * 7) as u8)));
    }

    #[test]
    fn small_and_large_messages_on_one_channel_arrive_in_order() {
        use crate::transport::tag::{OpKind, OpTag};
        // Each message its own tag: a receive matched against the wrong message fails.
        let tag = |i: usize| {
            OpTag {
                count: i as u64,
                ..OpTag::new(OpKind::AllReduce)
            }
            .encode()
        };
        // Lane sizes (up to LANE_MAX) and ring ones (staged over several slots, single-copy),
        // each after each; more small ones in a row than the lane holds.
        let mut sizes = vec![0usize, 8, 1025, 24, 25, 5000, 1024, 70_000, 1, 4096, 100];
        sizes.extend((0..3 * LANE_CELLS).map(|i| [8, 40, 300, 2000][i % 4]));
        sizes.extend([9000, 16, 70_000, 1000]);
        for (single_copy, crowded) in [(false, true), (true, true), (false, false)] {
            let max = if single_copy { usize::MAX } else { 0 };
            let (mut a, mut b) = links_opts(32 << 10, max, crowded);
            let srcs: Vec<Vec<f32>> = sizes
                .iter()
                .enumerate()
                .map(|(i, &n)| (0..n / 4).map(|j| (i * 1000 + j) as f32).collect())
                .collect();
            let mut dsts: Vec<Vec<f32>> = sizes.iter().map(|&n| vec![0.5; n / 4]).collect();
            let mut sh = Shared::default();
            for (i, (s, d)) in srcs.iter().zip(dsts.iter_mut()).enumerate() {
                // Every third receive reduces (adds onto 0.5), the others store.
                let reduce = (i % 3 == 0).then(sum_f32);
                // SAFETY: the buffers outlive the transfers (driven to the end below).
                unsafe {
                    a.post_send(s.as_ptr().cast(), s.len() * 4, tag(i)).unwrap();
                    b.post_recv(d.as_mut_ptr().cast(), d.len() * 4, reduce, tag(i), &mut sh)
                        .unwrap();
                }
            }
            drive(&mut a, &mut b).unwrap();
            for (i, (s, d)) in srcs.iter().zip(&dsts).enumerate() {
                let want: Vec<f32> = s
                    .iter()
                    .map(|&x| if i % 3 == 0 { x + 0.5 } else { x })
                    .collect();
                assert_eq!(*d, want, "message {i} ({} bytes)", sizes[i]);
            }
            assert!(a.lane_wr > 40 && a.wr > NSLOTS as u64, "both paths used");
        }
    }

    #[test]
    fn the_lane_wraps_many_times_and_never_mistakes_old_data_for_a_message() {
        use crate::transport::tag::OpKind;
        let tag = |i: usize| op_tag(OpKind::Broadcast, i as u64);
        let (mut a, mut b) = links_opts(32 << 10, 0, true);
        let mut sh = Shared::default();
        // Lane messages only: the ring's position stays 0, which the planted words name too.
        let lens = [8usize, 100, 1000, 32, 600, 64, 0, LANE_MAX, 33, 200, 96];
        for i in 0..4000 {
            let len = lens[i % lens.len()];
            let mut src: Vec<u8> = (0..len).map(|j| (i * 13 + j) as u8).collect();
            // Where each further cell of a lane message starts, the sequence word and ring
            // position that cell would carry as a header one lap later: old data the receiver
            // must not take for a message.
            let k = a.lane_wr;
            let mut off = LANE_FIRST;
            let mut c = k + 1;
            while off + LANE_TAG_OFF <= len {
                src[off..off + 8].copy_from_slice(&(c + LANE_CELLS as u64 + 1).to_le_bytes());
                src[off + LANE_LEN_OFF..off + LANE_TAG_OFF].fill(0);
                off += CELL;
                c += 1;
            }
            let mut dst = vec![0u8; len];
            // Alternately direct and queued on either side.
            // SAFETY: the buffers outlive the transfers (taken or driven to the end below).
            unsafe {
                if i % 2 == 0 && a.send_now(src.as_ptr(), len, &tag(i)) {
                } else {
                    a.post_send(src.as_ptr(), len, tag(i)).unwrap();
                    a.progress(&mut sh).unwrap();
                }
                if i % 3 == 0 || !b.recv_now(dst.as_mut_ptr(), len, &tag(i)) {
                    b.post_recv(dst.as_mut_ptr(), len, None, tag(i), &mut sh)
                        .unwrap();
                    drive(&mut a, &mut b).unwrap();
                }
            }
            assert_eq!(src, dst, "message {i} ({len} bytes)");
            // Nothing else has been sent: nothing may be found.
            assert!(b.peek_tag().is_none(), "message {i}");
            let mut none = [0u8; 64];
            for l in [0usize, 8, 64] {
                // SAFETY: `none` holds 64 bytes.
                assert!(!unsafe { b.recv_now(none.as_mut_ptr(), l, &tag(i + 1)) });
            }
        }
        assert!(a.lane_wr > 100 * LANE_CELLS as u64, "{}", a.lane_wr);
    }

    #[test]
    fn a_one_way_sender_running_ahead_fills_lane_and_ring_and_every_message_arrives_in_order() {
        use crate::transport::tag::OpKind;
        let tag = |i: usize| op_tag(OpKind::Scatter, i as u64);
        for crowded in [false, true] {
            let (mut a, mut b) = links_opts(32 << 10, 0, crowded);
            let lens = [8usize, 128, 33, 512, 96, 0, 256, 64];
            let (mut sent, mut taken, mut by_ring) = (0usize, 0usize, 0usize);
            let src = |i: usize| -> Vec<u8> {
                let len = lens[i % lens.len()];
                (0..len).map(|j| (i * 31 + j * 7) as u8).collect()
            };
            let srcs: Vec<Vec<u8>> = (0..3000).map(src).collect();
            while taken < srcs.len() {
                // The sender runs ahead until the link refuses (lane and ring full), as a
                // Broadcast root does whose leaf is slower...
                while sent < srcs.len() {
                    let (wr, s) = (a.wr, &srcs[sent]);
                    // SAFETY: `s` outlives the transfer (it sits in the link once accepted).
                    if !unsafe { a.send_one_way(s.as_ptr(), s.len(), &tag(sent)) } {
                        break;
                    }
                    by_ring += (a.wr != wr) as usize;
                    sent += 1;
                }
                // ...then the receiver, behind, takes a burst of them: not all, so that the
                // sender next finds the lane partly free, its consumption published only
                // every few cells.
                let burst = (sent - taken).min(5 + taken % 7).max(1);
                for _ in 0..burst {
                    let s = &srcs[taken];
                    let mut d = vec![0u8; s.len()];
                    // SAFETY: `d` holds `s.len()` bytes.
                    let got = unsafe { b.recv_now(d.as_mut_ptr(), d.len(), &tag(taken)) };
                    assert!(got, "message {taken} was sent but is not there");
                    assert_eq!(&d, s, "message {taken} ({} bytes)", s.len());
                    taken += 1;
                }
            }
            assert!(b.peek_tag().is_none());
            assert!(
                by_ring > 0 && a.lane_wr > 20 * LANE_CELLS as u64,
                "{by_ring} {}",
                a.lane_wr
            );
            // Once the receiver has taken everything, the longest lane message finds room
            // although the receiver publishes its position only every few cells.
            let big = vec![7u8; if crowded { LANE_MAX } else { LANE_ONE_WAY_MAX }];
            let lane = a.lane_wr;
            // SAFETY: `big` outlives the transfer.
            assert!(unsafe { a.send_one_way(big.as_ptr(), big.len(), &tag(0)) });
            assert!(
                a.lane_wr > lane,
                "a lane message after the receiver caught up"
            );
        }
    }

    #[test]
    fn lane_messages_cross_the_wrap_of_the_32_bit_sequence_words() {
        use crate::transport::tag::OpKind;
        let tag = |i: usize| op_tag(OpKind::Broadcast, i as u64);
        let (mut a, mut b) = links_opts(32 << 10, 0, true);
        let mut sh = Shared::default();
        // Both ends jump to a lane position a few laps before the sequence words wrap to 0
        // (the same cell, as the positions agree modulo the lane).
        let start = (1u64 << 32) - 4 * LANE_CELLS as u64;
        a.lane_wr = start;
        a.lane_seen = start;
        b.lane_rd = start;
        a.out.lane_consumed().store(start, Ordering::Release);
        let lens = [8usize, 32, 33, 0, 200, 24, 64, 1000];
        for i in 0..2000 {
            let len = lens[i % lens.len()];
            let src: Vec<u8> = (0..len).map(|j| (i * 7 + j) as u8).collect();
            let mut dst = vec![0u8; len];
            // SAFETY: the buffers outlive the transfers (taken or driven to the end below).
            unsafe {
                if !a.send_now(src.as_ptr(), len, &tag(i)) {
                    a.post_send(src.as_ptr(), len, tag(i)).unwrap();
                }
                if !b.recv_now(dst.as_mut_ptr(), len, &tag(i)) {
                    b.post_recv(dst.as_mut_ptr(), len, None, tag(i), &mut sh)
                        .unwrap();
                }
            }
            drive(&mut a, &mut b).unwrap();
            assert_eq!(src, dst, "message {i} ({len} bytes)");
            assert!(b.peek_tag().is_none(), "message {i}");
        }
        assert!(
            a.lane_wr > (1 << 32) + 8 * LANE_CELLS as u64,
            "{}",
            a.lane_wr
        );
    }

    /// A test allocation like the ACL runtime's: a memfd of its own, mapped shared, sealed
    /// against shrinking when `sealed`, and listed for [`fake_info`].
    struct FileBuf {
        fd: i32,
        ptr: *mut u8,
        len: usize,
    }

    static FILE_BUFS: parking_lot::Mutex<Vec<(usize, usize, i32)>> =
        parking_lot::Mutex::new(Vec::new());

    impl FileBuf {
        fn new(len: usize, sealed: bool) -> FileBuf {
            // SAFETY: plain syscalls on a descriptor and mapping this test owns.
            unsafe {
                let fd = libc::memfd_create(c"shm-test-buf".as_ptr(), libc::MFD_ALLOW_SEALING);
                assert!(fd >= 0);
                assert_eq!(libc::ftruncate(fd, len as libc::off_t), 0);
                if sealed {
                    assert_eq!(libc::fcntl(fd, libc::F_ADD_SEALS, libc::F_SEAL_SHRINK), 0);
                }
                let p = libc::mmap(
                    std::ptr::null_mut(),
                    len,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_SHARED,
                    fd,
                    0,
                );
                assert_ne!(p, libc::MAP_FAILED);
                FILE_BUFS.lock().push((p as usize, len, fd));
                FileBuf {
                    fd,
                    ptr: p.cast(),
                    len,
                }
            }
        }

        fn bytes(&mut self) -> &mut [u8] {
            // SAFETY: the mapping holds `len` bytes owned by this buffer.
            unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
        }
    }

    impl Drop for FileBuf {
        fn drop(&mut self) {
            FILE_BUFS.lock().retain(|b| b.2 != self.fd);
            // SAFETY: this buffer's own mapping and descriptor.
            unsafe {
                libc::munmap(self.ptr.cast(), self.len);
                libc::close(self.fd);
            }
        }
    }

    /// `aclrtHostMemGetShareInfo` over [`FILE_BUFS`].
    unsafe extern "C" fn fake_info(
        p: *const libc::c_void,
        fd: *mut i32,
        off: *mut u64,
        size: *mut u64,
    ) -> i32 {
        let p = p as usize;
        match FILE_BUFS.lock().iter().find(|b| b.0 <= p && p < b.0 + b.1) {
            // SAFETY: the caller passes valid out-parameters.
            Some(&(base, len, f)) => unsafe {
                *fd = f;
                *off = (p - base) as u64;
                *size = (base + len - p) as u64;
                0
            },
            None => 100000,
        }
    }

    /// Links whose buffers in [`FILE_BUFS`] are shareable (no epoch: every send asks).
    fn mapped_links() -> (Box<ShmLink>, Box<ShmLink>) {
        mapped_links_max(usize::MAX)
    }

    /// [`mapped_links`] reading messages single-copy up to `max` bytes (see `links_max`).
    fn mapped_links_max(max: usize) -> (Box<ShmLink>, Box<ShmLink>) {
        let (mut a, mut b) = links_max(1 << 20, max);
        let fns = local_mem::ShareFns {
            info: fake_info,
            epoch: None,
        };
        a.local_mem = LocalMem::new(Some(fns));
        b.local_mem = LocalMem::new(Some(fns));
        (a, b)
    }

    #[test]
    fn mapped_single_copy_messages_arrive_whole_on_every_receive_path() {
        let (mut a, mut b) = mapped_links();
        for len in [SINGLE_COPY_MIN, 100_003, (1 << 20) + 3, (5 << 20) + 1] {
            let mut src = FileBuf::new(len, true);
            for (i, x) in src.bytes().iter_mut().enumerate() {
                *x = (i * 31 + 7) as u8;
            }
            // A shareable receive buffer (shared copy, both sides memcpy) and a plain one.
            let mut dst_file = FileBuf::new(len, true);
            let mut dst_plain = vec![0u8; len];
            for dst in [dst_file.ptr, dst_plain.as_mut_ptr()] {
                let mut sb = Shared::default();
                // SAFETY: buffers outlive the drive below.
                unsafe {
                    a.post_send(src.ptr, len, T).unwrap();
                    b.post_recv(dst, len, None, T, &mut sb).unwrap();
                }
                assert!(a.progress_tx() && a.tx[0].cma);
                let slot = a.out.slot(a.tx[0].last_slot);
                // SAFETY: the slot is published and not consumed.
                assert_ne!(unsafe { read_hdr(slot) }.flags & FLAG_MAPPED, 0, "{len}");
                drive(&mut a, &mut b).unwrap();
                // SAFETY: `dst` holds `len` bytes.
                let got = unsafe { std::slice::from_raw_parts(dst, len) };
                assert!(got == src.bytes(), "{len}");
            }
            assert!(dst_file.bytes() == src.bytes());
        }
        assert!(
            b.peer_mem.mapped() > 0,
            "the receiver mapped the sender's files"
        );
        assert!(
            a.peer_mem.mapped() > 0,
            "the sender wrote into the shared receive buffer"
        );
        // A reducing receive reads straight from the mapping.
        let len = 1 << 20;
        let mut src = FileBuf::new(len, true);
        // SAFETY: the mapping holds len bytes, 4-byte aligned.
        let s = unsafe { std::slice::from_raw_parts_mut(src.ptr.cast::<f32>(), len / 4) };
        s.iter_mut().enumerate().for_each(|(i, x)| *x = i as f32);
        let mut dst = vec![2f32; len / 4];
        let mut sb = Shared::default();
        // SAFETY: buffers outlive the drive below.
        unsafe {
            a.post_send(src.ptr, len, T).unwrap();
            b.post_recv(dst.as_mut_ptr().cast(), len, Some(sum_f32()), T, &mut sb)
                .unwrap();
        }
        drive(&mut a, &mut b).unwrap();
        assert!(dst.iter().enumerate().all(|(i, &v)| v == i as f32 + 2.0));
        let _ = src.bytes();
    }

    #[test]
    fn a_mapped_reduction_is_shared_only_in_place_and_gives_the_receivers_bits() {
        let max = crate::exec::executor::reduce_fn(DataType::Fp32, ReduceOp::Max);
        let len = 1 << 20;
        let n = len / 4;
        // Max returns its left operand when either is NaN: a side that swapped the operands
        // would change these elements.
        let sent = |i: usize| {
            if i.is_multiple_of(97) {
                f32::NAN
            } else {
                (i % 1000) as f32
            }
        };
        let mine = |i: usize| {
            if i.is_multiple_of(89) {
                -f32::NAN
            } else {
                (i % 777) as f32
            }
        };
        // (where the receiver's left operand lies, whether the sender has the reduction,
        // whether the sender is asked and helps)
        #[derive(Clone, Copy, Debug, PartialEq)]
        enum Left {
            InDst,
            MappedFile,
            Plain,
        }
        for (left, knows, helps) in [
            (Left::InDst, true, true),
            (Left::MappedFile, true, true),
            (Left::Plain, true, false),
            (Left::InDst, false, false),
        ] {
            let what = format!("left {left:?} sender knows {knows}");
            let (mut a, mut b) = mapped_links();
            let mut src = FileBuf::new(len, true);
            let mut dst = FileBuf::new(len, true);
            let mut left_file = FileBuf::new(len, true);
            let mut left_plain = vec![0u8; len];
            let fill = |b: &mut [u8], f: &dyn Fn(usize) -> f32| {
                for (i, c) in b.chunks_exact_mut(4).enumerate() {
                    c.copy_from_slice(&f(i).to_ne_bytes());
                }
            };
            fill(src.bytes(), &sent);
            let lhs: *mut u8 = match left {
                Left::InDst => dst.ptr,
                Left::MappedFile => left_file.ptr,
                Left::Plain => left_plain.as_mut_ptr(),
            };
            // SAFETY: each holds len bytes.
            fill(unsafe { std::slice::from_raw_parts_mut(lhs, len) }, &mine);
            let mut want = vec![0u8; len];
            // SAFETY: three buffers of len bytes, whole f32 elements.
            unsafe { (max.kernel)(max.dtype, max.op, want.as_mut_ptr(), lhs, src.ptr, n) };
            let r = ReduceFn {
                left: lhs as isize - dst.ptr as isize,
                ..max
            };
            let hint = SendHint {
                reduce: knows.then_some(max),
                ..SendHint::default()
            };
            let mut sb = Shared::default();
            // SAFETY: buffers outlive the drive below.
            unsafe {
                a.post_send_hinted(src.ptr, len, T, hint).unwrap();
                b.post_recv(dst.ptr, len, Some(r), T, &mut sb).unwrap();
            }
            assert!(a.progress_tx() && a.tx[0].cma, "{what}");
            // The receiver asks for help (or not) and reduces a chunk itself.
            assert!(b.progress_rx(&mut sb).unwrap(), "{what}");
            let shared = b.rx.front().is_some_and(|op| op.shared);
            assert_eq!(shared, left != Left::Plain, "{what}");
            assert_eq!(a.help_peer().unwrap(), helps, "{what}");
            drive(&mut a, &mut b).unwrap();
            assert!(dst.bytes() == &want[..], "{what}");
            let _ = (left_file.bytes(), &left_plain);
        }
    }

    #[test]
    fn a_message_below_the_plain_minimum_goes_single_copy_only_from_a_mappable_buffer() {
        let (mut a, mut b) = mapped_links();
        let sum = crate::exec::executor::reduce_fn(DataType::Uint8, ReduceOp::Sum);
        let (lo, hi) = (MAPPED_COPY_MIN, SINGLE_COPY_MIN);
        // (length, mappable source, reducing receive, single copy wanted)
        for (len, mappable, reduce, want) in [
            (lo - 4, true, false, false),
            (lo, true, false, true),
            (lo, false, false, false),
            (hi - 4, true, true, true),
            (hi - 4, false, true, false),
        ] {
            let mut file = FileBuf::new(len, true);
            let mut plain = vec![0u8; len];
            let src = if mappable {
                file.bytes()
            } else {
                &mut plain[..]
            };
            src.iter_mut()
                .enumerate()
                .for_each(|(i, x)| *x = (i * 13) as u8);
            let mut dst: Vec<u8> = (0..len).map(|i| (i * 7) as u8).collect();
            let f = reduce.then_some(sum);
            // SAFETY: buffers outlive the drive below.
            unsafe {
                a.post_send(src.as_ptr(), len, T).unwrap();
                b.post_recv(dst.as_mut_ptr(), len, f, T, &mut Shared::default())
                    .unwrap();
            }
            assert!(a.progress_tx());
            let what = format!("len {len} mappable {mappable} reduce {reduce}");
            assert_eq!(a.tx.front().is_some_and(|op| op.cma), want, "{what}");
            if want {
                let slot = a.out.slot(a.tx[0].last_slot);
                // SAFETY: the slot is published and not consumed.
                assert_ne!(unsafe { read_hdr(slot) }.flags & FLAG_MAPPED, 0, "{what}");
            }
            drive(&mut a, &mut b).unwrap();
            let sent = |i: usize| (i * 13) as u8;
            let ok = (0..len).all(|i| match reduce {
                true => dst[i] == sent(i).wrapping_add((i * 7) as u8),
                false => dst[i] == sent(i),
            });
            assert!(ok, "{what}");
        }
        assert!(
            b.peer_mem.mapped() > 0,
            "the receiver mapped the sender's files"
        );
    }

    #[test]
    fn a_staged_reduce_reads_a_mappable_buffer_single_copy_within_its_limit() {
        let sum = crate::exec::executor::reduce_fn(DataType::Uint8, ReduceOp::Sum);
        let len = 256 << 10;
        // (one peer's limit, operation size, mappable source, the sender can reduce for its
        // receiver, single copy wanted)
        let (one, big) = (SINGLE_COPY_MAX_ONE_PEER, MAPPED_REDUCE_MAX_ONE_PEER + 1);
        for (max, op_bytes, mappable, helps, want) in [
            (one, len, true, false, true),
            (one, len, false, false, false),
            (one, big, true, false, false),
            (one, big, true, true, true),
            (one, big, false, true, false),
            (usize::MAX, big, true, false, true),
        ] {
            let (mut a, mut b) = mapped_links_max(max);
            let hint = SendHint {
                op_bytes,
                staged: true,
                reduce: helps.then_some(sum),
                ..SendHint::default()
            };
            let mut file = FileBuf::new(len, true);
            let mut plain = vec![0u8; len];
            let src = if mappable {
                file.bytes()
            } else {
                &mut plain[..]
            };
            src.iter_mut()
                .enumerate()
                .for_each(|(i, x)| *x = (i * 13) as u8);
            let mut dst: Vec<u8> = (0..len).map(|i| (i * 7) as u8).collect();
            // SAFETY: buffers outlive the drive below.
            unsafe {
                a.post_send_hinted(src.as_ptr(), len, T, hint).unwrap();
                b.post_recv(dst.as_mut_ptr(), len, Some(sum), T, &mut Shared::default())
                    .unwrap();
            }
            assert!(a.progress_tx());
            let what = format!("max {max} op {op_bytes} mappable {mappable} helps {helps}");
            assert_eq!(a.tx.front().is_some_and(|op| op.cma), want, "{what}");
            if want {
                let slot = a.out.slot(a.tx[0].last_slot);
                // SAFETY: the slot is published and not consumed.
                assert_ne!(unsafe { read_hdr(slot) }.flags & FLAG_MAPPED, 0, "{what}");
            }
            drive(&mut a, &mut b).unwrap();
            let ok = (0..len).all(|i| dst[i] == ((i * 13) as u8).wrapping_add((i * 7) as u8));
            assert!(ok, "{what}");
            assert_eq!(b.peer_mem.mapped() > 0, want, "{what}");
        }
    }

    #[test]
    fn a_reducing_exchange_reads_mappable_buffers_single_copy_past_the_one_peer_limit() {
        let sum = crate::exec::executor::reduce_fn(DataType::Uint8, ReduceOp::Sum);
        let len = SINGLE_COPY_MAX_ONE_PEER + 4100;
        let hint = SendHint {
            op_bytes: 4 * len,
            ..SendHint::default()
        };
        let fill = |b: &mut [u8], k: usize| {
            b.iter_mut()
                .enumerate()
                .for_each(|(i, x)| *x = (i * k + 1) as u8)
        };
        // (both ranks send, mappable sources, single copy wanted)
        for (exchange, mappable, want) in [
            (true, true, true),
            (true, false, false),
            (false, true, false),
        ] {
            let (mut a, mut b) = mapped_links_max(SINGLE_COPY_MAX_ONE_PEER);
            let (mut fa, mut fb) = (FileBuf::new(len, true), FileBuf::new(len, true));
            let (mut pa, mut pb) = (vec![0u8; len], vec![0u8; len]);
            let (sa, sb) = if mappable {
                (fa.bytes(), fb.bytes())
            } else {
                (&mut pa[..], &mut pb[..])
            };
            fill(sa, 13);
            fill(sb, 29);
            let (mut da, mut db) = (vec![5u8; len], vec![9u8; len]);
            let (mut sh_a, mut sh_b) = (Shared::default(), Shared::default());
            // SAFETY: buffers outlive the drive below.
            unsafe {
                a.post_send_hinted(sa.as_ptr(), len, T, hint).unwrap();
                b.post_recv(db.as_mut_ptr(), len, Some(sum), T, &mut sh_b)
                    .unwrap();
                if exchange {
                    b.post_send_hinted(sb.as_ptr(), len, T, hint).unwrap();
                    a.post_recv(da.as_mut_ptr(), len, Some(sum), T, &mut sh_a)
                        .unwrap();
                }
            }
            let what = format!("exchange {exchange} mappable {mappable}");
            assert!(a.progress_tx(), "{what}");
            assert_eq!(a.tx.front().is_some_and(|op| op.cma), want, "{what}");
            if want {
                let slot = a.out.slot(a.tx[0].last_slot);
                // SAFETY: the slot is published and not consumed.
                assert_ne!(unsafe { read_hdr(slot) }.flags & FLAG_MAPPED, 0, "{what}");
            }
            drive(&mut a, &mut b).unwrap();
            let ok = |d: &[u8], k: usize, init: u8| {
                (0..len).all(|i| d[i] == ((i * k + 1) as u8).wrapping_add(init))
            };
            assert!(ok(&db, 13, 9), "{what}: a to b");
            if exchange {
                assert!(ok(&da, 29, 5), "{what}: b to a");
            }
            assert_eq!(b.peer_mem.mapped() > 0, want, "{what}");
        }
    }

    #[test]
    fn an_unsealed_buffer_goes_by_the_kernel_copy_and_arrives_the_same() {
        let (mut a, mut b) = mapped_links();
        let len = 300_000;
        let mut src = FileBuf::new(len, false);
        for (i, x) in src.bytes().iter_mut().enumerate() {
            *x = (i * 13 + 1) as u8;
        }
        let mut dst = vec![0u8; len];
        // SAFETY: buffers outlive the drive below.
        unsafe {
            a.post_send(src.ptr, len, T).unwrap();
            b.post_recv(dst.as_mut_ptr(), len, None, T, &mut Shared::default())
                .unwrap();
        }
        drive(&mut a, &mut b).unwrap();
        assert!(dst == src.bytes());
        assert_eq!(b.peer_mem.mapped(), 0);
    }

    #[test]
    fn a_descriptor_naming_another_file_or_range_is_a_clear_error() {
        let other = FileBuf::new(4096, true);
        for corrupt in 0..3 {
            let (mut a, mut b) = mapped_links();
            let len = 200_000;
            let src = FileBuf::new(len, true);
            let mut dst = vec![0u8; len];
            // SAFETY: buffers outlive the progress calls below.
            unsafe {
                a.post_send(src.ptr, len, T).unwrap();
                b.post_recv(dst.as_mut_ptr(), len, None, T, &mut Shared::default())
                    .unwrap();
            }
            assert!(a.progress_tx());
            let at = a.out.slot(a.tx[0].last_slot).wrapping_add(DESC_OFF);
            // SAFETY: the published slot's descriptor, rewritten as a hostile sender would.
            unsafe {
                let mut d = ShareDesc::read(at);
                match corrupt {
                    0 => d.ino ^= 1,
                    1 => d.offset = 4096,
                    _ => d.fd = other.fd,
                }
                d.write(at);
            }
            let e = b.progress_rx(&mut Shared::default()).unwrap_err();
            assert_eq!(e.kind, ErrorKind::Internal, "{e:?}");
            assert!(e.msg.contains("peer rank 0 named a buffer"), "{}", e.msg);
            assert!(dst.iter().all(|&x| x == 0), "nothing delivered");
        }
    }

    #[test]
    fn geometry_respects_the_budget() {
        let g = Geometry::new(7, 1 << 20);
        assert!(7 * NSLOTS * g.slot_bytes <= 1 << 20);
        assert_eq!(g.slot_bytes % 64, 0);
        let g = Geometry::new(1, 200 << 20);
        assert_eq!(NSLOTS * g.slot_bytes, MAX_RING_BYTES);
    }
}
