//! The dual-stack lab of the DHCPv6 client tests: shardboot serving 192.0.2.0/24 and
//! fd00:1::/64 (and fd00:2::/64, a link behind a relay) across a veth pair, the
//! operator API on port 8080 behind a token, and ways to read its v6 leases. The
//! test's relay sends from [`RELAY6`], which `dhcp.relays` trusts.
#![allow(dead_code)]

use std::net::{Ipv6Addr, SocketAddrV6};
use std::path::Path;
use std::time::{Duration, Instant};

use dhcproto::v6::{DhcpOption, Message, MessageType, OptionCode, IANA};
use dhcproto::{Encodable, Encoder};

use super::relay6::{relay_forward, relay_reply};
use super::{config, Lab, Netns, Server};

/// shardboot's address on the client's link.
pub(crate) const SERVER6: &str = "fd00:1::1";

/// The address the test's relay sends from, the one relay `dhcp.relays` names.
pub(crate) const RELAY6: &str = "fd00:1::2";

/// The operator API's token.
pub(crate) const TOKEN: &str = "operator-token-0123456789abcdef";

/// Waits until no address of `iface` in `ns` is still doing duplicate address
/// detection: a tentative link-local address cannot send.
pub(crate) fn wait_addresses_usable(ns: &Netns, iface: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let out = ns
            .command("ip")
            .args(["-6", "addr", "show", "dev", iface, "tentative"])
            .output()
            .unwrap();
        let link_local = ns
            .command("ip")
            .args(["-6", "addr", "show", "dev", iface, "scope", "link"])
            .output()
            .unwrap();
        if out.stdout.is_empty() && !link_local.stdout.is_empty() {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "addresses of {iface} stay tentative"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The veth pair, the server side addressed, the client side with `client_addrs`
/// (none for a client that configures itself), past duplicate address detection.
pub(crate) fn lab(client_addrs: &[&str]) -> Lab {
    let lab = Lab::new(&["192.0.2.1/24", "fd00:1::1/64"], client_addrs);
    wait_addresses_usable(&lab.server, &lab.server_if);
    wait_addresses_usable(&lab.client, &lab.client_if);
    lab
}

/// Starts shardboot in `lab`: `subnet6_keys` go into the first `[[subnet6]]`,
/// `tables` (`[[host]]` entries) after everything else.
pub(crate) fn serve(lab: &Lab, subnet6_keys: &str, tables: &str) -> (tempfile::TempDir, Server) {
    serve_storing_in(lab, subnet6_keys, tables, None)
}

/// [`serve`] with the store in `state_dir` (another file system), when given.
pub(crate) fn serve_storing_in(
    lab: &Lab,
    subnet6_keys: &str,
    tables: &str,
    state_dir: Option<&Path>,
) -> (tempfile::TempDir, Server) {
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("tokens");
    std::fs::write(&tokens, format!("{TOKEN}\n")).unwrap();
    let cfg = config(
        &lab.server_if,
        "192.0.2.0/24",
        "192.0.2.100 - 192.0.2.199",
        &format!("relays = [\"{RELAY6}\"]"),
    ) + &format!(
        r#"
[[subnet6]]
network = "fd00:1::/64"
ranges = ["fd00:1::100 - fd00:1::1ff"]
dns = ["{SERVER6}"]
{subnet6_keys}

[[subnet6]]
network = "fd00:2::/64"
ranges = ["fd00:2::100 - fd00:2::1ff"]

[http]
listen = "[::]:8080"
insecure_operator_api = true
token_file = "{}"

{tables}
"#,
        tokens.display()
    );
    let state = state_dir.map_or_else(|| dir.path().join("state"), Path::to_path_buf);
    let server = Server::start_with_state(&lab.server, dir.path(), &cfg, &state);
    wait_log(&server, "DHCPv6 listening");
    (dir, server)
}

/// [`lab`] with an addressed client side, and [`serve`] without tables.
pub(crate) fn start(subnet6_keys: &str) -> (Lab, tempfile::TempDir, Server) {
    let lab = lab(&["fd00:1::2/64"]);
    let (dir, server) = serve(&lab, subnet6_keys, "");
    (lab, dir, server)
}

/// Waits until the server's log holds `line`.
pub(crate) fn wait_log(server: &Server, line: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !server.log_text().contains(line) {
        assert!(
            Instant::now() < deadline,
            "no {line:?} in\n{}",
            server.log_text()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The v6 lease on `ip` as `shardboot leases --v6` shows it.
pub(crate) fn lease6(server: &Server, ip: &str) -> serde_json::Value {
    let leases = server.leases_json_with(&["--v6"]);
    leases
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["ip"] == ip)
        .cloned()
        .unwrap_or_else(|| panic!("no v6 lease for {ip} in {leases}"))
}

/// The v6 lease on `ip` as the operator API shows it (`GET /v1/leases6/<ip>`), if any.
pub(crate) fn api_lease6(lab: &Lab, ip: &str) -> Option<serde_json::Value> {
    let (code, body) = super::api_lab::curl(
        &lab.server,
        "GET",
        &format!("http://192.0.2.1:8080/v1/leases6/{ip}"),
        Some(TOKEN),
        None,
    );
    match code {
        200 => Some(serde_json::from_str(&body).unwrap()),
        404 => None,
        _ => panic!("GET /v1/leases6/{ip}: {code} {body}"),
    }
}

/// Whether `ip` lies in fd00:1::/64's range.
pub(crate) fn in_range(ip: &str) -> bool {
    let ip: Ipv6Addr = ip.parse().unwrap();
    ("fd00:1::100".parse::<Ipv6Addr>().unwrap()..="fd00:1::1ff".parse().unwrap()).contains(&ip)
}

/// Sends `forward` from the relay's address ([`RELAY6`], port 547) to `server` until
/// a Relay-reply comes back.
pub(crate) fn relay_exchange(lab: &Lab, server: Ipv6Addr, forward: Vec<u8>) -> Option<Vec<u8>> {
    relay_exchange_from(lab, RELAY6, server, forward)
}

/// [`relay_exchange`] from `source` (an address of the client side), five tries.
pub(crate) fn relay_exchange_from(
    lab: &Lab,
    source: &str,
    server: Ipv6Addr,
    forward: Vec<u8>,
) -> Option<Vec<u8>> {
    let source = SocketAddrV6::new(source.parse().unwrap(), 547, 0, 0);
    lab.client
        .run(move || {
            let s = super::bind_fixed_port(source);
            s.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
            let mut buf = [0u8; 4096];
            for _ in 0..5 {
                s.send_to(&forward, SocketAddrV6::new(server, 547, 0, 0))
                    .unwrap();
                if let Ok((n, _)) = s.recv_from(&mut buf) {
                    return Some(buf[..n].to_vec());
                }
            }
            None
        })
        .join()
        .unwrap()
}

/// Sends `inner` from the client side through the test's relay (link fd00:2::1) and
/// returns the server's answer, unwrapped.
pub(crate) fn relayed(lab: &Lab, inner: &Message) -> Message {
    let got =
        relay_exchange(lab, SERVER6.parse().unwrap(), forward_of(inner)).expect("a Relay-reply");
    relay_reply(&got).message
}

/// `inner` in the Relay-forward of the test's relay (link fd00:2::1).
pub(crate) fn forward_of(inner: &Message) -> Vec<u8> {
    let mut bytes = Vec::new();
    inner.encode(&mut Encoder::new(&mut bytes)).unwrap();
    relay_forward(
        "fd00:2::1".parse().unwrap(),
        "fe80::5054:ff:fe00:d1".parse().unwrap(),
        b"rack1",
        None,
        &bytes,
    )
}

/// The address a reply's IA_NA gives (not one it withdraws with lifetime 0).
pub(crate) fn ia_address(m: &Message) -> Option<Ipv6Addr> {
    let Some(DhcpOption::IANA(ia)) = m.opts().get(OptionCode::IANA) else {
        return None;
    };
    ia.opts.iter().find_map(|o| match o {
        DhcpOption::IAAddr(a) if a.valid_life > 0 => Some(a.addr),
        _ => None,
    })
}

/// A client message with IA_NA 1 holding `addr`, naming `server` if given.
pub(crate) fn client_message(
    kind: MessageType,
    duid: &[u8],
    server: Option<&[u8]>,
    addr: Option<Ipv6Addr>,
) -> Message {
    let mut m = Message::new_with_id(kind, [9, 9, 9]);
    m.opts_mut().insert(DhcpOption::ClientId(duid.to_vec()));
    if let Some(s) = server {
        m.opts_mut().insert(DhcpOption::ServerId(s.to_vec()));
    }
    let mut opts = dhcproto::v6::DhcpOptions::new();
    if let Some(addr) = addr {
        opts.insert(DhcpOption::IAAddr(dhcproto::v6::IAAddr {
            addr,
            preferred_life: 0,
            valid_life: 0,
            opts: Default::default(),
        }));
    }
    m.opts_mut().insert(DhcpOption::IANA(IANA {
        id: 1,
        t1: 0,
        t2: 0,
        opts,
    }));
    m
}
