//! The human-style text browser of the Sibyl agent (AutoGen's `SimpleTextBrowser` lineage):
//! `visit_page`, `page_up`, `page_down`, `find_on_page_ctrl_f` and `find_next`.
//!
//! Each session has its own browser state (current page, viewport, history, last search).
//! Pages are fetched over plain HTTP(S) ([`fetch`]), converted to text ([`convert`]), shown
//! one viewport at a time ([`viewport`]) and searched ([`find`]); every request obeys the
//! address rules in [`ssrf`].
//!
//! Behaviour follows AutoGen's browser, with the lineage's bugs fixed: the last search is
//! cleared when the address changes, a match straddling two viewports is found, and a find
//! reply says which match of how many it shows.

pub mod convert;
pub mod download;
pub mod extract;
pub mod fetch;
pub mod find;
pub mod render;
pub mod search;
pub mod ssrf;
pub mod viewport;

use std::ops::Range;
use std::sync::{Arc, OnceLock};
use std::time::Instant;

use schemars::JsonSchema;
use serde::Deserialize;

use crate::error::ToolError;
use crate::policy::BrowserPolicy;
use crate::registry::{
    CallContext, Hints, Origin, Tool, ToolDescriptor, ToolOutput, ToolRegistry, parse_args,
    schema_for,
};
use fetch::{FetchError, Fetcher};

/// Longest URL accepted by `visit_page`, in bytes.
pub const MAX_URL_BYTES: usize = 8192;

/// Shared browser machinery: the HTTP client and the viewport size.
pub struct Browser {
    fetcher: Fetcher,
    viewport_size: usize,
    main_content: convert::MainContent,
    extract: Arc<extract::ExtractPolicy>,
    search: Option<Arc<search::Search>>,
    renderer: Option<Arc<render::Renderer>>,
}

/// One loaded page.
struct Page {
    address: String,
    title: String,
    text: String,
    hidden: Vec<Range<usize>>,
    pages: Vec<Range<usize>>,
    index: OnceLock<find::WordIndex>,
}

impl Page {
    fn new(
        address: String,
        title: String,
        text: String,
        hidden: Vec<Range<usize>>,
        size: usize,
    ) -> Self {
        let pages = viewport::split_pages(&text, size);
        Self {
            address,
            title,
            text,
            hidden,
            pages,
            index: OnceLock::new(),
        }
    }

    fn index(&self) -> &find::WordIndex {
        self.index
            .get_or_init(|| find::WordIndex::new(&self.text, &self.hidden))
    }
}

/// The last search on the current page.
struct FindState {
    query: String,
    matches: Vec<Range<usize>>,
    current: usize,
}

/// Per-session browser state.
#[derive(Default)]
pub struct BrowserState {
    page: Option<Page>,
    viewport: usize,
    find: Option<FindState>,
    history: Vec<(String, Instant)>,
}

impl BrowserState {
    fn set_page(&mut self, page: Page) {
        self.page = Some(page);
        self.viewport = 0;
        // Fix of the AutoGen lineage: a search never survives a change of address.
        self.find = None;
    }
}

/// Arguments of `visit_page`.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct VisitArgs {
    /// Absolute http(s) URL, or a URL relative to the current page.
    url: String,
}

/// Arguments of `find_on_page_ctrl_f`.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct FindArgs {
    /// Text to find: case and punctuation are ignored, `*` matches any run of text.
    search_string: String,
}

/// Arguments of `informational_web_search` and `navigational_web_search`.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct SearchArgs {
    /// The search query.
    query: String,
}

/// Longest search query accepted, in bytes.
pub const MAX_QUERY_BYTES: usize = 2048;

/// Arguments of tools that take none.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct NoArgs {}

#[derive(Clone, Copy)]
enum Action {
    Visit,
    Download,
    Search,
    Navigate,
    PageUp,
    PageDown,
    Find,
    FindNext,
}

struct BrowserTool {
    browser: Arc<Browser>,
    action: Action,
    descriptor: ToolDescriptor,
}

impl Browser {
    /// Builds the browser for `policy`.
    ///
    /// # Errors
    /// When the HTTP client cannot be built.
    pub fn new(policy: &BrowserPolicy) -> Result<Self, FetchError> {
        Ok(Self {
            fetcher: Fetcher::new(policy)?,
            viewport_size: policy.viewport_size,
            main_content: policy.main_content,
            extract: Arc::new(policy.extract.clone()),
            search: None,
            renderer: (policy.render.mode != render::RenderMode::Never).then(|| {
                Arc::new(render::Renderer::new(
                    policy.render.clone(),
                    Arc::new(ssrf::AddressGuard::new(
                        policy.allow.clone(),
                        policy.block.clone(),
                    )),
                ))
            }),
        })
    }

