//! The Sibyl pipeline (Wang et al., 2024, §2; Figure 1):
//!
//! 1. **Tool planner** — the planning prompt over (question, global workspace, tool list
//!    from ListTools) answers `{reason, tool, tool_args}`; an invalid reply is re-asked with
//!    the error, at most [`PipelineConfig::max_reasks`] times; tool `None` ends the loop.
//! 2. **External information acquisition channel** — the tool runs on sibyl-server (one
//!    session per run) and the channel prompt turns its result into a
//!    `Facts / Explanation / Plan` note appended to the **global workspace**.
//! 3. At most [`PipelineConfig::max_steps`] steps; the stop reason is recorded.
//! 4. **Jury** — Actor and Critic alternate over the workspace, at most
//!    [`PipelineConfig::jury_max_rounds`] messages, ending when the Critic says TERMINATE.
//! 5. **Formatter** — the paper's answer-formatting prompt, then [`crate::format`].
//! 6. **Majority vote** over [`PipelineConfig::votes`] independent runs ([`crate::vote`]).
//!
//! Every model call is a stateless question over (question, workspace, input) — one
//! system and one user message, no history — so any call can be re-run alone and the
//! whole run can be replayed from its [`Trace`].

use std::io::Write;

use crate::config::PipelineConfig;
use crate::model::{ChatRequest, Model, ModelError};
use crate::planner::{self, Choice};
use crate::prompts;
use crate::tools::{ToolHost, ToolResult, ToolSpec, ToolsError};
use crate::trace::{Event, StopReason, TRACE_VERSION, Trace, TraceError};
use crate::vote::{self, Ballot, VoteOutcome};
use crate::workspace::{StepNote, Workspace};

