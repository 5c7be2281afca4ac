//! DHCPv6 leases other members gave (lease replication), as `dhcp::engine::replica`
//! does for v4: taken into the bindings so no fresh address is handed out over them
//! and their clients keep their addresses here when they Rebind after their server
//! died; refused when another IA holds the address; and the engine's own lease
//! withdrawn when a peer refused it.

use super::Engine6;
use crate::store::{Lease6, Lease6Effect, LeaseState, Verdict};

/// Whether two records are the same IA's (RFC 8415 §12.1: a DUID and an IAID).
fn same_ia(a: &Lease6, b: &Lease6) -> bool {
    a.duid == b.duid && a.iaid == b.iaid
}

impl Engine6 {
    /// A peer's v6 lease change. Returns the verdict and the change to make durable
    /// here (`None`: nothing to store). A live change (`catch_up` false) on an address
    /// another IA holds is refused: its granter has not answered its client yet. A
    /// change sent to catch this member up was answered long ago: in a conflict the
    /// lease that began later wins, since the other must have ended while one of the
    /// two members did not hear of it.
    pub fn apply_peer_change(
        &mut self,
        change: &Lease6Effect,
        now: u64,
        catch_up: bool,
    ) -> (Verdict, Option<Lease6Effect>) {
        match change {
            Lease6Effect::Put(lease) => self.apply_peer_lease(lease, now, catch_up),
            Lease6Effect::Remove(ip, duid) => {
                if self.bindings.get(*ip).is_some_and(|l| &l.duid == duid) {
                    self.bindings.remove(*ip);
                    self.set_used(*ip, false);
                    return (Verdict::Accepted, Some(change.clone()));
                }
                (Verdict::Accepted, None)
            }
        }
    }

