//! The timeline on disk, so a restart keeps it: a snapshot and a journal, both JSON
//! lines, in `<state_dir>/timeline/`.
//!
//! The writer appends each batch of new events to `journal.jsonl` (one `fsync` per
//! batch, off the packet path: recording only pushes to a list the writer takes).
//! Once the journal holds as many events as both rings, it is compacted: what the files
//! hold, kept by the writer in a private [`Timeline`] with the same limits (so the rule
//! that strangers never evict known machines holds on disk too), is written out as the
//! new snapshot (a temporary file, `fsync`, rename), and the journal is emptied. The
//! running timeline is never locked for it, and the files are never read again while
//! running: the private copy is fed each batch as it is appended (reading both files
//! back at every compaction was a third of a DHCP exchange's CPU in a boot storm). On
//! disk: at most the snapshot (what memory keeps) plus a journal of as many events
//! again, about 2 x 250 octets per event; in memory, the private copy is as large as the
//! running timeline.
//!
//! Reading back skips what cannot be parsed (a line torn by a power cut, a file from
//! elsewhere) and counts it; an event seen twice (a crash between the snapshot's
//! rename and the journal's truncation) is put back once.

use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::IpAddr;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::{clean, intern, Event, Journaled, Limits, Source, Timeline};
use crate::mac::MacAddr;

/// The directory in the state directory.
pub const DIR: &str = "timeline";
const SNAPSHOT: &str = "snapshot.jsonl";
const JOURNAL: &str = "journal.jsonl";
/// Largest file read back: far above what the limits write, so only a foreign file
/// is cut short.
const MAX_FILE: u64 = 512 * 1024 * 1024;

/// Why the timeline cannot be kept on disk.
#[derive(Debug, thiserror::Error)]
pub enum DiskError {
    /// A file or the directory.
    #[error("timeline on disk, {}: {source}", path.display())]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> DiskError + '_ {
    move |source| DiskError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// One line as written.
#[derive(Serialize)]
struct LineOut<'a> {
    mac: MacAddr,
    known: bool,
    #[serde(flatten)]
    event: &'a Event,
}

/// One line as read: text fields owned until they are checked.
#[derive(Deserialize)]
struct LineIn {
    mac: MacAddr,
    known: bool,
    seq: u64,
    at_ms: u64,
    source: Source,
    what: String,
    outcome: String,
    why: Option<String>,
    ip: Option<IpAddr>,
    detail: Option<String>,
}

impl LineIn {
    fn into_journaled(self) -> Journaled {
        Journaled {
            mac: self.mac,
            known: self.known,
            event: Event {
                seq: self.seq,
                at_ms: self.at_ms,
                source: self.source,
                what: intern::label(&self.what),
                outcome: intern::label(&self.outcome),
                why: self.why.as_deref().map(intern::label),
                ip: self.ip,
                // Escaped when recorded; escaped again in case the file was edited.
                detail: self.detail.as_deref().map(clean),
            },
        }
    }
}

/// `events` as JSON lines.
pub fn encode(events: &[Journaled]) -> Vec<u8> {
    let mut out = Vec::with_capacity(events.len() * 200);
    encode_into(&mut out, events);
    out
}

/// `events` as JSON lines, after what `out` holds.
fn encode_into(out: &mut Vec<u8>, events: &[Journaled]) {
    for j in events {
        let line = LineOut {
            mac: j.mac,
            known: j.known,
            event: &j.event,
        };
        // Serialising our own types to a Vec cannot fail.
        if serde_json::to_writer(&mut *out, &line).is_ok() {
            out.push(b'\n');
        }
    }
}

/// The events of a file's text, and how many lines could not be read.
pub fn decode(text: impl BufRead) -> (Vec<Journaled>, usize) {
    let (mut out, mut bad) = (Vec::new(), 0);
    for line in text.split(b'\n') {
        let Ok(line) = line else {
            bad += 1;
            break;
        };
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        match serde_json::from_slice::<LineIn>(&line) {
            Ok(l) => out.push(l.into_journaled()),
            Err(_) => bad += 1,
        }
    }
    (out, bad)
}

/// What reading the files back found.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Loaded {
    /// Events put back.
    pub events: usize,
    /// Lines that could not be read.
    pub unreadable: usize,
}

