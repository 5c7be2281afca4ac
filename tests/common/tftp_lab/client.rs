//! A small scriptable TFTP client with fault injection.

use std::net::{SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

/// Behaviour knobs for [`TestClient::get`].
#[derive(Debug, Clone, Default)]
pub(crate) struct Faults {
    /// Do not send every k-th ACK (k ≥ 2).
    pub drop_ack_every: Option<u32>,
    /// Send every k-th ACK twice.
    pub dup_ack_every: Option<u32>,
    /// Pretend every k-th DATA packet never arrived.
    pub lose_data_every: Option<u32>,
}

/// What a [`TestClient::get`] saw.
#[derive(Debug, Default)]
pub(crate) struct GetResult {
    pub data: Vec<u8>,
    pub data_packets: u64,
    pub oack: Vec<(String, String)>,
    pub server_tid: Option<SocketAddr>,
}

/// A small scriptable TFTP client (RFC 1350 + 2347 + 7440 receiver).
pub(crate) struct TestClient {
    pub sock: UdpSocket,
}

impl TestClient {
    pub(crate) fn new() -> Self {
        let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
        sock.set_read_timeout(Some(Duration::from_millis(300)))
            .unwrap();
        TestClient { sock }
    }

    pub(crate) fn rrq(name: &[u8], mode: &str, options: &[(&str, &str)]) -> Vec<u8> {
        let mut v = vec![0, 1];
        v.extend_from_slice(name);
        v.push(0);
        v.extend_from_slice(mode.as_bytes());
        v.push(0);
        for (k, val) in options {
            v.extend_from_slice(k.as_bytes());
            v.push(0);
            v.extend_from_slice(val.as_bytes());
            v.push(0);
        }
        v
    }

    /// Sends `datagram` and returns the first reply (bounded wait).
    pub(crate) fn request(
        &self,
        server: SocketAddr,
        datagram: &[u8],
    ) -> Option<(Vec<u8>, SocketAddr)> {
        let mut buf = [0u8; 2048];
        for _ in 0..3 {
            self.sock.send_to(datagram, server).unwrap();
            let deadline = Instant::now() + Duration::from_secs(2);
            while Instant::now() < deadline {
                if let Ok((n, from)) = self.sock.recv_from(&mut buf) {
                    return Some((buf[..n].to_vec(), from));
                }
            }
        }
        None
    }

    /// Downloads `name` with the given options, injecting `faults`.
    pub(crate) fn get(
        &self,
        server: SocketAddr,
        name: &str,
        options: &[(&str, &str)],
        faults: &Faults,
    ) -> Result<GetResult, String> {
        self.get_mode(server, name, "octet", options, faults)
    }

    /// [`TestClient::get`] in another transfer mode (`netascii`).
    pub(crate) fn get_mode(
        &self,
        server: SocketAddr,
        name: &str,
        mode: &str,
        options: &[(&str, &str)],
        faults: &Faults,
    ) -> Result<GetResult, String> {
        let rrq = Self::rrq(name.as_bytes(), mode, options);
        self.sock.send_to(&rrq, server).unwrap();
        let mut res = GetResult::default();
        let mut blksize = 512usize;
        let mut window = 1u32;
        let mut expected: u16 = 1;
        let mut in_window = 0u32;
        let mut acks_sent = 0u32;
        let mut data_seen = 0u32;
        let mut last_ack: Option<u16> = None;
        let mut buf = vec![0u8; 70_000];
        let deadline = Instant::now() + Duration::from_secs(60);
        let send_ack = |n: u16, acks_sent: &mut u32, to: SocketAddr| {
            *acks_sent += 1;
            if faults
                .drop_ack_every
                .is_some_and(|k| (*acks_sent).is_multiple_of(k))
            {
                return;
            }
            let b = n.to_be_bytes();
            self.sock.send_to(&[0, 4, b[0], b[1]], to).unwrap();
            if faults
                .dup_ack_every
                .is_some_and(|k| (*acks_sent).is_multiple_of(k))
            {
                self.sock.send_to(&[0, 4, b[0], b[1]], to).unwrap();
            }
        };
        loop {
            if Instant::now() > deadline {
                return Err("client deadline".into());
            }
            let (n, from) = match self.sock.recv_from(&mut buf) {
                Ok(x) => x,
                Err(_) => {
                    // Our timer: resend the last ACK, or the request.
                    match (res.server_tid, last_ack) {
                        (Some(tid), Some(a)) => send_ack(a, &mut acks_sent, tid),
                        (None, _) => {
                            self.sock.send_to(&rrq, server).unwrap();
                        }
                        _ => {}
                    }
                    continue;
                }
            };
            let tid = *res.server_tid.get_or_insert(from);
            if from != tid {
                continue;
            }
            let p = &buf[..n];
            match u16::from_be_bytes([p[0], p[1]]) {
                6 => {
                    let fields: Vec<&[u8]> = p[2..].split(|&b| b == 0).collect();
                    res.oack.clear();
                    for kv in fields.chunks(2) {
                        if kv.len() == 2 && !kv[0].is_empty() {
                            let k = String::from_utf8_lossy(kv[0]).to_lowercase();
                            let v = String::from_utf8_lossy(kv[1]).to_string();
                            if k == "blksize" {
                                blksize = v.parse().unwrap();
                            }
                            if k == "windowsize" {
                                window = v.parse().unwrap();
                            }
                            res.oack.push((k, v));
                        }
                    }
                    last_ack = Some(0);
                    send_ack(0, &mut acks_sent, tid);
                }
                3 => {
                    data_seen += 1;
                    res.data_packets += 1;
                    if res.data_packets > 1_000_000 {
                        return Err("data storm".into());
                    }
                    if faults
                        .lose_data_every
                        .is_some_and(|k| data_seen.is_multiple_of(k))
                    {
                        continue;
                    }
                    let block = u16::from_be_bytes([p[2], p[3]]);
                    let payload = &p[4..];
                    if block == expected {
                        res.data.extend_from_slice(payload);
                        expected = expected.wrapping_add(1);
                        in_window += 1;
                        let last = payload.len() < blksize;
                        if last || in_window >= window {
                            in_window = 0;
                            last_ack = Some(block);
                            send_ack(block, &mut acks_sent, tid);
                        }
                        if last {
                            // RFC 1350 §6: dally, re-acknowledging a retransmitted final
                            // block in case our last ACK was lost.
                            let dally = Instant::now() + Duration::from_secs(1);
                            while Instant::now() < dally {
                                if let Ok((n, f)) = self.sock.recv_from(&mut buf) {
                                    if f == tid && n >= 4 && buf[1] == 3 {
                                        send_ack(block, &mut acks_sent, tid);
                                    }
                                }
                            }
                            return Ok(res);
                        }
                    } else {
                        // Gap or duplicate: RFC 7440 §4, acknowledge the last block we
                        // have in order so the sender restarts after it.
                        in_window = 0;
                        let a = expected.wrapping_sub(1);
                        last_ack = Some(a);
                        send_ack(a, &mut acks_sent, tid);
                    }
                }
                5 => {
                    let code = u16::from_be_bytes([p[2], p[3]]);
                    return Err(format!(
                        "error {code}: {}",
                        String::from_utf8_lossy(&p[4..n.saturating_sub(1)])
                    ));
                }
                op => return Err(format!("unexpected opcode {op}")),
            }
        }
    }
}
