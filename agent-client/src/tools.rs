//! Tools as the pipeline sees them: listed by sibyl-server's ListTools and called with
//! CallTool in one session per run ([`GrpcTools`]), or answered from a trace during
//! `replay` ([`crate::replay`]). Nothing here knows any tool by name.

use serde::{Deserialize, Serialize};

use crate::client::{ClientError, SibylClient};

/// One tool from ListTools.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ToolSpec {
    /// Unique name, e.g. `visit_page`.
    pub name: String,
    /// What it does.
    pub description: String,
    /// JSON Schema of its arguments object (`{}` when the server sent none or bad JSON).
    pub input_schema: serde_json::Value,
}

/// What a tool call returned, as the channel sees it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ToolResult {
    /// The text (for a failed call, why it failed).
    pub text: String,
    /// The tool ran and failed, or the server refused the call (bad arguments, limits).
    pub is_error: bool,
}

/// Why the tool host cannot go on (the run stops; a failing tool is a [`ToolResult`]).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ToolsError {
    /// The server is unreachable or broke the connection.
    #[error("sibyl-server: {0}")]
    Server(#[from] ClientError),
    /// `replay`: the trace does not hold this call (the replay diverged).
    #[error("the trace has no result for {0} (the replay diverged)")]
    NotInTrace(String),
}

/// Something that lists and runs tools.
#[async_trait::async_trait]
pub trait ToolHost: Send {
    /// Every tool, sorted by name.
    ///
    /// # Errors
    /// [`ToolsError`].
    async fn list_tools(&mut self) -> Result<Vec<ToolSpec>, ToolsError>;
    /// Opens the session of one run (the browser's page persists inside it).
    ///
    /// # Errors
    /// [`ToolsError`].
    async fn open_session(&mut self) -> Result<String, ToolsError>;
    /// Runs `tool` with `args` (a JSON object) in `session`.
    ///
    /// # Errors
    /// [`ToolsError`] only when the server cannot be used at all.
    async fn call(
        &mut self,
        session: &str,
        tool: &str,
        args: &serde_json::Value,
    ) -> Result<ToolResult, ToolsError>;
    /// Closes a session (errors are ignored: the server reaps idle sessions anyway).
    async fn close_session(&mut self, session: &str);
}

/// Tools of a live sibyl-server over gRPC.
pub struct GrpcTools {
    client: SibylClient,
}

impl GrpcTools {
    /// Wraps a connected client.
    #[must_use]
    pub fn new(client: SibylClient) -> Self {
        Self { client }
    }
}

#[async_trait::async_trait]
impl ToolHost for GrpcTools {
    async fn list_tools(&mut self) -> Result<Vec<ToolSpec>, ToolsError> {
        Ok(self
            .client
            .list_tools()
            .await?
            .into_iter()
            .map(|t| ToolSpec {
                input_schema: serde_json::from_str(&t.input_schema_json)
                    .unwrap_or_else(|_| serde_json::json!({})),
                name: t.name,
                description: t.description,
            })
            .collect())
    }

    async fn open_session(&mut self) -> Result<String, ToolsError> {
        Ok(self.client.open_session().await?.session_id)
    }

    async fn call(
        &mut self,
        session: &str,
        tool: &str,
        args: &serde_json::Value,
    ) -> Result<ToolResult, ToolsError> {
        match self
            .client
            .call_tool(session, tool, &args.to_string())
            .await
        {
            Ok(r) => Ok(ToolResult {
                text: r.text,
                is_error: r.is_error,
            }),
            // Refusals of this call (bad arguments, limits, unknown tool) go to the model
            // as a failed result so it can correct itself; a dead server ends the run.
            Err(ClientError::Status(s))
                if !matches!(
                    s.code(),
                    tonic::Code::Unavailable | tonic::Code::Unknown | tonic::Code::Internal
                ) =>
            {
                Ok(ToolResult {
                    text: format!("Error ({:?}): {}", s.code(), s.message()),
                    is_error: true,
                })
            }
            Err(e) => Err(e.into()),
        }
    }

    async fn close_session(&mut self, session: &str) {
        if let Err(e) = self.client.close_session(session).await {
            tracing::debug!(%e, "closing session");
        }
    }
}
