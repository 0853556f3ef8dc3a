//! Atoms: one self-contained memory sentence each, and the closed sets of
//! values that describe them (kind, status, epistemic, polarity).
//!
//! **Invariant:** every enum here round-trips through `as_str`/`parse`, and
//! `as_str` is the literal stored in RDF and shown on every surface.

use std::fmt;
use std::str::FromStr;

use ulid::Ulid;

use crate::scope::Scope;

macro_rules! closed_set {
    ($(#[$doc:meta])* $name:ident, $what:literal { $($(#[$vdoc:meta])* $variant:ident = $text:literal),* $(,)? }) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum $name { $($(#[$vdoc])* $variant),* }

        impl $name {
            /// Every value, in declaration order.
            pub const ALL: &'static [$name] = &[$($name::$variant),*];

            /// The wire and RDF spelling.
            pub fn as_str(self) -> &'static str {
                match self { $($name::$variant => $text),* }
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl serde::Serialize for $name {
            fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                serializer.serialize_str(self.as_str())
            }
        }

        impl<'de> serde::Deserialize<'de> for $name {
            fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                let text = <std::borrow::Cow<'de, str> as serde::Deserialize>::deserialize(deserializer)?;
                text.parse().map_err(serde::de::Error::custom)
            }
        }

        impl schemars::JsonSchema for $name {
            fn schema_name() -> std::borrow::Cow<'static, str> {
                std::borrow::Cow::Borrowed(stringify!($name))
            }

            fn inline_schema() -> bool {
                true
            }

            fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
                schemars::json_schema!({ "type": "string", "enum": [$($text),*] })
            }
        }

        impl FromStr for $name {
            type Err = UnknownValue;
            fn from_str(s: &str) -> Result<Self, UnknownValue> {
                match s.trim() {
                    $($text => Ok($name::$variant),)*
                    other => Err(UnknownValue {
                        what: $what,
                        value: other.to_owned(),
                        expected: &[$($text),*],
                    }),
                }
            }
        }
    };
}

/// A string that is not one of a closed set's values.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown {what} '{value}'; expected one of: {}", .expected.join(", "))]
pub struct UnknownValue {
    /// Which set was parsed.
    pub what: &'static str,
    /// What was given.
    pub value: String,
    /// The allowed values.
    pub expected: &'static [&'static str],
}

closed_set! {
    /// What an atom is.
    Kind, "kind" {
        /// A durable piece of knowledge.
        Fact = "fact",
        /// A session hand-off summary.
        Handoff = "handoff",
        /// A lesson derived from another atom.
        Lesson = "lesson",
        /// An episodic memory (a conversation turn, an event).
        Episode = "episode",
        /// A summary written by reflect.
        Reflection = "reflection",
    }
}

closed_set! {
    /// Lifecycle status. Only `active` atoms are recalled by default.
    Status, "status" {
        /// In effect.
        Active = "active",
        /// Marked false by correct/negate; permanent.
        Negated = "negated",
        /// Replaced by a newer atom of its evolution chain.
        Superseded = "superseded",
        /// Out of recall, content kept, restorable.
        Quarantined = "quarantined",
        /// Visible to audit only.
        Sealed = "sealed",
        /// Logically deleted; content destroyed.
        Tombstoned = "tombstoned",
        /// Set by reflect: stale and unimportant.
        Archived = "archived",
        /// Set by reflect: past its expiry time.
        Expired = "expired",
    }
}

closed_set! {
    /// How certain a memory is, inferred from its wording.
    Epistemic, "epistemic" {
        /// A fact.
        Actual = "actual",
        /// A constraint (must, never, 必须, 必ず …).
        Necessary = "necessary",
        /// A guess (maybe, 可能, たぶん …).
        Possible = "possible",
    }
}

closed_set! {
    /// Whether a memory affirms, denies or conditions, inferred from wording.
    Polarity, "polarity" {
        /// Plain statement.
        Affirmative = "affirmative",
        /// Negated statement (not, 不, ない …).
        Negative = "negative",
        /// Conditional statement (if, 如果, もし …).
        Conditional = "conditional",
    }
}

