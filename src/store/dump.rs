//! The whole store as one JSON document (`shardboot leases export --json`, `leases import
//! --json`): a backup, and the way back across versions whose on-disk formats differ
//! (the document names every field, where the store's records are this build's binary
//! codec). Pure: a [`Snapshot`] in, a [`Dump`] out, and back.
//!
//! Every value round-trips: host names in the kept form (`store::text`), which reads
//! back to the bytes the client sent; identifiers and DUIDs as lower-case hex. Records
//! that did not decode (set aside) are not in it; the membership record is, so a
//! restored member resumes its transition as it would have.

use std::net::{Ipv4Addr, Ipv6Addr};

use serde::{Deserialize, Serialize};

use super::{HostPolicy, Lease, Lease6, LeaseState, Membership, Reservation, Snapshot};
use crate::mac::MacAddr;

/// The document's `format`.
pub const FORMAT: &str = "shardboot-store";
/// The document version this build writes and the newest it reads. A later one may add
/// fields (read past) but never change one's meaning without a new version.
pub const VERSION: u32 = 1;

/// Why a document cannot be restored.
#[derive(Debug, thiserror::Error)]
pub enum DumpError {
    /// Not JSON, or not this document's shape.
    #[error("not a shardboot store document: {0}")]
    Json(#[from] serde_json::Error),
    /// Another document.
    #[error("format is {0:?}, not {FORMAT:?}")]
    Format(String),
    /// Written by a newer shardboot in a way this one cannot read.
    #[error("document version {0} is newer than this build reads ({VERSION})")]
    Version(u32),
    /// A field's value is not what it must be.
    #[error("{what} {index}: {field}: {reason}")]
    Field {
        /// `lease`, `lease6`, …
        what: &'static str,
        /// Its position in its list, from 0.
        index: usize,
        /// The field.
        field: &'static str,
        /// What is wrong.
        reason: &'static str,
    },
}

/// The document.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Dump {
    /// Always [`FORMAT`].
    pub format: String,
    /// [`VERSION`] when written by this build.
    pub version: u32,
    /// Unix seconds when it was written.
    pub exported_at: u64,
    /// DHCPv4 leases, in address order.
    pub leases: Vec<LeaseDoc>,
    /// DHCPv6 leases, in address order.
    #[serde(default)]
    pub leases6: Vec<Lease6Doc>,
    /// Run-time reservations.
    #[serde(default)]
    pub reservations: Vec<Reservation>,
    /// The operator's host policies.
    #[serde(default)]
    pub host_policies: Vec<PolicyDoc>,
    /// The membership record.
    #[serde(default)]
    pub membership: Option<Membership>,
    /// The DHCPv6 server DUID, hex.
    #[serde(default)]
    pub server_duid: Option<String>,
}

/// A DHCPv4 lease.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseDoc {
    /// The address.
    pub ip: Ipv4Addr,
    /// The client's MAC.
    pub mac: MacAddr,
    /// `bound`, `released` or `declined`.
    pub state: String,
    /// Unix seconds.
    pub starts: u64,
    /// Unix seconds.
    pub expires: u64,
    /// Option 12 in the kept form (`store::text`).
    pub hostname: Option<String>,
    /// Option 61, hex.
    pub client_id: Option<String>,
    /// Option 97, hex.
    pub machine_id: Option<String>,
    /// Option 93.
    pub arch: Option<u16>,
}

/// A DHCPv6 lease.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Lease6Doc {
    /// The address.
    pub ip: Ipv6Addr,
    /// The client's DUID, hex.
    pub duid: String,
    /// The IA_NA's identifier.
    pub iaid: u32,
    /// The client's MAC, when found.
    pub mac: Option<MacAddr>,
    /// `bound`, `released` or `declined`.
    pub state: String,
    /// Unix seconds.
    pub starts: u64,
    /// Unix seconds.
    pub preferred: u64,
    /// Unix seconds.
    pub expires: u64,
    /// The host name in the kept form.
    pub hostname: Option<String>,
    /// The architecture.
    pub arch: Option<u16>,
}

