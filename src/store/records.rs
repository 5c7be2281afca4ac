//! The store's other records, beside the leases: run-time reservations, the operator's
//! host policies and the member list this instance served.

use std::net::Ipv4Addr;

use serde::{Deserialize, Serialize};

use crate::mac::MacAddr;

/// One reservation made at run time (operator API): a fixed address, and optionally a
/// host name, for a MAC.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reservation {
    /// The client.
    pub mac: MacAddr,
    /// Its address.
    pub ip: Ipv4Addr,
    /// Option 12, if set.
    pub hostname: Option<String>,
}

/// What the operator said about a MAC.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum HostPolicy {
    /// Answer it, even with `known_only` set (and over a `[[host]]` deny).
    Allow,
    /// Never answer it.
    Deny,
}

impl HostPolicy {
    /// Its name on disk and in the API.
    pub fn as_str(self) -> &'static str {
        match self {
            HostPolicy::Allow => "allow",
            HostPolicy::Deny => "deny",
        }
    }

    /// The policy named `text` (`allow` or `deny`).
    pub fn parse(text: &[u8]) -> Option<Self> {
        match text {
            b"allow" => Some(HostPolicy::Allow),
            b"deny" => Some(HostPolicy::Deny),
            _ => None,
        }
    }
}

/// The member list this store's instance last served with, since when, and the list
/// before it (for the transition after a membership change).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Membership {
    /// Sorted member names (empty for a single instance).
    pub names: Vec<String>,
    /// Unix seconds when this list was first served.
    pub since: u64,
    /// The list served before, if it differed.
    pub previous: Option<Vec<String>>,
    /// How ranges were shared among the names (`owner::shares::Split`, by name);
    /// absent in records written before it was recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub split: Option<String>,
    /// The split of `previous`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub previous_split: Option<String>,
    /// Lists served before `previous` whose transitions had not ended when this list
    /// came in force: they narrow fresh addresses too until then.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub earlier: Vec<PastMembership>,
    /// With members from Ironic: the conductor names behind `names`, so a restart while
    /// Ironic is unreachable serves with the last list it gave.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conductors: Vec<String>,
}

/// A member list served before, kept until its transition ends.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PastMembership {
    /// Its sorted member names.
    pub names: Vec<String>,
    /// How ranges were shared among them (`owner::shares::Split`, by name).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub split: Option<String>,
    /// Unix seconds when its transition ends.
    pub until: u64,
}
