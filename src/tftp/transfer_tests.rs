//! Unit tests of the transfer state machine, with synthetic time.

use super::*;

fn neg(blksize: u16, windowsize: u16, oack: bool) -> Negotiated {
    Negotiated {
        blksize,
        windowsize,
        timeout: Duration::from_secs(1),
        oack: if oack { vec![("blksize", 8)] } else { vec![] },
    }
}

fn budget(max_retries: u32) -> Budget {
    Budget {
        max_retries,
        lifetime: Duration::from_secs(3600),
    }
}

fn file(n: usize) -> Arc<[u8]> {
    (0..n).map(|i| i as u8).collect::<Vec<_>>().into()
}

fn ack(n: u16) -> [u8; 4] {
    let b = n.to_be_bytes();
    [0, 4, b[0], b[1]]
}

/// Drains everything due and returns the wire block numbers (or 0xffff_ffff for OACK,
/// 0xffff_0000 + code for ERROR).
fn drain(t: &mut Transfer) -> Vec<u32> {
    let mut out = Vec::new();
    let mut sent = Vec::new();
    while t.poll_transmit(&mut out) {
        match out[1] {
            3 => sent.push(u32::from(u16::from_be_bytes([out[2], out[3]]))),
            6 => sent.push(u32::MAX),
            5 => sent.push(0xffff_0000 + u32::from(u16::from_be_bytes([out[2], out[3]]))),
            x => panic!("unexpected opcode {x}"),
        }
        assert!(sent.len() < 100_000);
    }
    sent
}

#[test]
fn lockstep_without_options() {
    let now = Instant::now();
    let mut t = Transfer::new(file(20), &neg(8, 1, false), budget(3), now);
    assert_eq!(drain(&mut t), vec![1]);
    assert_eq!(t.handle_packet(&ack(1), now), Handled::Progress);
    assert_eq!(drain(&mut t), vec![2]);
    t.handle_packet(&ack(2), now);
    assert_eq!(drain(&mut t), vec![3]);
    t.handle_packet(&ack(3), now);
    assert_eq!(t.status(), Status::Done);
    assert_eq!(t.stats().bytes_sent, 20);
    assert!(t.poll_timeout().is_none());
}

#[test]
fn exact_multiple_ends_with_empty_block() {
    let now = Instant::now();
    let mut t = Transfer::new(file(16), &neg(8, 4, false), budget(3), now);
    assert_eq!(drain(&mut t), vec![1, 2, 3]);
    let mut out = Vec::new();
    let mut t2 = Transfer::new(file(16), &neg(8, 4, false), budget(3), now);
    for _ in 0..3 {
        assert!(t2.poll_transmit(&mut out));
    }
    assert_eq!(out, [0, 3, 0, 3]);
    t.handle_packet(&ack(3), now);
    assert_eq!(t.status(), Status::Done);
}

#[test]
fn oack_waits_for_ack_zero() {
    let now = Instant::now();
    let mut t = Transfer::new(file(10), &neg(8, 1, true), budget(3), now);
    assert_eq!(drain(&mut t), vec![u32::MAX]);
    assert_eq!(t.handle_packet(&ack(1), now), Handled::Ignored);
    assert!(drain(&mut t).is_empty());
    assert_eq!(t.handle_packet(&ack(0), now), Handled::Progress);
    assert_eq!(drain(&mut t), vec![1]);
    // A repeated ACK 0 (client timer) must not resend block 1.
    assert_eq!(t.handle_packet(&ack(0), now), Handled::DuplicateAck);
    assert!(drain(&mut t).is_empty());
}

#[test]
fn duplicate_ack_does_not_resend() {
    let now = Instant::now();
    let mut t = Transfer::new(file(100), &neg(8, 1, false), budget(3), now);
    drain(&mut t);
    t.handle_packet(&ack(1), now);
    assert_eq!(drain(&mut t), vec![2]);
    assert_eq!(t.handle_packet(&ack(1), now), Handled::DuplicateAck);
    assert!(drain(&mut t).is_empty());
    assert_eq!(t.stats().duplicate_acks, 1);
    assert_eq!(t.stats().retransmits, 0);
}

