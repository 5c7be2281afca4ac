//! `powercut_fs MOUNTPOINT [--lenient-names]`: a FUSE file system that keeps only what was
//! fsynced, with a simulated power cut. A test tool for the lease store's durability, in the
//! spirit of LazyFS: it models a disk whose volatile cache is lost when the power goes.
//!
//! It mounts an empty in-memory file system at MOUNTPOINT, prints `mounted` once the mount is
//! ready, and serves it until SIGTERM or SIGINT (then it unmounts and prints `unmounted`).
//!
//! # What is durable
//!
//! Every inode has two versions: the *current* one (what reads and `stat` see) and the
//! *durable* one (what survives a power cut).
//!
//! * Writes, truncates (setattr size), fallocate, chmod/chown/utimes change only the current
//!   version. `flush` (close) and `release` make nothing durable.
//! * `fsync` and `fdatasync` of a file copy the file's current content, size and attributes to
//!   its durable version (fdatasync is treated like fsync).
//! * The namespace (create, mknod, mkdir, unlink, rmdir, rename) changes only the current
//!   entries of the directories involved. A directory's entries become durable when that
//!   directory is fsynced (FUSE fsyncdir, i.e. `fsync` on a directory fd): its whole current
//!   entry list, additions and removals alike, then replaces its durable one. A rename across
//!   two directories therefore needs both directories fsynced.
//! * A newly created inode is durable as an *empty* file or directory: if its name becomes
//!   durable (fsyncdir of its parent) but the file itself was never fsynced, it comes back
//!   empty after a cut, as on a journalling file system.
//!
//! ## Strict names (the default)
//!
//! Only fsyncdir persists directory entries. A file that was fsynced but whose name in its
//! parent was never made durable by an fsyncdir of that parent is lost at a cut (the same
//! applies to the parent's own name in its parent, up to the root).
//!
//! ## `--lenient-names` (or env `POWERCUT_LENIENT_NAMES=1`)
//!
//! ext4-like, what most software relies on: fsync of a file (or fsyncdir of a directory) in
//! addition makes the inode's *current path* durable: its own current name(s) in its parent,
//! and the parent's name in its parent, and so on up to the root, so the inode is reachable by
//! its current path after a cut. Stale durable names of those inodes in the same directories
//! (left by a rename) are dropped. Other entries of those directories keep their durable
//! state (an unrelated unlink or create is not persisted by it).
//!
//! # Power
//!
//! * `SIGUSR1` = power cut: atomically (under the file system's one lock) every non-durable
//!   change is thrown away: the current version of each inode becomes its durable one, and
//!   only the inodes reachable from the root through durable entries are kept. Open file
//!   handles are forgotten. From then on every operation answers `EIO` until power comes back.
//!   Prints `cut: kept <N> files, dropped <M> bytes unsynced, lost <K> inodes`.
//! * `SIGUSR2` = power on: operations are answered again, from the durable state only. Prints
//!   `power on`.
//!
//! # Kernel caches
//!
//! Files are opened with `FOPEN_DIRECT_IO` and entries and attributes are given a zero TTL, so
//! every read, write, lookup and stat reaches this process: nothing is served from the page
//! cache after a cut (shared writable mmap is therefore not supported; sled and redb use
//! pread/pwrite). No lock capability is claimed at FUSE init, so `flock` and `fcntl` locks are
//! handled by the kernel locally (sled's fcntl lock works).
//!
//! Inode numbers are never reused. Everything is owned by the creating uid/gid (root here);
//! the mount uses `default_permissions`. As root, fuser mounts with mount(2) directly and
//! needs neither libfuse nor `fusermount3`.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::ffi::{OsStr, OsString};
use std::io::Write as _;
use std::os::unix::ffi::OsStrExt as _;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime};

use fuser::{
    AccessFlags, BsdFileFlags, Config, Errno, FileAttr, FileHandle, FileType, FopenFlags,
    Generation, INodeNo, LockOwner, MountOption, OpenFlags, RenameFlags, ReplyAttr, ReplyCreate,
    ReplyData, ReplyDirectory, ReplyEmpty, ReplyEntry, ReplyOpen, ReplyStatfs, ReplyWrite, Request,
    Session, TimeOrNow, WriteFlags,
};

/// Entries and attributes are never cached by the kernel: every lookup and stat comes here.
const TTL: Duration = Duration::ZERO;
/// File content is kept in chunks shared (copy on write) between the current and durable
/// versions, so an fsync of a big file is cheap.
const CHUNK: usize = 64 * 1024;
const ROOT: u64 = 1;
const BLOCK: u64 = 4096;
/// The size reported by statfs: 64 GiB.
const TOTAL_BLOCKS: u64 = 16 * 1024 * 1024;
const TOTAL_INODES: u64 = 1 << 20;

