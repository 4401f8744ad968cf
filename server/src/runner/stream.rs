//! `CallToolStream`: runs a call with [`OUTPUT_SINK`](super::OUTPUT_SINK) set, forwarding
//! output chunks as they come and ending with the result (or the call's error status).

use sibyl_proto::v1 as pb;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::Status;

use super::{OUTPUT_SINK, OutputChunk, StreamKind};
use crate::error::ToolError;
use crate::rpc::ToolService;

/// Events buffered per streamed call before the runner waits for the client.
const BUFFER: usize = 64;

/// Starts `req` on `service` in a task and returns the stream of its events: chunks in the
/// order the runner read them, then one `result` event, or an error status for a call the
/// server refused. A client that goes away does not stop the call (its limits do).
pub fn call_streamed(
    service: ToolService,
    req: pb::CallToolRequest,
) -> ReceiverStream<Result<pb::CallToolEvent, Status>> {
    let (tx, rx) = mpsc::channel::<Result<pb::CallToolEvent, Status>>(BUFFER);
    tokio::spawn(async move {
        let (chunk_tx, mut chunk_rx) = mpsc::unbounded_channel::<OutputChunk>();
        let fwd = tx.clone();
        let forward = async move {
            while let Some(c) = chunk_rx.recv().await {
                let event = match c.stream {
                    StreamKind::Stdout => pb::call_tool_event::Event::Stdout(c.data),
                    StreamKind::Stderr => pb::call_tool_event::Event::Stderr(c.data),
                };
                // A gone client is ignored; keep draining so the runner never blocks.
                let _ = fwd.send(Ok(pb::CallToolEvent { event: Some(event) })).await;
            }
        };
        let run = async move {
            // The scope (and with it the chunk sender) ends with this statement, which
            // closes the chunk channel and lets `forward` finish.
            OUTPUT_SINK.scope(chunk_tx, service.call(req)).await
        };
        let (result, ()) = tokio::join!(run, forward);
        let last = match result {
            Ok(r) => Ok(pb::CallToolEvent {
                event: Some(pb::call_tool_event::Event::Result(r)),
            }),
            Err(e) => {
                if matches!(e, ToolError::Internal(_)) {
                    tracing::error!(error = %e, "internal error in CallToolStream");
                }
                Err(Status::from(e))
            }
        };
        let _ = tx.send(last).await;
    });
    ReceiverStream::new(rx)
}
