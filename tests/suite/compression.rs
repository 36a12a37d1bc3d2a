//! Compressed AllReduce (`HcclExtAllReduceCompressed`) and the communicator counters, with real
//! ranks: accuracy on N(0,1) data against a float64 reference, error feedback over repeated
//! calls, bit-identical results on every rank (each rank gathers every rank's result and
//! compares bytes), hierarchical runs (two "hosts" of rank threads via `HCCL_RANK_HOST_MAP`, in
//! a child process), level1 byte counts against the uncompressed hierarchical AllReduce, the
//! `HCCL_COMPRESSION` opt-in, processes over shared memory, and bad calls.

use crate::common::compress_checks::*;
use crate::common::*;
use hccl::ffi::coll_api::HcclAllReduce;
use hccl::ffi::ext_api::*;
use hccl::ffi::types::*;
use std::ptr::null_mut;
use std::time::Duration;

const TIMEOUT: Duration = Duration::from_secs(300);

/// Deterministic N(0,1) values (Box–Muller over a counter-based generator) for `rank`.
fn normal(rank: u32, salt: u64, count: usize) -> Vec<f32> {
    (0..count)
        .map(|i| {
            let u = |k: u64| {
                let z = mix(seed(&[salt, rank as u64, i as u64, k]));
                ((z >> 11) as f64 + 0.5) / (1u64 << 53) as f64
            };
            let (a, b) = (u(0), u(1));
            ((-2.0 * a.ln()).sqrt() * (2.0 * std::f64::consts::PI * b).cos()) as f32
        })
        .collect()
}

/// The exact sum of every rank's input, in float64.
fn exact(n: u32, salt: u64, count: usize) -> Vec<f64> {
    let mut s = vec![0f64; count];
    for r in 0..n {
        for (a, v) in s.iter_mut().zip(normal(r, salt, count)) {
            *a += v as f64;
        }
    }
    s
}

const METHODS: [(&str, u32, f32); 4] = [
    ("fp16", 1, 0.0),
    ("bf16", 2, 0.0),
    ("int8", 3, 0.0),
    ("topk:0.01", 4, 0.01),
];

/// Accuracy bound of one call (None: reported only).
fn bound(name: &str) -> Option<f64> {
    match name {
        "fp16" => Some(1e-3),
        "int8" => Some(1e-2),
        "bf16" => Some(1e-2),
        _ => None,
    }
}

/// One compressed AllReduce per method on N(0,1) data: relative L2 error within the bounds of
/// the issue (fp16 ≤ 0.1%, int8 ≤ 1%), identical results on every rank.
fn accuracy_body(r: &Rank) {
    let count = 1 << 16;
    let want = r.shared("exact", r.n, || exact(r.n, 1, count));
    let send = normal(r.rank, 1, count);
    for (name, m, ratio) in METHODS {
        let mut out = vec![0f32; count];
        if !r.ok(
            allreduce_c(r, &send, &mut out, &config(m, ratio, None)),
            name,
        ) {
            return;
        }
        let e = rel_l2(&out, &want);
        if r.rank == 0 {
            println!("ACCURACY {} ranks {name}: relative L2 error {e:.3e}", r.n);
        }
        if let Some(b) = bound(name) {
            r.check(e <= b, || {
                format!("{name}: relative L2 error {e:.3e} above {b:e}")
            });
        }
        check_identical(r, name, &out);
        // In place, with error feedback: the same bytes and residual as out of place.
        let mut res = [vec![0f32; count], vec![0f32; count]];
        let [res_out, res_in] = &mut res;
        let mut inplace = send.clone();
        let cfg_out = config(m, ratio, Some(&mut res_out[..]));
        r.ok(allreduce_c(r, &send, &mut out, &cfg_out), name);
        let cfg_in = config(m, ratio, Some(&mut res_in[..]));
        let p = inplace.as_mut_ptr();
        let rc = unsafe {
            HcclExtAllReduceCompressed(
                p as *mut _,
                p as *mut _,
                count as u64,
                FP32,
                SUM,
                &cfg_in,
                r.comm,
                null_mut(),
            )
        };
        r.ok(rc, name);
        r.check(inplace == out && res_in == res_out, || {
            format!("{name}: in place differs from out of place")
        });
    }
}

#[test]
fn accuracy_on_normal_data_8_ranks_single_host() {
    run_ranks(8, TIMEOUT, accuracy_body);
}