/// Sparse, chunked file content. Invariant: bytes of a chunk past `size` are zero.
#[derive(Clone, Debug, Default)]
struct Content {
    size: u64,
    /// `ceil(size / CHUNK)` slots; `None` is a hole (zeros).
    chunks: Vec<Option<Arc<Vec<u8>>>>,
}

fn chunks_for(size: u64) -> usize {
    size.div_ceil(CHUNK as u64) as usize
}

impl Content {
    fn read(&self, offset: u64, len: usize) -> Vec<u8> {
        if offset >= self.size {
            return Vec::new();
        }
        let end = self.size.min(offset.saturating_add(len as u64));
        let mut out = Vec::with_capacity((end - offset) as usize);
        let mut pos = offset;
        while pos < end {
            let index = (pos / CHUNK as u64) as usize;
            let within = (pos % CHUNK as u64) as usize;
            let n = (CHUNK - within).min((end - pos) as usize);
            match self.chunks.get(index).and_then(Option::as_ref) {
                Some(chunk) => out.extend_from_slice(&chunk[within..within + n]),
                None => out.resize(out.len() + n, 0),
            }
            pos += n as u64;
        }
        out
    }

    fn write(&mut self, offset: u64, data: &[u8]) {
        if data.is_empty() {
            return;
        }
        let end = offset + data.len() as u64;
        if end > self.size {
            self.set_len(end);
        }
        let mut pos = offset;
        let mut done = 0;
        while done < data.len() {
            let index = (pos / CHUNK as u64) as usize;
            let within = (pos % CHUNK as u64) as usize;
            let n = (CHUNK - within).min(data.len() - done);
            let chunk = self.chunks[index].get_or_insert_with(|| Arc::new(vec![0; CHUNK]));
            Arc::make_mut(chunk)[within..within + n].copy_from_slice(&data[done..done + n]);
            pos += n as u64;
            done += n;
        }
    }

    fn set_len(&mut self, size: u64) {
        if size < self.size {
            self.chunks.truncate(chunks_for(size));
            let within = (size % CHUNK as u64) as usize;
            if within != 0 {
                if let Some(Some(chunk)) = self.chunks.last_mut() {
                    Arc::make_mut(chunk)[within..].fill(0);
                }
            }
        } else {
            self.chunks.resize(chunks_for(size), None);
        }
        self.size = size;
    }

    /// Zeroes `[offset, offset + len)` clipped to the size (punch hole / zero range).
    fn zero_range(&mut self, offset: u64, len: u64) {
        let end = self.size.min(offset.saturating_add(len));
        let mut pos = offset;
        while pos < end {
            let index = (pos / CHUNK as u64) as usize;
            let within = (pos % CHUNK as u64) as usize;
            let n = (CHUNK - within).min((end - pos) as usize);
            if n == CHUNK {
                self.chunks[index] = None;
            } else if let Some(chunk) = self.chunks[index].as_mut() {
                Arc::make_mut(chunk)[within..within + n].fill(0);
            }
            pos += n as u64;
        }
    }

    /// Allocated 512-byte blocks.
    fn blocks(&self) -> u64 {
        let allocated = self.chunks.iter().filter(|c| c.is_some()).count() as u64 * CHUNK as u64;
        allocated.min(self.size.div_ceil(BLOCK) * BLOCK) / 512
    }
}

#[derive(Clone, Debug)]
enum Body {
    File(Content),
    Dir(BTreeMap<OsString, u64>),
}

/// One version (current or durable) of an inode.
#[derive(Clone, Debug)]
struct Version {
    perm: u16,
    uid: u32,
    gid: u32,
    atime: SystemTime,
    mtime: SystemTime,
    ctime: SystemTime,
    body: Body,
}

impl Version {
    fn entries(&self) -> Option<&BTreeMap<OsString, u64>> {
        match &self.body {
            Body::Dir(entries) => Some(entries),
            Body::File(_) => None,
        }
    }
}

#[derive(Debug)]
struct Node {
    cur: Version,
    dur: Version,
    crtime: SystemTime,
    /// The directory that most recently got a current entry for this inode.
    parent: u64,
    /// Number of current directory entries naming this inode.
    links: u32,
    /// Bytes written or truncated since the last fsync (for the cut report).
    dirty_bytes: u64,
}

impl Node {
    fn is_dir(&self) -> bool {
        matches!(self.cur.body, Body::Dir(_))
    }
}

#[derive(Debug, Clone, Copy)]
struct CutReport {
    kept_files: usize,
    dropped_bytes: u64,
    lost_inodes: usize,
}