    /// The Chromium renderer, if the policy renders pages.
    pub fn renderer(&self) -> Option<&Arc<render::Renderer>> {
        self.renderer.as_ref()
    }

    /// Uses `search` for `informational_web_search` / `navigational_web_search` and for
    /// indexing fetched pages. Without it the search tools say search is not configured.
    pub fn set_search(&mut self, search: search::Search) {
        self.search = Some(Arc::new(search));
    }

    /// Registers the browser tools.
    ///
    /// # Errors
    /// When a tool name is already taken.
    pub fn register(
        self: &Arc<Self>,
        registry: &mut ToolRegistry,
    ) -> Result<(), crate::registry::DuplicateTool> {
        let read = Hints {
            read_only: true,
            idempotent: false,
            open_world: false,
            destructive: false,
        };
        let tools = [
            (
                Action::Visit,
                "visit_page",
                "Visit a web page by URL and show its first viewport of text, with a header \
                 `Address:`, `Title:` and `Viewport position: Showing page N of M.`. \
                 Links appear as [text](url) and can be visited in turn.",
                schema_for::<VisitArgs>(),
                Hints {
                    open_world: true,
                    ..read
                },
            ),
            (
                Action::Download,
                "download_file",
                "Download a file by URL (PDF, DOCX, XLSX/XLS, PPTX, CSV, JSON, XML/RSS, EPUB, \
                 ipynb, ZIP, HTML, text, images via OCR), save it in the session's scratch \
                 directory (where the Python tools can read it) and show its text like a \
                 page, with paging and find. The reply names the saved path.",
                schema_for::<VisitArgs>(),
                Hints {
                    open_world: true,
                    ..read
                },
            ),
            (
                Action::Search,
                "informational_web_search",
                "Search the web and show the results page: a heading with the query and \
                 the result count, then `N. [title](url)` and a snippet per result. Visit a \
                 result with visit_page.",
                schema_for::<SearchArgs>(),
                Hints {
                    open_world: true,
                    ..read
                },
            ),
            (
                Action::Navigate,
                "navigational_web_search",
                "Search the web and go straight to the first result, shown like visit_page. \
                 Use it to open a known page or site by name.",
                schema_for::<SearchArgs>(),
                Hints {
                    open_world: true,
                    ..read
                },
            ),
            (
                Action::PageUp,
                "page_up",
                "Scroll the current page up by one viewport and show it.",
                schema_for::<NoArgs>(),
                read,
            ),
            (
                Action::PageDown,
                "page_down",
                "Scroll the current page down by one viewport and show it.",
                schema_for::<NoArgs>(),
                read,
            ),
            (
                Action::Find,
                "find_on_page_ctrl_f",
                "Find text on the current page, like Ctrl+F, from the current viewport on \
                 (wrapping), and show the viewport holding the match. Case and punctuation are \
                 ignored; `*` matches any run of text. Says which match of how many is shown.",
                schema_for::<FindArgs>(),
                read,
            ),
            (
                Action::FindNext,
                "find_next",
                "Show the next match of the last find_on_page_ctrl_f search on the current \
                 page (wrapping around).",
                schema_for::<NoArgs>(),
                read,
            ),
        ];
        for (action, name, description, input_schema, hints) in tools {
            registry.register(Arc::new(BrowserTool {
                browser: self.clone(),
                action,
                descriptor: ToolDescriptor {
                    name: name.to_string(),
                    description: description.to_string(),
                    input_schema,
                    hints,
                    origin: Origin::Builtin,
                },
            }))?;
        }
        Ok(())
    }

