//! `sibyl-server serve [--listen ADDR] [--policy FILE]`: runs the gRPC tool server.

use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::Context;
use clap::{Parser, Subcommand};
use sibyl_server::{Policy, Sibyl};
use tokio::signal::unix::{SignalKind, signal};

/// sibyl's gRPC tool server: a human-style text browser (and more tools) for LLM agents.
#[derive(Parser)]
#[command(name = "sibyl-server", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Serve the tools over gRPC until SIGINT or SIGTERM.
    Serve {
        /// Address to listen on.
        #[arg(long, default_value = "127.0.0.1:50051", env = "SIBYL_LISTEN")]
        listen: SocketAddr,
        /// Sandbox policy file (TOML); the embedded sandbox-policies/default.toml if absent.
        #[arg(long, env = "SIBYL_POLICY")]
        policy: Option<PathBuf>,
    },
    /// Check a policy file and exit: status 0 if valid, else the error naming the bad key.
    CheckPolicy {
        /// Policy file (TOML).
        file: PathBuf,
    },
    /// Internal: the sandboxed child process that extracts one PDF read from stdin and prints
    /// JSON (started by the server itself; see `browser::extract::pdf`).
    #[command(hide = true, name = "extract-pdf")]
    ExtractPdf {
        /// Longest text kept (characters).
        #[arg(long)]
        max_chars: usize,
        /// Address-space limit (MiB).
        #[arg(long)]
        memory_mb: u64,
        /// CPU-time limit (seconds).
        #[arg(long)]
        cpu_secs: u64,
        /// libpdfium.so to load.
        #[arg(long)]
        library: Option<PathBuf>,
        /// Confine, then try what the sandbox must refuse, and print the verdicts as JSON.
        #[arg(long)]
        probe_sandbox: bool,
    },
}

fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    match cli.command {
        Command::ExtractPdf {
            max_chars,
            memory_mb,
            cpu_secs,
            library,
            probe_sandbox,
        } => std::process::exit(sibyl_server::browser::extract::pdf::child::main(
            &sibyl_server::browser::extract::pdf::child::ChildArgs {
                max_chars,
                memory_mb,
                cpu_secs,
                library,
                probe_sandbox,
            },
        )),
        Command::CheckPolicy { file } => {
            Policy::load(&file)?;
            println!("{}: valid", file.display());
            Ok(())
        }
        Command::Serve { listen, policy } => {
            let policy = match &policy {
                Some(p) => Policy::load(p)?,
                None => Policy::embedded_default()?,
            };
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                // HTML conversion of hostile, deeply nested pages runs on blocking threads.
                .thread_stack_size(16 << 20)
                .build()
                .context("cannot start the async runtime")?;
            runtime.block_on(serve(listen, policy))
        }
    }
}

async fn serve(listen: SocketAddr, policy: Policy) -> anyhow::Result<()> {
    // Install the signal handlers before anyone can learn the address, so a SIGTERM sent
    // right after start-up is a graceful shutdown, never the default kill.
    let mut term = signal(SignalKind::terminate()).context("cannot listen for SIGTERM")?;
    let mut int = signal(SignalKind::interrupt()).context("cannot listen for SIGINT")?;
    let shutdown = async move {
        tokio::select! {
            _ = term.recv() => tracing::info!("SIGTERM received"),
            _ = int.recv() => tracing::info!("SIGINT received"),
        }
    };
    let sibyl = Sibyl::new(policy)?;
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .with_context(|| format!("cannot listen on {listen}"))?;
    let local = listener.local_addr()?;
    tracing::info!(
        addr = %local,
        tools = sibyl.registry.len(),
        "sibyl-server listening"
    );
    // Scripts and tests read this line to learn the port (useful with --listen 127.0.0.1:0).
    println!("sibyl-server listening on {local}");
    sibyl.serve(listener, shutdown).await?;
    tracing::info!("sibyl-server stopped");
    Ok(())
}
