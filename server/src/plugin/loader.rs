//! Loading plugins from the plugins directory: hash check against the pin, compile (cached by
//! content hash), pre-instantiate, `describe`, validate, and swap the tools into the registry.
//! A watcher polls the directory and reloads when a file is added, replaced or removed.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use sha2::{Digest, Sha256};
use tokio::sync::Semaphore;
use wasmtime::Engine;

use crate::error::ToolError;
use crate::plugin::host::{self, Capabilities, HostState, PluginPre, RunError, WitToolError};
use crate::plugin::manifest::{MAX_MANIFEST_BYTES, Manifest};
use crate::plugin::policy::{PluginsPolicy, valid_name};
use crate::policy::BrowserPolicy;
use crate::registry::{
    CallContext, Diagnostic, Hints, Origin, Tool, ToolDescriptor, ToolOutput, ToolRegistry,
};

/// Largest plugin file accepted, in bytes.
pub const MAX_PLUGIN_BYTES: u64 = 64 << 20;

/// Largest result (text plus structured JSON) a plugin call may return, in bytes.
pub const MAX_OUTPUT_BYTES: usize = 4 << 20;

/// A plugin file's path, length and modification time: what the watcher compares.
type FileStamp = (PathBuf, u64, Option<SystemTime>);

/// Compiled code and what it says about itself, shared by every plugin file with that hash.
struct Compiled {
    pre: PluginPre<HostState>,
    tools: Vec<host::ToolDescriptor>,
}

/// Loads, reloads and runs plugins.
pub struct PluginHost {
    engine: Engine,
    linker: wasmtime::component::Linker<HostState>,
    policy: PluginsPolicy,
    browser: BrowserPolicy,
    registry: ToolRegistry,
    /// Compiled components by sha256 (hex). Entries for hashes no longer present are dropped.
    cache: Mutex<HashMap<String, Arc<Compiled>>>,
    /// Directory signature at the last reload.
    signature: Mutex<Option<Vec<FileStamp>>>,
}

/// The kept instances of a session's stateful plugins, by plugin name (a session state;
/// dropped with the session).
#[derive(Default)]
struct SessionInstances {
    by_plugin: HashMap<String, host::Instance>,
}

/// A tool offered by a plugin.
struct PluginTool {
    descriptor: ToolDescriptor,
    engine: Engine,
    compiled: Arc<Compiled>,
    caps: Arc<Capabilities>,
    instances: Arc<Semaphore>,
    /// One instance per session: the manifest declares it and the grant allows it.
    stateful: bool,
}

/// One component loaded: its hash, its tools (with the file name they come from), and
/// diagnostics about it that did not stop it from loading.
struct Loaded {
    hash: String,
    tools: Vec<(String, Arc<dyn Tool>)>,
    warnings: Vec<Diagnostic>,
}

#[async_trait::async_trait]
impl Tool for PluginTool {
    fn descriptor(&self) -> &ToolDescriptor {
        &self.descriptor
    }

