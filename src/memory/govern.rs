//! memory_govern: quarantine, restore, seal, tombstone, derive_lesson.

use std::str::FromStr;

use serde::Serialize;

use super::write::{admit, new_atom};
use super::{Caller, Effect, Memory, MemoryError, Mutation, Result, clean_reason};
use crate::atom::{Kind, Status, parse_atom_id};

/// What a governance action does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GovernAction {
    /// Out of recall, content kept, restorable.
    Quarantine,
    /// Back from quarantine.
    Restore,
    /// Visible to audit only.
    Seal,
    /// Logical delete; content destroyed.
    Tombstone,
    /// New redacted lesson derived from the atom; the original is sealed.
    DeriveLesson,
}

impl GovernAction {
    /// Every action's wire name.
    pub const NAMES: &'static [&'static str] = &["quarantine", "restore", "seal", "tombstone", "derive_lesson"];

    /// Wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            GovernAction::Quarantine => "quarantine",
            GovernAction::Restore => "restore",
            GovernAction::Seal => "seal",
            GovernAction::Tombstone => "tombstone",
            GovernAction::DeriveLesson => "derive_lesson",
        }
    }
}

impl FromStr for GovernAction {
    type Err = MemoryError;
    fn from_str(s: &str) -> Result<GovernAction> {
        Ok(match s.trim() {
            "quarantine" => GovernAction::Quarantine,
            "restore" => GovernAction::Restore,
            "seal" => GovernAction::Seal,
            "tombstone" => GovernAction::Tombstone,
            "derive_lesson" => GovernAction::DeriveLesson,
            other => {
                return Err(MemoryError::invalid(
                    "action",
                    format!("unknown govern action '{other}'; expected one of: {}", GovernAction::NAMES.join(", ")),
                ));
            }
        })
    }
}

/// Input of `memory_govern`.
#[derive(Debug, Clone, PartialEq)]
pub struct GovernRequest {
    /// Atom id.
    pub target_atom: String,
    /// What to do.
    pub action: GovernAction,
    /// Why; written into the audit chain.
    pub reason: String,
    /// Required for derive_lesson.
    pub lesson_content: Option<String>,
}

/// Output of `memory_govern`.
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema, serde::Deserialize)]
pub struct GovernOutcome {
    /// applied / rejected.
    pub effect: Effect,
    /// The atom governed.
    pub target_atom: String,
    /// The lesson (derive_lesson only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lesson_atom_id: Option<String>,
    /// Why (rejected only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

impl GovernOutcome {
    fn rejected(target: &str, reason: String) -> GovernOutcome {
        GovernOutcome { effect: Effect::Rejected, target_atom: target.to_owned(), lesson_atom_id: None, reason: Some(reason) }
    }
}

impl Memory {
    /// `memory_govern`.
    #[tracing::instrument(skip(self, request), fields(tenant = %caller.scope.tenant_id, actor = %caller.actor, action = request.action.as_str()))]
    pub fn govern(&self, caller: &Caller, request: GovernRequest) -> Result<GovernOutcome> {
        let caller = &Caller { scope: caller.scope.clone().normalized()?, actor: caller.actor.clone() };
        let id = parse_atom_id(&request.target_atom).map_err(|e| MemoryError::invalid("target_atom", e.to_string()))?;
        let reason = clean_reason(&request.reason)?;
        let lesson = match (request.action, request.lesson_content.as_deref()) {
            (GovernAction::DeriveLesson, None) => {
                return Err(MemoryError::invalid("lesson_content", "lesson_content is required when action is derive_lesson"));
            }
            (GovernAction::DeriveLesson, Some(content)) => Some(content),
            (_, Some(_)) => {
                return Err(MemoryError::invalid("lesson_content", "lesson_content is only accepted with action derive_lesson"));
            }
            (_, None) => None,
        };
        let target = self.require_atom(caller, id)?;
        let target_text = id.to_string();
        let status = target.status;
        if status == Status::Tombstoned {
            return Ok(GovernOutcome::rejected(&target_text, format!("atom {id} is already tombstoned")));
        }
        let refusal = match request.action {
            GovernAction::Quarantine => match status {
                Status::Quarantined => Some("is already quarantined"),
                Status::Sealed => Some("is sealed; sealing is stronger than quarantine"),
                Status::Negated | Status::Superseded => Some("is not in effect (negated or superseded), so it is already out of recall"),
                _ => None,
            },
            GovernAction::Restore => {
                (status != Status::Quarantined).then_some("is not quarantined; only quarantined atoms can be restored")
            }
            GovernAction::Seal => (status == Status::Sealed).then_some("is already sealed"),
            GovernAction::Tombstone | GovernAction::DeriveLesson => None,
        };
        if let Some(refusal) = refusal {
            return Ok(GovernOutcome::rejected(&target_text, format!("atom {id} {refusal} (status: {status})")));
        }
        let action_name = format!("govern.{}", request.action.as_str());
        let base = Mutation { reason: Some(reason.clone()), target: Some(&target), ..Mutation::new(action_name) };
        match request.action {
            GovernAction::Quarantine => self.apply(caller, Mutation { new_status: Some(Status::Quarantined), ..base })?,
            GovernAction::Restore => self.apply(caller, Mutation { new_status: Some(Status::Active), ..base })?,
            GovernAction::Seal => self.apply(caller, Mutation { new_status: Some(Status::Sealed), ..base })?,
            GovernAction::Tombstone => {
                self.apply(caller, Mutation { new_status: Some(Status::Tombstoned), destroy_content: true, ..base })?;
            }
            GovernAction::DeriveLesson => {
                let admitted = match admit("lesson_content", lesson.unwrap_or_default(), super::MAX_CONTENT_CHARS) {
                    Ok(admitted) => admitted,
                    Err(why) => return Ok(GovernOutcome::rejected(&target_text, why)),
                };
                let lesson_id = self.next_id();
                let in_scope = Caller { scope: target.scope.clone(), actor: caller.actor.clone() };
                let (mut lesson_atom, entities) = new_atom(lesson_id, admitted.text, Kind::Lesson, "agent".to_owned(), &in_scope);
                lesson_atom.derived_from = vec![id];
                let new_status = (status != Status::Sealed).then_some(Status::Sealed);
                self.apply(caller, Mutation { new_status, created: Some((&lesson_atom, entities.as_slice())), ..base })?;
                return Ok(GovernOutcome {
                    effect: Effect::Applied,
                    target_atom: target_text,
                    lesson_atom_id: Some(lesson_id.to_string()),
                    reason: None,
                });
            }
        }
        Ok(GovernOutcome { effect: Effect::Applied, target_atom: target_text, lesson_atom_id: None, reason: None })
    }
}
