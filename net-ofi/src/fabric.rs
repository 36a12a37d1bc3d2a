//! Device discovery: which libfabric provider, which interfaces, and the traffic class.

use crate::abi::{
    self, NetConfig, NetProperties, FLAG_IN_ORDER, FLAG_REG_REQUIRED, FLAG_RMA, UNSET,
};
use crate::error::{NetError, NetResult};
use crate::log;
use crate::sys::{self, FiInfo, HnoDomain, InfoDesc};
use std::ffi::CString;
use std::sync::Arc;

/// Providers tried in order when `FI_PROVIDER` does not choose: RDMA first, TCP last.
pub const PREFERRED: [&str; 3] = ["verbs", "efa", "tcp"];

/// Chooses the endpoint type: `msg`, `rdm`, or unset for the default (see [`EndpointChoice`]).
pub const ENDPOINT_ENV: &str = "HCCL_NET_OFI_ENDPOINT";

/// Which libfabric endpoint type the plugin opens.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EndpointChoice {
    /// Connected endpoints (`FI_EP_MSG`) for the tcp provider, reliable datagram (`FI_EP_RDM`)
    /// for the others. The tcp provider offers only `FI_EP_MSG` itself; its `FI_EP_RDM` is the
    /// rxm utility layered on it, which costs per message (and, before libfabric 1.18, caps
    /// messages at its eager size, see [`safe_max_message`]), while one connected endpoint per
    /// comm sends a message of any size as one stream. verbs and efa keep `FI_EP_RDM`, the
    /// path that has been run on them.
    Auto,
    /// `FI_EP_MSG` for every provider that offers it.
    Msg,
    /// `FI_EP_RDM` for every provider (tcp through rxm).
    Rdm,
}

impl EndpointChoice {
    /// The choice `value` of [`ENDPOINT_ENV`] names.
    pub fn parse(value: Option<&str>) -> NetResult<EndpointChoice> {
        match value.map(str::trim) {
            None | Some("") => Ok(EndpointChoice::Auto),
            Some(v) if v.eq_ignore_ascii_case("msg") => Ok(EndpointChoice::Msg),
            Some(v) if v.eq_ignore_ascii_case("rdm") => Ok(EndpointChoice::Rdm),
            Some(v) => Err(NetError::Invalid(format!(
                "{ENDPOINT_ENV}={v}: expected msg or rdm"
            ))),
        }
    }

    /// Endpoint types to try for a provider, connected (`true`) or reliable datagram
    /// (`false`), in order. `tcp`: the provider is libfabric's tcp provider.
    fn types(self, tcp: bool) -> &'static [bool] {
        match self {
            EndpointChoice::Auto if tcp => &[true, false],
            EndpointChoice::Auto | EndpointChoice::Rdm => &[false],
            EndpointChoice::Msg => &[true],
        }
    }
}

/// Immediate data the plugin's `iwrite` carries.
const IMM_BYTES: u64 = 4;

/// rxm's default eager limit in libfabric 1.17 (its bounce-buffer size): larger messages go by
/// its segmentation (SAR) protocol up to 128 KiB, by rendezvous above.
const RXM_EAGER_BYTES: u64 = 16 << 10;

/// rxm's eager limit this plugin asks for (`FI_OFI_RXM_EAGER_LIMIT`) on libfabric < 1.18,
/// where every message must stay eager ([`safe_max_message`]). Each message costs rxm and the
/// tcp provider several system calls, so 16 KiB messages bound the link's bandwidth by their
/// count; over tcp rxm takes an eager limit above its bounce-buffer size. The price is memory:
/// rxm preposts its receive bounce buffers (128 by default) at this size on every connection.
/// 256 KiB measured 68–73% of the built-in TCP link at 64 MiB against 60–66% for 128 KiB
/// (2 namespace hosts, quiet machine), with the same peak RSS.
pub const RXM_EAGER_WANTED: u64 = 256 << 10;