    async fn call(
        &self,
        ctx: CallContext,
        args: serde_json::Value,
    ) -> Result<ToolOutput, ToolError> {
        let name = &self.caps.name;
        let limits = &self.caps.grant.limits;
        let _permit = self.instances.clone().try_acquire_owned().map_err(|_| {
            ToolError::ResourceExhausted(format!(
                "plugin `{name}` is busy: {} calls are running (plugins.grants.{name}.max_instances)",
                limits.max_instances
            ))
        })?;
        let scratch = if self.caps.grant.scratch {
            Some(ctx.session.scratch_dir().map_err(|e| {
                ToolError::Internal(format!("cannot create the session scratch directory: {e}"))
            })?)
        } else {
            None
        };
        let args = args.to_string();
        let tool = self.descriptor.name.as_str();
        let pre = &self.compiled.pre;
        let result = if self.stateful {
            // One instance per session and plugin, kept in the session's state. It is taken
            // out for the call and put back only after a normal return, so an instance that
            // trapped, hit a limit or was cancelled is discarded.
            let mut state = ctx.session.state.lock().await;
            let kept = state.get_or_default::<SessionInstances>();
            let mut inst = match kept.by_plugin.remove(name) {
                Some(i) if i.is_for(&self.caps) => i,
                _ => host::Instance::new(&self.engine, &self.caps, scratch)
                    .map_err(|e| run_error(name, tool, e))?,
            };
            let r = host::call_on(&mut inst, pre, &self.caps, tool, &args).await;
            if r.is_ok() {
                state
                    .get_or_default::<SessionInstances>()
                    .by_plugin
                    .insert(name.clone(), inst);
            }
            r
        } else {
            host::call(&self.engine, pre, &self.caps, scratch, tool, &args).await
        };
        match result {
            Ok(Ok(r)) => {
                let size = r.text.len() + r.structured_json.as_ref().map_or(0, String::len);
                if size > MAX_OUTPUT_BYTES {
                    return Ok(ToolOutput::error(format!(
                        "plugin `{name}` returned {size} bytes; the limit is {MAX_OUTPUT_BYTES}"
                    )));
                }
                let mut out = ToolOutput::text(r.text);
                if let Some(s) = r.structured_json {
                    match serde_json::from_str(&s) {
                        Ok(v) => out = out.with_structured(v),
                        Err(e) => {
                            return Ok(ToolOutput::error(format!(
                                "plugin `{name}` returned structured JSON that does not parse: {e}"
                            )));
                        }
                    }
                }
                Ok(out)
            }
            Ok(Err(WitToolError::InvalidArguments(m))) => Err(ToolError::InvalidArguments(m)),
            Ok(Err(WitToolError::Denied(m))) => Ok(ToolOutput::error(format!("denied: {m}"))),
            Ok(Err(WitToolError::Failed(m))) => Ok(ToolOutput::error(m)),
            Ok(Err(WitToolError::Timeout(m))) => Ok(ToolOutput::error(format!("timed out: {m}"))),
            // A trap is the tool failing (a panic, a stack overflow): the agent sees why.
            Err(RunError::Trap(m)) => {
                tracing::warn!(plugin = %name, tool, error = %m, "plugin trapped");
                Ok(ToolOutput::error(format!(
                    "plugin `{name}` tool `{tool}` crashed: {m}"
                )))
            }
            Err(e) => Err(run_error(name, tool, e)),
        }
    }
}

fn run_error(name: &str, tool: &str, e: RunError) -> ToolError {
    let msg = match e {
        RunError::Timeout(d) => format!(
            "plugin `{name}` tool `{tool}` was stopped after its time limit of {} ms (plugins.grants.{name}.timeout_ms)",
            d.as_millis()
        ),
        RunError::OutOfFuel(f) => format!(
            "plugin `{name}` tool `{tool}` was stopped: it used up its fuel of {f} (plugins.grants.{name}.fuel)"
        ),
        RunError::PoolFull(m) => format!(
            "plugin `{name}` tool `{tool}` cannot start: every plugin instance slot is in use ({m}; plugins.pool_slots)"
        ),
        RunError::OutOfMemory(b) => format!(
            "plugin `{name}` tool `{tool}` was stopped: it needed more than its memory limit of {} MiB (plugins.grants.{name}.memory_mib)",
            b >> 20
        ),
        // Handled by the caller as a failed run; kept total rather than panicking.
        RunError::Trap(m) => return ToolError::Internal(format!("plugin `{name}` crashed: {m}")),
        RunError::Setup(m) => return ToolError::Internal(format!("plugin `{name}`: {m}")),
    };
    tracing::warn!(plugin = name, tool, "{msg}");
    ToolError::ResourceExhausted(msg)
}

/// Why a plugin file was skipped.
fn diag(file: &Path, message: impl Into<String>) -> Diagnostic {
    let source = file
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| file.display().to_string());
    let message = message.into();
    tracing::warn!(plugin = %source, "plugin skipped: {message}");
    Diagnostic { source, message }
}

/// A problem with a plugin that still loaded (it is logged once it has).
fn warning(file: &Path, message: String) -> Diagnostic {
    let source = file
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| file.display().to_string());
    Diagnostic { source, message }
}

/// Reads and checks the manifest at `manifest` of the component at `component`; any problem
/// is a diagnostic about the component.
async fn read_manifest(component: &Path, manifest: &Path) -> Result<Manifest, Diagnostic> {
    let file = manifest
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let len = tokio::fs::metadata(manifest)
        .await
        .map_err(|e| diag(component, format!("cannot read {file}: {e}")))?
        .len();
    if len > MAX_MANIFEST_BYTES {
        return Err(diag(
            component,
            format!("{file} is {len} bytes; the limit is {MAX_MANIFEST_BYTES}"),
        ));
    }
    let text = tokio::fs::read_to_string(manifest)
        .await
        .map_err(|e| diag(component, format!("cannot read {file}: {e}")))?;
    Manifest::from_toml(&text, &file).map_err(|e| diag(component, format!("{e}; not loaded")))
}

/// Lower-case hex sha256 of `bytes`.
pub fn sha256_hex(bytes: &[u8]) -> String {
    let d = Sha256::digest(bytes);
    d.iter().map(|b| format!("{b:02x}")).collect()
}

