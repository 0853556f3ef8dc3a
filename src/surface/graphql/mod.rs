//! GraphQL for humans inspecting memory (`/graphql` in `hmg serve`): atoms
//! with filters and cursor pagination, one atom with its evolution chain,
//! derived lessons and audit entries, entities, scopes, stats, recall with
//! `explain`, and mutations mirroring the MCP tools.
//!
//! **Invariants:**
//! - Every resolver acts in the request's [`Principal`]'s tenant; a scope
//!   argument can only narrow within it. Reads need `memory:read`, mutations
//!   `memory:write` (error code `FORBIDDEN`).
//! - Errors carry `extensions.code`, from the error's [`crate::Fault`]
//!   ([`crate::surface::status::graphql_code`]): `BAD_USER_INPUT` (with
//!   `extensions.field`), `NOT_FOUND`, `FORBIDDEN`, `CONFLICT`, `BUSY`,
//!   `UNAVAILABLE`, `INTERNAL`, …
//! - Types are named for the domain (`Atom`, `AuditEntry`, `Entity`, …) and
//!   live in [`types`], built from the facade's views.
//! - Before parsing, the request's nesting is bounded ([`crate::limits`]);
//!   before executing, its field depth ([`MAX_DEPTH`], introspection
//!   [`MAX_INTROSPECTION_DEPTH`], so GraphiQL's start-up query passes) and
//!   fragment hops are checked ([`decode_request`]), and its cost is
//!   bounded by a complexity model that charges list fields by the atoms
//!   they load ([`MAX_COMPLEXITY`]; a whole-tenant scan costs
//!   [`SCAN_COST`]). The SDL is checked in as `schema/schema.graphql` and a
//!   test fails when it drifts.

mod types;

use crate::fault::{Classified, Fault};
use crate::surface::burst::Burst;
use crate::surface::status;
use std::collections::BTreeMap;
use std::sync::Arc;

use async_graphql::{Context, EmptySubscription, ErrorExtensions, InputObject, Object, Schema, SimpleObject};

use crate::memory::{AtomFilter, AtomView, Caller, Memory, MemoryError};
use crate::scope::Scope;
use crate::surface::token::Principal;
use crate::tools::relay::SharedMemory;
use types::{Atom, History, ReflectInput, ReflectReport, Stats};

/// The schema type.
pub(crate) type HmgSchema = Schema<QueryRoot, MutationRoot, EmptySubscription>;

/// Deepest chain of fields a query may select.
pub(crate) const MAX_DEPTH: usize = 12;
/// Deepest chain of fields under `__schema` / `__type` (GraphiQL's
/// introspection query nests `ofType` 8 levels under `__schema.types.fields.type`).
pub(crate) const MAX_INTROSPECTION_DEPTH: usize = 20;
/// Most fragments a selection may pass through (`...A` inside `...B` …).
pub(crate) const MAX_FRAGMENT_HOPS: usize = 16;
/// Largest cost of one request.
pub(crate) const MAX_COMPLEXITY: usize = 5_000;
/// Cost of a field that reads every atom of the tenant (`entities`,
/// `scopes`): at most four per request.
pub(crate) const SCAN_COST: usize = 1_000;

/// Builds the schema over `shared`; `memorize` calls join `burst`, the
/// process's group commit ([`Burst`]).
pub(crate) fn schema(shared: Arc<SharedMemory>, burst: Arc<Burst>) -> HmgSchema {
    Schema::build(QueryRoot, MutationRoot, EmptySubscription)
        .data(shared)
        .data(burst)
        .limit_complexity(MAX_COMPLEXITY)
        .limit_recursive_depth(64)
        .finish()
}

