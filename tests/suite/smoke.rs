//! Quick end-to-end checks through the C entry points with ranks as threads.

use hccl::ffi::coll_api::*;
use hccl::ffi::comm_api::*;
use hccl::ffi::types::*;
use std::ptr::null_mut;

#[test]
fn allreduce_threads_root_info() {
    for n in [1u32, 2, 3, 4] {
        let mut ri = HcclRootInfo {
            internal: [0; 4108],
        };
        assert_eq!(
            unsafe { HcclGetRootInfo(&mut ri) },
            HcclResult::HCCL_SUCCESS
        );
        let ri_addr = &ri as *const HcclRootInfo as usize;
        let hs: Vec<_> = (0..n)
            .map(|r| {
                std::thread::spawn(move || unsafe {
                    let mut comm: HcclComm = null_mut();
                    let res = HcclCommInitRootInfo(n, ri_addr as *const HcclRootInfo, r, &mut comm);
                    assert_eq!(res, HcclResult::HCCL_SUCCESS);
                    for count in [0usize, 1, 7, 4099, 1 << 20] {
                        let send: Vec<f32> =
                            (0..count).map(|i| (r as usize + i % 5) as f32).collect();
                        let mut recv = vec![0f32; count];
                        let res = HcclAllReduce(
                            send.as_ptr() as *mut _,
                            recv.as_mut_ptr() as *mut _,
                            count as u64,
                            4,
                            0,
                            comm,
                            null_mut(),
                        );
                        assert_eq!(res, HcclResult::HCCL_SUCCESS);
                        for (i, v) in recv.iter().enumerate() {
                            let expect: f32 = (0..n).map(|q| (q as usize + i % 5) as f32).sum();
                            assert_eq!(*v, expect, "n={n} count={count} i={i}");
                        }
                    }
                    assert_eq!(HcclCommDestroy(comm), HcclResult::HCCL_SUCCESS);
                })
            })
            .collect();
        for h in hs {
            h.join().unwrap();
        }
    }
}
