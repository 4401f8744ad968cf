//! sibyl-agent: a client of sibyl-server, and the Sibyl agent pipeline on top of it.
//!
//! - [`cli`]: the `sibyl-agent` command line (tools, session, call, ask, replay).
//! - [`client`]: the typed gRPC client of `sibyl.v1.ToolService`.
//! - [`agent`]: the pipeline of the Sibyl paper — tool [`planner`], external information
//!   acquisition channel, global [`workspace`], jury, answer [`format`]ter, majority
//!   [`vote`] — over a [`model`] and a [`tools`] host, written to a [`trace`] that
//!   [`replay`] re-runs without model or network.
//!
//! It depends only on the wire contract (`sibyl-proto`), never on the server's crates: the
//! tools it offers the model are whatever the server's ListTools returns.

pub mod agent;
pub mod cache;
pub mod cli;
pub mod client;
pub mod config;
pub mod format;
pub mod model;
pub mod planner;
pub mod prompts;
pub mod replay;
pub mod tools;
pub mod trace;
pub mod vote;
pub mod workspace;
