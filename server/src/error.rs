//! Errors for requests the server will not run, and their one mapping to gRPC status codes.
//!
//! A tool that *ran* and failed is not an error here: it returns
//! [`ToolOutput::error`](crate::registry::ToolOutput::error) (`is_error` on the wire).

/// A request the server refuses, as opposed to a tool run that failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ToolError {
    /// The arguments do not match the tool's schema; the message names the field.
    #[error("invalid arguments: {0}")]
    InvalidArguments(String),
    /// No such tool.
    #[error("unknown tool `{0}`")]
    UnknownTool(String),
    /// No such session, or it expired.
    #[error("unknown or expired session `{0}`")]
    UnknownSession(String),
    /// A server or policy limit was reached; the message names the limit.
    #[error("{0}")]
    ResourceExhausted(String),
    /// The server broke an internal invariant (a bug); logged, never a panic.
    #[error("internal error: {0}")]
    Internal(String),
}

impl From<ToolError> for tonic::Status {
    fn from(e: ToolError) -> Self {
        let msg = e.to_string();
        match e {
            ToolError::InvalidArguments(_) => tonic::Status::invalid_argument(msg),
            ToolError::UnknownTool(_) | ToolError::UnknownSession(_) => {
                tonic::Status::not_found(msg)
            }
            ToolError::ResourceExhausted(_) => tonic::Status::resource_exhausted(msg),
            ToolError::Internal(_) => tonic::Status::internal(msg),
        }
    }
}