/// Decodes a GraphQL-over-HTTP JSON body, refusing documents nested,
/// selected or chained through fragments deeper than the limits before
/// anything recursive runs on them. The message says which limit.
pub(crate) fn decode_request(body: &[u8]) -> Result<async_graphql::Request, String> {
    let text = std::str::from_utf8(body).map_err(|_| "the body is not UTF-8".to_owned())?;
    crate::limits::check_nesting(text, crate::limits::Syntax::Json, crate::limits::JSON_MAX_NESTING).map_err(|e| e.to_string())?;
    let request: async_graphql::Request = serde_json::from_str(text)
        .map_err(|e| format!("the body is not a GraphQL request (a JSON object with a \"query\" string): {e}"))?;
    crate::limits::check_nesting(&request.query, crate::limits::Syntax::Graphql, crate::limits::GRAPHQL_MAX_NESTING)
        .map_err(|e| e.to_string())?;
    let document = async_graphql::parser::parse_query(&request.query).map_err(|e| format!("malformed GraphQL document: {e}"))?;
    check_depth(&document)?;
    Ok(request)
}

/// Heights of a selection: the longest chain of ordinary fields, of
/// introspection fields, and of fragment hops.
#[derive(Debug, Clone, Copy, Default)]
struct Height {
    fields: usize,
    introspection: usize,
    hops: usize,
}

fn check_depth(document: &async_graphql::parser::types::ExecutableDocument) -> Result<(), String> {
    use async_graphql::parser::types::DocumentOperations;
    let mut walk = DepthWalk { document, memo: std::collections::HashMap::new(), active: Vec::new() };
    let operations: Vec<&async_graphql::parser::types::SelectionSet> = match &document.operations {
        DocumentOperations::Single(op) => vec![&op.node.selection_set.node],
        DocumentOperations::Multiple(ops) => ops.values().map(|op| &op.node.selection_set.node).collect(),
    };
    for set in operations {
        let height = walk.height(set, 0)?;
        if height.fields > MAX_DEPTH {
            return Err(format!("the query selects fields nested {} deep; the limit is {MAX_DEPTH}", height.fields));
        }
        if height.introspection > MAX_INTROSPECTION_DEPTH {
            return Err(format!("the introspection query is nested {} deep; the limit is {MAX_INTROSPECTION_DEPTH}", height.introspection));
        }
    }
    Ok(())
}

struct DepthWalk<'a> {
    document: &'a async_graphql::parser::types::ExecutableDocument,
    memo: std::collections::HashMap<&'a str, Height>,
    active: Vec<&'a str>,
}

impl<'a> DepthWalk<'a> {
    /// The heights of `set`; `hops` fragments are open above it. Stops as
    /// soon as a limit is passed, so its own recursion stays shallow.
    fn height(&mut self, set: &'a async_graphql::parser::types::SelectionSet, hops: usize) -> Result<Height, String> {
        use async_graphql::parser::types::Selection;
        let mut height = Height::default();
        for item in &set.items {
            match &item.node {
                Selection::Field(field) => {
                    let name = field.node.name.node.as_str();
                    let child = self.height(&field.node.selection_set.node, hops)?;
                    if name == "__schema" || name == "__type" {
                        height.introspection = height.introspection.max(1 + child.fields.max(child.introspection));
                    } else {
                        height.fields = height.fields.max(1 + child.fields);
                        height.introspection = height.introspection.max(child.introspection);
                    }
                    height.hops = height.hops.max(child.hops);
                }
                Selection::InlineFragment(fragment) => {
                    let child = self.height(&fragment.node.selection_set.node, hops)?;
                    height = merge(height, child);
                }
                Selection::FragmentSpread(spread) => {
                    let name = spread.node.fragment_name.node.as_str();
                    if hops + 1 > MAX_FRAGMENT_HOPS {
                        return Err(format!("fragments are spread inside each other more than {MAX_FRAGMENT_HOPS} deep"));
                    }
                    let child = match self.memo.get(name) {
                        Some(known) => *known,
                        None => {
                            if self.active.contains(&name) {
                                return Err(format!("fragment '{name}' spreads itself"));
                            }
                            let Some((key, definition)) = self.document.fragments.get_key_value(name) else { continue };
                            self.active.push(key.as_str());
                            let computed = self.height(&definition.node.selection_set.node, hops + 1)?;
                            self.active.pop();
                            self.memo.insert(key.as_str(), computed);
                            computed
                        }
                    };
                    height = merge(height, Height { hops: child.hops + 1, ..child });
                }
            }
            if height.fields > MAX_DEPTH || height.introspection > MAX_INTROSPECTION_DEPTH || height.hops > MAX_FRAGMENT_HOPS {
                return Ok(height);
            }
        }
        Ok(height)
    }
}