/// With error feedback the sum of 100 calls on the same input stays within 1% of 100× the
/// exact sum (fp16, int8), and within a tenth of the drift without error feedback (so every
/// compression a call makes, the reduce-scatter's re-compression included, feeds its error
/// back). Top-k's drift is reported both ways.
fn feedback_body(r: &Rank) {
    let count = 1 << 14;
    let steps = 100;
    let want = r.shared("exact", r.n, || exact(r.n, 2, count));
    let send = normal(r.rank, 2, count);
    let target: Vec<f64> = want.iter().map(|w| w * steps as f64).collect();
    for (name, m, ratio) in METHODS {
        let mut drifts = [0f64; 2];
        for feedback in [true, false] {
            let mut residual = vec![0f32; count];
            let mut sum = vec![0f64; count];
            let mut out = vec![0f32; count];
            for _ in 0..steps {
                let cfg = config(m, ratio, feedback.then_some(&mut residual[..]));
                if !r.ok(allreduce_c(r, &send, &mut out, &cfg), name) {
                    return;
                }
                for (s, o) in sum.iter_mut().zip(&out) {
                    *s += *o as f64;
                }
            }
            let sum32: Vec<f32> = sum.iter().map(|s| *s as f32).collect();
            let drift = rel_l2(&sum32, &target);
            if r.rank == 0 {
                println!(
                    "FEEDBACK {} ranks {name} error feedback {}: sum of {steps} calls is off by \
                     {drift:.3e} (relative L2)",
                    r.n,
                    if feedback { "on " } else { "off" }
                );
            }
            if feedback && name != "topk:0.01" {
                r.check(drift <= 1e-2, || {
                    format!("{name} with error feedback: drift {drift:.3e} above 1%")
                });
            }
            drifts[usize::from(feedback)] = drift;
            check_identical(r, name, &out);
        }
        if name != "topk:0.01" {
            r.check(drifts[1] * 10.0 <= drifts[0], || {
                format!("{name}: drift {drifts:?} (without, with error feedback)")
            });
        }
    }
}

#[test]
fn error_feedback_keeps_repeated_sums_on_target() {
    run_ranks(8, TIMEOUT, feedback_body);
}

/// Two hosts of two rank threads (`HCCL_RANK_HOST_MAP=a,a,b,b`): every method bit-identical on
/// all ranks, fp32 and fp16/bf16 data, and level1 bytes against the uncompressed hierarchical
/// AllReduce (`HCCL_ALGO` forces it) within the ratios.
fn hierarchical_body(r: &Rank) {
    // Shards of 2^19 elements: several pipeline pieces (more with a small HCCL_BUFFSIZE).
    let count = 1 << 20;
    let want = r.shared("exact", r.n, || exact(r.n, 3, count));
    let send = normal(r.rank, 3, count);
    let mut out = vec![0f32; count];
    unsafe { HcclExtResetCommStats(r.comm) };
    let res = unsafe {
        HcclAllReduce(
            send.as_ptr() as *mut _,
            out.as_mut_ptr() as *mut _,
            count as u64,
            FP32,
            SUM,
            r.comm,
            null_mut(),
        )
    };
    r.ok(res, "plain AllReduce");
    let plain = stats(r);
    r.check(
        plain.ops == 1 && plain.compressedOps == 0 && plain.level1BytesSent > 0,
        || format!("counters of the plain AllReduce: {plain:?}"),
    );
    for (name, m, ratio, limit) in [
        ("fp16", 1, 0.0, 0.51),
        ("bf16", 2, 0.0, 0.51),
        ("int8", 3, 0.0, 0.27),
        ("topk:0.01", 4, 0.01, 0.03),
    ] {
        unsafe { HcclExtResetCommStats(r.comm) };
        if !r.ok(
            allreduce_c(r, &send, &mut out, &config(m, ratio, None)),
            name,
        ) {
            return;
        }
        let s = stats(r);
        let ratio_sent = s.level1BytesSent as f64 / plain.level1BytesSent as f64;
        let ratio_recv = s.level1BytesRecv as f64 / plain.level1BytesRecv as f64;
        if r.rank == 0 {
            println!(
                "BYTES {name}: level1 sent {} vs {} uncompressed ({ratio_sent:.4}x), received \
                 {} vs {} ({ratio_recv:.4}x); relative L2 error {:.3e}",
                s.level1BytesSent,
                plain.level1BytesSent,
                s.level1BytesRecv,
                plain.level1BytesRecv,
                rel_l2(&out, &want)
            );
        }
        r.check(s.compressedOps == 1 && ratio_sent <= limit && ratio_recv <= limit, || {
            format!("{name}: level1 ratio sent {ratio_sent:.4} recv {ratio_recv:.4} above {limit}: {s:?}")
        });
        if let Some(b) = bound(name) {
            let e = rel_l2(&out, &want);
            r.check(e <= b, || {
                format!("{name}: hierarchical error {e:.3e} above {b:e}")
            });
        }
        check_identical(r, name, &out);
        if std::env::var_os("HCCL_DETERMINISTIC").is_some() {
            // Level0 sums in a fixed order: the same call gives the same bytes again.
            let mut again = vec![0f32; count];
            r.ok(
                allreduce_c(r, &send, &mut again, &config(m, ratio, None)),
                name,
            );
            r.check(again == out, || format!("{name}: a second call differs"));
        }
    }
    // Half-precision data: compressed across hosts (int8; top-k, whose blocks are forwarded
    // inside the host), identical everywhere.
    for (dt, m, ratio, bound) in [
        (FP16, 3, 0.0, 2e-2),
        (BF16, 3, 0.0, 2e-2),
        (FP16, 4, 0.01, 1.0),
        (BF16, 4, 0.01, 1.0),
    ] {
        let to = |v: f32| {
            if dt == FP16 {
                f32_to_f16(v)
            } else {
                f32_to_bf16(v)
            }
        };
        let halves: Vec<u16> = send.iter().map(|v| to(*v)).collect();
        let mut got = vec![0u16; count];
        let cfg = config(m, ratio, None);
        let res = unsafe {
            HcclExtAllReduceCompressed(
                halves.as_ptr() as *mut _,
                got.as_mut_ptr() as *mut _,
                count as u64,
                dt,
                SUM,
                &cfg,
                r.comm,
                null_mut(),
            )
        };
        r.ok(res, "compression of half-precision data");
        let back: Vec<f32> = got
            .iter()
            .map(|h| {
                if dt == FP16 {
                    f16_to_f32(*h)
                } else {
                    bf16_to_f32(*h)
                }
            })
            .collect();
        let e = rel_l2(&back, &want);
        r.check(e <= bound, || {
            format!("{} method {m}: error {e:.3e}", dt_name(dt))
        });
        check_identical(r, dt_name(dt), &back);
    }
}

