//! The `sibyl.v1.ToolService` gRPC service: a thin layer that decodes requests, looks tools
//! and sessions up, enforces server-wide limits and maps errors to status codes (one map, in
//! [`crate::error`]). Tool logic lives in the tools.

use std::sync::Arc;

use sibyl_proto::v1 as pb;
use tokio::sync::Semaphore;
use tonic::{Request, Response, Status};

use crate::error::ToolError;
use crate::registry::{CallContext, Origin, ToolRegistry};
use crate::session::{SessionManager, TenantId};

/// The service implementation shared by all connections.
pub struct ToolService {
    registry: ToolRegistry,
    sessions: Arc<SessionManager>,
    calls: Arc<Semaphore>,
    max_calls: usize,
    max_request_bytes: usize,
}

impl ToolService {
    /// A service over `registry` and `sessions`, running at most `max_concurrent_calls`
    /// calls at once and refusing requests over `max_request_bytes` (encoded size).
    pub fn new(
        registry: ToolRegistry,
        sessions: Arc<SessionManager>,
        max_concurrent_calls: usize,
        max_request_bytes: usize,
    ) -> Self {
        Self {
            registry,
            sessions,
            calls: Arc::new(Semaphore::new(max_concurrent_calls)),
            max_calls: max_concurrent_calls,
            max_request_bytes,
        }
    }

    /// The transport's own decoding cap: requests between `max_request_bytes` and this get
    /// a `RESOURCE_EXHAUSTED` from [`ToolService`] naming the policy key; larger ones are
    /// cut off by tonic before decoding (`OUT_OF_RANGE`).
    pub fn transport_limit(max_request_bytes: usize) -> usize {
        max_request_bytes.saturating_mul(4).max(4 << 20)
    }

    async fn call(&self, req: pb::CallToolRequest) -> Result<pb::CallToolResponse, ToolError> {
        let size = prost::Message::encoded_len(&req);
        if size > self.max_request_bytes {
            return Err(ToolError::ResourceExhausted(format!(
                "request is {size} bytes; server.max_request_bytes = {}",
                self.max_request_bytes
            )));
        }
        let tool = self
            .registry
            .get(&req.tool)
            .ok_or_else(|| ToolError::UnknownTool(req.tool.chars().take(128).collect()))?;
        let args: serde_json::Value = if req.arguments_json.trim().is_empty() {
            serde_json::Value::Object(Default::default())
        } else {
            serde_json::from_str(&req.arguments_json).map_err(|e| {
                ToolError::InvalidArguments(format!("arguments_json is not valid JSON: {e}"))
            })?
        };
        if !args.is_object() {
            return Err(ToolError::InvalidArguments(
                "arguments_json must be a JSON object".into(),
            ));
        }
        let _permit = self.calls.clone().try_acquire_owned().map_err(|_| {
            ToolError::ResourceExhausted(format!(
                "server busy: server.max_concurrent_calls = {} calls are running",
                self.max_calls
            ))
        })?;
        let guard = self.sessions.begin_call(&req.session_id)?;
        let ctx = CallContext {
            session: guard.session().clone(),
        };
        let started = std::time::Instant::now();
        let out = tool.call(ctx, args).await;
        tracing::debug!(
            tool = %req.tool,
            session = %req.session_id,
            ms = started.elapsed().as_secs_f64() * 1e3,
            ok = out.as_ref().map(|o| !o.is_error).unwrap_or(false),
            "call"
        );
        let out = out?;
        Ok(pb::CallToolResponse {
            text: out.text,
            structured_json: out.structured.map(|v| v.to_string()),
            is_error: out.is_error,
        })
    }
}

#[tonic::async_trait]
impl pb::tool_service_server::ToolService for ToolService {
    async fn list_tools(
        &self,
        _req: Request<pb::ListToolsRequest>,
    ) -> Result<Response<pb::ListToolsResponse>, Status> {
        let tools = self
            .registry
            .list()
            .map(|t| {
                let d = t.descriptor();
                pb::Tool {
                    name: d.name.clone(),
                    description: d.description.clone(),
                    input_schema_json: d.input_schema.to_string(),
                    hints: Some(pb::ToolHints {
                        read_only: d.hints.read_only,
                        idempotent: d.hints.idempotent,
                        open_world: d.hints.open_world,
                        destructive: d.hints.destructive,
                    }),
                    origin: match d.origin {
                        Origin::Builtin => pb::ToolOrigin::Builtin,
                        Origin::Plugin => pb::ToolOrigin::Plugin,
                    } as i32,
                }
            })
            .collect();
        let diagnostics = self
            .registry
            .diagnostics()
            .into_iter()
            .map(|d| pb::PluginDiagnostic {
                source: d.source,
                message: d.message,
            })
            .collect();
        Ok(Response::new(pb::ListToolsResponse { tools, diagnostics }))
    }

    async fn call_tool(
        &self,
        req: Request<pb::CallToolRequest>,
    ) -> Result<Response<pb::CallToolResponse>, Status> {
        let req = req.into_inner();
        match self.call(req).await {
            Ok(r) => Ok(Response::new(r)),
            Err(e) => {
                if matches!(e, ToolError::Internal(_)) {
                    tracing::error!(error = %e, "internal error in CallTool");
                }
                Err(e.into())
            }
        }
    }

    async fn open_session(
        &self,
        _req: Request<pb::OpenSessionRequest>,
    ) -> Result<Response<pb::OpenSessionResponse>, Status> {
        let s = self.sessions.open(TenantId::default())?;
        Ok(Response::new(pb::OpenSessionResponse {
            session_id: s.id().to_string(),
            idle_ttl_seconds: self.sessions.idle_ttl().as_secs(),
        }))
    }

    async fn close_session(
        &self,
        req: Request<pb::CloseSessionRequest>,
    ) -> Result<Response<pb::CloseSessionResponse>, Status> {
        let id = req.into_inner().session_id;
        if id.is_empty() {
            return Err(ToolError::InvalidArguments("session_id: empty".into()).into());
        }
        self.sessions.close(&id)?;
        Ok(Response::new(pb::CloseSessionResponse {}))
    }
}
