//! End-to-end tests of WebAssembly plugin tools: the real plugins under `plugins/` are built
//! for wasm32-wasip2 from source (once per test run), copied into a temporary plugins
//! directory, and served by an in-process `sibyl-server` on 127.0.0.1 that the tests call
//! over gRPC.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use sibyl_proto::v1 as pb;
use sibyl_proto::v1::tool_service_client::ToolServiceClient;
use tonic::transport::Channel;

/// Builds every plugin crate for wasm32-wasip2 (release) into `<target>/plugin-wasm` and
/// returns the directory holding the `.wasm` files.
fn wasm_dir() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        // <target>/debug/deps/plugins-HASH -> <target>
        let exe = std::env::current_exe().expect("current exe");
        let target = exe
            .ancestors()
            .nth(3)
            .expect("target dir above the test binary")
            .to_path_buf();
        let out = target.join("plugin-wasm");
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let status = std::process::Command::new(cargo)
            .current_dir(&root)
            .env("CARGO_TARGET_DIR", &out)
            .args([
                "build",
                "--release",
                "--locked",
                "--target",
                "wasm32-wasip2",
                "-p",
                "sibyl-plugin-calc",
                "-p",
                "sibyl-plugin-json-api",
                "-p",
                "sibyl-plugin-table-query",
                "-p",
                "sibyl-plugin-testkit",
            ])
            .status()
            .expect("run cargo to build the plugins");
        assert!(
            status.success(),
            "building the plugins for wasm32-wasip2 failed (is the target installed? scripts/setup)"
        );
        out.join("wasm32-wasip2").join("release")
    })
}

/// Path of the built plugin `crate_name` (underscored, e.g. `sibyl_plugin_calc`).
fn built(crate_name: &str) -> PathBuf {
    wasm_dir().join(format!("{crate_name}.wasm"))
}

fn sha256_of(path: &Path) -> String {
    sibyl_server::plugin::sha256_hex(&std::fs::read(path).expect("read wasm"))
}

/// A server under test and its plugins directory.
struct Server {
    addr: SocketAddr,
    dir: tempfile::TempDir,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
    }
}

impl Server {
    async fn client(&self) -> ToolServiceClient<Channel> {
        ToolServiceClient::connect(format!("http://{}", self.addr))
            .await
            .expect("connect")
    }

    /// Copies the built `crate_name` into the plugins directory as `<name>.wasm`
    /// (atomically: write to a hidden file, then rename).
    fn install(&self, crate_name: &str, name: &str) {
        install_into(self.dir.path(), crate_name, name);
    }
}

fn install_into(dir: &Path, crate_name: &str, name: &str) {
    let tmp = dir.join(format!(".{name}.tmp"));
    std::fs::copy(built(crate_name), &tmp).expect("copy wasm");
    std::fs::rename(&tmp, dir.join(format!("{name}.wasm"))).expect("rename wasm");
}

/// Writes the manifest `<name>.toml` (atomically, like [`install_into`]).
fn write_manifest(dir: &Path, name: &str, text: &str) {
    let tmp = dir.join(format!(".{name}.toml.tmp"));
    std::fs::write(&tmp, text).expect("write manifest");
    std::fs::rename(&tmp, dir.join(format!("{name}.toml"))).expect("rename manifest");
}

/// A manifest pinning the built `crate_name`, with `extra` lines after the hash.
fn manifest_for(crate_name: &str, extra: &str) -> String {
    format!(
        "sha256 = \"{}\"\nversion = \"0.1.0\"\n{extra}",
        sha256_of(&built(crate_name))
    )
}

/// Starts a server whose `[plugins]` section is `plugins_toml` (with `dir` filled in) after
/// `setup` has populated the plugins directory.
async fn start(plugins_toml: &str, setup: impl FnOnce(&Path)) -> Server {
    let dir = tempfile::tempdir().expect("tempdir");
    setup(dir.path());
    let toml = format!(
        "[plugins]\ndir = \"{}\"\nreload_interval_ms = 100\n{plugins_toml}",
        dir.path().display()
    );
    let policy = sibyl_server::Policy::from_toml(&toml, "test").expect("policy");
    let sibyl = sibyl_server::Sibyl::new(policy).expect("server");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(async move {
        let _ = sibyl
            .serve(listener, async {
                let _ = rx.await;
            })
            .await;
    });
    Server {
        addr,
        dir,
        stop: Some(tx),
    }
}

async fn call(
    c: &mut ToolServiceClient<Channel>,
    tool: &str,
    args: serde_json::Value,
) -> Result<pb::CallToolResponse, tonic::Status> {
    c.call_tool(pb::CallToolRequest {
        session_id: String::new(),
        tool: tool.into(),
        arguments_json: args.to_string(),
    })
    .await
    .map(|r| r.into_inner())
}

async fn list(c: &mut ToolServiceClient<Channel>) -> pb::ListToolsResponse {
    c.list_tools(pb::ListToolsRequest {})
        .await
        .expect("list")
        .into_inner()
}

