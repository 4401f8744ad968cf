//! Python runners: untrusted Python from agents, run under a sandbox policy.
//!
//! One [`Runner`] trait, two implementations: [`subprocess`] (the host's `python3` inside
//! bubblewrap: user, PID, network, mount and IPC namespaces, a read-only system, rlimits, the
//! whole process tree killed at the deadline) and `wasm` (CPython compiled to WASI, in
//! wasmtime). The [`tools`] `computer_terminal` (the Sibyl paper's name) and `python` call
//! them. Limits come from the `[runner]` policy section ([`policy`]).
//!
//! A run always ends in a [`RunOutcome`]: what the code printed, its exit status, its run time
//! and, when a limit stopped it, which one. Code that fails (a syntax error, an exception, a
//! crash) is a normal outcome, never a server fault.

pub mod policy;
pub mod stream;
pub mod subprocess;
pub mod tools;
pub mod wasm;

use std::time::Duration;

pub use policy::{RunnerKind, RunnerPolicy};

/// The limit that stopped a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum LimitHit {
    /// The wall-clock deadline (`runner.timeout_ms`) or the CPU-time limit.
    Time,
    /// The memory cap (`runner.memory_mb`).
    Memory,
    /// An output stream passed `runner.max_output_bytes`.
    Output,
    /// The WASM fuel budget (`runner.wasm.fuel`).
    Fuel,
    /// The process/thread limit (`runner.subprocess.max_processes`).
    Processes,
    /// The file-size or scratch-space limit.
    Disk,
    /// The open-file limit (`runner.subprocess.max_open_files`, `runner.wasm.max_open_files`).
    OpenFiles,
}

impl LimitHit {
    /// The name used in results (`time`, `memory`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            LimitHit::Time => "time",
            LimitHit::Memory => "memory",
            LimitHit::Output => "output",
            LimitHit::Fuel => "fuel",
            LimitHit::Processes => "processes",
            LimitHit::Disk => "disk",
            LimitHit::OpenFiles => "open_files",
        }
    }
}

/// What a run produced.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct RunOutcome {
    /// The runner that ran the code.
    pub runner: RunnerKind,
    /// Standard output, decoded as UTF-8 with replacement characters, at most
    /// `runner.max_output_bytes` bytes of it.
    pub stdout: String,
    /// Standard error, as `stdout`.
    pub stderr: String,
    /// Exit status when the interpreter exited; `None` when it was killed.
    pub exit_code: Option<i32>,
    /// The signal that ended the process (subprocess runner), if any.
    pub signal: Option<i32>,
    /// Wall-clock run time, sandbox start included, in milliseconds.
    pub duration_ms: f64,
    /// The limit that stopped the code, if one did.
    pub limit: Option<LimitHit>,
    /// True when stdout or stderr was cut at the cap.
    pub truncated: bool,
}

impl RunOutcome {
    /// True when the code exited with status 0 and no limit stopped it.
    pub fn success(&self) -> bool {
        self.exit_code == Some(0) && self.limit.is_none()
    }
}

/// Which stream a chunk of output came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StreamKind {
    /// Standard output.
    Stdout,
    /// Standard error.
    Stderr,
}

/// A piece of output, sent as it is produced when the call is streamed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutputChunk {
    /// The stream.
    pub stream: StreamKind,
    /// The bytes, as produced (possibly splitting a UTF-8 sequence).
    pub data: Vec<u8>,
}

tokio::task_local! {
    /// Where a streamed call (`CallToolStream`) wants output chunks. Set by the RPC layer
    /// around the tool call; runners send to it when it is set. A closed receiver (client
    /// gone) is ignored: the run goes on and its result is dropped.
    /// The channel is unbounded; what it can hold is bounded by `runner.max_output_bytes`.
    pub static OUTPUT_SINK: tokio::sync::mpsc::UnboundedSender<OutputChunk>;
}

/// The current call's stream, if the call is streamed.
pub(crate) fn sink() -> Option<tokio::sync::mpsc::UnboundedSender<OutputChunk>> {
    OUTPUT_SINK.try_with(|tx| tx.clone()).ok()
}

/// Sends a chunk to the current call's stream, if the call is streamed.
pub(crate) fn emit(stream: StreamKind, data: &[u8]) {
    if data.is_empty() {
        return;
    }
    if let Some(tx) = sink() {
        let _ = tx.send(OutputChunk {
            stream,
            data: data.to_vec(),
        });
    }
}

/// Why a runner could not run the code at all (as opposed to code that failed).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RunnerError {
    /// The runner is disabled, not installed, or lacks a protection the policy requires.
    #[error("the {runner} runner is unavailable: {reason}")]
    Unavailable {
        /// Runner name.
        runner: &'static str,
        /// Why.
        reason: String,
    },
    /// Starting the sandbox or the interpreter failed.
    #[error("cannot start the {runner} runner: {reason}")]
    Start {
        /// Runner name.
        runner: &'static str,
        /// Why.
        reason: String,
    },
}

/// A Python runner.
#[async_trait::async_trait]
pub trait Runner: Send + Sync {
    /// Which runner this is.
    fn kind(&self) -> RunnerKind;

    /// Why the runner cannot run code here, or `None` when it can.
    fn unavailable(&self) -> Option<String>;

    /// Runs `code` in `session` (its scratch directory, its interpreter state), within the
    /// policy's limits.
    ///
    /// # Errors
    /// [`RunnerError`] when the code could not be started at all; code that ran and failed is
    /// an `Ok` outcome.
    async fn run(
        &self,
        session: &crate::session::Session,
        code: &str,
    ) -> Result<RunOutcome, RunnerError>;
}

/// Decodes a capped byte buffer for the result.
pub(crate) fn lossy(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Milliseconds of a duration, as a float.
pub(crate) fn millis(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// Bytes and entries under `roots` (not following symlinks), counting at most `max_entries`
/// entries: the disk watchdog that bounds what a run may write in its writable directories
/// (`runner.max_disk_bytes`), checked a few times a second while code runs.
pub(crate) fn disk_usage(roots: &[&std::path::Path], max_entries: usize) -> (u64, usize) {
    let mut bytes = 0u64;
    let mut entries = 0usize;
    let mut stack: Vec<std::path::PathBuf> = roots.iter().map(|r| r.to_path_buf()).collect();
    while let Some(dir) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&dir) else {
            continue;
        };
        for e in rd.flatten() {
            entries += 1;
            if entries > max_entries {
                return (bytes, entries);
            }
            if let Ok(md) = e.metadata() {
                // Allocated size, so sparse files count for what they take.
                use std::os::unix::fs::MetadataExt;
                bytes = bytes.saturating_add(md.blocks().saturating_mul(512));
                if md.is_dir() {
                    stack.push(e.path());
                }
            }
        }
    }
    (bytes, entries)
}

/// Entries the disk watchdog walks before it calls the directory full.
pub(crate) const MAX_DISK_ENTRIES: usize = 20_000;
