//! Runs the schedules of all ranks of a collective in one thread, with no links, moving real
//! bytes. Used to check algorithms exhaustively (every rank count, every shape) and to detect
//! deadlocks and mismatched sends/receives before any network is involved.

use std::collections::VecDeque;

use super::schedule::{Action, Buf, Schedule, Span};

/// Buffers of one simulated rank.
#[derive(Clone, Debug, Default)]
pub struct RankBufs {
    /// Input buffer.
    pub send: Vec<u8>,
    /// Output buffer.
    pub recv: Vec<u8>,
    /// Scratch area (sized from the schedule).
    pub scratch: Vec<u8>,
    /// Extra buffers (point-to-point items).
    pub ext: Vec<Vec<u8>>,
    /// When true, the input buffer *is* the output buffer (in-place call).
    pub in_place: bool,
}

/// The reduction applied by `RecvReduce`/`Reduce`: `dst = dst op src` on byte slices.
pub type SimReduce<'a> = &'a dyn Fn(&mut [u8], &[u8]);

fn buf_mut(b: &mut RankBufs, which: Buf) -> &mut Vec<u8> {
    match which {
        Buf::Send if b.in_place => &mut b.recv,
        Buf::Send => &mut b.send,
        Buf::Recv => &mut b.recv,
        Buf::Scratch => &mut b.scratch,
        Buf::Ext(i) => &mut b.ext[i as usize],
    }
}

fn read(b: &mut RankBufs, sp: Span) -> Result<Vec<u8>, String> {
    let v = buf_mut(b, sp.buf);
    v.get(sp.off..sp.off + sp.len)
        .map(<[u8]>::to_vec)
        .ok_or_else(|| format!("read {sp:?} outside buffer of {} bytes", v.len()))
}

fn write(b: &mut RankBufs, sp: Span, data: &[u8], reduce: Option<SimReduce>) -> Result<(), String> {
    let v = buf_mut(b, sp.buf);
    let len = v.len();
    let dst = v
        .get_mut(sp.off..sp.off + sp.len)
        .ok_or_else(|| format!("write {sp:?} outside buffer of {len} bytes"))?;
    match reduce {
        None => dst.copy_from_slice(data),
        Some(r) => r(dst, data),
    }
    Ok(())
}

/// Runs `scheds[r]` for every rank r over `bufs[r]`; errors on deadlock, size mismatch or an
/// out-of-bounds span.
pub fn run(scheds: &[Schedule], bufs: &mut [RankBufs], reduce: SimReduce) -> Result<(), String> {
    let n = scheds.len();
    for (s, b) in scheds.iter().zip(bufs.iter_mut()) {
        if b.scratch.len() < s.scratch {
            b.scratch.resize(s.scratch, 0);
        }
    }
    // mailbox[src * n + dst]: payloads in flight, with the sender's step index.
    let mut mail: Vec<VecDeque<Vec<u8>>> = vec![VecDeque::new(); n * n];
    let mut at = vec![0usize; n];
    let mut posted = vec![false; n];
    // Per rank: receives still open in its current step, and sends not yet consumed.
    let mut open_recv: Vec<VecDeque<Action>> = vec![VecDeque::new(); n];
    let mut unconsumed: Vec<Vec<usize>> = vec![vec![0; n]; n];
    loop {
        let mut progress = false;
        let mut all_done = true;
        for r in 0..n {
            if at[r] >= scheds[r].steps.len() {
                continue;
            }
            all_done = false;
            let step = &scheds[r].steps[at[r]];
            if !posted[r] {
                for a in step.actions.iter().filter(|a| !a.is_comm()) {
                    match *a {
                        Action::Copy { src, dst } => {
                            let d = read(&mut bufs[r], src)?;
                            write(&mut bufs[r], dst, &d, None)?;
                        }
                        Action::Reduce { dst, src } => {
                            let d = read(&mut bufs[r], src)?;
                            write(&mut bufs[r], dst, &d, Some(reduce))?;
                        }
                        _ => unreachable!(),
                    }
                }
                for a in &step.actions {
                    match *a {
                        Action::Send { peer, src } => {
                            let d = read(&mut bufs[r], src)?;
                            mail[r * n + peer as usize].push_back(d);
                            unconsumed[r][peer as usize] += 1;
                        }
                        Action::Recv { .. } | Action::RecvReduce { .. } => {
                            open_recv[r].push_back(*a)
                        }
                        _ => {}
                    }
                }
                posted[r] = true;
                progress = true;
            }
            let mut still = VecDeque::new();
            let mut blocked = vec![false; n];
            while let Some(a) = open_recv[r].pop_front() {
                let (peer, dst, red) = match a {
                    Action::Recv { peer, dst } => (peer as usize, dst, false),
                    Action::RecvReduce { peer, dst } => (peer as usize, dst, true),
                    _ => unreachable!(),
                };
                if blocked[peer] {
                    still.push_back(a);
                    continue;
                }
                match mail[peer * n + r].pop_front() {
                    Some(d) => {
                        if d.len() != dst.len {
                            return Err(format!(
                                "rank {r} step {} expected {} bytes from {peer}, got {}",
                                at[r],
                                dst.len,
                                d.len()
                            ));
                        }
                        write(&mut bufs[r], dst, &d, if red { Some(reduce) } else { None })?;
                        unconsumed[peer][r] -= 1;
                        progress = true;
                    }
                    None => {
                        blocked[peer] = true;
                        still.push_back(a);
                    }
                }
            }
            open_recv[r] = still;
            if open_recv[r].is_empty() && unconsumed[r].iter().all(|&c| c == 0) {
                at[r] += 1;
                posted[r] = false;
                progress = true;
            }
        }
        if all_done {
            if let Some(i) = mail.iter().position(|m| !m.is_empty()) {
                return Err(format!(
                    "rank {} sent to rank {} a message nobody received",
                    i / n,
                    i % n
                ));
            }
            return Ok(());
        }
        if !progress {
            let stuck: Vec<(usize, usize)> = (0..n)
                .filter(|&r| at[r] < scheds[r].steps.len())
                .map(|r| (r, at[r]))
                .collect();
            return Err(format!("deadlock: (rank, step) stuck at {stuck:?}"));
        }
    }
}
