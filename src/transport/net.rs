//! Choosing the local address that other ranks use to reach this process.
//!
//! Order of preference (as the vendor documents it): `HCCL_IF_IP`, then interfaces matching
//! `HCCL_SOCKET_IFNAME`, then non-loopback non-docker interfaces in name order, then docker
//! interfaces, then loopback.

use std::ffi::CStr;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use crate::base::env::{EnvConfig, SocketFamily};
use crate::base::error::{Error, ErrorKind, Result};

/// One address of one local interface.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IfAddr {
    /// Interface name, e.g. `eth0`.
    pub name: String,
    /// Address on that interface.
    pub addr: IpAddr,
}

/// Lists the addresses of all interfaces that are up.
pub fn list_interfaces() -> Result<Vec<IfAddr>> {
    let mut head: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs fills `head` with a list we free below.
    if unsafe { libc::getifaddrs(&mut head) } != 0 {
        return Err(Error::new(
            ErrorKind::Syscall,
            format!("getifaddrs: {}", std::io::Error::last_os_error()),
        ));
    }
    let mut out = Vec::new();
    let mut cur = head;
    while !cur.is_null() {
        // SAFETY: cur walks the list returned by getifaddrs.
        let ifa = unsafe { &*cur };
        cur = ifa.ifa_next;
        if ifa.ifa_addr.is_null() || ifa.ifa_flags & libc::IFF_UP as u32 == 0 {
            continue;
        }
        // SAFETY: ifa_name is a NUL-terminated string owned by the list.
        let name = unsafe { CStr::from_ptr(ifa.ifa_name) }
            .to_string_lossy()
            .into_owned();
        // SAFETY: sa_family tells which sockaddr variant ifa_addr points to.
        let family = unsafe { (*ifa.ifa_addr).sa_family } as i32;
        let addr = match family {
            libc::AF_INET => {
                // SAFETY: family is AF_INET.
                let sin = unsafe { &*(ifa.ifa_addr as *const libc::sockaddr_in) };
                IpAddr::V4(Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr)))
            }
            libc::AF_INET6 => {
                // SAFETY: family is AF_INET6.
                let sin6 = unsafe { &*(ifa.ifa_addr as *const libc::sockaddr_in6) };
                let a = Ipv6Addr::from(sin6.sin6_addr.s6_addr);
                if (a.segments()[0] & 0xffc0) == 0xfe80 {
                    // Link-local addresses need a scope id to be usable; skip them.
                    continue;
                }
                IpAddr::V6(a)
            }
            _ => continue,
        };
        out.push(IfAddr { name, addr });
    }
    // SAFETY: head came from getifaddrs.
    unsafe { libc::freeifaddrs(head) };
    Ok(out)
}

fn rank_interface(i: &IfAddr) -> u8 {
    if i.addr.is_loopback() || i.name == "lo" {
        2
    } else if i.name.starts_with("docker") {
        1
    } else {
        0
    }
}

/// Picks the address this process listens on, following the configured preferences.
pub fn choose_local_addr(env: &EnvConfig) -> Result<IfAddr> {
    if let Some(ip) = env.if_ip {
        return Ok(IfAddr {
            name: "HCCL_IF_IP".into(),
            addr: ip,
        });
    }
    choose_from(env, list_interfaces()?)
}

