//! Google Programmable Search (Custom Search JSON API): `GET {google_url}?key=...&cx=...&q=...
//! &num=N` answers `{"kind": "customsearch#search", "items": [{"title", "link", "snippet"}]}`
//! (no `items` when nothing matched); errors are `{"error": {"code", "message"}}`.

use serde::Deserialize;

use super::{Hit, Search, SearchError, json, plain};

const NAME: &str = "google";

#[derive(Deserialize)]
struct Answer {
    #[serde(default)]
    kind: Option<String>,
    #[serde(default)]
    items: Vec<Item>,
    #[serde(default)]
    error: Option<ApiError>,
}

#[derive(Deserialize)]
struct ApiError {
    #[serde(default)]
    code: u16,
    #[serde(default)]
    message: String,
}

#[derive(Deserialize)]
struct Item {
    link: String,
    #[serde(default)]
    title: String,
    #[serde(default)]
    snippet: String,
}

fn env(name: &str) -> Result<String, SearchError> {
    std::env::var(name)
        .ok()
        .filter(|k| !k.trim().is_empty())
        .ok_or_else(|| SearchError::Config {
            provider: NAME,
            message: format!("${name} is not set (search.google_key_env / google_cx_env)"),
        })
}

/// Searches Google.
///
/// # Errors
/// [`SearchError`] for missing keys, a timeout, an API error or a malformed answer.
pub async fn search(s: &Search, query: &str, n: usize) -> Result<Vec<Hit>, SearchError> {
    let key = env(&s.policy().google_key_env)?;
    let cx = env(&s.policy().google_cx_env)?;
    let num = n.min(10).to_string();
    let req = s.http().get(super::with_query(
        &s.policy().google_url,
        &[
            ("key", key.as_str()),
            ("cx", cx.as_str()),
            ("q", query),
            ("num", num.as_str()),
        ],
    ));
    let (status, body) = s.fetch(NAME, req).await?;
    let a: Answer = match json(NAME, &body) {
        Ok(a) => a,
        Err(_) if !(200..300).contains(&status) => {
            return Err(super::http_error(NAME, status, &body));
        }
        Err(e) => return Err(e),
    };
    if let Some(err) = a.error {
        return Err(SearchError::Http {
            provider: NAME,
            status: if err.code == 0 { status } else { err.code },
            message: err.message,
        });
    }
    if !(200..300).contains(&status) {
        return Err(super::http_error(NAME, status, &body));
    }
    if a.kind.as_deref() != Some("customsearch#search") {
        return Err(SearchError::Garbage {
            provider: NAME,
            message: "no `kind: customsearch#search`".into(),
        });
    }
    Ok(a.items
        .into_iter()
        .take(n)
        .map(|i| Hit {
            title: plain(&i.title),
            url: i.link,
            snippet: plain(&i.snippet),
        })
        .collect())
}