/// Waits until `pred` holds for ListTools (hot reload polls every 100 ms).
async fn wait_list(
    c: &mut ToolServiceClient<Channel>,
    what: &str,
    pred: impl Fn(&pb::ListToolsResponse) -> bool,
) -> pb::ListToolsResponse {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let l = list(c).await;
        if pred(&l) {
            return l;
        }
        assert!(
            Instant::now() < deadline,
            "timed out waiting for {what}: {l:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

const UNPINNED: &str = "require_pinned = false\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn load_list_call_and_validate_arguments() {
    let s = start(UNPINNED, |d| {
        install_into(d, "sibyl_plugin_testkit", "testkit")
    })
    .await;
    let mut c = s.client().await;
    let l = list(&mut c).await;
    assert!(l.diagnostics.is_empty(), "{:?}", l.diagnostics);
    let echo = l
        .tools
        .iter()
        .find(|t| t.name == "testkit_echo")
        .expect("testkit_echo listed");
    assert_eq!(echo.origin, pb::ToolOrigin::Plugin as i32);
    let schema: serde_json::Value = serde_json::from_str(&echo.input_schema_json).expect("schema");
    assert_eq!(schema["type"], "object");
    assert_eq!(schema["required"], serde_json::json!(["text"]));
    assert!(
        l.tools.iter().any(|t| t.name == "visit_page"),
        "builtins still listed"
    );

    let r = call(
        &mut c,
        "testkit_echo",
        serde_json::json!({"text": "hi", "times": 3}),
    )
    .await
    .expect("call");
    assert_eq!(r.text, "hihihi");
    assert!(!r.is_error);

    // Schema validation: wrong type, missing field, unknown field -> INVALID_ARGUMENT naming it.
    let e = call(&mut c, "testkit_echo", serde_json::json!({"text": 5}))
        .await
        .expect_err("wrong type");
    assert_eq!(e.code(), tonic::Code::InvalidArgument);
    assert!(e.message().contains("text"), "{}", e.message());
    let e = call(&mut c, "testkit_echo", serde_json::json!({}))
        .await
        .expect_err("missing");
    assert_eq!(e.code(), tonic::Code::InvalidArgument);
    assert!(e.message().contains("`text`"), "{}", e.message());
    let e = call(
        &mut c,
        "testkit_echo",
        serde_json::json!({"text": "x", "bogus": 1}),
    )
    .await
    .expect_err("unknown field");
    assert!(e.message().contains("bogus"), "{}", e.message());
    let e = call(
        &mut c,
        "testkit_echo",
        serde_json::json!({"text": "x", "times": -1}),
    )
    .await
    .expect_err("negative");
    assert!(
        e.message().starts_with("invalid arguments: times"),
        "{}",
        e.message()
    );
}

async fn open_session(c: &mut ToolServiceClient<Channel>) -> String {
    c.open_session(pb::OpenSessionRequest {})
        .await
        .expect("open session")
        .into_inner()
        .session_id
}

async fn call_in(
    c: &mut ToolServiceClient<Channel>,
    session: &str,
    tool: &str,
    args: serde_json::Value,
) -> Result<pb::CallToolResponse, tonic::Status> {
    c.call_tool(pb::CallToolRequest {
        session_id: session.into(),
        tool: tool.into(),
        arguments_json: args.to_string(),
    })
    .await
    .map(|r| r.into_inner())
}

const HOSTILE: &str = "require_pinned = false\n[plugins.grants.testkit]\ntimeout_ms = 500\nmemory_mib = 32\nscratch = true\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_plugins_are_stopped_and_the_server_keeps_serving() {
    let s = start(HOSTILE, |d| {
        install_into(d, "sibyl_plugin_testkit", "testkit")
    })
    .await;
    let mut c = s.client().await;

    // A loop that never ends, while other calls keep being served.
    let mut c2 = c.clone();
    let spin = tokio::spawn(async move {
        let t = Instant::now();
        let r = call(&mut c2, "testkit_spin", serde_json::json!({})).await;
        (r, t.elapsed())
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    let during = call(&mut c, "testkit_echo", serde_json::json!({"text": "alive"}))
        .await
        .expect("echo during spin");
    assert_eq!(during.text, "alive");
    let (r, took) = spin.await.expect("join");
    let e = r.expect_err("spin must be stopped");
    assert_eq!(e.code(), tonic::Code::ResourceExhausted, "{e:?}");
    assert!(
        e.message().contains("time limit of 500 ms"),
        "{}",
        e.message()
    );
    assert!(took < Duration::from_secs(3), "stopped after {took:?}");

    // Unbounded allocation.
    let e = call(&mut c, "testkit_hog", serde_json::json!({}))
        .await
        .expect_err("hog must be stopped");
    assert_eq!(e.code(), tonic::Code::ResourceExhausted, "{e:?}");
    assert!(
        e.message().contains("memory limit of 32 MiB"),
        "{}",
        e.message()
    );

    // A trap (Rust panic -> unreachable): the tool failed, the agent sees why.
    let r = call(&mut c, "testkit_trap", serde_json::json!({}))
        .await
        .expect("a trap is a failed run, not an RPC error");
    assert!(r.is_error);
    assert!(r.text.contains("crashed"), "{}", r.text);
    assert!(
        r.text.contains("on purpose"),
        "panic message kept: {}",
        r.text
    );

    // A path it was not granted: only /scratch exists for it.
    let r = call(
        &mut c,
        "testkit_read",
        serde_json::json!({"target": "/etc/passwd"}),
    )
    .await
    .expect("read runs");
    assert!(
        r.is_error && r.text.starts_with("denied: cannot read /etc/passwd"),
        "{}",
        r.text
    );
    let r = call(
        &mut c,
        "testkit_read",
        serde_json::json!({"target": "/scratch/../../etc/passwd"}),
    )
    .await
    .expect("read runs");
    assert!(r.is_error, "{}", r.text);

    // A host it was not granted: refused before any connection is made.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    listener.set_nonblocking(true).expect("nonblocking");
    let url = format!("http://{}/secret", listener.local_addr().expect("addr"));
    let r = call(&mut c, "testkit_fetch", serde_json::json!({"target": url}))
        .await
        .expect("fetch runs");
    assert!(r.is_error, "{}", r.text);
    assert!(
        r.text.contains("not granted to plugin `testkit`"),
        "{}",
        r.text
    );
    assert!(
        listener.accept().is_err(),
        "no connection may reach the host"
    );

    // Files written in a session's /scratch persist within that session only.
    let sid = open_session(&mut c).await;
    let w = call_in(
        &mut c,
        &sid,
        "testkit_write",
        serde_json::json!({"target": "/scratch/note.txt"}),
    )
    .await
    .expect("write");
    assert!(!w.is_error, "{}", w.text);
    let r = call_in(
        &mut c,
        &sid,
        "testkit_read",
        serde_json::json!({"target": "/scratch/note.txt"}),
    )
    .await
    .expect("read");
    assert_eq!(r.text, "hello");
    let r = call(
        &mut c,
        "testkit_read",
        serde_json::json!({"target": "/scratch/note.txt"}),
    )
    .await
    .expect("read in another session");
    assert!(r.is_error, "another session must not see it: {}", r.text);

    // Still serving after all of that.
    let r = call(&mut c, "testkit_echo", serde_json::json!({"text": "ok"}))
        .await
        .expect("echo after");
    assert_eq!(r.text, "ok");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fuel_and_concurrency_limits() {
    let s = start(
        "require_pinned = false\n[plugins.grants.testkit]\nfuel = 5000000\ntimeout_ms = 20000\nmax_instances = 1\n",
        |d| install_into(d, "sibyl_plugin_testkit", "testkit"),
    )
    .await;
    let mut c = s.client().await;
    let t = Instant::now();
    let mut c2 = c.clone();
    let spin =
        tokio::spawn(async move { call(&mut c2, "testkit_spin", serde_json::json!({})).await });
    tokio::time::sleep(Duration::from_millis(20)).await;
    // While the only instance may be busy, a second call is refused or runs after it; at
    // least the spin must end by fuel long before its 20 s time limit.
    let _ = call(&mut c, "testkit_echo", serde_json::json!({"text": "x"})).await;
    let e = spin.await.expect("join").expect_err("out of fuel");
    assert_eq!(e.code(), tonic::Code::ResourceExhausted, "{e:?}");
    assert!(e.message().contains("fuel of 5000000"), "{}", e.message());
    assert!(t.elapsed() < Duration::from_secs(10), "{:?}", t.elapsed());

    // max_instances = 1: many concurrent calls, some refused with a clear message.
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let mut c = c.clone();
        tasks.push(tokio::spawn(async move {
            call(
                &mut c,
                "testkit_echo",
                serde_json::json!({"text": "y", "times": 1000}),
            )
            .await
        }));
    }
    let mut ok = 0;
    for t in tasks {
        match t.await.expect("join") {
            Ok(r) => {
                assert_eq!(r.text.len(), 1000);
                ok += 1;
            }
            Err(e) => {
                assert_eq!(e.code(), tonic::Code::ResourceExhausted, "{e:?}");
                assert!(e.message().contains("max_instances"), "{}", e.message());
            }
        }
    }
    assert!(ok >= 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn corrupt_and_mispinned_plugins_are_reported_and_skipped() {
    let testkit_hash = sha256_of(&built("sibyl_plugin_testkit"));
    let policy = format!(
        "[plugins.grants.testkit]\nsha256 = \"{testkit_hash}\"\n[plugins.grants.calc]\nsha256 = \"{}\"\n[plugins.grants.garbage]\nsha256 = \"{}\"\n",
        "0".repeat(64),
        sibyl_server::plugin::sha256_hex(b"not wasm at all")
    );
    let s = start(&policy, |d| {
        install_into(d, "sibyl_plugin_testkit", "testkit");
        install_into(d, "sibyl_plugin_calc", "calc");
        std::fs::write(d.join("garbage.wasm"), b"not wasm at all").expect("write");
        let real = std::fs::read(built("sibyl_plugin_calc")).expect("read");
        std::fs::write(d.join("truncated.wasm"), &real[..real.len() / 2]).expect("write");
        std::fs::write(d.join("Bad Name.wasm"), b"x").expect("write");
    })
    .await;
    let mut c = s.client().await;
    let l = list(&mut c).await;
    let diag = |src: &str| {
        l.diagnostics
            .iter()
            .find(|d| d.source == src)
            .map(|d| d.message.clone())
            .unwrap_or_else(|| panic!("no diagnostic for {src}: {:?}", l.diagnostics))
    };
    assert!(
        diag("calc.wasm").contains("hash mismatch"),
        "{}",
        diag("calc.wasm")
    );
    assert!(diag("garbage.wasm").contains("not a valid WebAssembly component"));
    assert!(
        diag("truncated.wasm").contains("not pinned"),
        "{}",
        diag("truncated.wasm")
    );
    assert!(diag("Bad Name.wasm").contains("file names"));
    assert!(!l.tools.iter().any(|t| t.name == "calc"));
    let r = call(
        &mut c,
        "testkit_echo",
        serde_json::json!({"text": "pinned ok"}),
    )
    .await
    .expect("pinned plugin runs");
    assert_eq!(r.text, "pinned ok");
    let e = call(&mut c, "calc", serde_json::json!({"expression": "1+1"}))
        .await
        .expect_err("mispinned plugin absent");
    assert_eq!(e.code(), tonic::Code::NotFound);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unpinned_truncated_wasm_is_reported() {
    let s = start(UNPINNED, |d| {
        let real = std::fs::read(built("sibyl_plugin_calc")).expect("read");
        std::fs::write(d.join("truncated.wasm"), &real[..real.len() / 2]).expect("write");
    })
    .await;
    let mut c = s.client().await;
    let l = list(&mut c).await;
    assert_eq!(l.diagnostics.len(), 1, "{:?}", l.diagnostics);
    assert!(
        l.diagnostics[0]
            .message
            .contains("not a valid WebAssembly component")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hot_reload_add_replace_remove_while_calls_run() {
    let s = start(UNPINNED, |_| {}).await;
    let mut c = s.client().await;
    assert!(
        !list(&mut c)
            .await
            .tools
            .iter()
            .any(|t| t.origin == pb::ToolOrigin::Plugin as i32)
    );

    // Add.
    s.install("sibyl_plugin_testkit", "testkit");
    wait_list(&mut c, "testkit to appear", |l| {
        l.tools.iter().any(|t| t.name == "testkit_echo")
    })
    .await;

    // Calls keep running while the plugin is replaced and removed.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut workers = Vec::new();
    for _ in 0..3 {
        let mut c = c.clone();
        let stop = stop.clone();
        workers.push(tokio::spawn(async move {
            let (mut ok, mut gone) = (0u32, 0u32);
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                match call(&mut c, "testkit_echo", serde_json::json!({"text": "z"})).await {
                    Ok(r) => {
                        assert_eq!(r.text, "z");
                        ok += 1;
                    }
                    Err(e) => {
                        assert_eq!(
                            e.code(),
                            tonic::Code::NotFound,
                            "only NOT_FOUND after removal: {e:?}"
                        );
                        gone += 1;
                    }
                }
            }
            (ok, gone)
        }));
    }
    tokio::time::sleep(Duration::from_millis(300)).await;

    // Replace testkit.wasm with different code (the calc plugin under the same file name).
    s.install("sibyl_plugin_calc", "testkit");
    let l = wait_list(&mut c, "replacement", |l| {
        l.tools.iter().any(|t| t.name == "calc")
            && !l.tools.iter().any(|t| t.name == "testkit_echo")
    })
    .await;
    assert!(l.diagnostics.is_empty(), "{:?}", l.diagnostics);
    let r = call(&mut c, "calc", serde_json::json!({"expression": "6 * 7"}))
        .await
        .expect("calc");
    assert_eq!(r.text, "42");

    // Back, then remove.
    s.install("sibyl_plugin_testkit", "testkit");
    wait_list(&mut c, "testkit back", |l| {
        l.tools.iter().any(|t| t.name == "testkit_echo")
    })
    .await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    std::fs::remove_file(s.dir.path().join("testkit.wasm")).expect("remove");
    wait_list(&mut c, "removal", |l| {
        !l.tools
            .iter()
            .any(|t| t.origin == pb::ToolOrigin::Plugin as i32)
    })
    .await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let mut total_ok = 0;
    for w in workers {
        let (ok, _gone) = w.await.expect("worker");
        total_ok += ok;
    }
    assert!(total_ok > 0);
    // A corrupt file dropped in later is reported without touching the builtins.
    std::fs::write(s.dir.path().join("broken.wasm"), b"\0asm\x01\0\0\0garbage").expect("write");
    let l = wait_list(&mut c, "broken diagnostic", |l| !l.diagnostics.is_empty()).await;
    assert_eq!(l.diagnostics[0].source, "broken.wasm");
    assert!(l.tools.iter().any(|t| t.name == "visit_page"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calc_plugin() {
    let s = start(UNPINNED, |d| install_into(d, "sibyl_plugin_calc", "calc")).await;
    let mut c = s.client().await;
    let r = call(
        &mut c,
        "calc",
        serde_json::json!({"expression": "(1 + 0.05)^2 * 100"}),
    )
    .await
    .expect("calc");
    assert!(r.text.starts_with("110.25"), "{}", r.text);
    let r = call(
        &mut c,
        "convert_units",
        serde_json::json!({"value": 26.2, "from": "mi", "to": "km"}),
    )
    .await
    .expect("convert");
    let v: serde_json::Value =
        serde_json::from_str(r.structured_json.as_deref().expect("structured")).expect("json");
    assert!(
        (v["value"].as_f64().expect("f64") - 42.164_812_8).abs() < 1e-6,
        "{v}"
    );
    let e = call(
        &mut c,
        "convert_units",
        serde_json::json!({"value": 1, "from": "kg", "to": "parsec"}),
    )
    .await
    .expect_err("unknown unit");
    assert_eq!(e.code(), tonic::Code::InvalidArgument);
    assert!(e.message().contains("parsec"));
    let r = call(
        &mut c,
        "date_calc",
        serde_json::json!({"date": "2026-11-21", "until": "2027-01-01"}),
    )
    .await
    .expect("date");
    assert!(
        r.text.contains("2026-11-21 (Saturday)") && r.text.contains(": 41"),
        "{}",
        r.text
    );
    let r = call(&mut c, "calc", serde_json::json!({"expression": "1 +"}))
        .await
        .expect("runs");
    assert!(r.is_error, "{}", r.text);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_api_plugin_uses_only_its_granted_host() {
    let app = axum::Router::new()
        .route(
            "/v1/users/3",
            axum::routing::get(|| async {
                (
                    [(axum::http::header::CONTENT_TYPE, "application/json")],
                    r#"{"id": 3, "name": "Ada", "langs": ["en", "fr"]}"#,
                )
            }),
        )
        .route(
            "/v1/not-json",
            axum::routing::get(|| async { "plain text" }),
        );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let api = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    let policy = format!(
        "require_pinned = false\n[plugins.grants.json_api]\nallow_hosts = [\"127.0.0.1\"]\nconfig = {{ base_url = \"http://{api}/v1\" }}\n"
    );
    let s = start(&policy, |d| {
        install_into(d, "sibyl_plugin_json_api", "json_api");
        install_into(d, "sibyl_plugin_testkit", "testkit");
    })
    .await;
    let mut c = s.client().await;
    let r = call(&mut c, "api_get", serde_json::json!({"path": "users/3"}))
        .await
        .expect("api");
    assert!(!r.is_error, "{}", r.text);
    assert!(r.text.contains("\"name\": \"Ada\""), "{}", r.text);
    let r = call(
        &mut c,
        "api_get",
        serde_json::json!({"path": "users/3", "pointer": "/langs/1"}),
    )
    .await
    .expect("pointer");
    assert_eq!(r.text, "\"fr\"");
    let r = call(&mut c, "api_get", serde_json::json!({"path": "not-json"}))
        .await
        .expect("runs");
    assert!(r.is_error && r.text.contains("not JSON"), "{}", r.text);
    let r = call(&mut c, "api_get", serde_json::json!({"path": "missing"}))
        .await
        .expect("runs");
    assert!(r.is_error && r.text.contains("HTTP 404"), "{}", r.text);
    let e = call(&mut c, "api_get", serde_json::json!({"path": "../admin"}))
        .await
        .expect_err("dotdot");
    assert_eq!(e.code(), tonic::Code::InvalidArgument);
    // The same loopback server is not granted to the other plugin.
    let r = call(
        &mut c,
        "testkit_fetch",
        serde_json::json!({"target": format!("http://{api}/v1/users/3")}),
    )
    .await
    .expect("runs");
    assert!(r.is_error && r.text.contains("not granted"), "{}", r.text);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn table_query_plugin_reads_the_session_scratch_dir() {
    let scratch_root = tempfile::tempdir().expect("scratch root");
    let policy = format!(
        "require_pinned = false\n[plugins.grants.table_query]\nscratch = true\n[plugins.grants.testkit]\nscratch = true\n[sessions]\nscratch_root = \"{}\"\n",
        scratch_root.path().display()
    );
    let s = start(&policy, |d| {
        install_into(d, "sibyl_plugin_table_query", "table_query");
        install_into(d, "sibyl_plugin_testkit", "testkit");
    })
    .await;
    let mut c = s.client().await;
    let sid = open_session(&mut c).await;
    // Create the session's scratch dir with a first write, then put a table next to it.
    call_in(
        &mut c,
        &sid,
        "testkit_write",
        serde_json::json!({"target": "/scratch/x"}),
    )
    .await
    .expect("write");
    let dir = std::fs::read_dir(scratch_root.path())
        .expect("ls")
        .next()
        .expect("session dir")
        .expect("entry")
        .path();
    std::fs::write(
        dir.join("cities.csv"),
        "city,country,population\nParis,FR,2102650\nLyon,FR,522250\nBerlin,DE,3878100\nMunich,DE,1510378\n",
    )
    .expect("csv");
    std::fs::write(
        dir.join("t.json"),
        r#"[{"a": 1, "b": "x"}, {"a": 5, "b": "y"}]"#,
    )
    .expect("json");
    let r = call_in(
        &mut c,
        &sid,
        "table_query",
        serde_json::json!({"file": "cities.csv", "where": [{"column": "country", "op": "eq", "value": "DE"}], "sort_by": "population", "descending": true, "columns": ["city"]}),
    )
    .await
    .expect("query");
    assert!(
        r.text
            .starts_with("| city |\n| --- |\n| Berlin |\n| Munich |\n"),
        "{}",
        r.text
    );
    let r = call_in(
        &mut c,
        &sid,
        "table_query",
        serde_json::json!({"file": "cities.csv", "aggregate": "sum", "aggregate_column": "population", "where": [{"column": "population", "op": "gt", "value": "600000"}]}),
    )
    .await
    .expect("sum");
    assert!(r.text.starts_with("7491128"), "{}", r.text);
    let r = call_in(
        &mut c,
        &sid,
        "table_query",
        serde_json::json!({"file": "t.json", "aggregate": "mean", "aggregate_column": "a"}),
    )
    .await
    .expect("json mean");
    assert!(r.text.starts_with('3'), "{}", r.text);
    let e = call_in(
        &mut c,
        &sid,
        "table_query",
        serde_json::json!({"file": "cities.csv", "sort_by": "nope"}),
    )
    .await
    .expect_err("bad column");
    assert!(e.message().contains("no column `nope`"), "{}", e.message());
    let e = call_in(
        &mut c,
        &sid,
        "table_query",
        serde_json::json!({"file": "../etc/passwd"}),
    )
    .await
    .expect_err("path");
    assert_eq!(e.code(), tonic::Code::InvalidArgument);
    // Another session has its own (empty) scratch dir.
    let r = call(
        &mut c,
        "table_query",
        serde_json::json!({"file": "cities.csv"}),
    )
    .await
    .expect("runs");
    assert!(r.is_error, "{}", r.text);
}

/// Benchmark (run in release: `cargo test --release -p sibyl-tests --test plugins bench --
/// --ignored --nocapture`): call overhead of a trivial plugin over gRPC on loopback,
/// calls/s with concurrent clients, and load (compile + describe) time, against a builtin
/// tool that does no work (`page_down` without a page) as the baseline.
#[tokio::test(flavor = "multi_thread")]
#[ignore = "benchmark; run explicitly in release"]
async fn bench_plugin_call_overhead() {
    let wasm = built("sibyl_plugin_testkit");
    let policy = "require_pinned = false\n[plugins.grants.testkit]\nmax_instances = 1000\n";
    let t = Instant::now();
    let s = start(policy, |d| {
        install_into(d, "sibyl_plugin_testkit", "testkit")
    })
    .await;
    let load = t.elapsed();
    let t = Instant::now();
    let _empty = start("require_pinned = false\n", |_| {}).await;
    let load_empty = t.elapsed();
    println!(
        "load: server with testkit ({} bytes) {:.1} ms, without plugins {:.1} ms",
        std::fs::metadata(&wasm).map(|m| m.len()).unwrap_or(0),
        load.as_secs_f64() * 1e3,
        load_empty.as_secs_f64() * 1e3
    );
    let mut c = s.client().await;
    let cases = [
        (
            "plugin testkit_echo",
            "testkit_echo",
            serde_json::json!({"text": "x"}),
        ),
        (
            "builtin page_down (baseline)",
            "page_down",
            serde_json::json!({}),
        ),
    ];
    for (label, tool, args) in &cases {
        for _ in 0..200 {
            let _ = call(&mut c, tool, args.clone()).await;
        }
        let mut lat = Vec::new();
        for _ in 0..3000 {
            let t = Instant::now();
            let r = call(&mut c, tool, args.clone()).await;
            lat.push(t.elapsed());
            if *tool == "testkit_echo" {
                assert_eq!(r.expect("echo").text, "x");
            }
        }
        lat.sort();
        let p = |q: f64| lat[((lat.len() as f64 - 1.0) * q) as usize].as_secs_f64() * 1e3;
        println!(
            "{label}: sequential p50 {:.3} ms, p90 {:.3} ms, p99 {:.3} ms",
            p(0.5),
            p(0.9),
            p(0.99)
        );
        for clients in [4usize, 16, 64] {
            let stop = Instant::now() + Duration::from_secs(3);
            let mut tasks = Vec::new();
            for _ in 0..clients {
                let mut c = s.client().await;
                let tool = tool.to_string();
                let args = args.clone();
                tasks.push(tokio::spawn(async move {
                    let mut n = 0u64;
                    while Instant::now() < stop {
                        if call(&mut c, &tool, args.clone()).await.is_ok() || tool == "page_down" {
                            n += 1;
                        }
                    }
                    n
                }));
            }
            let mut total = 0;
            for t in tasks {
                total += t.await.expect("join");
            }
            println!(
                "{label}: {clients} clients: {:.0} calls/s",
                total as f64 / 3.0
            );
        }
    }
}

async fn count(c: &mut ToolServiceClient<Channel>, session: &str) -> String {
    call_in(c, session, "testkit_count", serde_json::json!({}))
        .await
        .expect("count")
        .text
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stateful_plugins_keep_one_instance_per_session() {
    let s = start(
        "require_pinned = false\n[plugins.grants.testkit]\nstateful = true\ntimeout_ms = 300\nmemory_mib = 32\n",
        |d| {
            install_into(d, "sibyl_plugin_testkit", "testkit");
            write_manifest(
                d,
                "testkit",
                &manifest_for("sibyl_plugin_testkit", "stateful = true\n"),
            );
        },
    )
    .await;
    let mut c = s.client().await;
    wait_list(&mut c, "testkit_count", |l| {
        l.tools.iter().any(|t| t.name == "testkit_count")
    })
    .await;
    let a = open_session(&mut c).await;
    let b = open_session(&mut c).await;
    assert_eq!(count(&mut c, &a).await, "1");
    assert_eq!(count(&mut c, &a).await, "2");
    // The time limit is per call: a kept instance idle past it still runs.
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert_eq!(count(&mut c, &a).await, "3");
    assert_eq!(count(&mut c, &b).await, "1");
    assert_eq!(count(&mut c, &a).await, "4");
    // Without a session every call is its own (ephemeral) session.
    assert_eq!(count(&mut c, "").await, "1");
    assert_eq!(count(&mut c, "").await, "1");

    // A trap discards the session's instance: the next call starts from scratch.
    let r = call_in(&mut c, &a, "testkit_trap", serde_json::json!({}))
        .await
        .expect("trap is a failed result");
    assert!(r.is_error, "{r:?}");
    assert_eq!(count(&mut c, &a).await, "1");
    // So does hitting a limit, which still applies per call on a kept instance.
    assert_eq!(count(&mut c, &b).await, "2");
    let e = call_in(&mut c, &b, "testkit_spin", serde_json::json!({}))
        .await
        .expect_err("spin must be stopped");
    assert_eq!(e.code(), tonic::Code::ResourceExhausted, "{e:?}");
    assert!(
        e.message().contains("time limit of 300 ms"),
        "{}",
        e.message()
    );
    assert_eq!(count(&mut c, &b).await, "1");
    assert_eq!(count(&mut c, &a).await, "2");

    // Closing a session drops its instance; a new session starts at 1.
    c.close_session(pb::CloseSessionRequest {
        session_id: a.clone(),
    })
    .await
    .expect("close");
    let a2 = open_session(&mut c).await;
    assert_eq!(count(&mut c, &a2).await, "1");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stateless_plugins_never_keep_state() {
    let s = start(
        "require_pinned = false\n[plugins.grants.testkit]\ntimeout_ms = 2000\n",
        |d| install_into(d, "sibyl_plugin_testkit", "testkit"),
    )
    .await;
    let mut c = s.client().await;
    wait_list(&mut c, "testkit_count", |l| {
        l.tools.iter().any(|t| t.name == "testkit_count")
    })
    .await;
    let a = open_session(&mut c).await;
    for _ in 0..3 {
        assert_eq!(count(&mut c, &a).await, "1");
    }
}

/// The diagnostic messages about `source`.
fn diags_of(l: &pb::ListToolsResponse, source: &str) -> Vec<String> {
    l.diagnostics
        .iter()
        .filter(|d| d.source == source)
        .map(|d| d.message.clone())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn manifest_hash_mismatch_is_skipped_while_others_serve() {
    let calc_hash = sha256_of(&built("sibyl_plugin_calc"));
    let testkit_hash = sha256_of(&built("sibyl_plugin_testkit"));
    let s = start(UNPINNED, |d| {
        install_into(d, "sibyl_plugin_testkit", "testkit");
        write_manifest(d, "testkit", &manifest_for("sibyl_plugin_testkit", ""));
        install_into(d, "sibyl_plugin_calc", "calc");
        // calc.toml pins another build (testkit's hash).
        write_manifest(d, "calc", &manifest_for("sibyl_plugin_testkit", ""));
    })
    .await;
    let mut c = s.client().await;
    let l = list(&mut c).await;
    let calc = diags_of(&l, "calc.wasm");
    assert_eq!(calc.len(), 1, "{:?}", l.diagnostics);
    assert!(
        calc[0].starts_with(&format!(
            "hash mismatch: calc.toml pins sha256 {testkit_hash} but the file's sha256 is {calc_hash}"
        )),
        "expected and actual hash named: {}",
        calc[0]
    );
    assert!(
        diags_of(&l, "testkit.wasm").is_empty(),
        "{:?}",
        l.diagnostics
    );
    assert!(!l.tools.iter().any(|t| t.name == "calc"));
    let e = call(&mut c, "calc", serde_json::json!({"expression": "1+1"}))
        .await
        .expect_err("mismatched plugin absent");
    assert_eq!(e.code(), tonic::Code::NotFound);
    let r = call(&mut c, "testkit_echo", serde_json::json!({"text": "still"}))
        .await
        .expect("the other plugin serves");
    assert_eq!(r.text, "still");

    // Hot reload picks up a corrected manifest.
    write_manifest(s.dir.path(), "calc", &manifest_for("sibyl_plugin_calc", ""));
    let l = wait_list(&mut c, "calc after the manifest is fixed", |l| {
        l.tools.iter().any(|t| t.name == "calc")
    })
    .await;
    assert!(l.diagnostics.is_empty(), "{:?}", l.diagnostics);
    let r = call(&mut c, "calc", serde_json::json!({"expression": "6 * 7"}))
        .await
        .expect("calc");
    assert_eq!(r.text, "42");

    // A copy still in progress (written in place, not renamed) is refused by the manifest's
    // hash, not compiled, and loads once the file is complete.
    let real = std::fs::read(built("sibyl_plugin_calc")).expect("read");
    std::fs::write(s.dir.path().join("calc.wasm"), &real[..real.len() / 3]).expect("write");
    let l = wait_list(&mut c, "half-copied calc refused", |l| {
        !diags_of(l, "calc.wasm").is_empty()
    })
    .await;
    let calc = diags_of(&l, "calc.wasm");
    assert!(
        calc[0].starts_with(&format!("hash mismatch: calc.toml pins sha256 {calc_hash}")),
        "{}",
        calc[0]
    );
    assert!(!l.tools.iter().any(|t| t.name == "calc"));
    std::fs::write(s.dir.path().join("calc.wasm"), &real).expect("write");
    wait_list(&mut c, "complete calc", |l| {
        l.tools.iter().any(|t| t.name == "calc") && l.diagnostics.is_empty()
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn manifest_declaring_stateful_gives_per_session_state() {
    let s = start(
        "require_pinned = false\n[plugins.grants.testkit]\nstateful = true\n",
        |d| {
            install_into(d, "sibyl_plugin_testkit", "testkit");
            write_manifest(
                d,
                "testkit",
                &manifest_for("sibyl_plugin_testkit", "stateful = true\n"),
            );
        },
    )
    .await;
    let mut c = s.client().await;
    let l = list(&mut c).await;
    assert!(l.diagnostics.is_empty(), "{:?}", l.diagnostics);
    let (a, b) = (open_session(&mut c).await, open_session(&mut c).await);
    assert_eq!(count(&mut c, &a).await, "1");
    assert_eq!(count(&mut c, &a).await, "2");
    assert_eq!(count(&mut c, &b).await, "1");
    assert_eq!(count(&mut c, &a).await, "3");

    // The manifest stops declaring it: after the reload every call is fresh, and the
    // policy's now unused consent is reported.
    write_manifest(
        s.dir.path(),
        "testkit",
        &manifest_for("sibyl_plugin_testkit", "stateful = false\n"),
    );
    let l = wait_list(&mut c, "stateless reload", |l| {
        !diags_of(l, "testkit.wasm").is_empty()
    })
    .await;
    assert!(
        diags_of(&l, "testkit.wasm")[0].contains(
            "does not declare stateful = true in testkit.toml; every call gets a fresh instance"
        ),
        "{:?}",
        l.diagnostics
    );
    for _ in 0..2 {
        assert_eq!(count(&mut c, &a).await, "1");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stateful_declaration_needs_the_policy() {
    // Declared, but the policy does not allow it: not loaded (running it without its state
    // would give wrong answers silently), with a diagnostic naming the key.
    let s = start(UNPINNED, |d| {
        install_into(d, "sibyl_plugin_testkit", "testkit");
        write_manifest(
            d,
            "testkit",
            &manifest_for("sibyl_plugin_testkit", "stateful = true\n"),
        );
        install_into(d, "sibyl_plugin_calc", "calc");
    })
    .await;
    let mut c = s.client().await;
    let l = list(&mut c).await;
    let t = diags_of(&l, "testkit.wasm");
    assert_eq!(t.len(), 1, "{:?}", l.diagnostics);
    assert!(
        t[0].contains("declares stateful = true but the policy does not allow it (plugins.grants.testkit.stateful = true"),
        "{}",
        t[0]
    );
    assert!(!l.tools.iter().any(|t| t.name.starts_with("testkit_")));
    let r = call(&mut c, "calc", serde_json::json!({"expression": "2^10"}))
        .await
        .expect("calc serves");
    assert_eq!(r.text, "1024");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_manifests_are_diagnostics_and_requests_are_compared_with_grants() {
    let s = start(
        "require_pinned = false\n[plugins.grants.json_api]\nallow_hosts = [\"api.example.org\"]\n",
        |d| {
            install_into(d, "sibyl_plugin_testkit", "testkit");
            write_manifest(d, "testkit", &manifest_for("sibyl_plugin_testkit", ""));
            install_into(d, "sibyl_plugin_calc", "calc");
            write_manifest(
                d,
                "calc",
                &manifest_for("sibyl_plugin_calc", "statefull = true\n"),
            );
            install_into(d, "sibyl_plugin_table_query", "table_query");
            write_manifest(d, "table_query", "sha256 = \"not-a-hash\"\n");
            install_into(d, "sibyl_plugin_json_api", "json_api");
            write_manifest(
                d,
                "json_api",
                &manifest_for(
                    "sibyl_plugin_json_api",
                    "[requests]\nallow_hosts = [\"api.example.org\", \"data.example.org\"]\nconfig = [\"base_url\"]\n",
                ),
            );
        },
    )
    .await;
    let mut c = s.client().await;
    let l = list(&mut c).await;
    let calc = diags_of(&l, "calc.wasm");
    assert_eq!(calc.len(), 1, "{:?}", l.diagnostics);
    assert!(
        calc[0].starts_with("invalid manifest calc.toml:")
            && calc[0].contains("unknown field `statefull`"),
        "{}",
        calc[0]
    );
    let tq = diags_of(&l, "table_query.wasm");
    assert_eq!(tq.len(), 1, "{:?}", l.diagnostics);
    assert!(
        tq[0].contains("invalid manifest table_query.toml: `sha256` must be 64 hexadecimal digits"),
        "{}",
        tq[0]
    );
    assert!(
        !l.tools
            .iter()
            .any(|t| t.name == "calc" || t.name == "table_query")
    );
    // json_api loads, with what the policy does not grant named.
    assert!(l.tools.iter().any(|t| t.name == "api_get"));
    let api = diags_of(&l, "json_api.wasm");
    assert_eq!(api.len(), 2, "{:?}", l.diagnostics);
    assert!(
        api[0].contains("requests allow_hosts `data.example.org` not granted by plugins.grants.json_api.allow_hosts"),
        "{}",
        api[0]
    );
    assert!(
        api[1].contains("requests config `base_url` not set in plugins.grants.json_api.config"),
        "{}",
        api[1]
    );
    let r = call(&mut c, "testkit_echo", serde_json::json!({"text": "up"}))
        .await
        .expect("the server keeps serving");
    assert_eq!(r.text, "up");
    // A manifest that is not even TOML, dropped in later, is one more diagnostic.
    write_manifest(s.dir.path(), "testkit", "sha256 = [\n");
    let l = wait_list(&mut c, "broken testkit.toml", |l| {
        !diags_of(l, "testkit.wasm").is_empty()
    })
    .await;
    assert!(
        diags_of(&l, "testkit.wasm")[0]
            .starts_with("invalid manifest testkit.toml: TOML parse error"),
        "{:?}",
        l.diagnostics
    );
    assert!(l.tools.iter().any(|t| t.name == "visit_page"));
}

/// Benchmark (release, like `bench_plugin_call_overhead`): where one fresh-instance call of
/// `testkit_echo` spends its time (store + WASI context, instantiate, call, drop), with fuel
/// metering on and off and with the on-demand and the pooling instance allocator; in-process,
/// one thread, no gRPC.
#[test]
#[ignore = "benchmark; run explicitly in release"]
fn bench_plugin_call_breakdown() {
    let wasm = std::fs::read(built("sibyl_plugin_testkit")).expect("read wasm");
    let lines =
        sibyl_server::plugin::call_phase_breakdown(&wasm, "testkit_echo", r#"{"text":"x"}"#, 3000)
            .expect("breakdown");
    for l in lines {
        println!("{l}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_instance_pool_refuses_calls_clearly() {
    // One slot, held by session a's kept instance: session b is refused until a closes.
    let s = start(
        "require_pinned = false\npool_slots = 1\n[plugins.grants.testkit]\nstateful = true\n",
        |d| {
            install_into(d, "sibyl_plugin_testkit", "testkit");
            write_manifest(
                d,
                "testkit",
                &manifest_for("sibyl_plugin_testkit", "stateful = true\n"),
            );
        },
    )
    .await;
    let mut c = s.client().await;
    let l = list(&mut c).await;
    assert!(l.diagnostics.is_empty(), "{:?}", l.diagnostics);
    let (a, b) = (open_session(&mut c).await, open_session(&mut c).await);
    assert_eq!(count(&mut c, &a).await, "1");
    let e = call_in(&mut c, &b, "testkit_count", serde_json::json!({}))
        .await
        .expect_err("no free slot");
    assert_eq!(e.code(), tonic::Code::ResourceExhausted, "{e:?}");
    assert!(
        e.message().contains("every plugin instance slot is in use")
            && e.message().contains("plugins.pool_slots"),
        "{}",
        e.message()
    );
    assert_eq!(count(&mut c, &a).await, "2");
    c.close_session(pb::CloseSessionRequest { session_id: a })
        .await
        .expect("close");
    assert_eq!(count(&mut c, &b).await, "1");
}