#[derive(Debug)]
struct State {
    nodes: HashMap<u64, Node>,
    next_ino: u64,
    /// Open file and directory handles: handle -> inode.
    handles: HashMap<u64, u64>,
    next_fh: u64,
    powered: bool,
    lenient: bool,
}

type Res<T> = Result<T, Errno>;

fn apply_time(t: TimeOrNow, now: SystemTime) -> SystemTime {
    match t {
        TimeOrNow::SpecificTime(t) => t,
        TimeOrNow::Now => now,
    }
}

impl State {
    fn new(lenient: bool) -> Self {
        let now = SystemTime::now();
        let root = Version {
            perm: 0o755,
            uid: nix::unistd::geteuid().as_raw(),
            gid: nix::unistd::getegid().as_raw(),
            atime: now,
            mtime: now,
            ctime: now,
            body: Body::Dir(BTreeMap::new()),
        };
        let mut nodes = HashMap::new();
        nodes.insert(
            ROOT,
            Node {
                dur: root.clone(),
                cur: root,
                crtime: now,
                parent: ROOT,
                links: 1,
                dirty_bytes: 0,
            },
        );
        State {
            nodes,
            next_ino: ROOT + 1,
            handles: HashMap::new(),
            next_fh: 1,
            powered: true,
            lenient,
        }
    }

    fn node(&self, ino: u64) -> Res<&Node> {
        self.nodes.get(&ino).ok_or(Errno::ESTALE)
    }

    fn node_mut(&mut self, ino: u64) -> Res<&mut Node> {
        self.nodes.get_mut(&ino).ok_or(Errno::ESTALE)
    }

    fn entries(&self, dir: u64) -> Res<&BTreeMap<OsString, u64>> {
        self.node(dir)?.cur.entries().ok_or(Errno::ENOTDIR)
    }

    fn entries_mut(&mut self, dir: u64) -> Res<&mut BTreeMap<OsString, u64>> {
        match &mut self.node_mut(dir)?.cur.body {
            Body::Dir(entries) => Ok(entries),
            Body::File(_) => Err(Errno::ENOTDIR),
        }
    }

    fn content_mut(&mut self, ino: u64) -> Res<&mut Content> {
        match &mut self.node_mut(ino)?.cur.body {
            Body::File(content) => Ok(content),
            Body::Dir(_) => Err(Errno::EISDIR),
        }
    }

    fn child(&self, dir: u64, name: &OsStr) -> Res<u64> {
        self.entries(dir)?.get(name).copied().ok_or(Errno::ENOENT)
    }

    fn attr(&self, ino: u64) -> Res<FileAttr> {
        let node = self.node(ino)?;
        let v = &node.cur;
        let (kind, size, blocks, nlink) = match &v.body {
            Body::File(content) => (
                FileType::RegularFile,
                content.size,
                content.blocks(),
                node.links,
            ),
            Body::Dir(entries) => {
                let subdirs = entries
                    .values()
                    .filter(|&&c| self.nodes.get(&c).is_some_and(Node::is_dir))
                    .count() as u32;
                (FileType::Directory, BLOCK, BLOCK / 512, 2 + subdirs)
            }
        };
        Ok(FileAttr {
            ino: INodeNo(ino),
            size,
            blocks,
            atime: v.atime,
            mtime: v.mtime,
            ctime: v.ctime,
            crtime: node.crtime,
            kind,
            perm: v.perm,
            nlink,
            uid: v.uid,
            gid: v.gid,
            rdev: 0,
            blksize: BLOCK as u32,
            flags: 0,
        })
    }

    fn touch_dir(&mut self, dir: u64) {
        if let Some(node) = self.nodes.get_mut(&dir) {
            let now = SystemTime::now();
            node.cur.mtime = now;
            node.cur.ctime = now;
        }
    }

    fn new_node(&mut self, req: &Request, parent: u64, perm: u32, dir: bool) -> u64 {
        let ino = self.next_ino;
        self.next_ino += 1;
        let now = SystemTime::now();
        let (cur_body, dur_body) = if dir {
            (Body::Dir(BTreeMap::new()), Body::Dir(BTreeMap::new()))
        } else {
            (
                Body::File(Content::default()),
                Body::File(Content::default()),
            )
        };
        let cur = Version {
            perm: (perm & 0o7777) as u16,
            uid: req.uid(),
            gid: req.gid(),
            atime: now,
            mtime: now,
            ctime: now,
            body: cur_body,
        };
        // Durable from birth as an empty file or directory with these attributes.
        let dur = Version {
            body: dur_body,
            ..cur.clone()
        };
        self.nodes.insert(
            ino,
            Node {
                cur,
                dur,
                crtime: now,
                parent,
                links: 0,
                dirty_bytes: 0,
            },
        );
        ino
    }

