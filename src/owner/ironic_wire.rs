//! Ironic's REST API as the owner resolver reads it: the JSON of `/v1/ports/detail`,
//! `/v1/nodes/detail` and `/v1/nodes/{uuid}`, and its pagination. Pure: bytes in,
//! values out; the HTTP client lives in `ironic.rs`.
//!
//! Fields shardboot does not need are ignored, so newer Ironic releases that add fields
//! keep working. `node.conductor` exists from API microversion 1.49 on.

use std::collections::HashMap;

use serde::Deserialize;

use crate::mac::MacAddr;

/// One port of `/v1/ports/detail`.
#[derive(Debug, Clone, Deserialize)]
pub struct Port {
    /// The NIC's MAC, as Ironic stores it (lower-case, colon-separated).
    pub address: String,
    /// The node the port belongs to.
    pub node_uuid: Option<String>,
    /// Whether the node boots from this NIC (API 1.19 on; absent before, meaning yes).
    /// Like Ironic's own boot script, only such ports count: another NIC of the node is
    /// a miss, so a machine is never sent down a NIC Ironic will not boot it from.
    #[serde(default = "yes")]
    pub pxe_enabled: bool,
}

fn yes() -> bool {
    true
}

/// A page of ports.
#[derive(Debug, Deserialize)]
pub struct PortPage {
    /// The ports on this page.
    pub ports: Vec<Port>,
    /// The URL of the next page, absent on the last.
    #[serde(default)]
    pub next: Option<String>,
}

/// One node, reduced to what routing needs.
#[derive(Debug, Clone, Deserialize)]
pub struct Node {
    /// Node UUID.
    pub uuid: String,
    /// The conductor Ironic's hash ring gives the node (`null` when no conductor is
    /// alive for its hardware type).
    #[serde(default)]
    pub conductor: Option<String>,
}

/// A page of nodes.
#[derive(Debug, Deserialize)]
pub struct NodePage {
    /// The nodes on this page.
    pub nodes: Vec<Node>,
    /// The URL of the next page, absent on the last.
    #[serde(default)]
    pub next: Option<String>,
}

/// One conductor of `/v1/conductors` (API 1.49 on).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Conductor {
    /// Its name as nodes' `conductor` field gives it: `[DEFAULT] host`, with
    /// `:<port>` when its JSON-RPC port is not the default.
    pub hostname: String,
    /// Whether it has heartbeated within Ironic's `heartbeat_timeout`.
    #[serde(default)]
    pub alive: bool,
    /// Its conductor group ("" when none).
    #[serde(default)]
    pub conductor_group: String,
}

/// A page of conductors.
#[derive(Debug, Deserialize)]
pub struct ConductorPage {
    /// The conductors on this page.
    pub conductors: Vec<Conductor>,
    /// The URL of the next page, absent on the last.
    #[serde(default)]
    pub next: Option<String>,
}

/// Parses a page of `/v1/conductors`.
pub fn parse_conductors(body: &[u8]) -> Result<ConductorPage, WireError> {
    serde_json::from_slice(body).map_err(|e| WireError(e.to_string()))
}

/// Ironic's answer could not be understood.
#[derive(Debug, thiserror::Error)]
#[error("unexpected Ironic response: {0}")]
pub struct WireError(String);

/// Parses a page of `/v1/ports/detail`.
pub fn parse_ports(body: &[u8]) -> Result<PortPage, WireError> {
    serde_json::from_slice(body).map_err(|e| WireError(e.to_string()))
}

/// Parses a page of `/v1/nodes/detail`.
pub fn parse_nodes(body: &[u8]) -> Result<NodePage, WireError> {
    serde_json::from_slice(body).map_err(|e| WireError(e.to_string()))
}

/// Parses `/v1/nodes/{uuid}`.
pub fn parse_node(body: &[u8]) -> Result<Node, WireError> {
    serde_json::from_slice(body).map_err(|e| WireError(e.to_string()))
}

/// The query of a `next` link (`limit=…&marker=…`). Ironic builds `next` from its own
/// idea of its public URL, which behind a proxy or a Kubernetes service may not be the
/// address shardboot reaches it at; only the query is reused, on shardboot's base URL.
pub fn next_query(next: &str) -> Option<&str> {
    let (_, query) = next.split_once('?')?;
    let query = query.split('#').next().unwrap_or(query);
    // A marker is a UUID; anything outside the URL-safe set is refused rather than
    // forwarded.
    let safe = query
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b"-._~=&%,".contains(&b));
    (safe && !query.is_empty()).then_some(query)
}

