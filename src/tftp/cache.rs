//! In-memory file cache: boot binaries are small and hot, so each is read once and
//! shared by every transfer (TFTP and HTTP, through [`super::FileRoot`]) as an `Arc`.
//!
//! Freshness: every request `fstat`s the file it opened (see [`super::path`]); an entry
//! is reused only while device, inode, size, mtime and ctime all match, so a replaced
//! or rewritten file is picked up on the next request. Memory: entries are evicted
//! least-recently-used to stay under `max_bytes`; a file larger than that is read for
//! its transfer and not kept. Transfers hold their own `Arc`, so eviction never pulls
//! data from under a running transfer. Concurrent misses on one file read it once: a
//! rack powering on right after a boot file changed would otherwise hold one copy per
//! machine.

use std::collections::HashMap;
use std::io::Read;
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use super::path::{Opened, Refusal};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Identity {
    dev: u64,
    ino: u64,
    size: u64,
    mtime: (i64, i64),
    ctime: (i64, i64),
}

impl Identity {
    fn of(m: &std::fs::Metadata) -> Self {
        Identity {
            dev: m.dev(),
            ino: m.ino(),
            size: m.size(),
            mtime: (m.mtime(), m.mtime_nsec()),
            ctime: (m.ctime(), m.ctime_nsec()),
        }
    }
}

#[derive(Debug)]
struct Entry {
    id: Identity,
    data: Arc<[u8]>,
    last_used: u64,
}

#[derive(Debug, Default)]
struct Inner {
    map: HashMap<PathBuf, Entry>,
    bytes: u64,
    tick: u64,
}

/// Whether a load was served from memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// Served from the cache.
    Hit,
    /// Read from disk.
    Miss,
}

/// A bounded cache of file contents keyed by real path.
#[derive(Debug)]
pub struct FileCache {
    max_bytes: u64,
    inner: Mutex<Inner>,
    /// One lock per file being read from disk, so concurrent misses wait for the
    /// first reader and then hit.
    loading: Mutex<HashMap<PathBuf, Arc<Mutex<()>>>>,
}

impl FileCache {
    /// An empty cache holding at most `max_bytes` of file data.
    pub fn new(max_bytes: u64) -> Self {
        FileCache {
            max_bytes,
            inner: Mutex::new(Inner::default()),
            loading: Mutex::new(HashMap::new()),
        }
    }

