//! The selector's cost model on real communicators: `HCCL_COST_MODEL` overrides reach the
//! choice, bad values fail init, and `HCCL_COST_CALIBRATE=1` measures the links at init and
//! gives every rank the same figures (so all ranks still choose alike).

use hccl::algo::cost::{CostModel, LinkKind};
use hccl::algo::{Algo, Coll};
use hccl::base::dtype::{DataType, ReduceOp};
use hccl::base::error::ErrorKind;
use hccl::comm::communicator::OpArgs;

use crate::common::native::{comms, config};

const BIG: Coll = Coll::AllReduce { count: 16 << 20 };

#[test]
fn overrides_reach_the_selector() {
    let plain = comms(4, config(&[]).unwrap());
    // Shared memory between threads: one mesh step wins for large AllReduce by default.
    assert_eq!(plain[0].algorithm_for(&BIG, 4), Algo::Direct);
    // A mesh peer costing a whole second makes any multi-step algorithm cheaper.
    let cfg = config(&[("HCCL_COST_MODEL", "level0:peer=1;gamma=4e9")]).unwrap();
    let slow_mesh = comms(4, cfg);
    for c in &slow_mesh {
        assert_eq!(c.cost_model().level0.peer, 1.0);
        assert_eq!(c.cost_model().gamma, 4e9);
        assert_ne!(c.algorithm_for(&BIG, 4), Algo::Direct);
    }
}

#[test]
fn bad_cost_model_fails_init_with_the_syntax() {
    for bad in [
        "level1:alpha=-3",
        "level3:beta=1e9",
        "level0:speed=1",
        "gamma",
    ] {
        let e = config(&[("HCCL_COST_MODEL", bad)]).expect_err(bad);
        assert_eq!(e.kind, ErrorKind::Para, "{bad}");
        let msg = e.to_string();
        assert!(
            msg.contains("HCCL_COST_MODEL") && msg.contains("level0:alpha="),
            "{bad}: {msg}"
        );
    }
}

#[test]
fn calibration_measures_both_levels_and_agrees() {
    // Two "hosts" so the ring probe crosses both levels (all links are memory here, so the
    // measured level1 figures are memory-like: nothing like the 10 GbE default).
    let cfg = config(&[
        ("HCCL_COST_CALIBRATE", "1"),
        ("HCCL_RANK_HOST_MAP", "a,a,b,b"),
    ])
    .unwrap();
    let cs = comms(4, cfg);
    let m: Vec<CostModel> = cs.iter().map(|c| c.cost_model()).collect();
    assert!(m.iter().all(|x| *x == m[0]), "ranks disagree: {m:?}");
    let defaults = LinkKind::Network.default_cost();
    for l in [m[0].level0, m[0].level1] {
        assert!(l.alpha.is_finite() && l.alpha > 0.0, "{l:?}");
        assert!(l.beta.is_finite() && l.beta > 0.0, "{l:?}");
    }
    assert_ne!(m[0].level1.alpha, defaults.alpha);
    assert_ne!(m[0].level1.beta, defaults.beta);
    // Explicit figures win over measured ones.
    let cfg = config(&[
        ("HCCL_COST_CALIBRATE", "1"),
        ("HCCL_COST_MODEL", "level1:alpha=0.5"),
        ("HCCL_RANK_HOST_MAP", "a,a,b,b"),
    ])
    .unwrap();
    let cs2 = comms(4, cfg);
    assert!(cs2.iter().all(|c| c.cost_model().level1.alpha == 0.5));
    // The communicators work after the probe: an AllReduce with exact integer sums.
    std::thread::scope(|sc| {
        for c in &cs {
            sc.spawn(move || {
                let input: Vec<i32> = (0..1000).map(|i| i * (c.rank() as i32 + 1)).collect();
                let mut out = vec![0i32; 1000];
                let args = OpArgs {
                    name: "AllReduce",
                    coll: Coll::AllReduce { count: 1000 },
                    dtype: DataType::Int32,
                    op: Some(ReduceOp::Sum),
                    send: input.as_ptr() as usize,
                    recv: out.as_mut_ptr() as usize,
                    ext: Vec::new(),
                    compress: None,
                };
                c.execute(&args).expect("AllReduce");
                let want: Vec<i32> = (0..1000).map(|i| i * 10).collect();
                assert_eq!(out, want);
            });
        }
    });
}
