//! Which member is responsible for a machine. Today: the RFC 3074 hash bucket over the
//! live members; the Ironic and inventory resolvers (HTTP boot routing issue) come next.

pub mod hash;

pub use hash::{responsible_member, rfc3074_hash};
