//! DuckDuckGo's HTML endpoint: `POST {ddg_url}` with form `q=...` answers an HTML page whose
//! results are `<a class="result__a" href="//duckduckgo.com/l/?uddg=<encoded url>&...">title</a>`
//! followed by `<a class="result__snippet" ...>snippet</a>`; ads carry `result--ad`. The page
//! is parsed with linear-time regexes, the redirect wrapper is removed. A page with neither
//! results nor DDG's "No results" marker is reported as garbage (e.g. a CAPTCHA page).

use std::sync::LazyLock;

use regex::Regex;

use super::{Hit, Search, SearchError, http_error, plain};

const NAME: &str = "ddg";

static RESULT: LazyLock<Option<Regex>> = LazyLock::new(|| {
    Regex::new(r#"(?s)<a[^>]*class="[^"]*result__a[^"]*"[^>]*href="([^"]*)"[^>]*>(.*?)</a>"#).ok()
});
static RESULT_HREF_FIRST: LazyLock<Option<Regex>> = LazyLock::new(|| {
    Regex::new(r#"(?s)<a[^>]*href="([^"]*)"[^>]*class="[^"]*result__a[^"]*"[^>]*>(.*?)</a>"#).ok()
});
static SNIPPET: LazyLock<Option<Regex>> = LazyLock::new(|| {
    Regex::new(r#"(?s)class="[^"]*result__snippet[^"]*"[^>]*>(.*?)</(?:a|td|div)>"#).ok()
});

/// Searches DuckDuckGo.
///
/// # Errors
/// [`SearchError`] for a timeout, an HTTP error or a page without results markup.
pub async fn search(s: &Search, query: &str, n: usize) -> Result<Vec<Hit>, SearchError> {
    let req = s
        .http()
        .post(s.policy().ddg_url.clone())
        .header(
            reqwest::header::CONTENT_TYPE,
            "application/x-www-form-urlencoded",
        )
        .body(
            url::form_urlencoded::Serializer::new(String::new())
                .append_pair("q", query)
                .append_pair("kl", "wt-wt")
                .finish(),
        );
    let (status, body) = s.fetch(NAME, req).await?;
    if !(200..300).contains(&status) {
        return Err(http_error(NAME, status, &body));
    }
    parse(&body, n)
}

/// Parses a DDG HTML results page.
///
/// # Errors
/// [`SearchError::Garbage`] when the page has no results markup and no "No results" note.
pub fn parse(body: &str, n: usize) -> Result<Vec<Hit>, SearchError> {
    let (Some(result), Some(alt), Some(snippet)) = (
        RESULT.as_ref(),
        RESULT_HREF_FIRST.as_ref(),
        SNIPPET.as_ref(),
    ) else {
        return Err(SearchError::Garbage {
            provider: NAME,
            message: "internal pattern error".into(),
        });
    };
    // Split into result blocks so snippets pair with their links; skip ads.
    let mut hits = Vec::new();
    for block in body.split("class=\"result ").skip(1) {
        if hits.len() >= n {
            break;
        }
        let head: String = block.chars().take(200).collect();
        if head.contains("result--ad") {
            continue;
        }
        let Some(c) = result.captures(block).or_else(|| alt.captures(block)) else {
            continue;
        };
        let href =
            html_escape::decode_html_entities(c.get(1).map_or("", |m| m.as_str())).into_owned();
        let Some(url) = unwrap_redirect(&href) else {
            continue;
        };
        if hits.iter().any(|h: &Hit| h.url == url) {
            continue;
        }
        let title = plain(c.get(2).map_or("", |m| m.as_str()));
        let snip = snippet
            .captures(block)
            .and_then(|m| m.get(1))
            .map(|m| plain(m.as_str()))
            .unwrap_or_default();
        hits.push(Hit {
            title,
            url,
            snippet: snip,
        });
    }
    if hits.is_empty() && !body.contains("No results") && !body.contains("no-results") {
        return Err(SearchError::Garbage {
            provider: NAME,
            message: format!(
                "no result links in the page (a CAPTCHA or changed layout?); page starts `{}`",
                body.chars().take(80).collect::<String>()
            ),
        });
    }
    Ok(hits)
}

/// `//duckduckgo.com/l/?uddg=https%3A%2F%2F...&rut=...` -> the target; plain http(s) links
/// pass through.
fn unwrap_redirect(href: &str) -> Option<String> {
    let abs = if href.starts_with("//") {
        format!("https:{href}")
    } else {
        href.to_string()
    };
    let u = url::Url::parse(&abs).ok()?;
    if u.path().starts_with("/l/")
        && let Some((_, v)) = u.query_pairs().find(|(k, _)| k == "uddg")
    {
        let t = url::Url::parse(&v).ok()?;
        return matches!(t.scheme(), "http" | "https").then(|| t.to_string());
    }
    if u.host_str().is_some_and(|h| h.ends_with("duckduckgo.com")) {
        return None;
    }
    matches!(u.scheme(), "http" | "https").then(|| u.to_string())
}
