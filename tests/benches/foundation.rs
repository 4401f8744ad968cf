//! Foundation benchmark (issue 2): run with
//! `cargo bench -p sibyl-tests --bench foundation` (set `MARKITDOWN_PYTHON` to a Python
//! that has `markitdown` installed to get the comparison; see the README).
//!
//! Reports, on this machine, in one run:
//! 1. HTML-to-text conversion per corpus page (decode + html2text + tidy), median ms and
//!    MB/s of source HTML, and markitdown's median on the same files, as a ratio;
//! 2. `visit_page` over gRPC on loopback per page (fetch from a local HTTP server, convert,
//!    first viewport), median ms and MB/s;
//! 3. `ListTools` and `CallTool(page_down)` round trips on loopback, p50/p99, sequential;
//! 4. `CallTool(page_down)` calls/s with 16 concurrent clients, each with its own session.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use serde_json::json;
use sibyl_proto::v1 as pb;
use sibyl_tests::{PageServer, fixtures};

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn percentile(v: &mut [f64], p: f64) -> f64 {
    v.sort_by(f64::total_cmp);
    let i = ((v.len() as f64 - 1.0) * p).round() as usize;
    v[i]
}

fn pages() -> Vec<(String, PathBuf)> {
    let mut out: Vec<_> = std::fs::read_dir(fixtures().join("pages"))
        .expect("pages dir")
        .filter_map(Result::ok)
        .filter(|e| e.path().join("source.html").exists())
        .map(|e| {
            (
                e.file_name().to_string_lossy().into_owned(),
                e.path().join("source.html"),
            )
        })
        .collect();
    out.sort();
    out
}

fn markitdown(repeats: usize, files: &[PathBuf]) -> Option<serde_json::Value> {
    let python = std::env::var("MARKITDOWN_PYTHON").unwrap_or_else(|_| "python3".into());
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("benches/markitdown_bench.py");
    let out = std::process::Command::new(&python)
        .arg(script)
        .arg(repeats.to_string())
        .args(files)
        .output()
        .ok()?;
    if !out.status.success() {
        eprintln!(
            "markitdown not available via {python} ({}); skipping the comparison",
            String::from_utf8_lossy(&out.stderr)
                .lines()
                .last()
                .unwrap_or("")
        );
        return None;
    }
    serde_json::from_slice(&out.stdout).ok()
}

