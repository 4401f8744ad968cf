//! download_file and visit_page on files, over gRPC against a real in-process sibyl-server on
//! 127.0.0.1 and an axum server of fixture files on 127.0.0.1 (tests/fixtures/documents, the
//! markitdown test corpus, MIT — see its LICENSE and SOURCE_COMMIT).

use std::io::Write;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use axum::extract::Path as AxPath;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::IntoResponse;
use sibyl_proto::v1::tool_service_client::ToolServiceClient;
use sibyl_proto::v1::{CallToolRequest, CallToolResponse, OpenSessionRequest};
use tonic::transport::Channel;

mod render;
mod search;

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/documents")
}

const POLICY: &str = r#"
[browser]
viewport_size = 4096
request_timeout_ms = 15000
allow_hosts = ["127.0.0.1"]
[browser.extract]
max_unpacked_bytes = 8388608
"#;

struct Env {
    client: ToolServiceClient<Channel>,
    files: String,
    _shutdown: tokio::sync::oneshot::Sender<()>,
}

fn mime_of(name: &str) -> &'static str {
    match name.rsplit('.').next().unwrap_or("") {
        "pdf" => "application/pdf",
        "docx" => "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
        "xlsx" => "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet",
        "pptx" => "application/vnd.openxmlformats-officedocument.presentationml.presentation",
        "epub" => "application/epub+zip",
        "json" | "ipynb" => "application/json",
        "csv" => "text/csv",
        "html" => "text/html; charset=utf-8",
        _ => "application/octet-stream",
    }
}

/// `/docs/NAME`: the fixture with its MIME type. `/raw/NAME`: the fixture as
/// `application/octet-stream` under an opaque URL, named only by `Content-Disposition`.
/// `/gen/NAME`: files built by the tests, put in the shared map.
async fn serve_files(generated: Generated) -> SocketAddr {
    let gen2 = generated.clone();
    let app = search::provider_routes(axum::Router::new())
        .route(
            "/docs/{name}",
            axum::routing::get(|AxPath(name): AxPath<String>| async move {
                match std::fs::read(fixtures().join(&name)) {
                    Ok(b) => {
                        let mut h = HeaderMap::new();
                        h.insert(
                            header::CONTENT_TYPE,
                            HeaderValue::from_static(mime_of(&name)),
                        );
                        (StatusCode::OK, h, b).into_response()
                    }
                    Err(_) => StatusCode::NOT_FOUND.into_response(),
                }
            }),
        )
        .route(
            "/raw/{name}",
            axum::routing::get(|AxPath(name): AxPath<String>| async move {
                match std::fs::read(fixtures().join(&name)) {
                    Ok(b) => {
                        let mut h = HeaderMap::new();
                        h.insert(
                            header::CONTENT_TYPE,
                            HeaderValue::from_static("application/octet-stream"),
                        );
                        if let Ok(v) =
                            HeaderValue::from_str(&format!("attachment; filename=\"{name}\""))
                        {
                            h.insert(header::CONTENT_DISPOSITION, v);
                        }
                        (StatusCode::OK, h, b).into_response()
                    }
                    Err(_) => StatusCode::NOT_FOUND.into_response(),
                }
            }),
        )
        .route(
            "/gen/{name}",
            axum::routing::get(move |AxPath(name): AxPath<String>| {
                let g = gen2.clone();
                async move {
                    let found = g
                        .lock()
                        .expect("lock")
                        .iter()
                        .find(|(n, _)| *n == name)
                        .map(|(_, b)| b.clone());
                    match found {
                        Some(b) => {
                            let mut h = HeaderMap::new();
                            h.insert(
                                header::CONTENT_TYPE,
                                HeaderValue::from_static("application/octet-stream"),
                            );
                            (StatusCode::OK, h, b).into_response()
                        }
                        None => StatusCode::NOT_FOUND.into_response(),
                    }
                }
            }),
        );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind files");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    addr
}

type Generated = std::sync::Arc<std::sync::Mutex<Vec<(String, Vec<u8>)>>>;

async fn start(policy: &str) -> (Env, Generated) {
    let policy = policy.to_string();
    start_with(move |_| policy).await
}

