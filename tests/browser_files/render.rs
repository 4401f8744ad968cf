//! JavaScript rendering with Chromium over gRPC: a local page whose text is inserted by a
//! script is seen under `mode = "auto"` (and not under `never`), the page's own requests
//! obey the address rules inside Chromium, and a killed browser is relaunched.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use axum::response::Html;
use serde_json::json;

use super::{Env, body_of, start_with};

const JS_PAGE: &str = r#"<!DOCTYPE html><html><head><title>Script page</title>
<script>
document.addEventListener('DOMContentLoaded', () => {
  setTimeout(() => {
    document.body.innerHTML = '<h1>Rendered heading 4417</h1><p>' +
      'This paragraph was inserted by JavaScript after a timeout. '.repeat(3) + '</p>';
  }, 50);
});
</script></head><body><noscript>Enable JavaScript</noscript></body></html>"#;

/// A page that tries to read a loopback service the policy does not allow.
fn ssrf_page(target: &str) -> String {
    format!(
        r#"<!DOCTYPE html><html><head><title>SSRF page</title><script>
fetch('{target}').then(r => r.text()).then(t => {{ document.body.innerHTML = '<p>fetched: ' + t + '</p>'; }})
  .catch(e => {{ document.body.innerHTML = '<p>blocked request 9931</p>'; }});
</script></head><body></body></html>"#
    )
}

async fn secret_server(hits: Arc<AtomicUsize>) -> SocketAddr {
    let app = axum::Router::new().route(
        "/secret",
        axum::routing::get(move || {
            let hits = hits.clone();
            async move {
                hits.fetch_add(1, Ordering::SeqCst);
                "internal secret 5150"
            }
        }),
    );
    // 127.0.0.2 is loopback too, but not in the test policy's allow_hosts.
    let listener = tokio::net::TcpListener::bind("127.0.0.2:0")
        .await
        .expect("bind 127.0.0.2");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    addr
}

/// A page that opens a WebSocket to `target` (CDP's request interception never sees
/// WebSockets; the egress proxy must refuse it).
fn websocket_page(target: &str) -> String {
    format!(
        r#"<!DOCTYPE html><html><head><title>WebSocket page</title><script>
const ws = new WebSocket('{target}');
ws.onopen = () => {{ document.body.innerHTML = '<p>websocket open</p>'; }};
ws.onerror = () => {{ document.body.innerHTML = '<p>websocket refused 6620</p>'; }};
</script></head><body></body></html>"#
    )
}

/// A raw TCP listener on 127.0.0.2 counting the connections it accepts.
async fn counting_listener(hits: Arc<AtomicUsize>) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.2:0")
        .await
        .expect("bind 127.0.0.2");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        while let Ok((conn, _)) = listener.accept().await {
            hits.fetch_add(1, Ordering::SeqCst);
            drop(conn);
        }
    });
    addr
}

async fn pages_server(secret: SocketAddr, ws: SocketAddr) -> SocketAddr {
    let ssrf = ssrf_page(&format!("http://{secret}/secret"));
    let wsp = websocket_page(&format!("ws://{ws}/socket"));
    let app = axum::Router::new()
        .route("/js", axum::routing::get(|| async { Html(JS_PAGE) }))
        .route(
            "/ws",
            axum::routing::get(move || {
                let p = wsp.clone();
                async move { Html(p) }
            }),
        )
        .route(
            "/ssrf",
            axum::routing::get(move || {
                let p = ssrf.clone();
                async move { Html(p) }
            }),
        );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    addr
}

async fn render_env(mode: &str) -> Env {
    let mode = mode.to_string();
    start_with(move |_| {
        format!(
            "[browser]\nallow_hosts = [\"127.0.0.1\"]\n[browser.render]\nmode = \"{mode}\"\npage_timeout_ms = 20000\n"
        )
    })
    .await
    .0
}

/// Chromium processes started by this test process (direct children), by pid.
fn chromium_children() -> Vec<u32> {
    let me = std::process::id();
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // pid (comm) state ppid ...
        let Some((comm_end, rest)) = stat.rsplit_once(')') else {
            continue;
        };
        let ppid = rest
            .split_whitespace()
            .nth(1)
            .and_then(|p| p.parse::<u32>().ok());
        if ppid == Some(me) && comm_end.contains("chrom") {
            out.push(pid);
        }
    }
    out
}

