//! sibyl-agent: a client of sibyl-server.
//!
//! Today it is a scripting client for people and tests ([`cli`]): list tools, open a
//! session, call a tool. The Sibyl agent pipeline (planner, channel, jury, vote) builds on
//! the same connection code. It depends only on the wire contract (`sibyl-proto`), never on
//! the server's crates.

pub mod cli;
pub mod client;