impl Status {
    /// Whether the content of an atom in this status is hidden behind a
    /// placeholder wherever it is shown.
    pub fn hides_content(self) -> bool {
        matches!(self, Status::Quarantined | Status::Sealed | Status::Tombstoned)
    }

    /// The placeholder shown instead of hidden content.
    pub fn placeholder(self) -> Option<&'static str> {
        match self {
            Status::Quarantined => Some("[quarantined: content hidden; restore with memory_govern action=restore]"),
            Status::Sealed => Some("[sealed: content visible to audit only]"),
            Status::Tombstoned => Some("[tombstoned: content destroyed]"),
            _ => None,
        }
    }
}

/// An atom id: a ULID. Text form is the 26-character Crockford base32 string.
pub type AtomId = Ulid;

/// Parses an atom id given by a caller, with a message that says what is wrong.
pub fn parse_atom_id(text: &str) -> Result<AtomId, InvalidAtomId> {
    let trimmed = text.trim();
    let trimmed = trimmed.strip_prefix("urn:hmg:atom:").unwrap_or(trimmed);
    Ulid::from_string(trimmed).map_err(|_| InvalidAtomId(text.to_owned()))
}

/// A string that is not an atom id.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("'{0}' is not an atom id (expected a 26-character ULID such as 01J9ZK8V3QX7N2M4R6T8W0YB1C)")]
pub struct InvalidAtomId(pub String);

/// One memory as stored.
#[derive(Debug, Clone, PartialEq)]
pub struct Atom {
    /// ULID.
    pub id: AtomId,
    /// Redacted text; `None` once tombstoned.
    pub content: Option<String>,
    /// What it is.
    pub kind: Kind,
    /// `user`, `agent` or a custom attribution.
    pub source: String,
    /// Where it was written.
    pub scope: Scope,
    /// Inferred certainty.
    pub epistemic: Epistemic,
    /// Inferred polarity.
    pub polarity: Polarity,
    /// Lifecycle status.
    pub status: Status,
    /// Creation time.
    pub created_at: chrono::DateTime<chrono::Utc>,
    /// Detected language (`en`, `zh`, `ja`, `ko`, `und`).
    pub language: String,
    /// 0–1.
    pub importance: f64,
    /// Names of the entities it mentions.
    pub entities: Vec<String>,
    /// The atom this one replaced, if any.
    pub supersedes: Option<AtomId>,
    /// Atoms this one was derived from (lessons, reflections).
    pub derived_from: Vec<AtomId>,
    /// Optional session the atom came from.
    pub session_id: Option<String>,
    /// Optional time after which reflect expires it.
    pub expires_at: Option<chrono::DateTime<chrono::Utc>>,
    /// Usage: the last time a recall returned it.
    pub last_recalled_at: Option<chrono::DateTime<chrono::Utc>>,
    /// Usage: how many recalls returned it.
    pub recall_count: u64,
    /// When reflect last decayed its importance.
    pub last_decayed_at: Option<chrono::DateTime<chrono::Utc>>,
}

impl Atom {
    /// The content as any surface may show it: hidden content is replaced by
    /// a placeholder that says why.
    pub fn visible_content(&self) -> &str {
        match self.status.placeholder() {
            Some(placeholder) => placeholder,
            None => self.content.as_deref().unwrap_or(""),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn closed_sets_round_trip() {
        for s in Status::ALL {
            assert_eq!(s.as_str().parse::<Status>(), Ok(*s));
        }
        for k in Kind::ALL {
            assert_eq!(k.as_str().parse::<Kind>(), Ok(*k));
        }
        let err = "frozen".parse::<Status>().unwrap_err();
        assert!(err.to_string().contains("unknown status 'frozen'"));
        assert!(err.to_string().contains("quarantined"));
    }

    #[test]
    fn atom_ids_parse_with_clear_errors() {
        let id = Ulid::generate();
        assert_eq!(parse_atom_id(&id.to_string()), Ok(id));
        assert_eq!(parse_atom_id(&format!("urn:hmg:atom:{id}")), Ok(id));
        let err = parse_atom_id("not-an-id").unwrap_err();
        assert!(err.to_string().contains("'not-an-id' is not an atom id"));
    }
}