fn merge(a: Height, b: Height) -> Height {
    Height { fields: a.fields.max(b.fields), introspection: a.introspection.max(b.introspection), hops: a.hops.max(b.hops) }
}

/// The schema in SDL (what `schema/schema.graphql` holds).
#[cfg(test)]
fn sdl() -> String {
    Schema::build(QueryRoot, MutationRoot, EmptySubscription).finish().sdl()
}

fn coded(message: impl Into<String>, fault: Fault) -> async_graphql::Error {
    async_graphql::Error::new(message.into()).extend_with(|_, e| e.set("code", status::graphql_code(fault)))
}

/// The one mapping of an error to a GraphQL error: `code` from its fault,
/// `field` when one is at fault.
fn classified(error: &dyn Classified) -> async_graphql::Error {
    let fault = error.fault();
    if !fault.is_callers() {
        tracing::error!(%error, "GraphQL resolver failed");
    }
    let field = error.field().map(str::to_owned);
    async_graphql::Error::new(error.to_string()).extend_with(|_, e| {
        e.set("code", status::graphql_code(fault));
        if let Some(field) = &field {
            e.set("field", field.as_str());
        }
    })
}

fn memory_error(error: MemoryError) -> async_graphql::Error {
    classified(&error)
}

/// Narrowing scope for recall and writes (the tenant comes from the token).
#[derive(Debug, Clone, Default, InputObject)]
pub(crate) struct ScopeArg {
    /// Workspace (git remote owner).
    pub workspace: Option<String>,
    /// Repository.
    pub repository: Option<String>,
    /// Branch.
    pub branch: Option<String>,
}

/// Filters of `atoms`.
#[derive(Debug, Clone, Default, InputObject)]
pub(crate) struct AtomFilterInput {
    /// Workspace.
    pub workspace: Option<String>,
    /// Repository.
    pub repository: Option<String>,
    /// Branch.
    pub branch: Option<String>,
    /// Only tenant-wide atoms.
    #[graphql(default)]
    pub tenant_wide: bool,
    /// fact / handoff / lesson / episode / reflection.
    pub kind: Option<String>,
    /// active / negated / superseded / quarantined / sealed / tombstoned.
    pub status: Option<String>,
    /// actual / necessary / possible.
    pub epistemic: Option<String>,
    /// affirmative / negative / conditional.
    pub polarity: Option<String>,
    /// Created at or after (RFC 3339).
    pub created_after: Option<String>,
    /// Created before (RFC 3339).
    pub created_before: Option<String>,
    /// Case-insensitive substring of the content.
    pub text: Option<String>,
}

fn time(field: &'static str, value: Option<String>) -> Result<Option<chrono::DateTime<chrono::Utc>>, async_graphql::Error> {
    value
        .map(|v| {
            chrono::DateTime::parse_from_rfc3339(v.trim())
                .map(|t| t.with_timezone(&chrono::Utc))
                .map_err(|e| memory_error(MemoryError::InvalidInput { field, message: format!("'{v}' is not an RFC 3339 time: {e}") }))
        })
        .transpose()
}

/// A filter value of a closed set (`kind`, `status`, …), checked: an
/// unknown one is an error naming the field and the values allowed.
fn closed<T: std::str::FromStr<Err = crate::atom::UnknownValue>>(
    field: &'static str,
    value: Option<String>,
) -> Result<Option<T>, async_graphql::Error> {
    value.map(|v| v.parse::<T>().map_err(|e| memory_error(MemoryError::invalid(field, e.to_string())))).transpose()
}

