//! The wasmtime side: one engine (async, epoch interruption, fuel metering only when some
//! plugin has a fuel limit, the pooling instance allocator by default), the `sibyl:tool` world's
//! bindings, the capability imports checked against a plugin's grant, and one call run in a
//! fresh store and instance with its limits.

use std::sync::Arc;
use std::time::Duration;

use wasmtime::component::{Component, Linker, ResourceTable};
use wasmtime::{Engine, Store};
use wasmtime_wasi::p2::pipe::MemoryOutputPipe;
use wasmtime_wasi::{FsPerms, WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};

use crate::browser::fetch::{FetchError, Fetcher};
use crate::plugin::policy::PluginGrant;
use crate::policy::BrowserPolicy;

wasmtime::component::bindgen!({
    path: "../plugins/wit",
    world: "plugin",
    imports: { default: async },
    exports: { default: async },
});

pub use ToolError as WitToolError;
use sibyl::tool::{config, http, log};

/// Epoch tick period: the resolution of plugin time limits.
pub const TICK: Duration = Duration::from_millis(10);

/// Bytes of stdout/stderr kept per call.
const PIPE_CAP: usize = 64 << 10;
/// Log lines a call may write, and bytes per line.
const LOG_LINES: usize = 100;
const LOG_LINE_BYTES: usize = 4096;

/// How the plugin engine is built; chosen from the policy at start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EngineOptions {
    /// Instrument compiled code to count fuel. Needed only when some plugin has a fuel
    /// limit; it costs guest time on every call, so it is off otherwise.
    pub fuel: bool,
    /// Use wasmtime's pooling instance allocator with this many instance slots (linear
    /// memories, fiber stacks) reused from call to call instead of mapped and unmapped per
    /// call; `None` maps them on demand.
    pub pool_slots: Option<u32>,
    /// Largest linear memory any plugin may have, in bytes (a pool slot's size).
    pub max_memory_bytes: usize,
}

/// Builds the engine every plugin runs in, and starts its epoch ticker thread (which ends
/// when the engine is dropped).
///
/// # Errors
/// The engine configuration is refused (a build problem), or the pool cannot be reserved.
pub fn engine(opts: &EngineOptions) -> wasmtime::Result<Engine> {
    let mut cfg = wasmtime::Config::new();
    cfg.wasm_component_model(true)
        .epoch_interruption(true)
        .consume_fuel(opts.fuel);
    if let Some(slots) = opts.pool_slots {
        let mut pool = wasmtime::PoolingAllocationConfig::new();
        // A component built by wasm-component-ld has a few core instances (the program and
        // its adapter/shim modules), each with at most one memory and one table.
        pool.total_component_instances(slots)
            .total_core_instances(slots.saturating_mul(8))
            .total_memories(slots.saturating_mul(2))
            .total_tables(slots.saturating_mul(8))
            .total_stacks(slots)
            .max_memory_size(opts.max_memory_bytes);
        cfg.allocation_strategy(wasmtime::InstanceAllocationStrategy::Pooling(pool));
    }
    let engine = Engine::new(&cfg)?;
    let weak = engine.weak();
    std::thread::Builder::new()
        .name("sibyl-plugin-epoch".into())
        .spawn(move || {
            while let Some(e) = weak.upgrade() {
                e.increment_epoch();
                drop(e);
                std::thread::sleep(TICK);
            }
        })
        .map_err(wasmtime::Error::from)?;
    Ok(engine)
}

/// The linker with WASI p2 and the `sibyl:tool` imports.
///
/// # Errors
/// Conflicting definitions (a build problem).
pub fn linker(engine: &Engine) -> wasmtime::Result<Linker<HostState>> {
    let mut linker = Linker::new(engine);
    wasmtime_wasi::p2::add_to_linker_async(&mut linker)?;
    Plugin::add_to_linker::<_, wasmtime::component::HasSelf<_>>(&mut linker, |s| s)?;
    Ok(linker)
}

/// Compiles a component (CPU-heavy; run it off the async threads).
///
/// # Errors
/// The bytes are not a valid component.
pub fn compile(engine: &Engine, bytes: &[u8]) -> wasmtime::Result<Component> {
    Component::new(engine, bytes)
}

/// What a plugin may reach: its grant and an HTTP client restricted to it.
pub struct Capabilities {
    /// Plugin name, for logs and messages.
    pub name: String,
    /// The grant.
    pub grant: PluginGrant,
    fetcher: Option<Fetcher>,
}

