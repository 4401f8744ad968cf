//! WebAssembly plugin tools: components implementing the `sibyl:tool@0.1.0` world
//! (`plugins/wit/tool.wit`) dropped into the plugins directory become tools in the same
//! registry as the builtin ones (`Origin::Plugin`), without a restart.
//!
//! * [`policy`]: the `[plugins]` policy section — directory, default limits, and per-plugin
//!   grants (hosts, paths, scratch, config, limits, sha256 pin, consent to keep state).
//!   Deny by default.
//! * [`manifest`]: `NAME.toml` beside `NAME.wasm`, the author's side: the content hash it
//!   pins, whether it is per-session stateful, what it requests (never granted from).
//! * `host`: wasmtime (component model, async, epoch interruption, fuel, memory limiter), the
//!   capability imports checked against the grant (HTTP through the browser's SSRF guard).
//! * `loader`: hash checks (manifest, then policy), compile once per content hash,
//!   pre-instantiate, `describe`,
//!   validate, swap into the registry; a polling watcher reloads on change. Broken plugins
//!   are logged and reported in ListTools' diagnostics, never fatal.
//!
//! Every call runs in a fresh instance (no state shared between agents or calls; a session's
//! files persist in its `/scratch` when granted), unless the plugin's manifest declares
//! `stateful = true` and its grant allows it (`stateful = true` too): then one instance is
//! kept per session, never shared between sessions. Why this shape: Wassette maps components to
//! tools with a deny-by-default policy, Extism pins content hashes in a manifest; we do both,
//! with typed errors (`invalid-arguments`, `denied`, `failed`, `timeout`) kept apart from traps.

mod host;
mod loader;
pub mod manifest;
pub mod policy;

#[doc(hidden)]
pub use host::call_phase_breakdown;
pub use loader::{MAX_PLUGIN_BYTES, PluginHost, sha256_hex};
