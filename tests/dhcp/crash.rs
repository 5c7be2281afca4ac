//! Crash safety: a relay-mode load client records every DHCPACK while the server is
//! SIGKILLed mid-storm, several times. After each kill the store holds every lease ACKed
//! so far; after each restart on it, every ACKed client gets its address back by
//! INIT-REBOOT; no address is ever ACKed to two clients; and at the end the store still
//! holds every ACKed lease.

use crate::common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Duration;

use common::storm::{assert_all_rebind, assert_store_holds, client_thread, Cmd, Report};

const CYCLES: usize = 4;

#[test]
fn acked_leases_survive_sigkill_mid_storm() {
    require_root!();
    let (lab, _dir, mut server) = common::relay_lab();

    let (cmd_tx, cmd_rx) = mpsc::channel();
    let (rep_tx, rep_rx) = mpsc::channel();
    let client = lab.client.run(move || client_thread(cmd_rx, rep_tx));

    for cycle in 0..CYCLES {
        let stop = Arc::new(AtomicBool::new(false));
        cmd_tx.send(Cmd::Storm(stop.clone())).unwrap();
        // Kill at a different moment each cycle, well inside the storm.
        std::thread::sleep(Duration::from_millis(400 + 170 * cycle as u64));
        let pid = server.pid().unwrap();
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid as i32),
            nix::sys::signal::Signal::SIGKILL,
        )
        .unwrap();
        // The storm goes on against the dead server for a moment.
        std::thread::sleep(Duration::from_millis(300));
        stop.store(true, Ordering::Relaxed);
        let Report::Storm {
            acked,
            unanswered,
            all,
        } = rep_rx.recv().unwrap()
        else {
            panic!()
        };
        assert!(acked > 0, "cycle {cycle}: no ACK before the kill");
        assert!(
            unanswered > 0,
            "cycle {cycle}: the kill did not land mid-storm"
        );
        // The dead server's store, read before anything restarts on it.
        server.kill9();
        assert_store_holds(&server, &all, &format!("after kill {cycle}"));

        server.restart();
        assert_all_rebind(&cmd_tx, &rep_rx, &format!("cycle {cycle}, after restart"));
    }
    // One more storm after the last restart: new clients never get an ACKed address (the
    // client thread asserts that on every ACK).
    let stop = Arc::new(AtomicBool::new(false));
    cmd_tx.send(Cmd::Storm(stop.clone())).unwrap();
    std::thread::sleep(Duration::from_millis(500));
    stop.store(true, Ordering::Relaxed);
    let Report::Storm { acked, .. } = rep_rx.recv().unwrap() else {
        panic!()
    };
    assert!(acked > 0);
    cmd_tx.send(Cmd::Finish).unwrap();
    let Report::Done(all) = rep_rx.recv().unwrap() else {
        panic!()
    };
    client.join().unwrap();

    server.stop();
    assert_store_holds(&server, &all, "at the end");
    eprintln!(
        "{} ACKed leases checked across {CYCLES} SIGKILL cycles",
        all.len()
    );
}
