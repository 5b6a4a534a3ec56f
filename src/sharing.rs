//! Shared probes (docs/fleets.md, Shared probes): the same address (and
//! check port) with the same `server` line and the same check settings in
//! several upstreams, of http or stream, is probed once. The first such row
//! in configuration order (http before stream) leads: its probe runs the
//! rounds and records each one in every row of the group, each row with
//! its own rise/fall, admin state, passive count and selection. Every
//! worker computes the same groups from the same configuration. Rows of
//! one upstream never share (each line is its own peer), nor do resolved
//! addresses, nor checks with `shared=off`.

use std::collections::HashMap;

use healthcheck_core::status::Group;

use crate::target::Target;

/// A row: its context and index.
pub type RowId = (Group, u32);

/// Rows that share one probe, leader first.
type Set<'a> = Vec<(RowId, &'a Target)>;
/// What rows that may share have in common: the check address and the
/// `server` line.
type Key = (Box<[u8]>, Vec<u8>);

/// The groups of the worker's rows that share a probe.
#[derive(Default)]
pub struct Sharing {
    /// Followers -> their leader.
    leader: HashMap<RowId, RowId>,
    /// Leaders -> their followers, in configuration order.
    followers: HashMap<RowId, Vec<RowId>>,
}

impl Sharing {
    /// The groups of the rows of both contexts: each context's configured
    /// rows (none for a context without a zone: nothing is checked).
    pub fn build(contexts: [(Group, &[Target]); 2]) -> Sharing {
        let mut sets: HashMap<Key, Vec<Set>> = HashMap::new();
        for (g, targets) in contexts {
            for t in targets {
                if !t.check.conf.shared {
                    continue;
                }
                let key = (t.check_address(), t.peer.server_bytes().to_vec());
                let candidates = sets.entry(key).or_default();
                let set = candidates.iter_mut().find(|s| {
                    s[0].1.check.probes_like(&t.check)
                        && !s
                            .iter()
                            .any(|(id, o)| id.0 == g && std::rc::Rc::ptr_eq(&o.check, &t.check))
                });
                match set {
                    Some(s) => s.push(((g, t.index), t)),
                    None => candidates.push(vec![((g, t.index), t)]),
                }
            }
        }
        let mut sharing = Sharing::default();
        for set in sets.into_values().flatten().filter(|s| s.len() > 1) {
            let lead = set[0].0;
            let rest: Vec<RowId> = set[1..].iter().map(|(id, _)| *id).collect();
            for &f in &rest {
                sharing.leader.insert(f, lead);
            }
            sharing.followers.insert(lead, rest);
        }
        sharing
    }

    /// The leader of `row`, if another row's probe checks it.
    pub fn leader(&self, row: RowId) -> Option<RowId> {
        self.leader.get(&row).copied()
    }

    /// The rows `row`'s probe records in besides its own.
    pub fn followers(&self, row: RowId) -> &[RowId] {
        self.followers.get(&row).map_or(&[], Vec::as_slice)
    }

    /// The other rows of `row`'s group, leader first (none: not shared).
    pub fn shared_with(&self, row: RowId) -> Vec<RowId> {
        let lead = self.leader(row).unwrap_or(row);
        let followers = self.followers(lead);
        if followers.is_empty() {
            return Vec::new();
        }
        std::iter::once(lead)
            .chain(followers.iter().copied())
            .filter(|&r| r != row)
            .collect()
    }
}
