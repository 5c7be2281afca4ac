//! The membership-change rule (ARCHITECTURE.md "Members"; README "Changing the
//! members"), pure: the store remembers the member list it served; when the configured
//! list differs, fresh addresses are narrowed for one longest lease time. A member on an
//! empty store adopts the latest transition its peers report, handing out nothing fresh
//! until it ends (it cannot know which of its addresses they leased).

use super::MemberList;
use crate::config::Config;
use crate::store::Membership;

/// A narrowing of fresh addresses after the member list changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transition {
    /// The list served before (empty: this member hands out nothing fresh).
    pub previous: Vec<String>,
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
    let current = match stored {
        Some(r) if r.names == names => {
            return Settled {
                transition: ongoing(&r, span, now),
                record: None,
            }
        }
        Some(r) => Membership {
            names,
            since: now,
            previous: Some(r.names),
        },
        None => {
            let record = Membership {
                names,
                since: now,
                previous: None,
            };
            let adopted = (peer_transition > now && !members.is_empty()).then(|| Transition {
                previous: Vec::new(),
                until: peer_transition,
            });
            return Settled {
                record: Some(record),
                transition: adopted,
            };
        }
    };
    Settled {
        transition: ongoing(&current, span, now),
        record: Some(current),
    }
}

fn ongoing(record: &Membership, span: u64, now: u64) -> Option<Transition> {
    match &record.previous {
        Some(prev) if record.since + span > now => Some(Transition {
            previous: prev.clone(),
            until: record.since + span,
        }),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(names: &[&str], since: u64, previous: Option<&[&str]>) -> Membership {
        let v = |n: &[&str]| n.iter().map(|s| s.to_string()).collect();
        Membership {
            names: v(names),
            since,
            previous: previous.map(v),
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
                transition: None
            }
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
}
