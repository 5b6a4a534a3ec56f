//! The zone's room for addresses nginx resolves at run time (docs/resolved.md): after the configured peers' slots, a pool of slots
//! that addresses of `server NAME resolve` lines take and give back as
//! nginx adds and removes them.
//!
//! Each slot of the room has a [`DynMeta`]: the tag of the upstream that
//! holds it (0: free) and when it was last freed. An address keeps its slot
//! (found again by identity) for as long as nginx has it; a freed slot is
//! handed out again only after `quarantine` ms, so that a round still in
//! flight for the old address (its probe finds the identity changed and
//! records nothing) can never land on the new one.
//!
//! The functions here expect the caller to hold the zone's lock (every
//! process takes the same one) and see only plain slices: the room's slots
//! and their metas, position for position.

use core::sync::atomic::Ordering::{Acquire, Relaxed, Release};
use std::collections::{HashMap, HashSet};

use crate::zone::{DynMeta, Initial, Slot};

/// What [`claim`] found for an address.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Claim {
    /// The address already had this slot (its state goes on).
    Found(usize),
    /// A free slot, now the address's, starting as its check's `initial`.
    New(usize),
    /// No free slot: the address goes unchecked.
    Full,
}

impl Claim {
    /// The slot's position in the room, if any.
    pub fn position(self) -> Option<usize> {
        match self {
            Claim::Found(i) | Claim::New(i) => Some(i),
            Claim::Full => None,
        }
    }
}

/// The slot of upstream `tag`'s address `identity`: the one it has, else a
/// free one past its quarantine, made new. Caller holds the zone's lock.
pub fn claim(
    slots: &[Slot],
    metas: &[DynMeta],
    tag: u64,
    identity: u64,
    initial: impl Into<Initial>,
    now_ms: u64,
    quarantine_ms: u64,
) -> Claim {
    let initial = initial.into();
    let held = |i: usize| metas[i].tag.load(Acquire) == tag;
    let n = slots.len().min(metas.len());
    if let Some(i) = (0..n).find(|&i| held(i) && slots[i].identity.load(Relaxed) == identity) {
        return Claim::Found(i);
    }
    let free = (0..n).find(|&i| {
        let freed = metas[i].freed_at.load(Relaxed);
        metas[i].tag.load(Acquire) == 0
            && (freed == 0 || now_ms.saturating_sub(freed) >= quarantine_ms)
    });
    let Some(i) = free else { return Claim::Full };
    slots[i].reset();
    slots[i].init_new(identity, initial);
    metas[i].tag.store(tag, Release);
    Claim::New(i)
}

/// [`claim`] for each of `identities` in one pass over the room (a
/// rebuild claims all of an upstream's addresses at once).
pub fn claim_all(
    slots: &[Slot],
    metas: &[DynMeta],
    tag: u64,
    identities: &[u64],
    initial: impl Into<Initial>,
    now_ms: u64,
    quarantine_ms: u64,
) -> Vec<Claim> {
    let initial = initial.into();
    let n = slots.len().min(metas.len());
    let mut held: HashMap<u64, usize> = HashMap::new();
    let mut free = Vec::new();
    for i in 0..n {
        let t = metas[i].tag.load(Acquire);
        if t == tag {
            held.entry(slots[i].identity.load(Relaxed)).or_insert(i);
        } else if t == 0 {
            let freed = metas[i].freed_at.load(Relaxed);
            if freed == 0 || now_ms.saturating_sub(freed) >= quarantine_ms {
                free.push(i);
            }
        }
    }
    let mut free = free.into_iter();
    identities
        .iter()
        .map(|&id| {
            if let Some(&i) = held.get(&id) {
                return Claim::Found(i);
            }
            let Some(i) = free.next() else {
                return Claim::Full;
            };
            slots[i].reset();
            slots[i].init_new(id, initial);
            metas[i].tag.store(tag, Release);
            held.insert(id, i);
            Claim::New(i)
        })
        .collect()
}

/// Free every slot upstream `tag` holds for an address not in `keep`;
/// returns their positions. Caller holds the zone's lock.
pub fn sweep(
    slots: &[Slot],
    metas: &[DynMeta],
    tag: u64,
    keep: &HashSet<u64>,
    now_ms: u64,
) -> Vec<usize> {
    let mut freed = Vec::new();
    for (i, (s, m)) in slots.iter().zip(metas).enumerate() {
        if m.tag.load(Acquire) != tag || keep.contains(&s.identity.load(Relaxed)) {
            continue;
        }
        release(s, m, now_ms);
        freed.push(i);
    }
    freed
}

/// Give a slot back: its identity goes first, so that a probe of the old
/// address stops recording into it.
pub fn release(slot: &Slot, meta: &DynMeta, now_ms: u64) {
    slot.identity.store(0, Release);
    meta.freed_at.store(now_ms.max(1), Relaxed);
    meta.tag.store(0, Release);
}

/// The slots held in `metas`.
pub fn held(metas: &[DynMeta]) -> usize {
    metas.iter().filter(|m| m.tag.load(Relaxed) != 0).count()
}

