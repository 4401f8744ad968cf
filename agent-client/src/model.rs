//! The language model: an OpenAI-compatible `POST {base}/chat/completions` client with
//! per-request timeouts, retries with exponential backoff on 429/5xx/timeouts, and a
//! response cache keyed by the full request ([`crate::cache`]).
//!
//! Every call is one stateless question ([`ChatRequest`]: a system and a user message);
//! no conversation is carried between calls (the Sibyl paper's "QA functions instead of
//! dialogues"). The [`Model`] trait lets `replay` answer the same requests from a trace.

use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::cache::ResponseCache;

/// Default endpoint when `OPENAI_BASE_URL` is unset (the OpenAI API).
pub const DEFAULT_BASE_URL: &str = "https://api.openai.com/v1";

/// One chat message, as in the OpenAI chat-completions API.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Message {
    /// `system` or `user`.
    pub role: String,
    /// The text.
    pub content: String,
}

/// One complete chat-completions request body. Serialising it gives exactly the JSON sent
/// to the endpoint, which is also the cache key and what the trace records.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ChatRequest {
    /// Model name, e.g. `gpt-4o`.
    pub model: String,
    /// The messages: a system message and one user message for every Sibyl module.
    pub messages: Vec<Message>,
    /// Sampling temperature (per role: planner 0, actor 0.1, critic 0, …).
    pub temperature: f32,
    /// Sampling seed: the index of the vote run, so runs are independent samples and are
    /// cached separately.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<u64>,
}

impl ChatRequest {
    /// A request of one system and one user message.
    #[must_use]
    pub fn new(model: &str, system: &str, user: String, temperature: f32, seed: u64) -> Self {
        Self {
            model: model.to_string(),
            messages: vec![
                Message {
                    role: "system".into(),
                    content: system.to_string(),
                },
                Message {
                    role: "user".into(),
                    content: user,
                },
            ],
            temperature,
            seed: Some(seed),
        }
    }

    /// The JSON body sent to the endpoint (field order fixed by the struct).
    #[must_use]
    pub fn body(&self) -> String {
        // Serialising plain strings and numbers cannot fail.
        serde_json::to_string(self).unwrap_or_default()
    }
}

/// Why a model call failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ModelError {
    /// No model name was given.
    #[error("no model: pass --model or set OPENAI_MODEL")]
    NoModel,
    /// The HTTP client could not be built or the URL is bad.
    #[error("cannot set up the model client: {0}")]
    Setup(String),
    /// Every attempt failed with a retryable error (429, 5xx, timeout, connection).
    #[error("model request to {url} failed after {attempts} attempts; last error: {last}")]
    Exhausted {
        /// The endpoint.
        url: String,
        /// How many attempts were made.
        attempts: u32,
        /// The last error.
        last: String,
    },
    /// The endpoint refused the request with a non-retryable status (400, 401, 404, …).
    #[error("model request to {url} refused: HTTP {status}: {body}")]
    Refused {
        /// The endpoint.
        url: String,
        /// HTTP status code.
        status: u16,
        /// The start of the response body.
        body: String,
    },
    /// The endpoint answered 200 but not with a chat completion.
    #[error("model response from {url} is not a chat completion: {0}", url = .1)]
    BadResponse(String, String),
    /// `replay`: the trace holds no response for this request (the run diverged).
    #[error("the trace has no model response for this {0} request (the replay diverged)")]
    NotInTrace(String),
    /// `replay`: the traced run's request failed like this.
    #[error("{0} (recorded in the trace)")]
    Recorded(String),
    /// The response cache failed.
    #[error("response cache: {0}")]
    Cache(String),
}

/// Something that answers chat requests: the HTTP client, or a trace during `replay`.
#[async_trait::async_trait]
pub trait Model: Send + Sync {
    /// Answers `req`; `role` (planner, channel, actor, …) is for messages only.
    ///
    /// # Errors
    /// [`ModelError`].
    async fn complete(&self, role: &str, req: &ChatRequest) -> Result<String, ModelError>;
}

/// Endpoint, credentials, timeouts and retries of [`OpenAiModel`].
#[derive(Clone, Debug)]
pub struct ModelConfig {
    /// Base URL up to and including `/v1`, e.g. `https://api.openai.com/v1`.
    pub base_url: String,
    /// Bearer token; `None` sends no `Authorization` header (local servers).
    pub api_key: Option<String>,
    /// Time limit of one HTTP attempt.
    pub timeout: Duration,
    /// Retries after the first attempt on 429, 5xx, timeouts and connection errors.
    pub max_retries: u32,
    /// First backoff; doubled on each retry, capped at `max_backoff`. A `Retry-After`
    /// header (seconds) is honoured up to `max_backoff`.
    pub initial_backoff: Duration,
    /// Longest backoff.
    pub max_backoff: Duration,
}