impl Capabilities {
    /// Builds the capabilities of `name`; the HTTP client follows the browser's settings
    /// and block list, with the grant's hosts as its only SSRF exceptions and no redirects.
    ///
    /// # Errors
    /// The HTTP client cannot be built.
    pub fn new(name: &str, grant: PluginGrant, browser: &BrowserPolicy) -> Result<Self, String> {
        let fetcher = if grant.allow_hosts.is_empty() {
            None
        } else {
            let mut p = browser.clone();
            p.allow = grant.allow_hosts.clone();
            p.max_redirects = 0;
            p.request_timeout = grant.limits.http_timeout;
            p.max_response_bytes = grant.limits.max_response_bytes;
            Some(Fetcher::new(&p).map_err(|e| e.to_string())?)
        };
        Ok(Self {
            name: name.to_string(),
            grant,
            fetcher,
        })
    }
}

/// Records whether the memory limit refused a growth, to tell "out of memory" from a trap.
struct Limiter {
    max: usize,
    hit: bool,
}

impl wasmtime::ResourceLimiter for Limiter {
    fn memory_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        if desired > self.max {
            self.hit = true;
            return Ok(false);
        }
        Ok(true)
    }

    fn table_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        Ok(desired <= 100_000)
    }
}

/// Per-store state: WASI context, resources, limiter and capabilities.
pub struct HostState {
    wasi: WasiCtx,
    table: ResourceTable,
    limiter: Limiter,
    caps: Arc<Capabilities>,
    /// Capabilities are off while `describe` runs at load time.
    describing: bool,
    log_lines: usize,
    stdout: MemoryOutputPipe,
}

impl WasiView for HostState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

impl sibyl::tool::types::Host for HostState {}

impl http::Host for HostState {
    async fn get(&mut self, url: String) -> Result<http::Response, http::HttpError> {
        let name = self.caps.name.clone();
        if self.describing {
            return Err(http::HttpError::Denied(
                "http is not available while a plugin describes itself".into(),
            ));
        }
        let parsed = url::Url::parse(&url)
            .map_err(|e| http::HttpError::Failed(format!("invalid URL `{url}`: {e}")))?;
        if !matches!(parsed.scheme(), "http" | "https") {
            return Err(http::HttpError::Denied(format!(
                "scheme `{}` is not allowed (only http and https)",
                parsed.scheme()
            )));
        }
        let allow = &self.caps.grant.allow_hosts;
        let granted = match parsed.host() {
            Some(url::Host::Domain(d)) => allow.matches_name(&d.to_ascii_lowercase()),
            Some(url::Host::Ipv4(ip)) => allow.matches_ip(ip.into()),
            Some(url::Host::Ipv6(ip)) => allow.matches_ip(ip.into()),
            None => false,
        };
        let host = parsed.host_str().unwrap_or("").to_string();
        let Some(fetcher) = self.caps.fetcher.as_ref().filter(|_| granted) else {
            tracing::warn!(plugin = %name, %host, "plugin http.get denied: host not granted");
            return Err(http::HttpError::Denied(format!(
                "host `{host}` is not granted to plugin `{name}` (plugins.grants.{name}.allow_hosts)"
            )));
        };
        match fetcher.get(&parsed).await {
            Ok(f) => Ok(http::Response {
                status: f.status,
                content_type: f.mime,
                body: f.body,
            }),
            Err(FetchError::Refused(r)) => Err(http::HttpError::Denied(r.to_string())),
            Err(FetchError::Timeout(d)) => Err(http::HttpError::Timeout(format!(
                "no complete response within {} ms (plugins.grants.{name}.http_timeout_ms)",
                d.as_millis()
            ))),
            Err(FetchError::TooLarge { limit }) => Err(http::HttpError::TooLarge(format!(
                "response body exceeds {limit} bytes (plugins.grants.{name}.max_response_bytes)"
            ))),
            Err(FetchError::TooManyRedirects(_)) => Err(http::HttpError::Failed(
                "the server answered with a redirect; plugins do not follow redirects".into(),
            )),
            Err(e) => Err(http::HttpError::Failed(e.to_string())),
        }
    }
}

impl config::Host for HostState {
    async fn get(&mut self, key: String) -> Option<String> {
        self.caps.grant.config.get(&key).cloned()
    }
}

