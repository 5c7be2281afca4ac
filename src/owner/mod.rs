//! Which member is responsible for a machine: resolvers tried in the configured order
//! (inventory file, RFC 3074 hash bucket over the members; the Ironic API resolver comes
//! next), each answer naming a member.

pub mod hash;
pub mod inventory;

use tracing::{debug, warn};

pub use hash::{responsible_member, rfc3074_hash};
pub use inventory::Inventory;

use crate::config::{Config, Member, OwnerSettings, ResolverKind};
use crate::mac::MacAddr;

/// The answer for one MAC.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolution {
    /// The responsible member's name, if any resolver knew.
    pub member: Option<String>,
    /// Which resolver answered (`inventory`, `hash`) or `none`.
    pub source: &'static str,
}

/// Owner lookups for this member.
pub struct Resolver {
    settings: OwnerSettings,
    members: Vec<Member>,
    inventory: Option<Inventory>,
}

impl Resolver {
    /// Builds the resolver from the validated configuration.
    pub fn new(config: &Config) -> Self {
        Self {
            settings: config.owner.clone(),
            members: config.members.clone(),
            inventory: config.owner.inventory.as_deref().map(Inventory::new),
        }
    }

    /// This member's name.
    pub fn self_name(&self) -> Option<&str> {
        self.settings.self_name.as_deref()
    }

    /// Owner settings.
    pub fn settings(&self) -> &OwnerSettings {
        &self.settings
    }

    /// The member called `name`.
    pub fn member(&self, name: &str) -> Option<&Member> {
        self.members.iter().find(|m| m.name == name)
    }

    /// Maps an inventory value (member name or conductor host name) to a member.
    fn member_for(&self, owner: &str) -> Option<&Member> {
        self.member(owner).or_else(|| {
            self.members
                .iter()
                .find(|m| m.conductor.as_deref() == Some(owner))
        })
    }

    /// Tries each resolver in order; the first that names a member wins.
    pub fn resolve(&self, mac: &MacAddr) -> Resolution {
        for kind in &self.settings.resolvers {
            match kind {
                ResolverKind::Inventory => {
                    let Some(inv) = &self.inventory else { continue };
                    let (owner, err) = inv.lookup(mac);
                    if let Some(e) = err {
                        warn!(error = %e, "inventory not reloaded; using the last good contents");
                    }
                    if let Some(owner) = owner {
                        match self.member_for(&owner) {
                            Some(m) => {
                                return Resolution {
                                    member: Some(m.name.clone()),
                                    source: "inventory",
                                }
                            }
                            None => debug!(%mac, "inventory owner is not a member"),
                        }
                    }
                }
                ResolverKind::Hash => {
                    let names: Vec<&str> = self.members.iter().map(|m| m.name.as_str()).collect();
                    if let Some(name) = responsible_member(mac, &names) {
                        return Resolution {
                            member: Some(name.to_string()),
                            source: "hash",
                        };
                    }
                }
            }
        }
        Resolution {
            member: None,
            source: "none",
        }
    }
}
