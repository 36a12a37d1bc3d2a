//! `HCCL_ALGO` / `hcclAlgo`: forcing algorithms, in the vendor's syntax.
//!
//! Grammar (whitespace around tokens ignored, names case-insensitive):
//! ```text
//! spec    := levels | op "=" levels ( "/" op "=" levels )* | "hybrid"
//! levels  := "level0:" l0 ( ";level1:" l1 )? ( ";level2:" l1 )?
//! op      := allreduce | allgather | reducescatter | broadcast | reduce | scatter | alltoall
//!            (alltoallv, alltoallvc accepted as alltoall)
//! l0      := NA | ring | fullmesh | pairwise | pipeline      (level0 is always a mesh here)
//! l1      := ring | H-D_R | NHR | NHR_V1 | NB | AHC | AHC_BROKE | pipeline | pairwise
//!            | fullmesh | tree | bruck | hier                  (the last four are ours)
//! ```
//! `level1` names the algorithm used for the whole operation (on one host as well, so tests can
//! force every algorithm). Vendor values we do not implement map to the closest algorithm we
//! have, with a warning naming both; anything else is an `HCCL_E_PARA` error listing the valid
//! values. `hybrid`, or `level1` left out, means automatic selection.

use super::{Algo, Coll};

/// Values accepted after `level1:` and what they map to (`exact` false: a stand-in).
pub const LEVEL1: [(&str, Algo, bool); 13] = [
    ("ring", Algo::Ring, true),
    ("H-D_R", Algo::Rhd, true),
    ("NB", Algo::Bruck, true),
    ("pairwise", Algo::Pairwise, true),
    ("NHR", Algo::Rhd, false),
    ("NHR_V1", Algo::Rhd, false),
    ("AHC", Algo::Hier, false),
    ("AHC_BROKE", Algo::Hier, false),
    ("pipeline", Algo::Hier, false),
    ("fullmesh", Algo::Direct, true),
    ("tree", Algo::Tree, true),
    ("bruck", Algo::Bruck, true),
    ("hier", Algo::Hier, true),
];

/// Values accepted after `level0:`.
pub const LEVEL0: [&str; 5] = ["NA", "ring", "fullmesh", "pairwise", "pipeline"];

/// Operation names accepted before `=`.
pub const OPS: [&str; 9] = [
    "allreduce",
    "allgather",
    "reducescatter",
    "broadcast",
    "reduce",
    "scatter",
    "alltoall",
    "alltoallv",
    "alltoallvc",
];

/// Operation families a spec can name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OpKind {
    /// AllReduce.
    AllReduce,
    /// AllGather(V).
    AllGather,
    /// ReduceScatter(V).
    ReduceScatter,
    /// Broadcast.
    Broadcast,
    /// Reduce.
    Reduce,
    /// Scatter.
    Scatter,
    /// AlltoAll, AlltoAllV, AlltoAllVC.
    AlltoAll,
}

impl OpKind {
    /// The family of `coll` (`None` for point-to-point and barrier).
    pub fn of(coll: &Coll) -> Option<OpKind> {
        Some(match coll {
            Coll::AllReduce { .. } => OpKind::AllReduce,
            Coll::AllGather { .. } | Coll::AllGatherV { .. } => OpKind::AllGather,
            Coll::ReduceScatter { .. } | Coll::ReduceScatterV { .. } => OpKind::ReduceScatter,
            Coll::Broadcast { .. } => OpKind::Broadcast,
            Coll::Reduce { .. } => OpKind::Reduce,
            Coll::Scatter { .. } => OpKind::Scatter,
            Coll::AlltoAllV { .. } => OpKind::AlltoAll,
            Coll::P2p { .. } | Coll::Barrier => return None,
        })
    }

