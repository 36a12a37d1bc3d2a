//! Flag parsing and size sweeps.

use crate::common::{run, stderr, stdout, table};
use hccl_tools::cli::{parse, parse_size, sweep, Defaults, Parsed, Step};

fn args(s: &str) -> Vec<String> {
    s.split_whitespace().map(String::from).collect()
}

fn cfg(s: &str) -> hccl_tools::Config {
    match parse(args(s), &Defaults::vendor()) {
        Ok(Parsed::Run(c)) => c,
        other => panic!("{s}: {other:?}"),
    }
}

#[test]
fn sizes_use_binary_suffixes() {
    assert_eq!(parse_size("8").unwrap(), 8);
    assert_eq!(parse_size("8K").unwrap(), 8192);
    assert_eq!(parse_size("3k").unwrap(), 3072);
    assert_eq!(parse_size("64M").unwrap(), 64 << 20);
    assert_eq!(parse_size("2G").unwrap(), 2 << 30);
    for bad in ["", "K", "8X", "-8", "1.5M", "8KB", "99999999999999999999"] {
        assert!(parse_size(bad).is_err(), "{bad}");
    }
}

#[test]
fn factor_sweep() {
    assert_eq!(sweep(&cfg("-b 8 -e 64 -f 2")), [8, 16, 32, 64]);
    assert_eq!(sweep(&cfg("-b 8 -e 100 -f 4")), [8, 32]);
    assert_eq!(sweep(&cfg("-b 1K -e 1K")), [1024]);
    // 8 × 4^k never lands on 64M: the last size is 32M.
    assert_eq!(sweep(&cfg("-b 8 -e 64M -f 4")).last(), Some(&(32 << 20)));
}

#[test]
fn increment_sweep() {
    assert_eq!(sweep(&cfg("-b 0 -e 10 -i 4")), [0, 4, 8]);
    assert_eq!(sweep(&cfg("-b 1K -e 3K -i 1K")), [1024, 2048, 3072]);
    assert_eq!(cfg("-i 1K").step, Step::Increment(1024));
}

#[test]
fn flags_and_defaults() {
    let c = cfg("");
    assert_eq!((c.iters, c.warmup, c.check, c.root), (20, 5, true, 0));
    let c = cfg("-d int8 -o max -r 1 -n 3 -w 0 -c 0 -p 8 -z 1 -t 4 --csv a.csv --json=b.json");
    assert_eq!(c.dtype, hccl_tools::dtype::DType::Int8);
    assert_eq!(c.red_op, hccl_tools::cli::RedOp::Max);
    assert_eq!((c.root, c.iters, c.warmup, c.check), (1, 3, 0, false));
    assert_eq!(
        (c.ranks_per_node, c.zero_copy, c.threads),
        (Some(8), true, Some(4))
    );
    assert_eq!(c.csv.unwrap().to_str(), Some("a.csv"));
    assert_eq!(c.json.unwrap().to_str(), Some("b.json"));
    let c = cfg("-b128M");
    assert_eq!((c.min_bytes, c.max_bytes), (128 << 20, 128 << 20));
    let c = cfg("--maxbytes 1K");
    assert_eq!((c.min_bytes, c.max_bytes), (1024, 1024));
    assert_eq!(parse(args("-h"), &Defaults::vendor()), Ok(Parsed::Help));
}

#[test]
fn bad_values_are_rejected() {
    for s in [
        "-q",
        "--bogus",
        "-b",
        "-b 8X",
        "-d fp8",
        "-o avg",
        "-f 1",
        "-i 0",
        "-n 0",
        "-c 2",
        "-t 0",
        "-b 1M -e 1K",
        "-b 0",
        "-b 1 -e 1G -i 1",
    ] {
        assert!(parse(args(s), &Defaults::vendor()).is_err(), "{s}");
    }
}

#[test]
fn usage_errors_exit_2_with_clap_message_on_stderr() {
    for a in [
        &["-x"][..],
        &["-b", "12Q"],
        &["-d", "fp128"],
        &["-o", "avg"],
        &["-t", "2", "-r", "5"],
    ] {
        let o = run("broadcast_test", a);
        assert_eq!(o.status.code(), Some(2), "{a:?}");
        let e = stderr(&o);
        // clap's message: what is wrong, then the usage line or where to find it.
        assert!(
            e.starts_with("error:")
                && (e.contains("Usage: broadcast_test") || e.contains("try '--help'")),
            "{e}"
        );
        assert!(stdout(&o).is_empty());
    }
}

#[test]
fn help_goes_to_stdout() {
    let o = run("all_gather_test", &["-h"]);
    assert_eq!(o.status.code(), Some(0));
    assert!(stdout(&o).contains("Usage: all_gather_test"));
}

#[test]
fn one_row_per_size() {
    let o = run(
        "all_reduce_test",
        &[
            "-t", "2", "-b", "8", "-e", "8K", "-f", "4", "-n", "2", "-w", "1",
        ],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let rows = table(&stdout(&o));
    let sizes: Vec<u64> = rows.iter().map(|r| r.data_size).collect();
    assert_eq!(sizes, [8, 32, 128, 512, 2048, 8192]);
    for r in &rows {
        assert!(r.time_us > 0.0 && r.alg_bw > 0.0, "{r:?}");
        // All-reduce over 2 ranks: bus = alg × 2(n−1)/n = alg.
        assert!(
            (r.bus_bw - r.alg_bw).abs() <= 1e-6 * r.alg_bw.max(1.0),
            "{r:?}"
        );
        assert_eq!(r.check, "success");
    }
}
