//! Who holds which addresses, in memory beside the lease trees: a client's records are
//! found without a scan. One index per lease tree: MAC → IPv4 addresses, DUID → IPv6
//! addresses. Rebuilt from the records at every open.

use std::borrow::Borrow;
use std::collections::HashMap;
use std::hash::Hash;

/// Holder → the addresses it has records on (sorted), and address → holder.
#[derive(Debug)]
pub(super) struct HolderIndex<K, A> {
    by_holder: HashMap<K, Vec<A>>,
    holder: HashMap<A, K>,
}

impl<K, A> Default for HolderIndex<K, A> {
    fn default() -> Self {
        Self {
            by_holder: HashMap::new(),
            holder: HashMap::new(),
        }
    }
}

impl<K: Eq + Hash + Clone, A: Ord + Hash + Copy> HolderIndex<K, A> {
    /// `who` now holds the record on `ip` (replacing whoever held it). Nothing is
    /// allocated when it held it already, the common case of a client renewing.
    pub(super) fn put<Q>(&mut self, ip: A, who: &Q)
    where
        K: Borrow<Q>,
        Q: Eq + Hash + ToOwned<Owned = K> + ?Sized,
    {
        if let Some(old) = self.holder.get(&ip) {
            if old.borrow() == who {
                return;
            }
            if let Some(old) = self.holder.remove(&ip) {
                self.unlink(&old, ip);
            }
        }
        self.holder.insert(ip, who.to_owned());
        let ips = match self.by_holder.get_mut(who) {
            Some(ips) => ips,
            None => self.by_holder.entry(who.to_owned()).or_default(),
        };
        if let Err(at) = ips.binary_search(&ip) {
            ips.insert(at, ip);
        }
    }

    /// Nobody holds a record on `ip` any more.
    pub(super) fn remove(&mut self, ip: A) {
        if let Some(old) = self.holder.remove(&ip) {
            self.unlink(&old, ip);
        }
    }

    fn unlink(&mut self, who: &K, ip: A) {
        if let Some(ips) = self.by_holder.get_mut(who) {
            ips.retain(|i| *i != ip);
            if ips.is_empty() {
                self.by_holder.remove(who);
            }
        }
    }

    /// The addresses `who` has records on, in address order.
    pub(super) fn addresses<Q>(&self, who: &Q) -> Vec<A>
    where
        K: Borrow<Q>,
        Q: Eq + Hash + ?Sized,
    {
        self.by_holder.get(who).cloned().unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::HolderIndex;

    #[test]
    fn an_address_has_one_holder_and_holders_list_theirs_in_order() {
        let mut i: HolderIndex<Vec<u8>, u32> = HolderIndex::default();
        i.put(3, &[1u8][..]);
        i.put(1, &[1u8][..]);
        i.put(2, &[2u8][..]);
        assert_eq!(i.addresses(&[1u8][..]), [1, 3]);
        // The address moves to another holder.
        i.put(3, &[2u8][..]);
        i.put(3, &[2u8][..]);
        assert_eq!(i.addresses(&[1u8][..]), [1]);
        assert_eq!(i.addresses(&[2u8][..]), [2, 3]);
        i.remove(1);
        i.remove(9);
        assert!(i.addresses(&[1u8][..]).is_empty());
        assert!(!i.by_holder.contains_key(&[1u8][..]));
    }
}
