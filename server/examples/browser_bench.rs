//! Benchmark of the browser's file extraction and embedded search (issue 5).
//!
//! `cargo run --release -p sibyl-server --example browser_bench -- [DOCS_DIR] [ITERATIONS]`
//! prints, per fixture file (`test*` in `tests/fixtures/documents`: PDF, DOCX, XLSX, PPTX,
//! CSV, JSON, HTML, EPUB, ipynb), the median conversion time (type detection + extraction,
//! in process) and throughput; then the embedded index's build time and search latency
//! percentiles over the fixture folder. Between the two: per saved page
//! (`tests/fixtures/pages`), the median HTML-to-text time of the whole page and of the main
//! content (`main_content = "auto"`).
//!
//! With `MARKITDOWN_PYTHON` set to a Python that has `markitdown` installed, the same files
//! are converted by markitdown in the same run (`tests/benches/markitdown_bench.py`, median
//! of up to 10 conversions after a warm-up, in one Python process) and each row gets
//! markitdown's median and the ratio markitdown / sibyl (the goal is at least 5). Without it
//! the comparison is skipped, and the output says so.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use sibyl_server::browser::convert::{MainContent, html_to_text_as};
use sibyl_server::browser::download::detect;
use sibyl_server::browser::extract::{ExtractPolicy, extract};
use sibyl_server::browser::search::index::EmbeddedIndex;

/// markitdown's median milliseconds per file, keyed by path, or why it was skipped.
fn markitdown(repeats: u32, files: &[PathBuf]) -> Result<serde_json::Value, String> {
    let python = std::env::var("MARKITDOWN_PYTHON")
        .map_err(|_| "MARKITDOWN_PYTHON is not set".to_string())?;
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/benches/markitdown_bench.py");
    let out = std::process::Command::new(&python)
        .arg(script)
        .arg(repeats.to_string())
        .args(files)
        .output()
        .map_err(|e| format!("cannot run {python}: {e}"))?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        return Err(format!(
            "{python} failed: {}",
            err.lines().last().unwrap_or("no message")
        ));
    }
    serde_json::from_slice(&out.stdout).map_err(|e| format!("bad output from {python}: {e}"))
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures");
    let docs = args
        .next()
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("documents"));
    let iterations: u32 = args
        .next()
        .and_then(|a| a.parse().ok())
        .unwrap_or(20)
        .max(1);
    let policy = ExtractPolicy::default();
    let mut names: Vec<_> = std::fs::read_dir(&docs)?
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("test"))
        .collect();
    names.sort();
    let mut rows = Vec::new();
    for name in &names {
        let bytes = std::fs::read(docs.join(name))?;
        // Warm-up (binds libpdfium once).
        let kind = detect(name, None, None, &bytes);
        let out = extract(kind, &bytes, name, &policy)?;
        let mut times = Vec::with_capacity(iterations as usize);
        for _ in 0..iterations {
            let t = Instant::now();
            let kind = detect(name, None, None, &bytes);
            std::hint::black_box(extract(kind, &bytes, name, &policy)?);
            times.push(t.elapsed());
        }
        times.sort();
        let median = times[times.len() / 2];
        rows.push((
            name.clone(),
            kind.name(),
            bytes.len(),
            median,
            out.text.chars().count(),
        ));
    }
    let files: Vec<PathBuf> = names.iter().map(|n| docs.join(n)).collect();
    let md = markitdown(iterations.min(10), &files);
    println!("format\tfile\tbytes\tsibyl_ms\tMB_per_s\tchars_out\tmarkitdown_ms\tratio");
    let (mut total_sibyl, mut total_md) = (0.0, 0.0);
    for ((name, kind, bytes, median, chars), path) in rows.iter().zip(&files) {
        let ms = median.as_secs_f64() * 1e3;
        let theirs = md
            .as_ref()
            .ok()
            .and_then(|m| m.get(path.to_string_lossy().as_ref()))
            .and_then(serde_json::Value::as_f64);
        let (md_col, ratio_col) = match theirs {
            Some(t) => {
                total_sibyl += ms;
                total_md += t;
                (format!("{t:.3}"), format!("{:.1}x", t / ms))
            }
            None => ("-".into(), "-".into()),
        };
        println!(
            "{kind}\t{name}\t{bytes}\t{ms:.3}\t{:.1}\t{chars}\t{md_col}\t{ratio_col}",
            *bytes as f64 / median.as_secs_f64() / 1e6,
        );
    }
    match &md {
        Ok(_) if total_sibyl > 0.0 => println!(
            "total\tsibyl {total_sibyl:.1} ms\tmarkitdown {total_md:.1} ms\tratio {:.1}x",
            total_md / total_sibyl
        ),
        Ok(_) => println!("markitdown returned no timings for these files"),
        Err(why) => println!("markitdown skipped: {why}"),
    }
    // HTML conversion of the saved pages: whole page against main content (`auto`: the
    // whole-page render, Readability, and the article render).
    println!("page\tKB\tfull_page_ms\tmain_content_ms\tarticle_view");
    let mut dirs: Vec<_> = std::fs::read_dir(root.join("pages"))?
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.join("source.html").is_file())
        .collect();
    dirs.sort();
    let base = url::Url::parse("https://example.com/")?;
    let (mut sum_off, mut sum_auto) = (0.0, 0.0);
    for dir in &dirs {
        let html = String::from_utf8_lossy(&std::fs::read(dir.join("source.html"))?).into_owned();
        let ms = |mode: MainContent| -> anyhow::Result<(f64, bool)> {
            let mut times = Vec::new();
            let mut article = false;
            for _ in 0..iterations.min(10) {
                let t = Instant::now();
                let r = html_to_text_as(&html, Some(&base), mode)?;
                times.push(t.elapsed());
                article = r.omitted.is_some();
            }
            times.sort();
            Ok((times[times.len() / 2].as_secs_f64() * 1e3, article))
        };
        let (off, _) = ms(MainContent::Off)?;
        let (auto, article) = ms(MainContent::Auto)?;
        sum_off += off;
        sum_auto += auto;
        println!(
            "{}\t{}\t{off:.2}\t{auto:.2}\t{}",
            dir.file_name()
                .map(|n| n.to_string_lossy())
                .unwrap_or_default(),
            html.len() / 1024,
            if article { "yes" } else { "no" }
        );
    }
    println!("pages_total_ms\tfull_page {sum_off:.1}\tmain_content {sum_auto:.1}");
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