    async fn visit(
        &self,
        st: &mut BrowserState,
        raw_url: &str,
        session: &crate::session::Session,
        download: bool,
    ) -> Result<ToolOutput, ToolError> {
        if raw_url.len() > MAX_URL_BYTES {
            return Err(ToolError::InvalidArguments(format!(
                "url: longer than {MAX_URL_BYTES} bytes"
            )));
        }
        let base = st
            .page
            .as_ref()
            .and_then(|p| url::Url::parse(&p.address).ok());
        let url = match url::Url::parse(raw_url.trim()) {
            Ok(u) => u,
            Err(url::ParseError::RelativeUrlWithoutBase) => match &base {
                Some(b) => b.join(raw_url.trim()).map_err(|e| {
                    ToolError::InvalidArguments(format!("url: cannot resolve `{raw_url}`: {e}"))
                })?,
                None => {
                    return Err(ToolError::InvalidArguments(format!(
                        "url: `{raw_url}` is relative and no page is open; give an absolute http(s) URL"
                    )));
                }
            },
            Err(e) => {
                return Err(ToolError::InvalidArguments(format!(
                    "url: `{raw_url}` is not a valid URL: {e}"
                )));
            }
        };
        let fetched = match self.fetcher.get(&url).await {
            Ok(f) => f,
            Err(FetchError::TooLarge { limit }) => {
                return Err(ToolError::ResourceExhausted(format!(
                    "{url}: response body exceeds browser.max_response_bytes = {limit} bytes"
                )));
            }
            Err(e @ FetchError::Refused(_)) => {
                tracing::info!(%url, error = %e, "visit refused");
                return Ok(ToolOutput::error(format!("Cannot visit {url}: {e}")));
            }
            Err(e) => return Ok(ToolOutput::error(format!("Cannot visit {url}: {e}"))),
        };
        let address = fetched.final_url.to_string();
        let kind = if download && fetched.status < 400 {
            ContentKind::Other
        } else {
            ContentKind::of(fetched.mime.as_deref(), &fetched.body)
        };
        let mut notes = Vec::new();
        let (title, text, hidden) = match kind {
            ContentKind::Html => {
                let html = fetch::decode_text(&fetched.body, fetched.charset.as_deref(), true);
                let base = fetched.final_url.clone();
                let mode = self.main_content;
                let rendered = tokio::task::spawn_blocking(move || {
                    convert::html_to_text_as(&html, Some(&base), mode)
                })
                .await
                .map_err(|e| ToolError::Internal(format!("HTML conversion task failed: {e}")))?;
                match rendered {
                    Ok(r) => {
                        self.maybe_render(&fetched, &html_of(&fetched), r, &mut notes)
                            .await
                    }
                    Err(e) => return Ok(ToolOutput::error(format!("Cannot show {address}: {e}"))),
                }
            }
            ContentKind::Text => {
                let text = fetch::decode_text(&fetched.body, fetched.charset.as_deref(), false);
                (None, text, Vec::new())
            }
            ContentKind::Other if fetched.status >= 400 => {
                let mime = fetched.mime.as_deref().unwrap_or("binary data");
                (
                    None,
                    format!("({mime} content, {} bytes)", fetched.body.len()),
                    Vec::new(),
                )
            }
            ContentKind::Other => match self.extract_file(&fetched, session).await? {
                Ok((file, note)) => {
                    notes.push(note);
                    (file.title, file.text, file.hidden)
                }
                Err(message) => return Ok(ToolOutput::error(message)),
            },
        };
        let failed = fetched.status >= 400;
        let (title, text, hidden) = if failed {
            let heading = format!("## Error {} {}\n\n", fetched.status, fetched.reason);
            let shift = heading.len();
            let hidden = hidden
                .into_iter()
                .map(|r| r.start + shift..r.end + shift)
                .collect();
            (
                title.or_else(|| Some(format!("Error {}", fetched.status))),
                heading + &text,
                hidden,
            )
        } else {
            (title, text, hidden)
        };
        let title = title.unwrap_or_else(|| fallback_title(&fetched.final_url));
        if !failed && let Some(search) = &self.search {
            search
                .record(&session.tenant().0, &address, &title, &text)
                .await;
        }
        st.set_page(Page::new(
            address.clone(),
            title,
            text,
            hidden,
            self.viewport_size,
        ));
        let now = Instant::now();
        if let Some((_, when)) = st.history.iter().rev().find(|(a, _)| *a == address) {
            notes.push(format!(
                "You previously visited this page {} seconds ago.",
                now.duration_since(*when).as_secs()
            ));
        }
        st.history.push((address, now));
        if st.history.len() > 1000 {
            st.history.remove(0);
        }
        let mut out = view(st, &notes);
        out.is_error = failed;
        Ok(out)
    }
}

