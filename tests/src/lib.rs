//! End-to-end test harness for sibyl: real binaries on real loopback ports.
//!
//! - [`Server`] starts the `sibyl-server` binary on `127.0.0.1:0` with a policy file and
//!   reads the address it prints; it is stopped with SIGTERM when dropped.
//! - [`PageServer`] is a local HTTP server (axum) serving the saved pages in
//!   `tests/fixtures/pages` and special routes for redirects, slow, huge and binary bodies.
//! - [`agent`] runs the `sibyl-agent` binary.
//!
//! The binaries are found next to the test executable's directory (`target/<profile>/`);
//! `cargo test --workspace` builds them because `sibyl-server` and `sibyl-agent` have
//! integration tests of their own.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use sibyl_proto::v1 as pb;
use sibyl_proto::v1::tool_service_client::ToolServiceClient;
use tonic::transport::Channel;

/// The test fixtures directory (`tests/fixtures`).
pub fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures")
}

/// Path of a workspace binary (`sibyl-server`, `sibyl-agent`) in the target directory.
///
/// # Panics
/// If the binary has not been built (run `cargo test --workspace`).
pub fn bin(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("current exe");
    // target/<profile>/deps/<test> -> target/<profile>/<name>
    let dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("target profile dir");
    let path = dir.join(name);
    assert!(
        path.exists(),
        "{} not built; run `cargo test --workspace` (it builds every binary)",
        path.display()
    );
    path
}

/// A policy for tests: the dev policy's loopback allowance restricted to 127.0.0.1, short
/// timeouts and a 4 MiB response cap. `extra` is appended to the `[browser]` table; more
/// tables may follow it.
pub fn test_policy(extra: &str) -> String {
    format!(
        "[browser]\nviewport_size = 8192\nrequest_timeout_ms = 2000\nconnect_timeout_ms = 1000\n\
         max_response_bytes = 4194304\nallow_hosts = [\"127.0.0.1\"]\n{extra}\n"
    )
}

/// A running `sibyl-server serve` process.
pub struct Server {
    child: Child,
    /// The address it listens on.
    pub addr: SocketAddr,
    _policy: tempfile::NamedTempFile,
}

