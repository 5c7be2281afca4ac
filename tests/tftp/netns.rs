//! Downloads from inside a network namespace over a veth pair (198.18.x.0/24), with
//! and without netem packet loss. Needs root; CI runs as root.

use crate::common::tftp_lab;

use std::net::SocketAddr;

use tftp_lab::*;

fn skip() -> bool {
    if !is_root() {
        skip_or_fail("root", "network namespaces need root");
        return true;
    }
    false
}

/// How packets get lost in a namespace test.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Loss {
    None,
    /// netem on both veth ends; false if the kernel lacks netem.
    Netem(u32),
    /// A user-space relay on the host side drops this percentage each way.
    Relay(u64),
}

fn download_all_from_namespace(loss: Loss, tools: &[Tool], names: &[&str]) {
    let ns = Netns::new();
    if let Loss::Netem(p) = loss {
        if !ns.netem_loss(p) {
            skip_or_fail(
                "netem",
                "this kernel has no netem qdisc (the relay variant covers loss)",
            );
            return;
        }
    }
    let root = Root::new();
    let out = tempfile::tempdir().unwrap();
    // Lockstep transfers pay one server timeout per lost packet: keep it short.
    let s = shardboot::config::TftpSettings {
        timeout: std::time::Duration::from_millis(if loss == Loss::None { 200 } else { 50 }),
        ..settings(root.path())
    };
    let server = TestServer::start(s, SocketAddr::new(ns.host_ip.into(), 0));
    let relay = match loss {
        Loss::Relay(p) => Some(LossyRelay::start(
            SocketAddr::new(ns.host_ip.into(), 0),
            server.addr,
            p,
        )),
        _ => None,
    };
    let target = relay.as_ref().map_or(server.addr, |r| r.addr);
    let mut failures = Vec::new();
    for &tool in tools {
        for (name, data) in root
            .files
            .iter()
            .filter(|(n, _)| names.contains(&n.as_str()))
        {
            let dest = scratch(out.path(), &format!("{tool:?}-{name}"));
            let t0 = std::time::Instant::now();
            let (mut ok, mut log) = download(tool, Some(&ns.name), target, name, &dest);
            if !ok && loss != Loss::None && log.contains("unexpected OACK") {
                // atftp 0.8 aborts when its ACK 0 was lost and the server (any server)
                // retransmits the OACK. A client limitation: retry once, and say so.
                eprintln!("{tool:?} {name}: atftp aborted on a retransmitted OACK, retrying");
                (ok, log) = download(tool, Some(&ns.name), target, name, &dest);
            }
            eprintln!("{tool:?} {name}: ok={ok} in {:?}", t0.elapsed());
            let got = std::fs::read(&dest).unwrap_or_default();
            if !ok || got != *data {
                failures.push(format!(
                    "{tool:?} {name}: ok={ok} {} octets: {log}",
                    got.len()
                ));
            }
        }
    }
    let mut metrics = String::new();
    server.metrics.render_prometheus(&mut metrics);
    assert!(failures.is_empty(), "{}\n{metrics}", failures.join("\n"));
    if let Some(r) = &relay {
        assert!(
            r.dropped.load(std::sync::atomic::Ordering::Relaxed) > 0,
            "relay dropped nothing"
        );
    }
    drop(relay);
    server.stop().expect("clean shutdown");
}

#[test]
fn real_clients_download_from_a_namespace() {
    if skip() {
        return;
    }
    download_all_from_namespace(
        Loss::None,
        &ALL_TOOLS,
        &[
            "ipxe.efi",
            "snponly.efi",
            "undionly.kpxe",
            "b512.bin",
            "rand-300k.bin",
        ],
    );
}

const LOSSY_TOOLS: [Tool; 3] = [Tool::AtftpBlksize, Tool::TftpHpa, Tool::AtftpWindow8];
const LOSSY_FILES: [&str; 2] = ["w8.bin", "snponly.efi"];

#[test]
fn downloads_complete_under_netem_loss() {
    if skip() {
        return;
    }
    // 10% loss each way. Clients resend a lost request after their own timeout
    // (seconds); the server resends lost blocks after 200 ms.
    download_all_from_namespace(Loss::Netem(10), &LOSSY_TOOLS, &LOSSY_FILES);
}

#[test]
fn downloads_complete_through_a_lossy_relay() {
    if skip() {
        return;
    }
    download_all_from_namespace(Loss::Relay(10), &LOSSY_TOOLS, &LOSSY_FILES);
}
