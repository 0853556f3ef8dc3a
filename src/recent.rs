//! Values kept by text for a while, the least recently used half let go
//! when full: the query vectors of each model (`index`), the merge's
//! readings (`memory::merge`) and atoms' quads (`store::catalog`). Clearing all of either when full made the
//! next REST add of a long-lived chat read and embed its scope's memories
//! again all at once, while recall's repeated queries missed in the same
//! moment.

use std::collections::HashMap;

/// At most `capacity` values by text.
#[derive(Debug)]
pub(crate) struct Recent<V> {
    entries: HashMap<String, (V, u64)>,
    /// Counts lookups and inserts; an entry keeps the count of its last use.
    clock: u64,
    capacity: usize,
}

impl<V: Clone> Recent<V> {
    pub(crate) fn new(capacity: usize) -> Recent<V> {
        Recent { entries: HashMap::new(), clock: 0, capacity: capacity.max(2) }
    }

    /// The value kept for `text`, now its most recent use.
    pub(crate) fn get(&mut self, text: &str) -> Option<V> {
        self.clock += 1;
        let clock = self.clock;
        self.entries.get_mut(text).map(|(value, used)| {
            *used = clock;
            value.clone()
        })
    }

    pub(crate) fn contains(&self, text: &str) -> bool {
        self.entries.contains_key(text)
    }

    /// Keeps `value` for `text`, first letting the least recently used half
    /// go if it is full.
    pub(crate) fn insert(&mut self, text: String, value: V) {
        if self.entries.len() >= self.capacity && !self.entries.contains_key(&text) {
            let mut uses: Vec<u64> = self.entries.values().map(|(_, used)| *used).collect();
            let (_, &mut median, _) = uses.select_nth_unstable(self.capacity / 2);
            self.entries.retain(|_, (_, used)| *used >= median);
        }
        self.clock += 1;
        self.entries.insert(text, (value, self.clock));
    }

    /// Lets `text`'s value go.
    pub(crate) fn remove(&mut self, text: &str) {
        self.entries.remove(text);
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_cache_lets_the_least_recently_used_half_go() {
        let mut recent = Recent::new(8);
        for n in 0..8 {
            recent.insert(n.to_string(), n);
        }
        assert_eq!(recent.len(), 8);
        // The oldest, used again, is as recent as any; a repeat insert of a
        // kept text makes no room.
        assert_eq!(recent.get("0"), Some(0));
        recent.insert("7".into(), 7);
        assert_eq!(recent.len(), 8);
        recent.insert("new".into(), -1);
        assert_eq!(recent.len(), 5);
        for kept in ["0", "5", "6", "7", "new"] {
            assert!(recent.contains(kept), "{kept} was used lately");
        }
        for gone in ["1", "2", "3", "4"] {
            assert!(!recent.contains(gone), "{gone} was among the least recently used");
        }
        assert_eq!(recent.get("5"), Some(5), "a kept value is unchanged");
        assert_eq!(recent.get("1"), None);
        // Filled again, it never holds more than its capacity.
        for n in 100..200 {
            recent.insert(n.to_string(), n);
            assert!(recent.len() <= 8);
        }
    }
}
