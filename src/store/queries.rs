//! The SPARQL the code runs, one `queries/*.rq` file each, parsed once.
//! Every query is written against the default graph; [`super::Store::select`]
//! makes that the caller's tenant graph before evaluation.

use std::sync::LazyLock;

use spargebra::{Query, SparqlParser};

macro_rules! named_queries {
    ($($(#[$doc:meta])* $variant:ident => $file:literal,)*) => {
        /// A query from `queries/`.
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub enum NamedQuery { $($(#[$doc])* $variant,)* }

        impl NamedQuery {
            /// Every query, for golden tests.
            pub const ALL: &'static [NamedQuery] = &[$(NamedQuery::$variant,)*];

            /// File name without extension.
            pub fn name(self) -> &'static str {
                match self { $(NamedQuery::$variant => $file,)* }
            }

            /// The query text.
            pub fn text(self) -> &'static str {
                match self { $(NamedQuery::$variant => include_str!(concat!("../../queries/", $file, ".rq")),)* }
            }

            /// The parsed query.
            pub(crate) fn parsed(self) -> &'static Query {
                $(
                    #[allow(non_upper_case_globals)]
                    static $variant: LazyLock<Query> = LazyLock::new(|| {
                        // Query files are compiled in and each has a golden
                        // test, so a parse failure cannot reach a user.
                        #[allow(clippy::expect_used)]
                        SparqlParser::new().parse_query(NamedQuery::$variant.text()).expect(concat!("queries/", $file, ".rq parses"))
                    });
                )*
                match self { $(NamedQuery::$variant => &$variant,)* }
            }
        }
    };
}

named_queries! {
    /// Atoms with a given content hash (dedup).
    FindByContentHash => "find_by_content_hash",
    /// Successors of an atom in its evolution chain.
    RevisionsOf => "revisions_of",
    /// Lessons and reflections derived from an atom.
    DerivedFrom => "derived_from",
    /// Audit entries about an atom.
    AuditOfAtom => "audit_of_atom",
    /// The tenant's audit chain.
    AuditChain => "audit_chain",
    /// Active atoms, newest first.
    ActiveAtoms => "active_atoms",
    /// All atoms in id order.
    AllAtoms => "all_atoms",
    /// memory_stats counts.
    Stats => "stats",
    /// The change feed (maintenance, all graphs).
    ChangesSince => "changes_since",
    /// Graph index links (maintenance, all graphs).
    GraphLinks => "graph_links",
    /// Every atom's card: what recall boosts it by (maintenance, all graphs).
    AtomCards => "atom_cards",
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_query_file_parses_and_is_listed() {
        for query in NamedQuery::ALL {
            let _ = query.parsed();
        }
        let on_disk = std::fs::read_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/queries"))
            .unwrap()
            .filter_map(|e| e.ok())
            .filter(|e| e.path().extension().is_some_and(|x| x == "rq"))
            .count();
        assert!(on_disk >= NamedQuery::ALL.len());
    }
}