/// A page of atoms.
#[derive(Debug, Clone, SimpleObject)]
pub(crate) struct AtomConnection {
    /// Newest first.
    pub nodes: Vec<Atom>,
    /// Cursor for `after` (null on the last page).
    pub end_cursor: Option<String>,
    /// Whether another page follows.
    pub has_next_page: bool,
    /// Atoms matching the filter in all pages.
    pub total_count: usize,
}

/// An entity and the atoms that mention it.
#[derive(Debug, Clone, SimpleObject)]
pub(crate) struct Entity {
    /// Entity name as written.
    pub name: String,
    /// How many atoms mention it.
    pub atom_count: usize,
    /// Those atoms' ids, newest first.
    pub atom_ids: Vec<String>,
}

/// A scope in use and its atom count.
#[derive(Debug, Clone, SimpleObject)]
pub(crate) struct ScopeCount {
    /// Workspace.
    pub workspace: Option<String>,
    /// Repository.
    pub repository: Option<String>,
    /// Branch.
    pub branch: Option<String>,
    /// Atoms written there.
    pub atom_count: usize,
}

/// One recall result.
#[derive(Debug, Clone, SimpleObject)]
pub(crate) struct RecallHit {
    /// Atom id.
    pub atom_id: String,
    /// Content.
    pub content: String,
    /// 0–1.
    pub score: f64,
    /// RFC 3339.
    pub created_at: String,
    /// Attribution.
    pub source: String,
    /// Kind.
    pub kind: String,
    /// Status.
    pub status: String,
    /// Each stage's contribution (with `explain: true`).
    pub explain: Option<async_graphql::Json<crate::recall::Explain>>,
}

/// A mutation's outcome (fields of the matching MCP tool).
#[derive(Debug, Clone, SimpleObject)]
pub(crate) struct WriteOutcome {
    /// applied / no_op / rejected.
    pub effect: String,
    /// The atom written (memorize, handoff) or found (no_op).
    pub atom_id: Option<String>,
    /// The atom acted on (correct, govern).
    pub target_atom: Option<String>,
    /// The replacement (correct replace).
    pub new_atom_id: Option<String>,
    /// The lesson (govern derive_lesson).
    pub lesson_atom_id: Option<String>,
    /// The existing duplicate (memorize no_op).
    pub deduped_with: Option<String>,
    /// Why (not on applied).
    pub reason: Option<String>,
    /// Kinds of secret removed before storing.
    pub redactions: Vec<String>,
}

impl WriteOutcome {
    fn from_json(value: serde_json::Value) -> WriteOutcome {
        let text = |name: &str| value.get(name).and_then(serde_json::Value::as_str).map(str::to_owned);
        WriteOutcome {
            effect: text("effect").unwrap_or_default(),
            atom_id: text("atom_id"),
            target_atom: text("target_atom"),
            new_atom_id: text("new_atom_id"),
            lesson_atom_id: text("lesson_atom_id"),
            deduped_with: text("deduped_with"),
            reason: text("reason"),
            redactions: value.get("redactions").and_then(|r| serde_json::from_value(r.clone()).ok()).unwrap_or_default(),
        }
    }
}

/// The request's principal and the local store, checked for `write`.
fn access(ctx: &Context<'_>, write: bool) -> Result<(Principal, Arc<Memory>), async_graphql::Error> {
    let principal = ctx.data_opt::<Principal>().cloned().ok_or_else(|| coded("unauthenticated", Fault::Forbidden))?;
    principal.require(write, if write { "a mutation" } else { "a query" }).map_err(|denied| classified(&denied))?;
    let shared = ctx.data::<Arc<SharedMemory>>()?;
    let memory = shared.local().ok_or_else(|| {
        coded("the store is open in another hmg process; GraphQL is served by the process that owns it", Fault::Unavailable)
    })?;
    Ok((principal, memory))
}