/// A host policy.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PolicyDoc {
    /// The MAC.
    pub mac: MacAddr,
    /// `allow` or `deny`.
    pub policy: HostPolicy,
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) || !s.is_ascii() {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).ok())
        .collect()
}

fn state_of(s: &str) -> Option<LeaseState> {
    match s {
        "bound" => Some(LeaseState::Bound),
        "released" => Some(LeaseState::Released),
        "declined" => Some(LeaseState::Declined),
        _ => None,
    }
}

/// A kept-form name back to the client's text.
fn name_of(kept: &str) -> Option<String> {
    String::from_utf8(super::text::original(kept)?).ok()
}

impl Dump {
    /// The document for `snap`, written at `now`.
    pub fn of(snap: &Snapshot, now: u64) -> Self {
        let mut leases: Vec<&Lease> = snap
            .leases
            .iter()
            .filter(|l| l.state != LeaseState::Offered)
            .collect();
        leases.sort_by_key(|l| l.ip);
        Self {
            format: FORMAT.into(),
            version: VERSION,
            exported_at: now,
            leases: leases
                .into_iter()
                .map(|l| LeaseDoc {
                    ip: l.ip,
                    mac: l.mac,
                    state: l.state.as_str().into(),
                    starts: l.starts,
                    expires: l.expires,
                    hostname: l.hostname.as_deref().map(super::text::shown),
                    client_id: l.client_id.as_deref().map(hex),
                    machine_id: l.machine_id.as_deref().map(hex),
                    arch: l.arch,
                })
                .collect(),
            leases6: snap
                .leases6
                .iter()
                .map(|l| Lease6Doc {
                    ip: l.ip,
                    duid: hex(&l.duid),
                    iaid: l.iaid,
                    mac: l.mac,
                    state: l.state.as_str().into(),
                    starts: l.starts,
                    preferred: l.preferred,
                    expires: l.expires,
                    hostname: l.hostname.as_deref().map(super::text::shown),
                    arch: l.arch,
                })
                .collect(),
            reservations: snap.reservations.clone(),
            host_policies: snap
                .host_policies
                .iter()
                .map(|(mac, policy)| PolicyDoc {
                    mac: *mac,
                    policy: *policy,
                })
                .collect(),
            membership: snap.membership.clone(),
            server_duid: snap.server_duid.as_deref().map(hex),
        }
    }

    /// Reads a document, refusing another format or a newer version.
    pub fn parse(text: &str) -> Result<Self, DumpError> {
        let d: Dump = serde_json::from_str(text)?;
        if d.format != FORMAT {
            return Err(DumpError::Format(d.format));
        }
        if d.version > VERSION {
            return Err(DumpError::Version(d.version));
        }
        Ok(d)
    }

