//! The rank table parser (`HcclCommInitClusterInfo`). A table that parses must answer every
//! query about its ranks consistently.

#![no_main]

use hccl::comm::rank_table::RankTable;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(table) = RankTable::parse(text) else {
        return;
    };
    let n = table.rank_count();
    assert!(n >= 1);
    for r in 0..n {
        let (server, dev) = table
            .rank(r)
            .expect("every rank below the count is in the table");
        assert_eq!(dev.rank_id, r);
        let si = table.server_index_of(r).expect("server of a rank");
        assert_eq!(table.servers[si].server_id, server.server_id);
    }
    assert!(table.rank(n).is_none());
    let _ = table.fingerprint();
});
