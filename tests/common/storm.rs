//! A relay-mode DHCP storm for the crash and power-cut tests: a client thread (in the
//! client namespace) obtains leases for fresh MACs until told to stop, remembers every
//! ACK (and fails the test if an address is ever ACKed to two MACs), and can INIT-REBOOT
//! every ACKed client; and the check that a stopped server's store holds them all.
#![allow(dead_code)]

use std::collections::HashMap;
use std::net::Ipv4Addr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use super::relay_client::{mac, Answer, RelayClient};

const BATCH: u32 = 100;

/// Commands for the client thread (it lives in the client namespace).
pub(crate) enum Cmd {
    /// Obtain leases for fresh MACs until told to stop; reply with (acked, unanswered)
    /// and everything ACKed so far.
    Storm(Arc<AtomicBool>),
    /// INIT-REBOOT every ACKed client; reply with the failures.
    Verify,
    /// Return everything ACKed so far.
    Finish,
}

pub(crate) enum Report {
    Storm {
        acked: usize,
        unanswered: usize,
        all: HashMap<[u8; 6], Ipv4Addr>,
    },
    Verify(Vec<(Ipv4Addr, Answer)>),
    Done(HashMap<[u8; 6], Ipv4Addr>),
}

pub(crate) fn client_thread(cmds: mpsc::Receiver<Cmd>, reports: mpsc::Sender<Report>) {
    let mut client = RelayClient::new(Ipv4Addr::new(198, 18, 0, 2), Ipv4Addr::new(198, 18, 0, 1));
    let mut acked: HashMap<[u8; 6], Ipv4Addr> = HashMap::new();
    let mut owner: HashMap<Ipv4Addr, [u8; 6]> = HashMap::new();
    let mut next_mac = 0u32;
    while let Ok(cmd) = cmds.recv() {
        match cmd {
            Cmd::Storm(stop) => {
                let (mut ok, mut silent) = (0, 0);
                // Bounded in count and time whatever happens.
                let deadline = Instant::now() + Duration::from_secs(20);
                while !stop.load(Ordering::Relaxed)
                    && Instant::now() < deadline
                    && next_mac < 1_000_000
                {
                    let macs: Vec<[u8; 6]> = (next_mac..next_mac + BATCH).map(mac).collect();
                    next_mac += BATCH;
                    for (m, a) in macs
                        .iter()
                        .zip(client.obtain(&macs, Duration::from_millis(300)))
                    {
                        match a {
                            Answer::Ack(ip) => {
                                if let Some(prev) = owner.insert(ip, *m) {
                                    assert_eq!(prev, *m, "{ip} ACKed to two clients");
                                }
                                acked.insert(*m, ip);
                                ok += 1;
                            }
                            _ => silent += 1,
                        }
                    }
                }
                reports
                    .send(Report::Storm {
                        acked: ok,
                        unanswered: silent,
                        all: acked.clone(),
                    })
                    .unwrap();
            }
            Cmd::Verify => {
                let pairs: Vec<([u8; 6], Ipv4Addr)> =
                    acked.iter().map(|(m, ip)| (*m, *ip)).collect();
                let mut failures = Vec::new();
                for chunk in pairs.chunks(200) {
                    let mut answers = client.init_reboot(chunk, Duration::from_millis(500));
                    // Retry the silent ones once (UDP may drop under load).
                    let retry: Vec<_> = chunk
                        .iter()
                        .zip(&answers)
                        .filter(|(_, a)| **a == Answer::Silence)
                        .map(|(p, _)| *p)
                        .collect();
                    if !retry.is_empty() {
                        let again = client.init_reboot(&retry, Duration::from_secs(1));
                        let mut it = again.into_iter();
                        for a in answers.iter_mut().filter(|a| **a == Answer::Silence) {
                            *a = it.next().unwrap();
                        }
                    }
                    for ((_, ip), a) in chunk.iter().zip(answers) {
                        if a != Answer::Ack(*ip) {
                            failures.push((*ip, a));
                        }
                    }
                }
                reports.send(Report::Verify(failures)).unwrap();
            }
            Cmd::Finish => {
                reports.send(Report::Done(acked.clone())).unwrap();
                return;
            }
        }
    }
}

/// Asks the client thread to INIT-REBOOT every ACKed client and asserts each got its
/// own address back (`when` names the moment in the failure).
pub(crate) fn assert_all_rebind(
    cmds: &mpsc::Sender<Cmd>,
    reports: &mpsc::Receiver<Report>,
    when: &str,
) {
    cmds.send(Cmd::Verify).unwrap();
    let Report::Verify(failures) = reports.recv().unwrap() else {
        panic!("the storm client answered something else")
    };
    assert!(
        failures.is_empty(),
        "{when}: {} ACKed clients lost their address, e.g. {:?}",
        failures.len(),
        &failures[..failures.len().min(5)]
    );
}

/// Every lease in `acked` is in the (stopped) server's store, bound to its client.
pub(crate) fn assert_store_holds(
    server: &super::Server,
    acked: &HashMap<[u8; 6], Ipv4Addr>,
    when: &str,
) {
    let leases = server.leases_json();
    let stored: HashMap<String, (String, String)> = leases
        .as_array()
        .unwrap()
        .iter()
        .map(|l| {
            (
                l["ip"].as_str().unwrap().to_string(),
                (
                    l["mac"].as_str().unwrap().to_string(),
                    l["state"].as_str().unwrap().to_string(),
                ),
            )
        })
        .collect();
    for (m, ip) in acked {
        let want_mac = m
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect::<Vec<_>>()
            .join(":");
        assert_eq!(
            stored.get(&ip.to_string()),
            Some(&(want_mac, "bound".to_string())),
            "{when}: ACKed lease {ip} missing from the store"
        );
    }
}
