//! The surfaces: adapters that expose the [`crate::Memory`] facade and the
//! memory tools to the outside (command line, MCP, HTTP with GraphQL, REST
//! and SPARQL, agent-host hooks). Nothing below this folder depends on it.

pub(crate) mod blocking;
pub(crate) mod burst;
pub(crate) mod cli;
#[cfg(test)]
mod fuzz;
pub(crate) mod graphql;
pub(crate) mod hook;
pub(crate) mod http;
pub(crate) mod mcp;
pub(crate) mod rest;
pub(crate) mod sparql;
pub(crate) mod status;
pub(crate) mod token;
