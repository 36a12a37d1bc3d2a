//! `hccl_test`-compatible performance tester for the HCCL library.
//!
//! One binary per operation (`all_reduce_test`, `all_gather_test`, ...) calls [`main`] with its
//! [`Op`]; everything else is shared:
//! - [`cli`]: the vendor's flags, and the size sweep;
//! - [`hccl::comm::world`]: ranks from MPI / torchrun / our launcher's variables, and shipping the root info;
//! - [`ops`]: buffer layouts and the library calls of each operation;
//! - [`check`]: input patterns and independently computed expected results;
//! - [`barrier_order`]: the barrier's check (nobody leaves before the last rank entered);
//! - [`report`]: the table, progress bar ([`progress`]), CSV and JSON.
//!
//! Companion tools: [`launcher`] (`hcclrun`), [`diag`] (`hccl_diag`), [`plot`] (`hccl_plot`),
//! [`simtable`] (`hccl_sim`'s outputs).
//!
//! Exit status: 0 when every checked size succeeded, 1 on a failed check or a library error,
//! 2 on a usage error.

// Every unsafe operation sits in an `unsafe {}` block that says why it is sound.
#![deny(unsafe_op_in_unsafe_fn, clippy::undocumented_unsafe_blocks)]
#![warn(missing_docs)]

pub mod barrier_order;
pub mod check;
pub mod cli;
pub mod compress;
pub mod diag;
pub mod dtype;
pub mod launcher;
pub mod mem;
pub mod ops;
pub mod plot;
pub mod progress;
pub mod report;
pub mod simtable;

use std::ffi::CStr;
use std::process::ExitCode;
use std::ptr::null_mut;
use std::time::Instant;

use hccl::ffi::coll_api::{HcclAllReduce, HcclBarrier};
use hccl::ffi::comm_api::{
    HcclCommDestroy, HcclCommInitRootInfo, HcclGetErrorString, HcclGetRootInfo,
};
use hccl::ffi::types::{HcclComm, HcclResult, HcclRootInfo, HCCL_ROOT_INFO_BYTES};

pub use cli::{Config, Defaults};
pub use ops::Op;

use check::{Oracle, Pattern};
use hccl::comm::world::{self, World};
use ops::Layout;
use report::{CheckResult, Reporter, Row, RunInfo};

/// Environment variable that makes the tester corrupt one output element before checking
/// (value `corrupt`), so tests can prove that a failure is reported.
pub const FAULT_ENV: &str = "HCCL_TEST_FAULT_INJECT";

/// Makes a closed stdout or stderr (`tool | head -1`) end the process as it ends a C tool:
/// killed by `SIGPIPE`, which shells do not report, instead of a panic message. Rust ignores
/// `SIGPIPE`, so a write to a closed pipe fails with `EPIPE` and `print!` panics; restoring the
/// signal's default instead would also let a socket write to a dead peer kill the process.
/// Every tool's `main` calls this first.
pub fn quiet_on_closed_pipe() {
    let next = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let p = info.payload();
        let msg = p
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| p.downcast_ref::<&str>().copied())
            .unwrap_or("");
        let epipe = std::io::Error::from_raw_os_error(libc::EPIPE).to_string();
        if msg.starts_with("failed printing to std") && msg.ends_with(&epipe) {
            die_of_sigpipe();
        }
        next(info)
    }));
}

/// Ends the process as a C tool writing to a closed pipe ends: killed by `SIGPIPE`.
pub fn die_of_sigpipe() -> ! {
    // SAFETY: restoring a signal's default action and raising it have no preconditions.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
        libc::raise(libc::SIGPIPE);
    }
    std::process::exit(128 + libc::SIGPIPE)
}

/// Entry point of an `<op>_test` binary.
pub fn main(op: Op) -> ExitCode {
    run(op, &Defaults::vendor())
}

