//! Adding a neighbour (ARP) entry so a reply can be unicast to a client that has no
//! address yet (RFC 2131 §4.1), as dnsmasq and ISC dhcpd do. The SIOCSARP ioctl needs
//! `unsafe`, as the conflict probes' ICMP socket options do (`probe`); nothing else on
//! the DHCP path does.

use std::io;
use std::net::Ipv4Addr;
use std::os::fd::AsRawFd;

/// `ATF_COM` from <net/if_arp.h>: the entry is complete (has a hardware address).
const ATF_COM: libc::c_int = 0x02;

/// Sets `ip` → `mac` on `interface` in the kernel's neighbour table, using `socket`
/// (any AF_INET socket). Needs CAP_NET_ADMIN.
pub fn add_entry(
    socket: &impl AsRawFd,
    interface: &str,
    ip: Ipv4Addr,
    mac: [u8; 6],
) -> io::Result<()> {
    if interface.len() >= libc::IFNAMSIZ {
        return Err(io::Error::from(io::ErrorKind::InvalidInput));
    }
    // SAFETY: arpreq is plain old data; all-zero is a valid value.
    let mut req: libc::arpreq = unsafe { std::mem::zeroed() };
    let pa = libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: 0,
        sin_addr: libc::in_addr {
            s_addr: u32::from(ip).to_be(),
        },
        sin_zero: [0; 8],
    };
    // SAFETY: sockaddr_in fits in sockaddr (both 16 bytes); copying its bytes is how the
    // kernel ABI expects an IPv4 address in a generic sockaddr.
    unsafe {
        std::ptr::copy_nonoverlapping(
            &pa as *const libc::sockaddr_in as *const u8,
            &mut req.arp_pa as *mut libc::sockaddr as *mut u8,
            std::mem::size_of::<libc::sockaddr_in>(),
        );
    }
    req.arp_ha.sa_family = libc::ARPHRD_ETHER;
    for (dst, src) in req.arp_ha.sa_data.iter_mut().zip(mac) {
        *dst = src as libc::c_char;
    }
    req.arp_flags = ATF_COM;
    for (dst, src) in req.arp_dev.iter_mut().zip(interface.bytes()) {
        *dst = src as libc::c_char;
    }
    // SAFETY: a valid fd and a fully initialised arpreq that outlives the call.
    let rc = unsafe { libc::ioctl(socket.as_raw_fd(), libc::SIOCSARP as _, &req) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}