/// A new zone's room (all free) takes over the old room's addresses of the
/// upstreams still configured with `resolve` servers (`live` tags), in
/// order while it has room: their state survives a reload. Others (an
/// upstream gone, or without `resolve` now) are left behind.
pub fn carry(new: (&[Slot], &[DynMeta]), old: (&[Slot], &[DynMeta]), live: &HashSet<u64>) {
    let mut to = new.0.iter().zip(new.1);
    let mut seen: HashMap<(u64, u64), ()> = HashMap::new();
    for (s, m) in old.0.iter().zip(old.1) {
        let tag = m.tag.load(Acquire);
        let id = s.identity.load(Relaxed);
        if tag == 0 || id == 0 || !live.contains(&tag) || seen.insert((tag, id), ()).is_some() {
            continue;
        }
        let Some((ns, nm)) = to.next() else { return };
        ns.init_inherited(id, s);
        nm.tag.store(tag, Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn room(n: usize) -> (Vec<Slot>, Vec<DynMeta>) {
        (
            (0..n).map(|_| Slot::default()).collect(),
            (0..n).map(|_| DynMeta::default()).collect(),
        )
    }

    #[test]
    fn an_address_keeps_its_slot_and_state() {
        let (s, m) = room(3);
        assert_eq!(claim(&s, &m, 7, 100, true, 0, 0), Claim::New(0));
        assert!(s[0].up.load(Relaxed) == 0, "default_down");
        s[0].checks.store(5, Relaxed);
        assert_eq!(claim(&s, &m, 7, 100, true, 10, 0), Claim::Found(0));
        assert_eq!(s[0].checks.load(Relaxed), 5);
        // Same identity under another upstream's tag: its own slot.
        assert_eq!(claim(&s, &m, 8, 100, false, 10, 0), Claim::New(1));
        assert_eq!(s[1].up.load(Relaxed), 1);
        assert_eq!(held(&m), 2);
    }

    #[test]
    fn a_full_room_says_so() {
        let (s, m) = room(2);
        assert!(claim(&s, &m, 1, 10, false, 0, 0).position().is_some());
        assert!(claim(&s, &m, 1, 11, false, 0, 0).position().is_some());
        assert_eq!(claim(&s, &m, 1, 12, false, 0, 0), Claim::Full);
        assert_eq!(claim(&s, &m, 1, 11, false, 0, 0), Claim::Found(1));
    }

    #[test]
    fn sweep_frees_what_nginx_dropped_and_quarantines_it() {
        let (s, m) = room(2);
        claim(&s, &m, 1, 10, false, 0, 1000);
        claim(&s, &m, 1, 11, false, 0, 1000);
        s[1].checks.store(9, Relaxed);
        let keep: HashSet<u64> = [10].into();
        assert_eq!(sweep(&s, &m, 1, &keep, 5000), vec![1]);
        assert_eq!(s[1].identity.load(Relaxed), 0);
        // Another upstream's slots are not touched; the freed one is
        // quarantined until 6000, then new, with nothing of the old state.
        assert_eq!(claim(&s, &m, 2, 21, false, 5999, 1000), Claim::Full);
        assert_eq!(s[0].identity.load(Relaxed), 10);
        assert_eq!(claim(&s, &m, 2, 21, false, 6000, 1000), Claim::New(1));
        assert_eq!(s[1].checks.load(Relaxed), 0);
        assert_eq!(s[1].identity.load(Relaxed), 21);
    }

    #[test]
    fn carry_keeps_live_upstreams_only() {
        let (os, om) = room(4);
        claim(&os, &om, 1, 10, false, 0, 0);
        claim(&os, &om, 2, 20, false, 0, 0);
        claim(&os, &om, 1, 11, false, 0, 0);
        os[2].checks.store(4, Relaxed);
        let (ns, nm) = room(1);
        carry((&ns, &nm), (&os, &om), &[1].into());
        assert_eq!(
            ns[0].identity.load(Relaxed),
            10,
            "in order, while room lasts"
        );
        let (ns, nm) = room(4);
        carry((&ns, &nm), (&os, &om), &[1].into());
        assert_eq!(held(&nm), 2);
        assert_eq!(claim(&ns, &nm, 1, 11, false, 0, 0), Claim::Found(1));
        assert_eq!(ns[1].checks.load(Relaxed), 4);
        assert_eq!(claim(&ns, &nm, 2, 20, false, 0, 0), Claim::New(2));
    }

    #[test]
    fn claim_all_is_claim_for_each() {
        let (a, am) = room(4);
        let (b, bm) = room(4);
        claim(&a, &am, 1, 10, false, 0, 0);
        claim_all(&b, &bm, 1, &[10], false, 0, 0);
        let ids = [11, 10, 12, 11, 13, 14];
        let one: Vec<Claim> = ids
            .iter()
            .map(|&id| claim(&a, &am, 1, id, true, 5, 0))
            .collect();
        assert_eq!(claim_all(&b, &bm, 1, &ids, true, 5, 0), one);
        assert_eq!(
            one[3],
            Claim::Found(1),
            "a repeated address shares its slot"
        );
        assert_eq!(one[5], Claim::Full);
    }

    proptest! {
        /// Any sequence of claims and sweeps: no identity of a tag holds
        /// two slots, held slots never exceed the room, and a claim only
        /// fails when every slot is held or quarantined.
        #[test]
        fn claims_and_sweeps_stay_consistent(
            ops in prop::collection::vec((0u64..3, 1u64..12, any::<bool>()), 0..200),
            n in 1usize..8,
        ) {
            let (s, m) = room(n);
            let mut now = 0;
            for (tag, id, sweep_it) in ops {
                now += 7;
                let tag = tag + 1;
                if sweep_it {
                    let keep: HashSet<u64> = [id].into();
                    sweep(&s, &m, tag, &keep, now);
                } else {
                    let c = claim(&s, &m, tag, id, false, now, 20);
                    if c == Claim::Full {
                        prop_assert!((0..n).all(|i| m[i].tag.load(Relaxed) != 0
                            || (m[i].freed_at.load(Relaxed) != 0
                                && now - m[i].freed_at.load(Relaxed) < 20)));
                    }
                }
                let mut pairs = HashSet::new();
                for i in 0..n {
                    let t = m[i].tag.load(Relaxed);
                    if t != 0 {
                        prop_assert!(pairs.insert((t, s[i].identity.load(Relaxed))));
                    }
                }
            }
        }
    }
}
