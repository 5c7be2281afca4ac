//! iPXE scripts rendered from the templates in `ipxe/`. Every value placed into a script
//! passes [`is_script_safe`]: iPXE expands `${…}`, splits on spaces and treats `&&`, `||`
//! and `#` specially, so a value that could carry any of them never reaches a script.

/// A rendering failure: a value was not safe to place into a script.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("value for {{{{{0}}}}} is not safe to put into an iPXE script")]
pub struct UnsafeValue(pub &'static str);

/// The first-stage script (`/boot.ipxe`).
pub const BOOT: &str = include_str!("../ipxe/boot.ipxe");
/// Chain to one URL; a failure asks the boot route again (`{{again}}`).
pub const CHAIN: &str = include_str!("../ipxe/chain.ipxe");
/// No NIC known: leave iPXE so the firmware tries the next boot device.
pub const EXIT: &str = include_str!("../ipxe/exit.ipxe");
/// No NIC known: boot the first local disk.
pub const SANBOOT: &str = include_str!("../ipxe/sanboot.ipxe");

/// Whether `v` may appear in an iPXE script: non-empty, at most 512 bytes, and only
/// letters, digits and `-._~:/?=%@+,[]`. That admits URLs (IPv6 literals in brackets,
/// RFC 3986 §3.2.2, but no `&` query separators, which iPXE would read as `&&`
/// fragments), MACs, names and numbers, and nothing that iPXE expands or splits on.
pub fn is_script_safe(v: &str) -> bool {
    !v.is_empty() && v.len() <= 512 && v.bytes().all(|b| SCRIPT_SAFE[usize::from(b)])
}

/// The bytes [`is_script_safe`] lets through, as a table: every boot request's values
/// pass it.
const SCRIPT_SAFE: [bool; 256] = {
    let mut table = [false; 256];
    let mut b = 0;
    while b < 256 {
        table[b] = (b as u8).is_ascii_alphanumeric();
        b += 1;
    }
    let extra = b"-._~:/?=%@+,[]";
    let mut i = 0;
    while i < extra.len() {
        table[extra[i] as usize] = true;
        i += 1;
    }
    table
};

/// Whether `v` is a safe absolute http(s) URL (see [`is_script_safe`]).
pub fn is_safe_url(v: &str) -> bool {
    (v.starts_with("http://") || v.starts_with("https://")) && is_script_safe(v)
}

/// Replaces each `{{key}}` in `template` with its value, refusing unsafe values. A
/// placeholder without a value is left as it is.
pub fn render(template: &str, values: &[(&'static str, &str)]) -> Result<String, UnsafeValue> {
    Template::parse(template).render(values)
}

/// The chain script, split once: the boot route renders it on every request.
pub fn chain_template() -> &'static Template<'static> {
    static CHAIN_TEMPLATE: std::sync::LazyLock<Template<'static>> =
        std::sync::LazyLock::new(|| Template::parse(CHAIN));
    &CHAIN_TEMPLATE
}

/// A template split into its text and its `{{key}}` placeholders (a key is letters,
/// digits and `_`; any other `{{` is text), so rendering only copies.
#[derive(Debug)]
pub struct Template<'t> {
    parts: Vec<Part<'t>>,
    text_len: usize,
}

#[derive(Debug)]
enum Part<'t> {
    Text(&'t str),
    Key(&'t str),
}

impl<'t> Template<'t> {
    /// Splits `template`.
    pub fn parse(template: &'t str) -> Self {
        let mut parts = Vec::new();
        let mut rest = template;
        let mut text_from = 0;
        let mut at = 0;
        while let Some(open) = rest.find("{{") {
            let after = &rest[open + 2..];
            let key = after.find("}}").map(|close| &after[..close]).filter(|k| {
                !k.is_empty() && k.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
            });
            match key {
                Some(key) => {
                    parts.push(Part::Text(&template[text_from..at + open]));
                    parts.push(Part::Key(key));
                    let consumed = open + 2 + key.len() + 2;
                    at += consumed;
                    text_from = at;
                    rest = &rest[consumed..];
                }
                None => {
                    at += open + 2;
                    rest = after;
                }
            }
        }
        parts.push(Part::Text(&template[text_from..]));
        parts.retain(|p| !matches!(p, Part::Text("")));
        let text_len = parts
            .iter()
            .map(|p| match p {
                Part::Text(t) => t.len(),
                Part::Key(_) => 0,
            })
            .sum();
        Self { parts, text_len }
    }

    /// The script with each placeholder replaced by its value (left as it is without
    /// one), or the key of the first value that is not [`is_script_safe`].
    pub fn render(&self, values: &[(&'static str, &str)]) -> Result<String, UnsafeValue> {
        if let Some((key, _)) = values.iter().find(|(_, v)| !is_script_safe(v)) {
            return Err(UnsafeValue(key));
        }
        let mut out = String::with_capacity(self.text_len + 64 * values.len());
        for part in &self.parts {
            match part {
                Part::Text(t) => out.push_str(t),
                Part::Key(key) => match values.iter().find(|(k, _)| k == key) {
                    Some((_, value)) => out.push_str(value),
                    None => {
                        out.push_str("{{");
                        out.push_str(key);
                        out.push_str("}}");
                    }
                },
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_everything_ipxe_would_interpret() {
        for bad in [
            "",
            "${net0/mac}",
            "http://a/b c",
            "http://a/b\nchain http://evil",
            "http://a/?x=1&&chain",
            "a||b",
            "#comment",
            "http://a/\"quoted\"",
            "http://a/'q'",
            "http://a/\\",
            "x;y",
            "http://a/{b}",
            "http://a/\0",
        ] {
            assert!(!is_script_safe(bad), "{bad:?} accepted");
        }
        let long = "a".repeat(513);
        assert!(!is_script_safe(&long));
        for good in [
            "http://192.0.2.1:8088/pxelinux.cfg/52-54-00-12-34-56",
            // An IPv6 member or conductor (the QEMU IPv6 tests chain these).
            "http://[fd00:1::1]:8088/pxelinux.cfg/52-54-00-12-34-56",
            "52:54:00:12:34:56",
            "node-1",
            "10000",
        ] {
            assert!(is_script_safe(good), "{good:?} refused");
        }
        assert!(is_safe_url("https://ironic.example:6385/x"));
        assert!(is_safe_url("http://[2001:db8::2]:8080"));
        assert!(!is_safe_url("ftp://x/y"));
    }

    #[test]
    fn renders_in_one_pass_like_replacing_each_placeholder() {
        let template = "a {{x}} b {{y}}{{x}} {{unknown}} {{ {{x}}} }}";
        let values = [("x", "1"), ("y", "node-2")];
        let mut expected = template.to_string();
        for (k, v) in values {
            expected = expected.replace(&format!("{{{{{k}}}}}"), v);
        }
        assert_eq!(render(template, &values).unwrap(), expected);
        assert_eq!(
            render("no placeholders", &values).unwrap(),
            "no placeholders"
        );
        assert_eq!(render("{{x", &values).unwrap(), "{{x");
        assert_eq!(
            render("{{x}}", &[("x", "ok"), ("y", "a b")]),
            Err(UnsafeValue("y"))
        );
    }

    #[test]
    fn renders_and_fills_every_placeholder() {
        let s = render(
            CHAIN,
            &[
                ("mac", "52:54:00:12:34:56"),
                ("owner", "conductor-a"),
                ("reason", "inventory"),
                (
                    "url",
                    "http://192.0.2.1:8088/pxelinux.cfg/52-54-00-12-34-56",
                ),
                ("timeout_ms", "10000"),
                ("attempt", "1"),
                ("attempts", "3"),
                ("again", "/v1/boot/52-54-00-12-34-56/boot.ipxe?try=2"),
            ],
        )
        .unwrap();
        assert!(s.starts_with("#!ipxe\n"));
        assert!(s.contains(
            "chain --timeout 10000 http://192.0.2.1:8088/pxelinux.cfg/52-54-00-12-34-56 && exit 0 ||"
        ));
        assert!(!s.contains("{{"), "{s}");
        assert_eq!(
            render(CHAIN, &[("url", "http://x/${y}")]),
            Err(UnsafeValue("url"))
        );
    }
}
