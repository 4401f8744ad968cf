//! Web search for `informational_web_search` and `navigational_web_search`.
//!
//! One provider is selected by `[search] provider` in the policy:
//! - `embedded` (default, offline): a tantivy full-text index over `[search] folder` (every
//!   convertible document below it, indexed at start in the background) and over every page
//!   the browser fetches (`index_fetched_pages`). Fetched pages are only found again by
//!   sessions of the tenant that fetched them; folder documents are found by everyone.
//! - `searxng`: a self-hosted SearXNG instance's JSON API (`/search?format=json`).
//! - `brave`: the Brave Search API (`X-Subscription-Token` from `$BRAVE_SEARCH_API_KEY`).
//! - `google`: Google Programmable Search (Custom Search JSON API; `$GOOGLE_API_KEY` and
//!   `$GOOGLE_CSE_ID`).
//! - `ddg`: DuckDuckGo's HTML endpoint (no key).
//!
//! The result page follows Sibyl's (AutoGen's Bing page): `## A web search for '<query>'
//! found N results:` then `N. [title](url)` and the snippet per result, never split into
//! viewports. Web results are cached per `cache_ttl_secs`. Provider failures (timeouts, HTTP
//! errors, unparseable answers) are clear errors naming the provider.

pub mod brave;
pub mod ddg;
pub mod google;
pub mod index;
pub mod searxng;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde::Deserialize;

use crate::policy::PolicyError;

/// One search result.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Hit {
    /// Result title (plain text).
    pub title: String,
    /// Result address.
    pub url: String,
    /// Text around the match (plain text).
    pub snippet: String,
}

/// Why a search failed.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum SearchError {
    /// The provider is not configured (missing URL or key).
    #[error("{provider} is not configured: {message}")]
    Config {
        /// Provider name.
        provider: &'static str,
        /// What is missing.
        message: String,
    },
    /// No answer within `search.timeout_ms`.
    #[error("{provider} did not answer within {ms} ms (search.timeout_ms)")]
    Timeout {
        /// Provider name.
        provider: &'static str,
        /// The limit in milliseconds.
        ms: u128,
    },
    /// A non-success HTTP status.
    #[error("{provider} answered HTTP {status}: {message}")]
    Http {
        /// Provider name.
        provider: &'static str,
        /// Status code.
        status: u16,
        /// The provider's error message or the start of the body.
        message: String,
    },
    /// The answer was not in the provider's format.
    #[error("{provider} sent an answer that is not in its result format: {message}")]
    Garbage {
        /// Provider name.
        provider: &'static str,
        /// What was wrong.
        message: String,
    },
    /// Connection failure.
    #[error("cannot reach {provider}: {message}")]
    Network {
        /// Provider name.
        provider: &'static str,
        /// The cause.
        message: String,
    },
    /// The embedded index failed.
    #[error("embedded search index: {0}")]
    Index(String),
}

/// `[search]` as written in the policy file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RawSearchPolicy {
    /// `embedded`, `searxng`, `brave`, `google` or `ddg`.
    pub provider: String,
    /// Results per search (1..=50; Google allows at most 10 per request).
    pub max_results: u64,
    /// Provider request timeout in milliseconds.
    pub timeout_ms: u64,
    /// Seconds a web provider's results are reused for the same query; 0 turns caching off.
    pub cache_ttl_secs: u64,
    /// Folder of documents indexed by the embedded provider at start; empty for none.
    pub folder: String,
    /// Whether pages fetched by the browser are added to the embedded index.
    pub index_fetched_pages: bool,
    /// Most documents the embedded index takes from the folder.
    pub max_folder_files: u64,
    /// SearXNG base URL, e.g. `http://127.0.0.1:8888`.
    pub searxng_url: String,
    /// Brave Search API endpoint.
    pub brave_url: String,
    /// Google Custom Search JSON API endpoint.
    pub google_url: String,
    /// DuckDuckGo HTML endpoint.
    pub ddg_url: String,
    /// Environment variable holding the Brave API key.
    pub brave_key_env: String,
    /// Environment variable holding the Google API key.
    pub google_key_env: String,
    /// Environment variable holding the Google search engine id (`cx`).
    pub google_cx_env: String,
}

impl Default for RawSearchPolicy {
    fn default() -> Self {
        Self {
            provider: "embedded".into(),
            max_results: 10,
            timeout_ms: 10_000,
            cache_ttl_secs: 3600,
            folder: String::new(),
            index_fetched_pages: true,
            max_folder_files: 100_000,
            searxng_url: String::new(),
            brave_url: "https://api.search.brave.com/res/v1/web/search".into(),
            google_url: "https://www.googleapis.com/customsearch/v1".into(),
            ddg_url: "https://html.duckduckgo.com/html/".into(),
            brave_key_env: "BRAVE_SEARCH_API_KEY".into(),
            google_key_env: "GOOGLE_API_KEY".into(),
            google_cx_env: "GOOGLE_CSE_ID".into(),
        }
    }
}

