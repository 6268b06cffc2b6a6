//! Choosing the local address the root and the ranks listen on.
//!
//! std cannot enumerate interfaces, so `NCCL_SOCKET_IFNAME` is resolved from `/proc/net`
//! (`fib_trie` lists local IPv4 addresses, `route` maps them to interfaces, `if_inet6` lists IPv6).
//! Without a filter, the kernel's route table decides: the source address of a route toward the
//! root (or toward a public address, for the root itself) is reachable by whoever uses that route.

use crate::config::{self, vars};
use crate::error::{Error, Result};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, UdpSocket};

/// One interface address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IfaceAddr {
    pub name: String,
    pub addr: IpAddr,
}

/// Local IPv4 addresses (`/32 host LOCAL` entries) in the text of `/proc/net/fib_trie`.
fn parse_fib_trie_locals(text: &str) -> Vec<Ipv4Addr> {
    let mut out = Vec::new();
    let mut last: Option<Ipv4Addr> = None;
    for line in text.lines() {
        let t = line.trim();
        if let Some(ip) = t.strip_prefix("|-- ") {
            last = ip.parse().ok();
        } else if t.starts_with("/32 host LOCAL")
            && let Some(ip) = last.take()
            && !out.contains(&ip)
        {
            out.push(ip);
        }
    }
    out
}

/// `(interface, destination, mask)` of the subnet routes in the text of `/proc/net/route`.
fn parse_routes(text: &str) -> Vec<(String, [u8; 4], [u8; 4])> {
    let hex = |s: &str| u32::from_str_radix(s, 16).ok().map(u32::to_ne_bytes);
    text.lines()
        .skip(1)
        .filter_map(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            // The kernel prints the raw network-order word, so native byte order restores it.
            Some((f.first()?.to_string(), hex(f.get(1)?)?, hex(f.get(7)?)?))
        })
        .filter(|(_, _, mask)| *mask != [0; 4])
        .collect()
}

/// Global-scope IPv6 addresses in the text of `/proc/net/if_inet6`.
fn parse_if_inet6(text: &str) -> Vec<IfaceAddr> {
    text.lines()
        .filter_map(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            let (hex, scope, name) = (f.first()?, f.get(3)?, f.get(5)?);
            let v = u128::from_str_radix(hex, 16).ok()?;
            // Link-local and site scopes need a scope id that a plain address cannot carry.
            (*scope == "00" || *scope == "10").then(|| IfaceAddr {
                name: name.to_string(),
                addr: IpAddr::V6(Ipv6Addr::from(v)),
            })
        })
        .collect()
}

/// IPv4 addresses mapped to the interface whose longest subnet route contains them.
fn map_ipv4(locals: &[Ipv4Addr], routes: &[(String, [u8; 4], [u8; 4])]) -> Vec<IfaceAddr> {
    let mut out = Vec::new();
    for ip in locals {
        if ip.is_loopback() {
            out.push(IfaceAddr {
                name: "lo".into(),
                addr: IpAddr::V4(*ip),
            });
            continue;
        }
        let o = ip.octets();
        let best = routes
            .iter()
            .filter(|(_, d, m)| (0..4).all(|i| o[i] & m[i] == d[i] & m[i]))
            .max_by_key(|(_, _, m)| u32::from_be_bytes(*m).count_ones());
        if let Some((name, _, _)) = best {
            out.push(IfaceAddr {
                name: name.clone(),
                addr: IpAddr::V4(*ip),
            });
        }
    }
    out
}

/// Every interface address this host has: IPv4 first, then IPv6, each sorted by name.
pub fn list_interfaces() -> Vec<IfaceAddr> {
    let read = |p: &str| std::fs::read_to_string(p).unwrap_or_default();
    let mut v4 = map_ipv4(
        &parse_fib_trie_locals(&read("/proc/net/fib_trie")),
        &parse_routes(&read("/proc/net/route")),
    );
    v4.sort_by(|a, b| a.name.cmp(&b.name));
    let mut v6 = parse_if_inet6(&read("/proc/net/if_inet6"));
    v6.sort_by(|a, b| a.name.cmp(&b.name));
    v4.extend(v6);
    v4
}

