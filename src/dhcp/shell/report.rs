//! What the timeline is told of each decision.

/// What the timeline is told of one decision: the message type, and what was sent or
/// why nothing was.
pub(super) fn timeline_report(
    msg: &dhcproto::v4::Message,
    d: &crate::dhcp::engine::Decision,
) -> crate::timeline::Report {
    use crate::dhcp::engine::Outcome as O;
    use dhcproto::v4::MessageType as T;
    let what = match msg.opts().msg_type() {
        Some(T::Discover) => "DISCOVER",
        Some(T::Request) => "REQUEST",
        Some(T::Decline) => "DECLINE",
        Some(T::Release) => "RELEASE",
        Some(T::Inform) => "INFORM",
        _ => "other",
    };
    let (outcome, why, ip) = match d.outcome {
        O::Offer(ip) => ("offer", None, Some(ip)),
        O::Ack(ip) => ("ack", None, Some(ip)),
        O::Nak => ("nak", None, None),
        O::Inform => ("ack", Some("inform"), None),
        O::Release(ip) => ("released", None, Some(ip)),
        O::Decline(ip) => ("declined", None, Some(ip)),
        O::ProxyOffer => ("proxy offer", None, None),
        O::ProxyAck => ("proxy ack", None, None),
        O::Probe(ip) => ("probe", Some("conflict check"), Some(ip)),
        O::Ignored(r) => ("silent", Some(r.as_str()), None),
    };
    // The boot file told, if any: this server's own choice, shown as sent.
    let detail = d.reply.as_ref().and_then(|r| {
        match r.message.opts().get(dhcproto::v4::OptionCode::BootfileName) {
            Some(dhcproto::v4::DhcpOption::BootfileName(f)) => {
                Some(format!("boot file {}", String::from_utf8_lossy(f)))
            }
            _ => None,
        }
    });
    crate::timeline::Report {
        source: crate::timeline::Source::Dhcp,
        what,
        outcome,
        why,
        ip: ip.map(std::net::IpAddr::V4),
        detail,
    }
}

/// What the timeline is told of a silence decided from the raw packet: what
/// [`timeline_report`] says of the same silence after a full decode.
pub(super) fn silent_report(
    what: &'static str,
    reason: crate::dhcp::engine::IgnoreReason,
) -> crate::timeline::Report {
    crate::timeline::Report {
        source: crate::timeline::Source::Dhcp,
        what,
        outcome: "silent",
        why: Some(reason.as_str()),
        ip: None,
        detail: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dhcp::engine::{Decision, IgnoreReason, Outcome};
    use dhcproto::v4::{DhcpOption, Message, MessageType};
    use std::net::Ipv4Addr;

    #[test]
    fn a_silence_from_the_raw_packet_reads_in_the_timeline_as_after_a_full_decode() {
        let z = Ipv4Addr::UNSPECIFIED;
        for (kind, what) in [
            (MessageType::Discover, "DISCOVER"),
            (MessageType::Request, "REQUEST"),
        ] {
            let mut msg = Message::new_with_id(1, z, z, z, z, &[0x52, 0x54, 0, 0, 0, 1]);
            msg.opts_mut().insert(DhcpOption::MessageType(kind));
            for reason in [IgnoreReason::NotResponsible, IgnoreReason::OtherServer] {
                let silent = Decision {
                    reply: None,
                    effects: Vec::new(),
                    outcome: Outcome::Ignored(reason),
                };
                assert_eq!(
                    format!("{:?}", silent_report(what, reason)),
                    format!("{:?}", timeline_report(&msg, &silent))
                );
            }
        }
    }
}
