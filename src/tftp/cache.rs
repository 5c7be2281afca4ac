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
//! machine. Netascii requests get the converted form, cached the same way beside the
//! octets (same identity, same budget), so conversion too happens once per file version.

use std::collections::HashMap;
use std::io::Read;
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use super::path::{Opened, Refusal};
use super::transfer::to_netascii;

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

/// Which form of a file an entry holds. Netascii is cached beside the octets, under
/// the same identity, so a rack of netascii clients costs one conversion per file
/// version rather than one copy per transfer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Form {
    Octet,
    Netascii,
}

type Key = (PathBuf, Form);

#[derive(Debug)]
struct Entry {
    id: Identity,
    data: Arc<[u8]>,
    last_used: u64,
}

#[derive(Debug, Default)]
struct Inner {
    map: HashMap<Key, Entry>,
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

/// What [`FileCache::load_netascii`] returns.
#[derive(Debug)]
pub struct Converted {
    /// The file in netascii.
    pub data: Arc<[u8]>,
    /// `None` when the converted form came from the cache; otherwise it was converted
    /// now, from octets that came from here.
    pub converted_from: Option<Source>,
}

/// Octets of a file and whether they are known to match the identity they were asked
/// for (so may be cached under it).
type Loaded = (Arc<[u8]>, Source, bool);

/// A bounded cache of file contents keyed by real path.
#[derive(Debug)]
pub struct FileCache {
    max_bytes: u64,
    inner: Mutex<Inner>,
    /// One lock per file and form being read or converted, so concurrent misses wait
    /// for the first one and then hit.
    loading: Mutex<HashMap<Key, Arc<Mutex<()>>>>,
}

impl FileCache {
    /// An empty cache holding at most `max_bytes` of file data (both forms together).
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

    /// The cached contents under `key` with this identity, if any.
    fn hit(&self, key: &Key, id: Identity) -> Option<Arc<[u8]>> {
        let mut inner = self.lock();
        inner.tick += 1;
        let tick = inner.tick;
        let e = inner.map.get_mut(key).filter(|e| e.id == id)?;
        e.last_used = tick;
        Some(e.data.clone())
    }

    /// Runs `f` holding the per-key gate, so only one caller at a time reads or
    /// converts a given file form; the others wait and then find it cached.
    fn gated<T>(&self, key: &Key, f: impl FnOnce() -> T) -> T {
        let gate = {
            let mut loading = self.loading.lock().unwrap_or_else(|p| p.into_inner());
            loading.entry(key.clone()).or_default().clone()
        };
        let result = {
            let _held = gate.lock().unwrap_or_else(|p| p.into_inner());
            f()
        };
        // Clones of the gate are only made and dropped under this lock, so a count of 1
        // (the map's own) means nobody else holds or waits on it.
        let mut loading = self.loading.lock().unwrap_or_else(|p| p.into_inner());
        drop(gate);
        if loading.get(key).is_some_and(|g| Arc::strong_count(g) == 1) {
            loading.remove(key);
        }
        result
    }

    /// Returns the contents of an opened file, from memory when unchanged. Blocking:
    /// may read the file, or wait for another request reading it.
    pub fn load(&self, opened: Opened) -> Result<(Arc<[u8]>, Source), Refusal> {
        self.load_octets(opened)
            .map(|(data, source, _)| (data, source))
    }

    fn load_octets(&self, opened: Opened) -> Result<Loaded, Refusal> {
        let id = Identity::of(&opened.meta);
        let key = (opened.real.clone(), Form::Octet);
        if let Some(data) = self.hit(&key, id) {
            return Ok((data, Source::Hit, true));
        }
        if id.size > self.max_bytes {
            // Never cached, so waiting for another reader would gain nothing.
            return self.read(opened, id);
        }
        self.gated(&key, || {
            // Whoever held the gate before may have just cached this very file.
            match self.hit(&key, id) {
                Some(data) => Ok((data, Source::Hit, true)),
                None => self.read(opened, id),
            }
        })
    }