    /// The records the document holds, checked field by field.
    pub fn to_snapshot(&self) -> Result<Snapshot, DumpError> {
        let bad = |what, index, field, reason| DumpError::Field {
            what,
            index,
            field,
            reason,
        };
        let bytes = |what, i, field, v: &Option<String>| -> Result<Option<Vec<u8>>, DumpError> {
            v.as_deref()
                .map(|s| unhex(s).ok_or_else(|| bad(what, i, field, "not hex octets")))
                .transpose()
        };
        let name = |what, i, v: &Option<String>| -> Result<Option<String>, DumpError> {
            v.as_deref()
                .map(|s| name_of(s).ok_or_else(|| bad(what, i, "hostname", "not in the kept form")))
                .transpose()
        };
        let state = |what, i, s: &str| {
            state_of(s).ok_or_else(|| bad(what, i, "state", "not bound, released or declined"))
        };
        let mut leases = Vec::with_capacity(self.leases.len());
        for (i, l) in self.leases.iter().enumerate() {
            leases.push(Lease {
                ip: l.ip,
                mac: l.mac,
                state: state("lease", i, &l.state)?,
                starts: l.starts,
                expires: l.expires,
                hostname: name("lease", i, &l.hostname)?,
                client_id: bytes("lease", i, "client_id", &l.client_id)?,
                machine_id: bytes("lease", i, "machine_id", &l.machine_id)?,
                arch: l.arch,
            });
        }
        let mut leases6 = Vec::with_capacity(self.leases6.len());
        for (i, l) in self.leases6.iter().enumerate() {
            leases6.push(Lease6 {
                ip: l.ip,
                duid: unhex(&l.duid).ok_or_else(|| bad("lease6", i, "duid", "not hex octets"))?,
                iaid: l.iaid,
                mac: l.mac,
                state: state("lease6", i, &l.state)?,
                starts: l.starts,
                preferred: l.preferred,
                expires: l.expires,
                hostname: name("lease6", i, &l.hostname)?,
                arch: l.arch,
            });
        }
        Ok(Snapshot {
            leases,
            leases6,
            reservations: self.reservations.clone(),
            host_policies: self
                .host_policies
                .iter()
                .map(|p| (p.mac, p.policy))
                .collect(),
            membership: self.membership.clone(),
            set_aside: Vec::new(),
            set_aside6: Vec::new(),
            server_duid: self
                .server_duid
                .as_deref()
                .map(|s| unhex(s).ok_or_else(|| bad("store", 0, "server_duid", "not hex octets")))
                .transpose()?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_record_round_trips_through_the_document() {
        let snap = Snapshot {
            leases: vec![Lease {
                ip: "192.0.2.10".parse().unwrap(),
                mac: "52:54:00:00:00:01".parse().unwrap(),
                state: LeaseState::Bound,
                starts: 5,
                expires: 3605,
                // A hostile name: control bytes, a backslash, non-ASCII.
                hostname: Some("n\u{1b}[2J\\ö\n".into()),
                client_id: Some(vec![1, 0x52, 0x54, 0, 0, 0, 1]),
                machine_id: Some(vec![0; 17]),
                arch: Some(7),
            }],
            leases6: vec![Lease6 {
                ip: "fd00::10".parse().unwrap(),
                duid: vec![0, 4, 0xaa, 0xbb],
                iaid: 7,
                mac: None,
                state: LeaseState::Declined,
                starts: 1,
                preferred: 2,
                expires: 3,
                hostname: None,
                arch: None,
            }],
            reservations: vec![Reservation {
                mac: "52:54:00:00:00:02".parse().unwrap(),
                ip: "192.0.2.20".parse().unwrap(),
                hostname: Some("r".into()),
            }],
            host_policies: vec![("52:54:00:00:00:03".parse().unwrap(), HostPolicy::Deny)],
            membership: None,
            set_aside: Vec::new(),
            set_aside6: Vec::new(),
            server_duid: Some(vec![0, 1, 2]),
        };
        let text = serde_json::to_string(&Dump::of(&snap, 9)).unwrap();
        assert!(text.is_ascii() && !text.contains('\u{1b}'), "{text}");
        let back = Dump::parse(&text).unwrap().to_snapshot().unwrap();
        assert_eq!(back, snap);
    }

    #[test]
    fn another_format_a_newer_version_and_bad_fields_are_refused() {
        let doc = |format: &str, version: u32, lease: &str| {
            format!(
                r#"{{"format":"{format}","version":{version},"exported_at":0,"leases":[{lease}]}}"#
            )
        };
        assert!(matches!(
            Dump::parse(&doc("other", 1, "")),
            Err(DumpError::Format(_))
        ));
        assert!(matches!(
            Dump::parse(&doc(FORMAT, 2, "")),
            Err(DumpError::Version(2))
        ));
        let lease = |field: &str| {
            format!(
                r#"{{"ip":"192.0.2.1","mac":"52:54:00:00:00:01","state":"bound","starts":0,"expires":1,"hostname":null,"client_id":null,"machine_id":null,"arch":null,{field}}}"#
            )
        };
        let e = Dump::parse(&doc(FORMAT, 1, &lease(r#""x":1"#)))
            .unwrap()
            .to_snapshot()
            .unwrap();
        assert_eq!(e.leases.len(), 1, "an unknown field is read past");
        let text = doc(FORMAT, 1, &lease(r#""x":1"#)).replace("\"bound\"", "\"offered\"");
        let e = Dump::parse(&text).unwrap().to_snapshot().unwrap_err();
        assert_eq!(
            e.to_string(),
            "lease 0: state: not bound, released or declined"
        );
    }
}
