//! Operation traces: with `HCCL_TRACE_FILE=PATH` every operation a rank runs is written to
//! PATH as Chrome trace-event JSON (open it in Perfetto or `chrome://tracing`).
//!
//! In the path, `%r` becomes the communicator's rank and `%p` the process id, so ranks do not
//! share a file. The file is one JSON array, valid after every operation: one "complete" event
//! (`"ph": "X"`, begin `ts` and duration `dur` in microseconds of wall-clock time, so files of
//! several ranks line up) per operation, with its op, dtype, count, reduction, algorithm, link
//! level and outcome, and one per step of its schedule, with the peers it exchanged with, the
//! bytes each way and the link kind. `pid` is the rank, `tid` numbers the communicators that
//! write to the file (named by metadata events).
//!
//! Communicators of one process that resolve to the same path share one open file. A file that
//! another process holds (two processes whose communicators have the same rank, as with torch's
//! process groups: use `%p`) is not shared: this process writes to `PATH.<pid>` instead. When the
//! variable is unset nothing here runs: the executor gets no step log and records nothing.

use std::fs::File;
use std::io::{Seek, SeekFrom, Write};
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Weak};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use parking_lot::Mutex;
use serde_json::{json, Value};

use crate::base::error::{Error, ErrorKind, Result};
use crate::transport::{LinkInfo, Reach};

/// What one peer exchanged with this rank in one step.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PeerTraffic {
    /// The peer's rank.
    pub peer: u32,
    /// Bytes sent to it.
    pub sent: u64,
    /// Bytes received from it.
    pub received: u64,
    /// The link it is reached by.
    pub link: LinkInfo,
}

/// One executed step of a schedule.
#[derive(Clone, Debug)]
pub struct StepTrace {
    /// When its local actions started.
    pub start: Instant,
    /// When its last transfer completed (or failed).
    pub end: Instant,
    /// Peers it exchanged with, in first-mention order.
    pub peers: Vec<PeerTraffic>,
}

/// One operation of one rank, as written to the trace.
#[derive(Clone, Debug)]
pub struct OpTrace<'a> {
    /// Operation name (`AllReduce`, ...).
    pub op: &'a str,
    /// Element type name.
    pub dtype: &'a str,
    /// Elements (summed over blocks for the V forms and point-to-point items).
    pub count: u64,
    /// Reduction name, for reducing operations.
    pub reduce: Option<&'a str>,
    /// Algorithms of the schedules run (one per segment).
    pub algorithms: &'a [&'static str],
    /// Start of the operation (after it had the communicator).
    pub start: Instant,
    /// End of the operation.
    pub end: Instant,
    /// The error, if it failed.
    pub error: Option<&'a str>,
    /// Its steps, in order, over every segment.
    pub steps: &'a [StepTrace],
}

/// The link level of an operation: `level0` when every peer is on this host, `level1` when
/// every peer is reached over the network, both when mixed, `local` without peers.
fn level_of(steps: &[StepTrace]) -> &'static str {
    let peers = || steps.iter().flat_map(|s| &s.peers).map(|p| p.link.reach);
    let net = peers().any(|k| k == Reach::Network);
    let host = peers().any(|k| matches!(k, Reach::Process | Reach::Host));
    match (host, net) {
        (true, true) => "level0+level1",
        (false, true) => "level1",
        (true, false) => "level0",
        (false, false) => "local",
    }
}

/// An open trace file and where the next events go.
struct FileState {
    file: File,
    /// Offset of the closing `]` of the array.
    end: u64,
    /// No event written yet (the next one needs no comma).
    empty: bool,
    /// Communicator names attached, by `tid`.
    comms: Vec<String>,
    /// A write failed once (logged); later failures are silent.
    failed: bool,
}

/// A trace file shared by the communicators of this process that resolve to its path.
pub struct TraceFile {
    path: PathBuf,
    /// `pid` of the events: the rank the path was resolved for.
    rank: u32,
    /// Wall-clock microseconds at `epoch`.
    wall_us: f64,
    epoch: Instant,
    state: Mutex<FileState>,
}