/// Starts the file server, then sibyl with the policy `make_policy(files_base_url)`.
async fn start_with(make_policy: impl FnOnce(&str) -> String) -> (Env, Generated) {
    let generated: Generated = Default::default();
    let files = serve_files(generated.clone()).await;
    let text = make_policy(&format!("http://{files}"));
    let policy = sibyl_server::policy::Policy::from_toml(&text, "<test>").expect("policy");
    let sibyl = sibyl_server::Sibyl::new(policy).expect("server");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind grpc");
    let addr = listener.local_addr().expect("addr");
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(async move {
        let _ = sibyl
            .serve(listener, async move {
                let _ = rx.await;
            })
            .await;
    });
    let client = ToolServiceClient::connect(format!("http://{addr}"))
        .await
        .expect("connect");
    (
        Env {
            client,
            files: format!("http://{files}"),
            _shutdown: tx,
        },
        generated,
    )
}

impl Env {
    async fn session(&mut self) -> String {
        self.client
            .open_session(OpenSessionRequest {})
            .await
            .expect("open")
            .into_inner()
            .session_id
    }

    async fn call(
        &mut self,
        session: &str,
        tool: &str,
        args: serde_json::Value,
    ) -> CallToolResponse {
        self.client
            .call_tool(CallToolRequest {
                session_id: session.to_string(),
                tool: tool.to_string(),
                arguments_json: args.to_string(),
            })
            .await
            .unwrap_or_else(|e| panic!("{tool} {args}: {e}"))
            .into_inner()
    }

    /// Downloads `url` and returns the first reply plus the text of every viewport.
    async fn download_all(&mut self, session: &str, url: &str) -> (CallToolResponse, String) {
        let first = self
            .call(session, "download_file", serde_json::json!({ "url": url }))
            .await;
        if first.is_error {
            return (first, String::new());
        }
        let mut all = body_of(&first.text).to_string();
        let pages = viewports(&first);
        for _ in 1..pages {
            let next = self.call(session, "page_down", serde_json::json!({})).await;
            assert!(!next.is_error, "{}", next.text);
            all.push_str(body_of(&next.text));
        }
        (first, all)
    }
}

fn viewports(r: &CallToolResponse) -> u64 {
    let s: serde_json::Value =
        serde_json::from_str(r.structured_json.as_deref().unwrap_or("{}")).expect("structured");
    s["viewports"].as_u64().unwrap_or(1)
}

/// The viewport text after the header separator.
fn body_of(text: &str) -> &str {
    text.split_once("=======================\n")
        .map(|(_, b)| b)
        .unwrap_or(text)
}