impl log::Host for HostState {
    async fn log(&mut self, level: log::Level, message: String) {
        if self.log_lines >= LOG_LINES {
            return;
        }
        self.log_lines += 1;
        let mut m = message;
        if m.len() > LOG_LINE_BYTES {
            let mut cut = LOG_LINE_BYTES;
            while !m.is_char_boundary(cut) {
                cut -= 1;
            }
            m.truncate(cut);
        }
        let plugin = self.caps.name.as_str();
        match level {
            log::Level::Trace => tracing::trace!(plugin, "{m}"),
            log::Level::Debug => tracing::debug!(plugin, "{m}"),
            log::Level::Info => tracing::info!(plugin, "{m}"),
            log::Level::Warn => tracing::warn!(plugin, "{m}"),
            log::Level::Error => tracing::error!(plugin, "{m}"),
        }
    }
}

/// How a run ended when it did not return normally.
#[derive(Debug)]
pub enum RunError {
    /// The call ran past its time limit.
    Timeout(Duration),
    /// The call used up its fuel.
    OutOfFuel(u64),
    /// No instance slot was free in the pooling allocator (the message says which pool).
    PoolFull(String),
    /// The instance tried to grow memory past its limit (and then trapped).
    OutOfMemory(usize),
    /// The guest trapped (panic, unreachable, stack overflow, bad memory access).
    Trap(String),
    /// The host could not set the call up (a scratch directory could not be opened, ...).
    Setup(String),
}

/// A store for one call of the plugin with `caps`, with a scratch directory mounted at
/// `/scratch` when given and granted.
fn store(
    engine: &Engine,
    caps: &Arc<Capabilities>,
    scratch: Option<&std::path::Path>,
    describing: bool,
) -> Result<Store<HostState>, RunError> {
    let limits = &caps.grant.limits;
    let stdout = MemoryOutputPipe::new(PIPE_CAP);
    let mut b = WasiCtxBuilder::new();
    b.stdout(stdout.clone()).stderr(stdout.clone());
    if !describing {
        if let (true, Some(dir)) = (caps.grant.scratch, scratch) {
            b.preopened_dir(dir, "/scratch", FsPerms::ReadWrite)
                .map_err(|e| RunError::Setup(format!("cannot open the scratch directory: {e}")))?;
        }
        for p in &caps.grant.paths {
            let perms = if p.write {
                FsPerms::ReadWrite
            } else {
                FsPerms::ReadOnly
            };
            b.preopened_dir(&p.host, &p.guest, perms).map_err(|e| {
                RunError::Setup(format!(
                    "cannot open granted path {}: {e}",
                    p.host.display()
                ))
            })?;
        }
    }
    let state = HostState {
        wasi: b.build(),
        table: ResourceTable::new(),
        limiter: Limiter {
            max: limits.memory_bytes,
            hit: false,
        },
        caps: caps.clone(),
        describing,
        log_lines: 0,
        stdout,
    };
    let mut store = Store::new(engine, state);
    store.limiter(|s| &mut s.limiter);
    refuel(&mut store, limits.fuel)?;
    let ticks = limits.timeout.as_millis().div_ceil(TICK.as_millis()).max(1);
    store.set_epoch_deadline(u64::try_from(ticks).unwrap_or(u64::MAX));
    store.epoch_deadline_trap();
    Ok(store)
}

/// Sets the store's fuel to `fuel` (unlimited: `None`) when the engine counts fuel. The engine
/// counts fuel whenever some plugin has a limit, so a limit is never silently ignored.
fn refuel(store: &mut Store<HostState>, fuel: Option<u64>) -> Result<(), RunError> {
    if store.get_fuel().is_err() {
        return match fuel {
            None => Ok(()),
            Some(_) => Err(RunError::Setup(
                "this plugin has a fuel limit but the engine was built without fuel".into(),
            )),
        };
    }
    store
        .set_fuel(fuel.unwrap_or(u64::MAX))
        .map_err(|e| RunError::Setup(e.to_string()))
}

fn classify(store: &Store<HostState>, caps: &Capabilities, e: wasmtime::Error) -> RunError {
    let limits = &caps.grant.limits;
    match e.downcast_ref::<wasmtime::Trap>() {
        Some(wasmtime::Trap::Interrupt) => RunError::Timeout(limits.timeout),
        Some(wasmtime::Trap::OutOfFuel) => RunError::OutOfFuel(limits.fuel.unwrap_or(u64::MAX)),
        _ if store.data().limiter.hit => RunError::OutOfMemory(limits.memory_bytes),
        _ if e.is::<wasmtime::PoolConcurrencyLimitError>() => RunError::PoolFull(e.to_string()),
        _ => {
            let out = String::from_utf8_lossy(&store.data().stdout.contents()).into_owned();
            let tail: String = out
                .lines()
                .rev()
                .take(3)
                .collect::<Vec<_>>()
                .into_iter()
                .rev()
                .collect::<Vec<_>>()
                .join(" | ");
            let mut msg = format!("{e:#}");
            if let Some(first) = msg.lines().next() {
                msg = first.to_string();
            }
            if !tail.is_empty() {
                msg.push_str(&format!(" (plugin output: {tail})"));
            }
            RunError::Trap(msg)
        }
    }
}