/// The files open in this process, by resolved path.
static OPEN: Mutex<Vec<(PathBuf, Weak<TraceFile>)>> = Mutex::new(Vec::new());

/// The trace sink of one communicator: its file and its `tid` there.
#[derive(Clone)]
pub struct Tracer {
    file: Arc<TraceFile>,
    tid: usize,
}

/// `template` with `%r` replaced by `rank` and `%p` by this process's id.
pub fn resolve(template: &str, rank: u32) -> PathBuf {
    PathBuf::from(
        template
            .replace("%r", &rank.to_string())
            .replace("%p", &std::process::id().to_string()),
    )
}

impl Tracer {
    /// The tracer of communicator `comm` (rank `rank`) for path template `template`: opens the
    /// file (truncating it) unless this process has it open already.
    pub fn open(template: &str, rank: u32, comm: &str) -> Result<Tracer> {
        let path = resolve(template, rank);
        let mut open = OPEN.lock();
        open.retain(|(_, f)| f.strong_count() > 0);
        let file = match open
            .iter()
            .find(|(p, _)| *p == path)
            .and_then(|(_, f)| f.upgrade())
        {
            Some(f) => f,
            None => {
                let f = Arc::new(TraceFile::create(&path, rank)?);
                open.push((path, Arc::downgrade(&f)));
                f
            }
        };
        drop(open);
        let tid = file.attach(comm);
        Ok(Tracer { file, tid })
    }

    /// Where the events go.
    pub fn path(&self) -> &Path {
        &self.file.path
    }

    /// Appends one operation and its steps.
    pub fn record(&self, op: &OpTrace<'_>) {
        self.file.append(&self.file.op_events(self.tid, op));
    }
}