fn main() -> anyhow::Result<()> {
    let repeats: usize = std::env::var("BENCH_REPEATS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(20);
    let pages = pages();

    // 1. Conversion only.
    println!("## HTML to text (decode + convert), median of {repeats}");
    println!(
        "{:<36} {:>9} {:>9} {:>9} {:>12} {:>7}",
        "page", "KB", "sibyl ms", "MB/s", "markitdown ms", "ratio"
    );
    let files: Vec<_> = pages.iter().map(|(_, p)| p.clone()).collect();
    let md = markitdown(repeats.min(10), &files);
    let (mut total_ours, mut total_md, mut total_bytes) = (0.0, 0.0, 0usize);
    for (name, path) in &pages {
        let bytes = std::fs::read(path)?;
        let base = url::Url::parse("http://127.0.0.1/page/")?;
        let mut times = Vec::new();
        for _ in 0..repeats {
            let t = Instant::now();
            let html = sibyl_server::browser::fetch::decode_text(&bytes, None, true);
            let r = sibyl_server::browser::convert::html_to_text(&html, Some(&base))?;
            std::hint::black_box(r);
            times.push(t.elapsed().as_secs_f64() * 1e3);
        }
        let ms = median(&mut times);
        let mbs = bytes.len() as f64 / 1e6 / (ms / 1e3);
        let theirs = md
            .as_ref()
            .and_then(|m| m[path.to_string_lossy().as_ref()].as_f64());
        total_ours += ms;
        total_bytes += bytes.len();
        match theirs {
            Some(t) => {
                total_md += t;
                println!(
                    "{name:<36} {:>9.0} {ms:>9.2} {mbs:>9.1} {t:>12.2} {:>6.1}x",
                    bytes.len() as f64 / 1e3,
                    t / ms
                );
            }
            None => println!(
                "{name:<36} {:>9.0} {ms:>9.2} {mbs:>9.1} {:>12} {:>7}",
                bytes.len() as f64 / 1e3,
                "-",
                "-"
            ),
        }
    }
    println!(
        "all pages: sibyl {total_ours:.1} ms ({:.1} MB/s){}",
        total_bytes as f64 / 1e6 / (total_ours / 1e3),
        if total_md > 0.0 {
            format!(
                ", markitdown {total_md:.1} ms: sibyl is {:.1}x faster",
                total_md / total_ours
            )
        } else {
            String::new()
        }
    );

    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    rt.block_on(async move {
        // In-process server on a real loopback port.
        let policy = sibyl_server::Policy::from_toml(&sibyl_tests::test_policy(""), "bench")?;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let sibyl = sibyl_server::Sibyl::new(policy)?;
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let server = tokio::spawn(sibyl.serve(listener, async move {
            let _ = stop_rx.await;
        }));
        let web = PageServer::start().await;
        let url = format!("http://{addr}");
        let mut c = pb::tool_service_client::ToolServiceClient::connect(url.clone()).await?;

        // 2. visit_page over gRPC.
        println!("\n## visit_page over gRPC (fetch + convert + first viewport), median of {repeats}");
        println!("{:<36} {:>9} {:>9} {:>9}", "page", "KB", "ms", "MB/s");
        for (name, path) in &pages {
            let size = std::fs::metadata(path)?.len() as f64;
            let mut times = Vec::new();
            for _ in 0..repeats {
                let t = Instant::now();
                let r = c
                    .call_tool(pb::CallToolRequest {
                        session_id: String::new(),
                        tool: "visit_page".into(),
                        arguments_json: json!({"url": web.url(&format!("/pages/{name}/"))}).to_string(),
                    })
                    .await?
                    .into_inner();
                anyhow::ensure!(!r.is_error, "{name}: {}", r.text);
                times.push(t.elapsed().as_secs_f64() * 1e3);
            }
            let ms = median(&mut times);
            println!("{name:<36} {:>9.0} {ms:>9.2} {:>9.1}", size / 1e3, size / 1e6 / (ms / 1e3));
        }

        // 3. Round trips.
        let session = c.open_session(pb::OpenSessionRequest {}).await?.into_inner().session_id;
        c.call_tool(pb::CallToolRequest {
            session_id: session.clone(),
            tool: "visit_page".into(),
            arguments_json: json!({"url": web.url("/pages/readability-lwn-1/")}).to_string(),
        })
        .await?;
        let n = 2000;
        let mut list = Vec::with_capacity(n);
        for _ in 0..n {
            let t = Instant::now();
            c.list_tools(pb::ListToolsRequest {}).await?;
            list.push(t.elapsed().as_secs_f64() * 1e6);
        }
        let mut down = Vec::with_capacity(n);
        for _ in 0..n {
            let t = Instant::now();
            c.call_tool(pb::CallToolRequest {
                session_id: session.clone(),
                tool: "page_down".into(),
                arguments_json: "{}".into(),
            })
            .await?;
            down.push(t.elapsed().as_secs_f64() * 1e6);
        }
        println!("\n## round trips on loopback, {n} sequential calls");
        println!(
            "ListTools:            p50 {:>7.0} us  p99 {:>7.0} us",
            percentile(&mut list, 0.5),
            percentile(&mut list, 0.99)
        );
        println!(
            "CallTool(page_down):  p50 {:>7.0} us  p99 {:>7.0} us",
            percentile(&mut down, 0.5),
            percentile(&mut down, 0.99)
        );

        // 4. Throughput with 16 concurrent clients.
        let clients = 16;
        let window = Duration::from_secs(5);
        let mut tasks = Vec::new();
        for _ in 0..clients {
            let url = url.clone();
            let page = web.url("/pages/readability-lwn-1/");
            tasks.push(tokio::spawn(async move {
                let mut c = pb::tool_service_client::ToolServiceClient::connect(url).await?;
                let s = c.open_session(pb::OpenSessionRequest {}).await?.into_inner().session_id;
                c.call_tool(pb::CallToolRequest {
                    session_id: s.clone(),
                    tool: "visit_page".into(),
                    arguments_json: json!({"url": page}).to_string(),
                })
                .await?;
                let mut lat = Vec::new();
                let end = Instant::now() + window;
                while Instant::now() < end {
                    let t = Instant::now();
                    c.call_tool(pb::CallToolRequest {
                        session_id: s.clone(),
                        tool: "page_down".into(),
                        arguments_json: "{}".into(),
                    })
                    .await?;
                    lat.push(t.elapsed().as_secs_f64() * 1e6);
                }
                anyhow::Ok(lat)
            }));
        }
        let mut all = Vec::new();
        for t in tasks {
            all.extend(t.await??);
        }
        println!(
            "\n## CallTool(page_down), {clients} concurrent clients for {}s: {:.0} calls/s, p50 {:.0} us, p99 {:.0} us",
            window.as_secs(),
            all.len() as f64 / window.as_secs_f64(),
            percentile(&mut all, 0.5),
            percentile(&mut all, 0.99)
        );
        let _ = stop_tx.send(());
        server.await??;
        anyhow::Ok(())
    })?;
    Ok(())
}
