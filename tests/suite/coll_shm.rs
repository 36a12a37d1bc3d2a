//! Collectives between processes of one host over the shared-memory link: the correctness
//! matrix with single-copy on and off, a rank killed mid-operation, two communicators used
//! alternately, and the switch that forces the network link instead.
//!
//! Each test re-executes this binary once per rank (one rank per process); the children
//! rendezvous through root infos created by the parent and report failures on stderr. Every
//! child checks that destroying its communicators closed every descriptor and unmapped every
//! shared segment they opened (the segments are anonymous memfds, so a leak shows only there).

use crate::common::cases::*;
use crate::common::*;
use hccl::ffi::coll_api::{HcclAllReduce, HcclRecv, HcclSend};
use hccl::ffi::comm_api::*;
use hccl::ffi::types::*;
use hccl::transport::shm::single_copy_max;
use std::collections::BTreeMap;
use std::process::Command;
use std::ptr::null_mut;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

const RANK_VAR: &str = "HCCL_TEST_SHM_RANK";
const SIZE_VAR: &str = "HCCL_TEST_SHM_SIZE";
const ROOTS_VAR: &str = "HCCL_TEST_SHM_ROOTS";
/// Sizes around the staging slot and single-copy thresholds (elements).
const SIZES: [usize; 4] = [0, 7, 4099, 300_000];
const DTYPES: [u32; 5] = [FP32, INT32, FP16, BF16, INT8];

/// This process's open descriptors: number → what it refers to (the `/proc/self/fd` link).
fn descriptors() -> BTreeMap<i32, String> {
    let dir = std::fs::read_dir("/proc/self/fd").expect("/proc/self/fd");
    dir.filter_map(|e| e.ok())
        .filter_map(|e| {
            let fd = e.file_name().to_string_lossy().parse().ok()?;
            let to = std::fs::read_link(e.path()).ok()?;
            Some((fd, to.to_string_lossy().into_owned()))
        })
        // The directory being listed is itself an open descriptor.
        .filter(|(_, to)| !to.starts_with("/proc/"))
        .collect()
}

/// Mappings of the library's shared segments in this process.
fn segment_maps() -> Vec<String> {
    std::fs::read_to_string("/proc/self/maps")
        .expect("/proc/self/maps")
        .lines()
        .filter(|l| l.contains("memfd:hccl"))
        .map(str::to_string)
        .collect()
}

/// The `/proc/self/fd` name of the library's process-wide data listener, if it runs.
fn acceptor_socket() -> Option<String> {
    let port = hccl::transport::acceptor::Acceptor::existing()?
        .addr()
        .port();
    ["/proc/self/net/tcp", "/proc/self/net/tcp6"]
        .iter()
        .flat_map(|f| {
            std::fs::read_to_string(f)
                .unwrap_or_default()
                .lines()
                .map(str::to_string)
                .collect::<Vec<_>>()
        })
        .find_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let local_port = u16::from_str_radix(f.get(1)?.rsplit(':').next()?, 16).ok()?;
            // State 0A: listening.
            let inode = f.get(9)?;
            (local_port == port && f.get(3) == Some(&"0A")).then(|| format!("socket:[{inode}]"))
        })
}

/// Descriptors before this child created its communicators.
static BEFORE: OnceLock<BTreeMap<i32, String>> = OnceLock::new();

/// This process's rank, rank count and communicators when it is a child of `launch`.
fn child() -> Option<(u32, u32, Vec<HcclComm>)> {
    let rank: u32 = std::env::var(RANK_VAR).ok()?.parse().unwrap();
    BEFORE.set(descriptors()).expect("one child per process");
    let n: u32 = std::env::var(SIZE_VAR).unwrap().parse().unwrap();
    let comms = std::env::var(ROOTS_VAR)
        .unwrap()
        .split(',')
        .map(|h| init_rank(n, &root_info_from_bytes(&hex_decode(h)), rank))
        .collect();
    Some((rank, n, comms))
}

