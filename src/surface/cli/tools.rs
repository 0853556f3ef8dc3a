//! The tool-shaped commands (`memorize`, `recall`, `correct`, `govern`,
//! `handoff`, `reflect`, `stats`, `brief`): each builds the tool's arguments
//! and goes through the one dispatcher MCP uses
//! ([`crate::tools::relay::SharedMemory::call`]): run here when this process
//! holds the store, relayed to the process that does otherwise. One code
//! path, so a command behaves the same with or without a server running.

use std::io::Write;

use serde::de::DeserializeOwned;
use serde_json::json;

use super::args::Command;
use super::render::{self, Output};
use super::{CliError, Exit};
use crate::Caller;
use crate::tools::ToolCall;
use crate::tools::relay::SharedMemory;

/// Runs `tool` with `arguments` and reads its structured output back as the
/// facade's type.
fn call<T: DeserializeOwned>(shared: &SharedMemory, caller: &Caller, tool: &str, arguments: serde_json::Value) -> Result<T, CliError> {
    let call = ToolCall::decode(tool, arguments)?;
    let value = shared.call(call, caller)?;
    serde_json::from_value(value).map_err(|e| CliError::Tool(crate::tools::ToolError::Internal(format!("unexpected tool output: {e}"))))
}

/// Runs a tool-shaped command; `None` when `command` is not one.
pub(super) fn run(
    command: Command,
    shared: &SharedMemory,
    caller: &Caller,
    json: bool,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> Result<Option<Exit>, CliError> {
    let mut output = Output { json, out, err };
    let exit = match command {
        Command::Memorize { content, source, kind, expires_at } => {
            let arguments = json!({ "content": content, "source": source, "kind": kind, "expires_at": expires_at });
            render::memorized(&mut output, call(shared, caller, "hmg_memorize", arguments)?)?
        }
        Command::Recall { query, max_results, include_negated, explain } => {
            let arguments = json!({ "query": query, "max_results": max_results, "include_negated": include_negated, "explain": explain });
            render::recalled(&mut output, call(shared, caller, "memory_recall", arguments)?, &caller.scope)?
        }
        Command::Correct { atom, action, reason, new_content } => {
            let arguments = json!({ "target_atom": atom, "action": action, "reason": reason, "new_content": new_content });
            render::corrected(&mut output, call(shared, caller, "memory_correct", arguments)?)?
        }
        Command::Govern { atom, action, reason, lesson_content } => {
            let arguments = json!({ "target_atom": atom, "action": action, "reason": reason, "lesson_content": lesson_content });
            render::governed(&mut output, call(shared, caller, "memory_govern", arguments)?)?
        }
        Command::Handoff { summary, source } => {
            render::handed_off(&mut output, call(shared, caller, "memory_handoff", json!({ "summary": summary, "source": source }))?)?
        }
        Command::Reflect {
            actions,
            dry_run,
            time_window_hours,
            since,
            until,
            path_filter,
            owner_filter,
            bucket,
            within,
            team_id,
            limit,
        } => {
            let arguments = json!({
                "actions_csv": actions, "dry_run": dry_run, "time_window_hours": time_window_hours, "since": since, "until": until,
                "path_filter": path_filter, "owner_filter": owner_filter, "bucket": bucket, "scope": within, "team_id": team_id,
                "limit": limit,
            });
            render::reflected(&mut output, call(shared, caller, "reflect", arguments)?)?
        }
        Command::Stats => render::stats(&mut output, call(shared, caller, "memory_stats", json!({}))?)?,
        Command::Brief { max_chars } => {
            render::brief(&mut output, call(shared, caller, "agent_brief", json!({ "max_chars": max_chars }))?)?
        }
        _ => return Ok(None),
    };
    Ok(Some(exit))
}