#[test]
fn hierarchical_two_hosts_of_threads() {
    if is_child() {
        let map = std::env::var("HCCL_RANK_HOST_MAP").unwrap();
        run_ranks(map.split(',').count() as u32, TIMEOUT, hierarchical_body);
        return;
    }
    // The default staging budget, one of 1 MB that makes the pipeline's pieces smaller, and
    // deterministic level0 sums on hosts of three ranks (folded in local rank order).
    for (map, budget, det) in [
        ("a,a,b,b", None, None),
        ("a,a,b,b", Some("1"), None),
        ("a,a,a,b,b,b", Some("1"), Some("1")),
    ] {
        let mut env = vec![
            ("HCCL_RANK_HOST_MAP", map),
            ("HCCL_ALGO", "allreduce=level0:fullmesh;level1:hier"),
        ];
        env.extend(budget.map(|b| ("HCCL_BUFFSIZE", b)));
        env.extend(det.map(|d| ("HCCL_DETERMINISTIC", d)));
        let out = run_self("hierarchical_two_hosts_of_threads", &env, TIMEOUT);
        for l in out.stdout.lines().filter(|l| l.contains("BYTES")) {
            println!("{map} HCCL_BUFFSIZE={budget:?} HCCL_DETERMINISTIC={det:?} {l}");
        }
    }
}

/// `HCCL_COMPRESSION=int8` compresses plain SUM AllReduces across hosts (and only those).
fn env_opt_in_body(r: &Rank) {
    let count = 1 << 12;
    let send = normal(r.rank, 4, count);
    let want = r.shared("exact", r.n, || exact(r.n, 4, count));
    let mut out = vec![0f32; count];
    let res = unsafe {
        HcclAllReduce(
            send.as_ptr() as *mut _,
            out.as_mut_ptr() as *mut _,
            count as u64,
            FP32,
            SUM,
            r.comm,
            null_mut(),
        )
    };
    r.ok(res, "AllReduce");
    let e = rel_l2(&out, &want);
    r.check(e > 0.0 && e <= 1e-2, || format!("error {e:.3e}"));
    check_identical(r, "HCCL_COMPRESSION=int8", &out);
    // MAX and integer sums stay exact and uncompressed.
    let ints: Vec<i32> = (0..count as i32).map(|i| i * (r.rank as i32 + 1)).collect();
    let mut isum = vec![0i32; count];
    let res = unsafe {
        HcclAllReduce(
            ints.as_ptr() as *mut _,
            isum.as_mut_ptr() as *mut _,
            count as u64,
            INT32,
            SUM,
            r.comm,
            null_mut(),
        )
    };
    r.ok(res, "int32 AllReduce");
    let k: i32 = (1..=r.n as i32).sum();
    r.check(
        isum.iter().enumerate().all(|(i, v)| *v == i as i32 * k),
        || "int32 sum not exact".into(),
    );
    let s = stats(r);
    r.check(s.compressedOps == 1 && s.ops == 3, || {
        format!("counters: {s:?}")
    });
}

