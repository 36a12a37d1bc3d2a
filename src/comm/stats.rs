//! Per-communicator counters: operations, time spent in them, and payload bytes sent and
//! received per link level (level0: ranks of the same host as the algorithms see it; level1:
//! other hosts). Bytes are what the schedules move, counted once per finished operation; a
//! rank's transfers to itself are not traffic.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use crate::algo::{Action, Schedule, Topo};

/// Bytes a schedule moves, per link level.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Traffic {
    /// Bytes sent, `[level0, level1]`.
    pub sent: [u64; 2],
    /// Bytes received, `[level0, level1]`.
    pub recv: [u64; 2],
}

impl Traffic {
    /// What `sched` moves for rank `me`.
    pub fn of(sched: &Schedule, me: u32, topo: &Topo) -> Traffic {
        let mut t = Traffic::default();
        let level = |p: u32| usize::from(!topo.same_host(me, p));
        for a in sched.steps.iter().flat_map(|s| &s.actions) {
            match *a {
                Action::Send { peer, src } if peer != me => t.sent[level(peer)] += src.len as u64,
                Action::Recv { peer, dst } | Action::RecvReduce { peer, dst } if peer != me => {
                    t.recv[level(peer)] += dst.len as u64
                }
                _ => {}
            }
        }
        t
    }

    /// The sum of both.
    pub fn plus(self, o: Traffic) -> Traffic {
        Traffic {
            sent: [self.sent[0] + o.sent[0], self.sent[1] + o.sent[1]],
            recv: [self.recv[0] + o.recv[0], self.recv[1] + o.recv[1]],
        }
    }
}

/// The counters of one communicator rank since it was created (or last reset).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CommStats {
    /// Operations that finished successfully.
    pub ops: u64,
    /// Of those, AllReduces that ran compressed.
    pub compressed_ops: u64,
    /// Operations that failed.
    pub failed_ops: u64,
    /// Payload bytes, per link level.
    pub traffic: Traffic,
    /// Nanoseconds spent running operations (from this rank's start to its end of each),
    /// except those of the small-message path, which read no clock (a clock read costs about
    /// as much as the rest of such a call).
    pub busy_ns: u64,
}

impl CommStats {
    /// Counts one operation.
    pub fn record(&mut self, ok: bool, compressed: bool, traffic: Traffic, ns: u64) {
        self.busy_ns += ns;
        if ok {
            self.ops += 1;
            self.compressed_ops += u64::from(compressed);
            self.traffic = self.traffic.plus(traffic);
        } else {
            self.failed_ops += 1;
        }
    }
}

/// [`CommStats`] kept where readers need no lock: one cell per counter. Only the thread whose
/// turn it is (see [`super::order`]) records, so a record is plain loads and stores, with no
/// read-modify-write; a reader may see one operation half counted across fields.
#[derive(Debug, Default)]
pub struct StatCells {
    ops: AtomicU64,
    compressed_ops: AtomicU64,
    failed_ops: AtomicU64,
    sent: [AtomicU64; 2],
    recv: [AtomicU64; 2],
    busy_ns: AtomicU64,
}

/// Adds `v` to `cell`, written by one thread at a time.
fn bump(cell: &AtomicU64, v: u64) {
    cell.store(cell.load(Relaxed).wrapping_add(v), Relaxed);
}

impl StatCells {
    /// Counts one operation (see [`CommStats::record`]). Callers must not record concurrently.
    pub fn record(&self, ok: bool, compressed: bool, traffic: Traffic, ns: u64) {
        if ns > 0 {
            bump(&self.busy_ns, ns);
        }
        if !ok {
            bump(&self.failed_ops, 1);
            return;
        }
        bump(&self.ops, 1);
        if compressed {
            bump(&self.compressed_ops, 1);
        }
        for l in 0..2 {
            bump(&self.sent[l], traffic.sent[l]);
            bump(&self.recv[l], traffic.recv[l]);
        }
    }

    /// The counters now.
    pub fn get(&self) -> CommStats {
        let r = |c: &AtomicU64| c.load(Relaxed);
        CommStats {
            ops: r(&self.ops),
            compressed_ops: r(&self.compressed_ops),
            failed_ops: r(&self.failed_ops),
            traffic: Traffic {
                sent: [r(&self.sent[0]), r(&self.sent[1])],
                recv: [r(&self.recv[0]), r(&self.recv[1])],
            },
            busy_ns: r(&self.busy_ns),
        }
    }

    /// Starts every counter over from zero. Callers must not record concurrently.
    pub fn reset(&self) {
        let cells = [
            &self.ops,
            &self.compressed_ops,
            &self.failed_ops,
            &self.busy_ns,
        ];
        for c in cells.into_iter().chain(&self.sent).chain(&self.recv) {
            c.store(0, Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algo::{Buf, Span};

    #[test]
    fn traffic_is_split_by_host_and_skips_self() {
        let topo = Topo::sized(&[2, 2]);
        let mut s = Schedule::new("t");
        let sp = |len| Span::new(Buf::Send, 0, len);
        s.step().extend([
            Action::Send {
                peer: 1,
                src: sp(10),
            },
            Action::Send {
                peer: 2,
                src: sp(100),
            },
            Action::Send {
                peer: 0,
                src: sp(7),
            },
            Action::Recv {
                peer: 0,
                dst: sp(7),
            },
            Action::RecvReduce {
                peer: 3,
                dst: sp(1000),
            },
            Action::Recv {
                peer: 1,
                dst: sp(1),
            },
        ]);
        let t = Traffic::of(&s, 0, &topo);
        assert_eq!(t.sent, [10, 100]);
        assert_eq!(t.recv, [1, 1000]);
        let mut st = CommStats::default();
        st.record(true, false, t, 5);
        st.record(false, true, t, 5);
        st.record(true, true, t, 5);
        assert_eq!(
            (st.ops, st.compressed_ops, st.failed_ops, st.busy_ns),
            (2, 1, 1, 15)
        );
        assert_eq!(st.traffic.sent, [20, 200]);
        let cells = StatCells::default();
        cells.record(true, false, t, 5);
        cells.record(false, true, t, 5);
        cells.record(true, true, t, 5);
        assert_eq!(cells.get(), st);
        cells.reset();
        assert_eq!(cells.get(), CommStats::default());
    }
}
