//! Relay trust: giaddr is believed only from the relays `dhcp.relays` names. A relayed
//! DISCOVER from any other source on the segment is dropped and counted; the same
//! exchange from a trusted relay is served.

use crate::common;

use std::net::Ipv4Addr;
use std::time::Duration;

use common::relay_client::{mac, Answer, RelayClient};
use common::{config, Lab, Server};

#[test]
fn only_configured_relays_are_believed() {
    require_root!();
    let lab = Lab::new(&["198.18.0.1/16"], &["198.18.0.2/16"]);
    lab.client
        .ip(&["addr", "add", "198.18.0.3/16", "dev", &lab.client_if]);
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(
        &lab.server_if,
        "198.18.0.0/16",
        "198.18.1.0 - 198.18.1.250",
        "relays = [\"198.18.0.3\"]\n[http]\nlisten = \"198.18.0.1:8080\"\n",
    );
    let _server = Server::start(&lab.server, dir.path(), &cfg);
    let (stranger, trusted) = lab
        .client
        .run(|| {
            let server = Ipv4Addr::new(198, 18, 0, 1);
            let mut stranger = RelayClient::new(Ipv4Addr::new(198, 18, 0, 2), server);
            let mut relay = RelayClient::new(Ipv4Addr::new(198, 18, 0, 3), server);
            let macs: Vec<[u8; 6]> = (0..10).map(mac).collect();
            (
                stranger.obtain(&macs, Duration::from_millis(500)),
                relay.obtain(&macs, Duration::from_millis(500)),
            )
        })
        .join()
        .unwrap();
    assert!(
        stranger.iter().all(|a| *a == Answer::Silence),
        "{stranger:?}"
    );
    assert!(
        trusted.iter().all(|a| matches!(a, Answer::Ack(_))),
        "{trusted:?}"
    );
    let (_, metrics) = common::api_lab::curl(
        &lab.server,
        "GET",
        "http://198.18.0.1:8080/metrics",
        None,
        None,
    );
    assert!(
        metrics.contains("shardboot_dhcp_untrusted_relay_total 10\n"),
        "{metrics}"
    );

    // RFC 3046 §2.2: option 82 comes back byte for byte (sub-options 9 then 1, an order
    // a map would change).
    let sent: Vec<u8> = vec![9, 4, 0, 0, 0x0d, 0xe9, 1, 3, b'p', b'1', b'/'];
    let echoed = lab
        .client
        .run(move || {
            let mut relay =
                RelayClient::new(Ipv4Addr::new(198, 18, 0, 3), Ipv4Addr::new(198, 18, 0, 1));
            let mut opt = vec![82, sent.len() as u8];
            opt.extend_from_slice(&sent);
            let d = relay.discover_raw(&mac(100), &opt);
            relay.send_raw(&d);
            let offer = relay
                .recv_raw(Duration::from_millis(800))
                .expect("an OFFER");
            (shardboot::dhcp::wire::raw_option(&offer, 82), sent)
        })
        .join()
        .unwrap();
    assert_eq!(echoed.0.as_deref(), Some(&echoed.1[..]));
}
