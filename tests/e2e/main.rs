//! End-to-end tests of the foundation: `sibyl-server` and `sibyl-agent` binaries over real
//! loopback ports, with the saved pages served by a local HTTP server.

mod browser;
mod cli;
mod corpus;
mod main_content;
mod rpc;