#[test]
fn window_partial_ack_restarts_after_acked_block() {
    let now = Instant::now();
    let mut t = Transfer::new(file(100), &neg(8, 4, false), budget(3), now);
    assert_eq!(drain(&mut t), vec![1, 2, 3, 4]);
    // Client got 1 and 2 only (RFC 7440 §4).
    assert_eq!(t.handle_packet(&ack(2), now), Handled::Progress);
    assert_eq!(drain(&mut t), vec![3, 4, 5, 6]);
    assert_eq!(t.stats().retransmits, 2);
    // A late ACK for 1 is stale.
    assert_eq!(t.handle_packet(&ack(1), now), Handled::Ignored);
    // An ACK for a block never sent is ignored.
    assert_eq!(t.handle_packet(&ack(9), now), Handled::Ignored);
    t.handle_packet(&ack(6), now);
    assert_eq!(drain(&mut t), vec![7, 8, 9, 10]);
    t.handle_packet(&ack(10), now);
    assert_eq!(drain(&mut t), vec![11, 12, 13]);
    t.handle_packet(&ack(13), now);
    assert_eq!(t.status(), Status::Done);
}

#[test]
fn timeout_resends_window_then_gives_up() {
    let t0 = Instant::now();
    let mut t = Transfer::new(file(100), &neg(8, 2, false), budget(2), t0);
    assert_eq!(drain(&mut t), vec![1, 2]);
    // Too early: nothing happens.
    t.handle_timeout(t0 + Duration::from_millis(10));
    assert!(drain(&mut t).is_empty());
    let t1 = t.poll_timeout().unwrap();
    t.handle_timeout(t1);
    assert_eq!(drain(&mut t), vec![1, 2]);
    let t2 = t.poll_timeout().unwrap();
    // Exponential backoff: 1 s, then 2 s, then 4 s.
    assert_eq!(t2 - t1, Duration::from_secs(2));
    t.handle_timeout(t2);
    assert_eq!(drain(&mut t), vec![1, 2]);
    assert_eq!(t.poll_timeout().unwrap() - t2, Duration::from_secs(4));
    t.handle_timeout(t.poll_timeout().unwrap());
    assert_eq!(t.status(), Status::Failed(FailReason::Timeout));
    assert!(drain(&mut t).is_empty());
    assert_eq!(t.stats().timeouts, 2);
}

#[test]
fn progress_resets_retry_budget() {
    let t0 = Instant::now();
    let mut t = Transfer::new(file(100), &neg(8, 1, false), budget(1), t0);
    drain(&mut t);
    t.handle_timeout(t.poll_timeout().unwrap());
    assert_eq!(drain(&mut t), vec![1]);
    let now = t.poll_timeout().unwrap();
    t.handle_packet(&ack(1), now);
    drain(&mut t);
    t.handle_timeout(t.poll_timeout().unwrap());
    assert_eq!(t.status(), Status::Running);
    assert_eq!(drain(&mut t), vec![2]);
}

#[test]
fn backoff_is_capped() {
    let t0 = Instant::now();
    let mut t = Transfer::new(file(100), &neg(8, 1, false), budget(30), t0);
    for _ in 0..20 {
        t.handle_timeout(t.poll_timeout().unwrap());
    }
    let now = t0 + Duration::from_secs(1000);
    t.handle_timeout(now);
    assert_eq!(t.poll_timeout().unwrap() - now, MAX_BACKOFF);
    // Progress resets the interval to the base timeout.
    drain(&mut t);
    t.handle_packet(&ack(1), now);
    assert_eq!(t.poll_timeout().unwrap() - now, Duration::from_secs(1));
}

#[test]
fn oack_is_retransmitted_on_timeout() {
    let t0 = Instant::now();
    let mut t = Transfer::new(file(1), &neg(8, 1, true), budget(3), t0);
    drain(&mut t);
    t.handle_timeout(t.poll_timeout().unwrap());
    assert_eq!(drain(&mut t), vec![u32::MAX]);
}

#[test]
fn an_error_at_the_oack_declines_and_one_mid_transfer_fails() {
    let now = Instant::now();
    // UEFI PXE's size probe: RRQ with tsize, OACK, then ERROR instead of ACK 0.
    let mut t = Transfer::new(file(100), &neg(8, 1, true), budget(3), now);
    drain(&mut t);
    assert_eq!(
        t.handle_packet(&[0, 5, 0, 8, b'x', 0], now),
        Handled::PeerError
    );
    assert_eq!(t.status(), Status::Declined(8));
    assert_eq!(t.handle_packet(&ack(0), now), Handled::Ignored);
    // Any other ERROR at the OACK is the client failing, not declining.
    let mut t = Transfer::new(file(100), &neg(8, 1, true), budget(3), now);
    drain(&mut t);
    t.handle_packet(&[0, 5, 0, 2, b'x', 0], now);
    assert_eq!(t.status(), Status::Failed(FailReason::PeerError(2)));
    // After ACK 0, the same ERROR aborts a transfer in progress.
    let mut t = Transfer::new(file(100), &neg(8, 1, true), budget(3), now);
    drain(&mut t);
    assert_eq!(t.handle_packet(&ack(0), now), Handled::Progress);
    assert_eq!(t.handle_packet(&[0, 5, 0, 0, 0], now), Handled::PeerError);
    assert_eq!(t.status(), Status::Failed(FailReason::PeerError(0)));
}

