//! sibyl-server: a gRPC tool server that gives LLM agents safe, human-style tools.
//!
//! Many agents share one server. Tools live in one [`registry`] and are listed and called
//! through the `sibyl.v1.ToolService` gRPC service ([`rpc`]), modelled on MCP's
//! `tools/list` / `tools/call`. State lives in [`session`]s, limits come from a checked
//! [`policy`] (`sandbox-policies/*.toml`). The first tools are the text [`browser`] of the
//! Sibyl agent (AutoGen's `SimpleTextBrowser` lineage).
//!
//! Dependencies point one way: `policy` ← `browser` ← `registry`/`session` ← `rpc` ←
//! [`server`] (wiring); `main.rs` only parses the command line.

pub mod browser;
pub mod error;
pub mod plugin;
pub mod policy;
pub mod registry;
pub mod rpc;
pub mod runner;
pub mod server;
pub mod session;

pub use error::ToolError;
pub use policy::Policy;
pub use registry::{Tool, ToolDescriptor, ToolOutput, ToolRegistry};
pub use server::{ServeError, Sibyl};