/// Calls `describe` at load time (capabilities off) in a fresh instance.
///
/// # Errors
/// [`RunError`] when the plugin traps or runs out of a limit.
pub async fn describe(
    engine: &Engine,
    pre: &PluginPre<HostState>,
    caps: &Arc<Capabilities>,
) -> Result<Vec<ToolDescriptor>, RunError> {
    let mut store = store(engine, caps, None, true)?;
    let timeout = caps.grant.limits.timeout;
    let fut = async {
        let inst = pre.instantiate_async(&mut store).await?;
        inst.call_describe(&mut store).await
    };
    match tokio::time::timeout(timeout + TICK * 5, fut).await {
        Err(_) => Err(RunError::Timeout(timeout)),
        Ok(Ok(r)) => Ok(r),
        Ok(Err(e)) => Err(classify(&store, caps, e)),
    }
}

/// A store and, once the first call has instantiated it, the plugin's instance: a fresh one
/// per call for stateless plugins, or one kept for a whole session for stateful ones.
pub struct Instance {
    store: Store<HostState>,
    plugin: Option<Plugin>,
}

impl Instance {
    /// A new, not yet instantiated, store for calls of the plugin with `caps`, with the
    /// session's scratch directory mounted at `/scratch` when given and granted.
    ///
    /// # Errors
    /// [`RunError::Setup`] when a granted directory cannot be opened.
    pub fn new(
        engine: &Engine,
        caps: &Arc<Capabilities>,
        scratch: Option<&std::path::Path>,
    ) -> Result<Self, RunError> {
        Ok(Self {
            store: store(engine, caps, scratch, false)?,
            plugin: None,
        })
    }

    /// True when this instance belongs to the plugin load `caps` (a reload makes new ones).
    pub fn is_for(&self, caps: &Arc<Capabilities>) -> bool {
        Arc::ptr_eq(&self.store.data().caps, caps)
    }
}

/// Calls `tool` with `args_json` in a fresh instance. The wall-clock limit is enforced by
/// epoch interruption and, for time spent in host calls, by a timer.
///
/// # Errors
/// [`RunError`] when the plugin traps or runs out of a limit; the plugin's own
/// `tool-error` comes back as `Ok(Err(..))`.
pub async fn call(
    engine: &Engine,
    pre: &PluginPre<HostState>,
    caps: &Arc<Capabilities>,
    scratch: Option<&std::path::Path>,
    tool: &str,
    args_json: &str,
) -> Result<Result<ToolResult, WitToolError>, RunError> {
    let mut inst = Instance::new(engine, caps, scratch)?;
    call_on(&mut inst, pre, caps, tool, args_json).await
}

/// Calls `tool` with `args_json` on `inst`, instantiating it first if needed. The call's
/// limits (time, fuel, the memory-limit flag, log lines) are reset before it runs, so they
/// apply per call on a kept instance too. After an `Err` the instance must be discarded.
///
/// # Errors
/// As [`call`].
pub async fn call_on(
    inst: &mut Instance,
    pre: &PluginPre<HostState>,
    caps: &Arc<Capabilities>,
    tool: &str,
    args_json: &str,
) -> Result<Result<ToolResult, WitToolError>, RunError> {
    let limits = &caps.grant.limits;
    let store = &mut inst.store;
    refuel(store, limits.fuel)?;
    let ticks = limits.timeout.as_millis().div_ceil(TICK.as_millis()).max(1);
    store.set_epoch_deadline(u64::try_from(ticks).unwrap_or(u64::MAX));
    store.data_mut().limiter.hit = false;
    store.data_mut().log_lines = 0;
    let timeout = limits.timeout;
    let plugin = &mut inst.plugin;
    let fut = async {
        let p = match plugin {
            Some(p) => p,
            None => plugin.insert(pre.instantiate_async(&mut *store).await?),
        };
        p.call_call(&mut *store, tool, args_json).await
    };
    match tokio::time::timeout(timeout + TICK * 5, fut).await {
        Err(_) => Err(RunError::Timeout(timeout)),
        Ok(Ok(r)) => Ok(r),
        Ok(Err(e)) => Err(classify(&inst.store, caps, e)),
    }
}

