//! Labels read back from disk as the `&'static str` an [`super::Event`] holds. The
//! labels are shardboot's own (message types, outcomes, reasons, route patterns): a few
//! dozen, each leaked once and then shared. The table is bounded, so a damaged or
//! hand-edited file cannot grow memory: past [`MAX_LABELS`], or for text no label has
//! the shape of, the label reads `other`.

use std::collections::HashSet;
use std::sync::Mutex;

/// Distinct labels kept.
const MAX_LABELS: usize = 512;
/// Longest label (the longest route pattern is 27).
const MAX_LEN: usize = 64;

static LABELS: Mutex<Option<HashSet<&'static str>>> = Mutex::new(None);

/// `text` as a shared label.
pub(super) fn label(text: &str) -> &'static str {
    let shaped = !text.is_empty()
        && text.len() <= MAX_LEN
        && text.bytes().all(|b| b.is_ascii_graphic() || b == b' ');
    if !shaped {
        return "other";
    }
    let mut g = LABELS.lock().unwrap_or_else(|p| p.into_inner());
    let set = g.get_or_insert_with(HashSet::new);
    if let Some(l) = set.get(text) {
        return l;
    }
    if set.len() >= MAX_LABELS {
        return "other";
    }
    let leaked: &'static str = Box::leak(text.to_string().into_boxed_str());
    set.insert(leaked);
    leaked
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_are_shared_and_odd_text_is_other() {
        let a = label("REQUEST");
        let b = label(&String::from("REQUEST"));
        assert!(std::ptr::eq(a, b));
        assert_eq!(label("<script>\n"), "other");
        assert_eq!(label(&"x".repeat(65)), "other");
        assert_eq!(label(""), "other");
    }
}
