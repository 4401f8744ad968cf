//! informational_web_search / navigational_web_search over gRPC: the embedded tantivy index
//! (a folder of documents, and pages fetched from 127.0.0.1), and each web provider against a
//! local axum server speaking that provider's real response format, including a timeout and
//! garbage answers.

use std::path::{Path, PathBuf};
use std::time::Duration;

use axum::extract::{Query, Request};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{Html, IntoResponse};
use serde_json::json;

use super::{Env, body_of, start, start_with};

fn pages_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/pages")
}

const PAGES: &[&str] = &[
    "readability-daringfireball-1",
    "readability-v8-blog",
    "readability-ars-1",
    "readability-mercurial",
];

fn host_of(h: &HeaderMap) -> String {
    h.get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("127.0.0.1")
        .to_string()
}

type Params = Query<std::collections::HashMap<String, String>>;

/// Requests the fake SearXNG has answered (only `searxng_provider_and_navigation` uses it).
static SEARXNG_HITS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// The key the tests' policies point the providers at: `search.*_key_env =
/// "CARGO_PKG_NAME"`, which cargo sets when it runs the tests.
const KEY: &str = env!("CARGO_PKG_NAME");

/// Routes of the saved pages and the fake providers, added to the fixture server.
pub fn provider_routes(r: axum::Router) -> axum::Router {
    r.route(
        "/pages/{name}",
        axum::routing::get(
            |axum::extract::Path(name): axum::extract::Path<String>| async move {
                // `/pages/<dir>.html` serves the saved `<dir>/source.html`.
                let dir = name.strip_suffix(".html").unwrap_or(&name).replace(['/', '\\'], "");
                match std::fs::read_to_string(pages_dir().join(dir).join("source.html")) {
                    Ok(b) => Html(b).into_response(),
                    Err(_) => StatusCode::NOT_FOUND.into_response(),
                }
            },
        ),
    )
    // SearXNG JSON API.
    .route(
        "/searxng/search",
        axum::routing::get(|Query(q): Params, h: HeaderMap| async move {
            SEARXNG_HITS.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            if q.get("format").map(String::as_str) != Some("json") {
                return (StatusCode::FORBIDDEN, "format not allowed").into_response();
            }
            let host = host_of(&h);
            axum::Json(json!({
                "query": q.get("q"),
                "number_of_results": 0,
                "results": [
                    {"url": format!("http://{host}/pages/readability-v8-blog.html"),
                     "title": "Outside the web: standalone WebAssembly binaries using Emscripten · V8",
                     "content": "Emscripten uses <b>WASI</b> APIs as much as possible",
                     "engine": "bing", "engines": ["bing"], "positions": [1], "score": 1.0, "category": "general"},
                    {"url": "https://example.org/second", "title": "Second", "content": "Another hit",
                     "engine": "brave", "engines": ["brave"], "positions": [2], "score": 0.5, "category": "general"}
                ],
                "answers": [], "corrections": [], "infoboxes": [], "suggestions": [], "unresponsive_engines": []
            }))
            .into_response()
        }),
    )
    // Brave Search API.
    .route(
        "/brave/res/v1/web/search",
        axum::routing::get(|Query(q): Params, h: HeaderMap| async move {
            if h.get("x-subscription-token").and_then(|v| v.to_str().ok()) != Some(KEY) {
                return (
                    StatusCode::UNAUTHORIZED,
                    axum::Json(json!({"type": "ErrorResponse", "error": {"id": "x", "status": 401, "code": "SUBSCRIPTION_TOKEN_INVALID", "detail": "The provided subscription token is invalid."}})),
                )
                    .into_response();
            }
            axum::Json(json!({
                "type": "search",
                "query": {"original": q.get("q"), "more_results_available": false},
                "web": {"type": "search", "family_friendly": true, "results": [
                    {"type": "search_result", "title": "Evolve: Shared Mutable History — evolve extension for Mercurial",
                     "url": "https://www.mercurial-scm.org/doc/evolution/sharing.html",
                     "description": "<strong>evolve</strong> lets you push and pull draft changesets between repositories",
                     "is_source_local": false, "language": "en"}
                ]}
            }))
            .into_response()
        }),
    )
    // Google Custom Search JSON API.
    .route(
        "/google/customsearch/v1",
        axum::routing::get(|Query(q): Params| async move {
            if q.get("key").map(String::as_str) != Some(KEY) {
                return (
                    StatusCode::BAD_REQUEST,
                    axum::Json(json!({"error": {"code": 400, "message": "API key not valid. Please pass a valid API key.", "errors": [{"message": "API key not valid.", "domain": "global", "reason": "badRequest"}], "status": "INVALID_ARGUMENT"}})),
                )
                    .into_response();
            }
            axum::Json(json!({
                "kind": "customsearch#search",
                "queries": {"request": [{"searchTerms": q.get("q"), "count": 1}]},
                "searchInformation": {"searchTime": 0.2, "totalResults": "1"},
                "items": [{"kind": "customsearch#result",
                           "title": "Daring Fireball: Colophon",
                           "link": "https://daringfireball.net/colophon/",
                           "displayLink": "daringfireball.net",
                           "snippet": "Daring Fireball is written and produced by John Gruber.",
                           "htmlSnippet": "Daring Fireball is written and produced by <b>John Gruber</b>."}]
            }))
            .into_response()
        }),
    )
    // DuckDuckGo HTML endpoint (POST form), with an ad that must be skipped.
    .route(
        "/ddg/html/",
        axum::routing::post(|req: Request| async move {
            let ct = req
                .headers()
                .get(header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("")
                .to_string();
            let body = axum::body::to_bytes(req.into_body(), 1 << 16).await.unwrap_or_default();
            let form = String::from_utf8_lossy(&body).into_owned();
            if !ct.starts_with("application/x-www-form-urlencoded") || !form.contains("q=") {
                return (StatusCode::BAD_REQUEST, "bad form").into_response();
            }
            Html(DDG_PAGE.to_string()).into_response()
        }),
    )
    .route(
        "/ddgcaptcha/html/",
        axum::routing::post(|| async {
            Html("<html><body><form id=\"challenge-form\">Please verify you are a human</form></body></html>")
        }),
    )
    .route(
        "/slow/search",
        axum::routing::get(|| async {
            tokio::time::sleep(Duration::from_secs(5)).await;
            axum::Json(json!({"results": []}))
        }),
    )
    .route(
        "/garbage/search",
        axum::routing::get(|| async { Html("<html><title>Just a moment...</title></html>") }),
    )
}

const DDG_PAGE: &str = r##"<!DOCTYPE html><html><head><title>ars minecraft at DuckDuckGo</title></head><body>
<div id="links" class="results">
<div class="result results_links results_links_deep result--ad ">
  <div class="links_main links_deep result__body">
    <h2 class="result__title"><a rel="nofollow" class="result__a" href="https://duckduckgo.com/y.js?ad_domain=ads.example&amp;u3=x">Buy Minecraft Servers</a></h2>
    <a class="result__snippet" href="https://duckduckgo.com/y.js?x">Cheap servers</a>
  </div>
</div>
<div class="result results_links results_links_deep web-result ">
  <div class="links_main links_deep result__body">
    <h2 class="result__title">
      <a rel="nofollow" class="result__a" href="//duckduckgo.com/l/?uddg=https%3A%2F%2Farstechnica.com%2Fsecurity%2F2015%2F04%2Fjust%2Dreleased%2Dminecraft%2Dexploit%2Dmakes%2Dit%2Deasy%2Dto%2Dcrash%2Dgame%2Dservers%2F&amp;rut=abc">Just-released <b>Minecraft</b> exploit makes it easy to crash game servers</a>
    </h2>
    <div class="result__extras"><div class="result__extras__url"><a class="result__url" href="//duckduckgo.com/l/?uddg=x">arstechnica.com</a></div></div>
    <a class="result__snippet" href="//duckduckgo.com/l/?uddg=x">Just the nbt data for this payload is 26.6 megabytes &amp; more.</a>
    <div class="clear"></div>
  </div>
</div>
<div class="result results_links results_links_deep web-result ">
  <div class="links_main links_deep result__body">
    <h2 class="result__title"><a rel="nofollow" class="result__a" href="//duckduckgo.com/l/?uddg=https%3A%2F%2Fexample.org%2Fsecond&amp;rut=def">Second result</a></h2>
    <a class="result__snippet" href="//duckduckgo.com/l/?uddg=x">Second snippet</a>
  </div>
</div>
</div></body></html>"##;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn embedded_index_finds_fetched_pages_and_navigates() {
    let (mut env, _) = start(super::POLICY).await;
    let s = env.session().await;
    for p in PAGES {
        let r = env
            .call(
                &s,
                "visit_page",
                json!({ "url": format!("{}/pages/{p}.html", env.files) }),
            )
            .await;
        assert!(!r.is_error, "{p}: {}", r.text);
    }
    let r = env
        .call(
            &s,
            "informational_web_search",
            json!({ "query": "minecraft exploit crash game servers" }),
        )
        .await;
    assert!(!r.is_error, "{}", r.text);
    let body = body_of(&r.text);
    assert!(
        body.starts_with("## A web search for 'minecraft exploit crash game servers' found "),
        "{body}"
    );
    let ars = format!("{}/pages/readability-ars-1.html", env.files);
    let first = body
        .lines()
        .find(|l| l.starts_with("1. "))
        .unwrap_or_default();
    assert!(
        first
            .starts_with("1. [Just-released Minecraft exploit makes it easy to crash game servers"),
        "{body}"
    );
    assert!(first.ends_with(&format!("]({ars})")), "{body}");
    assert!(r.text.contains("Showing page 1 of 1."), "{}", r.text);
    // Find works on the results page.
    let f = env
        .call(
            &s,
            "find_on_page_ctrl_f",
            json!({ "search_string": "Minecraft exploit" }),
        )
        .await;
    assert!(f.text.contains("Search: showing match 1 of"), "{}", f.text);
    // Navigational search lands on the page (another session of the same tenant).
    let s2 = env.session().await;
    let r = env
        .call(
            &s2,
            "navigational_web_search",
            json!({ "query": "Emscripten standalone WebAssembly binaries" }),
        )
        .await;
    assert!(!r.is_error, "{}", r.text);
    let v8 = format!("{}/pages/readability-v8-blog.html", env.files);
    assert!(
        r.text.starts_with(&format!("Address: {v8}\n")),
        "{}",
        r.text
    );
    // Nothing matches: an honest empty result, and navigational search says so.
    let r = env
        .call(
            &s2,
            "informational_web_search",
            json!({ "query": "zzqxjv nonexistentword" }),
        )
        .await;
    assert!(
        body_of(&r.text)
            .starts_with("## A web search for 'zzqxjv nonexistentword' found 0 results:"),
        "{}",
        r.text
    );
    let r = env
        .call(&s2, "navigational_web_search", json!({ "query": "zzqxjv" }))
        .await;
    assert!(
        r.is_error && r.text.contains("found no results"),
        "{}",
        r.text
    );
    // Hostile query syntax never fails the search.
    let r = env
        .call(
            &s2,
            "informational_web_search",
            json!({ "query": "title:\"unbalanced (AND OR ^^ ~" }),
        )
        .await;
    assert!(!r.is_error, "{}", r.text);
    // An empty query is an argument error.
    let e = env
        .client
        .call_tool(sibyl_proto::v1::CallToolRequest {
            session_id: s2.clone(),
            tool: "informational_web_search".into(),
            arguments_json: json!({ "query": "  " }).to_string(),
        })
        .await
        .expect_err("empty query");
    assert_eq!(e.code(), tonic::Code::InvalidArgument);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn embedded_index_covers_a_folder_of_documents() {
    let folder = super::fixtures();
    let (mut env, _) = start_with(|_| {
        format!(
            "{}\n[search]\nfolder = \"{}\"\n",
            super::POLICY,
            folder.display()
        )
    })
    .await;
    let s = env.session().await;
    let r = env
        .call(
            &s,
            "informational_web_search",
            json!({ "query": "contemporaneous exploration of multi-agent approaches" }),
        )
        .await;
    assert!(!r.is_error, "{}", r.text);
    let body = body_of(&r.text);
    let first = body
        .lines()
        .find(|l| l.starts_with("1. "))
        .unwrap_or_default()
        .to_string();
    assert!(first.contains("test.pdf)"), "{body}");
    let r = env
        .call(
            &s,
            "navigational_web_search",
            json!({ "query": "blockquote chapter EPUB" }),
        )
        .await;
    assert!(!r.is_error, "{}", r.text);
    assert!(r.text.contains("test.epub"), "{}", r.text);
    assert!(
        r.text.contains("This is a blockquote for testing"),
        "{}",
        r.text
    );
    // Shift-JIS CSV content is searchable by its decoded text.
    let r = env
        .call(&s, "informational_web_search", json!({ "query": "名古屋" }))
        .await;
    assert!(body_of(&r.text).contains("test_mskanji.csv)"), "{}", r.text);
}

async fn provider_env(provider: &str, url_key: &str, path: &str, extra: &str) -> Env {
    let (provider, url_key, path, extra) = (
        provider.to_string(),
        url_key.to_string(),
        path.to_string(),
        extra.to_string(),
    );
    start_with(move |base| {
        let mut keys = String::new();
        for k in ["brave_key_env", "google_key_env", "google_cx_env"] {
            if !extra.contains(k) {
                keys.push_str(&format!("{k} = \"CARGO_PKG_NAME\"\n"));
            }
        }
        format!(
            "{}\n[search]\nprovider = \"{provider}\"\n{url_key} = \"{base}{path}\"\ntimeout_ms = 1500\n{keys}{extra}",
            super::POLICY
        )
    })
    .await
    .0
}

async fn search_text(env: &mut Env, query: &str) -> (bool, String) {
    let s = env.session().await;
    let r = env
        .call(&s, "informational_web_search", json!({ "query": query }))
        .await;
    (r.is_error, r.text)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn searxng_provider_and_navigation() {
    let mut env = provider_env("searxng", "searxng_url", "/searxng/", "").await;
    let (err, text) = search_text(&mut env, "emscripten wasi").await;
    assert!(!err, "{text}");
    assert!(
        body_of(&text).starts_with("## A web search for 'emscripten wasi' found 2 results:"),
        "{text}"
    );
    assert!(
        text.contains("\nEmscripten uses WASI APIs as much as possible\n"),
        "{text}"
    );
    assert!(
        text.contains("2. [Second](https://example.org/second)"),
        "{text}"
    );
    // The same query again is answered from the cache (search.cache_ttl_secs).
    let before = SEARXNG_HITS.load(std::sync::atomic::Ordering::SeqCst);
    let (err, again) = search_text(&mut env, "emscripten wasi").await;
    assert!(!err, "{again}");
    assert_eq!(body_of(&again), body_of(&text));
    assert_eq!(
        SEARXNG_HITS.load(std::sync::atomic::Ordering::SeqCst),
        before
    );
    // Navigational search visits the first result (a local page).
    let s = env.session().await;
    let r = env
        .call(
            &s,
            "navigational_web_search",
            json!({ "query": "emscripten" }),
        )
        .await;
    assert!(!r.is_error, "{}", r.text);
    assert!(
        r.text.starts_with(&format!(
            "Address: {}/pages/readability-v8-blog.html\n",
            env.files
        )),
        "{}",
        r.text
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn brave_google_and_ddg_providers() {
    let mut env = provider_env("brave", "brave_url", "/brave/res/v1/web/search", "").await;
    let (err, text) = search_text(&mut env, "mercurial evolve").await;
    assert!(!err, "{text}");
    assert!(text.contains("1. [Evolve: Shared Mutable History — evolve extension for Mercurial](https://www.mercurial-scm.org/doc/evolution/sharing.html)\nevolve lets you push"), "{text}");

    let mut env = provider_env("google", "google_url", "/google/customsearch/v1", "").await;
    let (err, text) = search_text(&mut env, "daring fireball colophon").await;
    assert!(!err, "{text}");
    assert!(text.contains("1. [Daring Fireball: Colophon](https://daringfireball.net/colophon/)\nDaring Fireball is written and produced by John Gruber."), "{text}");

    let mut env = provider_env("ddg", "ddg_url", "/ddg/html/", "").await;
    let (err, text) = search_text(&mut env, "ars minecraft").await;
    assert!(!err, "{text}");
    let body = body_of(&text);
    assert!(
        body.starts_with("## A web search for 'ars minecraft' found 2 results:"),
        "{body}"
    );
    assert!(body.contains("1. [Just-released Minecraft exploit makes it easy to crash game servers](https://arstechnica.com/security/2015/04/just-released-minecraft-exploit-makes-it-easy-to-crash-game-servers/)\nJust the nbt data for this payload is 26.6 megabytes & more."), "{body}");
    assert!(!body.contains("Buy Minecraft"), "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn provider_failures_are_clear_errors() {
    // Timeout.
    let mut env = provider_env("searxng", "searxng_url", "/slow/", "").await;
    let started = std::time::Instant::now();
    let (err, text) = search_text(&mut env, "anything").await;
    assert!(err, "{text}");
    assert!(
        text.contains("searxng did not answer within 1500 ms"),
        "{text}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "{:?}",
        started.elapsed()
    );
    // Garbage instead of JSON.
    let mut env = provider_env("searxng", "searxng_url", "/garbage/", "").await;
    let (err, text) = search_text(&mut env, "anything").await;
    assert!(
        err && text.contains("searxng sent an answer that is not in its result format"),
        "{text}"
    );
    // A CAPTCHA page from DuckDuckGo.
    let mut env = provider_env("ddg", "ddg_url", "/ddgcaptcha/html/", "").await;
    let (err, text) = search_text(&mut env, "anything").await;
    assert!(
        err && text.contains("ddg sent an answer that is not in its result format"),
        "{text}"
    );
    // Wrong key: the provider's own error message comes through.
    let mut env = provider_env(
        "brave",
        "brave_url",
        "/brave/res/v1/web/search",
        "brave_key_env = \"CARGO_MANIFEST_DIR\"\n",
    )
    .await;
    let (err, text) = search_text(&mut env, "anything").await;
    assert!(
        err && text.contains("brave answered HTTP 401")
            && text.contains("subscription token is invalid"),
        "{text}"
    );
    let mut env = provider_env(
        "google",
        "google_url",
        "/google/customsearch/v1",
        "google_key_env = \"CARGO_MANIFEST_DIR\"\n",
    )
    .await;
    let (err, text) = search_text(&mut env, "anything").await;
    assert!(
        err && text.contains("google answered HTTP 400: API key not valid"),
        "{text}"
    );
    // Missing key.
    let mut env = provider_env(
        "brave",
        "brave_url",
        "/brave/res/v1/web/search",
        "brave_key_env = \"SIBYL_TEST_UNSET_VARIABLE\"\n",
    )
    .await;
    let (err, text) = search_text(&mut env, "anything").await;
    assert!(
        err && text.contains("$SIBYL_TEST_UNSET_VARIABLE is not set"),
        "{text}"
    );
    // Nothing listens: a network error naming the provider.
    let (mut env, _) = start_with(|_| {
        format!(
            "{}\n[search]\nprovider = \"searxng\"\nsearxng_url = \"http://127.0.0.1:9/\"\ntimeout_ms = 1500\n",
            super::POLICY
        )
    })
    .await;
    let (err, text) = search_text(&mut env, "anything").await;
    assert!(err && text.contains("cannot reach searxng"), "{text}");
}