/// Runs `body` as rank `rank` on the first communicator, destroys every communicator and
/// fails the child on any recorded failure.
fn run_child(rank: u32, n: u32, comms: Vec<HcclComm>, body: fn(&Rank)) {
    let fails = run_single_rank(rank, n, comms[0], body);
    for c in comms {
        assert_eq!(unsafe { HcclCommDestroy(c) }, OK, "HcclCommDestroy");
    }
    assert_released(rank);
    assert!(
        fails.is_empty(),
        "rank {rank}: {} failure(s):\n{}",
        fails.len(),
        fails.join("\n")
    );
}

/// Spawns `n` children running `test`, with `ncomms` root infos and `env`.
fn spawn(test: &str, n: u32, ncomms: usize, env: &[(&str, &str)]) -> Vec<Spawned> {
    let roots: Vec<String> = (0..ncomms)
        .map(|_| hex_encode(&root_info_bytes(&root_info())))
        .collect();
    let exe = std::env::current_exe().unwrap();
    (0..n)
        .map(|rank| {
            let mut c = Command::new(&exe);
            c.args([
                "--exact",
                &test_path(test),
                "--nocapture",
                "--test-threads=1",
            ])
            .env(RANK_VAR, rank.to_string())
            .env(SIZE_VAR, n.to_string())
            .env(ROOTS_VAR, roots.join(","))
            .env("HCCL_EXEC_TIMEOUT", "60")
            .env("HCCL_CONNECT_TIMEOUT", "60")
            .env("ASCEND_GLOBAL_LOG_LEVEL", "1");
            for (k, v) in env {
                c.env(k, v);
            }
            spawn_piped(c)
        })
        .collect()
}

/// Waits for every child and asserts each passed its test and logged `links` on every
/// communicator it created (e.g. "2 shm peers").
fn finish_all(kids: Vec<Spawned>, links: &str, budget: Duration) {
    finish_all_logging(kids, links, None, budget);
}

/// [`finish_all`], and when `copy` is given, every communicator of every child logged that its
/// shared-memory links read large messages single-copy (`true`) or staged (`false`).
fn finish_all_logging(kids: Vec<Spawned>, links: &str, copy: Option<&str>, budget: Duration) {
    for (rank, o) in finish_passed(kids, budget, links).into_iter().enumerate() {
        let ready: Vec<&str> = o
            .stderr
            .lines()
            .filter(|l| l.contains(" ready ("))
            .collect();
        assert!(!ready.is_empty(), "rank {rank} logged no link summary");
        for l in ready {
            assert!(l.contains(links), "rank {rank}: expected {links}: {l}");
        }
        if let Some(policy) = copy {
            let want = format!("single copy {policy}");
            let said: Vec<&str> = o
                .stderr
                .lines()
                .filter(|l| l.contains("single copy"))
                .collect();
            assert!(
                !said.is_empty() && said.iter().all(|l| l.trim_end().ends_with(&want)),
                "rank {rank}: expected {want}: {said:?}"
            );
        }
    }
}

/// After every communicator of this process is destroyed: no descriptor opened since the
/// child started is still open, and no shared segment is still mapped.
fn assert_released(rank: u32) {
    let before = BEFORE.get().expect("descriptors taken before init");
    let now = descriptors();
    // The process-wide data listener outlives communicators by design (one per process).
    let listener = acceptor_socket();
    let leaked: Vec<_> = now
        .iter()
        .filter(|(fd, to)| before.get(fd) != Some(to) && Some(*to) != listener.as_ref())
        .collect();
    assert!(
        leaked.is_empty(),
        "rank {rank}: descriptors left open after destroy: {leaked:?}"
    );
    let maps = segment_maps();
    assert!(
        maps.is_empty(),
        "rank {rank}: shared segments still mapped after destroy: {maps:?}"
    );
}

