//! The tool registry: one table of every tool the server offers, builtin or plugin.
//!
//! A tool implements [`Tool`]; its [`ToolDescriptor`] carries the MCP-style metadata
//! (name, description, JSON Schema of the arguments, hints, origin). Builtin tools derive the
//! schema from their argument struct with `schemars` and parse with [`parse_args`], so the
//! advertised schema and the parsing can never disagree.

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};

use schemars::JsonSchema;
use serde::de::DeserializeOwned;

use crate::error::ToolError;
use crate::session::Session;

/// Where a tool comes from (mirrors `sibyl.v1.ToolOrigin`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    /// Compiled into the server.
    Builtin,
    /// Loaded from a WebAssembly component.
    Plugin,
}

/// Behaviour hints, as MCP tool annotations (mirrors `sibyl.v1.ToolHints`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Hints {
    /// Changes nothing outside its session.
    pub read_only: bool,
    /// Repeating the call with the same arguments has no further effect.
    pub idempotent: bool,
    /// Talks to an open world such as the web.
    pub open_world: bool,
    /// May destroy data.
    pub destructive: bool,
}

/// Everything ListTools says about a tool.
#[derive(Debug, Clone)]
pub struct ToolDescriptor {
    /// Unique tool name, e.g. `visit_page`.
    pub name: String,
    /// What the tool does, written for a model choosing tools.
    pub description: String,
    /// JSON Schema of the arguments object (a JSON object value).
    pub input_schema: serde_json::Value,
    /// Behaviour hints.
    pub hints: Hints,
    /// Builtin or plugin.
    pub origin: Origin,
}

/// The result of a tool that ran: the text the agent sees, optional structured data, and
/// whether it failed (MCP's `isError`).
#[derive(Debug, Clone, PartialEq)]
pub struct ToolOutput {
    /// Text shown to the agent.
    pub text: String,
    /// Optional structured result.
    pub structured: Option<serde_json::Value>,
    /// True when the tool ran and failed; `text` says why.
    pub is_error: bool,
}

impl ToolOutput {
    /// A successful text result.
    pub fn text(text: impl Into<String>) -> Self {
        Self {
            text: text.into(),
            structured: None,
            is_error: false,
        }
    }

    /// A failed run: the tool ran and reports why it could not do the job.
    pub fn error(text: impl Into<String>) -> Self {
        Self {
            text: text.into(),
            structured: None,
            is_error: true,
        }
    }

    /// Attaches structured JSON.
    pub fn with_structured(mut self, value: serde_json::Value) -> Self {
        self.structured = Some(value);
        self
    }
}

/// What a call runs with: its session (state, tenant) and, later, deadlines and quotas.
#[derive(Clone)]
pub struct CallContext {
    /// The session the call runs in (possibly a one-call ephemeral session).
    pub session: Arc<Session>,
}

/// A tool the server can call.
#[async_trait::async_trait]
pub trait Tool: Send + Sync {
    /// The tool's metadata.
    fn descriptor(&self) -> &ToolDescriptor;

    /// Runs the tool on already-decoded JSON arguments (an object).
    ///
    /// # Errors
    /// [`ToolError::InvalidArguments`] for arguments the schema rejects, and the other
    /// variants for requests the server will not run. A tool that ran and failed returns
    /// `Ok` with [`ToolOutput::error`].
    async fn call(
        &self,
        ctx: CallContext,
        args: serde_json::Value,
    ) -> Result<ToolOutput, ToolError>;
}

/// JSON Schema for the argument type `T`, shaped for OpenAI/MCP function calling: an object
/// schema without the `$schema` and `title` keys.
pub fn schema_for<T: JsonSchema>() -> serde_json::Value {
    let mut schema = schemars::schema_for!(T).to_value();
    if let Some(obj) = schema.as_object_mut() {
        obj.remove("$schema");
        obj.remove("title");
        obj.entry("properties")
            .or_insert_with(|| serde_json::Value::Object(Default::default()));
    }
    schema
}

/// Decodes tool arguments into `T`, naming the bad field on failure.
///
/// # Errors
/// [`ToolError::InvalidArguments`] with a message such as
/// `url: invalid type: integer `3`, expected a string` or `missing field `url``.
pub fn parse_args<T: DeserializeOwned>(args: serde_json::Value) -> Result<T, ToolError> {
    serde_path_to_error::deserialize(args).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner().to_string();
        if path == "." || path.is_empty() {
            ToolError::InvalidArguments(inner)
        } else {
            ToolError::InvalidArguments(format!("{path}: {inner}"))
        }
    })
}

/// A problem with a tool source that ListTools reports (e.g. a broken plugin that was skipped).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Diagnostic {
    /// What it is about, e.g. the plugin file name `calc.wasm`.
    pub source: String,
    /// What is wrong, for a human.
    pub message: String,
}

#[derive(Default)]
struct Table {
    tools: BTreeMap<String, Arc<dyn Tool>>,
    diagnostics: Vec<Diagnostic>,
}

