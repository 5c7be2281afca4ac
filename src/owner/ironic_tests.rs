//! The Ironic client against a stand-in Ironic on loopback: what unknown MACs can cost
//! Ironic (the rate, first sightings), cancelled lookups, oversized bodies.

use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::*;

/// How the stand-in answers.
#[derive(Clone, Copy)]
enum Answer {
    /// `{"ports": []}`: no such port.
    NoPort,
    /// Accepts the connection and never answers.
    Never,
    /// 4 KiB of body, with or without a Content-Length.
    Big { length: bool },
}

/// A stand-in Ironic on 127.0.0.1: its base URL and how many requests it read.
async fn stand_in(answer: Answer) -> (String, Arc<AtomicUsize>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let asked = Arc::new(AtomicUsize::new(0));
    let count = asked.clone();
    tokio::spawn(async move {
        loop {
            let Ok((mut conn, _)) = listener.accept().await else {
                return;
            };
            let count = count.clone();
            tokio::spawn(async move {
                let mut req = Vec::new();
                let mut buf = [0u8; 1024];
                while !req.windows(4).any(|w| w == b"\r\n\r\n") {
                    match conn.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => req.extend_from_slice(&buf[..n]),
                    }
                }
                count.fetch_add(1, Ordering::SeqCst);
                let body = match answer {
                    Answer::NoPort => r#"{"ports": []}"#.to_string(),
                    Answer::Never => {
                        // Hold the connection open, unanswered, until the client goes.
                        let _ = conn.read(&mut buf).await;
                        return;
                    }
                    Answer::Big { .. } => "x".repeat(4096),
                };
                let length = match answer {
                    Answer::Big { length: false } => String::new(),
                    _ => format!("Content-Length: {}\r\n", body.len()),
                };
                let head = format!(
                    "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n{length}Connection: close\r\n\r\n"
                );
                let _ = conn.write_all(head.as_bytes()).await;
                let _ = conn.write_all(body.as_bytes()).await;
            });
        }
    });
    (url, asked)
}

fn owners(url: &str, lookups_per_sec: u32) -> Arc<IronicOwners> {
    Arc::new(
        IronicOwners::new(IronicSettings {
            url: url.to_string(),
            username: None,
            password: None,
            lookups_per_sec,
            ..tests::settings()
        })
        .unwrap(),
    )
}

fn random(n: u32) -> MacAddr {
    let b = n.to_be_bytes();
    MacAddr([0x06, 0x17, b[0], b[1], b[2], b[3]])
}

#[tokio::test]
async fn lookups_beyond_the_rate_are_not_sent_to_ironic() {
    let (url, asked) = stand_in(Answer::NoPort).await;
    let o = owners(&url, 1);
    let start = Instant::now();
    let mut answered = 0;
    for n in 0..10 {
        answered += usize::from(o.lookup(random(n)).await == Some(Known::NoPort));
    }
    let took = start.elapsed().as_secs() as usize;
    let sent = asked.load(Ordering::SeqCst);
    // One token at once, one more per second: however slow the machine, at most one
    // request per whole second it took, plus the first.
    assert!(sent >= 1 && sent <= 2 + took, "{sent} requests in {took} s");
    assert_eq!(answered, sent);
    assert_eq!(o.metrics.lookups.get("limited") as usize, 10 - sent);
}

#[tokio::test]
async fn the_dhcp_path_asks_only_about_a_mac_it_sees_again() {
    let (url, asked) = stand_in(Answer::NoPort).await;
    let o = owners(&url, 1000);
    let (tx, rx) = tokio::sync::mpsc::channel(4096);
    let stop = CancellationToken::new();
    let task = tokio::spawn(o.clone().run_prefetch(rx, stop.clone()));
    // A flood of random MACs, each once: Ironic is never asked.
    for n in 0..2000 {
        tx.send(random(n)).await.unwrap();
    }
    // A machine's DISCOVER and its retransmission: one lookup.
    let machine = MacAddr([0x52, 0x54, 0, 0, 0, 1]);
    tx.send(machine).await.unwrap();
    tx.send(machine).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while o.metrics.lookups.get("no_port") < 1 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    stop.cancel();
    task.await.unwrap();
    assert_eq!(asked.load(Ordering::SeqCst), 1);
    assert_eq!(o.metrics.lookups.get("first_sight"), 2001);
    assert_eq!(
        o.cached(&machine, Instant::now()),
        Cached::Hit(Known::NoPort)
    );
}

#[tokio::test]
async fn a_cancelled_lookup_leaves_nothing_in_flight() {
    let (url, asked) = stand_in(Answer::Never).await;
    let o = owners(&url, 1000);
    let mac = random(1);
    // A boot request whose client went away: its future is dropped mid-request.
    let cancelled = tokio::time::timeout(Duration::from_millis(200), o.lookup(mac)).await;
    assert!(cancelled.is_err());
    assert_eq!(o.inflight(), 0);
    // Two callers share one lookup; one goes away, the other still waits on it...
    let (first, second) = (o.clone(), o.clone());
    let waiting = tokio::spawn(async move { second.lookup(mac).await });
    let _ = tokio::time::timeout(Duration::from_millis(200), first.lookup(mac)).await;
    // ...and when it ends (here at the client timeout), the entry goes with it.
    let _ = waiting.await;
    assert_eq!(o.inflight(), 0);
    assert!(asked.load(Ordering::SeqCst) >= 2);
}

#[tokio::test]
async fn a_body_beyond_the_limit_is_refused() {
    let client = reqwest::Client::builder().no_proxy().build().unwrap();
    for length in [true, false] {
        let (url, _) = stand_in(Answer::Big { length }).await;
        let resp = client
            .get(format!("{url}/v1/ports/detail"))
            .send()
            .await
            .unwrap();
        let err = read_limited(resp, "/v1/ports/detail".into(), 1024)
            .await
            .unwrap_err();
        assert!(
            matches!(err, IronicError::TooLarge { limit: 1024, .. }),
            "Content-Length sent: {length}: {err}"
        );
        let resp = client
            .get(format!("{url}/v1/ports/detail"))
            .send()
            .await
            .unwrap();
        let body = read_limited(resp, "/v1/ports/detail".into(), 4096)
            .await
            .unwrap();
        assert_eq!(body.len(), 4096);
    }
}
