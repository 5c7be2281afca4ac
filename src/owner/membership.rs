//! The membership-change rule (docs/design.md "Members"; docs/members.md "Changing the
//! members"), pure: the store remembers the member list it served; when the configured
//! list differs, fresh addresses are narrowed for one longest lease time. A member on an
//! empty store adopts the latest transition its peers report, handing out nothing fresh
//! until it ends (it cannot know which of its addresses they leased).

use super::shares::Split;
use super::MemberList;
use crate::config::Config;
use crate::store::{Membership, PastMembership};

/// A narrowing of fresh addresses after the member list changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transition {
    /// The list served before (empty: this member hands out nothing fresh).
    pub previous: Vec<String>,
    /// How ranges were shared among `previous`.
    pub previous_split: Split,
    /// Unix seconds when it ends.
    pub until: u64,
}

/// What start-up does about membership.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settled {
    /// The record to write to the store, when it changes.
    pub record: Option<Membership>,
    /// The transition in force, if any.
    pub transition: Option<Transition>,
    /// Transitions from lists before that one, still running: they narrow too.
    pub earlier: Vec<Transition>,
}

/// How long a transition lasts: the longest lease this configuration can grant, plus
/// the offer hold (an offer made just before the change may still be taken).
pub fn transition_span(config: &Config) -> u64 {
    let longest = config
        .subnets
        .iter()
        .map(|s| s.lease_time)
        .chain(config.hosts.iter().filter_map(|h| h.lease_time))
        .max()
        .unwrap_or(0);
    u64::from(longest) + u64::from(config.dhcp.offer_hold_secs)
}

/// Compares the stored record with the configured `members` at `now`. `peer_transition`
/// is the latest end of a transition another member reports (0: none).
pub fn settle(
    stored: Option<Membership>,
    members: &MemberList,
    span: u64,
    peer_transition: u64,
    now: u64,
) -> Settled {
    // A peer's report is not trusted beyond what a real transition can last: a forged
    // `u64::MAX` would otherwise stop fresh addresses for ever.
    let peer_transition = peer_transition.min(now.saturating_add(span));
    let names = members.names().to_vec();
    let split = Some(Split::CURRENT.as_str().to_string());
    // A change of split is a change of who owns which address, like a change of names
    // (a single instance owns everything under any split).
    let same_split = |r: &Membership| {
        r.names.len() <= 1 || Split::recorded(r.split.as_deref()) == Split::CURRENT
    };
    let current = match stored {
        Some(r) if r.names == names && same_split(&r) => {
            return Settled {
                transition: ongoing(&r, span, now),
                earlier: earlier(&r.earlier, now),
                record: None,
            }
        }
        Some(r) => {
            // The list before this restart, and whatever still narrowed it, keep
            // narrowing the new one until their ends.
            let mut kept: Vec<PastMembership> = r
                .earlier
                .iter()
                .filter(|p| p.until > now)
                .cloned()
                .collect();
            if let Some(t) = ongoing(&r, span, now) {
                kept.push(PastMembership {
                    names: t.previous,
                    split: Some(t.previous_split.as_str().to_string()),
                    until: t.until,
                });
            }
            Membership {
                names,
                since: now,
                previous: Some(r.names),
                split,
                previous_split: r.split,
                earlier: kept,
                conductors: Vec::new(),
            }
        }
        None => {
            let record = Membership {
                names,
                since: now,
                previous: None,
                split,
                previous_split: None,
                earlier: Vec::new(),
                conductors: Vec::new(),
            };
            let adopted = (peer_transition > now && !members.is_empty()).then(|| Transition {
                previous: Vec::new(),
                previous_split: Split::CURRENT,
                until: peer_transition,
            });
            return Settled {
                record: Some(record),
                transition: adopted,
                earlier: Vec::new(),
            };
        }
    };
    Settled {
        transition: ongoing(&current, span, now),
        earlier: earlier(&current.earlier, now),
        record: Some(current),
    }
}

