//! The `sibyl-agent` command line. Scripts depend on these exact forms:
//!
//! - `sibyl-agent tools [--server URL]`: one line per tool, `NAME<TAB>ORIGIN<TAB>DESCRIPTION`,
//!   origin `builtin` or `plugin`, description on one line.
//! - `sibyl-agent session open [--server URL]`: the new session id alone on the last line.
//! - `sibyl-agent session close ID [--server URL]`.
//! - `sibyl-agent call TOOL 'JSON' [--session ID] [--server URL]`: the tool's text on stdout;
//!   exit status 1 with the message on stderr for a gRPC error or an `is_error` result.

use std::io::Write;

use clap::{Parser, Subcommand};
use sibyl_proto::v1 as pb;

use crate::client::{DEFAULT_SERVER, SibylClient};

/// Command-line client of sibyl-server.
#[derive(Parser, Debug)]
#[command(name = "sibyl-agent", version, about)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Subcommands.
#[derive(Subcommand, Debug)]
pub enum Command {
    /// List the server's tools: NAME, ORIGIN, DESCRIPTION per line, tab-separated.
    Tools {
        /// Server address.
        #[arg(long, env = "SIBYL_SERVER", default_value = DEFAULT_SERVER)]
        server: String,
    },
    /// Open or close a session.
    Session {
        /// open or close.
        #[command(subcommand)]
        action: SessionAction,
    },
    /// Call a tool with JSON arguments and print its text.
    Call {
        /// Tool name, as listed by `tools`.
        tool: String,
        /// Arguments as a JSON object, e.g. '{"url": "https://example.com"}'.
        #[arg(default_value = "{}")]
        arguments: String,
        /// Session id from `session open`; without it the call runs in a one-call session.
        #[arg(long, default_value = "")]
        session: String,
        /// Server address.
        #[arg(long, env = "SIBYL_SERVER", default_value = DEFAULT_SERVER)]
        server: String,
    },
}

/// Session subcommands.
#[derive(Subcommand, Debug)]
pub enum SessionAction {
    /// Open a session; prints its id alone on the last line.
    Open {
        /// Server address.
        #[arg(long, env = "SIBYL_SERVER", default_value = DEFAULT_SERVER)]
        server: String,
    },
    /// Close a session and free everything it held.
    Close {
        /// The session id.
        id: String,
        /// Server address.
        #[arg(long, env = "SIBYL_SERVER", default_value = DEFAULT_SERVER)]
        server: String,
    },
}

fn origin_name(origin: i32) -> &'static str {
    match pb::ToolOrigin::try_from(origin) {
        Ok(pb::ToolOrigin::Builtin) => "builtin",
        Ok(pb::ToolOrigin::Plugin) => "plugin",
        _ => "unknown",
    }
}

/// Runs a parsed command, writing results to `out` and messages to `err`.
/// Returns the process exit status: 0 on success, 1 on any error or `is_error` result.
pub async fn run(cli: Cli, out: &mut dyn Write, err: &mut dyn Write) -> i32 {
    match run_inner(cli, out).await {
        Ok(code) => code,
        Err(e) => {
            let _ = writeln!(err, "sibyl-agent: {e}");
            1
        }
    }
}

async fn run_inner(cli: Cli, out: &mut dyn Write) -> anyhow::Result<i32> {
    match cli.command {
        Command::Tools { server } => {
            let mut c = SibylClient::connect(&server).await?;
            for t in c.list_tools().await? {
                let description = t
                    .description
                    .split_whitespace()
                    .collect::<Vec<_>>()
                    .join(" ");
                writeln!(
                    out,
                    "{}\t{}\t{}",
                    t.name,
                    origin_name(t.origin),
                    description
                )?;
            }
            Ok(0)
        }
        Command::Session {
            action: SessionAction::Open { server },
        } => {
            let mut c = SibylClient::connect(&server).await?;
            let s = c.open_session().await?;
            writeln!(out, "{}", s.session_id)?;
            Ok(0)
        }
        Command::Session {
            action: SessionAction::Close { id, server },
        } => {
            let mut c = SibylClient::connect(&server).await?;
            c.close_session(&id).await?;
            Ok(0)
        }
        Command::Call {
            tool,
            arguments,
            session,
            server,
        } => {
            let mut c = SibylClient::connect(&server).await?;
            let r = c.call_tool(&session, &tool, &arguments).await?;
            if r.is_error {
                anyhow::bail!("{tool} failed: {}", r.text);
            }
            writeln!(out, "{}", r.text)?;
            Ok(0)
        }
    }
}
