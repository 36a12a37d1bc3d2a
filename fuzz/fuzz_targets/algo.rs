//! The two text grammars of the algorithm layer, on raw text: `HCCL_ALGO` / `hcclAlgo`
//! (`algo::spec::parse`) and `HCCL_COST_MODEL` (`CostModel::with_overrides`). The first byte
//! picks the parser. Accepted cost models must stay positive and finite.

#![no_main]

use hccl::algo::cost::{CostModel, LinkKind};
use hccl::algo::spec;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&which, rest)) = data.split_first() else {
        return;
    };
    let text = String::from_utf8_lossy(rest);
    if which % 2 == 0 {
        let _ = spec::parse(&text);
        return;
    }
    let base = CostModel {
        level0: LinkKind::Memory.default_cost(),
        level1: LinkKind::Network.default_cost(),
        gamma: 3e9,
        fabric: None,
    };
    if let Ok(m) = base.with_overrides(&text) {
        for l in [m.level0, m.level1] {
            for x in [l.alpha, l.beta, l.peer, l.mesh_beta] {
                assert!(x.is_finite() && x > 0.0, "{text:?} gave {x}");
            }
        }
        assert!(m.gamma.is_finite() && m.gamma > 0.0);
    }
});
