//! Path confinement: which file, if any, a requested name may open.
//!
//! Two steps. [`confine`] is pure and lexical: it turns the raw request bytes into a
//! clean relative path or refuses them. [`open_confined`] walks that path below the root
//! on disk and applies the symlink rule below, then opens and `fstat`s the result.
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

/// Deepest directory nesting a request may name.
pub const MAX_DEPTH: usize = 16;

/// Why a request was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// Nothing left after normalisation (`""`, `/`, `.`).
    #[error("empty file name")]
    Empty,
    /// Longer than the configured cap.
    #[error("file name too long")]
    TooLong,
    /// NUL, other C0 controls or DEL.
    #[error("control character in file name")]
    ControlChar,
    /// Outside the accepted character set (non-ASCII, space, `%`, `:`, quotes, ...).
    #[error("character not allowed in file name")]
    BadChar,
    /// A `..` component.
    #[error("parent directory component")]
    DotDot,
    /// A component starting with `.` (hidden files).
    #[error("hidden file component")]
    Hidden,
    /// More than [`MAX_DEPTH`] components.
    #[error("path too deep")]
    TooDeep,
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
            Refusal::Empty => "empty",
            Refusal::TooLong => "too_long",
            Refusal::ControlChar => "control_char",
            Refusal::BadChar => "bad_char",
            Refusal::DotDot => "dot_dot",
            Refusal::Hidden => "hidden",
            Refusal::TooDeep => "too_deep",
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

fn allowed_byte(b: u8) -> bool {
    // No URL decoding ever happens, and `%` is refused outright so an encoded `..`
    // cannot reach some later decoder. `:` is refused so `C:\...` is never special.
    b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-' | b'+' | b'~' | b',' | b'=' | b'@')
}

/// Lexically confines a requested name to a relative path below the root.
///
/// - `\` is a separator too (Windows-heritage PXE stacks send `boot\x64\...`).
/// - A leading `root_prefix/` is stripped (dnsmasq accepts absolute names inside its
///   root), then leading `/`s (many firmwares send `/snponly.efi`): an absolute name
///   always maps *into* the root, it never escapes it.
/// - Empty and `.` components vanish; `..` and hidden (`.x`) components are refused.
/// - Bytes are limited to ASCII letters, digits and `._-+~,=@` plus separators.
pub fn confine(requested: &[u8], root_prefix: &str, max_len: usize) -> Result<String, Refusal> {
    if requested.len() > max_len {
        return Err(Refusal::TooLong);
    }
    if let Some(&b) = requested
        .iter()
        .find(|&&b| !allowed_byte(b) && b != b'/' && b != b'\\')
    {
        return Err(if b < 0x20 || b == 0x7f {
            Refusal::ControlChar
        } else {
            Refusal::BadChar
        });
    }
    // Only allowed ASCII remains, so this cannot fail.
    let text: String = requested
        .iter()
        .map(|&b| if b == b'\\' { '/' } else { char::from(b) })
        .collect();
    let prefix = root_prefix.trim_end_matches('/');
    let mut rest = text.as_str();
    if !prefix.is_empty() {
        if let Some(r) = rest.strip_prefix(prefix) {
            if r.starts_with('/') {
                rest = r;
            }
        }
    }
    let mut parts: Vec<&str> = Vec::new();
    for comp in rest.split('/') {
        match comp {
            "" | "." => continue,
            ".." => return Err(Refusal::DotDot),
            c if c.starts_with('.') => return Err(Refusal::Hidden),
            c => parts.push(c),
        }
        if parts.len() > MAX_DEPTH {
            return Err(Refusal::TooDeep);
        }
    }
    if parts.is_empty() {
        return Err(Refusal::Empty);
    }
    Ok(parts.join("/"))
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
    let (last, dirs) = comps.split_last().ok_or(Refusal::Empty)?;
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

    const ROOT: &str = "/srv/tftp";

    fn c(req: &[u8]) -> Result<String, Refusal> {
        confine(req, ROOT, 255)
    }

    #[test]
    fn lexical_table() {
        use Refusal::*;
        let long = "a".repeat(256);
        let deep = "a/".repeat(MAX_DEPTH + 1) + "f";
        let cases: Vec<(&[u8], Result<&str, Refusal>)> = vec![
            // Accepted and normalised.
            (b"snponly.efi", Ok("snponly.efi")),
            (b"/snponly.efi", Ok("snponly.efi")),
            (b"//snponly.efi", Ok("snponly.efi")),
            (b"./snponly.efi", Ok("snponly.efi")),
            (b"a/./b", Ok("a/b")),
            (b"boot\\x64\\wdsnbp.com", Ok("boot/x64/wdsnbp.com")),
            (b"/srv/tftp/undionly.kpxe", Ok("undionly.kpxe")),
            (b"/srv/tftpx/undionly.kpxe", Ok("srv/tftpx/undionly.kpxe")),
            (
                b"pxelinux.cfg/01-52-54-00-12-34-56",
                Ok("pxelinux.cfg/01-52-54-00-12-34-56"),
            ),
            // Absolute names map into the root: /etc/passwd becomes root/etc/passwd.
            (b"/etc/passwd", Ok("etc/passwd")),
            // Refused.
            (b"", Err(Empty)),
            (b"/", Err(Empty)),
            (b".", Err(Empty)),
            (b"..", Err(DotDot)),
            (b"../etc/passwd", Err(DotDot)),
            (b"../../../../../../etc/shadow", Err(DotDot)),
            (b"a/../../etc/passwd", Err(DotDot)),
            (b"a/..", Err(DotDot)),
            (b"/../etc/passwd", Err(DotDot)),
            (b"/srv/tftp/../../etc/passwd", Err(DotDot)),
            (b"..\\..\\etc\\passwd", Err(DotDot)),
            (b"a\\..\\..\\etc", Err(DotDot)),
            (b"....//etc/passwd", Err(Hidden)),
            (b".hidden", Err(Hidden)),
            (b"a/.ssh/id_rsa", Err(Hidden)),
            (b"%2e%2e%2fetc%2fpasswd", Err(BadChar)),
            (b"..%2f..%2fetc%2fpasswd", Err(BadChar)),
            (b"%252e%252e/etc", Err(BadChar)),
            (b"C:\\Windows\\win.ini", Err(BadChar)),
            (b"file name", Err(BadChar)),
            (b"caf\xc3\xa9", Err(BadChar)),
            (b"\xc0\xae\xc0\xae/etc/passwd", Err(BadChar)),
            (b"ipxe.efi\0../../etc/passwd", Err(ControlChar)),
            (b"ipxe\n.efi", Err(ControlChar)),
            (b"ipxe\x1b[2J", Err(ControlChar)),
            (b"ipxe\x7f", Err(ControlChar)),
            (long.as_bytes(), Err(TooLong)),
            (deep.as_bytes(), Err(TooDeep)),
        ];
        assert!(cases.len() >= 25);
        for (req, want) in cases {
            let got = c(req);
            assert_eq!(
                got.as_deref().map_err(|e| *e),
                want,
                "request {:?}",
                String::from_utf8_lossy(req)
            );
        }
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