impl Browser {
    /// Saves a fetched file into the session's scratch directory and converts it to text.
    /// The outer error is an internal failure; the inner `Err` is the message of a file that
    /// could not be shown (unsupported or corrupt type), which still names the saved path.
    async fn extract_file(
        &self,
        fetched: &fetch::Fetched,
        session: &crate::session::Session,
    ) -> Result<Result<(extract::Extracted, String), String>, ToolError> {
        let url = &fetched.final_url;
        let name = download::safe_name(url, fetched.disposition.as_deref());
        let kind = download::detect(
            url.path(),
            fetched.mime.as_deref(),
            fetched.disposition.as_deref(),
            &fetched.body,
        );
        let saved = match session.scratch_dir() {
            Ok(dir) => download::save(dir, &name, &fetched.body)
                .await
                .map_err(|e| format!("cannot save the file: {e}")),
            Err(e) => Err(format!("no scratch directory: {e}")),
        };
        let saved_note = match &saved {
            Ok(p) => format!(
                "Saved {} bytes ({}) to {}.",
                fetched.body.len(),
                kind.name(),
                p.display()
            ),
            Err(e) => format!("The file was not saved: {e}."),
        };
        let body = fetched.body.clone();
        let policy = self.extract.clone();
        let base = url.clone();
        let file_name = name.clone();
        let result = tokio::task::spawn_blocking(move || {
            if kind == extract::FileKind::Html {
                // Links resolve against the address, as for pages.
                extract::html(&body, Some(&base)).map(|mut e| {
                    e.text = e.text.trim().to_string();
                    e
                })
            } else {
                extract::extract(kind, &body, &file_name, &policy)
            }
        })
        .await
        .map_err(|e| ToolError::Internal(format!("file conversion task failed: {e}")))?;
        Ok(match result {
            Ok(mut file) => {
                if file.title.is_none() {
                    file.title = Some(name);
                }
                Ok((file, saved_note))
            }
            Err(e) => {
                tracing::info!(%url, kind = kind.name(), error = %e, "file not converted");
                Err(format!(
                    "The address {url} holds a {} file, which sibyl cannot show as text: {e}. \
                     {saved_note} The current page is unchanged.",
                    kind.name()
                ))
            }
        })
    }
}

/// The title, text and hidden ranges of a converted page (an article view carries its
/// note of what was omitted at the end of its text).
fn shown(r: convert::Rendered) -> (Option<String>, String, Vec<Range<usize>>) {
    (r.title, r.text, r.hidden)
}

fn html_of(fetched: &fetch::Fetched) -> String {
    fetch::decode_text(&fetched.body, fetched.charset.as_deref(), true)
}

impl Browser {
    /// Re-renders an HTML page with Chromium when the policy says so (`always`, or `auto`
    /// for a page with scripts and little text); keeps the plain conversion, with a note, if
    /// rendering fails.
    async fn maybe_render(
        &self,
        fetched: &fetch::Fetched,
        html: &str,
        plain: convert::Rendered,
        notes: &mut Vec<String>,
    ) -> (Option<String>, String, Vec<Range<usize>>) {
        let Some(renderer) = &self.renderer else {
            return shown(plain);
        };
        let p = renderer.policy();
        let wanted = match p.mode {
            render::RenderMode::Never => false,
            render::RenderMode::Always => fetched.status < 400,
            render::RenderMode::Auto => {
                fetched.status < 400
                    && html.to_ascii_lowercase().contains("<script")
                    && plain.text.chars().count() < p.min_text_chars
            }
        };
        if !wanted {
            return shown(plain);
        }
        let started = Instant::now();
        match renderer.render(&fetched.final_url).await {
            Ok(dom) => {
                let base = fetched.final_url.clone();
                let mode = self.main_content;
                let converted = tokio::task::spawn_blocking(move || {
                    convert::html_to_text_as(&dom, Some(&base), mode)
                })
                .await;
                match converted {
                    Ok(Ok(mut r)) => {
                        tracing::debug!(url = %fetched.final_url, ms = started.elapsed().as_millis() as u64, "rendered with Chromium");
                        r.title = r.title.or(plain.title);
                        shown(r)
                    }
                    _ => shown(plain),
                }
            }
            Err(e) => {
                tracing::info!(url = %fetched.final_url, error = %e, "render failed");
                notes.push(format!(
                    "JavaScript rendering failed ({e}); showing the page as fetched."
                ));
                shown(plain)
            }
        }
    }