/// The correctness matrix on one rank: every collective over types and sizes.
fn matrix(r: &Rank) {
    let mut k = 0u32;
    for dt in DTYPES {
        for count in SIZES {
            for op in OPS {
                k += 1;
                // Large sizes: one operator per type keeps the suite quick.
                if count == 300_000 && op != [SUM, MAX, SUM, MIN, PROD][(dt as usize) % 5] {
                    continue;
                }
                allreduce_case(r, r.comm, dt, op, count, k.is_multiple_of(2), 0);
                reduce_case(r, dt, op, count, k % r.n, k.is_multiple_of(3), false);
                let rs = count / r.n as usize + 1;
                reduce_scatter_case(r, dt, op, rs, k % 2 == 1);
                reduce_scatterv_case(r, dt, op, rs, k as usize);
            }
        }
    }
    for (i, dt) in [FP32, INT8, BF16, FP8E4M3].into_iter().enumerate() {
        for count in SIZES {
            k += 1;
            let per_rank = count / r.n as usize + 1;
            broadcast_case(r, dt, count, k % r.n);
            allgather_case(r, dt, per_rank, k.is_multiple_of(2));
            allgatherv_case(r, dt, per_rank, k as usize);
            scatter_case(r, dt, per_rank, (k + 1) % r.n, k % 2 == 1);
            if i < 2 {
                alltoall_case(r, dt, per_rank);
                alltoallv_case(r, dt, per_rank);
                alltoallvc_case(r, dt, per_rank);
            }
            group_ring_case(r, dt, count);
        }
    }
    sendrecv_pairs(r, &SIZES, &[FP32, INT8]);
    batch_case(r, INT64, 70_000);
    // (The arrival-counting barrier check counts in process memory; here barriers must pass.)
    for _ in 0..5 {
        r.ok(
            unsafe { hccl::ffi::coll_api::HcclBarrier(r.comm, null_mut()) },
            "HcclBarrier",
        );
    }
}

/// The matrix on 2 and 4 processes with `HCCL_SHM_SINGLE_COPY` set to `single_copy` (or
/// unset: single copy at any size for a rank with two or more shared-memory peers; with one,
/// in exchanges and in operations up to `SINGLE_COPY_MAX_ONE_PEER`).
fn matrix_test(test: &str, single_copy: Option<&str>) {
    if let Some((rank, n, comms)) = child() {
        return run_child(rank, n, comms, matrix);
    }
    for n in [2u32, 4] {
        let env: Vec<(&str, &str)> = single_copy
            .map(|v| ("HCCL_SHM_SINGLE_COPY", v))
            .into_iter()
            .collect();
        let kids = spawn(test, n, 1, &env);
        let peers = (n - 1) as usize;
        let below = single_copy_max(single_copy.map(|v| v == "1"), peers);
        let policy = match below {
            0 => "off".to_string(),
            usize::MAX => "on".to_string(),
            b => format!("on for exchanges and operations up to {b} bytes"),
        };
        finish_all_logging(
            kids,
            &format!("(0 memory peers, {} shm peers, 0 network peers)", n - 1),
            Some(&policy),
            Duration::from_secs(240),
        );
    }
}

#[test]
fn shm_matrix_single_copy() {
    matrix_test("shm_matrix_single_copy", Some("1"));
}

#[test]
fn shm_matrix_staged_only() {
    matrix_test("shm_matrix_staged_only", Some("0"));
}

#[test]
fn shm_matrix_default_copy_policy() {
    matrix_test("shm_matrix_default_copy_policy", None);
}

/// Every communicator this child created, in root-list order (set once per child).
static COMMS: OnceLock<Vec<usize>> = OnceLock::new();

