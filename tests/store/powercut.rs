//! Power loss: the store runs on a file system that keeps only what was fsynced
//! (examples/powercut_fs.rs, strict about directory entries too). A relay-mode storm
//! records every DHCPACK while the power is cut at a different moment each cycle: the
//! file system drops everything not fsynced and fails every later write, and the server
//! is SIGKILLed. After the power comes back, the store holds every lease ACKed before
//! the cut; restarted on it, the server gives every ACKed client its address back by
//! INIT-REBOOT; and no address is ever ACKed to two MACs (the storm client checks every
//! ACK of every cycle).

use crate::common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Duration;

use common::powercut::PowercutFs;
use common::storm::{assert_all_rebind, assert_store_holds, client_thread, Cmd, Report};

const CUTS: u64 = 6;

#[test]
fn every_lease_acked_before_a_power_cut_is_there_after_it() {
    require_root!();
    let disk = PowercutFs::start(false);
    let (lab, _dir, mut server) = common::relay_lab_storing_in(&disk.path("state"));

    let (cmd_tx, cmd_rx) = mpsc::channel();
    let (rep_tx, rep_rx) = mpsc::channel();
    let client = lab.client.run(move || client_thread(cmd_rx, rep_tx));
    let mut checked = 0;
    for cut in 0..CUTS {
        let stop = Arc::new(AtomicBool::new(false));
        cmd_tx.send(Cmd::Storm(stop.clone())).unwrap();
        // A different moment each cycle, inside the storm. The first cycle's first
        // offers wait up to `dhcp.conflict_probe_ms` (200 ms) for their ICMP probe (an
        // address the store never saw), so its ACKs start after that.
        std::thread::sleep(Duration::from_millis(350 + 120 * cut));
        let note = disk.cut();
        server.kill9();
        // The storm goes on against the dark server for a moment.
        std::thread::sleep(Duration::from_millis(200));
        stop.store(true, Ordering::Relaxed);
        let Report::Storm { acked, all, .. } = rep_rx.recv().unwrap() else {
            panic!()
        };
        assert!(acked > 0, "cut {cut}: no ACK before the cut");
        disk.power_on();
        // The store as the power cut left it, read before anything restarts on it.
        assert_store_holds(&server, &all, &format!("after power cut {cut} ({note})"));
        checked = all.len();

        server.restart();
        assert_all_rebind(&cmd_tx, &rep_rx, &format!("cut {cut}, power back"));
        eprintln!("cut {cut}: {acked} ACKs in this storm, {checked} checked in all; {note}");
    }
    cmd_tx.send(Cmd::Finish).unwrap();
    let _ = rep_rx.recv().unwrap();
    client.join().unwrap();
    server.stop();
    eprintln!("{checked} ACKed leases checked across {CUTS} power cuts: 0 lost, 0 duplicates");
}