/// Where the time of one fresh-instance call of a plugin goes, for each engine
/// configuration: store and WASI context, instantiation, the call itself, dropping the
/// store. Runs `tool` with `args_json` `n` times per configuration on the current thread
/// (no gRPC) and returns one printable line per configuration. For the benchmark in
/// `tests/plugins` (`bench_plugin_call_breakdown`); not part of the server.
///
/// # Errors
/// The component does not compile, link, instantiate, or the call fails.
#[doc(hidden)]
pub fn call_phase_breakdown(
    wasm: &[u8],
    tool: &str,
    args_json: &str,
    n: usize,
) -> Result<Vec<String>, String> {
    use std::time::Instant;
    let err = |what: &str, e: &dyn std::fmt::Display| format!("{what}: {e}");
    let browser = crate::Policy::embedded_default()
        .map_err(|e| err("policy", &e))?
        .browser;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| err("runtime", &e))?;
    let n = n.max(1);
    let mut lines = Vec::new();
    // The WASI context alone: the part of store setup that is not wasmtime's.
    let t = Instant::now();
    for _ in 0..n {
        let stdout = MemoryOutputPipe::new(PIPE_CAP);
        let mut b = WasiCtxBuilder::new();
        b.stdout(stdout.clone()).stderr(stdout);
        std::hint::black_box(b.build());
    }
    lines.push(format!(
        "WASI context build alone: {:.1} us",
        t.elapsed().as_secs_f64() * 1e6 / n as f64
    ));
    let variants = [
        ("fuel on,  on-demand", true, None),
        ("fuel off, on-demand", false, None),
        ("fuel on,  pooling  ", true, Some(64)),
        ("fuel off, pooling  ", false, Some(64)),
    ];
    for (label, fuel, pool_slots) in variants {
        let opts = EngineOptions {
            fuel,
            pool_slots,
            max_memory_bytes: 64 << 20,
        };
        let engine = engine(&opts).map_err(|e| err("engine", &e))?;
        let linker = linker(&engine).map_err(|e| err("linker", &e))?;
        let component = compile(&engine, wasm).map_err(|e| err("compile", &e))?;
        let pre = linker
            .instantiate_pre(&component)
            .and_then(PluginPre::new)
            .map_err(|e| err("pre-instantiate", &e))?;
        let grant = PluginGrant {
            limits: crate::plugin::policy::PluginLimits {
                fuel: fuel.then_some(1 << 40),
                ..Default::default()
            },
            ..PluginGrant::default()
        };
        let caps = Arc::new(Capabilities::new("bench", grant, &browser)?);
        let mut sums = [0f64; 4];
        let mut total = Vec::with_capacity(n);
        rt.block_on(async {
            for i in 0..n + n / 10 {
                let t0 = Instant::now();
                let mut store =
                    store(&engine, &caps, None, false).map_err(|e| format!("store: {e:?}"))?;
                let t1 = Instant::now();
                let plugin = pre
                    .instantiate_async(&mut store)
                    .await
                    .map_err(|e| err("instantiate", &e))?;
                let t2 = Instant::now();
                let r = plugin
                    .call_call(&mut store, tool, args_json)
                    .await
                    .map_err(|e| err("call", &e))?;
                let t3 = Instant::now();
                drop(store);
                let t4 = Instant::now();
                if let Err(e) = r {
                    return Err(format!("{tool} failed: {e:?}"));
                }
                // The first tenth warms up.
                if i >= n / 10 {
                    for (s, d) in sums.iter_mut().zip([t1 - t0, t2 - t1, t3 - t2, t4 - t3]) {
                        *s += d.as_secs_f64();
                    }
                    total.push(t4 - t0);
                }
            }
            Ok::<(), String>(())
        })?;
        total.sort();
        let us = |s: f64| s * 1e6 / n as f64;
        lines.push(format!(
            "{label}: store+WASI {:.1} us, instantiate {:.1} us, call {:.1} us, drop {:.1} us; total p50 {:.1} us, p99 {:.1} us",
            us(sums[0]),
            us(sums[1]),
            us(sums[2]),
            us(sums[3]),
            total[n / 2].as_secs_f64() * 1e6,
            total[n * 99 / 100].as_secs_f64() * 1e6,
        ));
    }
    Ok(lines)
}
