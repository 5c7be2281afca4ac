//! Lexical confinement of a requested file name: turns raw request bytes into a clean
//! relative path below a root, or refuses them.
//!
//! Pure (no file system), and a leaf module, so that `config` normalises TFTP aliases
//! with exactly the rule TFTP and HTTP apply to requests. Opening the result on disk,
//! with the symlink rule, is `tftp::path::open_confined`.

/// Deepest directory nesting a request may name.
pub const MAX_DEPTH: usize = 16;

/// Why a name was refused before any file was looked at.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum BadName {
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
}

impl BadName {
    /// A stable label for metrics.
    pub fn label(self) -> &'static str {
        match self {
            BadName::Empty => "empty",
            BadName::TooLong => "too_long",
            BadName::ControlChar => "control_char",
            BadName::BadChar => "bad_char",
            BadName::DotDot => "dot_dot",
            BadName::Hidden => "hidden",
            BadName::TooDeep => "too_deep",
        }
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
pub fn confine(requested: &[u8], root_prefix: &str, max_len: usize) -> Result<String, BadName> {
    if requested.len() > max_len {
        return Err(BadName::TooLong);
    }
    if let Some(&b) = requested
        .iter()
        .find(|&&b| !allowed_byte(b) && b != b'/' && b != b'\\')
    {
        return Err(if b < 0x20 || b == 0x7f {
            BadName::ControlChar
        } else {
            BadName::BadChar
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
            ".." => return Err(BadName::DotDot),
            c if c.starts_with('.') => return Err(BadName::Hidden),
            c => parts.push(c),
        }
        if parts.len() > MAX_DEPTH {
            return Err(BadName::TooDeep);
        }
    }
    if parts.is_empty() {
        return Err(BadName::Empty);
    }
    Ok(parts.join("/"))
}

#[cfg(test)]
mod tests {
    use super::*;

    const ROOT: &str = "/srv/tftp";

    fn c(req: &[u8]) -> Result<String, BadName> {
        confine(req, ROOT, 255)
    }

    #[test]
    fn lexical_table() {
        use BadName::*;
        let long = "a".repeat(256);
        let deep = "a/".repeat(MAX_DEPTH + 1) + "f";
        let cases: Vec<(&[u8], Result<&str, BadName>)> = vec![
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
}
