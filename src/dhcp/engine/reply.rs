//! Building reply messages and choosing where they go (RFC 2131 §4.1, §4.3).

use std::net::Ipv4Addr;

use dhcproto::v4::{DhcpOption, Message, MessageType, Opcode, OptionCode, UnknownOption};

use crate::config::{Host, Subnet};
use crate::dhcp::boot::{self, BootDirective, IPXE_ENCAP_OPTION};
use crate::options::{self, Levels, OptionRule};

/// iPXE's "no-pxedhcp" setting in its option space 175: ignore ProxyDHCP.
const IPXE_NO_PXEDHCP: u8 = 176;
/// Size of the BOOTP `file` field, NUL included (RFC 2131 §2).
const FILE_FIELD_LEN: usize = 128;

/// Where a reply is sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Destination {
    /// To the relay agent at `giaddr`, server port 67 (RFC 2131 §4.1).
    Relay(Ipv4Addr),
    /// To the client's configured address, client port 68.
    Unicast(Ipv4Addr),
    /// To `yiaddr`, port 68, at this hardware address: the client has no address yet, so
    /// the server must add an ARP entry first, or fall back to broadcast.
    UnicastNew(Ipv4Addr, [u8; 6]),
    /// To 255.255.255.255:68 on the receiving interface.
    Broadcast,
    /// Back to the request's source address and port (the PXE boot-server port).
    Sender,
}

/// Lease timers for an ACK or OFFER.
#[derive(Debug, Clone, Copy)]
pub struct Timers {
    /// Option 51.
    pub lease: u32,
    /// Option 58 (T1).
    pub renewal: u32,
    /// Option 59 (T2).
    pub rebinding: u32,
}

impl Timers {
    /// The subnet's timers, or a host's lease time with RFC 2131 §4.4.5 defaults for T1/T2.
    pub fn for_client(subnet: &Subnet, host: Option<&Host>) -> Self {
        match host.and_then(|h| h.lease_time) {
            Some(lease) => Self {
                lease,
                renewal: lease / 2,
                rebinding: lease / 8 * 7,
            },
            None => Self {
                lease: subnet.lease_time,
                renewal: subnet.renewal_time,
                rebinding: subnet.rebinding_time,
            },
        }
    }
}

/// Everything a reply carries besides the request it answers.
#[derive(Debug)]
pub struct ReplyParts<'a> {
    /// OFFER, ACK or NAK.
    pub kind: MessageType,
    /// The address given to the client (unspecified for NAK and INFORM).
    pub yiaddr: Ipv4Addr,
    /// Option 54.
    pub server_id: Ipv4Addr,
    /// Subnet whose options apply (none for NAK).
    pub subnet: Option<&'a Subnet>,
    /// Per-host overrides.
    pub host: Option<&'a Host>,
    /// Lease timers (none for NAK and INFORM).
    pub timers: Option<Timers>,
    /// PXE / iPXE boot directive.
    pub boot: Option<&'a BootDirective>,
    /// `[dhcp] options`.
    pub server_options: &'a [OptionRule],
    /// The followed dnsmasq directories' tags and entries.
    pub dnsmasq: super::DnsmasqDirs<'a>,
}

/// Builds the reply to `req`.
pub fn build(req: &Message, parts: &ReplyParts<'_>) -> Message {
    let mut m = compose(req, parts);
    if let Some(DhcpOption::ClientIdentifier(id)) = req.opts().get(OptionCode::ClientIdentifier) {
        // RFC 6842 §3: a client identifier in the request comes back unaltered in every
        // reply (OFFER, ACK and NAK), whatever the configured options say.
        m.opts_mut()
            .insert(DhcpOption::ClientIdentifier(id.clone()));
    }
    m
}