impl PluginHost {
    /// A host for `policy` that publishes plugin tools into `registry`.
    ///
    /// # Errors
    /// The wasmtime engine cannot be set up.
    pub fn new(
        policy: PluginsPolicy,
        browser: BrowserPolicy,
        registry: ToolRegistry,
    ) -> Result<Self, String> {
        let limits =
            || std::iter::once(&policy.defaults).chain(policy.grants.values().map(|g| &g.limits));
        // Fuel metering slows every call, so it is compiled in only when some plugin has a
        // fuel limit (the policy is fixed for the server's life).
        let mut opts = host::EngineOptions {
            fuel: limits().any(|l| l.fuel.is_some()),
            pool_slots: policy.pool_slots,
            max_memory_bytes: limits().map(|l| l.memory_bytes).max().unwrap_or(64 << 20),
        };
        let engine = match host::engine(&opts) {
            Ok(e) => e,
            // The pool reserves address space up front (about 8 GiB per slot, none of it
            // committed); where that is refused (a `ulimit -v`), map per call instead.
            Err(e) if opts.pool_slots.is_some() => {
                tracing::warn!(
                    error = %format!("{e:#}"),
                    "cannot reserve the plugin instance pool (plugins.pool_slots); instances are mapped per call"
                );
                opts.pool_slots = None;
                host::engine(&opts).map_err(|e| format!("cannot start wasmtime: {e:#}"))?
            }
            Err(e) => return Err(format!("cannot start wasmtime: {e:#}")),
        };
        tracing::info!(fuel = opts.fuel, pool_slots = ?opts.pool_slots, "plugin engine");
        let linker = host::linker(&engine).map_err(|e| format!("cannot link WASI: {e:#}"))?;
        Ok(Self {
            engine,
            linker,
            policy,
            browser,
            registry,
            cache: Mutex::new(HashMap::new()),
            signature: Mutex::new(None),
        })
    }

    /// Builds the host for `policy.plugins` and loads the plugins directory once (on its own
    /// thread and runtime, so it works inside or outside a tokio runtime). `None` when
    /// plugins are disabled (`plugins.dir` empty).
    ///
    /// # Errors
    /// The wasmtime engine or the loading thread cannot be set up. Broken plugins are not
    /// errors: they are reported as diagnostics.
    pub fn start(
        policy: &crate::Policy,
        registry: &ToolRegistry,
    ) -> Result<Option<Arc<Self>>, String> {
        if policy.plugins.dir.is_none() {
            return Ok(None);
        }
        let host = Arc::new(Self::new(
            policy.plugins.clone(),
            policy.browser.clone(),
            registry.clone(),
        )?);
        let h = host.clone();
        std::thread::scope(|s| {
            s.spawn(move || {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .map_err(|e| format!("cannot start the plugin loader runtime: {e}"))?;
                rt.block_on(h.reload_if_changed(true));
                Ok::<(), String>(())
            })
            .join()
            .map_err(|_| "the plugin loader thread panicked".to_string())?
        })?;
        Ok(Some(host))
    }