/// The search provider in use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProviderKind {
    /// The embedded tantivy index.
    Embedded,
    /// SearXNG JSON API.
    Searxng,
    /// Brave Search API.
    Brave,
    /// Google Programmable Search.
    Google,
    /// DuckDuckGo HTML.
    Ddg,
}

impl ProviderKind {
    /// The policy name, e.g. `brave`.
    pub fn name(self) -> &'static str {
        match self {
            Self::Embedded => "embedded",
            Self::Searxng => "searxng",
            Self::Brave => "brave",
            Self::Google => "google",
            Self::Ddg => "ddg",
        }
    }
}

/// Checked `[search]` section.
#[derive(Debug, Clone)]
pub struct SearchPolicy {
    /// The provider.
    pub provider: ProviderKind,
    /// Results per search.
    pub max_results: usize,
    /// Provider request timeout.
    pub timeout: Duration,
    /// Cache lifetime of web results; zero for no cache.
    pub cache_ttl: Duration,
    /// Folder indexed by the embedded provider.
    pub folder: Option<PathBuf>,
    /// Add fetched pages to the embedded index.
    pub index_fetched_pages: bool,
    /// Most folder documents indexed.
    pub max_folder_files: usize,
    /// SearXNG base URL.
    pub searxng_url: Option<url::Url>,
    /// Brave endpoint.
    pub brave_url: url::Url,
    /// Google endpoint.
    pub google_url: url::Url,
    /// DuckDuckGo endpoint.
    pub ddg_url: url::Url,
    /// Environment variable of the Brave key.
    pub brave_key_env: String,
    /// Environment variable of the Google key.
    pub google_key_env: String,
    /// Environment variable of the Google engine id.
    pub google_cx_env: String,
}

impl SearchPolicy {
    /// Checks the raw section.
    ///
    /// # Errors
    /// [`PolicyError::Invalid`] naming the `search.*` key.
    pub fn check(raw: &RawSearchPolicy, origin: &str) -> Result<Self, PolicyError> {
        let bad = |key: &str, message: String| PolicyError::Invalid {
            origin: origin.to_string(),
            key: format!("search.{key}"),
            message,
        };
        let range = |key: &str, v: u64, lo: u64, hi: u64| {
            if (lo..=hi).contains(&v) {
                Ok(v)
            } else {
                Err(bad(key, format!("must be between {lo} and {hi}, got {v}")))
            }
        };
        let provider = match raw.provider.trim() {
            "embedded" => ProviderKind::Embedded,
            "searxng" => ProviderKind::Searxng,
            "brave" => ProviderKind::Brave,
            "google" => ProviderKind::Google,
            "ddg" | "duckduckgo" => ProviderKind::Ddg,
            other => {
                return Err(bad(
                    "provider",
                    format!("must be embedded, searxng, brave, google or ddg, got `{other}`"),
                ));
            }
        };
        let http = |key: &str, v: &str| -> Result<url::Url, PolicyError> {
            let u =
                url::Url::parse(v.trim()).map_err(|e| bad(key, format!("not a URL `{v}`: {e}")))?;
            if !matches!(u.scheme(), "http" | "https") {
                return Err(bad(key, format!("must be an http(s) URL, got `{v}`")));
            }
            Ok(u)
        };
        let searxng_url = if raw.searxng_url.trim().is_empty() {
            if provider == ProviderKind::Searxng {
                return Err(bad(
                    "searxng_url",
                    "must be set when provider = \"searxng\"".into(),
                ));
            }
            None
        } else {
            Some(http("searxng_url", &raw.searxng_url)?)
        };
        let folder = raw.folder.trim();
        let folder = if folder.is_empty() {
            None
        } else if !std::path::Path::new(folder).is_absolute() {
            return Err(bad(
                "folder",
                format!("must be an absolute path, got `{folder}`"),
            ));
        } else {
            Some(PathBuf::from(folder))
        };
        let to_usize = |v: u64| usize::try_from(v).unwrap_or(usize::MAX);
        let env_name = |key: &str, v: &str| -> Result<String, PolicyError> {
            let v = v.trim();
            if v.is_empty() || !v.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
                return Err(bad(
                    key,
                    format!("must be an environment variable name, got `{v}`"),
                ));
            }
            Ok(v.to_string())
        };
        Ok(Self {
            provider,
            max_results: to_usize(range("max_results", raw.max_results, 1, 50)?),
            timeout: Duration::from_millis(range("timeout_ms", raw.timeout_ms, 10, 120_000)?),
            cache_ttl: Duration::from_secs(range(
                "cache_ttl_secs",
                raw.cache_ttl_secs,
                0,
                30 * 24 * 3600,
            )?),
            folder,
            index_fetched_pages: raw.index_fetched_pages,
            max_folder_files: to_usize(range(
                "max_folder_files",
                raw.max_folder_files,
                0,
                10_000_000,
            )?),
            searxng_url,
            brave_url: http("brave_url", &raw.brave_url)?,
            google_url: http("google_url", &raw.google_url)?,
            ddg_url: http("ddg_url", &raw.ddg_url)?,
            brave_key_env: env_name("brave_key_env", &raw.brave_key_env)?,
            google_key_env: env_name("google_key_env", &raw.google_key_env)?,
            google_cx_env: env_name("google_cx_env", &raw.google_cx_env)?,
        })
    }
}

