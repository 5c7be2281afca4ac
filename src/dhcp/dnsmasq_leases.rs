//! Reading a dnsmasq lease file (`dnsmasq.leases`) for `shardboot leases import
//! --dnsmasq`, so a switch from dnsmasq keeps every binding (docs/dnsmasq-migration.md).
//!
//! dnsmasq writes one DHCPv4 lease per line, `<expiry> <mac> <ip> <hostname> <client-id>`:
//! the expiry in Unix seconds (`0`: an infinite lease), `*` for an unknown name or
//! client identifier, the identifier as colon-separated hex octets. A line `duid <duid>`
//! starts its DHCPv6 leases (`<expiry> <iaid> <ip6> <hostname> <duid>`); those are
//! counted and skipped: a v6 client's DUID, not its MAC, names its binding, and a
//! DHCPv6 client that finds its address gone asks again (RFC 8415 §18.2.3).
//!
//! Pure: the file's text and the configuration come in, the leases to write (or the
//! first reason not to write any) go out. The CLI (`cli::migrate`) does the I/O.

use std::collections::HashMap;
use std::net::Ipv4Addr;

use crate::config::Config;
use crate::mac::MacAddr;
use crate::store::{Lease, LeaseState};

/// A file longer than this is not a lease file (dnsmasq's default `dhcp-lease-max` is
/// 1,000; a /16 is 65,536 addresses).
pub const MAX_LINES: usize = 1_000_000;

/// One DHCPv4 lease line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DnsmasqLease {
    /// Its line number (from 1), for messages.
    pub line: usize,
    /// Unix seconds; `None` for dnsmasq's `0` (an infinite lease).
    pub expires: Option<u64>,
    /// The client's hardware address.
    pub mac: MacAddr,
    /// The leased address.
    pub ip: Ipv4Addr,
    /// The client's host name, as dnsmasq wrote it (`None` for `*`).
    pub hostname: Option<String>,
    /// The client identifier (option 61), `None` for `*`.
    pub client_id: Option<Vec<u8>>,
}

/// What a lease file holds.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Parsed {
    /// The DHCPv4 leases, in file order.
    pub leases: Vec<DnsmasqLease>,
    /// DHCPv6 lease lines, skipped.
    pub v6_skipped: usize,
}

/// Why a line cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LineError {
    /// Not five whitespace-separated fields.
    #[error("expected 5 fields (expiry mac ip hostname client-id), found {0}")]
    Fields(usize),
    /// The expiry is not a number of seconds.
    #[error("expiry is not Unix seconds")]
    Expiry,
    /// The MAC is not an Ethernet address (dnsmasq writes `<type>-<address>` for other
    /// hardware types).
    #[error("hardware address is not a 6-octet Ethernet MAC")]
    Mac,
    /// The address is not IPv4 (a v6 lease before any `duid` line).
    #[error("address is not IPv4 (a DHCPv6 lease must follow a `duid` line)")]
    Address,
    /// The client identifier is not colon-separated hex octets.
    #[error("client-id is not colon-separated hex octets or `*`")]
    ClientId,
    /// The host name holds a byte dnsmasq never writes there.
    #[error("hostname holds a control or non-ASCII byte")]
    Hostname,
    /// The same address on an earlier line.
    #[error("address {ip} is also leased on line {first}")]
    DuplicateAddress {
        /// The address.
        ip: Ipv4Addr,
        /// The earlier line.
        first: usize,
    },
    /// The address is on no configured subnet.
    #[error("{0} is on no configured [[subnet]]")]
    NoSubnet(Ipv4Addr),
    /// On a subnet, outside its ranges, and reserved for nobody: this server would NAK
    /// the client (RFC 2131 §4.3.2), so the lease is refused rather than kept unused.
    #[error("{0} is outside the subnet's ranges and no [[host]] reserves it for this MAC")]
    OutsideRanges(Ipv4Addr),
    /// An address the configuration excludes.
    #[error("{0} is in the subnet's `exclude` list")]
    Excluded(Ipv4Addr),
    /// A `[[host]]` reserves the address for another MAC.
    #[error("{ip} is reserved by a [[host]] for {holder}")]
    Reserved {
        /// The address.
        ip: Ipv4Addr,
        /// The MAC it is reserved for.
        holder: MacAddr,
    },
    /// The store already holds a live binding of the address for another client.
    #[error("{ip} is bound in the store to {holder} until {until}")]
    Held {
        /// The address.
        ip: Ipv4Addr,
        /// The holder in the store.
        holder: MacAddr,
        /// Its expiry (Unix seconds).
        until: u64,
    },
}

/// A line that cannot be imported: nothing is imported.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: {reason}")]
pub struct ImportError {
    /// The line number, from 1.
    pub line: usize,
    /// Why.
    pub reason: LineError,
}

