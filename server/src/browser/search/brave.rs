//! The Brave Search API: `GET {brave_url}?q=...&count=N` with header
//! `X-Subscription-Token` (the key from `$BRAVE_SEARCH_API_KEY`, see `search.brave_key_env`) answers
//! `{"type": "search", "web": {"results": [{"title", "url", "description"}]}}`; errors are
//! `{"type": "ErrorResponse", "error": {"detail": ...}}` with a 4xx status.

use serde::Deserialize;

use super::{Hit, Search, SearchError, http_error, json, plain, with_query};

const NAME: &str = "brave";

#[derive(Deserialize)]
struct Answer {
    #[serde(default)]
    web: Option<Web>,
    #[serde(rename = "type")]
    kind: String,
}

#[derive(Deserialize)]
struct Web {
    #[serde(default)]
    results: Vec<Item>,
}

#[derive(Deserialize)]
struct Item {
    url: String,
    #[serde(default)]
    title: String,
    #[serde(default)]
    description: String,
}

/// Searches Brave.
///
/// # Errors
/// [`SearchError`] for a missing key, a timeout, an HTTP error or a malformed answer.
pub async fn search(s: &Search, query: &str, n: usize) -> Result<Vec<Hit>, SearchError> {
    let var = &s.policy().brave_key_env;
    let key = std::env::var(var)
        .ok()
        .filter(|k| !k.trim().is_empty())
        .ok_or_else(|| SearchError::Config {
            provider: NAME,
            message: format!("${var} is not set (search.brave_key_env)"),
        })?;
    let count = n.min(20).to_string();
    let req = s
        .http()
        .get(with_query(
            &s.policy().brave_url,
            &[("q", query), ("count", count.as_str())],
        ))
        .header(reqwest::header::ACCEPT, "application/json")
        .header("X-Subscription-Token", key);
    let (status, body) = s.fetch(NAME, req).await?;
    if !(200..300).contains(&status) {
        return Err(http_error(NAME, status, &body));
    }
    let a: Answer = json(NAME, &body)?;
    if a.kind != "search" {
        return Err(SearchError::Garbage {
            provider: NAME,
            message: format!("answer type `{}`, expected `search`", a.kind),
        });
    }
    Ok(a.web
        .map(|w| w.results)
        .unwrap_or_default()
        .into_iter()
        .take(n)
        .map(|i| Hit {
            title: plain(&i.title),
            url: i.url,
            snippet: plain(&i.description),
        })
        .collect())
}
