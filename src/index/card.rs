//! An atom's card: what recall boosts it by (epistemic status, source,
//! creation time, branch). The graph index keeps one per atom, so recall
//! knows each candidate's boosted score before it reads any atom from the
//! store, and reads only those that can make the top k (about ten, where
//! the largest possible boost made it read thirty).
//!
//! **Invariant:** a card is what [`Card::of`] makes of the stored atom; a
//! recall that finds an atom disagreeing with its card falls back to the
//! largest possible boost for the candidates left.

use crate::atom::{Atom, Epistemic};
use crate::scope::Scope;

/// What recall boosts an atom by.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Card {
    /// Epistemic status.
    pub(crate) epistemic: Epistemic,
    /// `user`, `agent` or a custom attribution (a speaker).
    pub(crate) source: String,
    /// Creation time, microseconds since the Unix epoch.
    pub(crate) created_micros: i64,
    /// The branch of an atom in a repository (`None`: tenant-wide, or no
    /// branch).
    pub(crate) branch: Option<String>,
}

impl Card {
    /// The card of a stored atom.
    pub(crate) fn of(atom: &Atom) -> Card {
        Card::new(atom.epistemic, atom.source.clone(), atom.created_at, &atom.scope)
    }

    /// The card of an atom with these fields, written in `scope` (a
    /// tenant-wide atom's card has no branch: it is on every branch).
    pub(crate) fn new(epistemic: Epistemic, source: String, created_at: chrono::DateTime<chrono::Utc>, scope: &Scope) -> Card {
        Card {
            epistemic,
            source,
            created_micros: created_at.timestamp_micros(),
            branch: if scope.is_tenant_wide() { None } else { scope.branch.clone() },
        }
    }

    /// When the atom was made.
    pub(crate) fn created_at(&self) -> chrono::DateTime<chrono::Utc> {
        chrono::DateTime::from_timestamp_micros(self.created_micros).unwrap_or_default()
    }

    /// Whether a reader in `reader` sees the atom as written on another
    /// branch of its repository ([`crate::scope::Visibility::OtherBranch`]
    /// for an atom the reader sees at all).
    pub(crate) fn on_other_branch(&self, reader: &Scope) -> bool {
        matches!((&reader.branch, &self.branch), (Some(mine), Some(theirs)) if mine != theirs)
    }

    /// Appends the card to `out` (`graph.bin`).
    pub(crate) fn put(&self, out: &mut Vec<u8>) {
        out.push(epistemic_byte(self.epistemic));
        out.extend_from_slice(&self.created_micros.to_le_bytes());
        crate::index::vector::put_str(out, &self.source);
        crate::index::vector::put_str(out, self.branch.as_deref().unwrap_or(""));
    }

    /// Reads a card written by [`Card::put`]; `None` when `reader` does not
    /// start with one.
    pub(crate) fn read(reader: &mut &[u8]) -> Option<Card> {
        let (&epistemic, rest) = reader.split_first()?;
        let epistemic = epistemic_of(epistemic)?;
        let (micros, rest) = rest.split_at_checked(8)?;
        let created_micros = i64::from_le_bytes(micros.try_into().ok()?);
        *reader = rest;
        let source = crate::index::vector::read_str(reader)?;
        let branch = crate::index::vector::read_str(reader)?;
        Some(Card { epistemic, source, created_micros, branch: (!branch.is_empty()).then_some(branch) })
    }
}

fn epistemic_byte(epistemic: Epistemic) -> u8 {
    match epistemic {
        Epistemic::Actual => 0,
        Epistemic::Necessary => 1,
        Epistemic::Possible => 2,
    }
}

fn epistemic_of(byte: u8) -> Option<Epistemic> {
    match byte {
        0 => Some(Epistemic::Actual),
        1 => Some(Epistemic::Necessary),
        2 => Some(Epistemic::Possible),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_card_reads_back_as_written_and_a_truncated_one_does_not_read() {
        let cards = [
            Card {
                epistemic: Epistemic::Necessary,
                source: "user".into(),
                created_micros: 1_764_000_000_123_456,
                branch: Some("main".into()),
            },
            Card { epistemic: Epistemic::Possible, source: "小林".into(), created_micros: -5, branch: None },
            Card { epistemic: Epistemic::Actual, source: String::new(), created_micros: 0, branch: Some("機能/検索".into()) },
        ];
        for card in cards {
            let mut bytes = Vec::new();
            card.put(&mut bytes);
            bytes.push(0xAB);
            let mut reader = &bytes[..];
            assert_eq!(Card::read(&mut reader).as_ref(), Some(&card));
            assert_eq!(reader, &[0xAB], "reads exactly its own bytes");
            for cut in 0..bytes.len() - 1 {
                assert_eq!(Card::read(&mut &bytes[..cut]), None, "cut at {cut} of {}", bytes.len() - 1);
            }
        }
        assert_eq!(Card::read(&mut &[7u8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0][..]), None, "an unknown epistemic byte");
    }

    #[test]
    fn only_an_atom_on_another_branch_is_on_another_branch() {
        let on = |branch: Option<&str>| Card {
            epistemic: Epistemic::Actual,
            source: "user".into(),
            created_micros: 0,
            branch: branch.map(str::to_owned),
        };
        let repo = || Scope::tenant("t").with_workspace("acme").with_repository("hmg");
        let main = repo().with_branch("main");
        assert!(on(Some("dev")).on_other_branch(&main));
        assert!(!on(Some("main")).on_other_branch(&main));
        assert!(!on(None).on_other_branch(&main), "an atom without a branch, or tenant-wide");
        assert!(!on(Some("dev")).on_other_branch(&repo()), "a reader without a branch");
    }
}