/// The last change of the member list the store records, for the probes of what this
/// member's share gained then (`dhcp::engine::probe`): the list before it, how it was
/// shared, and when. A list changed while this member was down changed now; an
/// unchanged list's record names the change before it, if any. `None` without a record:
/// a member on an empty store gained nothing it can name (see `Engine::inherit_from`).
pub fn last_change(
    stored: Option<&Membership>,
    members: &MemberList,
    now: u64,
) -> Option<(Vec<String>, Split, u64)> {
    let r = stored?;
    let same_split = r.names.len() <= 1 || Split::recorded(r.split.as_deref()) == Split::CURRENT;
    if r.names == members.names() && same_split {
        let previous = r.previous.clone()?;
        return Some((
            previous,
            Split::recorded(r.previous_split.as_deref()),
            r.since,
        ));
    }
    Some((r.names.clone(), Split::recorded(r.split.as_deref()), now))
}

/// The still-running transitions of `past`.
fn earlier(past: &[PastMembership], now: u64) -> Vec<Transition> {
    past.iter()
        .filter(|p| p.until > now)
        .map(|p| Transition {
            previous: p.names.clone(),
            previous_split: Split::recorded(p.split.as_deref()),
            until: p.until,
        })
        .collect()
}

fn ongoing(record: &Membership, span: u64, now: u64) -> Option<Transition> {
    // `since` is read from the store: a corrupt record must neither overflow nor, from
    // the future, hold fresh addresses back longer than a real transition lasts.
    let until = record.since.min(now).saturating_add(span);
    match &record.previous {
        Some(prev) if until > now => Some(Transition {
            previous: prev.clone(),
            previous_split: Split::recorded(record.previous_split.as_deref()),
            until,
        }),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(names: &[&str], since: u64, previous: Option<&[&str]>) -> Membership {
        let v = |n: &[&str]| n.iter().map(|s| s.to_string()).collect();
        let current = Some(Split::CURRENT.as_str().to_string());
        Membership {
            names: v(names),
            since,
            previous: previous.map(v),
            previous_split: previous.and(current.clone()),
            split: current,
            earlier: Vec::new(),
            conductors: Vec::new(),
        }
    }

    #[test]
    fn a_changed_list_starts_a_transition_that_ends_after_the_span() {
        let ab = MemberList::new(["a", "b"]);
        let abc = MemberList::new(["a", "b", "c"]);
        let s = settle(Some(record(&["a", "b"], 10, None)), &abc, 100, 0, 50);
        assert_eq!(
            s.record,
            Some(record(&["a", "b", "c"], 50, Some(&["a", "b"])))
        );
        assert_eq!(
            s.transition,
            Some(Transition {
                previous: vec!["a".into(), "b".into()],
                previous_split: Split::CURRENT,
                until: 150
            })
        );
        // Restarted during the transition: still in force, nothing written.
        let again = settle(s.record.clone(), &abc, 100, 0, 120);
        assert_eq!(again.record, None);
        assert_eq!(again.transition.map(|t| t.until), Some(150));
        // After it: nothing.
        assert_eq!(settle(s.record, &abc, 100, 0, 150).transition, None);
        // Unchanged list: nothing.
        let same = settle(Some(record(&["a", "b"], 10, None)), &ab, 100, 0, 50);
        assert_eq!(
            same,
            Settled {
                record: None,
                transition: None,
                earlier: Vec::new(),
            }
        );
    }

    #[test]
    fn a_corrupt_since_neither_wraps_nor_outlasts_a_span_from_now() {
        let abc = MemberList::new(["a", "b", "c"]);
        for since in [u64::MAX, u64::MAX - 10, 1_000_000] {
            let r = record(&["a", "b", "c"], since, Some(&["a", "b"]));
            let s = settle(Some(r), &abc, 100, 0, 50);
            assert_eq!(s.transition.map(|t| t.until), Some(150), "since {since}");
        }
    }

    #[test]
    fn the_last_change_is_the_records_or_the_one_made_while_down() {
        let ab = MemberList::new(["a", "b"]);
        let a = MemberList::new(["a"]);
        assert_eq!(last_change(None, &ab, 50), None);
        // Unchanged since the record, which names no change before it: nothing.
        assert_eq!(
            last_change(Some(&record(&["a", "b"], 10, None)), &ab, 50),
            None
        );
        // Unchanged since a change at 10 from a, b, c (made while running).
        let r = record(&["a", "b"], 10, Some(&["a", "b", "c"]));
        assert_eq!(
            last_change(Some(&r), &ab, 50),
            Some((vec!["a".into(), "b".into(), "c".into()], Split::CURRENT, 10))
        );
        // Changed while down: from the record's list, now.
        assert_eq!(
            last_change(Some(&r), &a, 50),
            Some((vec!["a".into(), "b".into()], Split::CURRENT, 50))
        );
    }

    #[test]
    fn an_empty_store_adopts_the_peers_transition_and_hands_out_nothing_fresh() {
        let abc = MemberList::new(["a", "b", "c"]);
        let s = settle(None, &abc, 100, 120, 50);
        assert_eq!(s.record, Some(record(&["a", "b", "c"], 50, None)));
        assert_eq!(
            s.transition,
            Some(Transition {
                previous: Vec::new(),
                previous_split: Split::CURRENT,
                until: 120
            })
        );
        assert_eq!(settle(None, &abc, 100, 40, 50).transition, None);
        // A peer claiming a transition without end gets one longest lease at most.
        let forged = settle(None, &abc, 100, u64::MAX, 50);
        assert_eq!(forged.transition.map(|t| t.until), Some(150));
        assert_eq!(
            settle(None, &MemberList::default(), 100, 500, 50).transition,
            None
        );
    }

    #[test]
    fn the_same_names_under_the_old_contiguous_split_start_a_transition_from_it() {
        let ab = MemberList::new(["a", "b"]);
        let old = Membership {
            split: None,
            ..record(&["a", "b"], 10, None)
        };
        let s = settle(Some(old), &ab, 100, 0, 50);
        let t = s.transition.unwrap();
        assert_eq!(t.previous, ["a", "b"]);
        assert_eq!(t.previous_split, Split::Contiguous);
        assert_eq!(t.until, 150);
        let r = s.record.unwrap();
        assert_eq!(r.split.as_deref(), Some("blocks-v1"));
        assert_eq!(r.previous_split, None);
        // A restart during it keeps the old split for the old list.
        let again = settle(Some(r), &ab, 100, 0, 60).transition.unwrap();
        assert_eq!(again.previous_split, Split::Contiguous);
        // A single instance owns everything whatever the split: no transition.
        let single = Membership {
            split: None,
            ..record(&[], 10, None)
        };
        assert_eq!(
            settle(Some(single), &MemberList::default(), 100, 0, 50).transition,
            None
        );
    }

    #[test]
    fn a_restart_with_a_new_list_during_a_transition_keeps_it_narrowing() {
        // a, b -> a, b, c at 50 (until 150); the member restarts at 80 with a, c.
        let abc = MemberList::new(["a", "b", "c"]);
        let first = settle(Some(record(&["a", "b"], 10, None)), &abc, 100, 0, 50)
            .record
            .unwrap();
        let ac = MemberList::new(["a", "c"]);
        let s = settle(Some(first), &ac, 100, 0, 80);
        let t = s.transition.unwrap();
        assert_eq!(
            (t.previous.as_slice(), t.until),
            (&["a".to_string(), "b".into(), "c".into()][..], 180)
        );
        assert_eq!(s.earlier.len(), 1);
        assert_eq!(s.earlier[0].previous, ["a", "b"]);
        assert_eq!(s.earlier[0].until, 150);
        // Restarted again at 120 with the same list: both still narrow; at 160 only one.
        let r = s.record.unwrap();
        let again = settle(Some(r.clone()), &ac, 100, 0, 120);
        assert_eq!(
            (again.earlier.len(), again.transition.map(|t| t.until)),
            (1, Some(180))
        );
        let later = settle(Some(r), &ac, 100, 0, 160);
        assert_eq!(
            (later.earlier.len(), later.transition.map(|t| t.until)),
            (0, Some(180))
        );
    }
}