impl TraceFile {
    /// Creates the file (or `PATH.<pid>` when another process holds `path`) with an empty
    /// array and the process-name event.
    fn create(path: &Path, rank: u32) -> Result<TraceFile> {
        let fail = |p: &Path, e: std::io::Error| {
            Error::new(
                ErrorKind::OpenFile,
                format!("HCCL_TRACE_FILE: cannot open {}: {e}", p.display()),
            )
        };
        let open = |p: &Path| {
            std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false)
                .open(p)
        };
        let mut path = path.to_path_buf();
        let mut file = open(&path).map_err(|e| fail(&path, e))?;
        if !lock(&file) {
            let own = PathBuf::from(format!("{}.{}", path.display(), std::process::id()));
            log::warn!(
                "HCCL_TRACE_FILE: {} is in use by another process; writing {} (put %p in the \
                 path to give each process its own file)",
                path.display(),
                own.display()
            );
            path = own;
            file = open(&path).map_err(|e| fail(&path, e))?;
            if !lock(&file) {
                return Err(Error::new(
                    ErrorKind::OpenFile,
                    format!("HCCL_TRACE_FILE: {} is in use too", path.display()),
                ));
            }
        }
        file.set_len(0).map_err(|e| fail(&path, e))?;
        let epoch = Instant::now();
        let wall_us = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64() * 1e6);
        let t = TraceFile {
            path,
            rank,
            wall_us,
            epoch,
            state: Mutex::new(FileState {
                file,
                end: 0,
                empty: true,
                comms: Vec::new(),
                failed: false,
            }),
        };
        {
            let mut st = t.state.lock();
            st.file.write_all(b"[\n]\n").map_err(|e| fail(&t.path, e))?;
            st.end = 2;
        }
        t.append(&[json!({
            "name": "process_name", "ph": "M", "pid": rank, "tid": 0,
            "args": { "name": format!("rank {rank}") },
        })]);
        log::info!("rank {rank}: tracing operations to {}", t.path.display());
        Ok(t)
    }

    /// Registers a communicator and returns its `tid`.
    fn attach(&self, comm: &str) -> usize {
        let tid = {
            let mut st = self.state.lock();
            st.comms.push(comm.to_string());
            st.comms.len() - 1
        };
        self.append(&[json!({
            "name": "thread_name", "ph": "M", "pid": self.rank, "tid": tid,
            "args": { "name": format!("comm {comm}") },
        })]);
        tid
    }

    /// Microseconds of wall-clock time at `t`.
    fn ts(&self, t: Instant) -> f64 {
        let since = t.saturating_duration_since(self.epoch).as_secs_f64() * 1e6;
        let before = self.epoch.saturating_duration_since(t).as_secs_f64() * 1e6;
        self.wall_us + since - before
    }

    fn op_events(&self, tid: usize, op: &OpTrace<'_>) -> Vec<Value> {
        let dur = |a: Instant, b: Instant| b.saturating_duration_since(a).as_secs_f64() * 1e6;
        let (sent, received) = op
            .steps
            .iter()
            .flat_map(|s| &s.peers)
            .fold((0, 0), |acc, p| (acc.0 + p.sent, acc.1 + p.received));
        let mut events = Vec::with_capacity(op.steps.len() + 1);
        events.push(json!({
            "name": op.op, "cat": "op", "ph": "X", "pid": self.rank, "tid": tid,
            "ts": self.ts(op.start), "dur": dur(op.start, op.end),
            "args": {
                "op": op.op, "dtype": op.dtype, "count": op.count, "reduce": op.reduce,
                "algorithm": op.algorithms.join("+"), "level": level_of(op.steps),
                "steps": op.steps.len(), "sent": sent, "received": received,
                "error": op.error,
            },
        }));
        for (i, s) in op.steps.iter().enumerate() {
            let peers: Vec<Value> = s
                .peers
                .iter()
                .map(|p| {
                    json!({
                        "peer": p.peer, "sent": p.sent, "received": p.received,
                        "link": p.link.name,
                    })
                })
                .collect();
            events.push(json!({
                "name": format!("step {i}"), "cat": "step", "ph": "X", "pid": self.rank,
                "tid": tid, "ts": self.ts(s.start), "dur": dur(s.start, s.end),
                "args": {
                    "op": op.op, "index": i, "peers": peers,
                    "sent": s.peers.iter().map(|p| p.sent).sum::<u64>(),
                    "received": s.peers.iter().map(|p| p.received).sum::<u64>(),
                },
            }));
        }
        events
    }

    /// Writes `events` before the closing `]`, so the file stays one valid JSON array.
    fn append(&self, events: &[Value]) {
        let mut text = String::new();
        let mut st = self.state.lock();
        for (i, e) in events.iter().enumerate() {
            if !(st.empty && i == 0) {
                text.push_str(",\n");
            }
            text.push_str(&e.to_string());
        }
        if text.is_empty() {
            return;
        }
        let tail = text.len() as u64;
        text.push_str("\n]\n");
        let at = st.end;
        let res = st
            .file
            .seek(SeekFrom::Start(at))
            .and_then(|_| st.file.write_all(text.as_bytes()));
        match res {
            Ok(()) => {
                st.end = at + tail + 1;
                st.empty = false;
            }
            Err(e) if !st.failed => {
                st.failed = true;
                log::error!(
                    "HCCL_TRACE_FILE: writing {} failed: {e}; later events may be missing",
                    self.path.display()
                );
            }
            Err(_) => {}
        }
    }
}