/// Runs `op` with the process's arguments over `defaults`.
pub fn run(op: Op, defaults: &Defaults) -> ExitCode {
    quiet_on_closed_pipe();
    let mut args = std::env::args_os();
    let bin = args
        .next()
        .and_then(|a| {
            std::path::Path::new(&a)
                .file_name()
                .map(|f| f.to_string_lossy().into_owned())
        })
        .unwrap_or_else(|| format!("{}_test", op.name()));
    // Usage errors exit 2 with clap's message, `-h` prints the help and exits 0.
    let cfg = cli::try_parse(&bin, args, defaults).unwrap_or_else(|e| e.exit());
    let world = if cfg.threads.is_some() {
        None
    } else {
        match world::detect(&world::process_env) {
            Ok(w) => w,
            Err(e) => {
                eprintln!("{bin}: error: {e}");
                return ExitCode::FAILURE;
            }
        }
    };
    if let Err(e) = compress::check_args(op, &cfg) {
        cli::command(&bin, defaults)
            .error(clap::error::ErrorKind::ArgumentConflict, e)
            .exit();
    }
    let ranks = world.as_ref().map_or(cfg.threads.unwrap_or(1), |w| w.size);
    if op.rooted() && cfg.root >= ranks {
        cli::command(&bin, defaults)
            .error(
                clap::error::ErrorKind::ValueValidation,
                format!("root {} is out of range for {ranks} ranks", cfg.root),
            )
            .exit();
    }
    let plan = Plan::new(op, cfg, ranks, world.as_ref());
    let result = match world {
        Some(w) => run_process(&plan, &w),
        None => run_threads(&plan, ranks),
    };
    match result {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("{bin}: error: {e}");
            ExitCode::FAILURE
        }
    }
}

/// What every rank runs, shared read-only between rank threads.
struct Plan {
    op: Op,
    cfg: Config,
    sizes: Vec<u64>,
    ranks: u32,
    oracle: Oracle,
    /// Whether results are checked (`-c 1` and exactly representable).
    checked: bool,
    fault: bool,
    info: RunInfo,
}

impl Plan {
    fn new(op: Op, cfg: Config, ranks: u32, world: Option<&World>) -> Plan {
        let red = op.reduces().then_some(cfg.red_op);
        let pattern = Pattern::for_op(red);
        let launch = match world {
            Some(w) => format!("{} processes ({})", w.size, w.source),
            None => format!("{ranks} threads"),
        };
        let info = RunInfo {
            op: op.name(),
            dtype: cfg.dtype.name(),
            reduce_op: red.map(cli::RedOp::name),
            root: op.rooted().then_some(cfg.root),
            ranks,
            ranks_per_node: cfg
                .ranks_per_node
                .or(world.and_then(|w| w.local_size))
                .or(world.is_none().then_some(ranks)),
            iters: cfg.iters,
            warmup: cfg.warmup,
            launch,
            compress: cfg.compress.map(|m| m.to_string()),
        };
        Plan {
            op,
            // A barrier has no size: one row, whatever -b and -e say.
            sizes: if op == Op::Barrier {
                vec![0]
            } else {
                cli::sweep(&cfg)
            },
            ranks,
            oracle: Oracle::new(cfg.dtype, pattern, red, ranks),
            checked: cfg.check
                && cfg.compress.is_none()
                && check::checkable(pattern, cfg.dtype, ranks),
            fault: std::env::var(FAULT_ENV).is_ok_and(|v| v == "corrupt"),
            cfg,
            info,
        }
    }

    fn announce(&self) {
        let i = &self.info;
        let mut s = format!("{}_test: {}, {} ranks", i.op, i.launch, i.ranks);
        if self.op == Op::Barrier {
            s += ", no payload (one row of size 0)";
        } else {
            s += &format!(", dtype {}", i.dtype);
        }
        if let Some(r) = i.reduce_op {
            s += &format!(", op {r}");
        }
        if let Some(r) = i.root {
            s += &format!(", root {r}");
        }
        s += &format!(", iters {}, warmup {}", i.iters, i.warmup);
        s += &format!(", {} memory", self.cfg.mem.name());
        if let Some(m) = self.cfg.compress {
            s += &format!(", compressed {m} (check: same result on every rank)");
        } else if !self.cfg.check {
            s += ", check off";
        } else if !self.checked {
            s += ", check NULL (expected values not exactly representable)";
        }
        if self.cfg.zero_copy {
            s += ", zero copy requested (no effect on host memory)";
        }
        eprintln!("{s}");
    }
}

pub(crate) fn hccl(what: &str, r: HcclResult) -> Result<(), String> {
    if r == HcclResult::HCCL_SUCCESS {
        return Ok(());
    }
    // SAFETY: HcclGetErrorString returns a static NUL-terminated string for every code.
    let text = unsafe { CStr::from_ptr(HcclGetErrorString(r as u32)) };
    Err(format!("{what} failed: {r:?} ({})", text.to_string_lossy()))
}

pub(crate) fn max_over_ranks(x: f64, comm: HcclComm) -> Result<f64, String> {
    let mut send = x;
    let mut out = 0f64;
    // SAFETY: one fp64 in each buffer, live communicator.
    let r = unsafe {
        HcclAllReduce(
            (&mut send as *mut f64).cast(),
            (&mut out as *mut f64).cast(),
            1,
            10,
            2,
            comm,
            null_mut(),
        )
    };
    hccl("HcclAllReduce (time max)", r).map(|_| out)
}

