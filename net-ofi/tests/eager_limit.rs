//! rxm's eager limit on libfabric < 1.18: the plugin raises it for the tcp provider under rxm
//! (and sends nothing larger), leaves a value the user set alone, and takes its own value back
//! when another provider is chosen. The tcp provider's own connected endpoints (the default for
//! tcp) involve no rxm: no limit, nothing set. Each case initialises the plugin once, so each runs in its own process
//! (this test binary, started again with `EAGER_CASE` set).

mod common;

use common::{collect, LOG};
use hccl_net_ofi::abi::{code, NetProperties};
use std::process::Command;

const CASE: &str = "EAGER_CASE";
const VAR: &str = "FI_OFI_RXM_EAGER_LIMIT";

/// Initialises the plugin and returns device 0's provider and largest message.
fn init() -> (String, u64) {
    // SAFETY: static table.
    let p = unsafe { &*hccl_net_ofi::hcclNetPluginV1() };
    // SAFETY: NULL config is allowed; collect is a valid logger.
    let rc = unsafe { (p.init)(std::ptr::null(), Some(collect), std::ptr::null_mut()) };
    assert_eq!(rc, code::SUCCESS, "init");
    // SAFETY: all-zero is a valid NetProperties.
    let mut props: NetProperties = unsafe { std::mem::zeroed() };
    // SAFETY: valid out-pointer.
    assert_eq!(unsafe { (p.get_properties)(0, &mut props) }, code::SUCCESS);
    let provider = props
        .provider
        .iter()
        .take_while(|&&c| c != 0)
        .map(|&c| c as u8 as char)
        .collect();
    (provider, props.max_message_bytes)
}

/// libfabric's version as the plugin logged it is before 1.18.
fn old_libfabric() -> bool {
    let log = LOG.lock().unwrap();
    let v = log
        .iter()
        .find_map(|l| l.strip_prefix("net-ofi: libfabric "))
        .unwrap_or_else(|| panic!("no version logged:\n{}", log.join("\n")));
    let mut parts = v
        .split('.')
        .map(|x| x.parse::<u32>().expect("version number"));
    let (major, minor) = (parts.next().unwrap(), parts.next().unwrap());
    (major, minor) < (1, 18)
}

fn run_case(case: &str) {
    let (provider, max) = init();
    let var = std::env::var(VAR).ok();
    eprintln!("case {case}: provider {provider}, largest message {max}, {VAR}={var:?}");
    match case {
        "tcp" if provider == "tcp;ofi_rxm" && old_libfabric() => {
            assert_eq!(var.as_deref(), Some("262144"));
            assert_eq!(max, 256 << 10);
        }
        "user" if provider == "tcp;ofi_rxm" && old_libfabric() => {
            assert_eq!(var.as_deref(), Some("65536"));
            assert_eq!(max, 64 << 10);
        }
        "tcp" | "user" => eprintln!("SKIPPED: libfabric 1.18 or later keeps rxm's defaults"),
        "msg" => {
            assert_eq!(provider, "tcp");
            assert_eq!(var, None, "connected endpoints need no rxm limit");
            assert!(max > 256 << 10, "largest message {max}");
        }
        "sockets" => {
            assert_eq!(provider, "sockets");
            assert_eq!(var, None, "the plugin's value must not outlive discovery");
        }
        other => panic!("unknown case {other}"),
    }
}

#[test]
fn eager_limit_follows_the_provider() {
    if let Ok(case) = std::env::var(CASE) {
        run_case(&case);
        return;
    }
    let exe = std::env::current_exe().expect("test executable");
    for (case, provider, endpoint, user) in [
        ("tcp", "tcp", "rdm", None),
        ("user", "tcp", "rdm", Some("65536")),
        ("msg", "tcp", "", None),
        ("sockets", "sockets", "", None),
    ] {
        let mut cmd = Command::new(&exe);
        cmd.args(["eager_limit_follows_the_provider", "--exact", "--nocapture"])
            .env(CASE, case)
            .env("FI_PROVIDER", provider)
            .env("HCCL_NET_OFI_ENDPOINT", endpoint)
            .env_remove(VAR);
        if let Some(v) = user {
            cmd.env(VAR, v);
        }
        let out = cmd.output().expect("run the case");
        assert!(
            out.status.success(),
            "case {case}:\n{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
