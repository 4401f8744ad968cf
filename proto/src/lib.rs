//! The wire contract of sibyl: package `sibyl.v1`.
//!
//! The service is modelled on MCP's `tools/list` and `tools/call` so builtin and plugin
//! tools are discovered and called alike. The `.proto` source lives in
//! `proto/sibyl/v1/tools.proto`; this crate only fences the generated code.

/// Generated types and the `ToolService` client and server for `sibyl.v1`
/// (see `proto/sibyl/v1/tools.proto` for every field's meaning).
#[allow(missing_docs, clippy::all)]
pub mod v1 {
    tonic::include_proto!("sibyl.v1");
}

/// Encoded `FileDescriptorSet` of every sibyl `.proto` file, for gRPC server reflection.
pub const FILE_DESCRIPTOR_SET: &[u8] =
    include_bytes!(concat!(env!("OUT_DIR"), "/sibyl_v1_descriptor.bin"));
