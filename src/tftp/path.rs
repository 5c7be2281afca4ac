//! Path confinement: which file, if any, a requested name may open.
//!
//! Two steps. [`confine`] is pure and lexical (the rule itself is the leaf
//! [`crate::confine`], shared with config): it turns the raw request bytes into a clean
//! relative path or refuses them. [`open_confined`] walks that path below the root on
//! disk and applies the symlink rule below, then opens and `fstat`s the result.
//!
//! # Symlink rule
//!
//! TFTP clients cannot create files here (write requests are refused), so every link in
//! the root was placed by the administrator or a package. Debian's `ipxe` package, for
//! one, ships `/usr/lib/ipxe/ipxe.efi -> /boot/ipxe.efi`. The rule serves such files but
//! never exposes a directory tree outside the root:
//!
//! 1. Every *directory* component must be a real directory: a symlinked directory is
//!    refused wherever it points (`root/etc -> /etc` exposes nothing).
//! 2. The *final* component may be a symlink only if its fully resolved target lies
//!    under the root or under one of the configured `link_targets` directories
//!    (default `/boot`, for Debian's layout). A link to `/etc/shadow` is refused.
//! 3. Whatever is opened must be a regular file (checked with `fstat` on the open
//!    descriptor, so no device, FIFO, socket or directory), opened with `O_NOFOLLOW`
//!    (a link swapped in after the check is refused) and `O_NONBLOCK` (a FIFO cannot
//!    stall the opener).

use std::fs::{File, Metadata};
use std::io;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use super::packet::ErrorCode;
use crate::confine::BadName;

/// Why a request was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// The name itself breaks the lexical rule ([`crate::confine`]).
    #[error(transparent)]
    Name(#[from] BadName),
    /// A directory component is a symlink (rule 1).
    #[error("symlinked directory")]
    SymlinkDir,
    /// A final symlink resolves outside the root and the allow-list (rule 2).
    #[error("symlink target outside the root")]
    SymlinkEscape,
    /// Not a regular file (rule 3).
    #[error("not a regular file")]
    NotRegular,
    /// Larger than `max_file_size`.
    #[error("file too large")]
    TooLarge,
    /// No such file.
    #[error("file not found")]
    NotFound,
    /// The OS denied access.
    #[error("permission denied")]
    PermissionDenied,
    /// Another I/O failure.
    #[error("i/o error")]
    Io,
}

impl Refusal {
    /// The TFTP error sent to the client. Messages are fixed strings: nothing from the
    /// request or the file system is echoed.
    pub fn wire(self) -> (ErrorCode, &'static str) {
        match self {
            Refusal::NotFound => (ErrorCode::FileNotFound, "file not found"),
            Refusal::TooLarge => (ErrorCode::AllocationExceeded, "file too large"),
            Refusal::Io => (ErrorCode::NotDefined, "read error"),
            _ => (ErrorCode::AccessViolation, "access violation"),
        }
    }

    /// A stable label for metrics.
    pub fn label(self) -> &'static str {
        match self {
            Refusal::Name(b) => b.label(),
            Refusal::SymlinkDir => "symlink_dir",
            Refusal::SymlinkEscape => "symlink_escape",
            Refusal::NotRegular => "not_regular",
            Refusal::TooLarge => "too_large",
            Refusal::NotFound => "not_found",
            Refusal::PermissionDenied => "permission_denied",
            Refusal::Io => "io",
        }
    }

    /// True for refusals that indicate a probing or hostile name rather than a
    /// plain missing file.
    pub fn is_policy(self) -> bool {
        !matches!(self, Refusal::NotFound | Refusal::Io | Refusal::TooLarge)
    }
}

/// Lexically confines a requested name to a relative path below the root: the rule of
/// [`crate::confine::confine`], refused with a [`Refusal`] so that name and file system
/// refusals share one metric and one wire error.
pub fn confine(requested: &[u8], root_prefix: &str, max_len: usize) -> Result<String, Refusal> {
    crate::confine::confine(requested, root_prefix, max_len).map_err(Refusal::from)
}

fn io_refusal(e: &io::Error) -> Refusal {
    match e.kind() {
        io::ErrorKind::NotFound => Refusal::NotFound,
        io::ErrorKind::PermissionDenied => Refusal::PermissionDenied,
        _ if e.raw_os_error() == Some(libc::ENOTDIR) => Refusal::NotFound,
        _ if e.raw_os_error() == Some(libc::ELOOP) => Refusal::SymlinkEscape,
        _ => Refusal::Io,
    }
}

/// An opened, checked file.
#[derive(Debug)]
pub struct Opened {
    /// The open descriptor.
    pub file: File,
    /// `fstat` of the descriptor.
    pub meta: Metadata,
    /// The real path opened (symlink resolved), the cache key.
    pub real: PathBuf,
}

