//! A lease as the operator API and `shardboot leases --json` show it.

use serde::Serialize;

use super::Lease;

/// One lease in JSON.
#[derive(Debug, Serialize)]
pub struct LeaseView<'a> {
    /// The address.
    pub ip: String,
    /// The client's MAC.
    pub mac: String,
    /// `offered`, `bound`, `released` or `declined`.
    pub state: &'a str,
    /// Unix seconds.
    pub starts: u64,
    /// Unix seconds.
    pub expires: u64,
    /// Option 12, if the client sent one.
    pub hostname: Option<&'a str>,
    /// Option 93, if the client sent one.
    pub arch: Option<u16>,
}

impl<'a> From<&'a Lease> for LeaseView<'a> {
    fn from(l: &'a Lease) -> Self {
        Self {
            ip: l.ip.to_string(),
            mac: l.mac.to_string(),
            state: l.state.as_str(),
            starts: l.starts,
            expires: l.expires,
            hostname: l.hostname.as_deref(),
            arch: l.arch,
        }
    }
}
