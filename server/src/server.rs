//! Wiring: builds the registry, sessions and gRPC services from a policy and serves them
//! with the standard `grpc.health.v1.Health` service and server reflection (v1 and v1alpha,
//! so grpcurl, grpcui and grpcio clients can discover the tools).

use std::future::Future;
use std::sync::Arc;

use sibyl_proto::v1::tool_service_server::ToolServiceServer;
use tokio::net::TcpListener;
use tonic::transport::server::TcpIncoming;

use crate::browser::Browser;
use crate::policy::Policy;
use crate::registry::ToolRegistry;
use crate::rpc::ToolService;
use crate::session::SessionManager;

/// Why the server could not start or stopped with an error.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ServeError {
    /// A tool could not be set up.
    #[error("cannot set up tools: {0}")]
    Setup(String),
    /// Reflection descriptors are broken (a build problem).
    #[error("cannot set up gRPC reflection: {0}")]
    Reflection(String),
    /// The transport failed.
    #[error("gRPC transport error: {0}")]
    Transport(#[from] tonic::transport::Error),
}

/// The fully-wired tool server, ready to serve.
pub struct Sibyl {
    /// Every tool.
    pub registry: ToolRegistry,
    /// Every session.
    pub sessions: Arc<SessionManager>,
    policy: Policy,
    plugins: Option<Arc<crate::plugin::PluginHost>>,
}

impl Sibyl {
    /// Builds the registry (browser tools) and session manager for `policy`.
    ///
    /// # Errors
    /// [`ServeError::Setup`] when a tool cannot be built.
    pub fn new(policy: Policy) -> Result<Self, ServeError> {
        let mut registry = ToolRegistry::new();
        let browser =
            Arc::new(Browser::new(&policy.browser).map_err(|e| ServeError::Setup(e.to_string()))?);
        browser
            .register(&mut registry)
            .map_err(|e| ServeError::Setup(e.to_string()))?;
        let sessions = Arc::new(SessionManager::new(policy.sessions.clone()));
        let plugins = crate::plugin::PluginHost::start(&policy, &registry)
            .map_err(|e| ServeError::Setup(e.to_string()))?;
        Ok(Self {
            registry,
            sessions,
            policy,
            plugins,
        })
    }

    /// Serves on `listener` until `shutdown` resolves, then drains in-flight calls.
    ///
    /// # Errors
    /// [`ServeError`] on reflection or transport failure.
    pub async fn serve(
        self,
        listener: TcpListener,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> Result<(), ServeError> {
        let reaper = self.sessions.spawn_reaper();
        let plugin_watcher = self.plugins.as_ref().and_then(|p| p.spawn_watcher());
        let (health_reporter, health_service) = tonic_health::server::health_reporter();
        health_reporter
            .set_serving::<ToolServiceServer<ToolService>>()
            .await;
        let reflection_v1 = tonic_reflection::server::Builder::configure()
            .register_encoded_file_descriptor_set(sibyl_proto::FILE_DESCRIPTOR_SET)
            .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
            .build_v1()
            .map_err(|e| ServeError::Reflection(e.to_string()))?;
        let reflection_v1alpha = tonic_reflection::server::Builder::configure()
            .register_encoded_file_descriptor_set(sibyl_proto::FILE_DESCRIPTOR_SET)
            .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
            .build_v1alpha()
            .map_err(|e| ServeError::Reflection(e.to_string()))?;
        let max_request = self.policy.server.max_request_bytes;
        let service = ToolService::new(
            self.registry.clone(),
            self.sessions.clone(),
            self.policy.server.max_concurrent_calls,
            max_request,
        );
        let tools = ToolServiceServer::new(service)
            .max_decoding_message_size(ToolService::transport_limit(max_request));
        let shutdown = async move {
            shutdown.await;
            tracing::info!("shutting down: no new calls, draining in-flight calls");
            health_reporter
                .set_not_serving::<ToolServiceServer<ToolService>>()
                .await;
        };
        let result = tonic::transport::Server::builder()
            .add_service(health_service)
            .add_service(reflection_v1)
            .add_service(reflection_v1alpha)
            .add_service(tools)
            .serve_with_incoming_shutdown(
                // TCP_NODELAY: without it Nagle's algorithm and delayed ACKs add ~40 ms to
                // every small reply.
                TcpIncoming::from(listener).with_nodelay(Some(true)),
                shutdown,
            )
            .await;
        reaper.abort();
        if let Some(w) = plugin_watcher {
            w.abort();
        }
        result.map_err(ServeError::from)
    }
}
