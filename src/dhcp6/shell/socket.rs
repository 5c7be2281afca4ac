//! One DHCPv6 socket per served interface: bound to [::]:547 with SO_BINDTODEVICE and
//! joined to All_DHCP_Relay_Agents_and_Servers (ff02::1:2, RFC 8415 §7.1) on that
//! interface, so it hears its own link's clients and the relays that send to it, and
//! is told each datagram's destination (IPV6_RECVPKTINFO).

use std::net::{Ipv6Addr, SocketAddr, SocketAddrV6};

use socket2::{Domain, Protocol, Socket, Type};

use crate::config::Config;

/// RFC 8415 §7.1.
pub const ALL_DHCP_RELAY_AGENTS_AND_SERVERS: Ipv6Addr = Ipv6Addr::new(0xff02, 0, 0, 0, 0, 0, 1, 2);

/// Errors finding interfaces or binding.
#[derive(Debug, thiserror::Error)]
pub enum Socket6Error {
    /// Listing interface addresses failed.
    #[error("cannot list interfaces: {0}")]
    ListInterfaces(#[source] nix::Error),
    /// A configured interface has no IPv6 address.
    #[error("dhcp6.interfaces: interface {0:?} has no IPv6 address")]
    NoAddress(String),
    /// No interface is on a `[[subnet6]]`.
    #[error("no interface has an IPv6 address inside a [[subnet6]] network; set dhcp6.interfaces or subnet6.interface")]
    NothingToServe,
    /// Binding or joining the group failed.
    #[error("cannot bind the DHCPv6 socket on {interface} port {port}: {source}")]
    Bind {
        /// Interface name.
        interface: String,
        /// Port.
        port: u16,
        /// OS error.
        source: std::io::Error,
    },
}

/// A served interface: its name, index and IPv6 addresses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Interface6 {
    /// Kernel name.
    pub name: String,
    /// Kernel index (the scope of its link-local addresses).
    pub index: u32,
    /// Its IPv6 addresses.
    pub addresses: Vec<Ipv6Addr>,
}

/// Every (interface, IPv6 address) pair on this host.
pub fn host_addresses6() -> Result<Vec<(String, Ipv6Addr)>, Socket6Error> {
    let addrs = nix::ifaddrs::getifaddrs().map_err(Socket6Error::ListInterfaces)?;
    Ok(addrs
        .filter_map(|a| {
            let ip = a.address?.as_sockaddr_in6()?.ip();
            Some((a.interface_name, ip))
        })
        .collect())
}

/// The interfaces to serve: `dhcp6.interfaces`, else each with an address inside a
/// `[[subnet6]]` network or named by one.
pub fn resolve_interfaces6(
    config: &Config,
    host: &[(String, Ipv6Addr)],
) -> Result<Vec<Interface6>, Socket6Error> {
    let mut names: Vec<String> = if config.dhcp6.interfaces.is_empty() {
        host.iter()
            .filter(|(n, a)| {
                config
                    .subnets6
                    .iter()
                    .any(|s| s.network.contains(a) || s.interface.as_deref() == Some(n.as_str()))
            })
            .map(|(n, _)| n.clone())
            .collect()
    } else {
        config.dhcp6.interfaces.clone()
    };
    names.sort();
    names.dedup();
    if names.is_empty() {
        return Err(Socket6Error::NothingToServe);
    }
    names
        .into_iter()
        .map(|name| {
            let addresses: Vec<Ipv6Addr> = host
                .iter()
                .filter(|(n, _)| *n == name)
                .map(|(_, a)| *a)
                .collect();
            let index = nix::net::if_::if_nametoindex(name.as_str()).unwrap_or(0);
            if addresses.is_empty() || index == 0 {
                return Err(Socket6Error::NoAddress(name));
            }
            Ok(Interface6 {
                name,
                index,
                addresses,
            })
        })
        .collect()
}

/// Binds [::]:`port` on `interface`, IPv6 only, non-blocking, in the servers' group.
/// The receive buffer is `receive_buffer_kib` (`dhcp.receive_buffer_kib`, as v4's).
pub fn bind6(
    interface: &Interface6,
    port: u16,
    receive_buffer_kib: u32,
) -> Result<std::net::UdpSocket, Socket6Error> {
    let err = |source| Socket6Error::Bind {
        interface: interface.name.clone(),
        port,
        source,
    };
    let s = Socket::new(Domain::IPV6, Type::DGRAM, Some(Protocol::UDP)).map_err(err)?;
    s.set_only_v6(true).map_err(err)?;
    s.set_reuse_address(true).map_err(err)?;
    s.bind_device(Some(interface.name.as_bytes()))
        .map_err(err)?;
    // Room for a rack powering on at once, as for v4.
    crate::sockopt::enlarge_recv_buffer(&s, receive_buffer_kib as usize * 1024);
    // Replies to clients on the link go to their link-local address; multicast loops
    // are not ours to hear.
    s.set_multicast_loop_v6(false).map_err(err)?;
    // Each datagram's destination: ff02::1:2 from a client on the link, one of our
    // addresses from a relay (or a client unicasting), which the engine tells apart.
    crate::sockopt::enable_pktinfo(&s, true).map_err(err)?;
    s.set_nonblocking(true).map_err(err)?;
    s.bind(&SocketAddr::V6(SocketAddrV6::new(Ipv6Addr::UNSPECIFIED, port, 0, 0)).into())
        .map_err(err)?;
    s.join_multicast_v6(&ALL_DHCP_RELAY_AGENTS_AND_SERVERS, interface.index)
        .map_err(err)?;
    Ok(s.into())
}

/// Every interface of this host with its MAC, from sysfs (`PROVISIONING_MACS`).
pub fn host_macs() -> Vec<(String, crate::mac::MacAddr)> {
    let Ok(dir) = std::fs::read_dir("/sys/class/net") else {
        return Vec::new();
    };
    dir.flatten()
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            let mac = interface_mac(&name)?;
            Some((name, crate::mac::MacAddr(mac)))
        })
        .collect()
}

/// The interface's MAC from sysfs, for the server DUID.
pub fn interface_mac(name: &str) -> Option<[u8; 6]> {
    let text = std::fs::read_to_string(format!("/sys/class/net/{name}/address")).ok()?;
    let mac: crate::mac::MacAddr = text.trim().parse().ok()?;
    (mac.0 != [0; 6]).then_some(mac.0)
}

/// The managed Router Advertisement for each interface that serves a `[[subnet6]]`
/// (`ra::wire::managed_advertisement`), with the prefixes of the subnets on it. An
/// interface that cannot be listed is left out (the DHCPv6 server reports it).
pub fn managed_advertisements(config: &Config) -> Vec<(String, Vec<u8>)> {
    let Ok(host) = host_addresses6() else {
        return Vec::new();
    };
    let Ok(interfaces) = resolve_interfaces6(config, &host) else {
        return Vec::new();
    };
    interfaces
        .into_iter()
        .map(|i| {
            let on_link: Vec<&crate::config::Subnet6> = config
                .subnets6
                .iter()
                .filter(|s| {
                    s.interface.as_deref() == Some(i.name.as_str())
                        || (s.interface.is_none()
                            && i.addresses.iter().any(|a| s.network.contains(a)))
                })
                .collect();
            let valid = on_link.iter().map(|s| s.lease_time).max().unwrap_or(0);
            let prefixes: Vec<_> = on_link.iter().map(|s| s.network).collect();
            (
                i.name,
                crate::ra::wire::managed_advertisement(&prefixes, valid),
            )
        })
        .collect()
}
