//! DHCPv6 bindings the shared lease store decided, as `dhcp::engine::decided` does for
//! v4: taken into the bindings so no fresh address is handed out over them and their
//! clients keep their addresses here when they Rebind after their server died; and the
//! engine's own lease withdrawn when the database refused it.

use super::Engine6;
use crate::store::{Lease6, Lease6Effect, LeaseState};

/// Whether two records are the same IA's (RFC 8415 §12.1: a DUID and an IAID).
fn same_ia(a: &Lease6, b: &Lease6) -> bool {
    a.duid == b.duid && a.iaid == b.iaid
}

impl Engine6 {
    /// A binding the shared database decided (`shared::follow`), as
    /// `dhcp::engine::Engine::apply_decided_change` for v4: it replaces whatever this
    /// engine holds on the address unless that is the same record. An Advertise is
    /// never written to the database, and an empty DUID names no client: neither is
    /// taken. A removal forgets only its own client's record. Returns the change to
    /// make durable here.
    pub fn apply_decided_change(
        &mut self,
        change: &Lease6Effect,
        now: u64,
    ) -> Option<Lease6Effect> {
        match change {
            Lease6Effect::Put(lease) => {
                if lease.state == LeaseState::Offered || lease.duid.is_empty() {
                    return None;
                }
                if self.bindings.get(lease.ip) == Some(lease) {
                    return None;
                }
                if self.bindings.get(lease.ip).is_some() {
                    self.bindings.remove(lease.ip);
                }
                self.take_decided_lease(lease.clone(), now);
                Some(change.clone())
            }
            Lease6Effect::Remove(ip, duid) => {
                if self.bindings.get(*ip).is_some_and(|l| &l.duid == duid) {
                    self.bindings.remove(*ip);
                    self.set_used(*ip, false);
                    return Some(change.clone());
                }
                None
            }
        }
    }

    fn take_decided_lease(&mut self, lease: Lease6, now: u64) {
        let (ip, active, declined) = (
            lease.ip,
            lease.is_active(now),
            lease.state == LeaseState::Declined,
        );
        self.bindings.insert(lease);
        if declined {
            // Quarantined, but no IA's address any more (as a local Decline).
            self.bindings.detach(ip);
        }
        self.set_used(ip, active);
    }

    /// The shared store refused `ours` because `holder` holds its address: the lease
    /// was never acknowledged, so it is withdrawn (the change to store), and the holder
    /// is taken so the address is not chosen again while it holds it.
    pub fn withdraw(&mut self, ours: &Lease6, holder: &Lease6, now: u64) -> Option<Lease6Effect> {
        let mine = self
            .bindings
            .get(ours.ip)
            .is_some_and(|l| same_ia(l, ours) && l.starts == ours.starts);
        let withdrawn = mine.then(|| {
            self.bindings.remove(ours.ip);
            self.set_used(ours.ip, false);
            Lease6Effect::Remove(ours.ip, ours.duid.clone())
        });
        if holder.ip == ours.ip && holder.is_active(now) && self.bindings.get(holder.ip).is_none() {
            self.take_decided_lease(holder.clone(), now);
        }
        withdrawn
    }
}

#[cfg(test)]
mod tests {
    use std::net::Ipv6Addr;

    use dhcproto::v6::{DhcpOption, DhcpOptions, IAAddr, Message, MessageType, IANA};

    use super::super::{reply, Arrival, Context6, Engine6, Outcome6};
    use crate::config::Config;
    use crate::dhcp::engine::Responsibility;
    use crate::mac::MacAddr;
    use crate::store::{Lease6, Lease6Effect, LeaseState};

    const NOW: u64 = 10_000;
    const ADDRS: &[Ipv6Addr] = &[Ipv6Addr::new(0xfd00, 1, 0, 0, 0, 0, 0, 1)];

