//! `barrier_test`: one row of size 0 whatever the sizes asked, checked by the arrival order
//! (nobody leaves before the last rank entered), which an injected fault fails.

use std::process::Stdio;

use crate::common::{cmd, stderr, stdout, table};

#[test]
fn one_checked_row_on_2_3_4_thread_ranks() {
    let jobs: Vec<_> = ["2", "3", "4"]
        .into_iter()
        .map(|t| {
            let child = cmd("barrier_test", &["-t", t, "-b", "8", "-e", "1M", "-n", "3"])
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("spawn");
            (t, child)
        })
        .collect();
    for (t, child) in jobs {
        let o = child.wait_with_output().unwrap();
        assert!(o.status.success(), "-t {t}: {}", stderr(&o));
        let rows = table(&stdout(&o));
        assert_eq!(rows.len(), 1, "-t {t}: {}", stdout(&o));
        let r = &rows[0];
        assert_eq!((r.data_size, r.alg_bw, r.bus_bw), (0, 0.0, 0.0), "-t {t}");
        assert!(r.time_us > 0.0, "-t {t}: {r:?}");
        assert_eq!(r.check, "success", "-t {t}");
        assert!(stderr(&o).contains("no payload"), "{}", stderr(&o));
    }
}

#[test]
fn unchecked_is_null_and_a_fault_fails() {
    let o = cmd("barrier_test", &["-t", "2", "-c", "0"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(table(&stdout(&o))[0].check, "NULL");
    let o = cmd("barrier_test", &["-t", "3", "-n", "2"])
        .env("HCCL_TEST_FAULT_INJECT", "corrupt")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert_eq!(table(&stdout(&o))[0].check, "failed");
    assert!(
        stderr(&o).contains("barrier check failed: round 0"),
        "{}",
        stderr(&o)
    );
}