    /// Adds a current entry, replacing (and unlinking) whatever had that name.
    fn add_entry(&mut self, dir: u64, name: &OsStr, ino: u64) -> Res<()> {
        let old = self.entries_mut(dir)?.insert(name.to_owned(), ino);
        let node = self.node_mut(ino)?;
        node.links += 1;
        node.parent = dir;
        node.cur.ctime = SystemTime::now();
        self.touch_dir(dir);
        if let Some(old) = old {
            self.dropped_link(old);
        }
        Ok(())
    }

    fn remove_entry(&mut self, dir: u64, name: &OsStr) -> Res<u64> {
        let ino = self.entries_mut(dir)?.remove(name).ok_or(Errno::ENOENT)?;
        self.touch_dir(dir);
        self.dropped_link(ino);
        Ok(ino)
    }

    fn dropped_link(&mut self, ino: u64) {
        if let Some(node) = self.nodes.get_mut(&ino) {
            node.links = node.links.saturating_sub(1);
            node.cur.ctime = SystemTime::now();
        }
        self.maybe_forget(ino);
    }

    /// Frees an inode that no current entry, no durable entry and no open handle refers to.
    fn maybe_forget(&mut self, ino: u64) {
        if ino == ROOT {
            return;
        }
        let Some(node) = self.nodes.get(&ino) else {
            return;
        };
        if node.links > 0 || self.handles.values().any(|&i| i == ino) {
            return;
        }
        let durably_named = self
            .nodes
            .values()
            .filter_map(|n| n.dur.entries())
            .any(|entries| entries.values().any(|&i| i == ino));
        if !durably_named {
            self.nodes.remove(&ino);
        }
    }

    fn new_handle(&mut self, ino: u64) -> FileHandle {
        let fh = self.next_fh;
        self.next_fh += 1;
        self.handles.insert(fh, ino);
        FileHandle(fh)
    }

    fn release(&mut self, fh: FileHandle) {
        if let Some(ino) = self.handles.remove(&fh.0) {
            self.maybe_forget(ino);
        }
    }

    fn check_new_name(&self, parent: u64, name: &OsStr) -> Res<()> {
        if name.len() > 255 {
            return Err(Errno::ENAMETOOLONG);
        }
        if self.entries(parent)?.contains_key(name) {
            return Err(Errno::EEXIST);
        }
        Ok(())
    }

    fn make(
        &mut self,
        req: &Request,
        parent: u64,
        name: &OsStr,
        mode: u32,
        umask: u32,
        dir: bool,
    ) -> Res<u64> {
        self.check_new_name(parent, name)?;
        let ino = self.new_node(req, parent, mode & !umask, dir);
        self.add_entry(parent, name, ino)?;
        Ok(ino)
    }

    #[allow(clippy::too_many_arguments)]
    fn setattr(
        &mut self,
        ino: u64,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        ctime: Option<SystemTime>,
    ) -> Res<FileAttr> {
        let now = SystemTime::now();
        if let Some(size) = size {
            let content = self.content_mut(ino)?;
            let old = content.size;
            content.set_len(size);
            let node = self.node_mut(ino)?;
            node.dirty_bytes += old.abs_diff(size).max(1);
            node.cur.mtime = now;
        }
        let node = self.node_mut(ino)?;
        let v = &mut node.cur;
        if let Some(mode) = mode {
            v.perm = (mode & 0o7777) as u16;
        }
        if let Some(uid) = uid {
            v.uid = uid;
        }
        if let Some(gid) = gid {
            v.gid = gid;
        }
        if let Some(t) = atime {
            v.atime = apply_time(t, now);
        }
        if let Some(t) = mtime {
            v.mtime = apply_time(t, now);
        }
        v.ctime = ctime.unwrap_or(now);
        self.attr(ino)
    }

