//! Benchmark of the Python runners (issue 3): per-call latency of trivial code (p50/p99) for
//! plain `python3 -c` (the baseline), the subprocess sandbox, a fresh WASM instance, a fresh
//! instance of the CPython 3.12 fallback build (`runner.wasm.build = "python312"`, when
//! installed), a WASM session turn and a subprocess notebook turn; calls/s with 8 concurrent sessions; memory per idle WASM
//! session.
//!
//! Run: `cargo run -p sibyl-tests --example runners_bench [-- N]` (after `scripts/setup`).
//! Calls go over gRPC to an in-process server on 127.0.0.1, as agents' calls do.

use std::time::{Duration, Instant};

use sibyl_proto::v1 as pb;
use sibyl_proto::v1::tool_service_client::ToolServiceClient;
use tonic::transport::Channel;

type Client = ToolServiceClient<Channel>;

fn pct(v: &mut [f64], p: f64) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    let i = ((v.len() as f64 - 1.0) * p).round() as usize;
    v[i.min(v.len() - 1)]
}

async fn call(c: &mut Client, session: &str, runner: &str, code: &str) -> (f64, f64) {
    let t = Instant::now();
    let r = c
        .call_tool(pb::CallToolRequest {
            session_id: session.into(),
            tool: "python".into(),
            arguments_json: serde_json::json!({"code": code, "runner": runner}).to_string(),
        })
        .await
        .expect("call")
        .into_inner();
    let wall = t.elapsed().as_secs_f64() * 1e3;
    assert!(!r.is_error, "{}", r.text);
    let s: serde_json::Value =
        serde_json::from_str(r.structured_json.as_deref().unwrap_or("{}")).expect("json");
    (wall, s["duration_ms"].as_f64().unwrap_or(f64::NAN))
}

fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1).and_then(|v| v.parse().ok()))
        })
        .unwrap_or(0)
}

fn report(name: &str, wall: &mut [f64], inner: &mut [f64]) -> f64 {
    let p50 = pct(wall, 0.5);
    println!(
        "{name:<34} p50 {:>8.2} ms  p99 {:>8.2} ms   (in runner: p50 {:>8.3} ms, p99 {:>8.3} ms)",
        p50,
        pct(wall, 0.99),
        pct(inner, 0.5),
        pct(inner, 0.99)
    );
    p50
}