/// Joins ports and nodes into MAC → conductor (`None`: the node has no conductor).
/// Ports whose address is not a MAC (InfiniBand GUIDs are longer), whose node is not
/// listed, or that are not `pxe_enabled` are left out.
pub fn owners(ports: &[Port], nodes: &[Node]) -> HashMap<MacAddr, Option<String>> {
    let by_uuid: HashMap<&str, Option<&String>> = nodes
        .iter()
        .map(|n| (n.uuid.as_str(), n.conductor.as_ref()))
        .collect();
    ports
        .iter()
        .filter(|p| p.pxe_enabled)
        .filter_map(|p| {
            let mac = p.address.parse::<MacAddr>().ok()?;
            let conductor = by_uuid.get(p.node_uuid.as_deref()?)?;
            Some((mac, conductor.cloned()))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const PORTS: &str = include_str!("../../fixtures/ironic/ports-detail.json");
    const NODES: &str = include_str!("../../fixtures/ironic/nodes-detail.json");
    const NODE: &str = include_str!("../../fixtures/ironic/node.json");
    const BY_ADDRESS: &str = include_str!("../../fixtures/ironic/ports-by-address.json");

    #[test]
    fn a_captured_conductor_list_parses() {
        let page =
            parse_conductors(include_bytes!("../../fixtures/ironic/conductors.json")).unwrap();
        let names: Vec<&str> = page
            .conductors
            .iter()
            .map(|c| c.hostname.as_str())
            .collect();
        assert_eq!(names, ["127.0.0.2:8090", "127.0.0.1"]);
        assert!(page
            .conductors
            .iter()
            .all(|c| c.alive && c.conductor_group.is_empty()));
        assert!(page.next.is_none());
        assert!(parse_conductors(b"{\"conductors\": [{\"alive\": true}]}").is_err());
    }

    #[test]
    fn captured_ironic_pages_parse() {
        let ports = parse_ports(PORTS.as_bytes()).unwrap();
        let nodes = parse_nodes(NODES.as_bytes()).unwrap();
        assert_eq!(ports.ports.len(), 3);
        // A full page links to the next one; only its query is reused.
        let next = ports.next.as_deref().and_then(next_query).unwrap();
        assert!(next.contains("marker="), "{next}");
        assert!(nodes.nodes.iter().all(|n| n.conductor.is_some()));
        let map = owners(&ports.ports, &nodes.nodes);
        assert_eq!(map.len(), ports.ports.len());
        let node = parse_node(NODE.as_bytes()).unwrap();
        assert!(node.conductor.is_some());
        let one = parse_ports(BY_ADDRESS.as_bytes()).unwrap();
        assert_eq!(one.ports.len(), 1);
        assert!(one.next.is_none());
        assert_eq!(one.ports[0].address, "52:54:00:5b:00:04");
        assert!(one.ports[0].node_uuid.is_some());
    }

    #[test]
    fn next_link_keeps_only_a_safe_query() {
        assert_eq!(
            next_query("http://10.0.0.1:6385/v1/ports/detail?limit=2&marker=1be26c0b-03f2-4d2e-ae87-c02d7f33c123"),
            Some("limit=2&marker=1be26c0b-03f2-4d2e-ae87-c02d7f33c123")
        );
        assert_eq!(next_query("http://x/v1/ports/detail"), None);
        assert_eq!(next_query("http://x/v1/ports/detail?marker=a b"), None);
        assert_eq!(
            next_query("http://x/v1/ports/detail?marker=a\r\nX: y"),
            None
        );
    }

    #[test]
    fn ports_without_a_listed_node_a_mac_or_pxe_are_left_out() {
        let port = |address: &str, node: &str, pxe_enabled| Port {
            address: address.into(),
            node_uuid: Some(node.into()),
            pxe_enabled,
        };
        let ports = vec![
            port("52:54:00:00:00:01", "n1", true),
            port("52:54:00:00:00:02", "gone", true),
            port(
                "80:00:02:08:fe:80:00:00:00:00:00:00:00:02:c9:03:00:02:4a:f1",
                "n1",
                true,
            ),
            port("52:54:00:00:00:03", "n2", true),
            // A NIC of n1 that Ironic does not boot from.
            port("52:54:00:00:00:04", "n1", false),
        ];
        let nodes = vec![
            Node {
                uuid: "n1".into(),
                conductor: Some("c1".into()),
            },
            Node {
                uuid: "n2".into(),
                conductor: None,
            },
        ];
        let map = owners(&ports, &nodes);
        assert_eq!(map.len(), 2);
        let m1: MacAddr = "52:54:00:00:00:01".parse().unwrap();
        let m3: MacAddr = "52:54:00:00:00:03".parse().unwrap();
        assert_eq!(map[&m1].as_deref(), Some("c1"));
        assert_eq!(map[&m3], None);
        // Absent before API 1.19: every port boots.
        let old =
            parse_ports(br#"{"ports": [{"address": "52:54:00:00:00:05", "node_uuid": "n1"}]}"#)
                .unwrap();
        assert!(old.ports[0].pxe_enabled);
        let off = parse_ports(
            br#"{"ports": [{"address": "52:54:00:00:00:05", "node_uuid": "n1", "pxe_enabled": false}]}"#,
        )
        .unwrap();
        assert!(!off.ports[0].pxe_enabled);
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        assert!(parse_ports(b"<html>").is_err());
        assert!(parse_nodes(b"{\"nodes\": 3}").is_err());
        assert!(parse_node(b"").is_err());
    }
}