    fn rename(
        &mut self,
        parent: u64,
        name: &OsStr,
        newparent: u64,
        newname: &OsStr,
        flags: RenameFlags,
    ) -> Res<()> {
        let src = self.child(parent, name)?;
        self.entries(newparent)?;
        if newname.len() > 255 {
            return Err(Errno::ENAMETOOLONG);
        }
        let dst = self.entries(newparent)?.get(newname).copied();
        if flags.contains(RenameFlags::RENAME_WHITEOUT) {
            return Err(Errno::EINVAL);
        }
        if flags.contains(RenameFlags::RENAME_EXCHANGE) {
            let dst = dst.ok_or(Errno::ENOENT)?;
            self.entries_mut(parent)?.insert(name.to_owned(), dst);
            self.entries_mut(newparent)?.insert(newname.to_owned(), src);
            self.node_mut(src)?.parent = newparent;
            self.node_mut(dst)?.parent = parent;
            self.touch_dir(parent);
            self.touch_dir(newparent);
            return Ok(());
        }
        if let Some(dst) = dst {
            if flags.contains(RenameFlags::RENAME_NOREPLACE) {
                return Err(Errno::EEXIST);
            }
            if dst == src {
                return Ok(());
            }
            let src_dir = self.node(src)?.is_dir();
            let dst_node = self.node(dst)?;
            match (src_dir, dst_node.is_dir()) {
                (true, false) => return Err(Errno::ENOTDIR),
                (false, true) => return Err(Errno::EISDIR),
                (true, true) if !self.entries(dst)?.is_empty() => return Err(Errno::ENOTEMPTY),
                _ => {}
            }
        }
        // Unlink the source name first (the inode is still named by nothing, but keep it
        // alive: it gets its new name right away).
        self.entries_mut(parent)?.remove(name);
        let node = self.node_mut(src)?;
        node.links = node.links.saturating_sub(1);
        self.touch_dir(parent);
        self.add_entry(newparent, newname, src)
    }

    fn write(&mut self, ino: u64, offset: u64, data: &[u8]) -> Res<u32> {
        self.content_mut(ino)?.write(offset, data);
        let node = self.node_mut(ino)?;
        node.dirty_bytes += data.len() as u64;
        let now = SystemTime::now();
        node.cur.mtime = now;
        node.cur.ctime = now;
        Ok(data.len() as u32)
    }

    fn fallocate(&mut self, ino: u64, offset: u64, length: u64, mode: i32) -> Res<()> {
        let end = offset.checked_add(length).ok_or(Errno::EFBIG)?;
        let keep_size = mode & libc::FALLOC_FL_KEEP_SIZE != 0;
        let punch = mode & libc::FALLOC_FL_PUNCH_HOLE != 0;
        let zero = mode & libc::FALLOC_FL_ZERO_RANGE != 0;
        let known =
            libc::FALLOC_FL_KEEP_SIZE | libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_ZERO_RANGE;
        if mode & !known != 0 || (punch && (!keep_size || zero)) {
            return Err(Errno::EOPNOTSUPP);
        }
        let content = self.content_mut(ino)?;
        let old = content.size;
        if punch || zero {
            content.zero_range(offset, length);
        }
        if !keep_size && end > content.size {
            content.set_len(end);
        }
        let node = self.node_mut(ino)?;
        node.dirty_bytes += if punch || zero {
            length
        } else {
            end.saturating_sub(old)
        };
        node.cur.ctime = SystemTime::now();
        Ok(())
    }

    /// fsync / fdatasync of a file, fsyncdir of a directory: the inode's current version
    /// becomes durable (for a directory: its entries). Lenient: also its current path.
    fn sync(&mut self, ino: u64, want_dir: bool) -> Res<()> {
        let node = self.node_mut(ino)?;
        if want_dir && !node.is_dir() {
            return Err(Errno::ENOTDIR);
        }
        let old = std::mem::replace(&mut node.dur, node.cur.clone());
        node.dirty_bytes = 0;
        if self.lenient {
            self.persist_path(ino);
        }
        // Inodes whose last (durable) name this removed may now be freed.
        if let Some(old) = old.entries() {
            for &child in old.values() {
                self.maybe_forget(child);
            }
        }
        Ok(())
    }

    /// Lenient names: make `ino` reachable by its current path after a cut.
    fn persist_path(&mut self, ino: u64) {
        let mut child = ino;
        let mut seen = HashSet::new();
        while child != ROOT && seen.insert(child) {
            let Some(parent) = self.nodes.get(&child).map(|n| n.parent) else {
                return;
            };
            let Some(cur) = self
                .nodes
                .get(&parent)
                .and_then(|p| p.cur.entries())
                .cloned()
            else {
                return;
            };
            let names: Vec<OsString> = cur
                .iter()
                .filter(|(_, &i)| i == child)
                .map(|(n, _)| n.clone())
                .collect();
            if names.is_empty() {
                return; // unlinked: no current path
            }
            let Some(Body::Dir(dur)) = self.nodes.get_mut(&parent).map(|p| &mut p.dur.body) else {
                return;
            };
            dur.retain(|n, i| *i != child || cur.get(n) == Some(&child));
            for name in names {
                dur.insert(name, child);
            }
            child = parent;
        }
    }

