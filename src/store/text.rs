//! How text a client sent (option 12, the host name) is kept: in the form every reader
//! shows it — the operator API, `shardboot leases` and the `/ui` page alike. Printable
//! ASCII (0x20–0x7e) except the backslash stays as it is; every other byte (control
//! characters, the backslash, every octet of a non-ASCII character) becomes `\xNN`
//! (lower-case hex). The form is plain ASCII with no control characters, so it cannot
//! forge a terminal line or a log line, and it can be read back to the original bytes.

use std::fmt::Write;

/// The kept form of `raw`.
pub fn shown(raw: &str) -> String {
    let mut out = String::with_capacity(raw.len());
    for b in raw.bytes() {
        if (0x20..0x7f).contains(&b) && b != b'\\' {
            out.push(b as char);
        } else {
            let _ = write!(out, "\\x{b:02x}");
        }
    }
    out
}

/// Whether `s` is already in the kept form (what [`shown`] returns), so a reader can
/// print it unchanged.
pub fn is_shown(s: &str) -> bool {
    let b = s.as_bytes();
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'\\' => {
                let hex = |c: u8| c.is_ascii_digit() || (b'a'..=b'f').contains(&c);
                if b.len() < i + 4 || b[i + 1] != b'x' || !hex(b[i + 2]) || !hex(b[i + 3]) {
                    return false;
                }
                i += 4;
            }
            0x20..=0x7e => i += 1,
            _ => return false,
        }
    }
    true
}

/// The original bytes of a kept form (`None` when `s` is not one).
pub fn original(s: &str) -> Option<Vec<u8>> {
    if !is_shown(s) {
        return None;
    }
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' {
            let hex = std::str::from_utf8(&b[i + 2..i + 4]).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn markup_stays_text_and_everything_else_is_escaped() {
        assert_eq!(shown("node-1.example"), "node-1.example");
        assert_eq!(shown("<img src=x>"), "<img src=x>");
        assert_eq!(shown("a\\b"), "a\\x5cb");
        assert_eq!(shown("line\nfeed\u{1b}[2J"), "line\\x0afeed\\x1b[2J");
        assert_eq!(shown("é"), "\\xc3\\xa9");
        assert!(is_shown("a\\x5cb") && !is_shown("a\\b") && !is_shown("\\x5") && !is_shown("é"));
    }

    proptest! {
        #[test]
        fn the_kept_form_is_safe_and_reads_back(raw in any::<String>()) {
            let s = shown(&raw);
            prop_assert!(s.bytes().all(|b| (0x20..0x7f).contains(&b)));
            prop_assert!(is_shown(&s));
            prop_assert_eq!(original(&s), Some(raw.into_bytes()));
        }
    }
}