/// libfabric before 1.18 layers rxm over its first tcp provider (see [`safe_max_message`]).
fn old_tcp_rxm(provider: &str, api: u32) -> bool {
    provider == "tcp;ofi_rxm" && api < (1 << 16 | 18)
}

/// Sets `FI_OFI_RXM_EAGER_LIMIT` to [`RXM_EAGER_WANTED`] for libfabric `api` < 1.18 unless the
/// user set it; returns whether it did. Runs before libfabric's first `fi_getinfo`, so the value
/// is in place whenever rxm reads it (1.17 reads it as each endpoint opens).
pub fn ask_rxm_eager_limit(api: u32) -> bool {
    if api >= (1 << 16 | 18) || std::env::var_os("FI_OFI_RXM_EAGER_LIMIT").is_some() {
        return false;
    }
    // setenv races with getenv in other threads; the host calls init before it starts
    // collectives, and libfabric reads its parameters in the calling thread. libfabric offers
    // no race-free way: it reads its parameters only from the environment (fi_getparams just
    // lists them), and the one rxm endpoint option near it, FI_OPT_BUFFERED_LIMIT, bounds
    // rxm's buffered receives below the eager limit instead of setting that limit.
    std::env::set_var("FI_OFI_RXM_EAGER_LIMIT", RXM_EAGER_WANTED.to_string());
    true
}

/// rxm's eager limit in effect: `FI_OFI_RXM_EAGER_LIMIT` when it holds a number (as rxm parses
/// it), else rxm's default.
pub fn rxm_eager_limit(env: Option<&str>) -> u64 {
    env.and_then(|v| v.trim().parse::<u64>().ok())
        .filter(|&v| v > 0)
        .unwrap_or(RXM_EAGER_BYTES)
}

/// The largest message that is safe on `provider` of libfabric `api` (`FI_VERSION` layout),
/// given rxm's eager limit `rxm_eager`.
///
/// libfabric before 1.18 layers rxm over its first tcp provider, which serves the peer's RMA
/// reads of rxm's rendezvous protocol (messages above the eager size) with transfers that carry
/// no completion context. When the connection goes down with such a transfer queued (peer
/// lost, or the endpoint closed meanwhile) the tcp provider flushes it as a failed completion
/// without context and rxm's error handler dereferences that context: SIGSEGV in `fi_close` or
/// `fi_cq_read`. Keeping every message eager avoids the rendezvous protocol, so nothing without
/// a context is ever queued. 1.18 replaced that tcp provider with one that marks those
/// transfers internal.
pub fn safe_max_message(provider: &str, api: u32, max_msg_size: u64, rxm_eager: u64) -> u64 {
    if old_tcp_rxm(provider, api) {
        max_msg_size.min(rxm_eager)
    } else {
        max_msg_size
    }
}

/// One opened network interface (a libfabric fabric + domain).
pub struct Device {
    pub index: usize,
    domain: *mut HnoDomain,
    pub desc: InfoDesc,
    pub provider: String,
    pub fabric: String,
    pub name: String,
    /// RMA writes with immediate data are available.
    pub rma: bool,
    /// Buffers must be registered (FI_MR_LOCAL).
    pub mr_local: bool,
    /// Remote addresses are virtual addresses (else offsets into the region).
    pub mr_virt_addr: bool,
    /// The provider picks registration keys.
    pub mr_prov_key: bool,
    /// The traffic class applied (HCCL_RDMA_TC value), or UNSET.
    pub traffic_class: i32,
    /// The largest message this plugin sends on the device ([`safe_max_message`]).
    pub max_msg: u64,
    /// Connected endpoints (`FI_EP_MSG`, one per comm, messages matched in order), else
    /// reliable datagram (`FI_EP_RDM`, tagged messages).
    pub msg: bool,
}

// SAFETY: the domain is opened with FI_THREAD_SAFE and never changes after opening; it is
// closed only when the last Arc<Device> drops.
unsafe impl Send for Device {}
// SAFETY: as above.
unsafe impl Sync for Device {}