/// The path from the `Saved N bytes (...) to PATH.` note.
fn saved_path(text: &str) -> PathBuf {
    let line = text
        .lines()
        .find(|l| l.starts_with("Saved "))
        .unwrap_or_else(|| panic!("no Saved note in {text}"));
    let (_, rest) = line.split_once(") to ").expect("saved note");
    PathBuf::from(rest.trim_end_matches('.'))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_corpus_file_converts_over_grpc() {
    let (mut env, _) = start(POLICY).await;
    let exp: serde_json::Value = serde_json::from_slice(
        &std::fs::read(fixtures().join("expectations.json")).expect("expectations"),
    )
    .expect("json");
    let mut failures = Vec::new();
    for (name, e) in exp["files"].as_object().expect("files") {
        if name == "random.bin" {
            continue;
        }
        let session = env.session().await;
        let url = format!("{}/docs/{name}", env.files);
        let (first, all) = env.download_all(&session, &url).await;
        assert!(!first.is_error, "{name}: {}", first.text);
        assert!(
            first.text.starts_with(&format!("Address: {url}\n")),
            "{}",
            first.text
        );
        assert!(
            first.text.contains("Viewport position: Showing page 1 of "),
            "{}",
            first.text
        );
        for s in e["must_include"].as_array().expect("inc") {
            let s = s.as_str().expect("s");
            if !all.contains(s) {
                failures.push(format!("{name}: missing {s:?}"));
            }
        }
        for s in e["must_not_include"].as_array().expect("exc") {
            let s = s.as_str().expect("s");
            if all.contains(s) {
                failures.push(format!("{name}: has forbidden {s:?}"));
            }
        }
        // The file is saved, byte for byte, in the session's scratch directory.
        let path = saved_path(&first.text);
        let original = std::fs::read(fixtures().join(name)).expect("fixture");
        assert_eq!(
            std::fs::read(&path).expect("saved file"),
            original,
            "{name}"
        );
        // Find works inside the converted text (first plain-text expectation).
        if let Some(needle) = e["must_include_plain_text"].as_array().and_then(|a| {
            a.iter()
                .filter_map(|v| v.as_str())
                .find(|s| s.len() > 8 && !s.contains('`'))
        }) {
            let f = env
                .call(
                    &session,
                    "find_on_page_ctrl_f",
                    serde_json::json!({ "search_string": needle }),
                )
                .await;
            assert!(
                f.text.contains("Search: showing match 1 of"),
                "{name}: find {needle:?}: {}",
                f.text
            );
        }
        // Closing the session deletes the scratch directory and the download.
        env.client
            .close_session(sibyl_proto::v1::CloseSessionRequest {
                session_id: session.clone(),
            })
            .await
            .expect("close");
        assert!(
            !path.exists(),
            "{name}: {} survived the session",
            path.display()
        );
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_bytes_are_rejected_clearly() {
    let (mut env, generated) = start(POLICY).await;
    let s = env.session().await;
    let r = env
        .call(
            &s,
            "download_file",
            serde_json::json!({ "url": format!("{}/docs/random.bin", env.files) }),
        )
        .await;
    assert!(r.is_error, "{}", r.text);
    assert!(r.text.contains("unsupported file type"), "{}", r.text);
    assert!(r.text.contains("unknown binary data"), "{}", r.text);
    // The same bytes named .pptx: a corrupt PPTX, named as such.
    let bytes = std::fs::read(fixtures().join("random.bin")).expect("random");
    generated
        .lock()
        .expect("lock")
        .push(("slides.pptx".into(), bytes));
    let r = env
        .call(
            &s,
            "download_file",
            serde_json::json!({ "url": format!("{}/gen/slides.pptx", env.files) }),
        )
        .await;
    assert!(r.is_error, "{}", r.text);
    assert!(
        r.text.contains("PPTX") && r.text.contains("corrupt"),
        "{}",
        r.text
    );
    // No page was opened by the failures.
    let r = env.call(&s, "page_down", serde_json::json!({})).await;
    assert!(
        r.is_error && r.text.contains("No page is open"),
        "{}",
        r.text
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn type_comes_from_content_disposition_and_magic() {
    let (mut env, _) = start(POLICY).await;
    let s = env.session().await;
    // Served as application/octet-stream: the name comes from Content-Disposition.
    let (r, all) = env
        .download_all(&s, &format!("{}/raw/test_mskanji.csv", env.files))
        .await;
    assert!(!r.is_error, "{}", r.text);
    assert!(all.contains("| 佐藤太郎 | 30 | 東京 |"), "{all}");
    assert!(saved_path(&r.text).ends_with("test_mskanji.csv"));
    // visit_page on a PDF (non-HTML) shows its text through the same viewport.
    let r = env
        .call(
            &s,
            "visit_page",
            serde_json::json!({ "url": format!("{}/docs/test.pdf", env.files) }),
        )
        .await;
    assert!(!r.is_error, "{}", r.text);
    assert!(r.text.contains("Large language models"), "{}", r.text);
}

fn zip_of(members: &[(&str, &[u8])]) -> Vec<u8> {
    let mut w = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    let opts = zip::write::SimpleFileOptions::default()
        .compression_method(zip::CompressionMethod::Deflated);
    for (name, data) in members {
        w.start_file(*name, opts).expect("start");
        w.write_all(data).expect("write");
    }
    w.finish().expect("finish").into_inner()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zip_members_listed_converted_and_bombs_capped() {
    let (mut env, generated) = start(POLICY).await;
    let csv = std::fs::read(fixtures().join("test_mskanji.csv")).expect("csv");
    let json = std::fs::read(fixtures().join("test.json")).expect("json");
    generated.lock().expect("lock").push((
        "bundle.zip".into(),
        zip_of(&[("a/test.csv", &csv), ("b.json", &json)]),
    ));
    // 32 MiB of zeros deflates to ~32 KiB; the test policy caps unpacking at 8 MiB.
    let zeros = vec![0u8; 32 << 20];
    generated
        .lock()
        .expect("lock")
        .push(("bomb.zip".into(), zip_of(&[("zeros.txt", &zeros)])));
    let s = env.session().await;
    let (r, all) = env
        .download_all(&s, &format!("{}/gen/bundle.zip", env.files))
        .await;
    assert!(!r.is_error, "{}", r.text);
    assert!(all.contains("* a/test.csv (70 bytes)"), "{all}");
    assert!(all.contains("## File: a/test.csv"), "{all}");
    assert!(all.contains("| \u{9ad9}橋淳 | 35 | 名古屋 |"), "{all}");
    assert!(
        all.contains("9700dc99-6685-40b4-9a3a-5e406dcb37f3"),
        "{all}"
    );
    let r = env
        .call(
            &s,
            "download_file",
            serde_json::json!({ "url": format!("{}/gen/bomb.zip", env.files) }),
        )
        .await;
    assert!(r.is_error, "{}", r.text);
    assert!(
        r.text.contains("browser.extract.max_unpacked_bytes"),
        "{}",
        r.text
    );
    // The same bomb inside an XLSX (parsed by calamine) and a DOCX.
    for name in ["bomb.xlsx", "bomb.docx"] {
        let member = if name.ends_with("xlsx") {
            "xl/worksheets/sheet1.xml"
        } else {
            "word/document.xml"
        };
        generated
            .lock()
            .expect("lock")
            .push((name.into(), zip_of(&[(member, &zeros)])));
        let r = env
            .call(
                &s,
                "download_file",
                serde_json::json!({ "url": format!("{}/gen/{name}", env.files) }),
            )
            .await;
        assert!(r.is_error, "{name}: {}", r.text);
        assert!(
            r.text.contains("browser.extract.max_unpacked_bytes"),
            "{name}: {}",
            r.text
        );
    }
}

/// markitdown CVE-2025-11849 (`rlink.docx`): an image linked by an external relationship to a
/// local file must never be read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ooxml_external_relationships_are_never_followed() {
    let (mut env, generated) = start(POLICY).await;
    let dir = tempfile::tempdir().expect("tmp");
    let secret = dir.path().join("secret.txt");
    std::fs::write(&secret, "TOP-SECRET-7f3a91").expect("secret");
    let target = format!("file://{}", secret.display());
    let content_types = br#"<?xml version="1.0" encoding="UTF-8"?><Types xmlns="http://schemas.openxmlformats.org/package/2006/content-types"><Default Extension="rels" ContentType="application/vnd.openxmlformats-package.relationships+xml"/><Default Extension="xml" ContentType="application/xml"/><Override PartName="/word/document.xml" ContentType="application/vnd.openxmlformats-officedocument.wordprocessingml.document.main+xml"/></Types>"#;
    let root_rels = br#"<?xml version="1.0" encoding="UTF-8"?><Relationships xmlns="http://schemas.openxmlformats.org/package/2006/relationships"><Relationship Id="rId1" Type="http://schemas.openxmlformats.org/officeDocument/2006/relationships/officeDocument" Target="word/document.xml"/></Relationships>"#;
    let doc_rels = format!(
        r#"<?xml version="1.0" encoding="UTF-8"?><Relationships xmlns="http://schemas.openxmlformats.org/package/2006/relationships"><Relationship Id="rId9" Type="http://schemas.openxmlformats.org/officeDocument/2006/relationships/image" Target="{target}" TargetMode="External"/><Relationship Id="rId8" Type="http://schemas.openxmlformats.org/officeDocument/2006/relationships/image" Target="../../../../../../{}"/></Relationships>"#,
        secret.display()
    );
    let document = br#"<?xml version="1.0" encoding="UTF-8"?><w:document xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main" xmlns:r="http://schemas.openxmlformats.org/officeDocument/2006/relationships" xmlns:a="http://schemas.openxmlformats.org/drawingml/2006/main" xmlns:wp="http://schemas.openxmlformats.org/drawingml/2006/wordprocessingDrawing"><w:body><w:p><w:r><w:t>Visible paragraph 5521.</w:t></w:r></w:p><w:p><w:r><w:drawing><wp:inline><wp:docPr id="1" name="Linked" descr="linked picture"/><a:graphic><a:graphicData><a:blip r:link="rId9"/></a:graphicData></a:graphic></wp:inline></w:drawing></w:r></w:p><w:p><w:r><w:drawing><wp:inline><wp:docPr id="2" name="Escaping" descr="escaping picture"/><a:graphic><a:graphicData><a:blip r:embed="rId8"/></a:graphicData></a:graphic></wp:inline></w:drawing></w:r></w:p></w:body></w:document>"#;
    let docx = zip_of(&[
        ("[Content_Types].xml", content_types),
        ("_rels/.rels", root_rels),
        ("word/_rels/document.xml.rels", doc_rels.as_bytes()),
        ("word/document.xml", document),
    ]);
    generated
        .lock()
        .expect("lock")
        .push(("rlink.docx".into(), docx));
    let s = env.session().await;
    let (r, all) = env
        .download_all(&s, &format!("{}/gen/rlink.docx", env.files))
        .await;
    assert!(!r.is_error, "{}", r.text);
    assert!(all.contains("Visible paragraph 5521."), "{all}");
    assert!(all.contains("![linked picture]()"), "{all}");
    assert!(!all.contains("TOP-SECRET"), "{all}");
    assert!(!all.contains(&secret.display().to_string()), "{all}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn audio_is_not_transcribed_and_says_so() {
    let (mut env, generated) = start(POLICY).await;
    let mut mp3 = b"ID3\x04\x00\x00\x00\x00\x00\x00".to_vec();
    mp3.extend(std::iter::repeat_n(0x55u8, 4000));
    generated
        .lock()
        .expect("lock")
        .push(("talk.mp3".into(), mp3));
    let s = env.session().await;
    let r = env
        .call(
            &s,
            "download_file",
            serde_json::json!({ "url": format!("{}/gen/talk.mp3", env.files) }),
        )
        .await;
    assert!(r.is_error, "{}", r.text);
    assert!(
        r.text.contains("audio") && r.text.contains("speech recognition"),
        "{}",
        r.text
    );
    assert!(!r.text.to_lowercase().contains("transcript:"), "{}", r.text);
    // The file is still saved for the Python tools.
    let (_, rest) = r
        .text
        .split_once("Saved 4010 bytes (audio) to ")
        .expect("saved note");
    let path = rest.split(". The current page").next().expect("path");
    assert!(Path::new(path).exists(), "{path}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_in_the_same_session_reads_the_downloaded_file() {
    let (mut env, _) = start(POLICY).await;
    let s = env.session().await;
    let (r, _) = env
        .download_all(&s, &format!("{}/docs/test_mskanji.csv", env.files))
        .await;
    assert!(!r.is_error, "{}", r.text);
    let name = saved_path(&r.text)
        .file_name()
        .expect("file name")
        .to_string_lossy()
        .into_owned();
    // Both runners see the session's scratch directory as their working directory.
    let code = format!(
        "import csv\nrows = list(csv.reader(open({name:?}, encoding='cp932')))\n\
         print(len(rows), rows[1][0], rows[1][2])"
    );
    for runner in ["subprocess", "wasm"] {
        let out = env
            .call(
                &s,
                "python",
                serde_json::json!({ "code": code, "runner": runner }),
            )
            .await;
        assert!(!out.is_error, "{runner}: {}", out.text);
        assert!(
            out.text.contains("4 佐藤太郎 東京"),
            "{runner}: {}",
            out.text
        );
    }
    // Another session does not see it.
    let other = env.session().await;
    let out = env
        .call(
            &other,
            "python",
            serde_json::json!({ "code": format!("open({name:?})"), "runner": "subprocess" }),
        )
        .await;
    assert!(
        out.is_error && out.text.contains("FileNotFoundError"),
        "{}",
        out.text
    );
}

/// The PDF child process (`sibyl-server extract-pdf`) confines itself before parsing: under
/// its seccomp filter and rlimits it can read no file, write none, open no socket, run no
/// program and signal no process, while threads still work.
#[test]
fn pdf_child_process_is_sandboxed() {
    let out = std::process::Command::new(sibyl_tests::bin("sibyl-server"))
        .args([
            "extract-pdf",
            "--max-chars",
            "1000",
            "--memory-mb",
            "1024",
            "--cpu-secs",
            "5",
            "--probe-sandbox",
        ])
        .stderr(std::process::Stdio::inherit())
        .output()
        .expect("run extract-pdf");
    assert!(out.status.success(), "{:?}", out.status);
    let verdicts: std::collections::BTreeMap<String, String> =
        serde_json::from_slice(&out.stdout).expect("probe JSON");
    for probe in [
        "read_file",
        "write_file",
        "tcp_connect",
        "udp_socket",
        "spawn_process",
        "signal_parent",
    ] {
        assert_eq!(
            verdicts.get(probe).map(String::as_str),
            Some("denied"),
            "{probe}: {verdicts:?}"
        );
    }
    assert_eq!(verdicts.get("thread").map(String::as_str), Some("works"));
}

/// A one-page PDF whose page holds `lines` lines of 100 glyphs: PDFium needs about 100 bytes
/// of memory per glyph to extract its text.
fn glyph_heavy_pdf(lines: usize) -> Vec<u8> {
    let line = format!("({}) Tj T* ", "A".repeat(100));
    let content = format!("BT /F1 1 Tf 1 0 0 1 10 10 Tm 1 TL {}ET", line.repeat(lines));
    let objects = [
        "<< /Type /Catalog /Pages 2 0 R >>".to_string(),
        "<< /Type /Pages /Kids [3 0 R] /Count 1 >>".to_string(),
        "<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R \
         /Resources << /Font << /F1 5 0 R >> >> >>"
            .to_string(),
        format!(
            "<< /Length {} >>\nstream\n{content}\nendstream",
            content.len()
        ),
        "<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>".to_string(),
    ];
    let mut out = String::from("%PDF-1.4\n");
    let mut offsets = Vec::new();
    for (i, o) in objects.iter().enumerate() {
        offsets.push(out.len());
        out.push_str(&format!("{} 0 obj\n{o}\nendobj\n", i + 1));
    }
    let xref = out.len();
    out.push_str(&format!(
        "xref\n0 {}\n0000000000 65535 f \n",
        objects.len() + 1
    ));
    for o in offsets {
        out.push_str(&format!("{o:010} 00000 n \n"));
    }
    out.push_str(&format!(
        "trailer\n<< /Size {} /Root 1 0 R >>\nstartxref\n{xref}\n%%EOF\n",
        objects.len() + 1
    ));
    out.into_bytes()
}

/// A PDF that needs more memory than the PDF child process may take (3 million glyphs,
/// ~450 MB, against 256 MiB) is a clear error naming the policy key, for that file only: in
/// the server's own process PDFium's `std::bad_alloc` would have aborted the server. The same
/// server then converts other files and a small PDF.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pdf_over_its_memory_limit_is_a_clear_error() {
    let (mut env, generated) = start(&format!("{POLICY}pdf_memory_mb = 256\n")).await;
    generated
        .lock()
        .expect("lock")
        .push(("glyphs.pdf".into(), glyph_heavy_pdf(30_000)));
    let s = env.session().await;
    let r = env
        .call(
            &s,
            "download_file",
            serde_json::json!({ "url": format!("{}/gen/glyphs.pdf", env.files) }),
        )
        .await;
    assert!(r.is_error, "{}", r.text);
    assert!(
        r.text.contains("browser.extract.pdf_memory_mb = 256 MiB"),
        "{}",
        r.text
    );
    let (r, all) = env
        .download_all(&s, &format!("{}/docs/test.docx", env.files))
        .await;
    assert!(!r.is_error, "{}", r.text);
    assert!(
        all.contains("314b0a30-5b04-470b-b9f7-eed2c2bec74a"),
        "{all}"
    );
    generated
        .lock()
        .expect("lock")
        .push(("small.pdf".into(), glyph_heavy_pdf(3)));
    let r = env
        .call(
            &s,
            "download_file",
            serde_json::json!({ "url": format!("{}/gen/small.pdf", env.files) }),
        )
        .await;
    assert!(!r.is_error, "{}", r.text);
    assert!(r.text.contains(&"A".repeat(100)), "{}", r.text);
}