/// Proportional set size (KiB) of every Chromium process in this test's process group.
fn chromium_pss_kib() -> u64 {
    let field = |stat: &str, n: usize| -> Option<u32> {
        let (_, rest) = stat.rsplit_once(')')?;
        rest.split_whitespace().nth(n)?.parse().ok()
    };
    let my_pgid = std::fs::read_to_string("/proc/self/stat")
        .ok()
        .and_then(|s| field(&s, 2));
    let mut total = 0;
    for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if name.parse::<u32>().is_err() {
            continue;
        }
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{name}/stat")) else {
            continue;
        };
        if !stat.contains("(chrom") || field(&stat, 2) != my_pgid {
            continue;
        }
        if let Ok(roll) = std::fs::read_to_string(format!("/proc/{name}/smaps_rollup")) {
            total += roll
                .lines()
                .find(|l| l.starts_with("Pss:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse::<u64>().ok())
                .unwrap_or(0);
        }
    }
    total
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chromium_renders_script_pages_obeys_ssrf_and_survives_a_crash() {
    let hits = Arc::new(AtomicUsize::new(0));
    let secret = secret_server(hits.clone()).await;
    let ws_hits = Arc::new(AtomicUsize::new(0));
    let ws = counting_listener(ws_hits.clone()).await;
    let pages = pages_server(secret, ws).await;

    // Without rendering the text is not there.
    let mut plain = render_env("never").await;
    let s = plain.session().await;
    let r = plain
        .call(
            &s,
            "visit_page",
            json!({ "url": format!("http://{pages}/js") }),
        )
        .await;
    assert!(
        !body_of(&r.text).contains("Rendered heading 4417"),
        "{}",
        r.text
    );

    let mut env = render_env("auto").await;
    let s = env.session().await;
    let r = env
        .call(
            &s,
            "visit_page",
            json!({ "url": format!("http://{pages}/js") }),
        )
        .await;
    assert!(!r.is_error, "{}", r.text);
    assert!(
        body_of(&r.text).contains("Rendered heading 4417"),
        "{}",
        r.text
    );
    assert!(
        r.text.contains("inserted by JavaScript after a timeout"),
        "{}",
        r.text
    );

    // The page's fetch() to a non-allowed loopback address is refused inside Chromium.
    let r = env
        .call(
            &s,
            "visit_page",
            json!({ "url": format!("http://{pages}/ssrf") }),
        )
        .await;
    assert!(
        body_of(&r.text).contains("blocked request 9931"),
        "{}",
        r.text
    );
    assert!(!r.text.contains("internal secret 5150"), "{}", r.text);
    assert_eq!(
        hits.load(Ordering::SeqCst),
        0,
        "the secret server was reached"
    );
    // A WebSocket to the same forbidden address never connects: CDP interception does not
    // see WebSockets, the egress proxy refuses the CONNECT.
    let r = env
        .call(
            &s,
            "visit_page",
            json!({ "url": format!("http://{pages}/ws") }),
        )
        .await;
    assert!(
        body_of(&r.text).contains("websocket refused 6620"),
        "{}",
        r.text
    );
    assert_eq!(
        ws_hits.load(Ordering::SeqCst),
        0,
        "the WebSocket reached 127.0.0.2"
    );
    // Control: with 127.0.0.2 allowed, the same pages do reach it (so the refusals above
    // are the interception's and the proxy's, not a network accident).
    let (mut open, _) = start_with(|_| {
        "[browser]\nallow_hosts = [\"127.0.0.1\", \"127.0.0.2\"]\n[browser.render]\nmode = \"always\"\npage_timeout_ms = 20000\n".to_string()
    })
    .await;
    let so = open.session().await;
    let _ = open
        .call(
            &so,
            "visit_page",
            json!({ "url": format!("http://{pages}/ssrf") }),
        )
        .await;
    assert!(
        hits.load(Ordering::SeqCst) > 0,
        "control page never reached 127.0.0.2"
    );
    let _ = open
        .call(
            &so,
            "visit_page",
            json!({ "url": format!("http://{pages}/ws") }),
        )
        .await;
    assert!(
        ws_hits.load(Ordering::SeqCst) > 0,
        "control WebSocket never reached 127.0.0.2"
    );
    drop(open);

    // Render latency (p50 of 5, printed for the benchmark note).
    let mut times = Vec::new();
    for _ in 0..5 {
        let t = std::time::Instant::now();
        let r = env
            .call(
                &s,
                "visit_page",
                json!({ "url": format!("http://{pages}/js") }),
            )
            .await;
        times.push(t.elapsed());
        assert!(
            body_of(&r.text).contains("Rendered heading 4417"),
            "{}",
            r.text
        );
    }
    times.sort();
    eprintln!(
        "chromium render via gRPC: p50 {:?}, max {:?}; Chromium PSS {} KiB",
        times[2],
        times[4],
        chromium_pss_kib()
    );

    // Kill the shared browser (the process this test started); the next render relaunches.
    let pids = chromium_children();
    assert!(!pids.is_empty(), "no Chromium child process found");
    for pid in &pids {
        let _ = std::process::Command::new("kill")
            .args(["-9", &pid.to_string()])
            .status();
    }
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let r = env
        .call(
            &s,
            "visit_page",
            json!({ "url": format!("http://{pages}/js") }),
        )
        .await;
    assert!(!r.is_error, "{}", r.text);
    assert!(
        body_of(&r.text).contains("Rendered heading 4417"),
        "after crash: {}",
        r.text
    );
}