/// The search service shared by every session.
pub struct Search {
    policy: SearchPolicy,
    index: index::EmbeddedIndex,
    http: reqwest::Client,
    cache: Mutex<HashMap<String, (Instant, Vec<Hit>)>>,
}

/// Most cached queries kept.
const CACHE_ENTRIES: usize = 1024;
/// Largest provider answer read, in bytes.
const MAX_ANSWER_BYTES: usize = 5 << 20;

impl Search {
    /// Builds the service; starts indexing `policy.folder` in the background.
    ///
    /// # Errors
    /// [`SearchError::Index`] if the index cannot be created; [`SearchError::Network`] if
    /// the HTTP client cannot be built.
    pub fn new(
        policy: &SearchPolicy,
        extract: &crate::browser::extract::ExtractPolicy,
        user_agent: &str,
    ) -> Result<Self, SearchError> {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let http = reqwest::Client::builder()
            .user_agent(user_agent.to_string())
            .timeout(policy.timeout)
            .connect_timeout(policy.timeout)
            .redirect(reqwest::redirect::Policy::limited(3))
            .no_proxy()
            .build()
            .map_err(|e| SearchError::Network {
                provider: policy.provider.name(),
                message: format!("cannot build HTTP client: {e}"),
            })?;
        let index = index::EmbeddedIndex::new()?;
        if let Some(folder) = &policy.folder {
            index.index_folder(folder.clone(), policy.max_folder_files, extract.clone());
        } else {
            index.mark_ready();
        }
        Ok(Self {
            policy: policy.clone(),
            index,
            http,
            cache: Mutex::new(HashMap::new()),
        })
    }

    /// The provider in use.
    pub fn provider(&self) -> ProviderKind {
        self.policy.provider
    }

    /// Adds a fetched page to the embedded index (if the policy says so), visible to
    /// `tenant` only.
    pub async fn record(&self, tenant: &str, url: &str, title: &str, text: &str) {
        if self.policy.index_fetched_pages {
            self.index.add_page(tenant, url, title, text).await;
        }
    }

    /// Text of an embedded folder document by its `file://` address, if indexed.
    pub async fn stored_document(&self, url: &str) -> Option<(String, String)> {
        self.index.stored(url).await
    }

    /// Searches with the configured provider.
    ///
    /// # Errors
    /// [`SearchError`] naming the provider.
    pub async fn search(&self, tenant: &str, query: &str) -> Result<Vec<Hit>, SearchError> {
        let n = self.policy.max_results;
        let p = self.policy.provider;
        if p == ProviderKind::Embedded {
            return self.index.search(tenant, query, n).await;
        }
        let key = format!("{}\u{0}{n}\u{0}{query}", p.name());
        if !self.policy.cache_ttl.is_zero()
            && let Ok(c) = self.cache.lock()
            && let Some((at, hits)) = c.get(&key)
            && at.elapsed() < self.policy.cache_ttl
        {
            return Ok(hits.clone());
        }
        let hits = match p {
            ProviderKind::Searxng => searxng::search(self, query, n).await?,
            ProviderKind::Brave => brave::search(self, query, n).await?,
            ProviderKind::Google => google::search(self, query, n).await?,
            ProviderKind::Ddg => ddg::search(self, query, n).await?,
            ProviderKind::Embedded => Vec::new(),
        };
        if !self.policy.cache_ttl.is_zero()
            && let Ok(mut c) = self.cache.lock()
        {
            if c.len() >= CACHE_ENTRIES {
                let ttl = self.policy.cache_ttl;
                c.retain(|_, (at, _)| at.elapsed() < ttl);
                if c.len() >= CACHE_ENTRIES {
                    c.clear();
                }
            }
            c.insert(key, (Instant::now(), hits.clone()));
        }
        Ok(hits)
    }