/// The choice among `interfaces` when `HCCL_IF_IP` is unset: only addresses of the
/// `HCCL_SOCKET_FAMILY` family, filtered by `HCCL_SOCKET_IFNAME` when set, ordered
/// non-docker non-loopback (by name), docker, loopback.
fn choose_from(env: &EnvConfig, interfaces: Vec<IfAddr>) -> Result<IfAddr> {
    let want_v6 = matches!(env.socket_family, SocketFamily::V6);
    let mut all: Vec<IfAddr> = interfaces
        .into_iter()
        .filter(|i| i.addr.is_ipv6() == want_v6)
        .collect();
    all.sort_by(|a, b| {
        rank_interface(a)
            .cmp(&rank_interface(b))
            .then_with(|| a.name.cmp(&b.name))
    });
    if let Some(filter) = &env.socket_ifname {
        return all
            .into_iter()
            .find(|i| filter.matches(&i.name))
            .ok_or_else(|| {
                Error::new(
                    ErrorKind::Network,
                    format!(
                        "no {} interface that is up matches HCCL_SOCKET_IFNAME ({:?})",
                        if want_v6 { "IPv6" } else { "IPv4" },
                        filter
                    ),
                )
            });
    }
    if let Some(first) = all.into_iter().next() {
        return Ok(first);
    }
    Ok(IfAddr {
        name: "lo".into(),
        addr: if want_v6 {
            IpAddr::V6(Ipv6Addr::LOCALHOST)
        } else {
            IpAddr::V4(Ipv4Addr::LOCALHOST)
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_loopback() {
        let all = list_interfaces().unwrap();
        assert!(all.iter().any(|i| i.addr.is_loopback()), "{all:?}");
    }

    #[test]
    fn preference_order() {
        let lo = IfAddr {
            name: "lo".into(),
            addr: IpAddr::V4(Ipv4Addr::LOCALHOST),
        };
        let dk = IfAddr {
            name: "docker0".into(),
            addr: IpAddr::V4(Ipv4Addr::new(198, 18, 0, 1)),
        };
        let eth = IfAddr {
            name: "eth0".into(),
            addr: IpAddr::V4(Ipv4Addr::new(198, 18, 0, 2)),
        };
        assert!(rank_interface(&eth) < rank_interface(&dk));
        assert!(rank_interface(&dk) < rank_interface(&lo));
    }

    fn ifa(name: &str, addr: &str) -> IfAddr {
        IfAddr {
            name: name.into(),
            addr: addr.parse().unwrap(),
        }
    }

    fn env(vars: &[(&str, &str)]) -> EnvConfig {
        EnvConfig::from_lookup(|k| {
            vars.iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.to_string())
        })
        .unwrap()
    }

    fn pick(vars: &[(&str, &str)], list: &[IfAddr]) -> Result<String> {
        choose_from(&env(vars), list.to_vec()).map(|i| format!("{}={}", i.name, i.addr))
    }

    #[test]
    fn choice_follows_vendor_order_and_filters() {
        let list = [
            ifa("lo", "127.0.0.1"),
            ifa("docker0", "198.18.9.1"),
            ifa("eth1", "198.18.0.2"),
            ifa("eth0", "198.18.0.1"),
            ifa("enp3", "198.18.1.1"),
            ifa("eth0", "2001:2::1"),
            ifa("lo", "::1"),
        ];
        // Automatic: non-docker non-lo by name, IPv4 by default.
        assert_eq!(pick(&[], &list).unwrap(), "enp3=198.18.1.1");
        assert_eq!(
            pick(&[("HCCL_SOCKET_FAMILY", "AF_INET6")], &list).unwrap(),
            "eth0=2001:2::1"
        );
        // Docker before loopback when nothing else is up.
        assert_eq!(
            pick(&[], &[list[0].clone(), list[1].clone()]).unwrap(),
            "docker0=198.18.9.1"
        );
        assert_eq!(pick(&[], &list[..1]).unwrap(), "lo=127.0.0.1");
        // Prefix, exact, exclude and comma lists.
        assert_eq!(
            pick(&[("HCCL_SOCKET_IFNAME", "eth")], &list).unwrap(),
            "eth0=198.18.0.1"
        );
        assert_eq!(
            pick(&[("HCCL_SOCKET_IFNAME", "=eth1")], &list).unwrap(),
            "eth1=198.18.0.2"
        );
        assert_eq!(
            pick(&[("HCCL_SOCKET_IFNAME", "^enp,eth0")], &list).unwrap(),
            "eth1=198.18.0.2"
        );
        assert_eq!(
            pick(&[("HCCL_SOCKET_IFNAME", "^=enp3,eth0,eth1")], &list).unwrap(),
            "docker0=198.18.9.1"
        );
        assert_eq!(
            pick(&[("HCCL_SOCKET_IFNAME", "docker,lo")], &list).unwrap(),
            "docker0=198.18.9.1"
        );
        let e = pick(
            &[
                ("HCCL_SOCKET_IFNAME", "=eth1"),
                ("HCCL_SOCKET_FAMILY", "AF_INET6"),
            ],
            &list,
        )
        .unwrap_err();
        assert!(
            e.msg.contains("IPv6") && e.msg.contains("eth1"),
            "{}",
            e.msg
        );
        // Nothing up at all: loopback of the wanted family.
        assert_eq!(pick(&[], &[]).unwrap(), "lo=127.0.0.1");
        assert_eq!(
            pick(&[("HCCL_SOCKET_FAMILY", "AF_INET6")], &[]).unwrap(),
            "lo=::1"
        );
    }
}