#[test]
fn malformed_and_unexpected_are_reported_not_fatal() {
    let now = Instant::now();
    let mut t = Transfer::new(file(100), &neg(8, 1, false), budget(3), now);
    drain(&mut t);
    assert_eq!(t.handle_packet(&[0], now), Handled::Malformed);
    assert_eq!(t.handle_packet(&[0, 3, 0, 1], now), Handled::Ignored);
    assert_eq!(t.status(), Status::Running);
}

#[test]
fn block_numbers_roll_over_to_zero() {
    let now = Instant::now();
    // 70_000 blocks of 8 octets.
    let mut t = Transfer::new(file(8 * 70_000), &neg(8, 16, false), budget(3), now);
    let mut last = 0u16;
    let mut blocks = 0u64;
    let mut out = Vec::new();
    for _ in 0..10_000 {
        while t.poll_transmit(&mut out) {
            last = u16::from_be_bytes([out[2], out[3]]);
            blocks += 1;
        }
        if t.handle_packet(&ack(last), now) != Handled::Progress {
            panic!("no progress at {last}");
        }
        if t.status() == Status::Done {
            break;
        }
    }
    assert_eq!(t.status(), Status::Done);
    assert_eq!(blocks, 70_001);
    assert_eq!(last, (70_001u64 % 65_536) as u16);
}

#[test]
fn netascii_conversion() {
    assert_eq!(to_netascii(b"a\nb\rc"), b"a\r\nb\r\0c");
}

#[test]
fn deadline_ends_a_progressing_transfer_with_an_error_packet() {
    let t0 = Instant::now();
    let lifetime = Duration::from_secs(10);
    let b = Budget {
        max_retries: 5,
        lifetime,
    };
    let mut t = Transfer::new(file(800), &neg(8, 1, false), b, t0);
    // A client that ACKs every block just before the retransmission timer: it always
    // progresses, so only the deadline stops it.
    let mut now = t0;
    let mut block = 0u16;
    while t.status() == Status::Running {
        assert_eq!(drain(&mut t), vec![u32::from(block) + 1]);
        let due = t.poll_timeout().unwrap();
        assert!(due <= t0 + lifetime, "timer beyond the deadline");
        now += Duration::from_millis(900);
        if now >= due {
            t.handle_timeout(due);
            break;
        }
        block += 1;
        assert_eq!(t.handle_packet(&ack(block), now), Handled::Progress);
    }
    assert_eq!(t.status(), Status::Failed(FailReason::Deadline));
    // The client is told (ERROR 0), once, and nothing more is sent or scheduled.
    assert_eq!(drain(&mut t), vec![0xffff_0000]);
    assert!(drain(&mut t).is_empty());
    assert!(t.poll_timeout().is_none());
    assert!(block >= 10, "only {block} blocks before the deadline");
}

#[test]
fn deadline_caps_the_retransmission_timer() {
    let t0 = Instant::now();
    let b = Budget {
        max_retries: 100,
        lifetime: Duration::from_millis(2500),
    };
    let mut t = Transfer::new(file(100), &neg(8, 1, false), b, t0);
    drain(&mut t);
    // 1 s, then 2 s backoff: the second wait would end past the deadline.
    t.handle_timeout(t.poll_timeout().unwrap());
    drain(&mut t);
    let due = t.poll_timeout().unwrap();
    assert_eq!(due, t0 + Duration::from_millis(2500));
    // Too early changes nothing; at the deadline the transfer fails.
    t.handle_timeout(due - Duration::from_millis(1));
    assert_eq!(t.status(), Status::Running);
    t.handle_timeout(due);
    assert_eq!(t.status(), Status::Failed(FailReason::Deadline));
    assert_eq!(drain(&mut t), vec![0xffff_0000]);
}

#[test]
fn eviction_fails_at_once_and_says_so() {
    let now = Instant::now();
    let mut t = Transfer::new(file(100), &neg(8, 1, true), budget(3), now);
    assert_eq!(drain(&mut t), vec![u32::MAX]);
    t.handle_eviction();
    assert_eq!(t.status(), Status::Failed(FailReason::Evicted));
    assert_eq!(drain(&mut t), vec![0xffff_0000]);
    assert!(t.poll_timeout().is_none());
    // A late ACK 0 does not revive it; a second eviction changes nothing.
    assert_eq!(t.handle_packet(&ack(0), now), Handled::Ignored);
    t.handle_eviction();
    assert!(drain(&mut t).is_empty());
}
