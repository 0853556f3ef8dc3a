//! IRIs of the HMG vocabulary (`schema/hmg.ttl`) and the PROV-O terms it reuses.
//!
//! Every constant here has a twin in `schema/hmg.ttl`; the test at the end of
//! this file fails when one of them is missing there.

use oxigraph::model::NamedNodeRef;

macro_rules! terms {
    ($ns:literal; $($(#[$doc:meta])* $name:ident = $local:literal;)*) => {
        $( $(#[$doc])* pub(crate) const $name: NamedNodeRef<'static> =
            NamedNodeRef::new_unchecked(concat!($ns, $local)); )*
        #[cfg(test)]
        pub(crate) const ALL_LOCAL_NAMES: &[&str] = &[$($local),*];
    };
}

/// HMG classes and properties.
pub(crate) mod hmg {
    use super::NamedNodeRef;
    terms! { "https://w3id.org/hmg/ns#";
        /// Class of every memory atom.
        ATOM = "Atom";
        /// Atom kind `fact`.
        FACT = "Fact";
        /// Atom kind `handoff`.
        HANDOFF = "Handoff";
        /// Atom kind `lesson`.
        LESSON = "Lesson";
        /// Atom kind `episode`.
        EPISODE = "Episode";
        /// Atom kind `reflection`.
        REFLECTION = "Reflection";
        /// Class of scope nodes.
        SCOPE = "Scope";
        /// Class of entities atoms mention.
        ENTITY = "Entity";
        /// Class of audit entries.
        AUDIT_ENTRY = "AuditEntry";
        /// Class of tenants.
        TENANT = "Tenant";
        /// Class of actors.
        ACTOR = "Actor";
        /// Atom text.
        CONTENT = "content";
        /// sha256 of the normalized content.
        CONTENT_HASH = "contentHash";
        /// Attribution.
        SOURCE = "source";
        /// Lifecycle status.
        STATUS = "status";
        /// actual / necessary / possible.
        EPISTEMIC = "epistemic";
        /// affirmative / negative / conditional.
        POLARITY = "polarity";
        /// Detected language.
        LANGUAGE = "language";
        /// Importance 0–1.
        IMPORTANCE = "importance";
        /// Creation time.
        CREATED_AT = "createdAt";
        /// Originating session.
        SESSION_ID = "sessionId";
        /// Time after which reflect expires the atom.
        EXPIRES_AT = "expiresAt";
        /// Last time a recall returned the atom (usage, not audited).
        LAST_RECALLED_AT = "lastRecalledAt";
        /// How many recalls returned the atom (usage, not audited).
        RECALL_COUNT = "recallCount";
        /// Last time reflect decayed the atom's importance.
        DECAYED_AT = "decayedAt";
        /// Atom → scope.
        IN_SCOPE = "inScope";
        /// Atom → entity.
        MENTIONS = "mentions";
        /// Scope tenant.
        TENANT_ID = "tenant";
        /// Scope workspace.
        WORKSPACE = "workspace";
        /// Scope repository.
        REPOSITORY = "repository";
        /// Scope branch.
        BRANCH = "branch";
        /// Entity kind.
        ENTITY_KIND = "entityKind";
        /// Audit action.
        ACTION = "action";
        /// Audit reason.
        REASON = "reason";
        /// Audit target atom.
        TARGET = "target";
        /// Status before the mutation.
        STATUS_BEFORE = "statusBefore";
        /// Status after the mutation.
        STATUS_AFTER = "statusAfter";
        /// Epistemic before the mutation.
        EPISTEMIC_BEFORE = "epistemicBefore";
        /// Epistemic after the mutation.
        EPISTEMIC_AFTER = "epistemicAfter";
        /// Position in the tenant's audit chain.
        SEQ = "seq";
        /// Hash of the previous audit entry.
        PREV_HASH = "prevHash";
        /// Hash of this audit entry.
        HASH = "hash";
        /// Tenant → newest audit entry.
        AUDIT_HEAD = "auditHead";
        /// Store-wide write counter.
        SNAPSHOT_VERSION = "snapshotVersion";
        /// On-disk format version.
        FORMAT_VERSION = "formatVersion";
    }
}

/// The PROV-O terms HMG uses.
pub(crate) mod prov {
    use super::NamedNodeRef;
    terms! { "http://www.w3.org/ns/prov#";
        /// Evolution chain: new atom → the atom it replaced.
        WAS_REVISION_OF = "wasRevisionOf";
        /// Lesson or reflection → its source atom.
        WAS_DERIVED_FROM = "wasDerivedFrom";
        /// Audit entries are activities.
        ACTIVITY = "Activity";
        /// Audit entry → actor.
        WAS_ASSOCIATED_WITH = "wasAssociatedWith";
        /// Audit entry time.
        AT_TIME = "atTime";
        /// Audit entry → atom it created.
        GENERATED = "generated";
    }
}

/// `rdfs:label`.
pub(crate) const RDFS_LABEL: NamedNodeRef<'static> = NamedNodeRef::new_unchecked("http://www.w3.org/2000/01/rdf-schema#label");
/// `rdf:type`.
pub(crate) const RDF_TYPE: NamedNodeRef<'static> = oxigraph::model::vocab::rdf::TYPE;

/// Graph holding store-wide metadata (snapshot version, format version).
pub(crate) const SYSTEM_GRAPH: NamedNodeRef<'static> = NamedNodeRef::new_unchecked("urn:hmg:system");
/// Subject of store-wide metadata.
pub(crate) const STORE_NODE: NamedNodeRef<'static> = NamedNodeRef::new_unchecked("urn:hmg:store");

#[cfg(test)]
mod tests {
    #[test]
    fn every_hmg_term_is_declared_in_schema() {
        let ttl = include_str!("../schema/hmg.ttl");
        for local in super::hmg::ALL_LOCAL_NAMES {
            assert!(ttl.contains(&format!("hmg:{local} a ")), "hmg:{local} is in vocab.rs but not declared in schema/hmg.ttl");
        }
        // PROV-O terms are reused, not declared; the schema must mention each.
        for local in super::prov::ALL_LOCAL_NAMES {
            assert!(ttl.contains(&format!("prov:{local}")), "prov:{local} is used but not documented in schema/hmg.ttl");
        }
    }
}