    /// Runs a search; shows the results page, or (navigational) visits the first result.
    async fn search(
        &self,
        st: &mut BrowserState,
        query: &str,
        session: &crate::session::Session,
        navigate: bool,
    ) -> Result<ToolOutput, ToolError> {
        let Some(search) = &self.search else {
            return Ok(ToolOutput::error(
                "Web search is not configured on this server ([search] in the policy).",
            ));
        };
        let provider = search.provider().name();
        let hits = match search.search(&session.tenant().0, query).await {
            Ok(h) => h,
            Err(e) => {
                tracing::info!(provider, error = %e, "search failed");
                return Ok(ToolOutput::error(format!(
                    "The web search for '{query}' failed: {e}"
                )));
            }
        };
        if navigate {
            let Some(first) = hits.first() else {
                return Ok(ToolOutput::error(format!(
                    "The web search for '{query}' found no results, so there is no page to go to."
                )));
            };
            // Documents of the embedded folder are shown from the index (file:// is not
            // fetched by the browser).
            if first.url.starts_with("file://") {
                let Some((title, text)) = search.stored_document(&first.url).await else {
                    return Ok(ToolOutput::error(format!(
                        "The first result {} is no longer in the index.",
                        first.url
                    )));
                };
                st.set_page(Page::new(
                    first.url.clone(),
                    title,
                    text,
                    Vec::new(),
                    self.viewport_size,
                ));
                st.history.push((first.url.clone(), Instant::now()));
                return Ok(view(st, &[]));
            }
            let url = first.url.clone();
            return self.visit(st, &url, session, false).await;
        }
        let text = search::results_page(query, &hits);
        let address = format!("search: {query}");
        st.set_page(Page::new(
            address.clone(),
            format!("{query} - Search"),
            text,
            Vec::new(),
            usize::MAX,
        ));
        st.history.push((address, Instant::now()));
        let mut out = view(st, &[]);
        if let Some(obj) = out.structured.as_mut().and_then(|v| v.as_object_mut()) {
            obj.insert("provider".into(), provider.into());
            obj.insert(
                "results".into(),
                serde_json::to_value(&hits).unwrap_or_default(),
            );
        }
        Ok(out)
    }
}

/// How a response body is shown.
enum ContentKind {
    Html,
    Text,
    Other,
}

impl ContentKind {
    fn of(mime: Option<&str>, body: &[u8]) -> Self {
        match mime {
            Some("text/html" | "application/xhtml+xml") => Self::Html,
            Some(m)
                if m.starts_with("text/")
                    || m == "application/json"
                    || m.ends_with("+json")
                    || m == "application/xml"
                    || m.ends_with("+xml")
                    || m == "application/javascript" =>
            {
                Self::Text
            }
            Some(_) => Self::Other,
            None => {
                let head = &body[..body.len().min(1024)];
                if head.contains(&0) {
                    Self::Other
                } else {
                    let lower = String::from_utf8_lossy(head).to_ascii_lowercase();
                    let t = lower.trim_start();
                    if t.starts_with("<!doctype html")
                        || t.starts_with("<html")
                        || lower.contains("<body")
                    {
                        Self::Html
                    } else {
                        Self::Text
                    }
                }
            }
        }
    }
}

fn fallback_title(url: &url::Url) -> String {
    url.path_segments()
        .and_then(|mut s| s.next_back().map(str::to_string))
        .filter(|s| !s.is_empty())
        .or_else(|| url.host_str().map(str::to_string))
        .unwrap_or_else(|| url.to_string())
}

/// The reply for the current viewport, with optional notes under the position line.
fn view(st: &BrowserState, notes: &[String]) -> ToolOutput {
    let Some(page) = &st.page else {
        return no_page();
    };
    let idx = st.viewport.min(page.pages.len().saturating_sub(1));
    let range = page.pages.get(idx).cloned().unwrap_or(0..0);
    let text = viewport::render_view(
        &page.address,
        &page.title,
        notes,
        idx,
        page.pages.len(),
        &page.text[range],
    );
    let mut structured = serde_json::json!({
        "address": page.address,
        "title": page.title,
        "viewport": idx + 1,
        "viewports": page.pages.len(),
    });
    if let Some(f) = &st.find
        && let Some(obj) = structured.as_object_mut()
    {
        obj.insert("query".into(), f.query.clone().into());
        obj.insert("match".into(), (f.current + 1).into());
        obj.insert("matches".into(), f.matches.len().into());
    }
    ToolOutput::text(text).with_structured(structured)
}

fn no_page() -> ToolOutput {
    ToolOutput::error("No page is open in this session: call visit_page first.")
}