fn caller(principal: &Principal, scope: Option<ScopeArg>) -> Caller {
    let scope = scope.unwrap_or_default();
    Caller::new(
        Scope { tenant_id: principal.tenant.clone(), workspace: scope.workspace, repository: scope.repository, branch: scope.branch },
        principal.actor("graphql"),
    )
}

/// Runs blocking facade work on the shared bounded pool
/// ([`crate::surface::blocking`]); a full pool is `BUSY`, a deadline `UNAVAILABLE`.
async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, async_graphql::Error> + Send + 'static,
) -> Result<T, async_graphql::Error> {
    match crate::surface::blocking::run(crate::surface::blocking::DEFAULT_DEADLINE, work).await {
        Ok(result) => result,
        Err(refused) => Err(classified(&refused)),
    }
}

/// Queries.
#[derive(Debug, Default)]
pub(crate) struct QueryRoot;

#[Object]
impl QueryRoot {
    /// Atoms of your tenant, newest first, filtered, `first` per page (at most 200).
    #[graphql(complexity = "5 + usize::try_from(first).unwrap_or(0).min(crate::memory::MAX_PAGE) * child_complexity")]
    async fn atoms(
        &self,
        ctx: &Context<'_>,
        filter: Option<AtomFilterInput>,
        #[graphql(default = 20)] first: i32,
        after: Option<String>,
    ) -> async_graphql::Result<AtomConnection> {
        let (principal, memory) = access(ctx, false)?;
        let f = filter.unwrap_or_default();
        let filter = AtomFilter {
            created_after: time("created_after", f.created_after)?,
            created_before: time("created_before", f.created_before)?,
            workspace: f.workspace,
            repository: f.repository,
            branch: f.branch,
            tenant_wide: f.tenant_wide,
            kind: closed("filter.kind", f.kind)?,
            status: closed("filter.status", f.status)?,
            epistemic: closed("filter.epistemic", f.epistemic)?,
            polarity: closed("filter.polarity", f.polarity)?,
            text: f.text,
            exact_scope: false,
        };
        let first = usize::try_from(first)
            .map_err(|_| memory_error(MemoryError::InvalidInput { field: "first", message: "must be positive".to_owned() }))?;
        blocking(move || {
            let page = memory.list_atoms(&caller(&principal, None), &filter, after.as_deref(), first).map_err(memory_error)?;
            Ok(AtomConnection {
                has_next_page: page.next_cursor.is_some(),
                end_cursor: page.next_cursor,
                total_count: page.total,
                nodes: page.atoms.into_iter().map(Atom::from).collect(),
            })
        })
        .await
    }

    /// One atom with its whole evolution chain (both directions), derived lessons and audit entries.
    #[graphql(complexity = "20 + child_complexity")]
    async fn atom(&self, ctx: &Context<'_>, id: String) -> async_graphql::Result<History> {
        let (principal, memory) = access(ctx, false)?;
        blocking(move || memory.history(&caller(&principal, None), &id).map(History::from).map_err(memory_error)).await
    }

    /// Entities and the atoms mentioning them, most mentioned first (reads every atom).
    #[graphql(complexity = "SCAN_COST + usize::try_from(first).unwrap_or(0).min(500) * child_complexity")]
    async fn entities(&self, ctx: &Context<'_>, #[graphql(default = 50)] first: i32) -> async_graphql::Result<Vec<Entity>> {
        let (principal, memory) = access(ctx, false)?;
        let first = usize::try_from(first).unwrap_or(0).min(500);
        blocking(move || {
            let mut by_name: BTreeMap<String, Vec<String>> = BTreeMap::new();
            for atom in all_atoms(&memory, &principal)? {
                for entity in atom.entities {
                    by_name.entry(entity).or_default().push(atom.atom_id.clone());
                }
            }
            let mut entities: Vec<Entity> =
                by_name.into_iter().map(|(name, atom_ids)| Entity { name, atom_count: atom_ids.len(), atom_ids }).collect();
            entities.sort_by(|a, b| b.atom_count.cmp(&a.atom_count).then(a.name.cmp(&b.name)));
            entities.truncate(first);
            Ok(entities)
        })
        .await
    }

