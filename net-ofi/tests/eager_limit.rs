//! rxm's eager limit on libfabric < 1.18: the plugin raises it for the tcp provider (and sends
//! nothing larger), leaves a value the user set alone, and takes its own value back when another
//! provider is chosen. Each case initialises the plugin once, so each runs in its own process
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
    for (case, provider, user) in [
        ("tcp", "tcp", None),
        ("user", "tcp", Some("65536")),
        ("sockets", "sockets", None),
    ] {
        let mut cmd = Command::new(&exe);
        cmd.args(["eager_limit_follows_the_provider", "--exact", "--nocapture"])
            .env(CASE, case)
            .env("FI_PROVIDER", provider)
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
