//! HCCL_RDMA_TC and HCCL_RDMA_SL given at init: applied where the provider takes them, else
//! reported as ignored, never silently dropped. (Its own test binary: init happens once.)

mod common;

use common::{collect, LOG};
use hccl_net_ofi::abi::{code, NetConfig, NetProperties, UNSET};

#[test]
fn traffic_class_and_service_level_are_applied_or_reported_ignored() {
    // SAFETY: static table.
    let p = unsafe { &*hccl_net_ofi::hcclNetPluginV1() };
    let cfg = NetConfig {
        traffic_class: 132,
        service_level: 3,
    };
    // SAFETY: valid config and callback.
    assert_eq!(
        unsafe { (p.init)(&cfg, Some(collect), std::ptr::null_mut()) },
        code::SUCCESS
    );
    // SAFETY: all-zero is a valid NetProperties.
    let mut props: NetProperties = unsafe { std::mem::zeroed() };
    // SAFETY: valid out-pointer.
    assert_eq!(unsafe { (p.get_properties)(0, &mut props) }, code::SUCCESS);
    let log = LOG.lock().unwrap().join("\n");
    assert!(props.traffic_class == 132 || props.traffic_class == UNSET);
    if props.traffic_class == 132 {
        assert!(log.contains("traffic class 132 (DSCP 33) applied"), "{log}");
    } else {
        assert!(log.contains("traffic class 132 ignored"), "{log}");
    }
    assert_eq!(props.service_level, UNSET);
    assert!(log.contains("service level 3 ignored"), "{log}");
    eprintln!("{log}");
}