fn all_true(ok: bool, comm: HcclComm) -> Result<bool, String> {
    let mut send = i32::from(ok);
    let mut out = 0i32;
    // SAFETY: one int32 in each buffer, live communicator.
    let r = unsafe {
        HcclAllReduce(
            (&mut send as *mut i32).cast(),
            (&mut out as *mut i32).cast(),
            1,
            2,
            3,
            comm,
            null_mut(),
        )
    };
    hccl("HcclAllReduce (check min)", r).map(|_| out == 1)
}

/// Runs the sweep on one rank; `Ok(false)` when some check failed.
fn run_rank(
    p: &Plan,
    rank: u32,
    comm: HcclComm,
    mut rep: Option<&mut Reporter>,
) -> Result<bool, String> {
    let cfg = &p.cfg;
    let es = cfg.dtype.size();
    let name = p.op.name();
    let fault_rank = if p.op == Op::Reduce { cfg.root } else { 0 };
    let mut all_ok = true;
    for (i, &bytes) in p.sizes.iter().enumerate() {
        if let Some(r) = rep.as_deref_mut() {
            r.start(i, bytes);
        }
        let l = Layout::new(p.op, cfg.dtype, cfg.red_op, cfg.root, rank, p.ranks, bytes);
        let mut send = mem::Buffer::new(cfg.mem, l.send_elems as usize * es)?;
        let mut recv = mem::Buffer::new(cfg.mem, l.recv_elems as usize * es)?;
        p.oracle.fill_input(rank, 0, &mut send);
        if l.input_in_recv() {
            p.oracle.fill_input(rank, 0, &mut recv);
        }
        let ext = cfg.compress.map(compress::config);
        let once = |send: &mut [u8], recv: &mut [u8]| {
            let (s, r) = (send.as_mut_ptr(), recv.as_mut_ptr());
            let res = match &ext {
                // SAFETY: all-reduce buffers of `l.count` elements; `comm` is live.
                Some(c) => unsafe { compress::call(c, s, r, l.count, cfg.dtype, comm) },
                // SAFETY: the buffers have the layout's lengths; `comm` is live.
                None => unsafe { l.call(s, r, comm) },
            };
            hccl(name, res)
        };
        for _ in 0..cfg.warmup {
            once(&mut send, &mut recv)?;
        }
        // SAFETY: live communicator.
        hccl("HcclBarrier", unsafe { HcclBarrier(comm, null_mut()) })?;
        let t0 = Instant::now();
        for _ in 0..cfg.iters {
            once(&mut send, &mut recv)?;
        }
        let mine = t0.elapsed().as_secs_f64() / cfg.iters as f64;
        let slowest = max_over_ranks(mine, comm)?;
        let mut error = None;
        let result = if p.checked && p.op == Op::Barrier {
            // SAFETY: `comm` is this rank's live communicator; every rank gets here.
            unsafe { barrier_order::check(rank, p.ranks, comm, p.fault && rank == fault_rank)? }
        } else if let (Some(_), true) = (cfg.compress, cfg.check) {
            p.oracle.fill_input(rank, 0, &mut send);
            once(&mut send, &mut recv)?;
            let e = compress::rel_l2_error(cfg.dtype, p.ranks, &recv);
            error = Some(max_over_ranks(e, comm)?);
            if compress::same_on_every_rank(&recv, comm)? {
                CheckResult::Success
            } else {
                eprintln!(
                    "rank {rank}: {name} data_size {}: ranks disagree",
                    l.data_size
                );
                CheckResult::Failed
            }
        } else if p.checked {
            let regions = l.regions();
            p.oracle.fill_input(rank, 0, &mut send);
            check::prefill(&p.oracle, &regions, &mut recv);
            if l.input_in_recv() {
                p.oracle.fill_input(rank, 0, &mut recv);
            }
            once(&mut send, &mut recv)?;
            if p.fault && rank == fault_rank && !recv.is_empty() {
                let at = regions.first().map_or(0, |r| r.at as usize * es);
                recv[at] ^= 0xff;
            }
            let bad = check::verify(&p.oracle, &regions, &recv);
            if let Some(m) = &bad {
                eprintln!(
                    "rank {rank}: {name} data_size {} check failed at element {}: got {}, expected {}",
                    l.data_size, m.element, m.got, m.expected
                );
            }
            if all_true(bad.is_none(), comm)? {
                CheckResult::Success
            } else {
                CheckResult::Failed
            }
        } else {
            CheckResult::Null
        };
        all_ok &= result != CheckResult::Failed;
        if let Some(r) = rep.as_deref_mut() {
            let mut row = Row::new(
                l.data_size,
                l.count,
                slowest,
                p.op.bus_factor(p.ranks),
                result,
            );
            row.error = error;
            r.row(row);
        }
    }
    Ok(all_ok)
}