/// Opens `rel` (the output of [`confine`] or an alias target) below `root` under the
/// symlink rule in the module docs. `link_targets` are directories a final symlink may
/// point into. Blocking: call from a blocking context.
pub fn open_confined(root: &Path, rel: &str, link_targets: &[PathBuf]) -> Result<Opened, Refusal> {
    let root = root.canonicalize().map_err(|e| io_refusal(&e))?;
    let comps: Vec<&str> = rel.split('/').collect();
    let (last, dirs) = comps.split_last().ok_or(Refusal::Name(BadName::Empty))?;
    let mut cur = root.clone();
    for d in dirs {
        cur.push(d);
        let m = cur.symlink_metadata().map_err(|e| io_refusal(&e))?;
        if m.file_type().is_symlink() {
            return Err(Refusal::SymlinkDir);
        }
        if !m.is_dir() {
            return Err(Refusal::NotFound);
        }
    }
    cur.push(last);
    let m = cur.symlink_metadata().map_err(|e| io_refusal(&e))?;
    let real = if m.file_type().is_symlink() {
        let target = cur.canonicalize().map_err(|e| io_refusal(&e))?;
        let inside = target.starts_with(&root)
            || link_targets
                .iter()
                .filter_map(|t| t.canonicalize().ok())
                .any(|t| target.starts_with(t));
        if !inside {
            return Err(Refusal::SymlinkEscape);
        }
        target
    } else {
        cur
    };
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(&real)
        .map_err(|e| io_refusal(&e))?;
    let meta = file.metadata().map_err(|e| io_refusal(&e))?;
    if !meta.is_file() {
        return Err(Refusal::NotRegular);
    }
    Ok(Opened { file, meta, real })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    #[test]
    fn name_refusals_keep_their_meaning() {
        // The lexical table itself is tested in `crate::confine`.
        assert_eq!(
            confine(b"../x", "/srv/tftp", 255),
            Err(Refusal::Name(BadName::DotDot))
        );
        assert_eq!(
            confine(b"/srv/tftp/a", "/srv/tftp", 255).as_deref(),
            Ok("a")
        );
    }

    struct Tree {
        _dir: tempfile::TempDir,
        root: PathBuf,
        allowed: PathBuf,
    }

    fn tree() -> Tree {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("root");
        let allowed = dir.path().join("boot");
        std::fs::create_dir_all(root.join("sub")).unwrap();
        std::fs::create_dir_all(&allowed).unwrap();
        std::fs::write(root.join("snponly.efi"), b"efi").unwrap();
        std::fs::write(root.join("sub/f"), b"f").unwrap();
        std::fs::write(allowed.join("ipxe.efi"), b"ipxe").unwrap();
        std::fs::write(dir.path().join("secret"), b"secret").unwrap();
        symlink(allowed.join("ipxe.efi"), root.join("ipxe.efi")).unwrap();
        symlink("snponly.efi", root.join("alias.efi")).unwrap();
        symlink("/etc", root.join("etc")).unwrap();
        symlink("/etc/passwd", root.join("passwd")).unwrap();
        symlink("/dev/null", root.join("null")).unwrap();
        symlink(dir.path().join("secret"), root.join("secret")).unwrap();
        symlink("sub", root.join("subdir-link")).unwrap();
        symlink("missing", root.join("dangling")).unwrap();
        symlink("loop", root.join("loop")).unwrap();
        let fifo =
            std::ffi::CString::new(root.join("fifo").as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: a valid NUL-terminated path; mkfifo has no other preconditions.
        assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o400) }, 0);
        Tree {
            _dir: dir,
            root,
            allowed,
        }
    }

    #[test]
    fn filesystem_table() {
        use Refusal::*;
        let t = tree();
        let allow = vec![t.allowed.clone()];
        let cases: Vec<(&str, Result<&[u8], Refusal>)> = vec![
            ("snponly.efi", Ok(b"efi")),
            ("sub/f", Ok(b"f")),
            // Rule 2: final symlink into an allowed directory, or inside the root.
            ("ipxe.efi", Ok(b"ipxe")),
            ("alias.efi", Ok(b"efi")),
            // Rule 1: symlinked directories are refused wherever they point.
            ("etc/passwd", Err(SymlinkDir)),
            ("etc/shadow", Err(SymlinkDir)),
            ("subdir-link/f", Err(SymlinkDir)),
            // Rule 2: final symlinks escaping the root.
            ("passwd", Err(SymlinkEscape)),
            ("secret", Err(SymlinkEscape)),
            ("null", Err(SymlinkEscape)),
            ("loop", Err(SymlinkEscape)),
            // Rule 3: only regular files.
            ("fifo", Err(NotRegular)),
            ("sub", Err(NotRegular)),
            ("missing", Err(NotFound)),
            ("dangling", Err(NotFound)),
            ("snponly.efi/x", Err(NotFound)),
        ];
        for (rel, want) in cases {
            let got = open_confined(&t.root, rel, &allow).map(|o| std::fs::read(o.real).unwrap());
            assert_eq!(got.as_deref().map_err(|e| *e), want, "{rel}");
        }
        // Without the allow-list Debian's ipxe.efi link is refused.
        assert_eq!(
            open_confined(&t.root, "ipxe.efi", &[]).unwrap_err(),
            SymlinkEscape
        );
    }

    #[test]
    fn device_node_in_root_is_refused() {
        // SAFETY: geteuid cannot fail.
        if unsafe { libc::geteuid() } != 0 {
            eprintln!("skipping device_node_in_root_is_refused: needs root for mknod");
            return;
        }
        let t = tree();
        let dev = t.root.join("null-dev");
        let path = std::ffi::CString::new(dev.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: a valid NUL-terminated path; (1, 3) is /dev/null's device number.
        let rc = unsafe { libc::mknod(path.as_ptr(), libc::S_IFCHR | 0o400, libc::makedev(1, 3)) };
        assert_eq!(rc, 0);
        assert_eq!(
            open_confined(&t.root, "null-dev", &[]).unwrap_err(),
            Refusal::NotRegular
        );
    }
}
