//! The tools `computer_terminal(code)` (the Sibyl paper's name; the policy's default runner)
//! and `python(code, runner?)` (a runner the caller picks among `runner.allowed`).

use std::sync::Arc;

use schemars::JsonSchema;
use serde::Deserialize;

use super::policy::{RunnerKind, RunnerPolicy, WasmBuild};
use super::subprocess::SubprocessRunner;
use super::{RunOutcome, Runner};
use crate::error::ToolError;
use crate::registry::{
    CallContext, DuplicateTool, Hints, Origin, Tool, ToolDescriptor, ToolOutput, ToolRegistry,
    parse_args, schema_for,
};

/// Every runner the policy offers, and the choice of the default one.
pub struct Runners {
    policy: RunnerPolicy,
    subprocess: Arc<SubprocessRunner>,
    wasm: Option<Arc<dyn Runner>>,
}

impl Runners {
    /// Builds the runners of `policy` (probing the host's sandbox protections).
    pub fn new(policy: &RunnerPolicy) -> Self {
        Self {
            policy: policy.clone(),
            subprocess: Arc::new(SubprocessRunner::new(policy)),
            wasm: Some(Arc::new(super::wasm::WasmRunner::new(policy))),
        }
    }

    /// Adds the WASM runner.
    pub fn with_wasm(mut self, wasm: Arc<dyn Runner>) -> Self {
        self.wasm = Some(wasm);
        self
    }

    fn get(&self, kind: RunnerKind) -> Option<Arc<dyn Runner>> {
        match kind {
            RunnerKind::Subprocess => Some(self.subprocess.clone() as Arc<dyn Runner>),
            RunnerKind::Wasm => self.wasm.clone(),
        }
    }

    /// The runner `computer_terminal` uses: `runner.default`, or with `auto` the WASM runner
    /// when it is allowed and available, else the subprocess runner.
    pub fn default_kind(&self) -> RunnerKind {
        if let Some(k) = self.policy.default {
            return k;
        }
        let wasm_ok = self.policy.allowed.contains(&RunnerKind::Wasm)
            && self
                .wasm
                .as_ref()
                .is_some_and(|w| w.unavailable().is_none());
        if wasm_ok || !self.policy.allowed.contains(&RunnerKind::Subprocess) {
            RunnerKind::Wasm
        } else {
            RunnerKind::Subprocess
        }
    }

    /// Runs `code` on runner `kind` in the call's session and formats the result.
    ///
    /// # Errors
    /// [`ToolError::InvalidArguments`] when the code is too large or the runner is not in
    /// `runner.allowed`. A runner that is unavailable gives an `is_error` result saying why.
    pub async fn run(
        &self,
        ctx: &CallContext,
        kind: RunnerKind,
        code: &str,
    ) -> Result<ToolOutput, ToolError> {
        if code.len() > self.policy.max_code_bytes {
            return Err(ToolError::InvalidArguments(format!(
                "code: {} bytes is more than runner.max_code_bytes = {}",
                code.len(),
                self.policy.max_code_bytes
            )));
        }
        if !self.policy.allowed.contains(&kind) {
            return Err(ToolError::InvalidArguments(format!(
                "runner: `{}` is not allowed by this server's policy (runner.allowed)",
                kind.as_str()
            )));
        }
        let Some(runner) = self.get(kind) else {
            return Ok(ToolOutput::error(format!(
                "the {} runner is not available on this server",
                kind.as_str()
            )));
        };
        match runner.run(&ctx.session, code).await {
            Ok(outcome) => Ok(format_outcome(&outcome)),
            Err(e) => {
                tracing::warn!(error = %e, "runner could not run code");
                Ok(ToolOutput::error(e.to_string()))
            }
        }
    }

