//! The plugin through its C interface, as libhccl uses it: a C program built against
//! `hccl/hccl_net.h` loads `libhccl_net_ofi.so` with dlopen and runs two processes.

mod common;

use std::process::Command;

/// Compiled once per test binary: tests run in parallel, and rewriting an executable while
/// another test runs it fails with "text file busy".
fn net_plugin_exe() -> std::path::PathBuf {
    static EXE: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();
    EXE.get_or_init(|| {
        common::compile(
            &common::workspace().join("net-ofi/ctests/net_plugin.c"),
            "net_plugin",
        )
    })
    .clone()
}

/// The tcp provider by default: connected endpoints, messages matched in order.
#[test]
fn two_processes_over_the_tcp_provider() {
    let out = Command::new(net_plugin_exe())
        .arg(common::plugin())
        .env("FI_PROVIDER", "tcp")
        .env_remove("HCCL_NET_OFI_ENDPOINT")
        .output()
        .expect("run net_plugin");
    let t = common::text(&out);
    assert!(out.status.success(), "net_plugin failed:\n{t}");
    assert!(t.contains("provider tcp, "), "{t}");
    assert!(
        t.contains("flags 0x5"),
        "RMA and in-order matching expected: {t}"
    );
    assert!(t.contains("net plugin test passed"), "{t}");
}

/// The tcp provider through rxm's reliable-datagram endpoints, tagged messages.
#[test]
fn two_processes_over_the_tcp_provider_through_rxm() {
    let out = Command::new(net_plugin_exe())
        .arg(common::plugin())
        .env("FI_PROVIDER", "tcp")
        .env("HCCL_NET_OFI_ENDPOINT", "rdm")
        .output()
        .expect("run net_plugin");
    let t = common::text(&out);
    assert!(out.status.success(), "net_plugin failed:\n{t}");
    assert!(t.contains("provider tcp;ofi_rxm"), "{t}");
    assert!(t.contains("net plugin test passed"), "{t}");
}

#[test]
fn no_usable_provider_is_no_device() {
    let out = Command::new(net_plugin_exe())
        .arg(common::plugin())
        .arg("expect-no-device")
        .env("FI_PROVIDER", "hccl_no_such_provider")
        .output()
        .expect("run net_plugin");
    let t = common::text(&out);
    assert!(out.status.success(), "net_plugin failed:\n{t}");
    assert!(t.contains("no libfabric provider works here"), "{t}");
}

/// Runs on machines with an RDMA device (RoCE or InfiniBand); reports itself skipped elsewhere.
#[test]
fn two_processes_over_the_verbs_provider() {
    let probe = Command::new("fi_info").args(["-p", "verbs"]).output();
    match probe {
        Ok(o) if o.status.success() => {}
        Ok(o) => {
            eprintln!(
                "SKIPPED two_processes_over_the_verbs_provider: `fi_info -p verbs` finds no RDMA device ({})",
                common::text(&o).trim()
            );
            return;
        }
        Err(e) => {
            eprintln!("SKIPPED two_processes_over_the_verbs_provider: fi_info (libfabric-bin) not runnable: {e}");
            return;
        }
    }
    let out = Command::new(net_plugin_exe())
        .arg(common::plugin())
        .env("FI_PROVIDER", "verbs")
        .output()
        .expect("run net_plugin");
    let t = common::text(&out);
    assert!(out.status.success(), "net_plugin over verbs failed:\n{t}");
    assert!(t.contains("provider verbs"), "{t}");
}

/// The Rust mirror of every struct of the header has the C compiler's sizes and offsets.
#[test]
fn header_layout_matches_the_rust_types() {
    use hccl_net_ofi::abi::{MrDesc, NetConfig, NetHandle, NetProperties, PluginV1};
    use std::mem::{offset_of, size_of};
    let src = common::plugin().parent().expect("dir").join("net_layout.c");
    let fields: &[(&str, &str, usize)] = &[
        (
            "hcclNetConfig_t",
            "serviceLevel",
            offset_of!(NetConfig, service_level),
        ),
        (
            "hcclNetProperties_t",
            "provider",
            offset_of!(NetProperties, provider),
        ),
        (
            "hcclNetProperties_t",
            "fabric",
            offset_of!(NetProperties, fabric),
        ),
        (
            "hcclNetProperties_t",
            "speedMbps",
            offset_of!(NetProperties, speed_mbps),
        ),
        (
            "hcclNetProperties_t",
            "maxMessageBytes",
            offset_of!(NetProperties, max_message_bytes),
        ),
        (
            "hcclNetProperties_t",
            "flags",
            offset_of!(NetProperties, flags),
        ),
        (
            "hcclNetProperties_t",
            "trafficClass",
            offset_of!(NetProperties, traffic_class),
        ),
        (
            "hcclNetProperties_t",
            "serviceLevel",
            offset_of!(NetProperties, service_level),
        ),
        ("hcclNetMrDesc_t", "key", offset_of!(MrDesc, key)),
        ("hcclNetPlugin_v1_t", "name", offset_of!(PluginV1, name)),
        ("hcclNetPlugin_v1_t", "init", offset_of!(PluginV1, init)),
        (
            "hcclNetPlugin_v1_t",
            "connectTest",
            offset_of!(PluginV1, connect_test),
        ),
        (
            "hcclNetPlugin_v1_t",
            "getMrDesc",
            offset_of!(PluginV1, get_mr_desc),
        ),
        ("hcclNetPlugin_v1_t", "iwrite", offset_of!(PluginV1, iwrite)),
        ("hcclNetPlugin_v1_t", "test", offset_of!(PluginV1, test)),
        (
            "hcclNetPlugin_v1_t",
            "closeComm",
            offset_of!(PluginV1, close_comm),
        ),
        (
            "hcclNetPlugin_v1_t",
            "waitFd",
            offset_of!(PluginV1, wait_fd),
        ),
        (
            "hcclNetPlugin_v1_t",
            "isendHead",
            offset_of!(PluginV1, isend_head),
        ),
    ];
    let sizes: &[(&str, usize)] = &[
        ("hcclNetConfig_t", size_of::<NetConfig>()),
        ("hcclNetProperties_t", size_of::<NetProperties>()),
        ("hcclNetHandle_t", size_of::<NetHandle>()),
        ("hcclNetMrDesc_t", size_of::<MrDesc>()),
        ("hcclNetPlugin_v1_t", size_of::<PluginV1>()),
    ];
    let mut c = String::from(
        "#include <stddef.h>\n#include <stdio.h>\n#include \"hccl/hccl_net.h\"\nint main(void) {\n",
    );
    let mut expect = String::new();
    for (ty, f, off) in fields {
        c += &format!("    printf(\"{ty}.{f} %zu\\n\", offsetof({ty}, {f}));\n");
        expect += &format!("{ty}.{f} {off}\n");
    }
    for (ty, size) in sizes {
        c += &format!("    printf(\"sizeof {ty} %zu\\n\", sizeof({ty}));\n");
        expect += &format!("sizeof {ty} {size}\n");
    }
    c += "    return 0;\n}\n";
    std::fs::write(&src, c).expect("write layout probe");
    let out = Command::new(common::compile(&src, "net_layout"))
        .output()
        .expect("run layout probe");
    assert_eq!(String::from_utf8_lossy(&out.stdout), expect);
}
