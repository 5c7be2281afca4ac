//! TFTP datagram decoding and what a read request leads to: `Packet::decode` never
//! panics, and the options of any decoded request go through `options::negotiate`
//! (under tight and loose limits, for several file sizes) and the file name through
//! `path::confine`, whose results must stay within their stated bounds.
#![no_main]

use std::time::Duration;

use libfuzzer_sys::fuzz_target;
use shardboot::config::{BLKSIZE_RANGE, WINDOWSIZE_RANGE};
use shardboot::tftp::options::{negotiate, Limits, TIMEOUT_RANGE};
use shardboot::tftp::packet::{Packet, Request};
use shardboot::tftp::path::confine;

fn check(req: &Request<'_>) {
    for limits in [
        Limits {
            max_blksize: 512,
            max_windowsize: 1,
            default_timeout: Duration::from_secs(1),
            max_timeout_secs: 255,
        },
        Limits {
            max_blksize: *BLKSIZE_RANGE.end() as u16,
            max_windowsize: *WINDOWSIZE_RANGE.end() as u16,
            default_timeout: Duration::from_secs(5),
            max_timeout_secs: 5,
        },
    ] {
        for size in [
            0,
            1,
            511,
            512,
            1 << 20,
            u64::from(u32::MAX) * 1024,
            u64::MAX,
        ] {
            let n = negotiate(&req.options, &limits, size);
            assert!(n.blksize >= 8 && n.blksize <= limits.max_blksize.max(512));
            assert!(n.windowsize >= 1 && n.windowsize <= limits.max_windowsize.max(1));
            let secs = n.timeout.as_secs();
            assert!(
                (TIMEOUT_RANGE.contains(&secs) && secs <= limits.max_timeout_secs)
                    || n.timeout == limits.default_timeout
            );
        }
    }
    for prefix in ["", "pxelinux/"] {
        if let Ok(name) = confine(req.filename, prefix, 255) {
            assert!(
                !name.split('/').any(|c| c.is_empty() || c.starts_with('.')),
                "{name:?}"
            );
            assert!(!name.starts_with('/'), "{name:?}");
        }
    }
}

fuzz_target!(|data: &[u8]| {
    match Packet::decode(data) {
        Ok(Packet::Read(req)) | Ok(Packet::Write(req)) => check(&req),
        _ => {}
    }
});