/// Starts an in-process server with the bench policy plus `extra` and connects to it.
async fn server(extra: &str) -> anyhow::Result<Client> {
    let policy = sibyl_server::Policy::from_toml(
        &format!("[sessions]\nmax_sessions = 4096\n[runner]\ndefault = \"wasm\"\n{extra}"),
        "bench",
    )?;
    let sibyl = sibyl_server::Sibyl::new(policy)?;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    tokio::spawn(sibyl.serve(listener, std::future::pending()));
    Ok(ToolServiceClient::connect(format!("http://{addr}")).await?)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> anyhow::Result<()> {
    let n: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(50);
    let mut c = server("").await?;
    let code = "print(sum(range(10)))";
    let t = Instant::now();
    call(&mut c, "", "wasm", "pass").await;
    println!(
        "first WASM call (module load from cache or compile): {:.1} s",
        t.elapsed().as_secs_f64()
    );
    // The 3.12 fallback build, on a second server of its own policy.
    let wasm312 = sibyl_server::runner::wasm::default_python312_dir().join("python.wasm");
    let mut c312 = if wasm312.is_file() {
        let mut c312 = server("[runner.wasm]\nbuild = \"python312\"\n").await?;
        let t = Instant::now();
        call(&mut c312, "", "wasm", "pass").await;
        println!(
            "first WASM 3.12 call (module load from cache or compile): {:.1} s",
            t.elapsed().as_secs_f64()
        );
        Some(c312)
    } else {
        println!(
            "WASM 3.12 fallback not installed at {} (scripts/setup): not measured",
            wasm312.display()
        );
        None
    };

    // Interleaved, so load from other processes on the machine hits all alike.
    // Baseline: plain python3 -c, no sandbox.
    for py in ["/usr/bin/python3"] {
        let (mut v, mut sw, mut si, mut fw, mut fi) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
        let (mut gw, mut gi) = (Vec::new(), Vec::new());
        for _ in 0..n {
            let t = Instant::now();
            let o = std::process::Command::new(py).args(["-c", code]).output()?;
            assert!(o.status.success());
            v.push(t.elapsed().as_secs_f64() * 1e3);
            let (a, b) = call(&mut c, "", "subprocess", code).await;
            sw.push(a);
            si.push(b);
            let (a, b) = call(&mut c, "", "wasm", code).await;
            fw.push(a);
            fi.push(b);
            if let Some(c312) = c312.as_mut() {
                let (a, b) = call(c312, "", "wasm", code).await;
                gw.push(a);
                gi.push(b);
            }
        }
        let mut inner = v.clone();
        let base = report(&format!("plain {py} -c"), &mut v, &mut inner);
        let sub = report("subprocess sandbox (gRPC)", &mut sw, &mut si);
        let fresh = report("WASM fresh instance (gRPC)", &mut fw, &mut fi);
        let fresh312 =
            (!gw.is_empty()).then(|| report("WASM 3.12 fresh instance (gRPC)", &mut gw, &mut gi));
        let s = c
            .open_session(pb::OpenSessionRequest {})
            .await?
            .into_inner()
            .session_id;
        call(&mut c, &s, "wasm", "x = 0").await;
        let (mut w, mut i) = (Vec::new(), Vec::new());
        for _ in 0..(n * 4) {
            let (a, b) = call(&mut c, &s, "wasm", code).await;
            w.push(a);
            i.push(b);
        }
        let turn = report("WASM session turn (gRPC)", &mut w, &mut i);
        // The subprocess runner's notebook session: one sandboxed interpreter kept alive.
        let s = c
            .open_session(pb::OpenSessionRequest {})
            .await?
            .into_inner()
            .session_id;
        call(&mut c, &s, "subprocess", "x = 0").await;
        let (mut w, mut i) = (Vec::new(), Vec::new());
        for _ in 0..(n * 4) {
            let (a, b) = call(&mut c, &s, "subprocess", code).await;
            w.push(a);
            i.push(b);
        }
        let sub_turn = report("subprocess notebook turn (gRPC)", &mut w, &mut i);
        println!(
            "ratios vs plain python3 -c (p50, gRPC round trip included): subprocess {:.2}x, WASM fresh {:.2}x, WASM turn {:.3}x, subprocess turn {:.3}x",
            sub / base,
            fresh / base,
            turn / base,
            sub_turn / base
        );
        if let Some(f) = fresh312 {
            println!("WASM 3.12 fresh {:.2}x plain python3 -c", f / base);
        }
    }

    // Throughput: 8 sessions calling at once for 5 s.
    for runner in ["wasm", "subprocess"] {
        let mut tasks = Vec::new();
        let stop = Instant::now() + Duration::from_secs(5);
        for _ in 0..8 {
            let mut c = c.clone();
            let runner = runner.to_string();
            tasks.push(tokio::spawn(async move {
                let s = c
                    .open_session(pb::OpenSessionRequest {})
                    .await
                    .expect("open")
                    .into_inner()
                    .session_id;
                let mut k = 0u64;
                while Instant::now() < stop {
                    call(&mut c, &s, &runner, "print(sum(range(10)))").await;
                    k += 1;
                }
                k
            }));
        }
        let mut total = 0;
        for t in tasks {
            total += t.await?;
        }
        println!(
            "{runner:<10} 8 concurrent sessions: {:.0} calls/s",
            total as f64 / 5.0
        );
    }

    // Memory per idle WASM session (an interpreter that ran one turn).
    let before = rss_kib();
    let k = 20;
    for _ in 0..k {
        let s = c
            .open_session(pb::OpenSessionRequest {})
            .await?
            .into_inner()
            .session_id;
        call(&mut c, &s, "wasm", "x = 1").await;
    }
    let after = rss_kib();
    println!(
        "memory per idle WASM session: {:.1} MiB RSS ({} sessions: {} -> {} KiB)",
        (after.saturating_sub(before)) as f64 / 1024.0 / k as f64,
        k,
        before,
        after
    );
    let before = rss_kib();
    for _ in 0..k {
        let s = c
            .open_session(pb::OpenSessionRequest {})
            .await?
            .into_inner()
            .session_id;
        call(&mut c, &s, "wasm", "import numpy").await;
    }
    let after = rss_kib();
    println!(
        "memory per idle WASM session after `import numpy`: {:.1} MiB RSS",
        (after.saturating_sub(before)) as f64 / 1024.0 / k as f64
    );
    Ok(())
}
