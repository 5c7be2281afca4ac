//! Binding one DHCP socket per interface. Each socket is bound to 0.0.0.0:<port> with
//! SO_BINDTODEVICE, so it receives broadcasts from its own segment only, knows which
//! interface a request came from, and sends its broadcasts out of that interface.

use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};

use ipnet::Ipv4Net;
use socket2::{Domain, Protocol, Socket, Type};

use crate::config::Config;
use crate::dhcp::engine::Interface;

/// Errors while finding interfaces or binding sockets.
#[derive(Debug, thiserror::Error)]
pub enum SocketError {
    /// Listing interface addresses failed.
    #[error("cannot list interfaces: {0}")]
    ListInterfaces(#[source] nix::Error),
    /// A configured interface does not exist or has no IPv4 address.
    #[error("dhcp.interfaces: interface {0:?} has no IPv4 address")]
    NoAddress(String),
    /// No interface has an address in any configured subnet.
    #[error("no interface has an IPv4 address inside a configured subnet; set dhcp.interfaces or add a [[subnet]] for the local network")]
    NothingToServe,
    /// Binding failed (port in use, or not root for port 67 / SO_BINDTODEVICE).
    #[error("cannot bind DHCP socket on {interface} port {port}: {source}")]
    Bind {
        /// Interface name.
        interface: String,
        /// Port.
        port: u16,
        /// OS error.
        source: std::io::Error,
    },
}

/// Whether an interface of this host holds `ip` (either family).
pub fn host_has_address(ip: std::net::IpAddr) -> bool {
    let Ok(addrs) = nix::ifaddrs::getifaddrs() else {
        return false;
    };
    addrs.filter_map(|a| a.address).any(|s| match ip {
        std::net::IpAddr::V4(v4) => s.as_sockaddr_in().is_some_and(|x| x.ip() == v4),
        std::net::IpAddr::V6(v6) => s.as_sockaddr_in6().is_some_and(|x| x.ip() == v6),
    })
}

/// Every (interface, IPv4 network) pair on this host.
pub fn host_addresses() -> Result<Vec<(String, Ipv4Net)>, SocketError> {
    let addrs = nix::ifaddrs::getifaddrs().map_err(SocketError::ListInterfaces)?;
    let mut out = Vec::new();
    for a in addrs {
        let (Some(addr), Some(mask)) = (a.address, a.netmask) else {
            continue;
        };
        let (Some(addr), Some(mask)) = (addr.as_sockaddr_in(), mask.as_sockaddr_in()) else {
            continue;
        };
        let prefix = u32::from(mask.ip()).count_ones() as u8;
        if let Ok(net) = Ipv4Net::new(addr.ip(), prefix) {
            out.push((a.interface_name, net));
        }
    }
    Ok(out)
}

/// The interfaces to serve: the configured ones, or every interface with an address in
/// a configured subnet. Each gets the address inside a subnet when it has several.
pub fn resolve_interfaces(
    config: &Config,
    host: &[(String, Ipv4Net)],
) -> Result<Vec<Interface>, SocketError> {
    let in_subnet = |ip: &Ipv4Addr| config.subnets.iter().any(|s| s.network.contains(ip));
    let pick = |name: &str| -> Option<Ipv4Addr> {
        let mine: Vec<Ipv4Addr> = host
            .iter()
            .filter(|(n, _)| n == name)
            .map(|(_, a)| a.addr())
            .collect();
        mine.iter()
            .copied()
            .find(|a| in_subnet(a))
            .or(mine.first().copied())
    };
    if !config.dhcp.interfaces.is_empty() {
        return config
            .dhcp
            .interfaces
            .iter()
            .map(|name| {
                let addr = pick(name).ok_or_else(|| SocketError::NoAddress(name.clone()))?;
                Ok(Interface {
                    name: name.clone(),
                    addr,
                    boot_server: false,
                })
            })
            .collect();
    }
    let mut names: Vec<&String> = host
        .iter()
        .filter(|(n, a)| {
            in_subnet(&a.addr())
                || config
                    .subnets
                    .iter()
                    .any(|s| s.interface.as_deref() == Some(n.as_str()))
        })
        .map(|(n, _)| n)
        .collect();
    // One entry per interface however many addresses it has, in any order.
    names.sort();
    names.dedup();
    if names.is_empty() {
        return Err(SocketError::NothingToServe);
    }
    Ok(names
        .into_iter()
        .filter_map(|n| {
            Some(Interface {
                name: n.clone(),
                addr: pick(n)?,
                boot_server: false,
            })
        })
        .collect())
}

/// Binds 0.0.0.0:`port` on `interface` with broadcast enabled, non-blocking. A std socket:
/// the DHCP server registers it with the runtime of its own thread.
pub fn bind(
    interface: &str,
    port: u16,
    receive_buffer_kib: u32,
) -> Result<std::net::UdpSocket, SocketError> {
    let err = |source| SocketError::Bind {
        interface: interface.to_string(),
        port,
        source,
    };
    let s = Socket::new(Domain::IPV4, Type::DGRAM, Some(Protocol::UDP)).map_err(err)?;
    s.set_reuse_address(true).map_err(err)?;
    s.set_broadcast(true).map_err(err)?;
    s.bind_device(Some(interface.as_bytes())).map_err(err)?;
    // Room for bursts: a boot storm sends thousands of DISCOVERs at once (20,000 machines
    // powered on together queue about 13 MiB before the engine drains them).
    crate::sockopt::enlarge_recv_buffer(&s, receive_buffer_kib as usize * 1024);
    crate::sockopt::enlarge_send_buffer(&s, 4 << 20);
    let _ = s.set_send_buffer_size(4 << 20);
    s.set_nonblocking(true).map_err(err)?;
    s.bind(&SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, port)).into())
        .map_err(err)?;
    Ok(s.into())
}
