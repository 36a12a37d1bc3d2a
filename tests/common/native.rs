//! Rank threads on the library's Rust API (rather than the C API of `common`): a
//! configuration from explicit variables and `n` communicators joined through a root info.
//! Used by the tests that need only this.

use std::collections::HashMap;

use hccl::base::env::EnvConfig;
use hccl::comm::communicator::{create_root_info, Communicator};
use hccl::comm::config::{CommConfig, Overrides};

/// A configuration from `pairs` alone (the process environment is not read), with connect and
/// execution timeouts generous enough for a loaded machine.
pub fn config(pairs: &[(&str, &str)]) -> hccl::base::error::Result<CommConfig> {
    let mut map: HashMap<String, String> = pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    map.insert("HCCL_CONNECT_TIMEOUT".into(), "30".into());
    map.insert("HCCL_EXEC_TIMEOUT".into(), "60".into());
    let env = EnvConfig::from_lookup(|k| map.get(k).cloned())?;
    CommConfig::merge(&Overrides::default(), &env)
}

/// `n` ranks as threads of this process, joined through a root info.
pub fn comms(n: u32, cfg: CommConfig) -> Vec<Communicator> {
    let info = create_root_info(&cfg.env).expect("root info");
    let threads: Vec<_> = (0..n)
        .map(|r| {
            let cfg = cfg.clone();
            std::thread::spawn(move || Communicator::init_root_info(n, &info, r, cfg))
        })
        .collect();
    threads
        .into_iter()
        .map(|t| t.join().expect("init thread").expect("init"))
        .collect()
}
