//! A communicator's configuration: what the caller's `HcclCommConfig` set, merged over the
//! environment, once at init. Hot paths read only the merged struct.

use std::time::Duration;

use crate::algo::fabric::Fabric;
use crate::algo::spec::{self, AlgoSpec};
use crate::base::env::{Deterministic, EnvConfig};
use crate::base::error::{Error, ErrorKind, Result};

/// Default staging size per direction, MB (as the vendor's `HCCL_BUFFSIZE`).
pub const DEFAULT_BUFFSIZE_MB: u32 = 200;

/// Fields a caller may set in `HcclCommConfig`; `None` means "not set" (take the environment).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Overrides {
    /// `hcclBufferSize`, MB.
    pub buffer_mb: Option<u32>,
    /// `hcclDeterministic`: 0 off, 1 on, 2 strict.
    pub deterministic: Option<u32>,
    /// `hcclCommName`.
    pub name: Option<String>,
    /// `hcclUdi`.
    pub udi: Option<String>,
    /// `hcclOpExpansionMode`.
    pub op_expansion_mode: u32,
    /// `hcclWorldRankID`.
    pub world_rank_id: u32,
    /// `hcclJobID`.
    pub job_id: u64,
    /// `hcclExecTimeOut`, seconds.
    pub exec_timeout_s: Option<i32>,
    /// `hcclAlgo`.
    pub algo: Option<String>,
    /// `hcclBufferName`.
    pub buffer_name: Option<String>,
}

/// The merged configuration of one communicator.
#[derive(Clone, Debug, PartialEq)]
pub struct CommConfig {
    /// Staging buffer size per direction, bytes.
    pub buffer_bytes: usize,
    /// Reproducibility of reductions.
    pub deterministic: Deterministic,
    /// Name chosen by the caller, if any.
    pub name: Option<String>,
    /// How long a collective waits for peers (`None`: forever).
    pub exec_timeout: Option<Duration>,
    /// How long init waits for peers.
    pub connect_timeout: Duration,
    /// Algorithm selection text (`HCCL_ALGO` syntax), if any.
    pub algo: Option<String>,
    /// `algo`, parsed and validated (empty: automatic selection everywhere).
    pub algo_spec: AlgoSpec,
    /// Force network links even inside one host/process (`HCCL_INTRA_ROCE_ENABLE=1`).
    pub force_network: bool,
    /// World rank id given by the caller (informational).
    pub world_rank_id: u32,
    /// Job id given by the caller (informational).
    pub job_id: u64,
    /// The network described by `HCCL_TOPOLOGY_FILE`, if set (else the selector derives the
    /// shared-link model from the rank layout).
    pub fabric: Option<Fabric>,
    /// The process environment the communicator was built under.
    pub env: EnvConfig,
}

impl CommConfig {
    /// Merges caller overrides over the environment; config fields win.
    pub fn merge(ov: &Overrides, env: &EnvConfig) -> Result<CommConfig> {
        let buffer_mb = match ov.buffer_mb {
            Some(0) => {
                return Err(Error::new(
                    ErrorKind::Para,
                    "hcclBufferSize must be at least 1 MB",
                ))
            }
            Some(mb) => mb,
            None => env.buffsize_mb.unwrap_or(DEFAULT_BUFFSIZE_MB),
        };
        let deterministic = match ov.deterministic {
            None => env.deterministic,
            Some(0) => Deterministic::Off,
            Some(1) => Deterministic::On,
            Some(2) => Deterministic::Strict,
            Some(v) => {
                return Err(Error::new(
                    ErrorKind::Para,
                    format!("hcclDeterministic must be 0, 1 or 2, got {v}"),
                ))
            }
        };
        let exec_timeout = match ov.exec_timeout_s {
            None => env.exec_timeout,
            Some(0) => None,
            Some(s) if s > 0 => Some(Duration::from_secs(s as u64)),
            Some(s) => {
                return Err(Error::new(
                    ErrorKind::Para,
                    format!("hcclExecTimeOut must be >= 0 seconds, got {s}"),
                ))
            }
        };
        if let Some(n) = &ov.name {
            if n.len() >= 128 {
                return Err(Error::new(
                    ErrorKind::Para,
                    "hcclCommName longer than 127 bytes",
                ));
            }
        }
        let algo = ov.algo.clone().or_else(|| env.algo.clone());
        let source = if ov.algo.is_some() {
            "hcclAlgo"
        } else {
            "HCCL_ALGO"
        };
        let algo_spec = match &algo {
            None => AlgoSpec::default(),
            Some(t) => {
                spec::parse(t).map_err(|e| Error::new(ErrorKind::Para, format!("{source}: {e}")))?
            }
        };
        if let Some(t) = &env.cost_model {
            // Checked here so that a bad value fails init before any rendezvous.
            let any = crate::algo::cost::CostModel {
                level0: crate::algo::cost::LinkKind::Memory.default_cost(),
                level1: crate::algo::cost::LinkKind::Network.default_cost(),
                gamma: 1.0,
                fabric: None,
            };
            any.with_overrides(t)
                .map_err(|e| Error::new(ErrorKind::Para, format!("HCCL_COST_MODEL: {e}")))?;
        }
        for w in &algo_spec.warnings {
            log::warn!("{source}: {w}");
        }
        let fabric = match &env.topology_file {
            None => None,
            Some(path) => Some(read_topology(path)?),
        };
        Ok(CommConfig {
            buffer_bytes: buffer_mb as usize * (1 << 20),
            deterministic,
            name: ov.name.clone(),
            exec_timeout,
            connect_timeout: env.connect_timeout,
            algo,
            algo_spec,
            force_network: env.intra_roce,
            world_rank_id: ov.world_rank_id,
            job_id: ov.job_id,
            fabric,
            env: env.clone(),
        })
    }
}

