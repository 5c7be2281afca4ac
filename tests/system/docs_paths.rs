//! The docs name files of the repository (`src/dhcp/engine/mod.rs`, `tests/dhcp/storm.rs`,
//! `deploy/image.sh`, …) as where to look: every such name, in the README and every page
//! of `docs/`, must be a file or directory that exists. A page that sends a reader to a
//! file that was moved or removed fails here, not in the reader's hands.

use std::path::Path;

/// The top-level directories whose paths the docs cite.
const ROOTS: &[&str] = &[
    "src/",
    "tests/",
    "benches/",
    "deploy/",
    "fixtures/",
    "qemu/",
    "fuzz/",
    "examples/",
    "ipxe/",
    "docs/",
    ".ci/",
];

/// Every repository path written between backticks or in a Markdown link in `text`.
fn cited_paths(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for (open, close) in [("`", "`"), ("](", ")")] {
        let mut rest = text;
        while let Some(start) = rest.find(open) {
            let after = &rest[start + open.len()..];
            let Some(end) = after.find(close) else { break };
            let span = &after[..end];
            rest = &after[end + close.len()..];
            // The first word: `src/x.rs` in "`src/x.rs` line", not a command line.
            let word = span.split_whitespace().next().unwrap_or("");
            let word = word.split('#').next().unwrap_or("");
            let word = word.trim_end_matches([',', '.', ':', ';']);
            let is_path = ROOTS.iter().any(|r| word.starts_with(r))
                // Placeholders and patterns are not files.
                && !word.contains(['<', '*', '{', '…', '$'])
                && !word.contains("...");
            if is_path {
                out.push(word.to_string());
            }
        }
    }
    out
}

#[test]
fn every_file_the_docs_name_exists() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut pages = vec![root.join("README.md")];
    for entry in std::fs::read_dir(root.join("docs")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "md") {
            pages.push(path);
        }
    }
    let mut missing = Vec::new();
    let mut checked = 0;
    for page in &pages {
        let text = std::fs::read_to_string(page).unwrap();
        for cited in cited_paths(&text) {
            checked += 1;
            if !root.join(&cited).exists() {
                missing.push(format!("{}: {cited}", page.display()));
            }
        }
    }
    assert!(
        checked > 100,
        "only {checked} paths found in the docs: is the scan broken?"
    );
    assert!(
        missing.is_empty(),
        "the docs name files that do not exist:\n{}",
        missing.join("\n")
    );
}

#[test]
fn a_path_is_read_from_code_spans_and_links_but_not_from_patterns() {
    let text = "see `src/dhcp/wire.rs` and [the lab](docs/lab.md), not `tests/<area>/x.rs`, \
                and `cargo test` or `fixtures/config/*.toml`; `deploy/image.sh --push`.";
    assert_eq!(
        cited_paths(text),
        ["src/dhcp/wire.rs", "deploy/image.sh", "docs/lab.md"]
    );
}

/// The targets of a page's relative Markdown links (`[x](other.md#part)` → `other.md`):
/// no scheme, no pure `#anchor`.
fn relative_links(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(start) = rest.find("](") {
        let after = &rest[start + 2..];
        let Some(end) = after.find(')') else { break };
        let target = after[..end].split('#').next().unwrap_or("").trim();
        rest = &after[end + 1..];
        if !target.is_empty() && !target.contains("://") && !target.starts_with("mailto:") {
            out.push(target.to_string());
        }
    }
    out
}

#[test]
fn every_relative_link_between_pages_resolves() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut pages = vec![root.join("README.md"), root.join("CHANGELOG.md")];
    for entry in std::fs::read_dir(root.join("docs")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "md") {
            pages.push(path);
        }
    }
    let (mut broken, mut checked) = (Vec::new(), 0);
    for page in &pages {
        let text = std::fs::read_to_string(page).unwrap();
        let dir = page.parent().unwrap();
        for link in relative_links(&text) {
            checked += 1;
            if !dir.join(&link).exists() {
                broken.push(format!("{}: {link}", page.display()));
            }
        }
    }
    assert!(
        checked > 50,
        "only {checked} links found: is the scan broken?"
    );
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

#[test]
fn a_relative_link_is_its_target_without_the_anchor() {
    let text = "[a](b.md#c), [web](https://x.test/y), [top](#top), [up](../README.md)";
    assert_eq!(relative_links(text), ["b.md", "../README.md"]);
}