/// Two communicators over the same processes, used alternately (the 4 MiB size crosses the
/// single-copy threshold on both).
fn two_comms(r: &Rank) {
    let c = COMMS.get().expect("child set its communicators");
    let (a, b) = (c[0] as HcclComm, c[1] as HcclComm);
    for i in 0..24u64 {
        let comm = if i % 2 == 0 { a } else { b };
        let (dt, op) = [(FP32, SUM), (INT32, PROD), (BF16, MAX), (INT8, MIN)][(i % 4) as usize];
        let count = [1usize, 4099, 1 << 20, 300][(i / 2 % 4) as usize];
        allreduce_case(r, comm, dt, op, count, i % 3 == 0, 200 + i);
    }
}

#[test]
fn shm_two_communicators_alternately() {
    if let Some((rank, n, comms)) = child() {
        COMMS.get_or_init(|| comms.iter().map(|&c| c as usize).collect());
        return run_child(rank, n, comms, two_comms);
    }
    let kids = spawn("shm_two_communicators_alternately", 3, 2, &[]);
    finish_all(
        kids,
        "(0 memory peers, 2 shm peers, 0 network peers)",
        Duration::from_secs(120),
    );
}

/// `HCCL_INTRA_ROCE_ENABLE=1` keeps processes of one host on TCP.
#[test]
fn shm_forced_network_switch() {
    if let Some((rank, n, comms)) = child() {
        return run_child(rank, n, comms, |r| {
            allreduce_case(r, r.comm, FP32, SUM, 300_000, false, 0);
            allreduce_case(r, r.comm, INT8, MAX, 7, true, 0);
        });
    }
    let kids = spawn(
        "shm_forced_network_switch",
        2,
        1,
        &[("HCCL_INTRA_ROCE_ENABLE", "1")],
    );
    finish_all(
        kids,
        "(0 memory peers, 0 shm peers, 1 network peers)",
        Duration::from_secs(60),
    );
}

const VICTIM: u32 = 2;
const COUNT: usize = 1 << 20;

/// Ranks loop on AllReduce; the victim announces its first completed one and is killed by the
/// parent while (almost surely) inside the next. Survivors must fail, not hang.
fn kill_body(r: &Rank) {
    let input = vec![1u8; COUNT * 4];
    let mut out = vec![0u8; COUNT * 4];
    let start = Instant::now();
    for i in 0..100_000u32 {
        let t = Instant::now();
        let res = unsafe {
            HcclAllReduce(
                p(&input),
                pm(&mut out),
                COUNT as u64,
                FP32,
                SUM,
                r.comm,
                null_mut(),
            )
        };
        if r.rank == VICTIM && i == 0 {
            println!("victim-looping");
        }
        if res != OK {
            let waited = t.elapsed();
            println!("survivor-error after {waited:?}: {res:?}");
            r.check(waited < Duration::from_secs(20), || {
                format!(
                    "rank {} noticed the dead peer only after {waited:?}",
                    r.rank
                )
            });
            return;
        }
        r.check(start.elapsed() < Duration::from_secs(60), || {
            "no error 60 s after the victim was to be killed".into()
        });
        if r.failed() {
            return;
        }
    }
    r.fail("loop ended without an error".into());
}

#[test]
fn shm_rank_killed_mid_operation() {
    if let Some((rank, n, comms)) = child() {
        return run_child(rank, n, comms, kill_body);
    }
    let mut kids = spawn(
        "shm_rank_killed_mid_operation",
        3,
        1,
        &[("HCCL_EXEC_TIMEOUT", "30")],
    );
    let mut victim = kids.remove(VICTIM as usize);
    let mut seen = Vec::new();
    loop {
        match victim.lines.recv_timeout(Duration::from_secs(60)) {
            Ok(l) if l.contains("victim-looping") => break,
            Ok(l) => seen.push(l),
            Err(e) => panic!("victim never started looping ({e:?}): {seen:?}"),
        }
    }
    victim.child.kill().unwrap();
    let vout = victim.finish(Duration::from_secs(10), seen);
    assert!(!vout.success, "the victim was supposed to be killed");
    let deadline = Instant::now() + Duration::from_secs(60);
    for (i, k) in kids.into_iter().enumerate() {
        let o = k.finish(
            deadline.saturating_duration_since(Instant::now()),
            Vec::new(),
        );
        assert!(
            o.success && o.stdout.contains("survivor-error"),
            "survivor {i} did not fail cleanly (code {:?}):\n--- stdout\n{}\n--- stderr\n{}",
            o.code,
            o.stdout,
            tail(&o.stderr, 4000)
        );
        if let Some(l) = o.stdout.lines().find(|l| l.contains("survivor-error")) {
            eprintln!("survivor {i}: {l}");
        }
        assert!(
            o.stderr.contains("2 shm peers"),
            "survivor {i} was not on shared memory:\n{}",
            tail(&o.stderr, 3000)
        );
    }
}

