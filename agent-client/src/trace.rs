//! The run trace: every event of an `ask` — the configuration, the tool list, each model
//! request (the exact JSON body) and its reply, each tool call and result, each step note,
//! each run's end and the vote — as JSON Lines, one object per line with an `event` tag.
//! Lines are written and flushed as they happen, so a crashed run keeps its trace.
//! `sibyl-agent replay TRACE` ([`crate::replay`]) re-runs the pipeline from it.

use std::io::{BufRead, Write};
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::config::PipelineConfig;
use crate::model::ChatRequest;
use crate::tools::{ToolResult, ToolSpec};
use crate::vote::VoteOutcome;

/// Trace format version written in [`Event::Start`].
pub const TRACE_VERSION: u32 = 1;

/// Why a run's tool loop ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StopReason {
    /// The planner chose tool `None`.
    PlannerDone,
    /// The step limit was reached.
    StepLimit,
    /// The planner gave no valid choice within the re-ask bound.
    PlannerFailed,
}

impl std::fmt::Display for StopReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::PlannerDone => "planner chose None",
            Self::StepLimit => "step limit reached",
            Self::PlannerFailed => "planner gave no valid choice",
        })
    }
}

/// One trace line.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum Event {
    /// First line: the question and the pipeline configuration.
    Start {
        /// [`TRACE_VERSION`].
        version: u32,
        /// The question asked.
        question: String,
        /// The configuration (model name, limits, temperatures).
        config: PipelineConfig,
    },
    /// The server's tools (ListTools).
    Tools {
        /// Every tool.
        tools: Vec<ToolSpec>,
    },
    /// One model call.
    Model {
        /// Vote run (0-based).
        run: usize,
        /// planner, improve_code, channel, actor, critic or formatter.
        role: String,
        /// The request exactly as sent.
        request: ChatRequest,
        /// The reply text.
        response: String,
    },
    /// One model call that failed (after its retries); `replay` fails it the same way.
    ModelFailed {
        /// Vote run (0-based).
        run: usize,
        /// The role.
        role: String,
        /// The request exactly as sent.
        request: ChatRequest,
        /// Why it failed.
        message: String,
    },
    /// One tool call.
    ToolCall {
        /// Vote run.
        run: usize,
        /// 1-based step.
        step: usize,
        /// Tool name.
        tool: String,
        /// Arguments.
        args: serde_json::Value,
        /// What it returned.
        result: ToolResult,
    },
    /// The channel's note for a step (added to the global workspace).
    Note {
        /// Vote run.
        run: usize,
        /// 1-based step.
        step: usize,
        /// The `Facts / Explanation / Plan` text.
        note: String,
    },
    /// End of one run.
    RunEnd {
        /// Vote run.
        run: usize,
        /// Why the tool loop stopped.
        stop: StopReason,
        /// Steps taken.
        steps: usize,
        /// The jury's final Actor message.
        draft: String,
        /// Whether the Critic agreed (said TERMINATE).
        jury_agreed: bool,
        /// Jury messages exchanged.
        jury_rounds: usize,
        /// The formatted answer of this run.
        answer: String,
    },
    /// The majority vote.
    Vote {
        /// Each run's answer.
        answers: Vec<String>,
        /// The outcome.
        outcome: VoteOutcome,
    },
    /// The run failed (the model failed after its retries, the server went away).
    Failed {
        /// Why.
        message: String,
    },
    /// Last line: the final answer.
    Answer {
        /// The final answer, as printed.
        answer: String,
    },
}

/// Why a trace could not be written or read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TraceError {
    /// File I/O failed.
    #[error("trace {path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// The error.
        source: std::io::Error,
    },
    /// A line is not a trace event.
    #[error("trace {path} line {line}: {message}")]
    Parse {
        /// The file.
        path: String,
        /// 1-based line.
        line: usize,
        /// What is wrong.
        message: String,
    },
}

/// Records events in memory and, when given a file, appends each as a flushed line.
#[derive(Default)]
pub struct Trace {
    events: Vec<Event>,
    sink: Option<(String, std::io::BufWriter<std::fs::File>)>,
}

impl Trace {
    /// A trace kept only in memory.
    #[must_use]
    pub fn in_memory() -> Self {
        Self::default()
    }

    /// A trace also written to `path` (created or truncated).
    ///
    /// # Errors
    /// [`TraceError::Io`].
    pub fn to_file(path: &Path) -> Result<Self, TraceError> {
        let file = std::fs::File::create(path).map_err(|source| TraceError::Io {
            path: path.display().to_string(),
            source,
        })?;
        Ok(Self {
            events: Vec::new(),
            sink: Some((path.display().to_string(), std::io::BufWriter::new(file))),
        })
    }

    /// Records one event.
    ///
    /// # Errors
    /// [`TraceError::Io`] when the file cannot be written.
    pub fn record(&mut self, event: Event) -> Result<(), TraceError> {
        if let Some((path, w)) = &mut self.sink {
            let line = serde_json::to_string(&event).map_err(|e| TraceError::Io {
                path: path.clone(),
                source: std::io::Error::other(e),
            })?;
            writeln!(w, "{line}")
                .and_then(|()| w.flush())
                .map_err(|source| TraceError::Io {
                    path: path.clone(),
                    source,
                })?;
        }
        self.events.push(event);
        Ok(())
    }

    /// Every event so far.
    #[must_use]
    pub fn events(&self) -> &[Event] {
        &self.events
    }
}

/// Reads a trace file.
///
/// # Errors
/// [`TraceError`] when the file cannot be read or a line is not an event.
pub fn read(path: &Path) -> Result<Vec<Event>, TraceError> {
    let name = path.display().to_string();
    let file = std::fs::File::open(path).map_err(|source| TraceError::Io {
        path: name.clone(),
        source,
    })?;
    let mut events = Vec::new();
    for (i, line) in std::io::BufReader::new(file).lines().enumerate() {
        let line = line.map_err(|source| TraceError::Io {
            path: name.clone(),
            source,
        })?;
        if line.trim().is_empty() {
            continue;
        }
        let event = serde_json::from_str(&line).map_err(|e| TraceError::Parse {
            path: name.clone(),
            line: i + 1,
            message: e.to_string(),
        })?;
        events.push(event);
    }
    Ok(events)
}