/// Takes an exclusive advisory lock on `f` without waiting; false when another process has it.
fn lock(f: &File) -> bool {
    // SAFETY: flock on a file descriptor this process owns; no memory is passed.
    unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) == 0 }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn tmp(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("hccl-trace-unit-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        d.join(name)
    }

    fn events(p: &Path) -> Vec<Value> {
        let text = std::fs::read_to_string(p).unwrap();
        serde_json::from_str::<Vec<Value>>(&text).unwrap_or_else(|e| panic!("{e}:\n{text}"))
    }

    #[test]
    fn path_placeholders() {
        let pid = std::process::id();
        assert_eq!(
            resolve("/t/trace.%r.%p.json", 3),
            PathBuf::from(format!("/t/trace.3.{pid}.json"))
        );
        assert_eq!(resolve("plain.json", 3), PathBuf::from("plain.json"));
    }

    #[test]
    fn file_stays_valid_json_after_every_operation() {
        let path = tmp("ops.%r.json");
        let t = Tracer::open(path.to_str().unwrap(), 2, "c0").unwrap();
        let resolved = tmp("ops.2.json");
        assert_eq!(t.path(), resolved);
        // Metadata only so far.
        assert_eq!(events(&resolved).len(), 2);
        let t0 = Instant::now();
        let step = |a: u64, b: u64, peers: Vec<PeerTraffic>| StepTrace {
            start: t0 + Duration::from_micros(a),
            end: t0 + Duration::from_micros(b),
            peers,
        };
        let p = |peer, sent, received, name, reach| PeerTraffic {
            peer,
            sent,
            received,
            link: LinkInfo {
                name,
                reach,
                single_copy: false,
            },
        };
        let steps = [
            step(
                10,
                20,
                vec![
                    p(3, 64, 0, "shm", Reach::Host),
                    p(1, 0, 64, "shm", Reach::Host),
                ],
            ),
            step(20, 35, vec![p(3, 64, 64, "tcp", Reach::Network)]),
        ];
        let op = OpTrace {
            op: "AllReduce",
            dtype: "fp32",
            count: 32,
            reduce: Some("sum"),
            algorithms: &["ring"],
            start: t0,
            end: t0 + Duration::from_micros(40),
            error: None,
            steps: &steps,
        };
        t.record(&op);
        let ev = events(&resolved);
        assert_eq!(ev.len(), 5);
        let o = &ev[2];
        assert_eq!(
            (o["ph"].as_str(), o["cat"].as_str()),
            (Some("X"), Some("op"))
        );
        assert_eq!(o["pid"], 2);
        assert_eq!(o["args"]["algorithm"], "ring");
        assert_eq!(o["args"]["level"], "level0+level1");
        assert_eq!(o["args"]["count"], 32);
        assert_eq!(o["args"]["sent"], 128);
        assert_eq!(o["args"]["received"], 128);
        assert!((o["dur"].as_f64().unwrap() - 40.0).abs() < 1e-3);
        let s1 = &ev[4];
        assert_eq!(s1["name"], "step 1");
        assert_eq!(s1["args"]["peers"][0]["link"], "tcp");
        let ts = |v: &Value| v["ts"].as_f64().unwrap();
        assert!((ts(s1) - ts(o) - 20.0).abs() < 1e-3);
        // A second communicator of the same rank shares the file, under its own tid.
        let t2 = Tracer::open(path.to_str().unwrap(), 2, "c1").unwrap();
        t2.record(&OpTrace {
            error: Some("peer lost"),
            steps: &[],
            ..op
        });
        let ev = events(&resolved);
        assert_eq!(ev.len(), 7);
        assert_eq!(ev[5]["args"]["name"], "comm c1");
        assert_eq!(ev[6]["tid"], 1);
        assert_eq!(ev[6]["args"]["error"], "peer lost");
        assert_eq!(ev[6]["args"]["level"], "local");
        drop((t, t2));
        // Reopened once every user is gone: a fresh file.
        let t3 = Tracer::open(path.to_str().unwrap(), 2, "c2").unwrap();
        assert_eq!(events(t3.path()).len(), 2);
    }

    #[test]
    fn unwritable_path_is_an_error_naming_it() {
        let Err(e) = Tracer::open("/nonexistent-dir/trace.json", 0, "c") else {
            panic!("opened a file in a missing directory");
        };
        assert_eq!(e.kind, ErrorKind::OpenFile);
        assert!(e.msg.contains("/nonexistent-dir/trace.json"), "{}", e.msg);
    }
}
