//! What a DHCPv6 reply carries beside its IAs: the subnet's DNS options, the boot file
//! URL, the host name, and the configured `option6:` entries (`crate::options`, the
//! same precedence as v4: `[dhcp] options`, then `[[subnet6]] options`, then the
//! `[[host]]`'s, tags deciding within a level: client classes, the host's tags and
//! `known`, the tag of the range the address comes from), trimmed to what the client
//! asked for.

use dhcproto::v6::{DhcpOption, Message, OptionCode, UnknownOption};

use super::reply;
use super::{client_fqdn_flags, Context6, Engine6};
use crate::dhcp6::boot::{classify, select};
use crate::options::{self, Levels};

/// Options a reply carries whatever the Option Request option says: the boot file URL
/// and the vendor class that goes with it (UEFI HTTP Boot checks the echo, UEFI
/// Specification §24.7.2), and the FQDN, sent only to a client that sent one.
const ALWAYS: [u16; 3] = [16, 39, 59];

impl Engine6 {
    /// Adds the options of a reply to `msg` from a client on subnet `si`.
    pub(super) fn configure(
        &self,
        out: &mut Message,
        msg: &Message,
        si: usize,
        ctx: &Context6<'_>,
    ) {
        let class = classify(msg.opts());
        let subnet = &self.subnets[si].cfg;
        let boot = self
            .server_address(si, &ctx.arrival)
            .and_then(|server| select(class, &self.boot, server, None));
        reply::configuration(out, subnet, boot.as_ref());
        // RFC 4704 §6: the name goes back only to a client that sent option 39.
        if let (Some(flags), Some(name)) = (client_fqdn_flags(msg), self.hosts.hostname(ctx.mac)) {
            out.opts_mut().insert(reply::fqdn(flags, name));
        }
        let host = self.hosts.entry(ctx.mac);
        let mut tags: Vec<&str> = Vec::with_capacity(8);
        options::class_tags(&class, &mut tags);
        // The tag of the range the reply's address comes from (`{ range, tag }`).
        let given = reply::ia_nas(out)
            .into_iter()
            .flat_map(|ia| {
                ia.opts.iter().filter_map(|o| match o {
                    DhcpOption::IAAddr(a) if a.valid_life > 0 => Some(a.addr),
                    _ => None,
                })
            })
            .find_map(|a| subnet.range_tag(a));
        tags.extend(given);
        if let Some(h) = host {
            tags.push("known");
            tags.extend(h.tags.iter().map(String::as_str));
        }
        let levels = Levels {
            server: &self.server_options,
            subnet: &subnet.options,
            node: &[],
            host: host.map_or(&[][..], |h| &h.options6[..]),
        };
        apply(out, levels, &tags);
        keep_requested(out, requested(msg).as_deref());
    }
}

/// Each winning entry replaces its code's option, or removes it when it has no value.
fn apply(out: &mut Message, levels: Levels<'_, u16>, tags: &[&str]) {
    for rule in options::select(levels, tags) {
        let opts = out.opts_mut();
        let code = OptionCode::from(rule.code);
        while opts.remove(code).is_some() {}
        if let Some(v) = &rule.value {
            opts.insert(DhcpOption::Unknown(UnknownOption::new(code, v.clone())));
        }
    }
}

/// The codes of the client's Option Request option (RFC 8415 §21.7), if it sent one.
fn requested(msg: &Message) -> Option<Vec<u16>> {
    match msg.opts().get(OptionCode::ORO) {
        Some(DhcpOption::ORO(oro)) => Some(oro.opts.iter().map(|c| u16::from(*c)).collect()),
        _ => None,
    }
}

/// RFC 8415 §18.3: the configuration a server returns is what the client asked for in
/// its Option Request option; a client that sent none gets everything configured (as
/// dnsmasq does). The IAs, identifiers and status are not configuration.
fn keep_requested(out: &mut Message, requested: Option<&[u16]>) {
    let Some(requested) = requested else { return };
    let drop: Vec<u16> = out
        .opts()
        .iter()
        .map(|o| u16::from(OptionCode::from(o)))
        .filter(|c| is_configuration(*c) && !requested.contains(c) && !ALWAYS.contains(c))
        .collect();
    for code in drop {
        while out.opts_mut().remove(OptionCode::from(code)).is_some() {}
    }
}

/// Whether `code` is configuration (an option `option6:` may set), not protocol.
fn is_configuration(code: u16) -> bool {
    options::catalog6::reserved6(code).is_none()
}