    /// Returns an opened file converted to netascii (RFC 1350 §5), from memory when the
    /// file is unchanged. The converted form is cached like the octets, under the same
    /// identity and budget; one too large for the budget is converted per request, as
    /// a file too large is read per request. Blocking, like [`FileCache::load`].
    pub fn load_netascii(&self, opened: Opened) -> Result<Converted, Refusal> {
        let id = Identity::of(&opened.meta);
        let key = (opened.real.clone(), Form::Netascii);
        if let Some(data) = self.hit(&key, id) {
            return Ok(Converted {
                data,
                converted_from: None,
            });
        }
        let convert = |opened: Opened| {
            if let Some(data) = self.hit(&key, id) {
                return Ok(Converted {
                    data,
                    converted_from: None,
                });
            }
            let (octets, source, fresh) = self.load_octets(opened)?;
            let data: Arc<[u8]> = to_netascii(&octets).into();
            if fresh {
                self.insert(key.clone(), id, data.clone());
            }
            Ok(Converted {
                data,
                converted_from: Some(source),
            })
        };
        if id.size > self.max_bytes {
            // Its netascii form is at least as large: never cached, so no gate.
            return convert(opened);
        }
        self.gated(&key, || convert(opened))
    }

    /// Reads an opened file and caches it when it fits and did not change meanwhile.
    fn read(&self, opened: Opened, id: Identity) -> Result<Loaded, Refusal> {
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
        if unchanged {
            self.insert((opened.real, Form::Octet), id, data.clone());
        }
        Ok((data, Source::Miss, unchanged))
    }

    /// Caches `data` under `key` if it fits the budget, evicting least recently used
    /// entries (of either form) to make room.
    fn insert(&self, key: Key, id: Identity, data: Arc<[u8]>) {
        let size = data.len() as u64;
        if size > self.max_bytes {
            return;
        }
        let mut inner = self.lock();
        if let Some(old) = inner.map.remove(&key) {
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
            key,
            Entry {
                id,
                data,
                last_used: tick,
            },
        );
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

    #[test]
    fn netascii_form_is_converted_once_and_follows_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("menu.txt");
        std::fs::write(&p, b"a\nb\n").unwrap();
        let c = FileCache::new(1 << 20);
        let get = || {
            c.load_netascii(open_confined(dir.path(), "menu.txt", &[]).unwrap())
                .unwrap()
        };
        let first = get();
        assert_eq!(&first.data[..], b"a\r\nb\r\n");
        assert_eq!(first.converted_from, Some(Source::Miss));
        let again = get();
        assert_eq!(again.converted_from, None);
        // Shared, not copied.
        assert!(Arc::ptr_eq(&first.data, &again.data));
        // Octets and netascii are both counted against the budget.
        assert_eq!(c.bytes(), 4 + 6);
        std::thread::sleep(std::time::Duration::from_millis(20));
        std::fs::write(&p, b"c\n").unwrap();
        let changed = get();
        assert_eq!(&changed.data[..], b"c\r\n");
        assert_eq!(changed.converted_from, Some(Source::Miss));
        assert_eq!(c.bytes(), 2 + 3);
    }

    #[test]
    fn concurrent_netascii_loads_convert_once() {
        let dir = tempfile::tempdir().unwrap();
        let data: Vec<u8> = (0..1u32 << 20).map(|i| (i % 97) as u8 + 5).collect();
        std::fs::write(dir.path().join("text"), &data).unwrap();
        let c = FileCache::new(64 << 20);
        let start = std::sync::Barrier::new(16);
        let conversions = std::thread::scope(|s| {
            let handles: Vec<_> = (0..16)
                .map(|_| {
                    s.spawn(|| {
                        let opened = open_confined(dir.path(), "text", &[]).unwrap();
                        start.wait();
                        c.load_netascii(opened).unwrap().converted_from
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().unwrap())
                .filter(Option::is_some)
                .count()
        });
        assert_eq!(conversions, 1);
        assert!(c.loading.lock().unwrap().is_empty());
    }

    #[test]
    fn netascii_larger_than_the_budget_is_served_not_kept() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("t"), [b'\n'; 60]).unwrap();
        // The octets fit, their netascii form (120) does not.
        let c = FileCache::new(100);
        let conv = c
            .load_netascii(open_confined(dir.path(), "t", &[]).unwrap())
            .unwrap();
        assert_eq!(conv.data.len(), 120);
        assert_eq!(c.bytes(), 60);
    }
}