impl Device {
    pub fn domain(&self) -> *mut HnoDomain {
        self.domain
    }

    /// The C properties of this device.
    pub fn properties(&self) -> NetProperties {
        let mut p = NetProperties {
            name: [0; abi::NAME_BYTES],
            provider: [0; abi::NAME_BYTES],
            fabric: [0; abi::NAME_BYTES],
            speed_mbps: self.desc.speed_bps / 1_000_000,
            max_message_bytes: self.max_msg,
            flags: 0,
            reserved: 0,
            traffic_class: self.traffic_class,
            // libfabric has no service-level attribute (see `discover`).
            service_level: UNSET,
        };
        abi::set_name(&mut p.name, &self.name);
        abi::set_name(&mut p.provider, &self.provider);
        abi::set_name(&mut p.fabric, &self.fabric);
        if self.rma {
            p.flags |= FLAG_RMA;
        }
        if self.mr_local {
            p.flags |= FLAG_REG_REQUIRED;
        }
        if self.msg {
            p.flags |= FLAG_IN_ORDER;
        }
        p
    }
}

impl Drop for Device {
    fn drop(&mut self) {
        // SAFETY: opened by hno_domain_open, closed once, here; every endpoint and registration
        // holds an Arc<Device>, so none outlives the domain.
        unsafe { sys::hno_domain_close(self.domain) };
    }
}

/// libfabric's `tclass` value for an HCCL_RDMA_TC byte (DSCP in its upper six bits).
pub fn tclass_of(tc: i32) -> u32 {
    if tc < 0 {
        0
    } else {
        0x100 | ((tc as u32 & 0xff) >> 2)
    }
}

/// Checks the caller's configuration.
pub fn check_config(cfg: &NetConfig) -> NetResult<()> {
    if cfg.traffic_class != UNSET && !(0..=255).contains(&cfg.traffic_class) {
        return Err(NetError::Invalid(format!(
            "trafficClass {} is outside 0..255",
            cfg.traffic_class
        )));
    }
    if cfg.service_level != UNSET && !(0..=15).contains(&cfg.service_level) {
        return Err(NetError::Invalid(format!(
            "serviceLevel {} is outside 0..15",
            cfg.service_level
        )));
    }
    Ok(())
}

/// The fi_info list of one query; freed on drop.
struct InfoList(*mut FiInfo);

impl Drop for InfoList {
    fn drop(&mut self) {
        if !self.0.is_null() {
            // SAFETY: the list came from fi_getinfo and is freed once.
            unsafe { sys::hno_freeinfo(self.0) };
        }
    }
}

impl InfoList {
    fn entries(&self) -> Vec<*mut FiInfo> {
        let mut v = Vec::new();
        let mut p = self.0;
        while !p.is_null() {
            v.push(p);
            // SAFETY: p is an entry of the live list.
            p = unsafe { sys::hno_info_next(p) };
        }
        v
    }
}

fn getinfo(prov: Option<&str>, msg: bool, want_rma: bool, tclass: u32) -> Result<InfoList, i64> {
    let cprov = prov.map(|p| CString::new(p).expect("provider names have no NUL"));
    let mut out: *mut FiInfo = std::ptr::null_mut();
    // SAFETY: valid C string or null; out receives a list we own.
    let rc = unsafe {
        sys::hno_getinfo(
            cprov.as_ref().map_or(std::ptr::null(), |c| c.as_ptr()),
            msg as i32,
            want_rma as i32,
            tclass,
            &mut out,
        )
    };
    let list = InfoList(out);
    if rc != 0 {
        return Err(rc as i64);
    }
    Ok(list)
}