    fn parse(s: &str) -> Option<OpKind> {
        Some(match s.to_ascii_lowercase().as_str() {
            "allreduce" => OpKind::AllReduce,
            "allgather" => OpKind::AllGather,
            "reducescatter" => OpKind::ReduceScatter,
            "broadcast" => OpKind::Broadcast,
            "reduce" => OpKind::Reduce,
            "scatter" => OpKind::Scatter,
            "alltoall" | "alltoallv" | "alltoallvc" => OpKind::AlltoAll,
            _ => return None,
        })
    }
}

/// A parsed algorithm specification.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AlgoSpec {
    /// Algorithm for every operation not named in `per_op`.
    pub global: Option<Algo>,
    /// Per-operation algorithms.
    pub per_op: Vec<(OpKind, Algo)>,
    /// Things to tell the user once (stand-ins used, settings without effect).
    pub warnings: Vec<String>,
}

fn valid_values() -> String {
    format!(
        "valid forms: \"level0:NA;level1:<algo>\" or \"<op>=level0:NA;level1:<algo>/<op>=...\"; \
         <algo> one of {}; level0 one of {}; <op> one of {}",
        LEVEL1.iter().map(|v| v.0).collect::<Vec<_>>().join(", "),
        LEVEL0.join(", "),
        OPS.join(", ")
    )
}

fn parse_levels(text: &str, warnings: &mut Vec<String>) -> Result<Option<Algo>, String> {
    let mut algo = None;
    let mut seen = [false; 3];
    for part in text.split(';').map(str::trim).filter(|p| !p.is_empty()) {
        let (lvl, val) = part
            .split_once(':')
            .map(|(a, b)| (a.trim().to_ascii_lowercase(), b.trim()))
            .ok_or_else(|| format!("{part:?} is not <level>:<algorithm>"))?;
        let li = match lvl.as_str() {
            "level0" => 0,
            "level1" => 1,
            "level2" => 2,
            _ => return Err(format!("unknown level {lvl:?} (level0, level1 or level2)")),
        };
        if std::mem::replace(&mut seen[li], true) {
            return Err(format!("{lvl} given twice"));
        }
        if li == 0 {
            let v = LEVEL0
                .iter()
                .find(|v| v.eq_ignore_ascii_case(val))
                .ok_or_else(|| format!("unknown level0 algorithm {val:?}"))?;
            if *v != "NA" {
                warnings.push(format!(
                    "level0:{v} has no effect: within a host we always use a mesh"
                ));
            }
            continue;
        }
        let (name, a, exact) = LEVEL1
            .iter()
            .find(|v| v.0.eq_ignore_ascii_case(val))
            .ok_or_else(|| format!("unknown {lvl} algorithm {val:?}"))?;
        if li == 2 {
            warnings.push(format!(
                "level2:{name} has no effect: there is no third level here"
            ));
            continue;
        }
        if !exact {
            warnings.push(format!(
                "level1:{name} is not implemented; using {}, the closest algorithm we have",
                a.name()
            ));
        }
        algo = Some(*a);
    }
    Ok(algo)
}

/// Parses `HCCL_ALGO` text; the error message names the bad part and lists valid values.
pub fn parse(text: &str) -> Result<AlgoSpec, String> {
    let t = text.trim();
    let mut spec = AlgoSpec::default();
    if t.is_empty() || t.eq_ignore_ascii_case("hybrid") {
        return Ok(spec);
    }
    let fail = |e: String| format!("{text:?}: {e}; {}", valid_values());
    if !t.contains('=') {
        spec.global = parse_levels(t, &mut spec.warnings).map_err(fail)?;
        return Ok(spec);
    }
    for item in t.split('/').map(str::trim).filter(|i| !i.is_empty()) {
        let (op, levels) = item
            .split_once('=')
            .ok_or_else(|| fail(format!("{item:?} lacks \"<op>=\"")))?;
        let kind = OpKind::parse(op.trim())
            .ok_or_else(|| fail(format!("unknown operation {:?}", op.trim())))?;
        if spec.per_op.iter().any(|(k, _)| *k == kind) {
            return Err(fail(format!("operation {:?} given twice", op.trim())));
        }
        if let Some(a) = parse_levels(levels, &mut spec.warnings).map_err(fail)? {
            spec.per_op.push((kind, a));
        }
    }
    Ok(spec)
}