    fn engine() -> Engine6 {
        let text = "state_dir = \"/tmp/unused\"\n[[subnet6]]\nnetwork = \"fd00:1::/64\"\n\
                    ranges = [\"fd00:1::10 - fd00:1::13\"]\nlease_time = 1000\n";
        let config = Config::from_toml_with_overrides(text, &[]).expect("config");
        Engine6::new(&config, vec![0, 4, 9, 9], Vec::new(), NOW)
    }

    fn ip(last: u16) -> Ipv6Addr {
        Ipv6Addr::new(0xfd00, 1, 0, 0, 0, 0, 0, last)
    }

    fn duid(n: u8) -> Vec<u8> {
        vec![0, 3, 0, 1, 0x52, 0x54, 0, 0, 0, n]
    }

    /// The lease a peer granted client `n` on `ip`.
    fn granted(n: u8, ip: Ipv6Addr) -> Lease6 {
        Lease6 {
            ip,
            duid: duid(n),
            iaid: 1,
            mac: Some(MacAddr([0x52, 0x54, 0, 0, 0, n])),
            state: LeaseState::Bound,
            starts: NOW - 100,
            preferred: NOW + 400,
            expires: NOW + 900,
            hostname: None,
            arch: None,
        }
    }

    /// Client `n`'s message with IA_NA 1, asking for `hint` if any.
    fn message(kind: MessageType, n: u8, server: Option<&[u8]>, hint: Option<Ipv6Addr>) -> Message {
        let mut m = Message::new_with_id(kind, [7, 7, 7]);
        m.opts_mut().insert(DhcpOption::ClientId(duid(n)));
        if let Some(s) = server {
            m.opts_mut().insert(DhcpOption::ServerId(s.to_vec()));
        }
        let mut opts = DhcpOptions::new();
        if let Some(addr) = hint {
            opts.insert(DhcpOption::IAAddr(IAAddr {
                addr,
                preferred_life: 0,
                valid_life: 0,
                opts: DhcpOptions::new(),
            }));
        }
        m.opts_mut().insert(DhcpOption::IANA(IANA {
            id: 1,
            t1: 0,
            t2: 0,
            opts,
        }));
        m
    }

    fn ask(
        e: &mut Engine6,
        msg: &Message,
        responsibility: Responsibility,
    ) -> super::super::Decision6 {
        let ctx = Context6 {
            arrival: Arrival {
                interface: "prov0",
                addresses: ADDRS,
                destination: "ff02::1:2".parse().unwrap(),
            },
            mac: None,
            responsibility,
            policy: None,
            now: NOW,
        };
        e.handle_message(msg, &[], &ctx)
    }

    /// The address the reply gives IA 1 (not one it withdraws with lifetime 0).
    fn given(d: &super::super::Decision6) -> Option<Ipv6Addr> {
        let r = d.reply.as_ref()?;
        let ia = reply::ia_nas(r).into_iter().find(|ia| ia.id == 1)?;
        ia.opts.iter().find_map(|o| match o {
            DhcpOption::IAAddr(a) if a.valid_life > 0 => Some(a.addr),
            _ => None,
        })
    }

    /// The bindings that hold an address at `now` (bound or declined).
    fn held(e: &Engine6, now: u64) -> Vec<Lease6> {
        e.leases()
            .filter(|l| l.state != LeaseState::Offered && l.is_active(now))
            .cloned()
            .collect()
    }

    #[test]
    fn an_address_the_database_gave_another_member_is_never_handed_to_another_client_here() {
        let mut e = engine();
        let put = Lease6Effect::Put(granted(1, ip(0x10)));
        assert_eq!(e.apply_decided_change(&put, NOW), Some(put.clone()));
        // The same row read again is not stored again.
        assert_eq!(e.apply_decided_change(&put, NOW), None);
        let d = ask(
            &mut e,
            &message(MessageType::Solicit, 2, None, Some(ip(0x10))),
            Responsibility::Mine,
        );
        assert_eq!(
            given(&d),
            Some(ip(0x11)),
            "the hint on the other member's address is not taken"
        );
    }

