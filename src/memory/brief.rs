//! agent_brief: what the SessionStart hook injects — latest handoffs,
//! constraints, lessons and key facts visible from a scope, within a
//! character budget; an onboarding note when there is nothing yet.

use oxigraph::model::Term;
use serde::Serialize;

use super::read::AtomView;
use super::{Caller, Memory, Result};
use crate::atom::{AtomId, Kind};
use crate::scope::{Scope, Visibility};
use crate::store::{self, NamedQuery};

/// Budget and shape of a brief.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BriefOptions {
    /// Upper bound on `text`, in characters (hooks allow 10,000).
    pub max_chars: usize,
    /// How many handoffs to show.
    pub max_handoffs: usize,
}

impl Default for BriefOptions {
    fn default() -> BriefOptions {
        BriefOptions { max_chars: 8_000, max_handoffs: 3 }
    }
}

/// A session brief.
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
pub struct Brief {
    /// Markdown text, at most `max_chars` characters.
    pub text: String,
    /// Latest handoffs, newest first.
    pub handoffs: Vec<AtomView>,
    /// Constraints in effect.
    pub constraints: Vec<AtomView>,
    /// Lessons.
    pub lessons: Vec<AtomView>,
    /// Key facts.
    pub facts: Vec<AtomView>,
    /// Whether the store has nothing visible from this scope yet.
    pub empty: bool,
    /// Whether items were left out to stay within the budget.
    pub truncated: bool,
}

/// Shown when nothing is stored yet for the scope.
pub const ONBOARDING: &str = "# HMG memory\n\nNo memories are stored for this project yet. HMG keeps long-term memory across sessions:\n- `memory_memorize`: store one self-contained fact, decision or constraint as soon as you learn it (in the user's language; no need to recall first — exact duplicates are merged).\n- `memory_recall`: search with a noun phrase naming the key entities (people, projects, technologies, files).\n- `memory_correct`: fix a memory (replace it instead of adding a near-duplicate; negate what turned out false).\n- `memory_govern`: quarantine, seal or tombstone a memory; derive a lesson from a mistake.\n- `memory_handoff`: at the end of a task, summarize what was done, why, how it was verified, risks and next steps.\n";

struct Row {
    id: AtomId,
    kind: Kind,
    necessary: bool,
    importance: f64,
    visibility: Visibility,
}

fn literal(row: &oxigraph::sparql::QuerySolution, name: &str) -> Option<String> {
    match row.get(name) {
        Some(Term::Literal(l)) => Some(l.value().to_owned()),
        _ => None,
    }
}

impl Memory {
    /// The session brief for the caller's scope.
    #[tracing::instrument(skip(self), fields(tenant = %caller.scope.tenant_id))]
    pub fn brief(&self, caller: &Caller, options: BriefOptions) -> Result<Brief> {
        let scope = caller.scope.clone().normalized()?;
        let tenant = &scope.tenant_id;
        let mut rows = Vec::new();
        for row in self.store.select(NamedQuery::ActiveAtoms, tenant, &[])? {
            let Some(id) = row.get("atom").and_then(store::atom_id_of) else { continue };
            let kind = match row.get("kind") {
                Some(Term::NamedNode(n)) => super::kind_of_class(n.as_str()),
                _ => None,
            };
            let Some(kind) = kind else { continue };
            let atom_scope = Scope {
                tenant_id: tenant.clone(),
                workspace: literal(&row, "workspace"),
                repository: literal(&row, "repository"),
                branch: literal(&row, "branch"),
            };
            let visibility = scope.sees(&atom_scope);
            if visibility == Visibility::Hidden {
                continue;
            }
            rows.push(Row {
                id,
                kind,
                necessary: literal(&row, "epistemic").as_deref() == Some("necessary"),
                importance: literal(&row, "importance").and_then(|v| v.parse().ok()).unwrap_or(0.5),
                visibility,
            });
        }
        if rows.is_empty() {
            return Ok(Brief {
                text: truncate(ONBOARDING, options.max_chars),
                handoffs: Vec::new(),
                constraints: Vec::new(),
                lessons: Vec::new(),
                facts: Vec::new(),
                empty: true,
                truncated: false,
            });
        }
        // Rows come newest first; stable sorts keep recency as the tie-break.
        let mut handoffs: Vec<&Row> = rows.iter().filter(|r| r.kind == Kind::Handoff).collect();
        handoffs.sort_by_key(|r| std::cmp::Reverse(r.visibility));
        handoffs.truncate(options.max_handoffs);
        let by_weight = |a: &&Row, b: &&Row| {
            b.visibility.cmp(&a.visibility).then(b.importance.partial_cmp(&a.importance).unwrap_or(std::cmp::Ordering::Equal))
        };
        let mut constraints: Vec<&Row> = rows.iter().filter(|r| r.necessary && r.kind != Kind::Handoff).collect();
        constraints.sort_by(by_weight);
        let mut lessons: Vec<&Row> = rows.iter().filter(|r| r.kind == Kind::Lesson && !r.necessary).collect();
        lessons.sort_by(by_weight);
        let mut facts: Vec<&Row> = rows.iter().filter(|r| matches!(r.kind, Kind::Fact | Kind::Reflection) && !r.necessary).collect();
        facts.sort_by(by_weight);

        let mut text = format!("# HMG memory brief ({})\n", scope.display());
        let mut truncated = false;
        let mut sections: Vec<Vec<AtomView>> = Vec::new();
        for (title, picks) in [("Latest handoffs", handoffs), ("Constraints", constraints), ("Lessons", lessons), ("Key facts", facts)] {
            let mut shown = Vec::new();
            if picks.is_empty() {
                sections.push(shown);
                continue;
            }
            let header = format!("\n## {title}\n");
            // One long item (a handoff pasted whole) is shortened, not
            // dropped: each item gets at most a third of the budget.
            let item_cap = (options.max_chars / 3).max(200);
            let mut section = String::new();
            for row in picks {
                let Some(atom) = self.atom(tenant, row.id)? else { continue };
                let date = atom.created_at.format("%Y-%m-%d");
                let content = atom.visible_content().replace('\n', " ");
                let suffix = format!(" (id {})\n", atom.id);
                let prefix = format!("- [{date}] ");
                let used = text.chars().count() + header.chars().count() + section.chars().count();
                let room = options.max_chars.saturating_sub(used + prefix.chars().count() + suffix.chars().count());
                let cap = item_cap.min(room);
                let shown_content = if content.chars().count() <= cap {
                    content
                } else if cap >= 80 {
                    truncated = true;
                    let mut short: String = content.chars().take(cap - 1).collect();
                    short.push('…');
                    short
                } else {
                    truncated = true;
                    break;
                };
                section.push_str(&prefix);
                section.push_str(&shown_content);
                section.push_str(&suffix);
                shown.push(AtomView::from(&atom));
            }
            if !section.is_empty() {
                text.push_str(&header);
                text.push_str(&section);
            }
            sections.push(shown);
        }
        let mut sections = sections.into_iter();
        Ok(Brief {
            text,
            handoffs: sections.next().unwrap_or_default(),
            constraints: sections.next().unwrap_or_default(),
            lessons: sections.next().unwrap_or_default(),
            facts: sections.next().unwrap_or_default(),
            empty: false,
            truncated,
        })
    }
}

fn truncate(text: &str, max_chars: usize) -> String {
    text.chars().take(max_chars).collect()
}
