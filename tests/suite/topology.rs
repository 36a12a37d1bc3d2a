//! `HCCL_TOPOLOGY_FILE` on real communicators: the described network reaches the selector's
//! shared-link model (and changes its choices), and a missing or malformed file fails init
//! with a parameter error naming the variable and the line.

use std::path::PathBuf;

use hccl::algo::cost::CostModel;
use hccl::algo::fabric::Fabric;
use hccl::algo::{select, Coll, Ctx, Topo};
use hccl::base::error::ErrorKind;

use crate::common::native::{comms, config};

/// A file in a fresh temporary directory, removed with it.
struct TempFile(PathBuf);

impl TempFile {
    fn new(name: &str, text: &str) -> TempFile {
        let dir = std::env::temp_dir().join(format!("hccl-topology-{}-{name}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("net.topo");
        std::fs::write(&p, text).unwrap();
        TempFile(p)
    }

    fn path(&self) -> &str {
        self.0.to_str().unwrap()
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(self.0.parent().unwrap());
    }
}

const HOSTS: &str = "a,a,a,a,b,b,b,b";
/// One leaf switch per host, uplinks at an eighth of the NIC.
const OVERSUBSCRIBED: &str = "# one host per leaf\nhosts_per_leaf 1\noversubscription 8\n";

#[test]
fn the_file_reaches_the_selector() {
    let file = TempFile::new("reach", OVERSUBSCRIBED);
    let with = comms(
        8,
        config(&[
            ("HCCL_TOPOLOGY_FILE", file.path()),
            ("HCCL_RANK_HOST_MAP", HOSTS),
        ])
        .unwrap(),
    );
    let without = comms(8, config(&[("HCCL_RANK_HOST_MAP", HOSTS)]).unwrap());
    let want = Fabric::parse(OVERSUBSCRIBED).unwrap();
    for c in &with {
        assert_eq!(c.cost_model().fabric, Some(want));
    }
    // Without a file the selector still shares each host's NIC among its ranks.
    assert_eq!(without[0].cost_model().fabric, Some(Fabric::default()));
    // Every choice is the selector's under the file's model, and the file changes some.
    let topo = Topo::uniform(2, 4);
    let ctx = Ctx {
        me: 0,
        n: 8,
        elem: 4,
        network: false,
        topo: &topo,
        deterministic: false,
        processes: false,
        crowded: false,
    };
    let model: CostModel = with[0].cost_model();
    let mut changed = Vec::new();
    for k in 10..=24 {
        let coll = Coll::AllReduce { count: 1 << k };
        let a = with[0].algorithm_for(&coll, 4);
        assert_eq!(a, select::choose_with(&coll, &ctx, &model), "count 2^{k}");
        for c in &with {
            assert_eq!(c.algorithm_for(&coll, 4), a, "ranks disagree at 2^{k}");
        }
        if a != without[0].algorithm_for(&coll, 4) {
            changed.push((k, a));
        }
    }
    assert!(
        !changed.is_empty(),
        "the oversubscribed uplinks never changed the choice"
    );
}

#[test]
fn bad_topology_files_fail_init_naming_the_variable() {
    let missing = "/nonexistent/hccl/net.topo";
    let e = config(&[("HCCL_TOPOLOGY_FILE", missing)]).expect_err("missing file");
    assert_eq!(e.kind, ErrorKind::Para);
    let msg = e.to_string();
    assert!(
        msg.contains("HCCL_TOPOLOGY_FILE") && msg.contains(missing),
        "{msg}"
    );
    for (bad, want) in [
        ("nics 1\nspeed 10Gbit\n", "line 2: unknown key"),
        ("oversubscription 0.5", "line 1"),
        ("nic_bandwidth fast", "nic_bandwidth"),
    ] {
        let file = TempFile::new("bad", bad);
        let e = config(&[("HCCL_TOPOLOGY_FILE", file.path())]).expect_err(bad);
        assert_eq!(e.kind, ErrorKind::Para, "{bad}");
        let msg = e.to_string();
        assert!(
            msg.contains("HCCL_TOPOLOGY_FILE") && msg.contains(want),
            "{bad}: {msg}"
        );
    }
}