/// The table of tools, keyed by name. Cheap to clone; clones share one table, so plugin
/// tools swapped in by [`ToolRegistry::replace_plugins`] (hot reload) are seen by every clone.
///
/// Readers take a snapshot (`Arc` of the table) under a short read lock, so a swap never
/// waits for running calls and a running call keeps the tool it started with.
#[derive(Clone, Default)]
pub struct ToolRegistry {
    table: Arc<RwLock<Arc<Table>>>,
}

/// A registration conflict.
#[derive(Debug, thiserror::Error)]
#[error("a tool named `{0}` is already registered")]
pub struct DuplicateTool(pub String);

impl ToolRegistry {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    fn snapshot(&self) -> Arc<Table> {
        match self.table.read() {
            Ok(t) => t.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    fn update<R>(&self, f: impl FnOnce(&mut Table) -> R) -> R {
        let mut guard = match self.table.write() {
            Ok(g) => g,
            Err(poisoned) => poisoned.into_inner(),
        };
        let old = &**guard;
        let mut table = Table {
            tools: old.tools.clone(),
            diagnostics: old.diagnostics.clone(),
        };
        let r = f(&mut table);
        *guard = Arc::new(table);
        r
    }

    /// Adds a tool.
    ///
    /// # Errors
    /// [`DuplicateTool`] when the name is taken.
    pub fn register(&mut self, tool: Arc<dyn Tool>) -> Result<(), DuplicateTool> {
        let name = tool.descriptor().name.clone();
        self.update(|t| {
            if t.tools.contains_key(&name) {
                return Err(DuplicateTool(name));
            }
            t.tools.insert(name, tool);
            Ok(())
        })
    }

    /// Atomically replaces every [`Origin::Plugin`] tool with `tools` and the diagnostics with
    /// `diagnostics`. A plugin tool whose name is taken by a builtin tool is skipped and
    /// reported as a diagnostic (returned too).
    pub fn replace_plugins(
        &self,
        tools: Vec<(String, Arc<dyn Tool>)>,
        diagnostics: Vec<Diagnostic>,
    ) -> Vec<Diagnostic> {
        self.update(|t| {
            t.tools
                .retain(|_, tool| tool.descriptor().origin != Origin::Plugin);
            t.diagnostics = diagnostics;
            let mut conflicts = Vec::new();
            for (source, tool) in tools {
                let name = tool.descriptor().name.clone();
                match t.tools.entry(name) {
                    std::collections::btree_map::Entry::Occupied(e) => {
                        let d = Diagnostic {
                            source,
                            message: format!(
                                "tool `{}` skipped: the name is already taken",
                                e.key()
                            ),
                        };
                        t.diagnostics.push(d.clone());
                        conflicts.push(d);
                    }
                    std::collections::btree_map::Entry::Vacant(e) => {
                        e.insert(tool);
                    }
                }
            }
            conflicts
        })
    }

    /// Looks a tool up by name.
    pub fn get(&self, name: &str) -> Option<Arc<dyn Tool>> {
        self.snapshot().tools.get(name).cloned()
    }

    /// Every tool, sorted by name (a snapshot).
    pub fn list(&self) -> impl Iterator<Item = Arc<dyn Tool>> + use<> {
        let snap = self.snapshot();
        snap.tools.values().cloned().collect::<Vec<_>>().into_iter()
    }

    /// Problems with tool sources (broken plugins), as last reported by the plugin loader.
    pub fn diagnostics(&self) -> Vec<Diagnostic> {
        self.snapshot().diagnostics.clone()
    }

    /// Number of tools.
    pub fn len(&self) -> usize {
        self.snapshot().tools.len()
    }

    /// True when no tool is registered.
    pub fn is_empty(&self) -> bool {
        self.snapshot().tools.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(serde::Deserialize, schemars::JsonSchema)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Args {
        /// The URL.
        url: String,
        count: Option<u32>,
    }

    #[test]
    fn parse_args_names_the_field() {
        let e = parse_args::<Args>(serde_json::json!({"url": 3})).err();
        assert!(matches!(e, Some(ToolError::InvalidArguments(ref m)) if m.starts_with("url:")));
        let e = parse_args::<Args>(serde_json::json!({})).err();
        assert!(matches!(e, Some(ToolError::InvalidArguments(ref m)) if m.contains("`url`")));
        let e = parse_args::<Args>(serde_json::json!({"url": "x", "bogus": 1})).err();
        assert!(matches!(e, Some(ToolError::InvalidArguments(ref m)) if m.contains("bogus")));
        let e = parse_args::<Args>(serde_json::json!({"url": "x", "count": -1})).err();
        assert!(matches!(e, Some(ToolError::InvalidArguments(ref m)) if m.starts_with("count:")));
    }

    #[test]
    fn schema_is_a_plain_object_schema() {
        let s = schema_for::<Args>();
        assert_eq!(s["type"], "object");
        assert_eq!(s["required"], serde_json::json!(["url"]));
        assert!(s.get("$schema").is_none());
        assert_eq!(s["properties"]["url"]["description"], "The URL.");
    }
}
