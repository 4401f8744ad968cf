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
        assert!(Instant::now() < deadline, "timed out waiting for {what}: {l:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

const UNPINNED: &str = "require_pinned = false\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn load_list_call_and_validate_arguments() {
    let s = start(UNPINNED, |d| install_into(d, "sibyl_plugin_testkit", "testkit")).await;
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
    assert!(l.tools.iter().any(|t| t.name == "visit_page"), "builtins still listed");

    let r = call(&mut c, "testkit_echo", serde_json::json!({"text": "hi", "times": 3}))
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
    let e = call(&mut c, "testkit_echo", serde_json::json!({"text": "x", "bogus": 1}))
        .await
        .expect_err("unknown field");
    assert!(e.message().contains("bogus"), "{}", e.message());
    let e = call(&mut c, "testkit_echo", serde_json::json!({"text": "x", "times": -1}))
        .await
        .expect_err("negative");
    assert!(e.message().starts_with("invalid arguments: times"), "{}", e.message());
}
