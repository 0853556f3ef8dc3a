//! Merging extracted facts into memory (the mem0-style `add`, SPEC §7): each
//! fact is compared with the most similar active memories of the scope and
//! becomes ADD (a new atom), UPDATE (a replace: the old atom stays in the
//! evolution chain), DELETE (a negate: the atom stays, marked false) or NONE
//! (already known).
//!
//! **Invariant:** a merge decision never destroys anything; it only goes
//! through memorize, correct/replace and correct/negate, so every effect is
//! audited like the MCP tools'.

use std::collections::HashSet;

use serde::{Deserialize, Serialize};

use super::{Caller, CorrectAction, CorrectRequest, Effect, MemorizeRequest, Memory, Result};
use crate::atom::Polarity;
use crate::recall::RecallRequest;
use crate::text::analyze::{Mode, terms};

/// What a fact did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "UPPERCASE")]
pub enum MergeEvent {
    /// A new memory.
    Add,
    /// Replaced a memory on the same subject.
    Update,
    /// Marked a memory false.
    Delete,
    /// Already known (or rejected by admission, see `reason`).
    None,
}

/// One fact's outcome, in the REST API's shape.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct MergeResult {
    /// The atom now holding the fact (ADD, UPDATE: the new one; DELETE,
    /// NONE: the existing one; absent when the fact was rejected).
    pub id: Option<String>,
    /// The fact's text (DELETE: the memory marked false).
    pub memory: String,
    /// ADD / UPDATE / DELETE / NONE.
    pub event: MergeEvent,
    /// UPDATE: the content replaced.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub previous_memory: Option<String>,
    /// Why nothing was stored (admission), if so.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// Words that only mark a statement as negative or ended; left out when
/// comparing what two statements are about.
const NEGATION_TERMS: &[&str] =
    &["no", "not", "longer", "never", "doe", "does", "do", "don't", "不", "不再", "没", "没有", "ない", "ません"];

fn subject_terms(text: &str) -> HashSet<String> {
    terms(text, Mode::Query).into_iter().filter(|t| !NEGATION_TERMS.contains(&t.as_str())).collect()
}

/// Term overlap of two statements (intersection over union).
pub(super) fn jaccard(a: &HashSet<String>, b: &HashSet<String>) -> f32 {
    let union = a.union(b).count();
    if union == 0 { 0.0 } else { a.intersection(b).count() as f32 / union as f32 }
}

/// The statement's predicate: its first term ("prefer", "喜欢", …).
fn predicate(text: &str) -> Option<String> {
    terms(text, Mode::Query).into_iter().next()
}

impl Memory {
    /// Merges `facts` (from an [`crate::extract::Extractor`]) into the
    /// caller's scope, attributed to `source`.
    #[tracing::instrument(skip(self, facts), fields(tenant = %caller.scope.tenant_id, facts = facts.len()))]
    pub fn merge_facts(&self, caller: &Caller, facts: &[String], source: &str) -> Result<Vec<MergeResult>> {
        let mut results = Vec::with_capacity(facts.len());
        for fact in facts {
            results.push(self.merge_fact(caller, fact, source)?);
        }
        Ok(results)
    }