impl Server {
    /// Starts the server with `policy_toml` (see [`test_policy`]).
    ///
    /// # Panics
    /// If it does not start within 30 s.
    pub fn start(policy_toml: &str) -> Self {
        let mut policy = tempfile::NamedTempFile::new().expect("policy file");
        std::io::Write::write_all(&mut policy, policy_toml.as_bytes()).expect("write policy");
        let mut child = Command::new(bin("sibyl-server"))
            .args(["serve", "--listen", "127.0.0.1:0", "--policy"])
            .arg(policy.path())
            .env("RUST_LOG", "warn")
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn sibyl-server");
        let stdout = child.stdout.take().expect("stdout");
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if let Some(addr) = line.strip_prefix("sibyl-server listening on ") {
                    let _ = tx.send(addr.trim().to_string());
                }
            }
        });
        let addr = rx
            .recv_timeout(Duration::from_secs(30))
            .expect("sibyl-server did not report its address")
            .parse()
            .expect("address");
        Self {
            child,
            addr,
            _policy: policy,
        }
    }

    /// `http://ADDR` for clients.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// A connected gRPC client.
    pub async fn client(&self) -> ToolServiceClient<Channel> {
        ToolServiceClient::connect(self.url())
            .await
            .expect("connect to sibyl-server")
            .max_decoding_message_size(64 << 20)
    }

    /// A raw channel (for health and reflection clients).
    pub async fn channel(&self) -> Channel {
        Channel::from_shared(self.url())
            .expect("uri")
            .connect()
            .await
            .expect("connect")
    }

    /// Sends SIGTERM and waits for the exit status.
    pub fn terminate(mut self) -> std::process::ExitStatus {
        self.sigterm();
        self.child.wait().expect("wait")
    }

    fn sigterm(&self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
    }

    /// True while the process runs.
    pub fn is_running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if self.is_running() {
            self.sigterm();
            for _ in 0..50 {
                if !self.is_running() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Opens a session and returns its id.
pub async fn open_session(c: &mut ToolServiceClient<Channel>) -> String {
    c.open_session(pb::OpenSessionRequest {})
        .await
        .expect("open session")
        .into_inner()
        .session_id
}

/// Calls a tool; gRPC errors are returned as `Err(Status)`.
pub async fn call(
    c: &mut ToolServiceClient<Channel>,
    session: &str,
    tool: &str,
    args: serde_json::Value,
) -> Result<pb::CallToolResponse, tonic::Status> {
    c.call_tool(pb::CallToolRequest {
        session_id: session.to_string(),
        tool: tool.to_string(),
        arguments_json: args.to_string(),
    })
    .await
    .map(tonic::Response::into_inner)
}

/// Calls a tool that must succeed (no gRPC error, no `is_error`) and returns its text.
///
/// # Panics
/// On a gRPC error or an `is_error` result.
pub async fn ok(
    c: &mut ToolServiceClient<Channel>,
    session: &str,
    tool: &str,
    args: serde_json::Value,
) -> String {
    let r = call(c, session, tool, args.clone())
        .await
        .unwrap_or_else(|e| panic!("{tool}({args}) failed: {e}"));
    assert!(!r.is_error, "{tool}({args}) returned is_error: {}", r.text);
    r.text
}

/// The parsed header of a browser reply.
#[derive(Debug, Clone, PartialEq)]
pub struct View {
    /// `Address:` value.
    pub address: String,
    /// `Title:` value.
    pub title: String,
    /// Viewport number, 1-based.
    pub page: usize,
    /// Number of viewports.
    pub pages: usize,
    /// Lines between the position line and the separator.
    pub notes: Vec<String>,
    /// The viewport text after the separator.
    pub body: String,
}

/// Parses a browser reply (`Address:`, `Title:`, `Viewport position:`, notes, separator).
///
/// # Panics
/// If the reply does not have AutoGen's header shape.
pub fn parse_view(reply: &str) -> View {
    let (head, body) = reply
        .split_once("\n=======================\n")
        .unwrap_or_else(|| panic!("no separator in reply: {}", &reply[..reply.len().min(300)]));
    let mut lines = head.lines();
    let address = lines
        .next()
        .and_then(|l| l.strip_prefix("Address: "))
        .expect("Address line")
        .to_string();
    let title = lines
        .next()
        .and_then(|l| l.strip_prefix("Title: "))
        .expect("Title line")
        .to_string();
    let pos = lines
        .next()
        .and_then(|l| l.strip_prefix("Viewport position: Showing page "))
        .and_then(|l| l.strip_suffix('.'))
        .expect("Viewport position line");
    let (page, pages) = pos.split_once(" of ").expect("N of M");
    View {
        address,
        title,
        page: page.parse().expect("N"),
        pages: pages.parse().expect("M"),
        notes: lines.map(str::to_string).collect(),
        body: body.to_string(),
    }
}

/// A local HTTP server for browser tests, on `127.0.0.1:0`.
///
/// Routes:
/// - `/pages/<dir>/` — `tests/fixtures/pages/<dir>/source.html` as `text/html`;
/// - `/text?size=N&marker=M` — plain text (see [`boundary_text`]);
/// - `/redirect?to=URL` — `302 Found` to `URL`;
/// - `/slow` — headers at once, then one body byte per 500 ms for 10 s;
/// - `/big?bytes=N` — an HTML body of `N` bytes (no `Content-Length`, chunked);
/// - `/binary` — `application/octet-stream`; `/image.png` — `image/png`;
/// - `/missing` — `404` with an HTML body;
/// - `/latin1` — ISO-8859-1 text declared only in `Content-Type`;
/// - `/needles` — plain text with `needle` at known places (see [`needle_text`]).
///
/// Every request is counted in [`PageServer::hits`].
pub struct PageServer {
    /// The address it listens on.
    pub addr: SocketAddr,
    hits: Arc<AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

/// Plain text whose viewport boundary (at 8192 characters) falls inside the phrase
/// `alpha beta gamma delta`: 1364 × `"lorem "` (8184 characters) then the phrase, then more.
pub fn boundary_text() -> String {
    format!(
        "{}alpha beta gamma delta {}",
        "lorem ".repeat(1364),
        "ipsum ".repeat(2000)
    )
}

/// Plain text of about five viewports with the word `needle` once in viewports 1, 2, 2, 4
/// and 5 (1-based), each followed by its ordinal (`needle one`, `needle two`, …).
pub fn needle_text() -> String {
    let filler = |n: usize| "hay ".repeat(n);
    // 8192-character viewports of "hay " ending on whitespace.
    format!(
        "{}needle one {}needle two {}needle three {}needle four {}needle five {}",
        filler(100),
        filler(2000),
        filler(100),
        filler(4000),
        filler(2000),
        filler(100)
    )
}

impl PageServer {
    /// Starts the server.
    pub async fn start() -> Self {
        use axum::extract::{Path as UrlPath, Query};
        use axum::http::{StatusCode, header};
        use axum::response::{IntoResponse, Redirect, Response};
        use axum::routing::get;
        use std::collections::HashMap;

        let hits = Arc::new(AtomicUsize::new(0));
        let counter = hits.clone();
        let pages = fixtures().join("pages");
        let app = axum::Router::new()
            .route(
                "/pages/{dir}/",
                get(move |UrlPath(dir): UrlPath<String>| {
                    let pages = pages.clone();
                    async move {
                        if dir.contains("..") || dir.contains('/') {
                            return StatusCode::BAD_REQUEST.into_response();
                        }
                        match tokio::fs::read(pages.join(&dir).join("source.html")).await {
                            Ok(body) => ([(header::CONTENT_TYPE, "text/html")], body).into_response(),
                            Err(_) => StatusCode::NOT_FOUND.into_response(),
                        }
                    }
                }),
            )
            .route(
                "/text",
                get(|| async { ([(header::CONTENT_TYPE, "text/plain; charset=utf-8")], boundary_text()) }),
            )
            .route(
                "/needles",
                get(|| async { ([(header::CONTENT_TYPE, "text/plain; charset=utf-8")], needle_text()) }),
            )
            .route(
                "/other",
                get(|| async {
                    (
                        [(header::CONTENT_TYPE, "text/html")],
                        "<html><head><title>Other page</title></head><body><p>needle in another page</p></body></html>",
                    )
                }),
            )
            .route(
                "/redirect",
                get(|Query(q): Query<HashMap<String, String>>| async move {
                    Redirect::to(q.get("to").map(String::as_str).unwrap_or("/")).into_response()
                }),
            )
            .route(
                "/slow",
                get(|| async {
                    let stream = futures::stream::unfold(0u32, |i| async move {
                        if i >= 20 {
                            return None;
                        }
                        tokio::time::sleep(Duration::from_millis(500)).await;
                        Some((Ok::<_, std::io::Error>(bytes_of("x")), i + 1))
                    });
                    (
                        [(header::CONTENT_TYPE, "text/html")],
                        axum::body::Body::from_stream(stream),
                    )
                }),
            )
            .route(
                "/big",
                get(|Query(q): Query<HashMap<String, String>>| async move {
                    let total: usize = q.get("bytes").and_then(|b| b.parse().ok()).unwrap_or(1 << 20);
                    let chunk = "<p>".to_string() + &"big ".repeat(16 * 1024) + "</p>";
                    let n = total / chunk.len() + 1;
                    let stream = futures::stream::iter(
                        (0..n).map(move |_| Ok::<_, std::io::Error>(bytes_of(&chunk))),
                    );
                    (
                        [(header::CONTENT_TYPE, "text/html")],
                        axum::body::Body::from_stream(stream),
                    )
                }),
            )
            .route(
                "/binary",
                get(|| async {
                    ([(header::CONTENT_TYPE, "application/octet-stream")], vec![0u8, 159, 146, 150, 0, 1, 2])
                }),
            )
            .route(
                "/image.png",
                get(|| async { ([(header::CONTENT_TYPE, "image/png")], b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR".to_vec()) }),
            )
            .route(
                "/missing",
                get(|| async {
                    (
                        StatusCode::NOT_FOUND,
                        [(header::CONTENT_TYPE, "text/html")],
                        "<html><head><title>Not here</title></head><body><p>No such page, sorry.</p></body></html>",
                    )
                }),
            )
            .route(
                "/latin1",
                get(|| async {
                    Response::builder()
                        .header(header::CONTENT_TYPE, "text/plain; charset=ISO-8859-1")
                        .body(axum::body::Body::from(b"Caf\xe9 cr\xe8me br\xfbl\xe9e".to_vec()))
                        .unwrap_or_default()
                }),
            )
            .layer(axum::middleware::from_fn(
                move |req: axum::extract::Request, next: axum::middleware::Next| {
                    let counter = counter.clone();
                    async move {
                        counter.fetch_add(1, Ordering::SeqCst);
                        next.run(req).await
                    }
                },
            ));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind page server");
        let addr = listener.local_addr().expect("addr");
        let listener = axum::serve::ListenerExt::tap_io(listener, |tcp| {
            let _ = tcp.set_nodelay(true);
        });
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Self { addr, hits, task }
    }

    /// `http://127.0.0.1:PORT{path}`.
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{}", self.addr, path)
    }

    /// Requests served so far.
    pub fn hits(&self) -> usize {
        self.hits.load(Ordering::SeqCst)
    }
}

impl Drop for PageServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn bytes_of(s: &str) -> axum::body::Bytes {
    axum::body::Bytes::from(s.to_string())
}

/// Runs `sibyl-agent ARGS…` and returns (exit code, stdout, stderr).
pub fn agent(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(bin("sibyl-agent"))
        .args(args)
        .env_remove("SIBYL_SERVER")
        .output()
        .expect("run sibyl-agent");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Visible-text normalisation used to check that a fact "appears": markdown link targets
/// `](…)` (with balanced parentheses) and the markup characters `*`, `` ` ``, `[`, `]`, `!`
/// are removed, U+00A0 becomes a space and whitespace runs collapse to one space.
pub fn visible_text(markdown: &str) -> String {
    let mut out = String::with_capacity(markdown.len());
    let mut chars = markdown.chars().peekable();
    while let Some(c) = chars.next() {
        if c == ']' && chars.peek() == Some(&'(') {
            let mut depth = 0i32;
            for d in chars.by_ref() {
                match d {
                    '(' => depth += 1,
                    ')' => {
                        depth -= 1;
                        if depth == 0 {
                            break;
                        }
                    }
                    _ => {}
                }
            }
            continue;
        }
        match c {
            '*' | '`' | '[' | ']' | '!' => {}
            '\u{a0}' => out.push(' '),
            c => out.push(c),
        }
    }
    collapse_ws(&out)
}

/// Collapses whitespace runs (and U+00A0) to single spaces and trims.
pub fn collapse_ws(s: &str) -> String {
    s.replace('\u{a0}', " ")
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
}