/// The best query for one provider: with RMA if it has it, with the traffic class if it takes
/// it. Returns the list and whether the traffic class was accepted.
fn query(prov: Option<&str>, msg: bool, tclass: u32) -> Result<(InfoList, bool), String> {
    let mut why = Vec::new();
    let tries: &[(bool, u32)] = if tclass != 0 {
        &[(true, tclass), (true, 0), (false, tclass), (false, 0)]
    } else {
        &[(true, 0), (false, 0)]
    };
    for &(rma, tc) in tries {
        match getinfo(prov, msg, rma, tc) {
            Ok(list) if !list.0.is_null() => return Ok((list, tc != 0)),
            Ok(_) => why.push("no entries".to_string()),
            Err(rc) => why.push(sys::strerror(rc)),
        }
    }
    why.dedup();
    Err(why.join("; "))
}

fn describe(info: *const FiInfo) -> InfoDesc {
    // SAFETY: InfoDesc is plain data (all-zero is valid) that hno_describe fills.
    let mut d: InfoDesc = unsafe { std::mem::zeroed() };
    // SAFETY: info is a live fi_info entry; d is writable.
    unsafe { sys::hno_describe(info, &mut d) };
    d
}

/// Opens the devices of the first provider that works: `FI_PROVIDER`'s choice when set (libfabric
/// filters by it), else the first of verbs, efa, tcp. One device per interface; the endpoint
/// type as [`ENDPOINT_ENV`] chooses ([`EndpointChoice`]).
pub fn discover(cfg: &NetConfig) -> NetResult<Vec<Arc<Device>>> {
    // SAFETY: plain query of a constant.
    let ctx_size = unsafe { sys::hno_context_size() } as usize;
    if ctx_size > crate::comm::CONTEXT_BYTES {
        return Err(NetError::Internal(format!(
            "libfabric's fi_context2 is {ctx_size} bytes, more than the {} this plugin reserves",
            crate::comm::CONTEXT_BYTES
        )));
    }
    let choice = EndpointChoice::parse(std::env::var(ENDPOINT_ENV).ok().as_deref())?;
    open_first_provider(cfg, choice)
}

/// Opens the devices of the first provider that works (see [`discover`]).
fn open_first_provider(cfg: &NetConfig, choice: EndpointChoice) -> NetResult<Vec<Arc<Device>>> {
    // SAFETY: plain query.
    let api = unsafe { sys::hno_api_version() };
    let tclass = tclass_of(cfg.traffic_class);
    let forced = std::env::var("FI_PROVIDER").ok().filter(|s| !s.is_empty());
    let candidates: Vec<Option<&str>> = match &forced {
        Some(_) => vec![None],
        None => PREFERRED.iter().map(|p| Some(*p)).collect(),
    };
    let mut tried = Vec::new();
    for prov in candidates {
        let label = prov.map_or_else(
            || format!("FI_PROVIDER={}", forced.as_deref().unwrap_or("")),
            str::to_string,
        );
        let tcp = prov.or(forced.as_deref()) == Some("tcp");
        for &msg in choice.types(tcp) {
            let kind = if msg { "FI_EP_MSG" } else { "FI_EP_RDM" };
            // rxm reads its eager limit from the environment as its endpoints open: set before
            // the query, taken back unless rxm over the old tcp provider is what opened.
            let asked = !msg && ask_rxm_eager_limit(api);
            let opened = query(prov, msg, tclass)
                .map(|(list, tc_taken)| open_devices(&list, cfg, tclass, tc_taken, msg));
            let keep = matches!(&opened, Ok(d) if d.iter().any(|d| old_tcp_rxm(&d.provider, api)));
            if asked && !keep {
                std::env::remove_var("FI_OFI_RXM_EAGER_LIMIT");
            }
            let devices = match opened {
                Ok(d) if !d.is_empty() => d,
                Ok(_) => {
                    tried.push(format!("{label} {kind}: no interface could be opened"));
                    continue;
                }
                Err(why) => {
                    log::debug(&format!("provider {label} {kind} unusable: {why}"));
                    tried.push(format!("{label} {kind}: {why}"));
                    continue;
                }
            };
            log::info(&format!("libfabric {}.{}", api >> 16, api & 0xffff));
            report(&devices, cfg, &label);
            return Ok(devices);
        }
    }
    Err(NetError::NoDevice(format!(
        "no libfabric provider works here ({})",
        tried.join(", ")
    )))
}

