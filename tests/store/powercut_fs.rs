//! The power-cut file system (examples/powercut_fs.rs) keeps exactly what was fsynced.
//!
//! Runs the example binary, which tests/run.sh builds (`cargo build --example powercut_fs`)
//! before the suite, at `target/<profile>/examples/powercut_fs`. Needs root and /dev/fuse:
//! without them the tests fail, they do not skip.
//!
//! Each case writes some files with and without fsync, cuts the power (SIGUSR1), checks that
//! the file system answers EIO, powers it on again (SIGUSR2) and checks what survived:
//!
//! * strict names (default): only fsyncdir persists directory entries, so a directory whose
//!   own name in the root was never fsynced is gone with everything in it, even a file in it
//!   that was fsynced;
//! * `--lenient-names`: fsync of a file also persists its current path, so that file and its
//!   directory survive.

use std::collections::BTreeSet;
use std::fs::{self, File, OpenOptions};
use std::io::{ErrorKind, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::path::Path;

use crate::common;

use common::powercut::PowercutFs;

fn write_file(path: &Path, data: &[u8], sync: bool) {
    let mut f = File::create(path).unwrap_or_else(|e| panic!("create {}: {e}", path.display()));
    f.write_all(data).expect("write");
    if sync {
        f.sync_all().expect("fsync");
    }
}

/// fsync on a directory fd: FUSE fsyncdir.
fn sync_dir(path: &Path) {
    File::open(path)
        .and_then(|d| d.sync_all())
        .unwrap_or_else(|e| panic!("fsync dir {}: {e}", path.display()));
}

fn names(dir: &Path) -> BTreeSet<String> {
    fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("read_dir {}: {e}", dir.display()))
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect()
}

fn set(items: &[&str]) -> BTreeSet<String> {
    items.iter().map(|s| s.to_string()).collect()
}

fn assert_gone(path: &Path) {
    match fs::metadata(path) {
        Err(e) if e.kind() == ErrorKind::NotFound => {}
        other => panic!(
            "{} should be gone after the cut, got {other:?}",
            path.display()
        ),
    }
}

fn assert_eio<T: std::fmt::Debug>(what: &str, r: std::io::Result<T>) {
    match r {
        Err(e) if e.raw_os_error() == Some(libc::EIO) => {}
        other => panic!("{what} while the power is off should fail with EIO, got {other:?}"),
    }
}

const A_SYNCED: &[u8] = b"alpha: synced\n";
const A_APPEND: &[u8] = b"alpha: unsynced append\n";

fn scenario(lenient: bool) {
    let fs = PowercutFs::start(lenient);
    let (a, b, e, g) = (fs.path("A"), fs.path("B"), fs.path("E"), fs.path("G"));
    let (d, c) = (fs.path("D"), fs.path("D/C"));
    let (p, q) = (fs.path("P"), fs.path("P/Q"));

    // Phase 1, made durable: A (fsync), E (fdatasync), P/Q (fsync Q, fsyncdir P), then the
    // root's entries (fsyncdir of the root). The root is not fsynced again after this.
    write_file(&a, A_SYNCED, true);
    {
        let f = OpenOptions::new()
            .read(true)
            .write(true)
            .open(&a)
            .expect("open A");
        // sled takes an fcntl lock on its file: the kernel handles it locally.
        // SAFETY: a zeroed flock is a valid argument; the fd is open.
        let mut lock: libc::flock = unsafe { std::mem::zeroed() };
        lock.l_type = libc::F_WRLCK as libc::c_short;
        lock.l_whence = libc::SEEK_SET as libc::c_short;
        let rc = unsafe { libc::fcntl(f.as_raw_fd(), libc::F_SETLK, &lock as *const libc::flock) };
        assert_eq!(rc, 0, "fcntl F_SETLK: {}", std::io::Error::last_os_error());
    }
    {
        let mut f = File::create(&e).expect("create E");
        f.write_all(b"echo\n").expect("write E");
        f.sync_data().expect("fdatasync E");
    }
    fs::create_dir(&p).expect("mkdir P");
    write_file(&q, b"quebec\n", true);
    sync_dir(&p);
    sync_dir(&fs.mnt);

    // Phase 2, never made durable (except C's content).
    write_file(&b, b"bravo: never synced\n", false);
    fs::create_dir(&d).expect("mkdir D");
    write_file(&c, b"charlie: fsynced, D never fsynced\n", true);
    fs::rename(&e, &g).expect("rename E -> G");
    {
        let mut f = OpenOptions::new().append(true).open(&a).expect("open A");
        f.write_all(A_APPEND).expect("append A");
    }
    {
        // Writes past the end leave a hole of zeros; truncation works.
        let f = File::create(fs.path("holes")).expect("create holes");
        f.write_at(b"x", 100_000).expect("write_at");
        let data = fs::read(fs.path("holes")).expect("read holes");
        assert_eq!(data.len(), 100_001);
        assert!(data[..100_000].iter().all(|&b| b == 0));
        assert_eq!(data[100_000], b'x');
        f.set_len(10).expect("truncate");
        assert_eq!(fs::metadata(fs.path("holes")).expect("stat").len(), 10);
    }

    // Before the cut the current state shows everything.
    assert_eq!(fs::read(&a).expect("read A"), [A_SYNCED, A_APPEND].concat());
    assert_eq!(
        fs::read(&c).expect("read C"),
        b"charlie: fsynced, D never fsynced\n"
    );
    assert_eq!(names(&fs.mnt), set(&["A", "B", "D", "G", "P", "holes"]));
    let held = File::open(&a).expect("open A across the cut");

    let report = fs.cut();
    assert!(report.starts_with("cut: kept "), "{report}");
    assert_eio("stat", fs::metadata(&a));
    assert_eio("read on an open fd", held.read_at(&mut [0u8; 8], 0));
    assert_eio("create", File::create(fs.path("new")));
    assert_eio("readdir", fs::read_dir(&fs.mnt));
    drop(held);
    fs.power_on();

    // A keeps exactly its fsynced content: the unsynced append is gone.
    assert_eq!(fs::read(&a).expect("read A"), A_SYNCED);
    // B was never fsynced, nor was the root after it was created.
    assert_gone(&b);
    assert_gone(&fs.path("holes"));
    // The rename was never persisted (no fsyncdir; lenient names persist only on fsync).
    assert_eq!(fs::read(&e).expect("read E"), b"echo\n");
    assert_gone(&g);
    // P/Q: content fsynced, P's entries fsynced, P named in the durable root.
    assert_eq!(fs::read(&q).expect("read P/Q"), b"quebec\n");
    if lenient {
        // fsync of C made its path durable: C in D, and D in the root.
        assert_eq!(
            fs::read(&c).expect("read D/C"),
            b"charlie: fsynced, D never fsynced\n"
        );
        assert_eq!(names(&fs.mnt), set(&["A", "D", "E", "P"]));
    } else {
        // Strict: D's name in the root was never fsynced, so D and C (fsynced or not) are gone.
        assert_gone(&d);
        assert_gone(&c);
        assert_eq!(names(&fs.mnt), set(&["A", "E", "P"]));
    }

    // Powered again: the file system works as before.
    write_file(&fs.path("after"), b"after power on\n", false);
    assert_eq!(
        fs::read(fs.path("after")).expect("read after"),
        b"after power on\n"
    );

    fs.stop();
}

#[test]
fn strict_names_keep_only_fsynced_files_and_fsynced_dir_entries() {
    scenario(false);
}

#[test]
fn lenient_names_keep_the_path_of_an_fsynced_file() {
    scenario(true);
}