/// Which lie the sending process's share "runtime" tells in [`hostile_descriptor_body`].
const LIE_VAR: &str = "HCCL_TEST_SHM_LIE";
/// The descriptor number the lying runtime answers with: high, so no other open reuses it
/// after the runtime closes it.
const LIE_FD: i32 = 1000;
/// The message the receiver is tricked on, and the larger one sent first from the same buffer.
const LIE_LEN: usize = 256 << 10;
static LIE_SIZE: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// `aclrtHostMemGetShareInfo` of a runtime that says every buffer lies at offset 0 of
/// descriptor [`LIE_FD`], [`LIE_SIZE`] bytes before the file's end.
unsafe extern "C" fn lying_info(
    _: *const std::ffi::c_void,
    fd: *mut i32,
    off: *mut u64,
    size: *mut u64,
) -> i32 {
    // SAFETY: the caller passes valid out-parameters.
    unsafe {
        *fd = LIE_FD;
        *off = 0;
        *size = LIE_SIZE.load(std::sync::atomic::Ordering::Relaxed);
    }
    0
}

/// An allocation count that never moves, so the library keeps the lie it was told.
unsafe extern "C" fn still_epoch() -> u64 {
    1
}

/// A memfd of `len` bytes as [`LIE_FD`] (`sealed` against shrinking).
fn lie_file(len: usize, sealed: bool) {
    // SAFETY: plain syscalls on descriptors this process owns.
    unsafe {
        let fd = libc::memfd_create(c"lie".as_ptr(), libc::MFD_ALLOW_SEALING);
        assert!(fd >= 0 && libc::ftruncate(fd, len as i64) == 0);
        if sealed {
            assert_eq!(libc::fcntl(fd, libc::F_ADD_SEALS, libc::F_SEAL_SHRINK), 0);
        }
        assert_eq!(libc::dup2(fd, LIE_FD), LIE_FD);
        libc::close(fd);
    }
}