fn open_devices(
    list: &InfoList,
    cfg: &NetConfig,
    tclass: u32,
    tc_taken: bool,
    msg: bool,
) -> Vec<Arc<Device>> {
    // SAFETY: constant queries.
    let (rma_cap, mr_local, mr_virt, mr_prov) = unsafe {
        (
            sys::hno_cap_rma(),
            sys::hno_mr_mode_local(),
            sys::hno_mr_mode_virt_addr(),
            sys::hno_mr_mode_prov_key(),
        )
    };
    let mut devices: Vec<Arc<Device>> = Vec::new();
    let mut seen: Vec<(String, String)> = Vec::new();
    for info in list.entries() {
        let desc = describe(info);
        let provider = sys::name(&desc.provider);
        let name = sys::name(&desc.domain);
        // The first entry of each interface (libfabric lists IPv4 before IPv6 fabrics).
        if seen.iter().any(|(p, n)| *p == provider && *n == name) {
            continue;
        }
        seen.push((provider.clone(), name.clone()));
        let mut dom: *mut HnoDomain = std::ptr::null_mut();
        // SAFETY: info is a live entry; dom receives an owned domain.
        let rc = unsafe { sys::hno_domain_open(info, &mut dom) };
        if rc != 0 {
            log::warn(&format!(
                "provider {provider} interface {name}: {}",
                NetError::fabric("fi_domain", rc as i64)
            ));
            continue;
        }
        let applied = tc_taken && tclass != 0 && desc.tclass == tclass;
        // SAFETY: plain query.
        let max_msg = safe_max_message(
            &provider,
            unsafe { sys::hno_api_version() },
            desc.max_msg_size,
            rxm_eager_limit(std::env::var("FI_OFI_RXM_EAGER_LIMIT").ok().as_deref()),
        );
        devices.push(Arc::new(Device {
            index: devices.len(),
            domain: dom,
            provider,
            fabric: sys::name(&desc.fabric),
            name,
            rma: desc.caps & rma_cap != 0 && desc.cq_data_size >= IMM_BYTES,
            mr_local: desc.mr_mode & mr_local != 0,
            mr_virt_addr: desc.mr_mode & mr_virt != 0,
            mr_prov_key: desc.mr_mode & mr_prov != 0,
            traffic_class: if applied { cfg.traffic_class } else { UNSET },
            max_msg,
            msg,
            desc,
        }));
    }
    devices
}