    /// GETs `req` and returns the body text, mapping failures to [`SearchError`].
    pub(crate) async fn fetch(
        &self,
        provider: &'static str,
        req: reqwest::RequestBuilder,
    ) -> Result<(u16, String), SearchError> {
        let timeout = self.policy.timeout;
        let fut = async {
            let mut resp = req
                .send()
                .await
                .map_err(|e| map_err(provider, timeout, e))?;
            let status = resp.status().as_u16();
            let mut body = Vec::new();
            while let Some(chunk) = resp
                .chunk()
                .await
                .map_err(|e| map_err(provider, timeout, e))?
            {
                if body.len() + chunk.len() > MAX_ANSWER_BYTES {
                    return Err(SearchError::Garbage {
                        provider,
                        message: format!("answer larger than {MAX_ANSWER_BYTES} bytes"),
                    });
                }
                body.extend_from_slice(&chunk);
            }
            Ok((status, String::from_utf8_lossy(&body).into_owned()))
        };
        match tokio::time::timeout(timeout + Duration::from_millis(500), fut).await {
            Ok(r) => r,
            Err(_) => Err(SearchError::Timeout {
                provider,
                ms: timeout.as_millis(),
            }),
        }
    }

    pub(crate) fn policy(&self) -> &SearchPolicy {
        &self.policy
    }

    pub(crate) fn http(&self) -> &reqwest::Client {
        &self.http
    }
}

fn map_err(provider: &'static str, timeout: Duration, e: reqwest::Error) -> SearchError {
    if e.is_timeout() {
        return SearchError::Timeout {
            provider,
            ms: timeout.as_millis(),
        };
    }
    let mut msg = e.to_string();
    let mut src = std::error::Error::source(&e);
    while let Some(s) = src {
        msg = format!("{msg}: {s}");
        src = s.source();
    }
    SearchError::Network {
        provider,
        message: msg,
    }
}

/// `base` with `pairs` appended to its query string (form-encoded).
pub(crate) fn with_query(base: &url::Url, pairs: &[(&str, &str)]) -> url::Url {
    let mut u = base.clone();
    {
        let mut q = u.query_pairs_mut();
        for (k, v) in pairs {
            q.append_pair(k, v);
        }
    }
    u
}

/// Non-2xx status to a [`SearchError::Http`] with the start of the body.
pub(crate) fn http_error(provider: &'static str, status: u16, body: &str) -> SearchError {
    let message: String = body.chars().take(300).collect();
    SearchError::Http {
        provider,
        status,
        message: message.trim().to_string(),
    }
}

/// Parses a JSON answer, or a [`SearchError::Garbage`].
pub(crate) fn json<T: serde::de::DeserializeOwned>(
    provider: &'static str,
    body: &str,
) -> Result<T, SearchError> {
    serde_json::from_str(body).map_err(|e| SearchError::Garbage {
        provider,
        message: format!(
            "{e} (answer starts `{}`)",
            body.chars().take(80).collect::<String>()
        ),
    })
}

/// Strips HTML tags and decodes entities (snippets from Brave, Google and DDG carry `<b>`).
pub fn plain(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut in_tag = false;
    for c in s.chars() {
        match c {
            '<' => in_tag = true,
            '>' if in_tag => in_tag = false,
            c if !in_tag => out.push(c),
            _ => {}
        }
    }
    let decoded = html_escape::decode_html_entities(&out).into_owned();
    decoded.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The results page text, as Sibyl's: a heading with the query and count, then
/// `N. [title](url)` and the snippet per result.
pub fn results_page(query: &str, hits: &[Hit]) -> String {
    let mut out = format!(
        "## A web search for '{query}' found {} results:\n\n",
        hits.len()
    );
    for (i, h) in hits.iter().enumerate() {
        let title = if h.title.is_empty() { &h.url } else { &h.title };
        out.push_str(&format!(
            "{}. [{}]({})\n{}\n\n",
            i + 1,
            title.replace(['[', ']'], ""),
            h.url,
            h.snippet
        ));
    }
    out.trim_end().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn policy_is_checked() {
        let d = SearchPolicy::check(&RawSearchPolicy::default(), "t").expect("default");
        assert_eq!(d.provider, ProviderKind::Embedded);
        let e = SearchPolicy::check(
            &RawSearchPolicy {
                provider: "bing".into(),
                ..Default::default()
            },
            "t",
        )
        .expect_err("bing");
        assert!(e.to_string().contains("search.provider"), "{e}");
        let e = SearchPolicy::check(
            &RawSearchPolicy {
                provider: "searxng".into(),
                ..Default::default()
            },
            "t",
        )
        .expect_err("no url");
        assert!(e.to_string().contains("search.searxng_url"), "{e}");
    }

    #[test]
    fn snippets_are_plain() {
        assert_eq!(
            plain("<b>Rust</b> &amp; <i>tantivy</i>\n x"),
            "Rust & tantivy x"
        );
    }
}
