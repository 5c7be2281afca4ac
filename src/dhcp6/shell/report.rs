//! What a machine's timeline (`crate::timeline`) is told of one DHCPv6 decision, in the
//! terms v4's are told: the message, what was sent or why nothing was, the address
//! given (so TFTP and HTTP from that address find the machine) and the boot URL.

use std::net::IpAddr;

use dhcproto::v6::{DhcpOption, Message, MessageType, OptionCode};

use crate::dhcp6::client_mac::MacSource;
use crate::dhcp6::engine::{reply::ia_nas, Decision6, Outcome6};
use crate::timeline::{Report, Source};

/// The report of `d`, the decision on `msg` from a client whose MAC was found `via`.
pub(super) fn report(msg: &Message, d: &Decision6, via: MacSource) -> Report {
    let what = match msg.msg_type() {
        MessageType::Solicit => "SOLICIT",
        MessageType::Request => "REQUEST",
        MessageType::Renew => "RENEW",
        MessageType::Rebind => "REBIND",
        MessageType::Release => "RELEASE",
        MessageType::Decline => "DECLINE",
        MessageType::Confirm => "CONFIRM",
        MessageType::InformationRequest => "INFORMATION-REQUEST",
        _ => "other",
    };
    let (outcome, why) = match d.outcome {
        Outcome6::Advertise(_) => ("advertise", None),
        Outcome6::Bound(_) => ("reply", None),
        Outcome6::Released => ("released", None),
        Outcome6::Declined => ("declined", None),
        Outcome6::Confirmed(true) => ("reply", Some("on_link")),
        Outcome6::Confirmed(false) => ("reply", Some("not_on_link")),
        Outcome6::Informed => ("reply", Some("information")),
        Outcome6::NoAddresses => ("reply", Some("no_addresses")),
        Outcome6::NoBinding => ("reply", Some("no_binding")),
        Outcome6::UseMulticast => ("reply", Some("use_multicast")),
        Outcome6::Ignored(r) => ("silent", Some(r.as_str())),
    };
    // The first address the reply gives (firmware asks for one IA_NA), only when it
    // gives one: a Confirm's or a Release's echo names no address the client may use.
    let ip = match d.outcome {
        Outcome6::Advertise(_) | Outcome6::Bound(_) => d.reply.as_ref().and_then(first_address),
        _ => None,
    };
    // The boot URL is this server's own, shown as sent; how the MAC was found tells
    // the operator why the machine is filed under it.
    let url = d.reply.as_ref().and_then(boot_url);
    let detail = match url {
        Some(u) => format!("mac from {}; boot file {u}", via.as_str()),
        None => format!("mac from {}", via.as_str()),
    };
    Report {
        source: Source::Dhcp6,
        what,
        outcome,
        why,
        ip: ip.map(IpAddr::V6),
        detail: Some(detail),
    }
}

fn first_address(reply: &Message) -> Option<std::net::Ipv6Addr> {
    ia_nas(reply).iter().find_map(|ia| {
        ia.opts.iter().find_map(|o| match o {
            DhcpOption::IAAddr(a) if a.valid_life > 0 => Some(a.addr),
            _ => None,
        })
    })
}

/// Option 59 (RFC 5970 §3.1), which dhcproto keeps as an unknown option.
fn boot_url(reply: &Message) -> Option<String> {
    match reply.opts().get(OptionCode::OptBootfileUrl) {
        Some(DhcpOption::Unknown(u)) => Some(String::from_utf8_lossy(u.data()).into_owned()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use dhcproto::v6::{DhcpOptions, IAAddr, UnknownOption, IANA};

    use super::*;
    use crate::dhcp6::engine::Ignore6;

    fn reply(addr: &str, valid: u32) -> Message {
        let mut m = Message::new_with_id(MessageType::Reply, [1, 2, 3]);
        let mut ia = DhcpOptions::new();
        ia.insert(DhcpOption::IAAddr(IAAddr {
            addr: addr.parse().unwrap(),
            preferred_life: valid,
            valid_life: valid,
            opts: DhcpOptions::new(),
        }));
        m.opts_mut().insert(DhcpOption::IANA(IANA {
            id: 1,
            t1: 0,
            t2: 0,
            opts: ia,
        }));
        m.opts_mut().insert(DhcpOption::Unknown(UnknownOption::new(
            OptionCode::OptBootfileUrl,
            b"tftp://[fd00:1::1]/snponly.efi".to_vec(),
        )));
        m
    }

    fn decision(reply: Option<Message>, outcome: Outcome6) -> Decision6 {
        Decision6 {
            reply,
            effects: Vec::new(),
            outcome,
        }
    }

    #[test]
    fn a_reply_names_its_address_and_boot_url_and_a_silence_its_reason() {
        let request = Message::new_with_id(MessageType::Request, [1, 2, 3]);
        let r = report(
            &request,
            &decision(Some(reply("fd00:1::105", 3600)), Outcome6::Bound(1)),
            MacSource::LinkLocal,
        );
        assert_eq!(
            (r.source, r.what, r.outcome, r.why),
            (Source::Dhcp6, "REQUEST", "reply", None)
        );
        assert_eq!(r.ip, Some("fd00:1::105".parse().unwrap()));
        assert_eq!(
            r.detail.as_deref(),
            Some("mac from link_local; boot file tftp://[fd00:1::1]/snponly.efi")
        );
        // A Release's Reply echoes the address with no lifetime: nothing given.
        let release = Message::new_with_id(MessageType::Release, [1, 2, 3]);
        let r = report(
            &release,
            &decision(Some(reply("fd00:1::105", 0)), Outcome6::Released),
            MacSource::Duid,
        );
        assert_eq!((r.what, r.outcome, r.ip), ("RELEASE", "released", None));
        let solicit = Message::new_with_id(MessageType::Solicit, [1, 2, 3]);
        let r = report(
            &solicit,
            &decision(None, Outcome6::Ignored(Ignore6::NotResponsible)),
            MacSource::RelayOption79,
        );
        assert_eq!(
            (r.what, r.outcome, r.why, r.ip),
            ("SOLICIT", "silent", Some("not_responsible"), None)
        );
        assert_eq!(r.detail.as_deref(), Some("mac from option_79"));
    }
}