fn compose(req: &Message, parts: &ReplyParts<'_>) -> Message {
    // RFC 2131 §4.3.1 Table 3: `ciaddr` is 0 in an OFFER and a NAK; an ACK copies the
    // request's.
    let ciaddr = if matches!(parts.kind, MessageType::Offer | MessageType::Nak) {
        Ipv4Addr::UNSPECIFIED
    } else {
        req.ciaddr()
    };
    let siaddr = parts.boot.map_or(Ipv4Addr::UNSPECIFIED, |b| b.next_server);
    let mut m = Message::new_with_id(
        req.xid(),
        ciaddr,
        parts.yiaddr,
        siaddr,
        req.giaddr(),
        req.chaddr(),
    );
    m.set_opcode(Opcode::BootReply);
    m.set_htype(req.htype());
    let mut flags = req.flags();
    // RFC 2131 §4.3.2: a NAK through a relay asks it to broadcast to the client.
    if matches!(parts.kind, MessageType::Nak) && !req.giaddr().is_unspecified() {
        flags = flags.set_broadcast();
    }
    m.set_flags(flags);

    let o = m.opts_mut();
    o.insert(DhcpOption::MessageType(parts.kind));
    o.insert(DhcpOption::ServerIdentifier(parts.server_id));
    if let Some(DhcpOption::RelayAgentInformation(info)) = req
        .opts()
        .get(OptionCode::RelayAgentInformation)
        .filter(|_| !req.giaddr().is_unspecified())
    {
        // RFC 3046 §2.2: echo the relay agent information unchanged, and only to a
        // relay (the shell puts back the request's very bytes before sending).
        o.insert(DhcpOption::RelayAgentInformation(info.clone()));
    }
    if matches!(parts.kind, MessageType::Nak) {
        return m;
    }
    if let Some(t) = parts.timers {
        o.insert(DhcpOption::AddressLeaseTime(t.lease));
        o.insert(DhcpOption::Renewal(t.renewal));
        o.insert(DhcpOption::Rebinding(t.rebinding));
    }
    if let Some(s) = parts.subnet {
        o.insert(DhcpOption::SubnetMask(s.network.netmask()));
        o.insert(DhcpOption::BroadcastAddr(s.network.broadcast()));
        let router = parts.host.and_then(|h| h.router).or(s.router);
        if let Some(r) = router {
            o.insert(DhcpOption::Router(vec![r]));
        }
        let dns = match parts.host {
            Some(h) if !h.dns.is_empty() => &h.dns,
            _ => &s.dns,
        };
        if !dns.is_empty() {
            o.insert(DhcpOption::DomainNameServer(dns.clone()));
        }
        if let Some(d) = &s.domain {
            o.insert(DhcpOption::DomainName(d.clone()));
        }
        if let Some(mtu) = s.mtu {
            o.insert(DhcpOption::InterfaceMtu(mtu));
        }
        if !s.ntp.is_empty() {
            o.insert(DhcpOption::NtpServers(s.ntp.clone()));
        }
    }
    if let Some(name) = parts.host.and_then(|h| h.hostname.as_ref()) {
        o.insert(DhcpOption::Hostname(name.clone()));
    }
    if let Some(b) = parts.boot {
        if let Some(v) = b.vendor_class {
            o.insert(DhcpOption::ClassIdentifier(v.as_bytes().to_vec()));
            if v == "PXEClient" {
                // PXE spec 2.1 §2.4.1, PXE_DISCOVERY_CONTROL (sub-option 6) bit 3: boot the
                // file named here, no boot-server discovery. Without it UEFI firmware
                // (EDK2/OVMF) takes the offer for a BINL one, asks port 4011, gets no
                // answer and falls back to HTTP Boot a minute later.
                o.insert(DhcpOption::VendorExtensions(vec![6, 1, 8, 255]));
            }
        }
        if b.ipxe {
            // iPXE's encapsulated option 175, setting 176 "no-pxedhcp" = 1: this server
            // hands out the boot file itself, so iPXE need not keep discovering for
            // ProxyDHCP offers before it requests (2 s on every iPXE start otherwise).
            o.insert(DhcpOption::Unknown(UnknownOption::new(
                IPXE_ENCAP_OPTION.into(),
                vec![IPXE_NO_PXEDHCP, 1, 1],
            )));
        }
        o.insert(DhcpOption::TFTPServerName(
            b.next_server.to_string().into_bytes(),
        ));
        o.insert(DhcpOption::BootfileName(b.file.as_bytes().to_vec()));
        // The `file` header field is 128 octets with its NUL (RFC 2131 §2). A longer
        // name (an HTTP URL under a long base) travels in option 67 alone, which iPXE
        // and UEFI HTTP Boot read (RFC 2132 §9.5).
        if b.file.len() < FILE_FIELD_LEN {
            m.set_fname_str(&b.file);
        }
    }
    if let Some(s) = parts.subnet {
        apply_options(&mut m, req, s, parts);
    }
    m
}