    /// A binding the shared database decided (`shared::follow`), as
    /// `dhcp::engine::Engine::apply_decided_change` for v4: it replaces whatever this
    /// engine holds on the address unless that is the same IA's record in the same
    /// state running as long. Returns the change to make durable here.
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
                self.take_peer_lease(lease.clone(), now);
                Some(change.clone())
            }
            Lease6Effect::Remove(..) => self.apply_peer_change(change, now, true).1,
        }
    }

    fn apply_peer_lease(
        &mut self,
        lease: &Lease6,
        now: u64,
        catch_up: bool,
    ) -> (Verdict, Option<Lease6Effect>) {
        // Advertisements are never shared, and an empty DUID names no client: a peer
        // that sends either is not believed.
        if lease.state == LeaseState::Offered || lease.duid.is_empty() {
            return (Verdict::Accepted, None);
        }
        match self.bindings.get(lease.ip) {
            // Another IA's live lease (an Advertise is no promise: the peer's lease wins
            // over it, and the advertised client gets another address when it asks).
            Some(held)
                if !same_ia(held, lease)
                    && held.state != LeaseState::Offered
                    && held.is_active(now)
                    && lease.is_active(now)
                    && !(catch_up && lease.starts > held.starts) =>
            {
                return (Verdict::Refused6(held.clone()), None);
            }
            // The same IA's lease, already known to run as long: a late copy.
            Some(held)
                if same_ia(held, lease)
                    && held.state == lease.state
                    && held.expires >= lease.expires =>
            {
                return (Verdict::Accepted, None);
            }
            _ => {}
        }
        self.take_peer_lease(lease.clone(), now);
        (Verdict::Accepted, Some(Lease6Effect::Put(lease.clone())))
    }

    fn take_peer_lease(&mut self, lease: Lease6, now: u64) {
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

    /// A peer refused `ours` because `holder` holds its address: the lease was never
    /// acknowledged, so it is withdrawn (the change to store and hand to the peers that
    /// took it), and the holder is taken so the address is not chosen again while it
    /// holds it.
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
            self.take_peer_lease(holder.clone(), now);
        }
        withdrawn
    }

    /// Every lease that holds its address at `now` (bound or declined), for a member
    /// starting: advertisements are this member's alone, and an address held back for
    /// an unreadable record names no client.
    pub fn live_leases(&self, now: u64) -> Vec<Lease6> {
        self.bindings
            .iter()
            .filter(|l| l.state != LeaseState::Offered && !l.duid.is_empty() && l.is_active(now))
            .cloned()
            .collect()
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
    use crate::store::{Lease6, Lease6Effect, LeaseState, Verdict};

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

    #[test]
    fn an_address_a_peer_granted_is_never_handed_to_another_client_here() {
        let mut e = engine();
        let put = Lease6Effect::Put(granted(1, ip(0x10)));
        assert_eq!(
            e.apply_peer_change(&put, NOW, false),
            (Verdict::Accepted, Some(put.clone()))
        );
        // A late copy of the same lease is accepted and not stored again.
        assert_eq!(
            e.apply_peer_change(&put, NOW, false),
            (Verdict::Accepted, None)
        );
        let d = ask(
            &mut e,
            &message(MessageType::Solicit, 2, None, Some(ip(0x10))),
            Responsibility::Mine,
        );
        assert_eq!(
            given(&d),
            Some(ip(0x11)),
            "the hint on the peer's address is not taken"
        );
    }

    #[test]
    fn a_client_whose_server_died_rebinds_here_and_keeps_its_address() {
        let mut e = engine();
        e.apply_peer_change(&Lease6Effect::Put(granted(1, ip(0x12))), NOW, false);
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
    fn a_live_change_on_an_address_another_client_holds_is_refused() {
        let mut e = engine();
        let d = ask(
            &mut e,
            &message(MessageType::Solicit, 2, None, None),
            Responsibility::Mine,
        );
        let ours = given(&d).unwrap();
        // Advertised only: a peer's lease wins over an Advertise.
        let theirs = granted(1, ours);
        assert_eq!(
            e.apply_peer_change(&Lease6Effect::Put(theirs.clone()), NOW, false)
                .0,
            Verdict::Accepted
        );
        let mut e = engine();
        let req = message(MessageType::Request, 2, Some(&[0, 4, 9, 9]), None);
        let d = ask(&mut e, &req, Responsibility::Mine);
        let held = match &d.effects[..] {
            [Lease6Effect::Put(l)] => l.clone(),
            other => panic!("{other:?}"),
        };
        let clash = granted(1, held.ip);
        assert_eq!(
            e.apply_peer_change(&Lease6Effect::Put(clash.clone()), NOW, false),
            (Verdict::Refused6(held.clone()), None)
        );
        // Sent to catch up (answered long ago): the lease that began later wins.
        let later = Lease6 {
            starts: NOW + 1,
            ..clash
        };
        assert_eq!(
            e.apply_peer_change(&Lease6Effect::Put(later.clone()), NOW + 1, true)
                .0,
            Verdict::Accepted
        );
        assert_eq!(e.live_leases(NOW + 1), vec![later]);
    }

    #[test]
    fn a_peer_removal_forgets_only_its_own_clients_lease() {
        let mut e = engine();
        e.apply_peer_change(&Lease6Effect::Put(granted(1, ip(0x10))), NOW, false);
        let wrong = Lease6Effect::Remove(ip(0x10), duid(2));
        assert_eq!(
            e.apply_peer_change(&wrong, NOW, false),
            (Verdict::Accepted, None)
        );
        assert_eq!(e.live_leases(NOW).len(), 1);
        let right = Lease6Effect::Remove(ip(0x10), duid(1));
        assert_eq!(
            e.apply_peer_change(&right, NOW, false),
            (Verdict::Accepted, Some(right.clone()))
        );
        assert!(e.live_leases(NOW).is_empty());
        let d = ask(
            &mut e,
            &message(MessageType::Solicit, 2, None, Some(ip(0x10))),
            Responsibility::Mine,
        );
        assert_eq!(given(&d), Some(ip(0x10)), "free again");
    }

    #[test]
    fn a_lease_a_peer_refused_is_withdrawn_and_the_client_gets_another_address() {
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
        assert_eq!(e.live_leases(NOW), vec![holder]);
        let d = ask(&mut e, &req, Responsibility::Mine);
        assert_ne!(given(&d), Some(ours.ip));
        assert!(given(&d).is_some());
    }

    #[test]
    fn advertisements_and_unreadable_records_are_not_given_to_a_starting_member() {
        let mut e = engine();
        ask(
            &mut e,
            &message(MessageType::Solicit, 2, None, None),
            Responsibility::Mine,
        );
        e.hold_back(ip(0x13), NOW + 1000);
        assert!(e.live_leases(NOW).is_empty());
        // Nor believed from a peer.
        let offered = Lease6 {
            state: LeaseState::Offered,
            ..granted(1, ip(0x12))
        };
        assert_eq!(
            e.apply_peer_change(&Lease6Effect::Put(offered), NOW, false),
            (Verdict::Accepted, None)
        );
    }
}