fn init_comm(n: u32, info: &HcclRootInfo, rank: u32) -> Result<HcclComm, String> {
    let mut comm: HcclComm = null_mut();
    // SAFETY: `info` is a full root info blob and `comm` a valid out pointer.
    let r = unsafe { HcclCommInitRootInfo(n, info, rank, &mut comm) };
    hccl(&format!("HcclCommInitRootInfo (rank {rank})"), r)?;
    Ok(comm)
}

fn destroy(comm: HcclComm) -> Result<(), String> {
    // SAFETY: `comm` came from HcclCommInitRootInfo and is destroyed once.
    hccl("HcclCommDestroy", unsafe { HcclCommDestroy(comm) })
}

fn root_info() -> Result<HcclRootInfo, String> {
    let mut ri = HcclRootInfo {
        internal: [0; HCCL_ROOT_INFO_BYTES],
    };
    // SAFETY: `ri` is a writable root info.
    hccl("HcclGetRootInfo", unsafe { HcclGetRootInfo(&mut ri) })?;
    Ok(ri)
}

fn finish(p: &Plan, mut rep: Reporter) -> Result<(), String> {
    rep.finish(p.cfg.csv.as_deref(), p.cfg.json.as_deref())
}

/// Ranks as threads of this process. A failing rank ends the process at once, since its peers
/// would otherwise wait for it inside a collective.
fn run_threads(p: &Plan, n: u32) -> Result<bool, String> {
    let ri = root_info()?;
    p.announce();
    let mut rep = Some(Reporter::new(p.info.clone(), p.sizes.len()));
    let ok = std::thread::scope(|s| {
        let handles: Vec<_> = (0..n)
            .map(|rank| {
                let mut my_rep = if rank == 0 { rep.take() } else { None };
                let ri = &ri;
                std::thread::Builder::new()
                    .name(format!("rank{rank}"))
                    .spawn_scoped(s, move || {
                        let res = init_comm(n, ri, rank).and_then(|comm| {
                            let ok = run_rank(p, rank, comm, my_rep.as_mut())?;
                            destroy(comm)?;
                            if let Some(r) = my_rep {
                                finish(p, r)?;
                            }
                            Ok(ok)
                        });
                        res.unwrap_or_else(|e| {
                            eprintln!("{}_test: rank {rank}: error: {e}", p.op.name());
                            std::process::exit(1)
                        })
                    })
                    .unwrap_or_else(|e| {
                        eprintln!("cannot start rank thread {rank}: {e}");
                        std::process::exit(1)
                    })
            })
            .collect();
        handles
            .into_iter()
            .all(|h| h.join().unwrap_or_else(|_| std::process::exit(1)))
    });
    Ok(ok)
}

/// One rank per process; rank 0 serves the root info to the others.
fn run_process(p: &Plan, w: &World) -> Result<bool, String> {
    let (ri, server) = if w.rank == 0 {
        let ri = root_info()?;
        let server = if w.size > 1 {
            let blob: [u8; HCCL_ROOT_INFO_BYTES] = ri.internal.map(|c| c as u8);
            Some(world::InfoServer::start(w, blob)?)
        } else {
            None
        };
        (ri, server)
    } else {
        let blob = world::fetch(w)?;
        let ri = HcclRootInfo {
            internal: blob.map(|b| b as std::os::raw::c_char),
        };
        (ri, None)
    };
    let comm = match (init_comm(w.size, &ri, w.rank), server) {
        (Ok(c), Some(s)) => {
            s.join()?;
            c
        }
        (Ok(c), None) => c,
        (Err(e), Some(s)) => return Err(s.explain(e)),
        (Err(e), None) => return Err(e),
    };
    let mut rep = (w.rank == 0).then(|| {
        p.announce();
        Reporter::new(p.info.clone(), p.sizes.len())
    });
    let ok = run_rank(p, w.rank, comm, rep.as_mut())?;
    destroy(comm)?;
    if let Some(r) = rep {
        finish(p, r)?;
    }
    Ok(ok)
}
