//! `HCCL_ENTRY_LOG_ENABLE=1` logs every API entry with its arguments, whatever the log level;
//! without it, no entry line is written.

use crate::common::*;
use hccl::ffi::coll_api::*;
use hccl::ffi::comm_api::*;
use hccl::ffi::types::*;
use std::ptr::null_mut;
use std::time::Duration;

const TEST: &str = "entry_lines_follow_the_switch";

/// The calls the child makes, and a piece of the line each must produce.
const EXPECTED: [&str; 8] = [
    "entry HcclGetRootInfo rootInfo=0x",
    "entry HcclCommInitRootInfo nRanks=1 rootInfo=0x",
    " rank=0 comm=0x",
    "entry HcclGetRankSize comm hccl_",
    "rank 0/1 sendBuf=0x",
    " count=4 dataType=4 op=0 stream=0x0",
    "entry HcclGetErrorString code=1",
    "entry HcclCommDestroy comm hccl_",
];

fn entry_lines(stderr: &str) -> Vec<&str> {
    stderr
        .lines()
        .filter(|l| l.contains(" entry Hccl"))
        .collect()
}

#[test]
fn entry_lines_follow_the_switch() {
    if !is_child() {
        for level in [None, Some("4"), Some("0")] {
            let mut env = vec![("HCCL_ENTRY_LOG_ENABLE", "1")];
            env.extend(level.map(|l| ("ASCEND_GLOBAL_LOG_LEVEL", l)));
            let out = run_self(TEST, &env, Duration::from_secs(60));
            let lines = entry_lines(&out.stderr).join("\n");
            for want in EXPECTED {
                assert!(
                    lines.contains(want),
                    "level {level:?}: no {want:?} in\n{lines}"
                );
            }
            // One line per call, each naming the API once.
            assert_eq!(entry_lines(&out.stderr).len(), 6, "{lines}");
            assert!(lines.contains("entry HcclAllReduce comm hccl_"), "{lines}");
        }
        let quiet = run_self(
            TEST,
            &[("HCCL_ENTRY_LOG_ENABLE", "0")],
            Duration::from_secs(60),
        );
        assert_eq!(entry_lines(&quiet.stderr), Vec::<&str>::new());
        return;
    }
    let ri = root_info();
    let c = init_rank(1, &ri, 0);
    let mut n = 0u32;
    let b = [1f32; 4];
    let mut o = [0f32; 4];
    unsafe {
        assert_eq!(HcclGetRankSize(c, &mut n), HcclResult::HCCL_SUCCESS);
        let r = HcclAllReduce(
            b.as_ptr() as *mut _,
            o.as_mut_ptr() as *mut _,
            4,
            FP32,
            SUM,
            c,
            null_mut(),
        );
        assert_eq!(r, HcclResult::HCCL_SUCCESS);
        HcclGetErrorString(1);
        assert_eq!(HcclCommDestroy(c), HcclResult::HCCL_SUCCESS);
    }
    assert_eq!(o, [1.0; 4]);
}