fn report(devices: &[Arc<Device>], cfg: &NetConfig, label: &str) {
    for d in devices {
        log::info(&format!(
            "device {}: provider {}, fabric {}, interface {} ({}; {}, rma {}, registration {})",
            d.index,
            d.provider,
            d.fabric,
            d.name,
            label,
            if d.msg {
                "connected endpoints (FI_EP_MSG)"
            } else {
                "reliable-datagram endpoints (FI_EP_RDM)"
            },
            if d.rma { "yes" } else { "no" },
            if d.mr_local { "required" } else { "optional" },
        ));
    }
    if let Some(d) = devices.iter().find(|d| d.max_msg < d.desc.max_msg_size) {
        log::info(&format!(
            "provider {}: messages limited to {} bytes (rxm's eager limit, \
             FI_OFI_RXM_EAGER_LIMIT): its rendezvous protocol can crash libfabric {} when a \
             peer is lost",
            d.provider,
            d.max_msg,
            // SAFETY: plain query.
            {
                let v = unsafe { sys::hno_api_version() };
                format!("{}.{}", v >> 16, v & 0xffff)
            }
        ));
    }
    if cfg.traffic_class != UNSET {
        let taken: Vec<String> = devices
            .iter()
            .filter(|d| d.traffic_class != UNSET)
            .map(|d| d.name.clone())
            .collect();
        if taken.len() == devices.len() {
            log::info(&format!(
                "traffic class {} (DSCP {}) applied",
                cfg.traffic_class,
                cfg.traffic_class >> 2
            ));
        } else {
            log::warn(&format!(
                "traffic class {} ignored by provider {} (it does not take libfabric's tclass attribute)",
                cfg.traffic_class, devices[0].provider
            ));
        }
    }
    if cfg.service_level != UNSET {
        log::warn(&format!(
            "service level {} ignored: libfabric has no service-level attribute (on RoCE the \
             switch maps the traffic class to a priority; on InfiniBand the subnet manager assigns SLs)",
            cfg.service_level
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn traffic_class_maps_the_tos_byte_to_dscp() {
        assert_eq!(tclass_of(UNSET), 0);
        assert_eq!(tclass_of(0), 0x100);
        // TOS 132 = DSCP 33 (the vendor's default RoCE class).
        assert_eq!(tclass_of(132), 0x100 | 33);
        assert_eq!(tclass_of(255), 0x100 | 63);
    }

    #[test]
    fn old_tcp_rxm_messages_stay_eager() {
        let v = |minor: u32| 1 << 16 | minor;
        let e = 128 << 10;
        assert_eq!(safe_max_message("tcp;ofi_rxm", v(17), u64::MAX, e), e);
        assert_eq!(safe_max_message("tcp;ofi_rxm", v(17), 4096, e), 4096);
        assert_eq!(
            safe_max_message("tcp;ofi_rxm", v(18), u64::MAX, e),
            u64::MAX
        );
        assert_eq!(
            safe_max_message("verbs;ofi_rxm", v(17), 1 << 30, e),
            1 << 30
        );
        assert_eq!(safe_max_message("tcp", v(17), 1 << 30, e), 1 << 30);
    }

    #[test]
    fn rxm_eager_limit_follows_the_environment() {
        assert_eq!(rxm_eager_limit(None), 16 << 10);
        assert_eq!(rxm_eager_limit(Some("131072")), 128 << 10);
        assert_eq!(rxm_eager_limit(Some(" 65536 ")), 64 << 10);
        // What rxm would not take leaves its default in effect.
        for bad in ["", "0", "64k", "-5", "lots"] {
            assert_eq!(rxm_eager_limit(Some(bad)), 16 << 10, "{bad}");
        }
    }

    #[test]
    fn endpoint_choice_parses_and_orders_types() {
        use EndpointChoice::*;
        assert_eq!(EndpointChoice::parse(None).unwrap(), Auto);
        assert_eq!(EndpointChoice::parse(Some(" ")).unwrap(), Auto);
        assert_eq!(EndpointChoice::parse(Some("MSG")).unwrap(), Msg);
        assert_eq!(EndpointChoice::parse(Some("rdm")).unwrap(), Rdm);
        assert!(matches!(
            EndpointChoice::parse(Some("dgram")),
            Err(NetError::Invalid(_))
        ));
        // tcp: its own connected endpoints first, rxm as the fallback; others stay on RDM.
        assert_eq!(Auto.types(true), &[true, false]);
        assert_eq!(Auto.types(false), &[false]);
        assert_eq!(Rdm.types(true), &[false]);
        assert_eq!(Msg.types(false), &[true]);
    }

    #[test]
    fn config_ranges_are_checked() {
        assert!(check_config(&NetConfig::default()).is_ok());
        let ok = NetConfig {
            traffic_class: 255,
            service_level: 15,
        };
        assert!(check_config(&ok).is_ok());
        for (tc, sl) in [(256, UNSET), (-2, UNSET), (UNSET, 16), (UNSET, -5)] {
            let bad = NetConfig {
                traffic_class: tc,
                service_level: sl,
            };
            assert!(
                matches!(check_config(&bad), Err(NetError::Invalid(_))),
                "{tc} {sl}"
            );
        }
    }
}
