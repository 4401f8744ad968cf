//! A thin typed wrapper over the generated `sibyl.v1.ToolService` client.

use sibyl_proto::v1 as pb;
use sibyl_proto::v1::tool_service_client::ToolServiceClient;
use tonic::transport::Channel;

/// Default server address when neither `--server` nor `SIBYL_SERVER` is given.
pub const DEFAULT_SERVER: &str = "http://127.0.0.1:50051";

/// Why a client operation failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ClientError {
    /// The server address is malformed.
    #[error("invalid server address `{0}`: {1}")]
    Address(String, String),
    /// The server could not be reached.
    #[error("cannot connect to sibyl-server at {0}: {1}")]
    Connect(String, String),
    /// The server answered with a gRPC error status.
    #[error("{code}: {message}", code = .0.code(), message = .0.message())]
    Status(#[from] tonic::Status),
}

/// A connected client.
#[derive(Clone)]
pub struct SibylClient {
    inner: ToolServiceClient<Channel>,
}

impl SibylClient {
    /// Connects to `server` (`http://host:port`; a bare `host:port` gets `http://`).
    ///
    /// # Errors
    /// [`ClientError::Address`] or [`ClientError::Connect`].
    pub async fn connect(server: &str) -> Result<Self, ClientError> {
        let uri = if server.contains("://") {
            server.to_string()
        } else {
            format!("http://{server}")
        };
        let endpoint = Channel::from_shared(uri.clone())
            .map_err(|e| ClientError::Address(server.to_string(), e.to_string()))?
            .connect_timeout(std::time::Duration::from_secs(10));
        let channel = endpoint
            .connect()
            .await
            .map_err(|e| ClientError::Connect(uri.clone(), source_chain(&e)))?;
        Ok(Self {
            inner: ToolServiceClient::new(channel).max_decoding_message_size(256 << 20),
        })
    }

    /// ListTools: every tool, sorted by name.
    ///
    /// # Errors
    /// [`ClientError::Status`].
    pub async fn list_tools(&mut self) -> Result<Vec<pb::Tool>, ClientError> {
        Ok(self
            .inner
            .list_tools(pb::ListToolsRequest {})
            .await?
            .into_inner()
            .tools)
    }

    /// ListTools with its diagnostics: every tool, sorted by name, and the server's reports
    /// about plugins it skipped or loaded with less than they request.
    ///
    /// # Errors
    /// [`ClientError::Status`].
    pub async fn list_tools_with_diagnostics(
        &mut self,
    ) -> Result<(Vec<pb::Tool>, Vec<pb::PluginDiagnostic>), ClientError> {
        let r = self
            .inner
            .list_tools(pb::ListToolsRequest {})
            .await?
            .into_inner();
        Ok((r.tools, r.diagnostics))
    }

    /// OpenSession: a new session id.
    ///
    /// # Errors
    /// [`ClientError::Status`].
    pub async fn open_session(&mut self) -> Result<pb::OpenSessionResponse, ClientError> {
        Ok(self
            .inner
            .open_session(pb::OpenSessionRequest {})
            .await?
            .into_inner())
    }

    /// CloseSession.
    ///
    /// # Errors
    /// [`ClientError::Status`].
    pub async fn close_session(&mut self, session_id: &str) -> Result<(), ClientError> {
        self.inner
            .close_session(pb::CloseSessionRequest {
                session_id: session_id.to_string(),
            })
            .await?;
        Ok(())
    }

    /// CallTool: runs `tool` with JSON `arguments` in `session_id` (empty: a one-call session).
    ///
    /// # Errors
    /// [`ClientError::Status`]; a tool that ran and failed is `Ok` with `is_error`.
    pub async fn call_tool(
        &mut self,
        session_id: &str,
        tool: &str,
        arguments_json: &str,
    ) -> Result<pb::CallToolResponse, ClientError> {
        Ok(self
            .inner
            .call_tool(pb::CallToolRequest {
                session_id: session_id.to_string(),
                tool: tool.to_string(),
                arguments_json: arguments_json.to_string(),
            })
            .await?
            .into_inner())
    }
}

fn source_chain(e: &dyn std::error::Error) -> String {
    let mut msg = e.to_string();
    let mut src = e.source();
    while let Some(s) = src {
        msg = format!("{msg}: {s}");
        src = s.source();
    }
    msg
}