impl Default for ModelConfig {
    fn default() -> Self {
        Self {
            base_url: DEFAULT_BASE_URL.to_string(),
            api_key: None,
            timeout: Duration::from_secs(180),
            max_retries: 4,
            initial_backoff: Duration::from_millis(1000),
            max_backoff: Duration::from_secs(30),
        }
    }
}

impl ModelConfig {
    /// Reads `OPENAI_BASE_URL` and `OPENAI_API_KEY` over the defaults.
    #[must_use]
    pub fn from_env() -> Self {
        let mut c = Self::default();
        if let Ok(url) = std::env::var("OPENAI_BASE_URL")
            && !url.trim().is_empty()
        {
            c.base_url = url.trim().to_string();
        }
        c.api_key = std::env::var("OPENAI_API_KEY")
            .ok()
            .filter(|k| !k.trim().is_empty());
        c
    }

    /// The chat-completions URL: `{base_url}/chat/completions`.
    #[must_use]
    pub fn endpoint(&self) -> String {
        format!("{}/chat/completions", self.base_url.trim_end_matches('/'))
    }
}

/// The HTTP model client.
pub struct OpenAiModel {
    config: ModelConfig,
    http: reqwest::Client,
    cache: Option<Arc<ResponseCache>>,
}

#[derive(Deserialize)]
struct Completion {
    choices: Vec<Choice>,
}

#[derive(Deserialize)]
struct Choice {
    message: ChoiceMessage,
}

#[derive(Deserialize)]
struct ChoiceMessage {
    content: Option<String>,
}

const MAX_ERROR_BODY: usize = 500;

/// Largest response body read from the endpoint (a hostile or broken endpoint cannot make
/// the agent buffer without bound).
pub const MAX_RESPONSE_BYTES: usize = 16 << 20;

impl OpenAiModel {
    /// Builds the client; `cache` stores successful responses by full request.
    ///
    /// # Errors
    /// [`ModelError::Setup`] when the TLS client cannot be built.
    pub fn new(config: ModelConfig, cache: Option<Arc<ResponseCache>>) -> Result<Self, ModelError> {
        // reqwest is built without a default crypto provider; install ring once (a second
        // install by another component is harmless).
        let _ = rustls::crypto::ring::default_provider().install_default();
        let http = reqwest::Client::builder()
            .timeout(config.timeout)
            .connect_timeout(config.timeout.min(Duration::from_secs(30)))
            .build()
            .map_err(|e| ModelError::Setup(e.to_string()))?;
        Ok(Self {
            config,
            http,
            cache,
        })
    }

    fn backoff(&self, retry: u32, retry_after: Option<Duration>) -> Duration {
        let exp = self
            .config
            .initial_backoff
            .saturating_mul(1u32 << retry.min(16));
        retry_after.unwrap_or(exp).min(self.config.max_backoff)
    }

    /// One HTTP attempt. `Ok(Err(..))` is a retryable failure with an optional Retry-After.
    async fn attempt(
        &self,
        url: &str,
        body: &str,
    ) -> Result<Result<String, (String, Option<Duration>)>, ModelError> {
        let mut req = self
            .http
            .post(url)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(body.to_string());
        if let Some(key) = &self.config.api_key {
            req = req.bearer_auth(key);
        }
        let resp = match req.send().await {
            Ok(r) => r,
            Err(e) if e.is_timeout() => {
                return Ok(Err((
                    format!("timed out after {:?}", self.config.timeout),
                    None,
                )));
            }
            Err(e) => return Ok(Err((error_chain(&e), None))),
        };
        let status = resp.status();
        let retry_after = resp
            .headers()
            .get(reqwest::header::RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u64>().ok())
            .map(Duration::from_secs);
        let mut resp = resp;
        let mut bytes: Vec<u8> = Vec::new();
        loop {
            match resp.chunk().await {
                Ok(Some(chunk)) => {
                    if bytes.len() + chunk.len() > MAX_RESPONSE_BYTES {
                        return Err(ModelError::BadResponse(
                            format!("the response is larger than {MAX_RESPONSE_BYTES} bytes"),
                            url.into(),
                        ));
                    }
                    bytes.extend_from_slice(&chunk);
                }
                Ok(None) => break,
                Err(e) if e.is_timeout() => {
                    return Ok(Err((
                        format!("timed out after {:?} reading the body", self.config.timeout),
                        None,
                    )));
                }
                Err(e) => return Ok(Err((error_chain(&e), None))),
            }
        }
        let text = String::from_utf8_lossy(&bytes).into_owned();
        if status.as_u16() == 429 || status.is_server_error() {
            return Ok(Err((
                format!("HTTP {}: {}", status.as_u16(), excerpt(&text)),
                retry_after,
            )));
        }
        if !status.is_success() {
            return Err(ModelError::Refused {
                url: url.to_string(),
                status: status.as_u16(),
                body: excerpt(&text),
            });
        }
        let completion: Completion = serde_json::from_str(&text)
            .map_err(|e| ModelError::BadResponse(format!("{e}: {}", excerpt(&text)), url.into()))?;
        let content = completion
            .choices
            .into_iter()
            .next()
            .and_then(|c| c.message.content)
            .ok_or_else(|| {
                ModelError::BadResponse("no choices[0].message.content".into(), url.into())
            })?;
        Ok(Ok(content))
    }
}

