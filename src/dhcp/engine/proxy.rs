//! ProxyDHCP (PXE specification 2.1 §2.2, "Proxy DHCP"): another server hands out the
//! addresses; this one answers network-boot firmware with boot information only. A PXE
//! or UEFI HTTP Boot DISCOVER on port 67 gets an OFFER with no address, option 60
//! echoed (`PXEClient` / `HTTPClient`), the boot file and next-server, and PXE
//! discovery control "use this boot file" (option 43, sub-option 6, bit 3); a REQUEST
//! on the PXE boot-server port (4011) gets the same as an ACK, sent back to where it
//! came from. iPXE gets its script URL the same way. Nothing is leased or stored, and
//! every other client is left to the address server.

use std::net::Ipv4Addr;

use dhcproto::v4::{DhcpOption, Message, MessageType, OptionCode};

use super::decision::{Decision, IgnoreReason, Outcome, PacketContext, Reply, Responsibility};
use super::reply::{self, Destination, ReplyParts};
use super::Engine;
use crate::client_class::Firmware;
use crate::dhcp::boot::{self, BootDirective};
use crate::dhcp::option_fit::Fit;
use crate::mac::MacAddr;

impl Engine {
    /// The ProxyDHCP answer to `msg` (`dhcp.proxy`).
    pub(super) fn proxy(&self, msg: &Message, mac: &MacAddr, ctx: &PacketContext<'_>) -> Decision {
        let class = boot::classify(msg.opts());
        // PXE §2.2.3: a proxy answers only clients that say they are PXE clients (iPXE
        // says so too); every other client is the address server's alone.
        if class.firmware == Firmware::None && !class.ipxe {
            return Decision::ignore(IgnoreReason::NotBootClient);
        }
        // With several members only the machine's own member answers (owner first,
        // the others after the takeover wait), as for addresses.
        if ctx.responsibility == Responsibility::NotMine {
            return Decision::ignore(IgnoreReason::NotResponsible);
        }
        let server_id = self.server_id(ctx);
        let kind = match (msg.opts().msg_type(), ctx.interface.boot_server) {
            (Some(MessageType::Discover), false) => MessageType::Offer,
            (Some(MessageType::Request | MessageType::Inform), true) => MessageType::Ack,
            // A REQUEST on port 67 selects the address server's offer (it names that
            // server): not ours to answer.
            (Some(MessageType::Request), false) => {
                return Decision::ignore(IgnoreReason::OtherServer)
            }
            _ => return Decision::ignore(IgnoreReason::Unsupported),
        };
        let host = self.hosts.get(mac);
        let Some(mut directive) = boot::select(
            class,
            &self.boot,
            server_id,
            host.and_then(|h| h.boot_file.as_deref()),
        ) else {
            return Decision::ignore(IgnoreReason::Unsupported);
        };
        directive = proxy_directive(directive, class.firmware);
        let parts = ReplyParts {
            kind,
            yiaddr: Ipv4Addr::UNSPECIFIED,
            server_id,
            subnet: None,
            host,
            timers: None,
            boot: Some(&directive),
            server_options: &self.settings.options,
            dnsmasq: ctx.dnsmasq,
        };
        let mut message = reply::build(msg, &parts);
        message.set_yiaddr(Ipv4Addr::UNSPECIFIED);
        // PXE §2.2.3: the client's UUID (option 97) goes back in every proxy reply.
        if let Some(uuid @ DhcpOption::ClientMachineIdentifier(_)) =
            msg.opts().get(OptionCode::ClientMachineIdentifier)
        {
            message.opts_mut().insert(uuid.clone());
        }
        let destination = if ctx.interface.boot_server {
            Destination::Sender
        } else {
            reply::destination(msg, kind, Ipv4Addr::UNSPECIFIED)
        };
        Decision {
            reply: Some(Reply {
                message,
                destination,
                fit: Fit::for_request(msg.opts()),
            }),
            effects: Vec::new(),
            outcome: if kind == MessageType::Offer {
                Outcome::ProxyOffer
            } else {
                Outcome::ProxyAck
            },
        }
    }
}

