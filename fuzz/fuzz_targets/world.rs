//! Launcher-world detection (`comm::world::detect`): ranks, sizes, rendezvous address and job
//! key from mpirun/torchrun/hcclrun variables. Names are recorded from a first run, as in the
//! `env` target; the input is a list of `(name index, length, value bytes)`.

#![no_main]

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::OnceLock;

use hccl::base::limits::MAX_RANKS;
use hccl::comm::world::detect;
use libfuzzer_sys::fuzz_target;

/// Every name `detect` asks for when all of them are set (so every branch asks its names).
fn names() -> &'static [String] {
    static NAMES: OnceLock<Vec<String>> = OnceLock::new();
    NAMES.get_or_init(|| {
        let asked = RefCell::new(Vec::<String>::new());
        for value in ["0", "1", "h"] {
            let _ = detect(&|k: &str| {
                asked.borrow_mut().push(k.to_string());
                Some(value.to_string())
            });
        }
        let _ = detect(&|k: &str| {
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
    if let Ok(Some(w)) = detect(&|k: &str| env.get(k).cloned()) {
        assert!(w.rank < w.size && w.size <= MAX_RANKS);
        assert!(w.local_rank.is_none() || w.local_size.is_some() || w.source != "");
    }
});
