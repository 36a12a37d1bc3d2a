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
    if i.addr.is_loopback() {
        2
    } else if i.name.starts_with("docker") {
        1
    } else {
        0
    }
}

/// Picks the address this process listens on, following the configured preferences.
pub fn choose_local_addr(env: &EnvConfig) -> Result<IfAddr> {
    let want_v6 = matches!(env.socket_family, SocketFamily::V6);
    if let Some(ip) = env.if_ip {
        return Ok(IfAddr {
            name: "HCCL_IF_IP".into(),
            addr: ip,
        });
    }
    let mut all: Vec<IfAddr> = list_interfaces()?
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
                    "no interface matches HCCL_SOCKET_IFNAME".to_string(),
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
}