    /// Registers `computer_terminal` and `python`.
    ///
    /// # Errors
    /// [`DuplicateTool`] when a name is taken.
    pub fn register(self: &Arc<Self>, registry: &mut ToolRegistry) -> Result<(), DuplicateTool> {
        // The descriptions say what persists, which depends on the WASM build, on
        // notebook sessions of the subprocess runner, and on which runner is the default.
        let wasm_keeps = self.policy.wasm.build == WasmBuild::WasiPython;
        let subprocess_keeps = self.policy.subprocess.notebook;
        let default_keeps = match self.default_kind() {
            RunnerKind::Wasm => wasm_keeps,
            RunnerKind::Subprocess => subprocess_keeps,
        };
        let state = if default_keeps {
            ", and so do variables and imports, like a notebook"
        } else {
            "; variables and imports do not persist (save what you need to a file)"
        };
        let packages = if wasm_keeps {
            " numpy, pandas, scipy, scikit-learn and matplotlib are available on the WASM runner."
        } else {
            ""
        };
        let terminal_text = format!(
            "Runs Python code in a sandbox and returns what it printed (stdout, then stderr), \
             its exit status and run time. Within a session, files in the working directory \
             persist between calls{state}.{packages} No network. Print what you want to see."
        );
        let wasm_text = if wasm_keeps {
            "CPython in WebAssembly, notebook-style state per session"
        } else {
            "CPython 3.12 in WebAssembly, standard library only, a fresh interpreter per call"
        };
        let subprocess_text = if subprocess_keeps {
            "the host's python3 in a namespace sandbox, notebook-style state per session"
        } else {
            "the host's python3 in a namespace sandbox, a fresh interpreter per call"
        };
        let python_text = format!(
            "Runs Python code like computer_terminal, on the runner you name: `wasm` \
             ({wasm_text}) or `subprocess` ({subprocess_text}). Without `runner`, the \
             server's default."
        );
        registry.register(Arc::new(ComputerTerminal {
            runners: self.clone(),
            descriptor: descriptor::<TerminalArgs>("computer_terminal", &terminal_text),
        }))?;
        registry.register(Arc::new(PythonTool {
            runners: self.clone(),
            descriptor: descriptor::<PythonArgs>("python", &python_text),
        }))
    }
}

fn descriptor<T: JsonSchema>(name: &str, description: &str) -> ToolDescriptor {
    ToolDescriptor {
        name: name.to_string(),
        description: description.to_string(),
        input_schema: schema_for::<T>(),
        hints: Hints {
            read_only: false,
            idempotent: false,
            open_world: false,
            destructive: false,
        },
        origin: Origin::Builtin,
    }
}

/// The text the agent sees: stdout, then stderr, then a status line when the code failed
/// or a limit stopped it. The structured result carries every field of [`RunOutcome`].
pub fn format_outcome(o: &RunOutcome) -> ToolOutput {
    let mut text = o.stdout.clone();
    if !o.stderr.is_empty() {
        if !text.is_empty() && !text.ends_with('\n') {
            text.push('\n');
        }
        text.push_str(&o.stderr);
    }
    let status = match (o.limit, o.exit_code, o.signal) {
        (Some(l), _, _) => Some(format!(
            "[stopped by the {} limit after {:.0} ms{}]",
            l.as_str(),
            o.duration_ms,
            if o.truncated {
                "; output truncated"
            } else {
                ""
            }
        )),
        (None, Some(0), _) => None,
        (None, Some(c), _) => Some(format!("[exit status {c}]")),
        (None, None, Some(s)) => Some(format!("[killed by signal {s}]")),
        (None, None, None) => Some("[no exit status]".to_string()),
    };
    if let Some(s) = status {
        if !text.is_empty() && !text.ends_with('\n') {
            text.push('\n');
        }
        text.push_str(&s);
    }
    let structured = serde_json::to_value(o).unwrap_or(serde_json::Value::Null);
    let out = if o.success() {
        ToolOutput::text(text)
    } else {
        ToolOutput::error(text)
    };
    out.with_structured(structured)
}

/// Arguments of `computer_terminal`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct TerminalArgs {
    /// Python source code to run.
    code: String,
}

/// Arguments of `python`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct PythonArgs {
    /// Python source code to run.
    code: String,
    /// `wasm` or `subprocess`; the server's default runner when absent.
    runner: Option<RunnerKind>,
}

struct ComputerTerminal {
    runners: Arc<Runners>,
    descriptor: ToolDescriptor,
}

#[async_trait::async_trait]
impl Tool for ComputerTerminal {
    fn descriptor(&self) -> &ToolDescriptor {
        &self.descriptor
    }

    async fn call(
        &self,
        ctx: CallContext,
        args: serde_json::Value,
    ) -> Result<ToolOutput, ToolError> {
        let a: TerminalArgs = parse_args(args)?;
        let kind = self.runners.default_kind();
        self.runners.run(&ctx, kind, &a.code).await
    }
}

struct PythonTool {
    runners: Arc<Runners>,
    descriptor: ToolDescriptor,
}

#[async_trait::async_trait]
impl Tool for PythonTool {
    fn descriptor(&self) -> &ToolDescriptor {
        &self.descriptor
    }

    async fn call(
        &self,
        ctx: CallContext,
        args: serde_json::Value,
    ) -> Result<ToolOutput, ToolError> {
        let a: PythonArgs = parse_args(args)?;
        let kind = a.runner.unwrap_or_else(|| self.runners.default_kind());
        self.runners.run(&ctx, kind, &a.code).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn python_schema_names_the_runners() {
        let s = schema_for::<PythonArgs>();
        assert_eq!(s["required"], serde_json::json!(["code"]));
        let text = s.to_string();
        assert!(
            text.contains("\"wasm\"") && text.contains("\"subprocess\""),
            "{text}"
        );
    }
}