/// Moves to match `i` of the current search and renders it.
fn show_match(st: &mut BrowserState) -> ToolOutput {
    let (Some(page), Some(f)) = (&st.page, &st.find) else {
        return no_page();
    };
    let m = f.matches[f.current].clone();
    let first = viewport::page_of(&page.pages, m.start);
    let last = viewport::page_of(&page.pages, m.end.saturating_sub(1).max(m.start));
    let mut note = format!(
        "Search: showing match {} of {} for '{}'.",
        f.current + 1,
        f.matches.len(),
        f.query
    );
    if last > first {
        note.push_str(&format!(" The match continues on page {}.", last + 1));
    }
    st.viewport = first;
    view(st, &[note])
}

#[async_trait::async_trait]
impl Tool for BrowserTool {
    fn descriptor(&self) -> &ToolDescriptor {
        &self.descriptor
    }

    async fn call(
        &self,
        ctx: CallContext,
        args: serde_json::Value,
    ) -> Result<ToolOutput, ToolError> {
        // Parse before touching state, so bad arguments change nothing.
        let (visit, find) = match self.action {
            Action::Visit | Action::Download => (Some(parse_args::<VisitArgs>(args)?.url), None),
            Action::Search | Action::Navigate => {
                let q = parse_args::<SearchArgs>(args)?.query;
                if q.trim().is_empty() {
                    return Err(ToolError::InvalidArguments(
                        "query: must not be empty".into(),
                    ));
                }
                if q.len() > MAX_QUERY_BYTES {
                    return Err(ToolError::InvalidArguments(format!(
                        "query: longer than {MAX_QUERY_BYTES} bytes"
                    )));
                }
                (Some(q), None)
            }
            Action::Find => (None, Some(parse_args::<FindArgs>(args)?.search_string)),
            _ => {
                parse_args::<NoArgs>(args)?;
                (None, None)
            }
        };
        let mut guard = ctx.session.state.lock().await;
        let st = guard.get_or_default::<BrowserState>();
        match self.action {
            Action::Visit | Action::Download => {
                self.browser
                    .visit(
                        st,
                        visit.as_deref().unwrap_or_default(),
                        &ctx.session,
                        matches!(self.action, Action::Download),
                    )
                    .await
            }
            Action::Search | Action::Navigate => {
                self.browser
                    .search(
                        st,
                        visit.as_deref().unwrap_or_default().trim(),
                        &ctx.session,
                        matches!(self.action, Action::Navigate),
                    )
                    .await
            }
            Action::PageUp | Action::PageDown => {
                let Some(page) = &st.page else {
                    return Ok(no_page());
                };
                let last = page.pages.len().saturating_sub(1);
                st.viewport = match self.action {
                    Action::PageUp => st.viewport.saturating_sub(1),
                    _ => (st.viewport + 1).min(last),
                };
                Ok(view(st, &[]))
            }
            Action::Find => {
                let query = find.unwrap_or_default();
                let compiled = find::compile_query(&query)
                    .map_err(|e| ToolError::InvalidArguments(format!("search_string: {e}")))?;
                let Some(page) = &st.page else {
                    return Ok(no_page());
                };
                // As AutoGen: the same query again, while its match is shown, is find_next.
                if let Some(f) = &mut st.find
                    && f.query == query
                    && !f.matches.is_empty()
                    && viewport::page_of(&page.pages, f.matches[f.current].start) == st.viewport
                {
                    f.current = (f.current + 1) % f.matches.len();
                    return Ok(show_match(st));
                }
                let matches = page.index().find_compiled(&compiled);
                if matches.is_empty() {
                    st.find = None;
                    return Ok(ToolOutput::text(format!(
                        "The search string '{query}' was not found on this page."
                    )));
                }
                let from = page.pages.get(st.viewport).map(|r| r.start).unwrap_or(0);
                let current = matches.iter().position(|m| m.start >= from).unwrap_or(0);
                st.find = Some(FindState {
                    query,
                    matches,
                    current,
                });
                Ok(show_match(st))
            }
            Action::FindNext => {
                if st.page.is_none() {
                    return Ok(no_page());
                }
                let Some(f) = &mut st.find else {
                    return Ok(ToolOutput::error(
                        "There is no search on this page to continue: call find_on_page_ctrl_f first.",
                    ));
                };
                f.current = (f.current + 1) % f.matches.len();
                Ok(show_match(st))
            }
        }
    }
}