    /// Scopes your tenant's atoms were written in (reads every atom).
    #[graphql(complexity = "SCAN_COST + child_complexity")]
    async fn scopes(&self, ctx: &Context<'_>) -> async_graphql::Result<Vec<ScopeCount>> {
        let (principal, memory) = access(ctx, false)?;
        blocking(move || {
            type Place = (Option<String>, Option<String>, Option<String>);
            let mut counts: BTreeMap<Place, usize> = BTreeMap::new();
            for atom in all_atoms(&memory, &principal)? {
                *counts.entry((atom.scope.workspace, atom.scope.repository, atom.scope.branch)).or_default() += 1;
            }
            Ok(counts
                .into_iter()
                .map(|((workspace, repository, branch), atom_count)| ScopeCount { workspace, repository, branch, atom_count })
                .collect())
        })
        .await
    }

    /// memory_stats.
    #[graphql(complexity = "100 + child_complexity")]
    async fn stats(&self, ctx: &Context<'_>) -> async_graphql::Result<Stats> {
        let (principal, memory) = access(ctx, false)?;
        blocking(move || memory.stats(&caller(&principal, None)).map(Stats::from).map_err(memory_error)).await
    }

    /// memory_recall, with each stage's contribution when `explain` is set.
    #[graphql(complexity = "50 + usize::try_from(max_results).unwrap_or(0).min(100) * child_complexity")]
    async fn recall(
        &self,
        ctx: &Context<'_>,
        query: String,
        #[graphql(default = 10)] max_results: i32,
        #[graphql(default = false)] include_negated: bool,
        #[graphql(default = false)] explain: bool,
        scope: Option<ScopeArg>,
    ) -> async_graphql::Result<Vec<RecallHit>> {
        let (principal, memory) = access(ctx, false)?;
        let max_results = usize::try_from(max_results).unwrap_or(0);
        blocking(move || {
            let request = crate::RecallRequest { max_results, include_negated, explain, ..crate::RecallRequest::new(query) };
            let outcome = memory.recall(&caller(&principal, scope), request).map_err(memory_error)?;
            Ok(outcome
                .atoms
                .into_iter()
                .map(|a| RecallHit {
                    atom_id: a.atom_id,
                    content: a.content,
                    score: f64::from(a.score),
                    created_at: a.created_at,
                    source: a.source,
                    kind: a.kind.as_str().to_owned(),
                    status: a.status.as_str().to_owned(),
                    explain: a.explain.map(async_graphql::Json),
                })
                .collect())
        })
        .await
    }
}

fn all_atoms(memory: &Memory, principal: &Principal) -> Result<Vec<AtomView>, async_graphql::Error> {
    let atoms = memory.atoms_matching(&caller(principal, None), &AtomFilter::default()).map_err(memory_error)?;
    Ok(atoms.iter().map(AtomView::from).collect())
}

/// Mutations: the MCP tools.
#[derive(Debug, Default)]
pub(crate) struct MutationRoot;

async fn write(ctx: &Context<'_>, scope: Option<ScopeArg>, call: crate::tools::ToolCall) -> async_graphql::Result<WriteOutcome> {
    let (principal, memory) = access(ctx, true)?;
    let caller = caller(&principal, scope);
    let answer = if matches!(call, crate::tools::ToolCall::Memorize(_)) {
        // Concurrent requests' memorize calls are written together, each
        // answered as if alone (one embedding batch per model, one
        // transaction per caller), as over MCP.
        let (shared, burst) = (ctx.data::<Arc<SharedMemory>>()?, ctx.data::<Arc<Burst>>()?);
        Burst::submit(burst, shared, call, caller).await.map_err(|refused| classified(&refused))?
    } else {
        blocking(move || Ok(call.run(&memory, &caller))).await?
    };
    answer.map(WriteOutcome::from_json).map_err(|error| classified(&error))
}

