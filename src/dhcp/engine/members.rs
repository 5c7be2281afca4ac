//! Member-list changes: this member's share of every range under a new list, and the
//! transition after a change (fresh addresses only from what was this member's share
//! under every list still in force), so two members never hand out one address.

use super::Engine;

/// A member list served before, and when its transition ends.
#[derive(Debug, Clone)]
pub(super) struct PastList {
    pub(super) list: crate::owner::MemberList,
    pub(super) split: crate::owner::shares::Split,
    pub(super) until: u64,
    /// When this list came in force and the list before it, when known (a change while
    /// running): a list this member was not in, served for less than a transition span,
    /// narrows to this member's share under the list before, not to nothing.
    pub(super) served_from: Option<u64>,
    pub(super) before: Option<crate::owner::MemberList>,
}

/// The list whose share of `me` bounds what others may have handed out while `past` was
/// in force, or `None` when that could be anything.
///
/// - `me` was in `past`: the others shared what was not `me`'s share under it.
/// - `me` was not in it (its conductor was briefly gone), but it followed a list `me` was
///   in and lasted less than a span: every other member was still narrowed to its share
///   under that earlier list for all of it, so what was `me`'s share then stayed free.
/// - Otherwise (a new member, a long absence, a list from before a restart): nothing.
pub(super) fn past_share_list<'a>(
    past: &'a PastList,
    me: &str,
    span: u64,
) -> Option<&'a crate::owner::MemberList> {
    if past.list.index_of(me).is_some() {
        return Some(&past.list);
    }
    let ended = past.until.checked_sub(span)?;
    let lasted = ended.checked_sub(past.served_from?)?;
    let before = past.before.as_ref()?;
    (lasted < span && before.index_of(me).is_some()).then_some(before)
}

impl Engine {
    /// After a membership change: until `until`, fresh addresses come only from the
    /// part of this member's new share that was also its share under `previous` (a
    /// member not in `previous` hands out none), because other members may still hold
    /// leases they gave out under the old list. Those are never extended (`timers`), so
    /// by `until` (the longest lease time after the change) they are gone.
    pub fn begin_transition(
        &mut self,
        previous: &[String],
        previous_split: crate::owner::shares::Split,
        me: &str,
        until: u64,
    ) {
        self.me = Some(me.to_string());
        self.past.push(PastList {
            list: crate::owner::MemberList::new(previous.iter().cloned()),
            split: previous_split,
            until,
            served_from: None,
            before: None,
        });
        self.restrict_to_past_shares();
    }

    /// Serves with the member list `list` from now on, without a transition (start-up,
    /// before the membership record is settled).
    pub fn adopt_members(&mut self, list: crate::owner::MemberList) {
        self.members = list;
        self.reshare();
        self.restrict_to_past_shares();
    }

    /// The member list changed while running (members from Ironic): new shares at once,
    /// and a transition from the list served until now, stacked on any still running.
    /// Returns the membership record to store, or `None` when the list is the same.
    pub fn change_members(
        &mut self,
        list: crate::owner::MemberList,
        now: u64,
    ) -> Option<crate::store::Membership> {
        use crate::owner::shares::Split;
        if list == self.members {
            return None;
        }
        let old = std::mem::replace(&mut self.members, list);
        // The transitions already running are stored with the record, so a restart
        // during them keeps them.
        let earlier = self
            .past
            .iter()
            .filter(|p| p.until > now)
            .map(|p| crate::store::PastMembership {
                names: p.list.names().to_vec(),
                split: Some(p.split.as_str().to_string()),
                until: p.until,
            })
            .collect();
        // While the shared store answers, the new shares hold at once: the database
        // refuses an address another client holds, whichever member writes it. A join that keeps this member
        // needs none either: its new share lies inside its old one, so narrowing by the
        // old list changes nothing now or later (a later list narrows by this one,
        // which is smaller). Otherwise, a transition.
        let me = self.me.as_deref().unwrap_or_default();
        // What this member's share gains is probed (`probe`) unless the transition rule
        // already covers it: back after less than a span in a list without it, the
        // others stayed narrowed to their shares under the list before (as
        // `past_share_list` reasons), so its share under that list is no gain. With
        // the shared store up there is no transition, so whatever was not its share a moment ago is.
        let reference = match &self.members_before {
            Some(before)
                if !self.shared_up
                    && old.index_of(me).is_none()
                    && before.index_of(me).is_some()
                    && self
                        .members_since
                        .is_some_and(|s| now.saturating_sub(s) < self.transition_span) =>
            {
                before.clone()
            }
            _ => old.clone(),
        };
        let pure_join = old.index_of(me).is_some()
            && old
                .names()
                .iter()
                .all(|n| self.members.index_of(n).is_some());
        if !(self.shared_up || pure_join) {
            self.past.push(PastList {
                list: old.clone(),
                split: Split::CURRENT,
                until: now + self.transition_span,
                served_from: self.members_since,
                before: self.members_before.take(),
            });
        }
        self.members_since = Some(now);
        self.members_before = Some(old.clone());
        self.reshare();
        self.inherit_relative_to(&reference, Split::CURRENT, now);
        self.restrict_to_past_shares();
        let split = Some(Split::CURRENT.as_str().to_string());
        Some(crate::store::Membership {
            names: self.members.names().to_vec(),
            since: now,
            previous: Some(old.names().to_vec()),
            previous_split: split.clone(),
            split,
            earlier,
            conductors: Vec::new(),
        })
    }

    /// The member list the shares come from.
    pub fn members(&self) -> &crate::owner::MemberList {
        &self.members
    }

    /// Recomputes this member's share of every range from `members`.
    pub(super) fn reshare(&mut self) {
        let split = crate::owner::shares::Split::CURRENT;
        let me = self.me.as_deref();
        for pool in self.subnets.iter_mut().flat_map(|s| s.pools.iter_mut()) {
            let (first, last) = pool.bounds();
            pool.reshare(self.members.share_of(split, first, last, me));
        }
    }

    /// Narrows every pool to what this member's share was under every past list whose
    /// transition still runs; lifts the narrowing when none does.
    pub(super) fn restrict_to_past_shares(&mut self) {
        let me = self.me.clone().unwrap_or_default();
        self.transition_until = self.past.iter().map(|p| p.until).max();
        for pool in self.subnets.iter_mut().flat_map(|s| s.pools.iter_mut()) {
            pool.lift_restriction();
            let (first, last) = pool.bounds();
            for past in &self.past {
                let old = match past_share_list(past, &me, self.transition_span) {
                    Some(list) => list.share_of(past.split, first, last, Some(&me)),
                    None => Vec::new(),
                };
                pool.restrict(&old);
            }
        }
    }

    /// Until when fresh allocations are narrowed after a membership change.
    pub fn transition_until(&self) -> Option<u64> {
        self.transition_until
    }
}