/// Reads every line of `text`. The first unreadable line is the error.
pub fn parse(text: &str) -> Result<Parsed, ImportError> {
    let mut out = Parsed::default();
    let mut in_v6 = false;
    let mut seen: HashMap<Ipv4Addr, usize> = HashMap::new();
    for (i, raw) in text.lines().enumerate().take(MAX_LINES) {
        let line = i + 1;
        let err = |reason| ImportError { line, reason };
        let fields: Vec<&str> = raw.split_ascii_whitespace().collect();
        match fields.as_slice() {
            [] => continue,
            // dnsmasq writes its server DUID before the v6 leases.
            ["duid", _] => {
                in_v6 = true;
                continue;
            }
            _ if in_v6 => {
                out.v6_skipped += 1;
                continue;
            }
            [expiry, mac, ip, name, id] => {
                let lease = DnsmasqLease {
                    line,
                    expires: match expiry.parse::<u64>().map_err(|_| err(LineError::Expiry))? {
                        0 => None,
                        t => Some(t),
                    },
                    mac: mac.parse().map_err(|_| err(LineError::Mac))?,
                    ip: ip.parse().map_err(|_| err(LineError::Address))?,
                    hostname: hostname(name).map_err(err)?,
                    client_id: client_id(id).map_err(err)?,
                };
                if let Some(first) = seen.insert(lease.ip, line) {
                    return Err(err(LineError::DuplicateAddress {
                        ip: lease.ip,
                        first,
                    }));
                }
                out.leases.push(lease);
            }
            other => return Err(err(LineError::Fields(other.len()))),
        }
    }
    Ok(out)
}

/// The host name field: `*` is none. Whitespace cannot occur (it separates fields);
/// control and non-ASCII bytes are refused: dnsmasq only writes names it checked.
fn hostname(field: &str) -> Result<Option<String>, LineError> {
    if field == "*" {
        return Ok(None);
    }
    if !field.bytes().all(|b| (0x21..0x7f).contains(&b)) {
        return Err(LineError::Hostname);
    }
    Ok(Some(field.to_string()))
}

/// The client identifier field: `*` is none, else `01:52:54:…` (dnsmasq prints every
/// octet as two hex digits, joined by `:`).
fn client_id(field: &str) -> Result<Option<Vec<u8>>, LineError> {
    if field == "*" {
        return Ok(None);
    }
    field
        .split(':')
        .map(|o| {
            if o.len() == 2 {
                u8::from_str_radix(o, 16).map_err(|_| LineError::ClientId)
            } else {
                Err(LineError::ClientId)
            }
        })
        .collect::<Result<Vec<u8>, _>>()
        .map(Some)
}

/// What an import writes, and what it left out.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Plan {
    /// Bound leases to write.
    pub leases: Vec<Lease>,
    /// Lines whose lease had expired by `now`: skipped.
    pub expired: usize,
    /// Lines with expiry `0` (infinite), written to end one lease time after `now`.
    pub infinite: usize,
    /// Lines whose lease the store already held for the same client with a later end:
    /// left as stored.
    pub kept: usize,
    /// DHCPv6 lines skipped.
    pub v6_skipped: usize,
}

/// Checks every lease against `config` and the store's `stored` leases at `now`.
/// Addresses on no subnet, outside the ranges (unless reserved for the same MAC),
/// excluded, reserved for another MAC, or bound in the store to another client refuse
/// the whole import with their line. A MAC on several lines keeps each of its addresses,
/// as dnsmasq did.
pub fn plan(
    parsed: &Parsed,
    config: &Config,
    stored: &[Lease],
    now: u64,
) -> Result<Plan, ImportError> {
    let reserved: HashMap<Ipv4Addr, MacAddr> = config
        .hosts
        .iter()
        .filter_map(|h| Some((h.ip?, h.mac)))
        .collect();
    let in_store: HashMap<Ipv4Addr, &Lease> = stored.iter().map(|l| (l.ip, l)).collect();
    let mut out = Plan {
        v6_skipped: parsed.v6_skipped,
        ..Plan::default()
    };
    for l in &parsed.leases {
        let err = |reason| ImportError {
            line: l.line,
            reason,
        };
        let Some(subnet) = config.subnets.iter().find(|s| s.network.contains(&l.ip)) else {
            return Err(err(LineError::NoSubnet(l.ip)));
        };
        if subnet.exclude.contains(&l.ip) {
            return Err(err(LineError::Excluded(l.ip)));
        }
        match reserved.get(&l.ip) {
            Some(holder) if *holder != l.mac => {
                return Err(err(LineError::Reserved {
                    ip: l.ip,
                    holder: *holder,
                }))
            }
            Some(_) => {}
            None if !subnet.in_ranges(l.ip) => return Err(err(LineError::OutsideRanges(l.ip))),
            None => {}
        }
        let expires = match l.expires {
            Some(t) if t <= now => {
                out.expired += 1;
                continue;
            }
            Some(t) => t,
            None => {
                out.infinite += 1;
                now + u64::from(subnet.lease_time)
            }
        };
        match in_store.get(&l.ip) {
            Some(s) if s.mac != l.mac && s.is_active(now) && s.state != LeaseState::Offered => {
                return Err(err(LineError::Held {
                    ip: l.ip,
                    holder: s.mac,
                    until: s.expires,
                }))
            }
            Some(s) if s.mac == l.mac && s.state == LeaseState::Bound && s.expires >= expires => {
                out.kept += 1;
                continue;
            }
            _ => {}
        }
        out.leases.push(Lease {
            ip: l.ip,
            mac: l.mac,
            state: LeaseState::Bound,
            // dnsmasq does not record when a lease began; the import is when this
            // server learnt of it.
            starts: now.min(expires),
            expires,
            hostname: l.hostname.clone(),
            client_id: l.client_id.clone(),
            machine_id: None,
            arch: None,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests;
