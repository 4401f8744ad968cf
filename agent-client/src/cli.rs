//! The `sibyl-agent` command line. Scripts depend on these exact forms:
//!
//! - `sibyl-agent tools [--server URL]`: one line per tool, `NAME<TAB>ORIGIN<TAB>DESCRIPTION`,
//!   origin `builtin` or `plugin`, description on one line. The server's plugin diagnostics
//!   (skipped or under-granted plugins) go to stderr, one `warning: SOURCE: MESSAGE` line
//!   each; stdout stays the tool lines only, and the exit status stays 0.
//! - `sibyl-agent session open [--server URL]`: the new session id alone on the last line.
//! - `sibyl-agent session close ID [--server URL]`.
//! - `sibyl-agent call TOOL 'JSON' [--session ID] [--server URL]`: the tool's text on stdout;
//!   exit status 1 with the message on stderr for a gRPC error or an `is_error` result.
//! - `sibyl-agent ask "QUESTION" [--server URL] [--model NAME] [--votes N] [--max-steps N]
//!   [--trace FILE] [--config FILE] [--base-url URL] [--cache FILE | --no-cache]
//!   [--timeout-secs S] [--retries N]`: runs the Sibyl pipeline ([`crate::agent`]); progress,
//!   one line per step, on stderr; the final answer alone on the last line of stdout; exit
//!   status 1 with the reason on stderr when the model fails after its retries or the
//!   server is unreachable.
//! - `sibyl-agent replay TRACE`: re-runs a trace written by `ask --trace` without a model
//!   or network ([`crate::replay`]); the answer alone on the last line of stdout; exit
//!   status 1 when the replay diverges or its answer differs from the recorded one.

use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;

use clap::{Parser, Subcommand};
use sibyl_proto::v1 as pb;

use crate::agent::Agent;
use crate::cache::ResponseCache;
use crate::client::{DEFAULT_SERVER, SibylClient};
use crate::config::{CacheSetting, ConfigFile};
use crate::model::{ModelConfig, OpenAiModel};
use crate::tools::GrpcTools;
use crate::trace::Trace;

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
    /// Answer a question with the Sibyl pipeline; the answer is the last line of stdout.
    Ask(AskArgs),
    /// Re-run a trace of `ask --trace` without model or network; prints the answer.
    Replay {
        /// The JSON Lines trace file.
        trace: PathBuf,
    },
}

/// Arguments of `ask`.
#[derive(clap::Args, Debug)]
pub struct AskArgs {
    /// The question.
    pub question: String,
    /// Server address.
    #[arg(long, env = "SIBYL_SERVER", default_value = DEFAULT_SERVER)]
    pub server: String,
    /// Model name (default: the config file's `model.name`, else `OPENAI_MODEL`).
    #[arg(long)]
    pub model: Option<String>,
    /// Independent runs to vote on (default 3).
    #[arg(long)]
    pub votes: Option<usize>,
    /// Most tool steps per run (default 20).
    #[arg(long)]
    pub max_steps: Option<usize>,
    /// Write the JSON Lines trace here (for `replay`).
    #[arg(long)]
    pub trace: Option<PathBuf>,
    /// TOML config file (`[model]`, `[pipeline]`; see `sibyl_agent::config`).
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Model endpoint base URL up to `/v1` (default: the config file, else
    /// `OPENAI_BASE_URL`, else the OpenAI API).
    #[arg(long)]
    pub base_url: Option<String>,
    /// Response cache file (default: `$SIBYL_CACHE`, else
    /// `~/.cache/sibyl/model-cache.sqlite`).
    #[arg(long)]
    pub cache: Option<PathBuf>,
    /// Do not read or write the response cache.
    #[arg(long, conflicts_with = "cache")]
    pub no_cache: bool,
    /// Time limit of one model HTTP attempt, seconds (default 180).
    #[arg(long)]
    pub timeout_secs: Option<u64>,
    /// Retries of a model request on 429, 5xx or timeout (default 4).
    #[arg(long)]
    pub retries: Option<u32>,
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
    match run_inner(cli, out, err).await {
        Ok(code) => code,
        Err(e) => {
            let _ = writeln!(err, "sibyl-agent: {e}");
            1
        }
    }
}

async fn run_inner(cli: Cli, out: &mut dyn Write, err: &mut dyn Write) -> anyhow::Result<i32> {
    match cli.command {
        Command::Ask(args) => {
            let answer = ask(args, err).await?;
            writeln!(out, "{answer}")?;
            Ok(0)
        }
        Command::Replay { trace } => {
            let r = crate::replay::replay(&trace, err).await?;
            if r.recorded.is_none() {
                writeln!(
                    err,
                    "note: the trace records no final answer (an unfinished run)"
                )?;
            }
            writeln!(out, "{}", r.answer)?;
            Ok(0)
        }
        Command::Tools { server } => {
            let mut c = SibylClient::connect(&server).await?;
            let (tools, diagnostics) = c.list_tools_with_diagnostics().await?;
            for d in &diagnostics {
                let message = d.message.split_whitespace().collect::<Vec<_>>().join(" ");
                writeln!(err, "warning: {}: {message}", d.source)?;
            }
            for t in tools {
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

/// Builds the model, tools and trace for `ask` and runs the pipeline; returns the answer.
async fn ask(args: AskArgs, err: &mut dyn Write) -> anyhow::Result<String> {
    let file = match &args.config {
        Some(p) => ConfigFile::load(p)?,
        None => ConfigFile::default(),
    };
    let mut model_config = ModelConfig::from_env();
    file.apply_model(&mut model_config)?;
    if let Some(u) = &args.base_url {
        model_config.base_url.clone_from(u);
    }
    if let Some(s) = args.timeout_secs {
        model_config.timeout = std::time::Duration::from_secs(s);
    }
    if let Some(r) = args.retries {
        model_config.max_retries = r;
    }
    let mut pipeline = file.pipeline.clone().unwrap_or_default();
    pipeline.model = args
        .model
        .clone()
        .or_else(|| file.model.name.clone())
        .or_else(|| std::env::var("OPENAI_MODEL").ok())
        .unwrap_or_default();
    if let Some(v) = args.votes {
        pipeline.votes = v;
    }
    if let Some(m) = args.max_steps {
        pipeline.max_steps = m;
    }
    pipeline.check()?;
    let cache_path = if args.no_cache {
        None
    } else if let Some(p) = &args.cache {
        Some(p.clone())
    } else {
        match &file.model.cache {
            Some(CacheSetting::Enabled(false)) => None,
            Some(CacheSetting::Path(p)) => Some(p.clone()),
            Some(CacheSetting::Enabled(true)) | None => ResponseCache::default_path(),
        }
    };
    let cache = match cache_path {
        Some(p) => Some(Arc::new(ResponseCache::open(&p)?)),
        None => None,
    };
    let model = OpenAiModel::new(model_config, cache)?;
    let client = SibylClient::connect(&args.server).await?;
    let mut tools = GrpcTools::new(client);
    let mut trace = match &args.trace {
        Some(p) => Trace::to_file(p)?,
        None => Trace::in_memory(),
    };
    let outcome = Agent::new(&model, &mut tools, pipeline, &mut trace, err)
        .ask(&args.question)
        .await?;
    Ok(outcome.answer)
}