    fn scan(dir: &Path) -> std::io::Result<Vec<FileStamp>> {
        let mut files = Vec::new();
        for entry in std::fs::read_dir(dir)? {
            let entry = entry?;
            let path = entry.path();
            let hidden = path
                .file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with('.'));
            // Components and their manifests: a changed manifest reloads too.
            if hidden || path.extension().is_none_or(|e| e != "wasm" && e != "toml") {
                continue;
            }
            let meta = match entry.metadata() {
                Ok(m) => m,
                Err(_) => continue,
            };
            files.push((path, meta.len(), meta.modified().ok()));
        }
        files.sort();
        Ok(files)
    }

    /// Reloads when the directory changed since the last load (or always when `force`).
    /// Returns true when a reload happened.
    pub async fn reload_if_changed(&self, force: bool) -> bool {
        let Some(dir) = self.policy.dir.clone() else {
            return false;
        };
        let scanned = tokio::task::spawn_blocking(move || Self::scan(&dir)).await;
        let files = match scanned {
            Ok(Ok(f)) => f,
            Ok(Err(e)) => {
                let msg = format!("cannot read the plugins directory: {e}");
                tracing::warn!("{msg}");
                let d = Diagnostic {
                    source: "plugins.dir".into(),
                    message: msg,
                };
                self.registry.replace_plugins(Vec::new(), vec![d]);
                *lock(&self.signature) = None;
                return true;
            }
            Err(_) => return false,
        };
        {
            let sig = lock(&self.signature);
            if !force && sig.as_ref() == Some(&files) {
                return false;
            }
        }
        self.load(&files).await;
        *lock(&self.signature) = Some(files);
        true
    }

    async fn load(&self, files: &[FileStamp]) {
        let mut tools: Vec<(String, Arc<dyn Tool>)> = Vec::new();
        let mut diags = Vec::new();
        let mut seen_hashes = Vec::new();
        let components = files
            .iter()
            .filter(|(p, _, _)| p.extension().is_some_and(|e| e == "wasm"));
        for (path, len, _) in components {
            let manifest = path.with_extension("toml");
            let manifest = files
                .iter()
                .any(|(p, _, _)| *p == manifest)
                .then_some(manifest);
            match self.load_one(path, *len, manifest.as_deref()).await {
                Ok(loaded) => {
                    seen_hashes.push(loaded.hash);
                    diags.extend(loaded.warnings);
                    let mut names = std::collections::BTreeSet::new();
                    for (source, tool) in loaded.tools {
                        if names.insert(tool.descriptor().name.clone()) {
                            tools.push((source, tool));
                        }
                    }
                }
                Err(d) => diags.push(d),
            }
        }
        // Two plugin files offering the same tool name: the first (by file name) wins.
        let mut taken = std::collections::BTreeMap::new();
        let mut unique = Vec::new();
        for (source, tool) in tools {
            let name = tool.descriptor().name.clone();
            if let Some(first) = taken.get(&name) {
                diags.push(Diagnostic {
                    source: source.clone(),
                    message: format!("tool `{name}` skipped: `{first}` already offers it"),
                });
                continue;
            }
            taken.insert(name, source.clone());
            unique.push((source, tool));
        }
        lock(&self.cache).retain(|h, _| seen_hashes.contains(h));
        let n = unique.len();
        self.registry.replace_plugins(unique, diags);
        tracing::info!(
            tools = n,
            diagnostics = self.registry.diagnostics().len(),
            "plugins loaded"
        );
    }

    /// Loads one component, with its manifest when `manifest` is the path of one.
    async fn load_one(
        &self,
        path: &Path,
        len: u64,
        manifest: Option<&Path>,
    ) -> Result<Loaded, Diagnostic> {
        let source = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let name = path
            .file_stem()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        if !valid_name(&name) {
            return Err(diag(
                path,
                "plugin file names are 1-64 characters of a-z, 0-9, `_` and `-`, then `.wasm`",
            ));
        }
        if len > MAX_PLUGIN_BYTES {
            return Err(diag(
                path,
                format!("file is {len} bytes; the limit is {MAX_PLUGIN_BYTES}"),
            ));
        }
        let bytes = tokio::fs::read(path)
            .await
            .map_err(|e| diag(path, format!("cannot read: {e}")))?;
        let hash = sha256_hex(&bytes);
        let manifest = match manifest {
            Some(m) => Some(read_manifest(path, m).await?),
            None => None,
        };
        // The manifest first: it tells a half-copied or mismatched file from the one its
        // author shipped. Then the policy's pin, the operator's trust anchor.
        if let Some(m) = &manifest
            && m.sha256 != hash
        {
            return Err(diag(
                path,
                format!(
                    "hash mismatch: {name}.toml pins sha256 {} but the file's sha256 is {hash} (a different build, or a copy still in progress); not loaded",
                    m.sha256
                ),
            ));
        }
        let grant = self.policy.grant_for(&name);
        let mut warnings = Vec::new();
        // Per-session state needs both the plugin's declaration and the operator's consent.
        let declared = manifest.as_ref().is_some_and(|m| m.stateful);
        if declared && !grant.stateful {
            return Err(diag(
                path,
                format!(
                    "{name}.toml declares stateful = true but the policy does not allow it (plugins.grants.{name}.stateful = true keeps one instance per session); not loaded"
                ),
            ));
        }
        let stateful = declared && grant.stateful;
        if grant.stateful && !declared {
            warnings.push(warning(
                path,
                format!(
                    "plugins.grants.{name}.stateful = true but the plugin does not declare stateful = true in {name}.toml; every call gets a fresh instance"
                ),
            ));
        }
        if let Some(m) = &manifest {
            for s in m.shortfalls(&name, &grant) {
                warnings.push(warning(path, format!("loaded, but it {s}")));
            }
        }
        match &grant.sha256 {
            Some(pin) if *pin != hash => {
                return Err(diag(
                    path,
                    format!(
                        "hash mismatch: the file's sha256 is {hash} but plugins.grants.{name}.sha256 pins {pin}; not loaded"
                    ),
                ));
            }
            None if self.policy.require_pinned => {
                return Err(diag(
                    path,
                    format!(
                        "not pinned: plugins.require_pinned is set and plugins.grants.{name}.sha256 is missing (the file's sha256 is {hash}; a manifest's sha256 does not count, the policy must pin it)"
                    ),
                ));
            }
            _ => {}
        }
        let caps = Arc::new(
            Capabilities::new(&name, grant, &self.browser)
                .map_err(|e| diag(path, format!("cannot set up capabilities: {e}")))?,
        );
        let cached = lock(&self.cache).get(&hash).cloned();
        let compiled = match cached {
            Some(c) => c,
            None => {
                let engine = self.engine.clone();
                let started = std::time::Instant::now();
                let component = tokio::task::spawn_blocking(move || host::compile(&engine, &bytes))
                    .await
                    .map_err(|e| diag(path, format!("compiler crashed: {e}")))?
                    .map_err(|e| diag(path, format!("not a valid WebAssembly component: {e:#}")))?;
                let pre = self
                    .linker
                    .instantiate_pre(&component)
                    .and_then(PluginPre::new)
                    .map_err(|e| {
                        diag(
                            path,
                            format!("does not implement the sibyl:tool@0.1.0 plugin world: {e:#}"),
                        )
                    })?;
                let tools = host::describe(&self.engine, &pre, &caps)
                    .await
                    .map_err(|e| diag(path, format!("describe failed: {e:?}")))?;
                tracing::info!(
                    plugin = %name,
                    ms = started.elapsed().as_secs_f64() * 1e3,
                    "plugin compiled"
                );
                let c = Arc::new(Compiled { pre, tools });
                lock(&self.cache).insert(hash.clone(), c.clone());
                c
            }
        };
        if compiled.tools.is_empty() {
            return Err(diag(path, "describe returned no tools"));
        }
        let instances = Arc::new(Semaphore::new(caps.grant.limits.max_instances));
        let mut out: Vec<(String, Arc<dyn Tool>)> = Vec::new();
        for d in &compiled.tools {
            if !valid_name(&d.name) || d.name.contains('-') {
                return Err(diag(
                    path,
                    format!(
                        "tool name `{}` is invalid (1-64 of a-z, 0-9, `_`)",
                        d.name.chars().take(80).collect::<String>()
                    ),
                ));
            }
            if d.description.trim().is_empty() || d.description.len() > 8192 {
                return Err(diag(
                    path,
                    format!("tool `{}`: description must be 1-8192 bytes", d.name),
                ));
            }
            let schema: serde_json::Value = serde_json::from_str(&d.input_schema).map_err(|e| {
                diag(
                    path,
                    format!("tool `{}`: input-schema is not JSON: {e}", d.name),
                )
            })?;
            if schema.get("type").and_then(|t| t.as_str()) != Some("object") {
                return Err(diag(
                    path,
                    format!(
                        "tool `{}`: input-schema must be an object schema (\"type\": \"object\")",
                        d.name
                    ),
                ));
            }
            out.push((
                source.clone(),
                Arc::new(PluginTool {
                    descriptor: ToolDescriptor {
                        name: d.name.clone(),
                        description: d.description.clone(),
                        input_schema: schema,
                        hints: Hints {
                            read_only: d.hints.read_only,
                            idempotent: d.hints.idempotent,
                            open_world: d.hints.open_world,
                            destructive: d.hints.destructive,
                        },
                        origin: Origin::Plugin,
                    },
                    engine: self.engine.clone(),
                    compiled: compiled.clone(),
                    caps: caps.clone(),
                    instances: instances.clone(),
                    stateful,
                }),
            ));
        }
        for w in &warnings {
            tracing::warn!(plugin = %w.source, "{}", w.message);
        }
        if let Some(m) = &manifest {
            tracing::info!(
                plugin = %name,
                version = m.version.as_deref().unwrap_or(""),
                stateful,
                "plugin manifest accepted"
            );
        }
        Ok(Loaded {
            hash,
            tools: out,
            warnings,
        })
    }

    /// Polls the plugins directory every `plugins.reload_interval_ms` and reloads on change,
    /// until the task is aborted.
    pub fn spawn_watcher(self: &Arc<Self>) -> Option<tokio::task::JoinHandle<()>> {
        let every = self.policy.reload_interval?;
        self.policy.dir.as_ref()?;
        let host = self.clone();
        Some(tokio::spawn(async move {
            let mut tick = tokio::time::interval(every);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                host.reload_if_changed(false).await;
            }
        }))
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    match m.lock() {
        Ok(g) => g,
        Err(p) => p.into_inner(),
    }
}