    fn readdir(&self, ino: u64) -> Res<Vec<(u64, FileType, OsString)>> {
        let node = self.node(ino)?;
        let entries = node.cur.entries().ok_or(Errno::ENOTDIR)?;
        let mut out = Vec::with_capacity(entries.len() + 2);
        out.push((ino, FileType::Directory, OsString::from(".")));
        out.push((node.parent, FileType::Directory, OsString::from("..")));
        for (name, &child) in entries {
            let kind = if self.nodes.get(&child).is_some_and(Node::is_dir) {
                FileType::Directory
            } else {
                FileType::RegularFile
            };
            out.push((child, kind, name.clone()));
        }
        Ok(out)
    }

    /// The power cut: only what is durable and durably reachable from the root stays.
    fn cut(&mut self) -> CutReport {
        self.powered = false;
        let dropped_bytes = self.nodes.values().map(|n| n.dirty_bytes).sum();
        let mut reachable = HashSet::from([ROOT]);
        let mut stack = vec![ROOT];
        while let Some(ino) = stack.pop() {
            if let Some(entries) = self.nodes.get(&ino).and_then(|n| n.dur.entries()) {
                for &child in entries.values() {
                    if self.nodes.contains_key(&child) && reachable.insert(child) {
                        stack.push(child);
                    }
                }
            }
        }
        let before = self.nodes.len();
        self.nodes.retain(|ino, _| reachable.contains(ino));
        let lost_inodes = before - self.nodes.len();
        for node in self.nodes.values_mut() {
            node.cur = node.dur.clone();
            node.dirty_bytes = 0;
            node.links = 0;
        }
        self.nodes.get_mut(&ROOT).expect("root").links = 1;
        let mut names = Vec::new();
        for (&dir, node) in &self.nodes {
            if let Some(entries) = node.cur.entries() {
                names.extend(entries.values().map(|&child| (dir, child)));
            }
        }
        for (dir, child) in names {
            if let Some(node) = self.nodes.get_mut(&child) {
                node.links += 1;
                node.parent = dir;
            }
        }
        self.handles.clear();
        let kept_files = self.nodes.values().filter(|n| !n.is_dir()).count();
        CutReport {
            kept_files,
            dropped_bytes,
            lost_inodes,
        }
    }

    fn power_on(&mut self) {
        for node in self.nodes.values_mut() {
            node.cur = node.dur.clone();
        }
        self.powered = true;
    }

    fn used_blocks(&self) -> u64 {
        self.nodes
            .values()
            .map(|n| match &n.cur.body {
                Body::File(c) => c.size.div_ceil(BLOCK),
                Body::Dir(_) => 1,
            })
            .sum()
    }
}

#[derive(Debug, Clone)]
struct PowercutFs {
    state: Arc<Mutex<State>>,
}

fn lock(state: &Mutex<State>) -> MutexGuard<'_, State> {
    state
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl PowercutFs {
    /// Runs `f` under the lock, or fails with EIO while the power is off.
    fn with<T>(&self, f: impl FnOnce(&mut State) -> Res<T>) -> Res<T> {
        let mut state = lock(&self.state);
        if !state.powered {
            return Err(Errno::EIO);
        }
        f(&mut state)
    }
}

macro_rules! answer {
    ($reply:expr, $result:expr, |$v:pat_param| $ok:expr) => {
        match $result {
            Ok($v) => $ok,
            Err(e) => $reply.error(e),
        }
    };
}