    #[test]
    fn a_client_whose_server_died_rebinds_here_and_keeps_its_address() {
        let mut e = engine();
        e.apply_decided_change(&Lease6Effect::Put(granted(1, ip(0x12))), NOW);
        // Its server (another DUID) does not answer its Renews; this member is not the
        // responsible one, but it knows the binding, so it answers the Rebind.
        let renew = message(MessageType::Renew, 1, Some(&[0, 4, 1, 1]), Some(ip(0x12)));
        assert_eq!(ask(&mut e, &renew, Responsibility::Mine).reply, None);
        let d = ask(
            &mut e,
            &message(MessageType::Rebind, 1, None, Some(ip(0x12))),
            Responsibility::NotMine,
        );
        assert_eq!(d.outcome, Outcome6::Bound(1));
        assert_eq!(given(&d), Some(ip(0x12)));
        assert!(
            matches!(&d.effects[..], [Lease6Effect::Put(l)] if l.ip == ip(0x12) && l.expires == NOW + 1000)
        );
    }

    #[test]
    fn the_databases_binding_replaces_an_advertise_of_this_member() {
        let mut e = engine();
        let d = ask(
            &mut e,
            &message(MessageType::Solicit, 2, None, None),
            Responsibility::Mine,
        );
        let ours = given(&d).unwrap();
        let theirs = granted(1, ours);
        assert!(e
            .apply_decided_change(&Lease6Effect::Put(theirs.clone()), NOW)
            .is_some());
        assert_eq!(held(&e, NOW), vec![theirs]);
    }

    #[test]
    fn a_decided_removal_forgets_only_its_own_clients_lease() {
        let mut e = engine();
        e.apply_decided_change(&Lease6Effect::Put(granted(1, ip(0x10))), NOW);
        let wrong = Lease6Effect::Remove(ip(0x10), duid(2));
        assert_eq!(e.apply_decided_change(&wrong, NOW), None);
        assert_eq!(held(&e, NOW).len(), 1);
        let right = Lease6Effect::Remove(ip(0x10), duid(1));
        assert_eq!(e.apply_decided_change(&right, NOW), Some(right.clone()));
        assert!(held(&e, NOW).is_empty());
        let d = ask(
            &mut e,
            &message(MessageType::Solicit, 2, None, Some(ip(0x10))),
            Responsibility::Mine,
        );
        assert_eq!(given(&d), Some(ip(0x10)), "free again");
    }

    #[test]
    fn a_lease_the_database_refused_is_withdrawn_and_the_client_gets_another_address() {
        let mut e = engine();
        let req = message(MessageType::Request, 2, Some(&[0, 4, 9, 9]), None);
        let ours = match &ask(&mut e, &req, Responsibility::Mine).effects[..] {
            [Lease6Effect::Put(l)] => l.clone(),
            other => panic!("{other:?}"),
        };
        let holder = granted(1, ours.ip);
        assert_eq!(
            e.withdraw(&ours, &holder, NOW),
            Some(Lease6Effect::Remove(ours.ip, ours.duid.clone()))
        );
        assert_eq!(held(&e, NOW), vec![holder]);
        let d = ask(&mut e, &req, Responsibility::Mine);
        assert_ne!(given(&d), Some(ours.ip));
        assert!(given(&d).is_some());
    }

    #[test]
    fn advertisements_and_records_without_a_client_are_not_taken() {
        let mut e = engine();
        let offered = Lease6 {
            state: LeaseState::Offered,
            ..granted(1, ip(0x12))
        };
        assert_eq!(
            e.apply_decided_change(&Lease6Effect::Put(offered), NOW),
            None
        );
        let nameless = Lease6 {
            duid: Vec::new(),
            ..granted(1, ip(0x12))
        };
        assert_eq!(
            e.apply_decided_change(&Lease6Effect::Put(nameless), NOW),
            None
        );
        assert!(held(&e, NOW).is_empty());
    }
}
