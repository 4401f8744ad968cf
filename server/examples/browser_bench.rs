//! Benchmark of the browser's file extraction and embedded search (issue 5).
//!
//! `cargo run --release -p sibyl-server --example browser_bench -- [DOCS_DIR] [ITERATIONS]`
//! prints, per fixture file, the mean conversion time (type detection + extraction, in
//! process) and throughput, then the embedded index's build time and search latency
//! percentiles over the fixture folder. Compare with `python tests/benches/markitdown_bench.py 10 tests/fixtures/documents/test*` (median ms per file).

use std::path::PathBuf;
use std::time::{Duration, Instant};

use sibyl_server::browser::download::detect;
use sibyl_server::browser::extract::{ExtractPolicy, extract};
use sibyl_server::browser::search::index::EmbeddedIndex;

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures");
    let docs = args
        .next()
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("documents"));
    let iterations: u32 = args.next().and_then(|a| a.parse().ok()).unwrap_or(20);
    let policy = ExtractPolicy::default();
    let mut names: Vec<_> = std::fs::read_dir(&docs)?
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("test"))
        .collect();
    names.sort();
    println!("file\tbytes\tms_per_file\tMB_per_s\tchars_out");
    for name in names {
        let bytes = std::fs::read(docs.join(&name))?;
        // Warm-up (binds libpdfium once).
        let kind = detect(&name, None, None, &bytes);
        let out = extract(kind, &bytes, &name, &policy)?;
        let start = Instant::now();
        for _ in 0..iterations {
            let kind = detect(&name, None, None, &bytes);
            std::hint::black_box(extract(kind, &bytes, &name, &policy)?);
        }
        let per = start.elapsed() / iterations;
        println!(
            "{name}\t{}\t{:.3}\t{:.1}\t{}",
            bytes.len(),
            per.as_secs_f64() * 1e3,
            bytes.len() as f64 / per.as_secs_f64() / 1e6,
            out.text.chars().count()
        );
    }
    let index = EmbeddedIndex::new()?;
    let t = Instant::now();
    index.index_folder(root.clone(), 100_000, policy.clone());
    let _ = index.search("", "warm", 10).await?;
    println!("index_build_ms\t{:.1}", t.elapsed().as_secs_f64() * 1e3);
    let queries = [
        "contemporaneous exploration of multi-agent approaches",
        "minecraft exploit crash game servers",
        "Emscripten standalone WebAssembly",
        "evolve obsolescence markers",
        "Daring Fireball John Gruber",
        "blockquote chapter",
        "名古屋",
        "nbt payload megabytes",
        "shared mutable history",
        "AutoGen conversable agents",
    ];
    let mut lat: Vec<Duration> = Vec::new();
    for round in 0..20 {
        for q in &queries {
            let t = Instant::now();
            let hits = index.search("", q, 10).await?;
            lat.push(t.elapsed());
            if round == 0 {
                println!(
                    "query\t{q}\t{} hits\ttop={}",
                    hits.len(),
                    hits.first().map(|h| h.url.as_str()).unwrap_or("-")
                );
            }
        }
    }
    lat.sort();
    let pct = |p: f64| lat[((lat.len() as f64 - 1.0) * p) as usize].as_secs_f64() * 1e3;
    println!(
        "search_latency_ms\tp50={:.3}\tp95={:.3}\tmax={:.3}\tn={}",
        pct(0.5),
        pct(0.95),
        pct(1.0),
        lat.len()
    );
    Ok(())
}