    fn merge_fact(&self, caller: &Caller, fact: &str, source: &str) -> Result<MergeResult> {
        let fact_terms = subject_terms(fact);
        let negative = crate::text::infer_polarity(fact) == Polarity::Negative;
        let fact_predicate = predicate(fact);
        let similar =
            self.recall(caller, RecallRequest { max_results: 5, strict_scope: true, record: false, ..RecallRequest::new(fact) })?;
        for hit in &similar.atoms {
            let hit_terms = subject_terms(&hit.content);
            let overlap = jaccard(&fact_terms, &hit_terms);
            if crate::text::normalize(&hit.content) == crate::text::normalize(fact) || overlap >= 0.9 && !negative {
                return Ok(MergeResult {
                    id: Some(hit.atom_id.clone()),
                    memory: hit.content.clone(),
                    event: MergeEvent::None,
                    previous_memory: None,
                    reason: None,
                });
            }
            let hit_negative = crate::text::infer_polarity(&hit.content) == Polarity::Negative;
            if negative && !hit_negative && overlap >= 0.5 {
                let request = CorrectRequest {
                    target_atom: hit.atom_id.clone(),
                    action: CorrectAction::Negate,
                    reason: format!("contradicted by: {fact}"),
                    new_content: None,
                };
                let outcome = self.correct(caller, request)?;
                if outcome.effect == Effect::Applied {
                    return Ok(MergeResult {
                        id: Some(hit.atom_id.clone()),
                        memory: hit.content.clone(),
                        event: MergeEvent::Delete,
                        previous_memory: None,
                        reason: None,
                    });
                }
            }
            let same_predicate = fact_predicate.is_some() && predicate(&hit.content) == fact_predicate;
            // Cosines are no help here (the multilingual model puts most
            // pairs near 0.8): the same predicate about overlapping terms is.
            if same_predicate && negative == hit_negative && overlap >= 0.3 {
                let request = CorrectRequest {
                    target_atom: hit.atom_id.clone(),
                    action: CorrectAction::Replace,
                    reason: format!("updated by: {fact}"),
                    new_content: Some(fact.to_owned()),
                };
                let outcome = self.correct(caller, request)?;
                if let (Effect::Applied, Some(new_id)) = (outcome.effect, outcome.new_atom_id) {
                    return Ok(MergeResult {
                        id: Some(new_id),
                        memory: fact.to_owned(),
                        event: MergeEvent::Update,
                        previous_memory: Some(hit.content.clone()),
                        reason: None,
                    });
                }
            }
        }
        let outcome = self.memorize(caller, MemorizeRequest::new(fact).with_source(source))?;
        Ok(match outcome.effect {
            Effect::Applied => {
                MergeResult { id: outcome.atom_id, memory: fact.to_owned(), event: MergeEvent::Add, previous_memory: None, reason: None }
            }
            Effect::NoOp => MergeResult {
                id: outcome.deduped_with,
                memory: fact.to_owned(),
                event: MergeEvent::None,
                previous_memory: None,
                reason: None,
            },
            Effect::Rejected => {
                MergeResult { id: None, memory: fact.to_owned(), event: MergeEvent::None, previous_memory: None, reason: outcome.reason }
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::extract::{Extractor, Message, RuleExtractor};
    use crate::scope::Scope;

    fn add(memory: &Memory, caller: &Caller, text: &str) -> Vec<MergeResult> {
        let facts = RuleExtractor.extract(&[Message { role: "user".to_owned(), content: text.to_owned() }]).unwrap();
        memory.merge_facts(caller, &facts, "user").unwrap()
    }

    #[test]
    fn a_preference_changed_twice_leaves_one_memory_and_a_two_step_chain() {
        let memory = Memory::open_in_memory().unwrap();
        let caller = Caller::new(Scope::tenant("alice").with_workspace("vg").with_repository("agent"), "test");
        let first = add(&memory, &caller, "I prefer tabs for indentation.");
        assert_eq!(first[0].event, MergeEvent::Add, "{first:?}");
        let second = add(&memory, &caller, "I prefer spaces for indentation.");
        assert_eq!(second[0].event, MergeEvent::Update, "{second:?}");
        let third = add(&memory, &caller, "I prefer two spaces for indentation.");
        assert_eq!(third[0].event, MergeEvent::Update, "{third:?}");
        let head = third[0].id.clone().unwrap();
        let history = memory.history(&caller, &head).unwrap();
        assert_eq!(history.chain.len(), 3, "{history:?}");
        assert_eq!(history.chain.iter().filter(|a| a.status == crate::Status::Active).count(), 1);
        let again = add(&memory, &caller, "I prefer two spaces for indentation.");
        assert_eq!(again[0].event, MergeEvent::None);
        // Unrelated facts are added beside it.
        let other = add(&memory, &caller, "I use Neovim every day.");
        assert_eq!(other[0].event, MergeEvent::Add, "{other:?}");
    }

    #[test]
    fn a_negated_fact_marks_the_memory_false_and_keeps_it() {
        let memory = Memory::open_in_memory().unwrap();
        let caller = Caller::new(Scope::tenant("bob"), "test");
        let added = add(&memory, &caller, "我喜欢喝咖啡。");
        assert_eq!(added[0].event, MergeEvent::Add, "{added:?}");
        let deleted = add(&memory, &caller, "我不再喜欢喝咖啡。");
        assert_eq!(deleted[0].event, MergeEvent::Delete, "{deleted:?}");
        let history = memory.history(&caller, added[0].id.as_deref().unwrap()).unwrap();
        assert_eq!(history.chain[0].status, crate::Status::Negated);
        assert!(history.chain[0].content.contains("咖啡"), "history keeps the content");
    }
}
