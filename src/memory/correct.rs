//! memory_correct: negate, confirm_actual, confirm_necessary, demote,
//! replace. Append-only: the old content stays in the store and the audit
//! chain; at any moment one atom of a chain is in effect.

use std::str::FromStr;

use serde::Serialize;

use super::write::{admit, new_atom};
use super::{Caller, Effect, Memory, MemoryError, Mutation, Result, clean_reason};
use crate::atom::{Epistemic, Status, parse_atom_id};

/// What a correction does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CorrectAction {
    /// Mark false and deactivate (permanent; there is no un-negate).
    Negate,
    /// Confirm as fact.
    ConfirmActual,
    /// Confirm as a hard constraint.
    ConfirmNecessary,
    /// Demote to possible.
    Demote,
    /// Replace with new content (new atom; the old one stays in the chain).
    Replace,
}

impl CorrectAction {
    /// Every action's wire name.
    pub const NAMES: &'static [&'static str] = &["negate", "confirm_actual", "confirm_necessary", "demote", "replace"];

    /// Wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            CorrectAction::Negate => "negate",
            CorrectAction::ConfirmActual => "confirm_actual",
            CorrectAction::ConfirmNecessary => "confirm_necessary",
            CorrectAction::Demote => "demote",
            CorrectAction::Replace => "replace",
        }
    }
}

impl FromStr for CorrectAction {
    type Err = MemoryError;
    fn from_str(s: &str) -> Result<CorrectAction> {
        Ok(match s.trim() {
            "negate" => CorrectAction::Negate,
            "confirm_actual" => CorrectAction::ConfirmActual,
            "confirm_necessary" => CorrectAction::ConfirmNecessary,
            "demote" => CorrectAction::Demote,
            "replace" => CorrectAction::Replace,
            other => {
                return Err(MemoryError::invalid(
                    "action",
                    format!("unknown correct action '{other}'; expected one of: {}", CorrectAction::NAMES.join(", ")),
                ));
            }
        })
    }
}

/// Input of `memory_correct`.
#[derive(Debug, Clone, PartialEq)]
pub struct CorrectRequest {
    /// Atom id (from recall results).
    pub target_atom: String,
    /// What to do.
    pub action: CorrectAction,
    /// Why; written into the audit chain.
    pub reason: String,
    /// Required for replace.
    pub new_content: Option<String>,
}

/// Output of `memory_correct`.
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema, serde::Deserialize)]
pub struct CorrectOutcome {
    /// applied / rejected.
    pub effect: Effect,
    /// The atom that was corrected.
    pub target_atom: String,
    /// The new atom (replace only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub new_atom_id: Option<String>,
    /// Why (rejected only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

impl CorrectOutcome {
    fn rejected(target: &str, reason: String) -> CorrectOutcome {
        CorrectOutcome { effect: Effect::Rejected, target_atom: target.to_owned(), new_atom_id: None, reason: Some(reason) }
    }
}

impl Memory {
    /// `memory_correct`.
    #[tracing::instrument(skip(self, request), fields(tenant = %caller.scope.tenant_id, actor = %caller.actor, action = request.action.as_str()))]
    pub fn correct(&self, caller: &Caller, request: CorrectRequest) -> Result<CorrectOutcome> {
        let caller = &Caller { scope: caller.scope.clone().normalized()?, actor: caller.actor.clone() };
        let id = parse_atom_id(&request.target_atom).map_err(|e| MemoryError::invalid("target_atom", e.to_string()))?;
        let reason = clean_reason(&request.reason)?;
        let new_content = match (request.action, request.new_content.as_deref()) {
            (CorrectAction::Replace, None) => {
                return Err(MemoryError::invalid("new_content", "new_content is required when action is replace"));
            }
            (CorrectAction::Replace, Some(content)) => Some(content),
            (_, Some(_)) => {
                return Err(MemoryError::invalid("new_content", "new_content is only accepted with action replace"));
            }
            (_, None) => None,
        };
        let target = self.require_atom(caller, id)?;
        let target_text = id.to_string();
        match target.status {
            Status::Superseded => {
                let head = self.chain_head(&caller.scope.tenant_id, id)?;
                return Ok(CorrectOutcome::rejected(
                    &target_text,
                    format!("atom {id} was superseded; the chain's current head is {head}: correct that atom instead"),
                ));
            }
            Status::Tombstoned => {
                return Ok(CorrectOutcome::rejected(&target_text, format!("atom {id} is tombstoned; its content is destroyed")));
            }
            Status::Sealed => {
                return Ok(CorrectOutcome::rejected(&target_text, format!("atom {id} is sealed (audit-only) and cannot be corrected")));
            }
            Status::Negated if request.action != CorrectAction::Replace => {
                return Ok(CorrectOutcome::rejected(
                    &target_text,
                    format!("atom {id} is negated and there is no un-negate; use action replace to write the correct content"),
                ));
            }
            _ => {}
        }
        let action_name = format!("correct.{}", request.action.as_str());
        let base = Mutation { reason: Some(reason), target: Some(&target), ..Mutation::new(action_name) };
        match request.action {
            CorrectAction::Negate => {
                self.apply(caller, Mutation { new_status: Some(Status::Negated), ..base })?;
            }
            CorrectAction::ConfirmActual | CorrectAction::ConfirmNecessary | CorrectAction::Demote => {
                let epistemic = match request.action {
                    CorrectAction::ConfirmActual => Epistemic::Actual,
                    CorrectAction::ConfirmNecessary => Epistemic::Necessary,
                    _ => Epistemic::Possible,
                };
                self.apply(caller, Mutation { new_epistemic: Some(epistemic), ..base })?;
            }
            CorrectAction::Replace => {
                let admitted = match admit("new_content", new_content.unwrap_or_default(), super::MAX_CONTENT_CHARS) {
                    Ok(admitted) => admitted,
                    Err(why) => return Ok(CorrectOutcome::rejected(&target_text, why)),
                };
                if target.content.as_deref().map(crate::text::normalize) == Some(crate::text::normalize(&admitted.text)) {
                    return Ok(CorrectOutcome::rejected(
                        &target_text,
                        "new_content is identical to the current content; nothing to replace".to_owned(),
                    ));
                }
                let new_id = self.next_id();
                let in_scope = Caller { scope: target.scope.clone(), actor: caller.actor.clone() };
                let (mut atom, entities) = new_atom(new_id, admitted.text, target.kind, target.source.clone(), &in_scope);
                atom.supersedes = Some(id);
                atom.session_id = target.session_id.clone();
                // A negated atom stays negated (negation is permanent); any
                // other status gives way to the new head.
                let new_status = (target.status != Status::Negated).then_some(Status::Superseded);
                self.apply(caller, Mutation { new_status, created: Some((&atom, entities.as_slice())), ..base })?;
                return Ok(CorrectOutcome {
                    effect: Effect::Applied,
                    target_atom: target_text,
                    new_atom_id: Some(new_id.to_string()),
                    reason: None,
                });
            }
        }
        Ok(CorrectOutcome { effect: Effect::Applied, target_atom: target_text, new_atom_id: None, reason: None })
    }
}
