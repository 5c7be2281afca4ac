//! Members watch each other: with the RFC 3074 hash resolver, a machine whose bucket
//! belongs to a dead member moves to the survivors, and moves back when the member
//! returns. Two `shardboot serve` processes on loopback.

use crate::common;

use std::time::Duration;

use common::members::*;
use shardboot::mac::MacAddr;
use shardboot::owner::responsible_member;

#[test]
fn a_dead_member_leaves_the_hash_ring_and_returns() {
    let ports = (free_port(), free_port());
    let hash = "resolvers = [\"hash\"]";
    let a = Member::start("a", ports, hash);
    let b = Member::start("b", ports, hash);
    // A MAC whose bucket over {a, b} is b's.
    let mac = (1..=255u8)
        .map(|n| MacAddr([0x52, 0x54, 0x00, 0x77, 0x00, n]))
        .find(|m| responsible_member(m, &["a", "b"]) == Some("b"))
        .unwrap();
    let path = format!("/v1/boot/{mac}/boot.ipxe");
    let via_b = format!(
        "http://127.0.0.1:{}/v1/boot/{}/boot.ipxe?hop=1",
        ports.1,
        mac.hyphenated()
    );
    let local = format!(
        "{}/pxelinux.cfg/{}",
        conductor_url(CONDUCTOR_1),
        mac.hyphenated()
    );
    let (code, body) = a.get(&path);
    assert_eq!(
        (code, chained_url(&body)),
        (200, Some(via_b.as_str())),
        "{body}"
    );

    drop(b);
    wait_until("a sees b dead", Duration::from_secs(10), || {
        a.metric("shardboot_member_up{member=\"b\"} ") == Some(0)
    });
    let (_, body) = a.get(&path);
    assert_eq!(
        chained_url(&body),
        Some(local.as_str()),
        "{body}\n{}",
        a.log()
    );

    let _b = Member::start("b", ports, hash);
    wait_until("a sees b again", Duration::from_secs(10), || {
        a.metric("shardboot_member_up{member=\"b\"} ") == Some(1)
    });
    let (_, body) = a.get(&path);
    assert_eq!(chained_url(&body), Some(via_b.as_str()), "{body}");
}
