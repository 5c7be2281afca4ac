//! Building DHCPv6 replies (RFC 8415 §18.3): the options every Advertise and Reply
//! carries, and the IA options that hand out or refuse addresses.

use std::net::Ipv6Addr;

use dhcproto::v6::{
    DhcpOption, DhcpOptions, IAAddr, Message, MessageType, OptionCode, Status, StatusCode,
    UnknownOption, IANA,
};

use super::super::boot::{BootUrl, PXE_ENTERPRISE};
use crate::config::Subnet6;

/// Lifetimes and timers of one address handed out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lifetimes {
    /// T1, seconds.
    pub t1: u32,
    /// T2, seconds.
    pub t2: u32,
    /// Preferred lifetime, seconds.
    pub preferred: u32,
    /// Valid lifetime, seconds.
    pub valid: u32,
}

impl Lifetimes {
    /// The subnet's configured lifetimes.
    pub fn of(subnet: &Subnet6) -> Self {
        Self {
            t1: subnet.renewal_time,
            t2: subnet.rebinding_time,
            preferred: subnet.preferred_time,
            valid: subnet.lease_time,
        }
    }
}

/// A reply of `kind` to `request`: same transaction id, our Server Identifier, the
/// client's Client Identifier echoed (RFC 8415 §18.3.1, §18.3.2).
pub fn start(kind: MessageType, request: &Message, server_duid: &[u8]) -> Message {
    let mut reply = Message::new_with_id(kind, request.xid());
    let opts = reply.opts_mut();
    opts.insert(DhcpOption::ServerId(server_duid.to_vec()));
    if let Some(DhcpOption::ClientId(id)) = request.opts().get(OptionCode::ClientId) {
        opts.insert(DhcpOption::ClientId(id.clone()));
    }
    reply
}

/// An IA_NA holding `addr` for `life` (RFC 8415 §21.4, §21.6), plus the addresses the
/// client asked about that it may no longer use, with lifetimes 0 (§18.3.4).
pub fn ia_with(iaid: u32, addr: Ipv6Addr, life: Lifetimes, stale: &[Ipv6Addr]) -> DhcpOption {
    let mut opts = DhcpOptions::new();
    opts.insert(DhcpOption::IAAddr(IAAddr {
        addr,
        preferred_life: life.preferred,
        valid_life: life.valid,
        opts: DhcpOptions::new(),
    }));
    for s in stale.iter().filter(|s| **s != addr) {
        opts.insert(withdrawn(*s));
    }
    DhcpOption::IANA(IANA {
        id: iaid,
        t1: life.t1,
        t2: life.t2,
        opts,
    })
}

/// `addr` with lifetimes 0: the client must stop using it (RFC 8415 §18.3.4).
fn withdrawn(addr: Ipv6Addr) -> DhcpOption {
    DhcpOption::IAAddr(IAAddr {
        addr,
        preferred_life: 0,
        valid_life: 0,
        opts: DhcpOptions::new(),
    })
}

/// An IA_NA carrying only a status (NoAddrsAvail, NoBinding, NotOnLink: RFC 8415
/// §21.13), and the client's addresses with lifetimes 0 where there are any to withdraw.
pub fn ia_status(iaid: u32, status: Status, msg: &str, withdraw: &[Ipv6Addr]) -> DhcpOption {
    let mut ia = ia_withdrawn(iaid, withdraw);
    if let DhcpOption::IANA(IANA { opts, .. }) = &mut ia {
        opts.insert(DhcpOption::StatusCode(StatusCode {
            status,
            msg: msg.into(),
        }));
    }
    ia
}

/// An IA_NA that only withdraws `addrs` (lifetimes 0, no status): RFC 8415 §18.3.4,
/// §18.3.5 for addresses the IA may not use.
pub fn ia_withdrawn(iaid: u32, addrs: &[Ipv6Addr]) -> DhcpOption {
    let mut opts = DhcpOptions::new();
    for a in addrs {
        opts.insert(withdrawn(*a));
    }
    DhcpOption::IANA(IANA {
        id: iaid,
        t1: 0,
        t2: 0,
        opts,
    })
}