/// Reads and parses the `HCCL_TOPOLOGY_FILE` at `path`; any failure is a parameter error
/// naming the variable, the file and the line.
fn read_topology(path: &std::path::Path) -> Result<Fabric> {
    let what = || format!("HCCL_TOPOLOGY_FILE={}", path.display());
    let text = std::fs::read_to_string(path)
        .map_err(|e| Error::new(ErrorKind::Para, format!("{}: cannot read: {e}", what())))?;
    Fabric::parse(&text).map_err(|e| Error::new(ErrorKind::Para, format!("{}: {e}", what())))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> EnvConfig {
        let map: std::collections::HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        EnvConfig::from_lookup(|k| map.get(k).cloned()).unwrap()
    }

    #[test]
    fn config_fields_override_environment() {
        let e = env(&[("HCCL_BUFFSIZE", "64"), ("HCCL_EXEC_TIMEOUT", "30")]);
        let c = CommConfig::merge(&Overrides::default(), &e).unwrap();
        assert_eq!(c.buffer_bytes, 64 << 20);
        assert_eq!(c.exec_timeout, Some(Duration::from_secs(30)));
        let ov = Overrides {
            buffer_mb: Some(8),
            exec_timeout_s: Some(5),
            deterministic: Some(1),
            ..Default::default()
        };
        let c = CommConfig::merge(&ov, &e).unwrap();
        assert_eq!(c.buffer_bytes, 8 << 20);
        assert_eq!(c.exec_timeout, Some(Duration::from_secs(5)));
        assert_eq!(c.deterministic, Deterministic::On);
    }

    #[test]
    fn algo_is_parsed_and_validated_at_init() {
        let e = env(&[("HCCL_ALGO", "level0:NA;level1:H-D_R")]);
        let c = CommConfig::merge(&Overrides::default(), &e).unwrap();
        assert_eq!(c.algo_spec.global, Some(crate::algo::Algo::Rhd));
        // The config field wins over the environment.
        let ov = Overrides {
            algo: Some("allreduce=level0:NA;level1:ring".into()),
            ..Default::default()
        };
        let c = CommConfig::merge(&ov, &e).unwrap();
        assert_eq!(c.algo_spec.global, None);
        assert_eq!(c.algo_spec.per_op.len(), 1);
        let bad = Overrides {
            algo: Some("level0:NA;level1:star".into()),
            ..Default::default()
        };
        let err = CommConfig::merge(&bad, &e).unwrap_err();
        assert_eq!(err.kind, ErrorKind::Para);
        assert!(
            err.msg.contains("hcclAlgo") && err.msg.contains("H-D_R"),
            "{}",
            err.msg
        );
    }

    #[test]
    fn defaults_and_bad_values() {
        let e = env(&[]);
        let c = CommConfig::merge(&Overrides::default(), &e).unwrap();
        assert_eq!(c.buffer_bytes, 200 << 20);
        for ov in [
            Overrides {
                buffer_mb: Some(0),
                ..Default::default()
            },
            Overrides {
                deterministic: Some(7),
                ..Default::default()
            },
            Overrides {
                exec_timeout_s: Some(-5),
                ..Default::default()
            },
        ] {
            assert_eq!(
                CommConfig::merge(&ov, &e).unwrap_err().kind,
                ErrorKind::Para
            );
        }
    }
}