/// The algorithm that stands in for `algo` on an operation it has no schedule for.
fn fallback(algo: Algo, coll: &Coll) -> Algo {
    match (algo, coll) {
        (_, Coll::AlltoAllV { .. }) => Algo::Pairwise,
        (Algo::Bruck | Algo::Tree, _) => Algo::Rhd,
        (Algo::Rhd | Algo::Hier, _) => Algo::Ring,
        _ => Algo::Direct,
    }
}

/// `algo`, or the closest algorithm that has a schedule for `coll`.
pub fn resolve(algo: Algo, coll: &Coll) -> Algo {
    let mut a = algo;
    while !a.supports(coll) {
        a = fallback(a, coll);
    }
    a
}

impl AlgoSpec {
    /// The algorithm forced for `coll`, already resolved to one that covers it.
    pub fn forced(&self, coll: &Coll) -> Option<Algo> {
        let kind = OpKind::of(coll)?;
        let a = self
            .per_op
            .iter()
            .find(|(k, _)| *k == kind)
            .map(|x| x.1)
            .or(self.global)?;
        Some(resolve(a, coll))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn global_and_per_op_forms() {
        let s = parse("level0:NA;level1:ring").unwrap();
        assert_eq!(s.global, Some(Algo::Ring));
        assert!(s.warnings.is_empty());
        let s =
            parse(" allreduce=level0:NA;level1:H-D_R/allgather=level0:NA;level1:ring ").unwrap();
        assert_eq!(s.global, None);
        assert_eq!(s.forced(&Coll::AllReduce { count: 4 }), Some(Algo::Rhd));
        assert_eq!(s.forced(&Coll::AllGather { count: 4 }), Some(Algo::Ring));
        assert_eq!(s.forced(&Coll::Broadcast { count: 4, root: 0 }), None);
        assert_eq!(parse("hybrid").unwrap(), AlgoSpec::default());
        assert_eq!(
            parse("LEVEL0:na;LEVEL1:h-d_r").unwrap().global,
            Some(Algo::Rhd)
        );
    }

    #[test]
    fn stand_ins_warn_and_fall_back_per_op() {
        let s = parse("level0:NA;level1:NHR").unwrap();
        assert_eq!(s.global, Some(Algo::Rhd));
        assert!(s.warnings[0].contains("NHR") && s.warnings[0].contains("rhd"));
        let s = parse("level0:NA;level1:NB").unwrap();
        assert_eq!(s.forced(&Coll::AllGather { count: 1 }), Some(Algo::Bruck));
        assert_eq!(s.forced(&Coll::AllReduce { count: 1 }), Some(Algo::Rhd));
        assert_eq!(
            s.forced(&Coll::Scatter { count: 1, root: 0 }),
            Some(Algo::Direct)
        );
        let s = parse("level0:NA;level1:pipeline").unwrap();
        assert_eq!(s.forced(&Coll::AllReduce { count: 1 }), Some(Algo::Hier));
        assert_eq!(
            s.forced(&Coll::AllGatherV {
                counts: vec![1],
                displs: vec![0]
            }),
            Some(Algo::Ring)
        );
    }

    #[test]
    fn unknown_values_are_errors_listing_valid_ones() {
        for bad in [
            "level0:NA;level1:star",
            "level1",
            "level3:ring",
            "gather=level0:NA;level1:ring",
            "allreduce=level0:NA;level1:ring/allreduce=level0:NA;level1:NB",
            "level0:bogus;level1:ring",
        ] {
            let e = parse(bad).unwrap_err();
            assert!(e.contains("H-D_R") && e.contains("allreduce"), "{bad}: {e}");
        }
    }
}