/// A message-level status (RFC 8415 §21.13).
pub fn status(status: Status, msg: &str) -> DhcpOption {
    DhcpOption::StatusCode(StatusCode {
        status,
        msg: msg.into(),
    })
}

/// The subnet's DNS options (RFC 3646) and the boot file URL (RFC 5970 §3.1) with the
/// vendor class UEFI HTTP Boot must see echoed.
pub fn configuration(reply: &mut Message, subnet: &Subnet6, boot: Option<&BootUrl>) {
    let opts = reply.opts_mut();
    if !subnet.dns.is_empty() {
        opts.insert(DhcpOption::DomainNameServers(subnet.dns.clone()));
    }
    let names: Vec<_> = subnet
        .domain_search
        .iter()
        .filter_map(|d| d.parse::<dhcproto::Name>().ok())
        .collect();
    if !names.is_empty() {
        opts.insert(DhcpOption::DomainSearchList(names));
    }
    if let Some(b) = boot {
        opts.insert(DhcpOption::Unknown(UnknownOption::new(
            OptionCode::OptBootfileUrl,
            b.url.clone().into_bytes(),
        )));
        if let Some(class) = b.vendor_class {
            opts.insert(vendor_class(PXE_ENTERPRISE, class.as_bytes()));
        }
    }
}

/// Option 16 with one vendor-class-data item (RFC 8415 §21.16: enterprise number, then
/// length-prefixed items), encoded here: dhcproto 0.15 writes the option's length as
/// 4 plus the number of items, not their octets, so its own `VendorClass` goes out
/// malformed (as does its `UserClass`).
pub fn vendor_class(enterprise: u32, item: &[u8]) -> DhcpOption {
    let len = u16::try_from(item.len()).expect("a vendor class item from a constant");
    let data = [&enterprise.to_be_bytes()[..], &len.to_be_bytes(), item].concat();
    DhcpOption::Unknown(UnknownOption::new(OptionCode::VendorClass, data))
}

/// The server's Client FQDN option (39) naming the client `name` (RFC 4704 §4: a
/// flags octet, then the name; one label is a partial name, without the terminating
/// zero). Flags: N, this server updates no DNS, so S is 0, and O says so when the
/// client's `client_flags` asked for S.
pub fn fqdn(client_flags: u8, name: &str) -> DhcpOption {
    const S: u8 = 0x01;
    const O: u8 = 0x02;
    const N: u8 = 0x04;
    let mut data = vec![N | if client_flags & S != 0 { O } else { 0 }];
    for label in name.split('.').filter(|l| !l.is_empty()) {
        // `[[host]] hostname` is one DNS label of at most 63 octets.
        data.push(u8::try_from(label.len()).expect("a DNS label"));
        data.extend_from_slice(label.as_bytes());
    }
    DhcpOption::Unknown(UnknownOption::new(OptionCode::ClientFqdn, data))
}

/// The addresses inside an IA_NA the client sent (its hints, or what it holds).
pub fn addresses_in(ia: &IANA) -> Vec<Ipv6Addr> {
    ia.opts
        .get_all(OptionCode::IAAddr)
        .unwrap_or(&[])
        .iter()
        .filter_map(|o| match o {
            DhcpOption::IAAddr(a) => Some(a.addr),
            _ => None,
        })
        .collect()
}

/// The IA_NAs of `msg`.
pub fn ia_nas(msg: &Message) -> Vec<&IANA> {
    msg.opts()
        .get_all(OptionCode::IANA)
        .unwrap_or(&[])
        .iter()
        .filter_map(|o| match o {
            DhcpOption::IANA(ia) => Some(ia),
            _ => None,
        })
        .collect()
}