/// Why `ask` failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AgentError {
    /// The model could not be used (after retries).
    #[error("{0}")]
    Model(#[from] ModelError),
    /// The tool server could not be used.
    #[error("{0}")]
    Tools(#[from] ToolsError),
    /// The trace could not be written.
    #[error("{0}")]
    Trace(#[from] TraceError),
    /// The question is empty.
    #[error("the question is empty")]
    EmptyQuestion,
    /// The configuration is invalid.
    #[error("{0}")]
    Config(#[from] crate::config::ConfigError),
}

/// What one run produced.
#[derive(Clone, Debug, PartialEq)]
pub struct RunOutcome {
    /// Why the tool loop stopped.
    pub stop: StopReason,
    /// Steps taken.
    pub steps: usize,
    /// The jury's final Actor message.
    pub draft: String,
    /// Whether the Critic agreed.
    pub jury_agreed: bool,
    /// Jury messages exchanged.
    pub jury_rounds: usize,
    /// The formatted answer.
    pub answer: String,
}

/// What `ask` produced.
#[derive(Clone, Debug, PartialEq)]
pub struct Outcome {
    /// The final answer (one line).
    pub answer: String,
    /// Each run.
    pub runs: Vec<RunOutcome>,
    /// The vote.
    pub vote: VoteOutcome,
}

/// The pipeline over a model, a tool host, a trace and a progress stream (stderr).
pub struct Agent<'a> {
    model: &'a dyn Model,
    tools: &'a mut dyn ToolHost,
    config: PipelineConfig,
    trace: &'a mut Trace,
    progress: &'a mut dyn Write,
}

struct RunCtx<'q> {
    run: usize,
    seed: u64,
    question: &'q str,
    tools_text: String,
    tool_specs: Vec<ToolSpec>,
    label: String,
}

impl<'a> Agent<'a> {
    /// A pipeline; `config` is checked by [`Agent::ask`].
    pub fn new(
        model: &'a dyn Model,
        tools: &'a mut dyn ToolHost,
        config: PipelineConfig,
        trace: &'a mut Trace,
        progress: &'a mut dyn Write,
    ) -> Self {
        Self {
            model,
            tools,
            config,
            trace,
            progress,
        }
    }

    fn say(&mut self, line: &str) {
        let _ = writeln!(self.progress, "{line}");
        let _ = self.progress.flush();
    }

    async fn ask_model(
        &mut self,
        run: usize,
        role: &str,
        request: ChatRequest,
    ) -> Result<String, AgentError> {
        let response = match self.model.complete(role, &request).await {
            Ok(r) => r,
            Err(e) => {
                self.trace.record(Event::ModelFailed {
                    run,
                    role: role.to_string(),
                    request,
                    message: e.to_string(),
                })?;
                return Err(e.into());
            }
        };
        let visible = crate::model::visible_text(&response);
        self.trace.record(Event::Model {
            run,
            role: role.to_string(),
            request,
            response,
        })?;
        Ok(visible)
    }

    /// Runs the whole pipeline on `question`: `votes` runs, the vote, the answer.
    ///
    /// # Errors
    /// [`AgentError`]: invalid configuration, a model that fails after its retries, an
    /// unreachable tool server, or an unwritable trace.
    pub async fn ask(&mut self, question: &str) -> Result<Outcome, AgentError> {
        self.config.check()?;
        if question.trim().is_empty() {
            return Err(AgentError::EmptyQuestion);
        }
        let result = self.ask_checked(question).await;
        if let Err(e) = &result
            && !matches!(e, AgentError::Trace(_))
        {
            // Best effort: the trace says why it ends here.
            let _ = self.trace.record(Event::Failed {
                message: e.to_string(),
            });
        }
        result
    }

    async fn ask_checked(&mut self, question: &str) -> Result<Outcome, AgentError> {
        self.trace.record(Event::Start {
            version: TRACE_VERSION,
            question: question.to_string(),
            config: self.config.clone(),
        })?;
        let tools = self.tools.list_tools().await?;
        self.trace.record(Event::Tools {
            tools: tools.clone(),
        })?;
        let names: Vec<&str> = tools.iter().map(|t| t.name.as_str()).collect();
        self.say(&format!("tools: {}", names.join(", ")));
        let tools_text = prompts::render_tools(&tools);
        let votes = self.config.votes;
        let mut runs = Vec::with_capacity(votes);
        for run in 0..votes {
            let ctx = RunCtx {
                run,
                seed: run as u64,
                question,
                tools_text: tools_text.clone(),
                tool_specs: tools.clone(),
                label: if votes > 1 {
                    format!("[run {}/{votes}]", run + 1)
                } else {
                    "[run 1/1]".to_string()
                },
            };
            match self.run(&ctx).await {
                Ok(r) => runs.push(r),
                // A model that still fails after its retries in a later run: the finished
                // runs are kept and voted on (later runs would most likely fail the same
                // way, so they are not tried).
                Err(AgentError::Model(e)) if run > 0 => {
                    self.say(&format!(
                        "{} failed: {e}; voting on the {run} finished run(s)",
                        ctx.label
                    ));
                    break;
                }
                Err(e) => return Err(e),
            }
        }
        let ballots: Vec<Ballot> = runs
            .iter()
            .map(|r| Ballot {
                answer: r.answer.clone(),
                confidence: if r.jury_agreed && r.jury_rounds > 0 {
                    1.0 / r.jury_rounds as f64
                } else {
                    0.0
                },
            })
            .collect();
        // `votes >= 1` is checked, so there is at least one ballot.
        let vote = vote::majority(&ballots).unwrap_or_else(|| VoteOutcome {
            answer: String::new(),
            winner_run: 0,
            votes: 0,
            of: 0,
            tie_break: "none".into(),
        });
        self.trace.record(Event::Vote {
            answers: runs.iter().map(|r| r.answer.clone()).collect(),
            outcome: vote.clone(),
        })?;
        self.say(&format!(
            "vote: {:?} wins with {} of {} (run {}, tie break: {})",
            vote.answer,
            vote.votes,
            vote.of,
            vote.winner_run + 1,
            vote.tie_break
        ));
        let answer = vote.answer.clone();
        self.trace.record(Event::Answer {
            answer: answer.clone(),
        })?;
        Ok(Outcome { answer, runs, vote })
    }

    async fn run(&mut self, ctx: &RunCtx<'_>) -> Result<RunOutcome, AgentError> {
        let session = self.tools.open_session().await?;
        let result = self.run_in_session(ctx, &session).await;
        self.tools.close_session(&session).await;
        result
    }

    async fn run_in_session(
        &mut self,
        ctx: &RunCtx<'_>,
        session: &str,
    ) -> Result<RunOutcome, AgentError> {
        let mut workspace = Workspace::new();
        let mut stop = StopReason::StepLimit;
        let max_steps = self.config.max_steps;
        for step in 1..=max_steps {
            let choice = self.plan(ctx, &workspace).await?;
            let Some((tool, args)) = (match choice {
                None => {
                    stop = StopReason::PlannerFailed;
                    None
                }
                Some(Choice::Done { .. }) => {
                    stop = StopReason::PlannerDone;
                    None
                }
                Some(Choice::Tool { tool, args, .. }) => Some((tool, args)),
            }) else {
                break;
            };
            let args = self
                .maybe_improve_code(ctx, &workspace, &tool, args)
                .await?;
            let result = self.tools.call(session, &tool, &args).await?;
            self.trace.record(Event::ToolCall {
                run: ctx.run,
                step,
                tool: tool.clone(),
                args: args.clone(),
                result: result.clone(),
            })?;
            self.say(&format!(
                "{} step {step}: {tool} {} -> {}, {} chars",
                ctx.label,
                short(&args.to_string(), 200),
                if result.is_error { "error" } else { "ok" },
                result.text.chars().count()
            ));
            let note = self.channel(ctx, &workspace, &tool, &args, &result).await?;
            self.trace.record(Event::Note {
                run: ctx.run,
                step,
                note: note.clone(),
            })?;
            workspace.push(StepNote {
                step,
                tool,
                args,
                note,
            });
        }
        let steps = workspace.notes().len();
        self.say(&format!(
            "{} tool loop ended after {steps} step(s): {stop}",
            ctx.label
        ));
        let (draft, jury_agreed, jury_rounds) = self.jury(ctx, &workspace).await?;
        self.say(&format!(
            "{} jury: {} after {jury_rounds} message(s)",
            ctx.label,
            if jury_agreed {
                "Critic agreed"
            } else {
                "no agreement"
            }
        ));
        let reply = self
            .ask_model(
                ctx.run,
                "formatter",
                ChatRequest::new(
                    &self.config.model,
                    prompts::ASSISTANT_SYSTEM,
                    prompts::format_answer(ctx.question, &draft),
                    self.config.temperatures.formatter,
                    ctx.seed,
                ),
            )
            .await?;
        let answer = crate::format::clean_answer(&reply, &draft);
        self.say(&format!("{} answer: {answer}", ctx.label));
        let outcome = RunOutcome {
            stop,
            steps,
            draft,
            jury_agreed,
            jury_rounds,
            answer,
        };
        self.trace.record(Event::RunEnd {
            run: ctx.run,
            stop: outcome.stop,
            steps: outcome.steps,
            draft: outcome.draft.clone(),
            jury_agreed: outcome.jury_agreed,
            jury_rounds: outcome.jury_rounds,
            answer: outcome.answer.clone(),
        })?;
        Ok(outcome)
    }

    /// The planner with bounded re-asks; `None` when no valid choice came.
    async fn plan(
        &mut self,
        ctx: &RunCtx<'_>,
        workspace: &Workspace,
    ) -> Result<Option<Choice>, AgentError> {
        let base = prompts::planner(ctx.question, &workspace.render(), &ctx.tools_text);
        let temperature = if ctx.run == 0 {
            self.config.temperatures.planner
        } else {
            self.config.vote_temperature
        };
        let mut prompt = base.clone();
        for attempt in 0..=self.config.max_reasks {
            let reply = self
                .ask_model(
                    ctx.run,
                    "planner",
                    ChatRequest::new(
                        &self.config.model,
                        prompts::ASSISTANT_SYSTEM,
                        prompt,
                        temperature,
                        ctx.seed,
                    ),
                )
                .await?;
            match planner::parse_choice(&reply, &ctx.tool_specs) {
                Ok(choice) => return Ok(Some(choice)),
                Err(error) => {
                    self.say(&format!(
                        "{} planner reply rejected (attempt {} of {}): {error}",
                        ctx.label,
                        attempt + 1,
                        self.config.max_reasks + 1
                    ));
                    prompt = prompts::planner_reask(&base, &short(&reply, 2000), &error);
                }
            }
        }
        Ok(None)
    }

    /// The paper's code-improvement pass for the code tool; keeps the original code when
    /// no valid improvement comes within the re-ask bound.
    async fn maybe_improve_code(
        &mut self,
        ctx: &RunCtx<'_>,
        workspace: &Workspace,
        tool: &str,
        args: serde_json::Value,
    ) -> Result<serde_json::Value, AgentError> {
        if self.config.improve_code_tool.is_empty() || tool != self.config.improve_code_tool {
            return Ok(args);
        }
        let Some(code) = args
            .get("code")
            .and_then(|c| c.as_str())
            .map(str::to_string)
        else {
            return Ok(args);
        };
        let base = prompts::improve_code(ctx.question, &workspace.render(), &code);
        let mut prompt = base.clone();
        for _ in 0..=self.config.max_reasks {
            let reply = self
                .ask_model(
                    ctx.run,
                    "improve_code",
                    ChatRequest::new(
                        &self.config.model,
                        prompts::ASSISTANT_SYSTEM,
                        prompt,
                        self.config.temperatures.improve_code,
                        ctx.seed,
                    ),
                )
                .await?;
            let parsed = planner::extract_json_object(&reply).and_then(|o| {
                match o.get("improved_code").and_then(|c| c.as_str()) {
                    Some(c) if !c.trim().is_empty() => Ok(c.to_string()),
                    _ => Err("the object has no non-empty string `improved_code`".to_string()),
                }
            });
            match parsed {
                Ok(improved) => {
                    let mut args = args;
                    if let Some(obj) = args.as_object_mut() {
                        obj.insert("code".into(), serde_json::Value::String(improved));
                    }
                    return Ok(args);
                }
                Err(error) => {
                    prompt = format!(
                        "{base}\n\n# Your previous reply was rejected\n```text\n{}\n```\nError: {error}\nReply again with one valid JSON object.",
                        short(&reply, 2000)
                    );
                }
            }
        }
        self.say(&format!(
            "{} code improvement gave no valid reply; running the planner's code",
            ctx.label
        ));
        Ok(args)
    }

    async fn channel(
        &mut self,
        ctx: &RunCtx<'_>,
        workspace: &Workspace,
        tool: &str,
        args: &serde_json::Value,
        result: &ToolResult,
    ) -> Result<String, AgentError> {
        let max = self.config.max_tool_result_chars;
        let mut text = if result.is_error {
            format!("The tool call failed: {}", result.text)
        } else {
            result.text.clone()
        };
        let total = text.chars().count();
        if total > max {
            text = text.chars().take(max).collect();
            text.push_str(&format!(
                "\n[... tool result cut: showing {max} of {total} characters]"
            ));
        }
        self.ask_model(
            ctx.run,
            "channel",
            ChatRequest::new(
                &self.config.model,
                prompts::ASSISTANT_SYSTEM,
                prompts::channel(
                    ctx.question,
                    &ctx.tools_text,
                    &workspace.render(),
                    tool,
                    &args.to_string(),
                    &text,
                ),
                self.config.temperatures.channel,
                ctx.seed,
            ),
        )
        .await
    }

    /// The jury: returns (final Actor message, Critic agreed, messages exchanged).
    async fn jury(
        &mut self,
        ctx: &RunCtx<'_>,
        workspace: &Workspace,
    ) -> Result<(String, bool, usize), AgentError> {
        let opening = prompts::jury_opening(ctx.question, &workspace.render());
        let mut debate: Vec<(String, String)> = Vec::new();
        let mut draft = String::new();
        for round in 1..=self.config.jury_max_rounds {
            let actor_turn = round % 2 == 1;
            let (speaker, system, temperature, role) = if actor_turn {
                (
                    "Actor",
                    prompts::ACTOR_SYSTEM,
                    self.config.temperatures.actor,
                    "actor",
                )
            } else {
                (
                    "Critic",
                    prompts::CRITIC_SYSTEM,
                    self.config.temperatures.critic,
                    "critic",
                )
            };
            let reply = self
                .ask_model(
                    ctx.run,
                    role,
                    ChatRequest::new(
                        &self.config.model,
                        system,
                        prompts::jury_turn(&opening, &debate, speaker),
                        temperature,
                        ctx.seed,
                    ),
                )
                .await?;
            if !actor_turn && reply.contains(prompts::TERMINATE) {
                return Ok((draft, true, round));
            }
            if actor_turn {
                draft = reply.clone();
            }
            debate.push((speaker.to_string(), reply));
        }
        Ok((draft, false, debate.len()))
    }
}

fn short(s: &str, max: usize) -> String {
    if s.chars().count() > max {
        let mut out: String = s.chars().take(max).collect();
        out.push('…');
        out
    } else {
        s.to_string()
    }
}