/// NCCL's `NCCL_SOCKET_IFNAME` syntax: comma-separated prefixes, `=` for exact names, `^` to
/// exclude.
pub(crate) fn matches_filter(spec: &str, name: &str) -> bool {
    let (exclude, rest) = match spec.strip_prefix('^') {
        Some(r) => (true, r),
        None => (false, spec),
    };
    let (exact, rest) = match rest.strip_prefix('=') {
        Some(r) => (true, r),
        None => (false, rest),
    };
    let hit = rest
        .split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .any(|p| {
            if exact {
                name == p
            } else {
                name.starts_with(p)
            }
        });
    hit != exclude
}

/// An address family NCCL's `NCCL_SOCKET_FAMILY` asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    /// `AF_INET`.
    V4,
    /// `AF_INET6`.
    V6,
}

impl Family {
    /// `NCCL_SOCKET_FAMILY`: exactly `AF_INET` or `AF_INET6`, as NCCL reads it; anything else
    /// (or nothing) filters nothing.
    pub fn from_env() -> Option<Family> {
        let v = config::get(&vars::NCCL_SOCKET_FAMILY)?;
        match v.trim() {
            "AF_INET" => Some(Family::V4),
            "AF_INET6" => Some(Family::V6),
            "" => None,
            other => {
                config::bad_value(
                    vars::NCCL_SOCKET_FAMILY.name,
                    other,
                    "AF_INET or AF_INET6",
                    "interfaces of both families",
                );
                None
            }
        }
    }

    fn admits(self, ip: &IpAddr) -> bool {
        matches!(
            (self, ip),
            (Family::V4, IpAddr::V4(_)) | (Family::V6, IpAddr::V6(_))
        )
    }
}

/// The first address of an interface matching `spec` (and `family`, if given), or an error
/// listing what exists.
fn select_by_name(spec: &str, family: Option<Family>, ifaces: &[IfaceAddr]) -> Result<IpAddr> {
    // Loopback only when the filter names it, so "^docker" still prefers a real NIC.
    let pick = ifaces
        .iter()
        .filter(|i| spec.is_empty() || matches_filter(spec, &i.name))
        .filter(|i| family.is_none_or(|f| f.admits(&i.addr)))
        .min_by_key(|i| i.addr.is_loopback());
    match pick {
        Some(i) => Ok(i.addr),
        None => {
            let found: Vec<String> = ifaces
                .iter()
                .map(|i| format!("{} ({})", i.name, i.addr))
                .collect();
            Err(Error::arg(format!(
                "NCCL_SOCKET_IFNAME=\"{spec}\"{} matches no network interface with a usable \
                 address; interfaces found: {}",
                match family {
                    Some(Family::V4) => " with NCCL_SOCKET_FAMILY=AF_INET",
                    Some(Family::V6) => " with NCCL_SOCKET_FAMILY=AF_INET6",
                    None => "",
                },
                if found.is_empty() {
                    "none".to_string()
                } else {
                    found.join(", ")
                }
            )))
        }
    }
}

/// Every interface matching `spec` (and `family`, if given), one address each (the first
/// listed), loopback ones only when nothing else matches: the devices of NCCL's socket network
/// under `NCCL_SOCKET_IFNAME`. Empty when nothing matches.
pub fn interfaces_matching(
    spec: &str,
    family: Option<Family>,
    ifaces: &[IfaceAddr],
) -> Vec<IfaceAddr> {
    let mut out: Vec<IfaceAddr> = Vec::new();
    for i in ifaces
        .iter()
        .filter(|i| spec.is_empty() || matches_filter(spec, &i.name))
        .filter(|i| family.is_none_or(|f| f.admits(&i.addr)))
    {
        if !out.iter().any(|o| o.name == i.name) {
            out.push(i.clone());
        }
    }
    if out.iter().any(|i| !i.addr.is_loopback()) {
        out.retain(|i| !i.addr.is_loopback());
    }
    out
}

