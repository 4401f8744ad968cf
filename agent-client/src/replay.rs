//! `sibyl-agent replay TRACE`: re-runs the pipeline from a trace with no model and no
//! network. The trace's configuration, question and tool list are reused; every model
//! request is answered with the reply recorded for the byte-identical request, and every
//! tool call with the result recorded for the same call in the same order. Because the
//! pipeline is deterministic given those, it reproduces the recorded answer exactly; a
//! request or call the trace does not hold means the code changed since the trace was
//! written, and is reported as a divergence.

use std::collections::{HashMap, VecDeque};
use std::path::Path;
use std::sync::Mutex;

use crate::agent::{Agent, AgentError};
use crate::model::{ChatRequest, Model, ModelError};
use crate::tools::{ToolHost, ToolResult, ToolSpec, ToolsError};
use crate::trace::{self, Event, Trace, TraceError};

/// Why a replay failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ReplayError {
    /// The trace cannot be read.
    #[error("{0}")]
    Trace(#[from] TraceError),
    /// The trace has no `start` event (not a trace, or empty).
    #[error("{0}: not a sibyl-agent trace (no `start` event)")]
    NoStart(String),
    /// The pipeline failed during the replay (a divergence included).
    #[error("{0}")]
    Agent(#[from] AgentError),
    /// The traced run itself failed, so there is no answer to reproduce.
    #[error("the traced run failed and has no answer: {0}")]
    RecordedFailure(String),
    /// The replayed answer differs from the recorded one.
    #[error("replayed answer {replayed:?} differs from the recorded answer {recorded:?}")]
    Mismatch {
        /// What the replay produced.
        replayed: String,
        /// What the trace recorded.
        recorded: String,
    },
}

/// Model replies from a trace, by exact request body (in order for repeated requests).
pub struct ReplayModel {
    replies: Mutex<HashMap<String, VecDeque<Result<String, String>>>>,
}

impl ReplayModel {
    /// Collects the model events of `events`.
    #[must_use]
    pub fn new(events: &[Event]) -> Self {
        let mut replies: HashMap<String, VecDeque<Result<String, String>>> = HashMap::new();
        for e in events {
            match e {
                Event::Model {
                    request, response, ..
                } => replies
                    .entry(request.body())
                    .or_default()
                    .push_back(Ok(response.clone())),
                Event::ModelFailed {
                    request, message, ..
                } => replies
                    .entry(request.body())
                    .or_default()
                    .push_back(Err(message.clone())),
                _ => {}
            }
        }
        Self {
            replies: Mutex::new(replies),
        }
    }
}

#[async_trait::async_trait]
impl Model for ReplayModel {
    async fn complete(&self, role: &str, req: &ChatRequest) -> Result<String, ModelError> {
        let mut replies = self
            .replies
            .lock()
            .map_err(|_| ModelError::NotInTrace(role.to_string()))?;
        match replies.get_mut(&req.body()).and_then(VecDeque::pop_front) {
            Some(Ok(reply)) => Ok(reply),
            Some(Err(message)) => Err(ModelError::Recorded(message)),
            None => Err(ModelError::NotInTrace(role.to_string())),
        }
    }
}

/// Tool list and results from a trace, in call order.
pub struct ReplayTools {
    tools: Vec<ToolSpec>,
    calls: VecDeque<(String, serde_json::Value, ToolResult)>,
}

impl ReplayTools {
    /// Collects the tool events of `events`.
    #[must_use]
    pub fn new(events: &[Event]) -> Self {
        let mut tools = Vec::new();
        let mut calls = VecDeque::new();
        for e in events {
            match e {
                Event::Tools { tools: t } => tools.clone_from(t),
                Event::ToolCall {
                    tool, args, result, ..
                } => calls.push_back((tool.clone(), args.clone(), result.clone())),
                _ => {}
            }
        }
        Self { tools, calls }
    }
}

#[async_trait::async_trait]
impl ToolHost for ReplayTools {
    async fn list_tools(&mut self) -> Result<Vec<ToolSpec>, ToolsError> {
        Ok(self.tools.clone())
    }

    async fn open_session(&mut self) -> Result<String, ToolsError> {
        Ok("replay".to_string())
    }

    async fn call(
        &mut self,
        _session: &str,
        tool: &str,
        args: &serde_json::Value,
    ) -> Result<ToolResult, ToolsError> {
        match self.calls.pop_front() {
            Some((t, a, r)) if t == tool && &a == args => Ok(r),
            _ => Err(ToolsError::NotInTrace(format!("{tool} {args}"))),
        }
    }

    async fn close_session(&mut self, _session: &str) {}
}

/// What a replay produced.
#[derive(Clone, Debug, PartialEq)]
pub struct Replayed {
    /// The replayed answer.
    pub answer: String,
    /// The answer the trace recorded (`None` for a trace of a run that did not finish).
    pub recorded: Option<String>,
}

/// Replays the trace at `path`, writing progress to `progress`.
///
/// # Errors
/// [`ReplayError`]; [`ReplayError::Mismatch`] when the answer differs from the recorded one.
pub async fn replay(
    path: &Path,
    progress: &mut dyn std::io::Write,
) -> Result<Replayed, ReplayError> {
    let events = trace::read(path)?;
    let Some((question, config)) = events.iter().find_map(|e| match e {
        Event::Start {
            question, config, ..
        } => Some((question.clone(), config.clone())),
        _ => None,
    }) else {
        return Err(ReplayError::NoStart(path.display().to_string()));
    };
    let recorded = events.iter().rev().find_map(|e| match e {
        Event::Answer { answer } => Some(answer.clone()),
        _ => None,
    });
    let recorded_failure = events.iter().rev().find_map(|e| match e {
        Event::Failed { message } => Some(message.clone()),
        _ => None,
    });
    let model = ReplayModel::new(&events);
    let mut tools = ReplayTools::new(&events);
    let mut sink = Trace::in_memory();
    let outcome = match Agent::new(&model, &mut tools, config, &mut sink, progress)
        .ask(&question)
        .await
    {
        Ok(o) => o,
        Err(e) => {
            return Err(match recorded_failure {
                Some(message) => ReplayError::RecordedFailure(message),
                None => e.into(),
            });
        }
    };
    if let Some(rec) = &recorded
        && *rec != outcome.answer
    {
        return Err(ReplayError::Mismatch {
            replayed: outcome.answer,
            recorded: rec.clone(),
        });
    }
    Ok(Replayed {
        answer: outcome.answer,
        recorded,
    })
}
