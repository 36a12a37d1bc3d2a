//! `all_reduce_test --compress`: every method runs, every rank gets the same bytes (the check
//! column), the error column is the relative L2 error, and the CSV gains its two columns;
//! runs the flag cannot apply to are usage errors.

use crate::common::{cmd, stderr, stdout};

fn rows(out: &str) -> Vec<Vec<String>> {
    let mut lines = out.lines();
    let header = lines.next().expect("header");
    assert!(
        header.trim_end().ends_with("rel_l2_error"),
        "header: {header}"
    );
    lines
        .map(|l| l.split_whitespace().map(str::to_string).collect())
        .collect()
}

#[test]
fn every_method_reports_identity_and_error() {
    let dir = std::env::temp_dir().join(format!("hccl-compress-runs-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    // fp16 holds the tester's small integer sums exactly; int8 and top-k cannot.
    for (m, exact) in [
        ("fp16", true),
        ("bf16", true),
        ("int8", false),
        ("topk:0.1", false),
    ] {
        let csv = dir.join(format!("{}.csv", m.replace(':', "_")));
        let o = cmd(
            "all_reduce_test",
            &[
                "-t",
                "4",
                "-b",
                "4K",
                "-e",
                "64K",
                "-f",
                "4",
                "-n",
                "1",
                "-w",
                "0",
                "--compress",
                m,
            ],
        )
        .arg("--csv")
        .arg(&csv)
        .output()
        .unwrap();
        assert!(o.status.success(), "{m}: {}", stderr(&o));
        let rows = rows(&stdout(&o));
        assert_eq!(rows.len(), 3, "{m}");
        for r in &rows {
            assert_eq!(r.len(), 6, "{m}: {r:?}");
            assert_eq!(r[4], "success", "{m}: {r:?}");
            let e: f64 = r[5].parse().unwrap();
            assert!(e.is_finite() && (e == 0.0) == exact, "{m}: error {e}");
            assert!(e < 1.0, "{m}: error {e}");
        }
        let text = std::fs::read_to_string(&csv).unwrap();
        let mut lines = text.lines();
        assert!(lines
            .next()
            .unwrap()
            .ends_with(",check_result,compress,rel_l2_error"));
        for l in lines {
            assert!(
                l.contains(&format!(",success,{}", m.split(':').next().unwrap())),
                "{l}"
            );
        }
    }
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn runs_the_flag_cannot_apply_to_are_usage_errors() {
    for (bin, args) in [
        (
            "all_reduce_test",
            vec!["-t", "2", "-o", "max", "--compress", "int8"],
        ),
        (
            "all_reduce_test",
            vec!["-t", "2", "-d", "int32", "--compress", "int8"],
        ),
        ("all_reduce_test", vec!["-t", "2", "--compress", "zstd"]),
        ("all_reduce_test", vec!["-t", "2", "--compress", "topk:2"]),
        ("reduce_test", vec!["-t", "2", "--compress", "fp16"]),
    ] {
        let o = cmd(bin, &args).output().unwrap();
        assert_eq!(o.status.code(), Some(2), "{bin} {args:?}: {}", stderr(&o));
        assert!(
            stderr(&o).contains("compress"),
            "{bin} {args:?}: {}",
            stderr(&o)
        );
    }
}

/// The kernel benchmark prints memcpy and every method; bad arguments are usage errors.
#[test]
fn kernel_bench_runs_and_rejects_bad_arguments() {
    let o = cmd("hccl_compress_bench", &["1", "1"]).output().unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    for row in ["memcpy", "fp16", "bf16", "int8", "topk"] {
        assert!(
            out.lines().any(|l| l.starts_with(row)),
            "no {row} row:\n{out}"
        );
    }
    for bad in [&["x"][..], &["0"], &["1", "1", "1"]] {
        let o = cmd("hccl_compress_bench", bad).output().unwrap();
        assert_eq!(o.status.code(), Some(2), "{bad:?}: {}", stderr(&o));
        assert!(stderr(&o).contains("error:"), "{bad:?}: {}", stderr(&o));
    }
}