/// The source address the kernel would use toward `target` (no packet is sent).
fn route_source(target: SocketAddr) -> Option<IpAddr> {
    let any: SocketAddr = match target {
        SocketAddr::V4(_) => (Ipv4Addr::UNSPECIFIED, 0).into(),
        SocketAddr::V6(_) => (Ipv6Addr::UNSPECIFIED, 0).into(),
    };
    let sock = UdpSocket::bind(any).ok()?;
    sock.connect(target).ok()?;
    let ip = sock.local_addr().ok()?.ip();
    (!ip.is_unspecified()).then_some(ip)
}

/// The address a root listens on: the filter's interface, else the default route's source
/// address, else loopback (single host).
pub(crate) fn root_ip(ifname: Option<&str>) -> Result<IpAddr> {
    let family = Family::from_env();
    if ifname.is_some() || family.is_some() {
        return select_by_name(ifname.unwrap_or(""), family, &list_interfaces());
    }
    let public: SocketAddr = (Ipv4Addr::new(8, 8, 8, 8), 53).into();
    let ip = route_source(public).unwrap_or(IpAddr::V4(Ipv4Addr::LOCALHOST));
    tracing::debug!(target: "oxccl::bootstrap", "root address {ip} (default route source)");
    Ok(ip)
}

/// The address a rank listens on: the filter's interface, else the source address of the route
/// toward the root (peers that reach the root the same way reach us there).
pub(crate) fn rank_ip(ifname: Option<&str>, root: SocketAddr) -> Result<IpAddr> {
    if let Some(spec) = ifname {
        return select_by_name(spec, Family::from_env(), &list_interfaces());
    }
    if root.ip().is_loopback() {
        return Ok(root.ip());
    }
    match route_source(root) {
        Some(ip) => Ok(ip),
        None => root_ip(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FIB: &str = "Main:\n  +-- 0.0.0.0/0 3 0 5\n     |-- 0.0.0.0\n        /0 universe UNICAST\n\
        \x20          |-- 127.0.0.0\n              /8 host LOCAL\n           |-- 127.0.0.1\n\
        \x20             /32 host LOCAL\n           |-- 192.0.2.0\n              /24 link UNICAST\n\
        \x20          |-- 192.0.2.2\n              /32 host LOCAL\n           |-- 10.1.2.3\n\
        \x20             /32 host LOCAL\nLocal:\n           |-- 192.0.2.2\n              /32 host LOCAL\n";
    const ROUTE: &str = "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\tMTU\tWindow\tIRTT\n\
        eth0\t00000000\t010200C0\t0003\t0\t0\t0\t00000000\t0\t0\t0\n\
        eth0\t000200C0\t00000000\t0001\t0\t0\t0\t00FFFFFF\t0\t0\t0\n\
        ib0\t0000000A\t00000000\t0001\t0\t0\t0\t000000FF\t0\t0\t0\n";

    #[test]
    fn every_matching_interface_once_and_loopback_only_alone() {
        let at = |name: &str, ip: &str| IfaceAddr {
            name: name.to_string(),
            addr: ip.parse().unwrap(),
        };
        let all = [
            at("eth0", "192.0.2.2"),
            at("eth0", "192.0.2.3"),
            at("eth1", "198.51.100.7"),
            at("ib0", "10.1.2.3"),
            at("lo", "127.0.0.1"),
            at("eth1", "2001:db8::7"),
        ];
        let names = |v: Vec<IfaceAddr>| -> Vec<String> {
            v.into_iter()
                .map(|i| format!("{} {}", i.name, i.addr))
                .collect()
        };
        assert_eq!(
            names(interfaces_matching("eth", None, &all)),
            ["eth0 192.0.2.2", "eth1 198.51.100.7"]
        );
        assert_eq!(
            names(interfaces_matching("eth", Some(Family::V6), &all)),
            ["eth1 2001:db8::7"]
        );
        assert_eq!(
            names(interfaces_matching("^eth,ib", None, &all)),
            ["lo 127.0.0.1"]
        );
        assert_eq!(
            names(interfaces_matching("=ib0,lo", None, &all)),
            ["ib0 10.1.2.3"]
        );
        assert!(interfaces_matching("wlan", None, &all).is_empty());
    }

    #[test]
    fn bootstrap_iface_proc_parsing() {
        let locals = parse_fib_trie_locals(FIB);
        assert_eq!(
            locals,
            vec![
                Ipv4Addr::new(127, 0, 0, 1),
                Ipv4Addr::new(192, 0, 2, 2),
                Ipv4Addr::new(10, 1, 2, 3)
            ]
        );
        // The kernel prints little-endian words on little-endian hosts only.
        if cfg!(target_endian = "little") {
            let ifs = map_ipv4(&locals, &parse_routes(ROUTE));
            let names: Vec<_> = ifs.iter().map(|i| (i.name.as_str(), i.addr)).collect();
            assert_eq!(
                names,
                vec![
                    ("lo", IpAddr::from([127, 0, 0, 1])),
                    ("eth0", IpAddr::from([192, 0, 2, 2])),
                    ("ib0", IpAddr::from([10, 1, 2, 3]))
                ]
            );
            assert_eq!(
                select_by_name("ib", None, &ifs).unwrap(),
                IpAddr::from([10, 1, 2, 3])
            );
            assert_eq!(
                select_by_name("^ib", None, &ifs).unwrap(),
                IpAddr::from([192, 0, 2, 2])
            );
            assert_eq!(
                select_by_name("=lo", None, &ifs).unwrap(),
                IpAddr::from([127, 0, 0, 1])
            );
            let err = select_by_name("enp", None, &ifs).unwrap_err().to_string();
            assert!(err.contains("matches no network interface"), "{err}");
            assert!(err.contains("eth0 (192.0.2.2)"), "{err}");
        }
        let v6 = parse_if_inet6(
            "fe8000000000000000fc00fffe000001 04 40 20 80     eth0\n\
             00000000000000000000000000000001 01 80 10 80       lo\n\
             fd000000000000000000000000000002 04 40 00 82     eth0\n",
        );
        assert_eq!(v6.len(), 2);
        assert_eq!(v6[1].addr, "fd00::2".parse::<IpAddr>().unwrap());
        // NCCL_SOCKET_FAMILY narrows the choice; an empty name filter admits every interface.
        let mixed = [
            IfaceAddr {
                name: "eth0".into(),
                addr: IpAddr::from([192, 0, 2, 2]),
            },
            v6[1].clone(),
        ];
        let v6_addr = "fd00::2".parse::<IpAddr>().unwrap();
        assert_eq!(
            select_by_name("eth", Some(Family::V6), &mixed).unwrap(),
            v6_addr
        );
        assert_eq!(
            select_by_name("", Some(Family::V6), &mixed).unwrap(),
            v6_addr
        );
        assert_eq!(
            select_by_name("", Some(Family::V4), &mixed).unwrap(),
            IpAddr::from([192, 0, 2, 2])
        );
        let err = select_by_name("ib", Some(Family::V6), &mixed)
            .unwrap_err()
            .to_string();
        assert!(err.contains("AF_INET6"), "{err}");
    }

    #[test]
    fn bootstrap_iface_filter_syntax() {
        assert!(matches_filter("eth", "eth0"));
        assert!(matches_filter("ib,eth", "eth1"));
        assert!(!matches_filter("=eth", "eth0"));
        assert!(matches_filter("=eth0", "eth0"));
        assert!(!matches_filter("^docker,lo", "lo"));
        assert!(matches_filter("^docker,lo", "eth0"));
        assert!(!matches_filter("^=eth0", "eth0"));
    }

    #[test]
    fn bootstrap_iface_local_choices() {
        let root = root_ip(None).unwrap();
        let lo: SocketAddr = (Ipv4Addr::LOCALHOST, 1).into();
        assert_eq!(rank_ip(None, lo).unwrap(), lo.ip());
        // Whatever the default route says must be bindable here.
        std::net::TcpListener::bind((root, 0)).unwrap();
    }
}
