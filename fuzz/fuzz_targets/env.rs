//! Every environment variable the library reads, through `EnvConfig::from_lookup` and the
//! per-communicator merge (which parses `HCCL_ALGO` and `HCCL_COST_MODEL`).
//!
//! The variable names are not hard-coded: they are recorded from a first parse of an empty
//! environment, so a variable added to the library is fuzzed without touching this file. The
//! input is a list of `(name index, length, value bytes)`; non-UTF-8 bytes reach the parser
//! as the lossy conversion the process environment gets.

#![no_main]

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::OnceLock;

use hccl::base::env::EnvConfig;
use hccl::comm::config::{CommConfig, Overrides};
use libfuzzer_sys::fuzz_target;

fn names() -> &'static [String] {
    static NAMES: OnceLock<Vec<String>> = OnceLock::new();
    NAMES.get_or_init(|| {
        let asked = RefCell::new(Vec::<String>::new());
        let _ = EnvConfig::from_lookup(|k| {
            asked.borrow_mut().push(k.to_string());
            None
        });
        let mut v = asked.into_inner();
        v.sort();
        v.dedup();
        v
    })
}

fuzz_target!(|data: &[u8]| {
    let names = names();
    let mut env = HashMap::new();
    let mut rest = data;
    while let [idx, len, tail @ ..] = rest {
        let len = usize::from(*len).min(tail.len());
        let (value, next) = tail.split_at(len);
        let name = &names[usize::from(*idx) % names.len()];
        env.insert(name.clone(), String::from_utf8_lossy(value).into_owned());
        rest = next;
    }
    if let Ok(cfg) = EnvConfig::from_lookup(|k| env.get(k).cloned()) {
        let _ = CommConfig::merge(&Overrides::default(), &cfg);
    }
});