impl fuser::Filesystem for PowercutFs {
    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let r = self.with(|st| st.attr(st.child(parent.0, name)?));
        answer!(reply, r, |attr| reply.entry(&TTL, &attr, Generation(0)));
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        let r = self.with(|st| st.attr(ino.0));
        answer!(reply, r, |attr| reply.attr(&TTL, &attr));
    }

    fn setattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        ctime: Option<SystemTime>,
        _fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        let r = self.with(|st| st.setattr(ino.0, mode, uid, gid, size, atime, mtime, ctime));
        answer!(reply, r, |attr| reply.attr(&TTL, &attr));
    }

    fn mknod(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        _rdev: u32,
        reply: ReplyEntry,
    ) {
        let r = self.with(|st| {
            if mode & libc::S_IFMT != libc::S_IFREG {
                return Err(Errno::EPERM);
            }
            let ino = st.make(req, parent.0, name, mode, umask, false)?;
            st.attr(ino)
        });
        answer!(reply, r, |attr| reply.entry(&TTL, &attr, Generation(0)));
    }

    fn mkdir(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        reply: ReplyEntry,
    ) {
        let r = self.with(|st| {
            let ino = st.make(req, parent.0, name, mode, umask, true)?;
            st.attr(ino)
        });
        answer!(reply, r, |attr| reply.entry(&TTL, &attr, Generation(0)));
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let r = self.with(|st| {
            let ino = st.child(parent.0, name)?;
            if st.node(ino)?.is_dir() {
                return Err(Errno::EISDIR);
            }
            st.remove_entry(parent.0, name).map(drop)
        });
        answer!(reply, r, |()| reply.ok());
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let r = self.with(|st| {
            let ino = st.child(parent.0, name)?;
            if !st.entries(ino)?.is_empty() {
                return Err(Errno::ENOTEMPTY);
            }
            st.remove_entry(parent.0, name).map(drop)
        });
        answer!(reply, r, |()| reply.ok());
    }

    fn rename(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        let r = self.with(|st| st.rename(parent.0, name, newparent.0, newname, flags));
        answer!(reply, r, |()| reply.ok());
    }

    fn open(&self, _req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        let r = self.with(|st| {
            if st.node(ino.0)?.is_dir() {
                return Err(Errno::EISDIR);
            }
            if flags.0 & libc::O_TRUNC != 0 {
                st.setattr(ino.0, None, None, None, Some(0), None, None, None)?;
            }
            Ok(st.new_handle(ino.0))
        });
        answer!(reply, r, |fh| reply.opened(fh, FopenFlags::FOPEN_DIRECT_IO));
    }

    fn create(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        let r = self.with(|st| {
            let ino = match st.child(parent.0, name) {
                Ok(_) if flags & libc::O_EXCL != 0 => return Err(Errno::EEXIST),
                Ok(ino) => {
                    if st.node(ino)?.is_dir() {
                        return Err(Errno::EISDIR);
                    }
                    if flags & libc::O_TRUNC != 0 {
                        st.setattr(ino, None, None, None, Some(0), None, None, None)?;
                    }
                    ino
                }
                Err(_) => st.make(req, parent.0, name, mode, umask, false)?,
            };
            Ok((st.attr(ino)?, st.new_handle(ino)))
        });
        answer!(reply, r, |(attr, fh)| reply.created(
            &TTL,
            &attr,
            Generation(0),
            fh,
            FopenFlags::FOPEN_DIRECT_IO
        ));
    }

    fn read(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        let r = self.with(|st| match &st.node(ino.0)?.cur.body {
            Body::File(content) => Ok(content.read(offset, size as usize)),
            Body::Dir(_) => Err(Errno::EISDIR),
        });
        answer!(reply, r, |data| reply.data(&data));
    }

    fn write(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        let r = self.with(|st| st.write(ino.0, offset, data));
        answer!(reply, r, |n| reply.written(n));
    }

    fn flush(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        // Closing makes nothing durable.
        let r = self.with(|st| st.node(ino.0).map(drop));
        answer!(reply, r, |()| reply.ok());
    }

    fn release(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        let r = self.with(|st| {
            st.release(fh);
            Ok(())
        });
        answer!(reply, r, |()| reply.ok());
    }

    fn fsync(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        let r = self.with(|st| st.sync(ino.0, false));
        answer!(reply, r, |()| reply.ok());
    }

    fn opendir(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        let r = self.with(|st| {
            st.entries(ino.0)?;
            Ok(st.new_handle(ino.0))
        });
        answer!(reply, r, |fh| reply.opened(fh, FopenFlags::empty()));
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        let r = self.with(|st| st.readdir(ino.0));
        answer!(reply, r, |list| {
            for (i, (child, kind, name)) in list.into_iter().enumerate().skip(offset as usize) {
                if reply.add(INodeNo(child), i as u64 + 1, kind, &name) {
                    break;
                }
            }
            reply.ok()
        });
    }

    fn releasedir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        reply: ReplyEmpty,
    ) {
        let r = self.with(|st| {
            st.release(fh);
            Ok(())
        });
        answer!(reply, r, |()| reply.ok());
    }

    fn fsyncdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        let r = self.with(|st| st.sync(ino.0, true));
        answer!(reply, r, |()| reply.ok());
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        let r = self.with(|st| Ok((st.used_blocks(), st.nodes.len() as u64)));
        answer!(reply, r, |(used, files)| {
            let free = TOTAL_BLOCKS.saturating_sub(used);
            let ffree = TOTAL_INODES.saturating_sub(files);
            reply.statfs(
                TOTAL_BLOCKS,
                free,
                free,
                TOTAL_INODES,
                ffree,
                BLOCK as u32,
                255,
                BLOCK as u32,
            )
        });
    }

    fn access(&self, _req: &Request, ino: INodeNo, _mask: AccessFlags, reply: ReplyEmpty) {
        // Root may do anything; the kernel checks modes itself (default_permissions).
        let r = self.with(|st| st.node(ino.0).map(drop));
        answer!(reply, r, |()| reply.ok());
    }

    fn fallocate(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        length: u64,
        mode: i32,
        reply: ReplyEmpty,
    ) {
        let r = self.with(|st| st.fallocate(ino.0, offset, length, mode));
        answer!(reply, r, |()| reply.ok());
    }
}