#[test]
fn env_opt_in_compresses_plain_allreduce_across_hosts() {
    if is_child() {
        run_ranks(4, TIMEOUT, env_opt_in_body);
        return;
    }
    run_self(
        "env_opt_in_compresses_plain_allreduce_across_hosts",
        &[
            ("HCCL_RANK_HOST_MAP", "a,a,b,b"),
            ("HCCL_COMPRESSION", "int8"),
        ],
        TIMEOUT,
    );
}

/// With `HCCL_TRACE_FILE` set, plain and compressed AllReduces still count in the counters,
/// and both are written to the trace.
fn traced_body(r: &Rank) {
    let count = 1 << 12;
    let send = normal(r.rank, 6, count);
    let mut out = vec![0f32; count];
    let res = unsafe {
        HcclAllReduce(
            send.as_ptr() as *mut _,
            out.as_mut_ptr() as *mut _,
            count as u64,
            FP32,
            SUM,
            r.comm,
            null_mut(),
        )
    };
    r.ok(res, "traced plain AllReduce");
    let plain = stats(r);
    r.ok(
        allreduce_c(r, &send, &mut out, &config(3, 0.0, None)),
        "traced compressed AllReduce",
    );
    let both = stats(r);
    r.check(
        plain.ops == 1
            && plain.level1BytesSent > 0
            && both.ops == 2
            && both.compressedOps == 1
            && both.level1BytesSent > plain.level1BytesSent,
        || format!("counters of traced operations: {plain:?} then {both:?}"),
    );
}