/// Rank 0 sends [`LIE_LEN`] bytes to rank 1 single-copy with a descriptor its runtime lies
/// about (`HCCL_TEST_SHM_LIE`): `range` names a 4 KiB file, `unsealed` an unsealed file,
/// `closed` a descriptor closed after the lookup was cached, `inode` a descriptor that holds
/// another file by then. The receiver must copy by the kernel (the unsealed and closed files:
/// right data, the communicator goes on) or fail the operation on both ranks, leaving its
/// buffer untouched and the communicator broken (later calls `HCCL_E_UNAVAIL`).
fn hostile_descriptor_body(r: &Rank) {
    let lie = std::env::var(LIE_VAR).unwrap();
    let count = (LIE_LEN / 4) as u64;
    let data: Vec<u8> = (0..2 * LIE_LEN).map(|i| (i * 7 + 1) as u8).collect();
    let mut got = vec![0xa5u8; 2 * LIE_LEN];
    if lie == "closed" || lie == "inode" {
        // A larger message first, which the sender's cached lookup does not cover (kernel copy);
        // then the runtime's descriptor changes without a change of its allocation count.
        if r.rank == 0 {
            lie_file(LIE_LEN, true);
            LIE_SIZE.store(LIE_LEN as u64, std::sync::atomic::Ordering::Relaxed);
            let rc = unsafe { HcclSend(p(&data), 2 * count, FP32, 1, r.comm, null_mut()) };
            r.ok(rc, "first send");
            if lie == "closed" {
                // SAFETY: the lie's own descriptor.
                unsafe { libc::close(LIE_FD) };
            } else {
                lie_file(LIE_LEN, true);
            }
        } else {
            let rc = unsafe { HcclRecv(pm(&mut got), 2 * count, FP32, 0, r.comm, null_mut()) };
            r.ok(rc, "first receive");
            r.check(got == data, || "first message corrupt".into());
            got.fill(0xa5);
        }
    } else if r.rank == 0 {
        lie_file(
            if lie == "range" { 4096 } else { LIE_LEN },
            lie != "unsealed",
        );
        LIE_SIZE.store(1 << 40, std::sync::atomic::Ordering::Relaxed);
    }
    let rc = if r.rank == 0 {
        unsafe { HcclSend(p(&data), count, FP32, 1, r.comm, null_mut()) }
    } else {
        unsafe { HcclRecv(pm(&mut got), count, FP32, 0, r.comm, null_mut()) }
    };
    let got = &got[..LIE_LEN];
    let mut one = [0u8; 4];
    let again = unsafe { HcclAllReduce(p(&one), pm(&mut one), 1, FP32, SUM, r.comm, null_mut()) };
    if lie == "unsealed" || lie == "closed" {
        r.ok(rc, "the kernel copy's message");
        r.check(r.rank == 0 || got == &data[..LIE_LEN], || {
            "message corrupt".into()
        });
        r.ok(again, "the next operation");
    } else {
        // The receiver finds the lie; the sender hears of it from the receiver.
        let want = if r.rank == 1 {
            HcclResult::HCCL_E_INTERNAL
        } else {
            HcclResult::HCCL_E_REMOTE
        };
        r.expect_code(rc, want, lie.as_str());
        r.check(got.iter().all(|&b| b == 0xa5), || "bytes delivered".into());
        r.expect_code(again, HcclResult::HCCL_E_UNAVAIL, "the next operation");
    }
    println!("hostile {lie}: rank {} returned {rc:?}", r.rank);
    // SAFETY: the lie's own descriptor (closed already in one case).
    unsafe { libc::close(LIE_FD) };
}

#[test]
fn shm_hostile_mapped_descriptors_between_processes() {
    if std::env::var(LIE_VAR).is_ok() {
        if std::env::var(RANK_VAR).as_deref() == Ok("0") {
            let fns = hccl::transport::local_mem::ShareFns {
                info: lying_info,
                epoch: Some(still_epoch),
            };
            assert!(
                hccl::transport::local_mem::register(fns),
                "registered first"
            );
        }
        let (rank, n, comms) = child().unwrap();
        return run_child(rank, n, comms, hostile_descriptor_body);
    }
    for lie in ["range", "unsealed", "closed", "inode"] {
        let kids = spawn(
            "shm_hostile_mapped_descriptors_between_processes",
            2,
            1,
            &[
                (LIE_VAR, lie),
                ("HCCL_SHM_SINGLE_COPY", "1"),
                ("HCCL_SHM_STREAM", "0"),
                ("ASCEND_GLOBAL_LOG_LEVEL", "1"),
            ],
        );
        let outs = finish_passed(kids, Duration::from_secs(90), lie);
        for (rank, o) in outs.into_iter().enumerate() {
            if rank == 1 {
                let said = if lie == "range" || lie == "inode" {
                    "named a buffer of its memory that is not there"
                } else {
                    "cannot map a buffer of peer rank 0"
                };
                assert!(o.stderr.contains(said), "{lie}: {}", tail(&o.stderr, 5000));
            }
        }
    }
}
