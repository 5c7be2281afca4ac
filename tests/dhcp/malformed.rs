//! Malformed input: truncated packets, bad option lengths, wrong op/htype, bad magic,
//! oversized datagrams and random junk are dropped and counted by reason, and the server
//! keeps serving. The server runs in-process (inside its namespace) so the test can read
//! its metrics directly.

use crate::common;

use std::net::Ipv4Addr;
use std::time::Duration;

use common::relay_client::{mac, Answer, RelayClient};
use common::Lab;
use dhcproto::v4::{DhcpOption, Message, MessageType};
use dhcproto::Encodable;
use shardboot::app;
use shardboot::config::Config;
use shardboot::dhcp::wire::DropReason;
use shardboot::handles::Handles;
use tokio_util::sync::CancellationToken;

fn discover_bytes(n: u32) -> Vec<u8> {
    let z = Ipv4Addr::UNSPECIFIED;
    let mut m = Message::new_with_id(n, z, z, z, Ipv4Addr::new(198, 18, 0, 2), &mac(n));
    m.opts_mut()
        .insert(DhcpOption::MessageType(MessageType::Discover));
    m.opts_mut()
        .insert(DhcpOption::Hostname("junk-test".into()));
    m.to_vec().unwrap()
}

#[test]
fn malformed_datagrams_are_counted_and_dropped_and_service_continues() {
    require_root!();
    let lab = Lab::new(&["198.18.0.1/16"], &["198.18.0.2/16"]);
    let dir = tempfile::tempdir().unwrap();
    let text = common::config(
        &lab.server_if,
        "198.18.0.0/16",
        "198.18.1.0 - 198.18.1.250",
        common::RELAYS,
    );
    let state = dir.path().join("state").display().to_string();
    let config =
        Config::from_toml_with_overrides(&text, &[("state_dir".into(), format!("{state:?}"))])
            .unwrap();

    let handles = Handles::default();
    let shutdown = CancellationToken::new();
    let (h, stop) = (handles.clone(), shutdown.clone());
    let server = lab.server.run(move || {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(app::run(config, None, h, stop))
    });
    // Wait for the socket: the first valid exchange succeeds once it is bound.
    let metrics = handles.dhcp.clone();
    let client = lab.client.run(move || {
        let mut c = RelayClient::new(Ipv4Addr::new(198, 18, 0, 2), Ipv4Addr::new(198, 18, 0, 1));
        let mut first = Answer::Silence;
        for _ in 0..50 {
            first = c.obtain(&[mac(1)], Duration::from_millis(100))[0];
            if first != Answer::Silence {
                break;
            }
        }
        assert!(
            matches!(first, Answer::Ack(_)),
            "server not answering: {first:?}"
        );

        let good = discover_bytes(7);
        let mut cases: Vec<(Vec<u8>, DropReason)> = Vec::new();
        for cut in [0usize, 1, 100, 235, 239] {
            cases.push((good[..cut].to_vec(), DropReason::Truncated));
        }
        cases.push((vec![1u8; 1473], DropReason::Oversized));
        cases.push((vec![0u8; 9000], DropReason::Oversized));
        let mut reply = good.clone();
        reply[0] = 2;
        cases.push((reply, DropReason::NotRequest));
        let mut op = good.clone();
        op[0] = 77;
        cases.push((op, DropReason::NotRequest));
        let mut htype = good.clone();
        htype[1] = 6;
        cases.push((htype, DropReason::UnsupportedHardware));
        let mut hlen = good.clone();
        hlen[2] = 16;
        cases.push((hlen, DropReason::UnsupportedHardware));
        let mut magic = good.clone();
        magic[236] = 0x63 ^ 0xff;
        cases.push((magic, DropReason::BadMagic));
        let mut long_opt = good[..240].to_vec();
        long_opt.extend_from_slice(&[53, 1, 1, 12, 250, b'a', b'b']);
        cases.push((long_opt, DropReason::BadOptionLength));
        let mut type_len = good[..240].to_vec();
        type_len.extend_from_slice(&[53, 2, 1, 1, 255]);
        cases.push((type_len, DropReason::BadOptionLength));
        let mut no_type = good[..240].to_vec();
        no_type.extend_from_slice(&[12, 3, b'a', b'b', b'c', 255]);
        cases.push((no_type, DropReason::BadMessageType));
        let mut bad_type = good[..240].to_vec();
        bad_type.extend_from_slice(&[53, 1, 200, 255]);
        cases.push((bad_type, DropReason::BadMessageType));

        for (bytes, _) in &cases {
            c.send_raw(bytes);
        }
        // Deterministic pseudo-random junk on top (xorshift), bounded in count.
        let mut x: u64 = 0x9e3779b97f4a7c15;
        for i in 0..2000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let len = (x % 1400) as usize;
            let mut junk: Vec<u8> = (0..len)
                .map(|k| (x.rotate_left(k as u32 % 64) & 0xff) as u8)
                .collect();
            if i % 2 == 0 && len > 240 {
                // Half of them look like DHCP up to the options, to reach the option walk.
                junk[..240].copy_from_slice(&good[..240]);
            }
            c.send_raw(&junk);
            // Paced so the server's receive buffer never overflows, whatever the host's
            // net.core.rmem_max: every datagram reaches the decoder and is counted.
            if i % 50 == 49 {
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        // Still serving after all that (retransmitting, as a real client does).
        let mut after = Vec::new();
        for _ in 0..5 {
            after = c.obtain(&[mac(2), mac(3)], Duration::from_secs(1));
            if after.iter().all(|a| matches!(a, Answer::Ack(_))) {
                break;
            }
        }
        (cases, after)
    });
    let (cases, after) = client.join().unwrap();
    assert!(
        after.iter().all(|a| matches!(a, Answer::Ack(_))),
        "not serving after junk: {after:?}"
    );
    shutdown.cancel();
    server.join().unwrap().unwrap();

    for reason in DropReason::ALL {
        let sent = cases.iter().filter(|(_, r)| *r == reason).count() as u64;
        let counted = metrics.dropped(reason);
        if reason != DropReason::Undecodable {
            assert!(counted >= sent, "{reason}: sent {sent}, counted {counted}");
        }
    }
    let total_dropped: u64 = DropReason::ALL.iter().map(|r| metrics.dropped(*r)).sum();
    assert!(
        total_dropped >= cases.len() as u64 + 1500,
        "dropped {total_dropped}"
    );
    let mut text = String::new();
    metrics.render_prometheus(&mut text);
    assert!(
        text.contains("shardboot_dhcp_dropped_total{reason=\"bad_magic\"}"),
        "{text}"
    );
    assert!(metrics.outcome_count("ack") >= 3);
}
