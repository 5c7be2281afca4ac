//! Both shells log a transfer's events in its span, which carries the peer, the resolved
//! file name and the agreed options (docs/style.md §8).

use std::io::Write;
use std::sync::{Arc, Mutex};

use tokio::net::UdpSocket;
use tokio_util::sync::CancellationToken;

use crate::config::TftpSettings;
use crate::tftp::{run, FileRoot, TftpMetrics};

/// Log output collected in memory.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Fetches `name` with blksize 16 and windowsize 2 (one OACK, one window of two blocks,
/// the second short), then a missing file; returns the server's log.
fn transfer_log(single_port: bool, name: &str) -> String {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("snponly.efi"), [5u8; 20]).unwrap();
    let root = FileRoot::new(TftpSettings {
        root: dir.path().to_owned(),
        single_port,
        ..Default::default()
    });
    let log = Captured::default();
    let sink = log.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::DEBUG)
        .with_ansi(false)
        .with_writer(move || sink.clone())
        .finish();
    // A current-thread runtime keeps every task on this thread, under this subscriber.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    tracing::subscriber::with_default(subscriber, || {
        rt.block_on(async {
            let sock = UdpSocket::bind("127.0.0.1:0").await.unwrap();
            let server = sock.local_addr().unwrap();
            let stop = CancellationToken::new();
            let task = tokio::spawn(run(
                sock,
                root,
                Arc::new(TftpMetrics::default()),
                stop.clone(),
            ));
            let client = UdpSocket::bind("127.0.0.1:0").await.unwrap();
            let mut rrq = b"\0\x01".to_vec();
            for part in [name, "octet", "blksize", "16", "windowsize", "2"] {
                rrq.extend_from_slice(part.as_bytes());
                rrq.push(0);
            }
            let mut buf = [0u8; 128];
            client.send_to(&rrq, server).await.unwrap();
            let tid = recv(&client, &mut buf).await;
            assert_eq!(&buf[..2], b"\0\x06", "OACK");
            client.send_to(b"\0\x04\0\0", tid).await.unwrap();
            for block in [1u8, 2] {
                recv(&client, &mut buf).await;
                assert_eq!(&buf[..4], &[0, 3, 0, block]);
            }
            client.send_to(b"\0\x04\0\x02", tid).await.unwrap();
            client
                .send_to(b"\0\x01missing.efi\0octet\0", server)
                .await
                .unwrap();
            recv(&client, &mut buf).await;
            assert_eq!(&buf[..2], b"\0\x05", "ERROR for the missing file");
            stop.cancel();
            task.await.unwrap().unwrap();
        })
    });
    let out = log.0.lock().unwrap().clone();
    String::from_utf8(out).unwrap()
}

/// One datagram, or a panic after a bounded wait.
async fn recv(c: &UdpSocket, buf: &mut [u8]) -> std::net::SocketAddr {
    let wait = std::time::Duration::from_secs(5);
    let r = tokio::time::timeout(wait, c.recv_from(buf)).await;
    r.expect("reply in time").unwrap().1
}

fn check(log: &str) {
    let line = |msg: &str| {
        log.lines()
            .find(|l| l.contains(msg))
            .unwrap_or_else(|| panic!("no {msg:?} in\n{log}"))
            .to_string()
    };
    for msg in ["tftp transfer started", "tftp transfer complete"] {
        let l = line(msg);
        assert!(l.contains("tftp_transfer{peer=127.0.0.1:"), "{l}");
        assert!(l.contains("file=\"snponly.efi\""), "{l}");
        assert!(l.contains("blksize=16 windowsize=2}"), "{l}");
    }
    assert!(line("tftp transfer complete").contains("size=20"), "{log}");
    // A refused request's span has only the peer; the event names the escaped request.
    let l = line("tftp request failed");
    assert!(l.contains("tftp_transfer{peer=127.0.0.1:"), "{l}");
    assert!(l.contains("file=missing.efi reason=\"not_found\""), "{l}");
}

#[test]
fn multi_port_transfers_log_in_their_span() {
    check(&transfer_log(false, "snponly.efi"));
}

#[test]
fn single_port_transfers_log_in_their_span() {
    check(&transfer_log(true, "/snponly.efi"));
}