fn decode<T: serde::de::DeserializeOwned>(value: serde_json::Value) -> async_graphql::Result<T> {
    crate::tools::decode(value).map_err(|e| classified(&e))
}

#[Object]
impl MutationRoot {
    /// memory_memorize.
    #[graphql(complexity = "50 + child_complexity")]
    async fn memorize(
        &self,
        ctx: &Context<'_>,
        content: String,
        source: Option<String>,
        scope: Option<ScopeArg>,
    ) -> async_graphql::Result<WriteOutcome> {
        let args = decode(serde_json::json!({ "content": content, "source": source }))?;
        write(ctx, scope, crate::tools::ToolCall::Memorize(args)).await
    }

    /// memory_correct: negate, confirm_actual, confirm_necessary, demote, replace.
    #[graphql(complexity = "50 + child_complexity")]
    async fn correct(
        &self,
        ctx: &Context<'_>,
        target_atom: String,
        action: String,
        reason: String,
        new_content: Option<String>,
    ) -> async_graphql::Result<WriteOutcome> {
        let args =
            decode(serde_json::json!({ "target_atom": target_atom, "action": action, "reason": reason, "new_content": new_content }))?;
        write(ctx, None, crate::tools::ToolCall::Correct(args)).await
    }

    /// memory_govern: quarantine, restore, seal, tombstone, derive_lesson.
    #[graphql(complexity = "50 + child_complexity")]
    async fn govern(
        &self,
        ctx: &Context<'_>,
        target_atom: String,
        action: String,
        reason: String,
        lesson_content: Option<String>,
    ) -> async_graphql::Result<WriteOutcome> {
        let args = decode(
            serde_json::json!({ "target_atom": target_atom, "action": action, "reason": reason, "lesson_content": lesson_content }),
        )?;
        write(ctx, None, crate::tools::ToolCall::Govern(args)).await
    }

    /// reflect (seed 004): summarize, promote, expire, decay, archive over
    /// your tenant. A dry run needs memory:read, a real run memory:write.
    #[graphql(complexity = "SCAN_COST + child_complexity")]
    async fn reflect(&self, ctx: &Context<'_>, input: Option<ReflectInput>) -> async_graphql::Result<ReflectReport> {
        let request: crate::ReflectRequest = input.unwrap_or_default().into();
        let (principal, memory) = access(ctx, !request.dry_run)?;
        let caller = caller(&principal, None);
        blocking(move || memory.reflect(&caller, request).map(ReflectReport::from).map_err(memory_error)).await
    }

    /// memory_handoff.
    #[graphql(complexity = "50 + child_complexity")]
    async fn handoff(
        &self,
        ctx: &Context<'_>,
        summary: String,
        source: Option<String>,
        scope: Option<ScopeArg>,
    ) -> async_graphql::Result<WriteOutcome> {
        let args = decode(serde_json::json!({ "summary": summary, "source": source }))?;
        write(ctx, scope, crate::tools::ToolCall::Handoff(args)).await
    }
}

#[cfg(test)]
mod tests {
    /// The checked-in SDL matches the code; `HMG_UPDATE_SDL=1` rewrites it.
    #[test]
    fn the_checked_in_sdl_matches_the_code() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("schema/schema.graphql");
        let sdl = super::sdl();
        if std::env::var_os("HMG_UPDATE_SDL").is_some() {
            std::fs::write(&path, &sdl).unwrap();
        }
        let checked_in = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(
            checked_in == sdl,
            "schema/schema.graphql is out of date: run HMG_UPDATE_SDL=1 cargo test --release --features e5 --lib sdl"
        );
    }
}