#[async_trait::async_trait]
impl Model for OpenAiModel {
    async fn complete(&self, role: &str, req: &ChatRequest) -> Result<String, ModelError> {
        let url = self.config.endpoint();
        let body = req.body();
        let key = format!("{url}\n{body}");
        if let Some(cache) = &self.cache
            && let Some(hit) = cache.get(&key).await?
        {
            tracing::debug!(role, "model cache hit");
            return Ok(hit);
        }
        let attempts = self.config.max_retries.saturating_add(1);
        let mut last = String::new();
        for attempt in 0..attempts {
            match self.attempt(&url, &body).await? {
                Ok(content) => {
                    if let Some(cache) = &self.cache {
                        cache.put(&key, &content).await?;
                    }
                    return Ok(content);
                }
                Err((why, retry_after)) => {
                    tracing::warn!(role, attempt = attempt + 1, %why, "model request failed");
                    last = why;
                    if attempt + 1 < attempts {
                        tokio::time::sleep(self.backoff(attempt, retry_after)).await;
                    }
                }
            }
        }
        Err(ModelError::Exhausted {
            url,
            attempts,
            last,
        })
    }
}

/// The part of a reply meant as the answer: `<think>…</think>` blocks of reasoning models
/// (DeepSeek-R1, Qwen3 and others served through OpenAI-compatible endpoints) removed, so
/// their deliberation cannot be mistaken for JSON, an answer or the jury's TERMINATE. An
/// unclosed `<think>` hides the rest of the reply.
#[must_use]
pub fn visible_text(reply: &str) -> String {
    let mut out = String::with_capacity(reply.len());
    let mut rest = reply;
    while let Some(start) = rest.find("<think>") {
        out.push_str(&rest[..start]);
        match rest[start..].find("</think>") {
            Some(end) => rest = &rest[start + end + "</think>".len()..],
            None => {
                rest = "";
                break;
            }
        }
    }
    out.push_str(rest);
    out
}

fn excerpt(s: &str) -> String {
    let one_line = s.split_whitespace().collect::<Vec<_>>().join(" ");
    if one_line.chars().count() > MAX_ERROR_BODY {
        let cut: String = one_line.chars().take(MAX_ERROR_BODY).collect();
        format!("{cut}…")
    } else {
        one_line
    }
}

fn error_chain(e: &dyn std::error::Error) -> String {
    let mut msg = e.to_string();
    let mut src = e.source();
    while let Some(s) = src {
        msg = format!("{msg}: {s}");
        src = s.source();
    }
    msg
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn body_is_the_openai_shape() {
        let r = ChatRequest::new("m", "sys", "hi".into(), 0.1, 2);
        let v: serde_json::Value = serde_json::from_str(&r.body()).expect("json");
        assert_eq!(v["model"], "m");
        assert_eq!(v["messages"][0]["role"], "system");
        assert_eq!(v["messages"][1]["content"], "hi");
        assert_eq!(v["seed"], 2);
    }

    #[test]
    fn reasoning_blocks_are_not_part_of_the_answer() {
        assert_eq!(
            visible_text("<think>maybe {x}</think>\n{\"a\": 1}"),
            "\n{\"a\": 1}"
        );
        assert_eq!(visible_text("a<think>1</think>b<think>2</think>c"), "abc");
        assert_eq!(visible_text("plain"), "plain");
        assert_eq!(visible_text("ok <think>never closed TERMINATE"), "ok ");
    }

    #[test]
    fn backoff_doubles_and_caps() {
        let m = OpenAiModel::new(
            ModelConfig {
                initial_backoff: Duration::from_millis(100),
                max_backoff: Duration::from_millis(350),
                ..ModelConfig::default()
            },
            None,
        )
        .expect("client");
        assert_eq!(m.backoff(0, None), Duration::from_millis(100));
        assert_eq!(m.backoff(1, None), Duration::from_millis(200));
        assert_eq!(m.backoff(2, None), Duration::from_millis(350));
        assert_eq!(
            m.backoff(0, Some(Duration::from_secs(9))),
            Duration::from_millis(350)
        );
    }
}