/// The configured options (`crate::options`), over what `build` put in: each winning
/// entry replaces its code's option, or removes it when it has no value.
fn apply_options(m: &mut Message, req: &Message, subnet: &Subnet, parts: &ReplyParts<'_>) {
    let host_options = parts.host.map_or(&[][..], |h| &h.options[..]);
    let node_options = parts.dnsmasq.options;
    if parts.server_options.is_empty()
        && subnet.options.is_empty()
        && node_options.is_empty()
        && host_options.is_empty()
    {
        return;
    }
    let mut tags: Vec<&str> = Vec::with_capacity(8);
    options::class_tags(&boot::classify(req.opts()), &mut tags);
    if let Some(t) = subnet.range_tag(parts.yiaddr) {
        tags.push(t);
    }
    if let Some(h) = parts.host {
        tags.push("known");
        tags.extend(h.tags.iter().map(String::as_str));
    }
    tags.extend(parts.dnsmasq.tags.iter().map(String::as_str));
    let levels = Levels {
        server: parts.server_options,
        subnet: &subnet.options,
        node: node_options,
        host: host_options,
    };
    for rule in options::select(levels, &tags) {
        match (rule.code, &rule.value) {
            // dnsmasq's pseudo-option 255: the next-server address in the header.
            (255, Some(v)) => {
                if let Ok(a) = <[u8; 4]>::try_from(v.as_slice()) {
                    m.set_siaddr(Ipv4Addr::from(a));
                }
            }
            (code, value) => {
                let opts = m.opts_mut();
                opts.remove(OptionCode::from(code));
                if let Some(v) = value {
                    opts.insert(DhcpOption::Unknown(UnknownOption::new(
                        code.into(),
                        v.clone(),
                    )));
                }
                if code == 67 {
                    // The `file` field says the same as option 67, or nothing.
                    match value.as_deref().and_then(|v| std::str::from_utf8(v).ok()) {
                        Some(f) if f.len() < FILE_FIELD_LEN => m.set_fname_str(f),
                        _ => m.set_fname(&[]),
                    };
                }
            }
        }
    }
}

/// RFC 2131 §4.1 / §4.3.2: relay first, then NAKs broadcast, then `ciaddr`, then the
/// broadcast flag; a client with none of these gets unicast to `yiaddr` at its hardware
/// address (the server adds the ARP entry, or broadcasts when it cannot).
pub fn destination(req: &Message, kind: MessageType, yiaddr: Ipv4Addr) -> Destination {
    if !req.giaddr().is_unspecified() {
        return Destination::Relay(req.giaddr());
    }
    if matches!(kind, MessageType::Nak) {
        return Destination::Broadcast;
    }
    if !req.ciaddr().is_unspecified() {
        return Destination::Unicast(req.ciaddr());
    }
    match <[u8; 6]>::try_from(req.chaddr().get(..6).unwrap_or_default()) {
        Ok(mac) if !req.flags().broadcast() && !yiaddr.is_unspecified() => {
            Destination::UnicastNew(yiaddr, mac)
        }
        _ => Destination::Broadcast,
    }
}

#[cfg(test)]
mod tests {
    use dhcproto::v4::relay::{RelayAgentInformation, RelayInfo};

    use super::*;

    fn parts(kind: MessageType) -> ReplyParts<'static> {
        ReplyParts {
            kind,
            yiaddr: Ipv4Addr::new(198, 51, 100, 10),
            server_id: Ipv4Addr::new(192, 0, 2, 1),
            subnet: None,
            host: None,
            timers: None,
            boot: None,
            server_options: &[],
            dnsmasq: Default::default(),
        }
    }

    /// A request carrying option 82 (circuit-id, remote-id), with `giaddr`.
    fn request(giaddr: Ipv4Addr) -> (Message, RelayAgentInformation) {
        let mut info = RelayAgentInformation::default();
        info.insert(RelayInfo::AgentCircuitId(b"rack4-port7".to_vec()));
        info.insert(RelayInfo::AgentRemoteId(b"switch-2".to_vec()));
        let z = Ipv4Addr::UNSPECIFIED;
        let mut req = Message::new_with_id(7, z, z, z, giaddr, &[0x52, 0x54, 0, 0, 0, 1]);
        req.opts_mut()
            .insert(DhcpOption::MessageType(MessageType::Discover));
        req.opts_mut()
            .insert(DhcpOption::RelayAgentInformation(info.clone()));
        (req, info)
    }

    #[test]
    fn option_82_goes_back_unchanged_to_the_relay_in_offers_acks_and_naks() {
        // RFC 3046 §2.2: the server copies the relay agent information option into
        // its reply, unchanged, for the relay to strip before forwarding.
        let (req, info) = request(Ipv4Addr::new(203, 0, 113, 1));
        for kind in [MessageType::Offer, MessageType::Ack, MessageType::Nak] {
            let reply = build(&req, &parts(kind));
            assert_eq!(
                reply.opts().get(OptionCode::RelayAgentInformation),
                Some(&DhcpOption::RelayAgentInformation(info.clone())),
                "{kind:?}"
            );
        }
    }

    #[test]
    fn option_82_from_a_client_that_came_through_no_relay_is_not_echoed() {
        // Without giaddr no relay sits between: the reply goes to the client, and
        // RFC 3046 §2.2 says the option is for the relay agent only.
        let (req, _) = request(Ipv4Addr::UNSPECIFIED);
        for kind in [MessageType::Offer, MessageType::Ack, MessageType::Nak] {
            let reply = build(&req, &parts(kind));
            assert_eq!(
                reply.opts().get(OptionCode::RelayAgentInformation),
                None,
                "{kind:?}"
            );
        }
    }
}