#[test]
fn traced_operations_are_counted() {
    let dir = std::env::temp_dir().join(format!("hccl-compress-trace-{}", std::process::id()));
    if is_child() {
        run_ranks(4, TIMEOUT, traced_body);
        return;
    }
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("trace_%r.json");
    run_self(
        "traced_operations_are_counted",
        &[
            ("HCCL_RANK_HOST_MAP", "a,a,b,b"),
            ("HCCL_TRACE_FILE", path.to_str().unwrap()),
        ],
        TIMEOUT,
    );
    for rank in 0..4 {
        let text = std::fs::read_to_string(dir.join(format!("trace_{rank}.json"))).unwrap();
        assert!(
            text.contains("compressed-pipeline") && text.contains("\"AllReduce\""),
            "rank {rank}'s trace lacks an operation:\n{text}"
        );
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Calls that cannot be compressed are refused with HCCL_E_PARA (a NULL config with
/// HCCL_E_PTR) before anything moves, and the communicator keeps working.
fn bad_input_body(r: &Rank) {
    let count = 1000;
    let send = normal(r.rank, 5, count);
    let mut out = vec![0f32; count];
    let mut short = vec![0f32; count - 1];
    let para = HcclResult::HCCL_E_PARA;
    let cases: Vec<(&str, HcclExtCompressConfig)> = vec![
        ("unknown method", config(7, 0.0, None)),
        ("k = 0", config(4, 0.0, None)),
        ("k > 1", config(4, 1.01, None)),
        ("k NaN", config(4, f32::NAN, None)),
        (
            "residual of the wrong size",
            config(3, 0.0, Some(&mut short[..])),
        ),
        ("residual NULL with a count", {
            let mut c = config(3, 0.0, None);
            c.residualCount = count as u64;
            c
        }),
        ("int8 block too large", {
            let mut c = config(3, 0.0, None);
            c.blockSize = 1 << 20;
            c
        }),
    ];
    for (what, cfg) in &cases {
        r.expect_code(allreduce_c(r, &send, &mut out, cfg), para, what);
    }
    // The residual may not overlap the data.
    let mut overlap = config(3, 0.0, None);
    overlap.residual = out.as_mut_ptr();
    overlap.residualCount = count as u64;
    r.expect_code(
        allreduce_c(r, &send, &mut out, &overlap),
        para,
        "residual over recvBuf",
    );
    let cfg = config(3, 0.0, None);
    let ints = vec![1i32; count];
    let mut iout = vec![0i32; count];
    let call = |buf: *const i32, o: *mut i32, dt: u32, op: u32, c: *const HcclExtCompressConfig| unsafe {
        HcclExtAllReduceCompressed(
            buf as *mut _,
            o as *mut _,
            count as u64,
            dt,
            op,
            c,
            r.comm,
            null_mut(),
        )
    };
    r.expect_code(
        call(ints.as_ptr(), iout.as_mut_ptr(), INT32, SUM, &cfg),
        para,
        "int32",
    );
    let fp = send.as_ptr() as *const i32;
    let fo = out.as_mut_ptr() as *mut i32;
    r.expect_code(call(fp, fo, FP64, SUM, &cfg), para, "fp64");
    r.expect_code(call(fp, fo, FP32, MAX, &cfg), para, "MAX");
    r.expect_code(call(fp, fo, FP32, PROD, &cfg), para, "PROD");
    r.expect_code(
        call(fp, fo, FP32, SUM, std::ptr::null()),
        HcclResult::HCCL_E_PTR,
        "NULL config",
    );
    // NONE is a plain, exact AllReduce.
    let want = r.shared("exact", r.n, || exact(r.n, 5, count));
    r.ok(
        allreduce_c(r, &send, &mut out, &config(0, 0.0, None)),
        "method NONE",
    );
    let e = rel_l2(&out, &want);
    r.check(e < 1e-6, || format!("method NONE error {e:e}"));
    let s = stats(r);
    r.check(
        s.ops == 1 && s.compressedOps == 0 && s.failedOps == 0,
        || format!("rejected calls must not count as operations: {s:?}"),
    );
    r.ok(
        allreduce_c(r, &send, &mut out, &config(3, 0.0, None)),
        "int8 after the rejects",
    );
}

#[test]
fn bad_calls_are_rejected_and_leave_the_communicator_usable() {
    run_ranks(3, TIMEOUT, bad_input_body);
}

/// One rank per process on one host (shared-memory links), every method, level0 compressed:
/// identical results everywhere.
#[test]
fn processes_over_shared_memory() {
    const RANK: &str = "HCCL_TEST_CMP_RANK";
    const ROOT: &str = "HCCL_TEST_CMP_ROOT";
    let n = 4u32;
    if let Ok(rank) = std::env::var(RANK) {
        let rank: u32 = rank.parse().unwrap();
        let ri = root_info_from_bytes(&hex_decode(&std::env::var(ROOT).unwrap()));
        let comm = init_rank(n, &ri, rank);
        let fails = run_single_rank(rank, n, comm, |r| {
            let count = 300_001;
            let want = exact(r.n, 6, count);
            let send = normal(r.rank, 6, count);
            for (name, m, ratio) in METHODS {
                let mut out = vec![0f32; count];
                let mut residual = vec![0f32; count];
                let mut cfg = config(m, ratio, Some(&mut residual[..]));
                cfg.compressLevel0 = 1;
                if r.ok(allreduce_c(r, &send, &mut out, &cfg), name) {
                    if let Some(b) = bound(name) {
                        let e = rel_l2(&out, &want);
                        r.check(e <= b, || format!("{name}: error {e:.3e}"));
                    }
                    check_identical(r, name, &out);
                }
            }
        });
        unsafe { hccl::ffi::comm_api::HcclCommDestroy(comm) };
        assert!(fails.is_empty(), "{fails:#?}");
        return;
    }
    let ri = root_info();
    let hex = hex_encode(&root_info_bytes(&ri));
    let kids: Vec<_> = (0..n)
        .map(|r| {
            let exe = std::env::current_exe().unwrap();
            let mut cmd = std::process::Command::new(exe);
            cmd.args([
                "--exact",
                &test_path("processes_over_shared_memory"),
                "--nocapture",
            ])
            .env(CHILD_VAR, "1")
            .env(RANK, r.to_string())
            .env(ROOT, &hex);
            spawn_piped(cmd)
        })
        .collect();
    for (r, k) in kids.into_iter().enumerate() {
        let o = k.finish(TIMEOUT, Vec::new());
        assert!(
            o.success && o.stdout.contains("1 passed"),
            "rank {r} failed:\n{}\n{}",
            o.stdout,
            tail(&o.stderr, 4000)
        );
    }
}