/// A proxy offer must say `PXEClient` (or `HTTPClient`) in option 60, or firmware, iPXE
/// included, does not take it for a ProxyDHCP offer; and it must not tell iPXE to skip
/// ProxyDHCP (option 175's no-pxedhcp), since it is the ProxyDHCP.
fn proxy_directive(mut d: BootDirective, firmware: Firmware) -> BootDirective {
    d.vendor_class = Some(match firmware {
        Firmware::Http => "HTTPClient",
        _ => "PXEClient",
    });
    d.ipxe = false;
    d
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use crate::dhcp::engine::{DnsmasqDirs, Interface};
    use dhcproto::v4::Architecture;

    const CONFIG: &str = r#"
[dhcp]
proxy = true
interfaces = ["br0"]
[boot]
http_url = "http://192.0.2.1:8080"
"#;

    fn engine() -> Engine {
        Engine::new(
            &Config::from_toml_with_overrides(CONFIG, &[]).unwrap(),
            vec![],
            1_000,
        )
    }

    fn iface(boot_server: bool) -> Interface {
        Interface {
            name: "br0".into(),
            addr: Ipv4Addr::new(192, 0, 2, 1),
            boot_server,
        }
    }

    fn ctx(i: &Interface) -> PacketContext<'_> {
        PacketContext {
            interface: i,
            responsibility: Responsibility::Mine,
            policy: None,
            known: false,
            dnsmasq: DnsmasqDirs::default(),
            source: std::net::Ipv4Addr::UNSPECIFIED,
            now: 1_000,
        }
    }

    fn request(kind: MessageType, vendor: Option<&str>, user_class: Option<&str>) -> Message {
        let z = Ipv4Addr::UNSPECIFIED;
        let mut m = Message::new_with_id(7, z, z, z, z, &[0x52, 0x54, 0, 0, 0, 1]);
        m.opts_mut().insert(DhcpOption::MessageType(kind));
        if let Some(v) = vendor {
            m.opts_mut()
                .insert(DhcpOption::ClassIdentifier(v.as_bytes().to_vec()));
            m.opts_mut()
                .insert(DhcpOption::ClientSystemArchitecture(Architecture(0)));
        }
        if let Some(u) = user_class {
            m.opts_mut()
                .insert(DhcpOption::UserClass(u.as_bytes().to_vec()));
        }
        m.opts_mut()
            .insert(DhcpOption::ClientMachineIdentifier(vec![0; 17]));
        m
    }

    #[test]
    fn a_pxe_discover_gets_boot_information_and_no_address() {
        let e = engine();
        let i = iface(false);
        let mac = MacAddr([0x52, 0x54, 0, 0, 0, 1]);
        let d = e.proxy(
            &request(
                MessageType::Discover,
                Some("PXEClient:Arch:00000:UNDI:002001"),
                None,
            ),
            &mac,
            &ctx(&i),
        );
        assert_eq!(d.outcome, Outcome::ProxyOffer);
        assert!(d.effects.is_empty(), "a proxy stores nothing");
        let r = d.reply.unwrap();
        let m = &r.message;
        assert_eq!(m.yiaddr(), Ipv4Addr::UNSPECIFIED);
        assert_eq!(m.siaddr(), Ipv4Addr::new(192, 0, 2, 1));
        assert_eq!(m.opts().msg_type(), Some(MessageType::Offer));
        let get = |c| m.opts().get(c).cloned();
        assert_eq!(
            get(OptionCode::ClassIdentifier),
            Some(DhcpOption::ClassIdentifier(b"PXEClient".to_vec()))
        );
        assert_eq!(
            get(OptionCode::VendorExtensions),
            Some(DhcpOption::VendorExtensions(vec![6, 1, 8, 255]))
        );
        assert_eq!(
            get(OptionCode::BootfileName),
            Some(DhcpOption::BootfileName(b"undionly.kpxe".to_vec()))
        );
        assert!(get(OptionCode::ClientMachineIdentifier).is_some());
        // No lease, no address options.
        for c in [
            OptionCode::AddressLeaseTime,
            OptionCode::SubnetMask,
            OptionCode::Router,
        ] {
            assert_eq!(get(c), None, "{c:?}");
        }
        assert_eq!(r.destination, Destination::Broadcast);
    }

    #[test]
    fn the_boot_server_port_acks_to_the_sender_and_ipxe_gets_its_script() {
        let e = engine();
        let mac = MacAddr([0x52, 0x54, 0, 0, 0, 1]);
        let i = iface(true);
        let req = request(
            MessageType::Request,
            Some("PXEClient:Arch:00000:UNDI:002001"),
            Some("iPXE"),
        );
        let d = e.proxy(&req, &mac, &ctx(&i));
        assert_eq!(d.outcome, Outcome::ProxyAck);
        let r = d.reply.unwrap();
        assert_eq!(r.destination, Destination::Sender);
        assert_eq!(
            r.message.opts().get(OptionCode::BootfileName),
            Some(&DhcpOption::BootfileName(
                b"http://192.0.2.1:8080/boot.ipxe".to_vec()
            ))
        );
        // It is the ProxyDHCP: no "skip ProxyDHCP" for iPXE.
        assert_eq!(r.message.opts().get(OptionCode::Unknown(175)), None);
    }

    #[test]
    fn everything_else_is_left_to_the_address_server() {
        let e = engine();
        let mac = MacAddr([0x52, 0x54, 0, 0, 0, 1]);
        let (i67, i4011) = (iface(false), iface(true));
        let os = request(MessageType::Discover, None, None);
        assert_eq!(
            e.proxy(&os, &mac, &ctx(&i67)).outcome,
            Outcome::Ignored(IgnoreReason::NotBootClient)
        );
        let select = request(MessageType::Request, Some("PXEClient"), None);
        assert_eq!(
            e.proxy(&select, &mac, &ctx(&i67)).outcome,
            Outcome::Ignored(IgnoreReason::OtherServer)
        );
        let discover = request(MessageType::Discover, Some("PXEClient"), None);
        assert_eq!(
            e.proxy(&discover, &mac, &ctx(&i4011)).outcome,
            Outcome::Ignored(IgnoreReason::Unsupported)
        );
        // Another member's machine.
        let other = PacketContext {
            responsibility: Responsibility::NotMine,
            ..ctx(&i67)
        };
        assert_eq!(
            e.proxy(&discover, &mac, &other).outcome,
            Outcome::Ignored(IgnoreReason::NotResponsible)
        );
    }
}