fn usage() -> ! {
    eprintln!("usage: powercut_fs MOUNTPOINT [--lenient-names]");
    eprintln!("  SIGUSR1: power cut (drop all unsynced state, then EIO), SIGUSR2: power on,");
    eprintln!(
        "  SIGTERM/SIGINT: unmount and exit. Env POWERCUT_LENIENT_NAMES=1 = --lenient-names."
    );
    std::process::exit(2);
}

fn say(line: &str) {
    let mut out = std::io::stdout().lock();
    // A test reads these lines; if it went away there is nobody to tell.
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

fn main() {
    let mut mountpoint: Option<PathBuf> = None;
    let mut lenient = std::env::var_os("POWERCUT_LENIENT_NAMES")
        .is_some_and(|v| !v.is_empty() && v.as_bytes() != b"0");
    for arg in std::env::args_os().skip(1) {
        match arg.to_str() {
            Some("--lenient-names") => lenient = true,
            Some("--strict-names") => lenient = false,
            Some("-h" | "--help") => usage(),
            Some(s) if s.starts_with('-') => usage(),
            _ if mountpoint.is_none() => mountpoint = Some(PathBuf::from(arg)),
            _ => usage(),
        }
    }
    let Some(mountpoint) = mountpoint else {
        usage()
    };

    // Block the signals before any thread starts (threads inherit the mask); the main thread
    // takes them synchronously below.
    use nix::sys::signal::{SigSet, Signal};
    let mut signals = SigSet::empty();
    for s in [
        Signal::SIGUSR1,
        Signal::SIGUSR2,
        Signal::SIGTERM,
        Signal::SIGINT,
    ] {
        signals.add(s);
    }
    if let Err(e) = signals.thread_block() {
        eprintln!("powercut_fs: blocking signals: {e}");
        std::process::exit(1);
    }

    let state = Arc::new(Mutex::new(State::new(lenient)));
    let fs = PowercutFs {
        state: state.clone(),
    };
    let mut config = Config::default();
    config.mount_options = vec![
        MountOption::FSName("powercut_fs".to_owned()),
        MountOption::Subtype("powercut".to_owned()),
        MountOption::DefaultPermissions,
        MountOption::RW,
    ];
    let session = match Session::new(fs, &mountpoint, &config) {
        Ok(session) => session,
        Err(e) => {
            eprintln!("powercut_fs: mounting {}: {e}", mountpoint.display());
            std::process::exit(1);
        }
    };
    let background = match session.spawn() {
        Ok(bg) => bg,
        Err(e) => {
            eprintln!("powercut_fs: starting the session: {e}");
            std::process::exit(1);
        }
    };
    let mode = if lenient { "lenient" } else { "strict" };
    eprintln!(
        "powercut_fs: serving {} ({mode} names)",
        mountpoint.display()
    );
    say("mounted");

    let timeout = libc::timespec {
        tv_sec: 0,
        tv_nsec: 200_000_000,
    };
    loop {
        // SAFETY: a valid signal set and timespec, no siginfo wanted.
        let signo = unsafe { libc::sigtimedwait(signals.as_ref(), std::ptr::null_mut(), &timeout) };
        if signo < 0 {
            if background.guard.is_finished() {
                // Unmounted from outside (umount, fusermount3 -u): nothing left to serve.
                eprintln!("powercut_fs: the file system was unmounted");
                let _ = background.join();
                say("unmounted");
                return;
            }
            continue;
        }
        match Signal::try_from(signo) {
            Ok(Signal::SIGUSR1) => {
                let report = lock(&state).cut();
                say(&format!(
                    "cut: kept {} files, dropped {} bytes unsynced, lost {} inodes",
                    report.kept_files, report.dropped_bytes, report.lost_inodes
                ));
            }
            Ok(Signal::SIGUSR2) => {
                lock(&state).power_on();
                say("power on");
            }
            _ => break,
        }
    }

    let canonical = mountpoint.canonicalize().unwrap_or(mountpoint);
    match background.umount_and_join() {
        Ok(()) => say("unmounted"),
        Err(e) => {
            // Busy (a process still has a file open or its cwd there): detach it lazily; the
            // kernel aborts the connection once this process has exited.
            eprintln!("powercut_fs: unmount failed ({e}); detaching lazily");
            if let Ok(path) = std::ffi::CString::new(canonical.as_os_str().as_bytes()) {
                // SAFETY: a valid NUL-terminated path.
                unsafe { libc::umount2(path.as_ptr(), libc::MNT_DETACH) };
            }
            say("unmounted");
            std::process::exit(0);
        }
    }
}
