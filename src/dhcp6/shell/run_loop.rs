//! The DHCPv6 engine loop, on its own thread as v4's: every socket is drained in bursts
//! in arrival order, the replies that need nothing stored (Advertise, and the answers
//! that change no lease) leave together once a socket's burst is handled (`udp_batch`),
//! and operator changes, roster changes and refused leases are applied between bursts.

use std::io::ErrorKind;
use std::net::{Ipv6Addr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::net::UdpSocket;
use tokio_util::sync::CancellationToken;
use tracing::error;

use super::{control, handle, Encoded, Listener, Parts6, Server6Error, Withdrawal};
use crate::dhcp6::control::Control6;
use crate::dhcp6::engine::Engine6;
use crate::dhcp6::wire;
use crate::owner::roster::RosterView;
use crate::udp_batch::Outbox;

/// Datagrams read from one socket before looking at the others, the clock and shutdown
/// (as v4's `READ_BURST`).
const READ_BURST: usize = 64;
/// How often expired leases are reclaimed and the kernel's drops counted.
const TICK: Duration = Duration::from_secs(1);

/// What the loop owns besides the engine.
pub(super) struct Loop {
    pub(super) listeners: Vec<Listener>,
    pub(super) sockets: Vec<std::net::UdpSocket>,
    pub(super) parts: Parts6,
}

pub(super) async fn engine_loop(
    mut engine: Engine6,
    l: Loop,
    shutdown: CancellationToken,
) -> Result<(), Server6Error> {
    let Loop {
        listeners,
        sockets,
        mut parts,
    } = l;
    let sockets = sockets
        .into_iter()
        .zip(&listeners)
        .map(|(s, l)| {
            UdpSocket::from_std(s).map_err(|source| Server6Error::Io {
                interface: l.interface.name.clone(),
                source,
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    let (withdraw_tx, mut withdrawals) = tokio::sync::mpsc::unbounded_channel::<Withdrawal>();
    let mut control = parts.control.take().map(|c| c.0);
    let mut roster = parts.roster.as_ref().map(|r| r.subscribe());
    let metrics = parts.metrics.clone();
    let mut outboxes: Vec<Outbox> = sockets.iter().map(|_| Outbox::default()).collect();
    let mut buf = vec![0u8; wire::MAX_DATAGRAM + 1];
    let mut space = crate::sockopt::pktinfo_space();
    let mut encoded = Encoded::default();
    let mut kernel_drops = vec![0u32; sockets.len()];
    let mut next_tick = Instant::now() + TICK;
    let result = 'serve: loop {
        if shutdown.is_cancelled() {
            break Ok(());
        }
        if Instant::now() >= next_tick {
            next_tick = Instant::now() + TICK;
            // The kernel's own drops (a full receive buffer), each socket's count since
            // the last tick.
            for (seen, socket) in kernel_drops.iter_mut().zip(&sockets) {
                if let Some(now) = crate::sockopt::receive_drops(socket) {
                    metrics
                        .dropped
                        .add("receive_buffer_full", u64::from(now.wrapping_sub(*seen)));
                    *seen = now;
                }
            }
            engine.handle_tick(crate::clock::unix_now());
            metrics.leases.set(engine.leases().count() as u64);
        }
        // What arrived since the last look, also under load.
        while let Ok(w) = withdrawals.try_recv() {
            super::withdraw(&mut engine, &w.0, &w.1, &parts.committer);
        }
        if let Some(rx) = control.as_mut() {
            while let Ok(cmd) = rx.try_recv() {
                control::apply(&mut engine, cmd, &parts.committer, crate::clock::unix_now());
            }
        }
        if let Some(r) = roster.as_mut() {
            if r.has_changed().unwrap_or(false) {
                let list = r.borrow_and_update().list.clone();
                engine.change_members(list);
            }
        }
        // Drain the sockets, a burst per socket at a time; only a socket that filled its
        // burst is read again before waiting (as v4's `Burst::drain`).
        let mut busy = false;
        for (k, socket) in sockets.iter().enumerate() {
            for read in 0..=READ_BURST {
                if read == READ_BURST {
                    busy = true;
                    break;
                }
                match crate::sockopt::try_recv_pktinfo(socket, &mut buf, &mut space) {
                    Ok((n, SocketAddr::V6(from), arrived)) => {
                        let to = match arrived {
                            Some(crate::sockopt::Arrived::V6 { destination, .. }) => destination,
                            _ => Ipv6Addr::UNSPECIFIED,
                        };
                        let turn = super::Turn {
                            listener: &listeners[k],
                            parts: &parts,
                            withdraw: &withdraw_tx,
                            outbox: &mut outboxes[k],
                            encoded: &mut encoded,
                        };
                        handle(&mut engine, turn, &buf[..n], (from, to));
                    }
                    Ok(_) => {}
                    Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                    Err(e) if crate::net_error::is_transient(&e) => {}
                    Err(source) => {
                        let interface = listeners[k].interface.name.clone();
                        error!(%interface, error = %source, "DHCPv6 socket failed");
                        break 'serve Err(Server6Error::Io { interface, source });
                    }
                }
            }
            outboxes[k].flush(socket, &*metrics).await;
        }
        if busy {
            continue;
        }
        tokio::select! {
            _ = shutdown.cancelled() => break Ok(()),
            _ = tokio::time::sleep_until(next_tick.into()) => {}
            _ = crate::engine_thread::any_readable(&sockets) => {}
            Some(cmd) = next_control(control.as_mut()) => {
                control::apply(&mut engine, cmd, &parts.committer, crate::clock::unix_now());
            }
            Some(w) = withdrawals.recv() => {
                super::withdraw(&mut engine, &w.0, &w.1, &parts.committer);
            }
            Some(()) = changed(roster.as_mut()) => {
                if let Some(r) = roster.as_mut() {
                    let list = r.borrow_and_update().list.clone();
                    engine.change_members(list);
                }
            }
        }
    };
    // Whatever was queued is durable and answered before the store closes.
    let _ = parts.committer.commit(Vec::new()).await;
    result
}

async fn next_control(
    control: Option<&mut tokio::sync::mpsc::Receiver<Control6>>,
) -> Option<Control6> {
    match control {
        Some(c) => c.recv().await,
        None => std::future::pending().await,
    }
}

async fn changed(roster: Option<&mut tokio::sync::watch::Receiver<Arc<RosterView>>>) -> Option<()> {
    match roster {
        Some(r) => r.changed().await.ok(),
        None => std::future::pending().await,
    }
}