    /// Octets currently cached.
    pub fn bytes(&self) -> u64 {
        self.lock().bytes
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // A panic while holding the lock cannot leave the map inconsistent in a way
        // that matters (worst case a stale byte count), so keep serving.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The cached contents of the file with this identity, if any.
    fn hit(&self, real: &PathBuf, id: Identity) -> Option<Arc<[u8]>> {
        let mut inner = self.lock();
        inner.tick += 1;
        let tick = inner.tick;
        let e = inner.map.get_mut(real).filter(|e| e.id == id)?;
        e.last_used = tick;
        Some(e.data.clone())
    }

    /// Returns the contents of an opened file, from memory when unchanged. Blocking:
    /// may read the file, or wait for another request reading it.
    pub fn load(&self, opened: Opened) -> Result<(Arc<[u8]>, Source), Refusal> {
        let id = Identity::of(&opened.meta);
        if let Some(data) = self.hit(&opened.real, id) {
            return Ok((data, Source::Hit));
        }
        if id.size > self.max_bytes {
            // Never cached, so waiting for another reader would gain nothing.
            return self.read(opened, id);
        }
        let real = opened.real.clone();
        let gate = {
            let mut loading = self.loading.lock().unwrap_or_else(|p| p.into_inner());
            loading.entry(opened.real.clone()).or_default().clone()
        };
        let result = {
            let _reading = gate.lock().unwrap_or_else(|p| p.into_inner());
            // Whoever held the gate before may have just cached this very file.
            match self.hit(&opened.real, id) {
                Some(data) => Ok((data, Source::Hit)),
                None => self.read(opened, id),
            }
        };
        // Clones of the gate are only made and dropped under this lock, so a count of 1
        // (the map's own) means nobody else holds or waits on it.
        let mut loading = self.loading.lock().unwrap_or_else(|p| p.into_inner());
        drop(gate);
        if loading
            .get(&real)
            .is_some_and(|g| Arc::strong_count(g) == 1)
        {
            loading.remove(&real);
        }
        result
    }

    /// Reads an opened file and caches it when it fits and did not change meanwhile.
    fn read(&self, opened: Opened, id: Identity) -> Result<(Arc<[u8]>, Source), Refusal> {
        // Read outside the cache lock so one slow disk read does not stall other files.
        let mut buf = Vec::with_capacity(id.size as usize);
        let mut file = opened.file;
        file.by_ref()
            .take(id.size)
            .read_to_end(&mut buf)
            .map_err(|_| Refusal::Io)?;
        let data: Arc<[u8]> = buf.into();
        // If the file changed while we read it, serve what we read but do not cache it
        // under an identity it may not match.
        let unchanged = file
            .metadata()
            .map(|m| Identity::of(&m) == id)
            .unwrap_or(false);
        let size = data.len() as u64;
        if unchanged && size <= self.max_bytes {
            let mut inner = self.lock();
            if let Some(old) = inner.map.remove(&opened.real) {
                inner.bytes -= old.data.len() as u64;
            }
            while inner.bytes + size > self.max_bytes {
                let Some(victim) = inner
                    .map
                    .iter()
                    .min_by_key(|(_, e)| e.last_used)
                    .map(|(k, _)| k.clone())
                else {
                    break;
                };
                if let Some(old) = inner.map.remove(&victim) {
                    inner.bytes -= old.data.len() as u64;
                }
            }
            let tick = inner.tick;
            inner.bytes += size;
            inner.map.insert(
                opened.real,
                Entry {
                    id,
                    data: data.clone(),
                    last_used: tick,
                },
            );
        }
        Ok((data, Source::Miss))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tftp::path::open_confined;

    fn load(c: &FileCache, root: &std::path::Path, rel: &str) -> (Vec<u8>, Source) {
        let (d, s) = c.load(open_confined(root, rel, &[]).unwrap()).unwrap();
        (d.to_vec(), s)
    }

    #[test]
    fn hits_then_reloads_on_change() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        std::fs::write(&p, b"one").unwrap();
        let c = FileCache::new(1 << 20);
        assert_eq!(load(&c, dir.path(), "f"), (b"one".to_vec(), Source::Miss));
        assert_eq!(load(&c, dir.path(), "f"), (b"one".to_vec(), Source::Hit));
        // Same size, new content: ctime/mtime change is enough.
        std::thread::sleep(std::time::Duration::from_millis(20));
        std::fs::write(&p, b"two").unwrap();
        assert_eq!(load(&c, dir.path(), "f"), (b"two".to_vec(), Source::Miss));
        assert_eq!(c.bytes(), 3);
    }

    #[test]
    fn stays_under_budget_evicting_lru() {
        let dir = tempfile::tempdir().unwrap();
        for n in ["a", "b", "c"] {
            std::fs::write(dir.path().join(n), [0u8; 40]).unwrap();
        }
        std::fs::write(dir.path().join("big"), [0u8; 200]).unwrap();
        let c = FileCache::new(100);
        load(&c, dir.path(), "a");
        load(&c, dir.path(), "b");
        load(&c, dir.path(), "a");
        load(&c, dir.path(), "c"); // evicts b
        assert_eq!(c.bytes(), 80);
        assert_eq!(load(&c, dir.path(), "a").1, Source::Hit);
        assert_eq!(load(&c, dir.path(), "b").1, Source::Miss);
        // Too big to cache, still served.
        assert_eq!(load(&c, dir.path(), "big").0.len(), 200);
        assert_eq!(load(&c, dir.path(), "big").1, Source::Miss);
        assert!(c.bytes() <= 100);
    }

    #[test]
    fn concurrent_misses_on_one_file_read_it_once() {
        let dir = tempfile::tempdir().unwrap();
        let data: Vec<u8> = (0..8u32 << 20).map(|i| (i % 251) as u8).collect();
        std::fs::write(dir.path().join("snp.efi"), &data).unwrap();
        let c = FileCache::new(64 << 20);
        let start = std::sync::Barrier::new(32);
        let sources: Vec<Source> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..32)
                .map(|_| {
                    s.spawn(|| {
                        let opened = open_confined(dir.path(), "snp.efi", &[]).unwrap();
                        start.wait();
                        let (d, src) = c.load(opened).unwrap();
                        assert!(d[..] == data[..]);
                        src
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let misses = sources.iter().filter(|s| **s == Source::Miss).count();
        assert_eq!(misses, 1, "{sources:?}");
        assert!(c.loading.lock().unwrap().is_empty());
    }
}
