//! SearXNG's JSON API: `GET {searxng_url}/search?q=...&format=json` answers
//! `{"query": ..., "results": [{"url", "title", "content", ...}], ...}` (the instance must
//! enable the `json` format in its `settings.yml`).

use serde::Deserialize;

use super::{Hit, Search, SearchError, http_error, json, plain};

const NAME: &str = "searxng";

#[derive(Deserialize)]
struct Answer {
    results: Vec<Item>,
}

#[derive(Deserialize)]
struct Item {
    url: String,
    #[serde(default)]
    title: String,
    #[serde(default)]
    content: Option<String>,
}

/// Searches SearXNG.
///
/// # Errors
/// [`SearchError`] for a missing URL, a timeout, an HTTP error or a non-JSON answer.
pub async fn search(s: &Search, query: &str, n: usize) -> Result<Vec<Hit>, SearchError> {
    let Some(base) = &s.policy().searxng_url else {
        return Err(SearchError::Config {
            provider: NAME,
            message: "search.searxng_url is empty".into(),
        });
    };
    let url = base.join("search").map_err(|e| SearchError::Config {
        provider: NAME,
        message: e.to_string(),
    })?;
    let req = s
        .http()
        .get(super::with_query(&url, &[("q", query), ("format", "json")]))
        .header(reqwest::header::ACCEPT, "application/json");
    let (status, body) = s.fetch(NAME, req).await?;
    if !(200..300).contains(&status) {
        return Err(http_error(NAME, status, &body));
    }
    let a: Answer = json(NAME, &body)?;
    Ok(a.results
        .into_iter()
        .take(n)
        .map(|i| Hit {
            title: plain(&i.title),
            url: i.url,
            snippet: plain(i.content.as_deref().unwrap_or("")),
        })
        .collect())
}