fn read_file(path: &Path) -> Result<(Vec<Journaled>, usize), DiskError> {
    match File::open(path) {
        Ok(f) => Ok(decode(BufReader::new(f.take(MAX_FILE)))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok((Vec::new(), 0)),
        Err(e) => Err(io(path)(e)),
    }
}

/// Puts the snapshot and then the journal in `dir` back into `timeline`, in seq order,
/// each event once.
pub fn load_into(dir: &Path, timeline: &Timeline) -> Result<Loaded, DiskError> {
    let (mut events, bad_snapshot) = read_file(&dir.join(SNAPSHOT))?;
    let (journal, bad_journal) = read_file(&dir.join(JOURNAL))?;
    events.extend(journal);
    events.sort_by_key(|j| j.event.seq);
    events.dedup_by_key(|j| j.event.seq);
    let n = events.len();
    for j in events {
        timeline.replay(j);
    }
    Ok(Loaded {
        events: n,
        unreadable: bad_snapshot + bad_journal,
    })
}

/// The files of one member's timeline, open for appending.
#[derive(Debug)]
pub struct Disk {
    dir: PathBuf,
    journal: File,
    /// Events in the journal.
    journaled: usize,
    limits: Limits,
    /// What the files hold (snapshot and journal, as reading them back would give):
    /// the next snapshot.
    written: Timeline,
    /// The newest event written: one seen again (the same batch twice) is not kept
    /// twice, as reading back puts it back once.
    last_seq: u64,
    /// The journal lines of a batch, their room used again from one batch to the next.
    text: Vec<u8>,
}

impl Disk {
    /// Opens (creating) `dir` and its journal, reading back what the files hold;
    /// `limits` are the timeline's, which a compaction keeps.
    pub fn open(dir: &Path, limits: Limits) -> Result<(Self, Loaded), DiskError> {
        std::fs::create_dir_all(dir).map_err(io(dir))?;
        let written = Timeline::new(limits);
        let loaded = load_into(dir, &written)?;
        let path = dir.join(JOURNAL);
        let journal = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .map_err(io(&path))?;
        // Roughly: a compaction soon after start is harmless.
        let len = journal.metadata().map_err(io(&path))?.len();
        let disk = Self {
            dir: dir.to_path_buf(),
            journal,
            journaled: (len / 200) as usize,
            limits,
            last_seq: written.last_seq(),
            written,
            text: Vec::new(),
        };
        Ok((disk, loaded))
    }

    /// What the files hold, oldest first: to put back into the running timeline at
    /// start-up ([`Timeline::replay`]).
    pub fn events(&self) -> Vec<Journaled> {
        let mut events = self.written.export();
        events.sort_by_key(|j| j.event.seq);
        events
    }

    /// Appends `batch` and makes it durable; compacts once the journal holds as many
    /// events as both rings. `batch` is left empty, its room kept for the next one;
    /// events that could not be written are dropped (the writer says so in the log).
    pub fn append(&mut self, batch: &mut Vec<Journaled>) -> Result<(), DiskError> {
        if batch.is_empty() {
            return Ok(());
        }
        let path = self.dir.join(JOURNAL);
        self.text.clear();
        encode_into(&mut self.text, batch);
        let written = self
            .journal
            .write_all(&self.text)
            .and_then(|()| self.journal.sync_data())
            .map_err(io(&path));
        if written.is_err() {
            batch.clear();
            return written;
        }
        self.journaled += batch.len();
        for j in batch.drain(..) {
            if j.event.seq > self.last_seq {
                self.last_seq = j.event.seq;
                self.written.replay(j);
            }
        }
        if self.journaled >= self.limits.known_events + self.limits.unknown_events {
            self.compact()?;
        }
        Ok(())
    }

    /// Rewrites the snapshot from what the files hold, then empties the journal.
    pub fn compact(&mut self) -> Result<(), DiskError> {
        let text = encode(&self.written.export());
        let (tmp, snapshot) = (self.dir.join("snapshot.tmp"), self.dir.join(SNAPSHOT));
        let mut f = File::create(&tmp).map_err(io(&tmp))?;
        f.write_all(&text)
            .and_then(|()| f.sync_all())
            .map_err(io(&tmp))?;
        std::fs::rename(&tmp, &snapshot).map_err(io(&snapshot))?;
        File::open(&self.dir)
            .and_then(|d| d.sync_all())
            .map_err(io(&self.dir))?;
        // After the rename: a crash in between leaves events in both files, which
        // reading back puts back once.
        let path = self.dir.join(JOURNAL);
        self.journal
            .set_len(0)
            .and_then(|()| self.journal.sync_all())
            .map_err(io(&path))?;
        self.journaled = 0;
        Ok(())
    }

    /// Octets on disk (snapshot and journal).
    pub fn size(&self) -> u64 {
        [SNAPSHOT, JOURNAL]
            .iter()
            .filter_map(|f| std::fs::metadata(self.dir.join(f)).ok())
            .map(|m| m.len())
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use std::net::Ipv4Addr;

    use super::super::Report;
    use super::*;

    fn report(outcome: &'static str, ip: Option<Ipv4Addr>) -> Report {
        Report {
            source: Source::Dhcp,
            what: "DISCOVER",
            outcome,
            why: (outcome == "silent").then_some("not_responsible"),
            ip: ip.map(IpAddr::V4),
            detail: Some("boot snponly.efi\u{1b}".into()),
        }
    }

    fn small() -> Limits {
        Limits {
            per_machine: 8,
            known_events: 40,
            unknown_events: 20,
        }
    }

    const A: MacAddr = MacAddr([0x52, 0x54, 0, 0, 0, 1]);

    fn flush(t: &Timeline, d: &mut Disk) {
        let (mut batch, dropped) = t.take_journal(Vec::new());
        assert_eq!(dropped, 0);
        d.append(&mut batch).unwrap();
        assert!(batch.is_empty());
    }

    #[test]
    fn a_restart_reads_back_what_was_recorded_and_carries_on_numbering() {
        let dir = tempfile::tempdir().unwrap();
        let t = Timeline::new(small());
        t.configure(small(), true);
        let (mut d, _) = Disk::open(dir.path(), small()).unwrap();
        let ip = Ipv4Addr::new(192, 0, 2, 10);
        t.record_at(A, report("offer", Some(ip)), 1);
        t.record_at(A, report("ack", Some(ip)), 2);
        flush(&t, &mut d);
        let before = t.events(&A, 0);

        let again = Timeline::new(small());
        let loaded = load_into(dir.path(), &again).unwrap();
        assert_eq!(
            loaded,
            Loaded {
                events: 2,
                unreadable: 0
            }
        );
        assert_eq!(again.events(&A, 0), before);
        // TFTP still finds the machine by the address it was given.
        assert!(again.record_for_ip(
            ip,
            Report {
                source: Source::Tftp,
                ..report("complete", None)
            }
        ));
        assert_eq!(again.events(&A, 0).last().unwrap().seq, 3);
    }

    #[test]
    fn compaction_bounds_the_files_and_strangers_never_push_out_a_known_machine() {
        let dir = tempfile::tempdir().unwrap();
        let t = Timeline::new(small());
        t.configure(small(), true);
        let (mut d, _) = Disk::open(dir.path(), small()).unwrap();
        t.record_at(A, report("ack", Some(Ipv4Addr::new(192, 0, 2, 10))), 1);
        flush(&t, &mut d);
        let mut biggest = 0;
        for n in 0..2_000u32 {
            let mac = MacAddr([6, 0, 0, (n >> 16) as u8, (n >> 8) as u8, n as u8]);
            t.record_at(mac, report("silent", None), 10 + u64::from(n));
            if n % 7 == 0 {
                flush(&t, &mut d);
                biggest = biggest.max(d.size());
            }
        }
        flush(&t, &mut d);
        // Two rings' worth of lines at most, each well under 300 octets.
        assert!(biggest < 2 * 60 * 300, "{biggest}");
        let again = Timeline::new(small());
        load_into(dir.path(), &again).unwrap();
        assert_eq!(again.events(&A, 0).len(), 1, "the known machine survived");
        assert!(again.len() <= 60);
    }

    #[test]
    fn a_torn_or_foreign_line_is_skipped_and_a_duplicate_put_back_once() {
        let dir = tempfile::tempdir().unwrap();
        let t = Timeline::new(small());
        t.configure(small(), true);
        let (mut d, _) = Disk::open(dir.path(), small()).unwrap();
        t.record_at(A, report("offer", None), 1);
        let (batch, _) = t.take_journal(Vec::new());
        d.append(&mut batch.clone()).unwrap();
        // The same event again (a crash before the journal was emptied), a line of
        // markup, and a line cut short.
        d.append(&mut batch.clone()).unwrap();
        let mut f = OpenOptions::new()
            .append(true)
            .open(dir.path().join(JOURNAL))
            .unwrap();
        f.write_all(b"<script>alert(1)</script>\n{\"mac\":\"52:54:00:00:00:01\",\"kno")
            .unwrap();
        let again = Timeline::new(small());
        let loaded = load_into(dir.path(), &again).unwrap();
        assert_eq!(
            loaded,
            Loaded {
                events: 1,
                unreadable: 2
            }
        );
        let ev = again.events(&A, 0);
        assert_eq!(ev.len(), 1);
        assert_eq!(ev[0].detail.as_deref(), Some("boot snponly.efi\\u{1b}"));
    }
}
