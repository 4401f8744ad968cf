//! Plain HTTP(S) fetching for the browser: reqwest with rustls, the policy's timeouts and
//! size cap, redirects checked hop by hop, no proxy, and charset detection.

use std::sync::Arc;
use std::time::Duration;

use crate::browser::ssrf::{AddressGuard, GuardedResolver, Refusal};
use crate::policy::BrowserPolicy;

/// A fetched response body with what is needed to decode and display it.
#[derive(Debug, Clone)]
pub struct Fetched {
    /// The URL after redirects.
    pub final_url: url::Url,
    /// HTTP status code.
    pub status: u16,
    /// The status's reason phrase, e.g. `Not Found`.
    pub reason: String,
    /// Lower-case MIME essence from `Content-Type`, e.g. `text/html`, if sent.
    pub mime: Option<String>,
    /// The `charset` parameter of `Content-Type`, if sent.
    pub charset: Option<String>,
    /// The body, after content decoding (gzip, brotli, deflate).
    pub body: Vec<u8>,
    /// The file name from `Content-Disposition`, if sent.
    pub disposition: Option<String>,
}

/// Why a fetch failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FetchError {
    /// The URL or an address it led to is refused by the address rules.
    #[error("refused: {0}")]
    Refused(#[from] Refusal),
    /// The whole request took longer than `browser.request_timeout_ms`.
    #[error("timed out after {} ms (browser.request_timeout_ms)", .0.as_millis())]
    Timeout(Duration),
    /// The body is larger than `browser.max_response_bytes`.
    #[error("response body exceeds browser.max_response_bytes = {limit} bytes")]
    TooLarge {
        /// The cap in bytes.
        limit: usize,
    },
    /// More than `browser.max_redirects` redirects.
    #[error("too many redirects (browser.max_redirects = {0})")]
    TooManyRedirects(usize),
    /// Connection, TLS or protocol failure.
    #[error("{0}")]
    Network(String),
}

/// The browser's HTTP client.
#[derive(Clone)]
pub struct Fetcher {
    client: reqwest::Client,
    guard: Arc<AddressGuard>,
    timeout: Duration,
    max_bytes: usize,
    max_redirects: usize,
}

/// Marker error from the redirect policy (carried through reqwest as a source error).
#[derive(Debug, thiserror::Error)]
#[error("too many redirects")]
struct RedirectLimit;

impl Fetcher {
    /// Builds the client for `policy`.
    ///
    /// # Errors
    /// When the TLS stack cannot be set up (a broken system, reported at start).
    pub fn new(policy: &BrowserPolicy) -> Result<Self, FetchError> {
        // reqwest is built without a default crypto provider; ring builds faster than
        // aws-lc. Installing twice is harmless (the second call returns Err).
        let _ = rustls::crypto::ring::default_provider().install_default();
        let guard = Arc::new(AddressGuard::new(
            policy.allow.clone(),
            policy.block.clone(),
        ));
        let max_redirects = policy.max_redirects;
        let redirect_guard = guard.clone();
        let redirect = reqwest::redirect::Policy::custom(move |attempt| {
            if attempt.previous().len() > max_redirects {
                return attempt.error(RedirectLimit);
            }
            match redirect_guard.check_url(attempt.url()) {
                Ok(()) => attempt.follow(),
                Err(refusal) => attempt.error(refusal),
            }
        });
        let client = reqwest::Client::builder()
            .user_agent(policy.user_agent.clone())
            .connect_timeout(policy.connect_timeout)
            .timeout(policy.request_timeout)
            .redirect(redirect)
            .no_proxy()
            .dns_resolver(GuardedResolver::new(guard.clone()))
            .build()
            .map_err(|e| FetchError::Network(format!("cannot build HTTP client: {e}")))?;
        Ok(Self {
            client,
            guard,
            timeout: policy.request_timeout,
            max_bytes: policy.max_response_bytes,
            max_redirects,
        })
    }

    /// GETs `url`, following allowed redirects, and reads at most the size cap.
    ///
    /// # Errors
    /// [`FetchError`]: refusal, timeout, size cap, redirect limit or network failure.
    pub async fn get(&self, url: &url::Url) -> Result<Fetched, FetchError> {
        self.guard.check_url(url)?;
        // reqwest's timeout covers connect to last byte; the outer one is a backstop.
        match tokio::time::timeout(self.timeout + Duration::from_secs(1), self.get_inner(url)).await
        {
            Ok(r) => r,
            Err(_) => Err(FetchError::Timeout(self.timeout)),
        }
    }

    async fn get_inner(&self, url: &url::Url) -> Result<Fetched, FetchError> {
        let mut resp = self
            .client
            .get(url.clone())
            .header(
                reqwest::header::ACCEPT,
                "text/html,application/xhtml+xml,application/xml;q=0.9,text/plain;q=0.8,*/*;q=0.5",
            )
            .send()
            .await
            .map_err(|e| self.classify(e))?;
        if let Some(len) = resp.content_length()
            && len > self.max_bytes as u64
        {
            return Err(FetchError::TooLarge {
                limit: self.max_bytes,
            });
        }
        let final_url = resp.url().clone();
        let status = resp.status();
        let (mime, charset) = resp
            .headers()
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .map(parse_content_type)
            .unwrap_or((None, None));
        let disposition = resp
            .headers()
            .get(reqwest::header::CONTENT_DISPOSITION)
            .and_then(|v| v.to_str().ok())
            .and_then(crate::browser::download::disposition_filename);
        let mut body = Vec::new();
        while let Some(chunk) = resp.chunk().await.map_err(|e| self.classify(e))? {
            if body.len() + chunk.len() > self.max_bytes {
                return Err(FetchError::TooLarge {
                    limit: self.max_bytes,
                });
            }
            body.extend_from_slice(&chunk);
        }
        Ok(Fetched {
            final_url,
            status: status.as_u16(),
            reason: status.canonical_reason().unwrap_or("").to_string(),
            mime,
            charset,
            body,
            disposition,
        })
    }

    /// Turns a reqwest error into a clear [`FetchError`], finding our own refusals in the
    /// error's source chain.
    fn classify(&self, e: reqwest::Error) -> FetchError {
        let mut src: Option<&(dyn std::error::Error + 'static)> = Some(&e);
        while let Some(s) = src {
            if let Some(r) = s.downcast_ref::<Refusal>() {
                return FetchError::Refused(r.clone());
            }
            if s.downcast_ref::<RedirectLimit>().is_some() {
                return FetchError::TooManyRedirects(self.max_redirects);
            }
            src = s.source();
        }
        if e.is_timeout() {
            return FetchError::Timeout(self.timeout);
        }
        // Name the innermost cause: "connection refused", "dns error: ...".
        let mut msg = e.to_string();
        let mut src = std::error::Error::source(&e);
        while let Some(s) = src {
            msg = format!("{msg}: {s}");
            src = s.source();
        }
        FetchError::Network(msg)
    }
}

/// Splits a `Content-Type` value into a lower-case MIME essence and a charset parameter.
pub fn parse_content_type(v: &str) -> (Option<String>, Option<String>) {
    let mut parts = v.split(';');
    let mime = parts
        .next()
        .map(|m| m.trim().to_ascii_lowercase())
        .filter(|m| !m.is_empty());
    let charset = parts.find_map(|p| {
        let (k, v) = p.split_once('=')?;
        k.trim()
            .eq_ignore_ascii_case("charset")
            .then(|| v.trim().trim_matches('"').trim_matches('\'').to_string())
    });
    (mime, charset)
}

/// Decodes a body to text: the `Content-Type` charset, else a byte-order mark, else a
/// `<meta charset>` / `http-equiv` declaration in the first 1024 bytes (HTML only), else
/// UTF-8 if the bytes are valid UTF-8, else chardetng's guess (the detector Firefox uses).
/// Undecodable bytes become U+FFFD; never fails.
pub fn decode_text(body: &[u8], header_charset: Option<&str>, is_html: bool) -> String {
    let declared = header_charset
        .and_then(|c| encoding_rs::Encoding::for_label(c.as_bytes()))
        .or_else(|| encoding_rs::Encoding::for_bom(body).map(|(e, _)| e))
        .or_else(|| {
            if is_html {
                sniff_meta_charset(&body[..body.len().min(1024)])
            } else {
                None
            }
        });
    let encoding = match declared {
        Some(e) => e,
        None if std::str::from_utf8(body).is_ok() => encoding_rs::UTF_8,
        None => {
            let mut det = chardetng::EncodingDetector::new(chardetng::Iso2022JpDetection::Deny);
            det.feed(body, true);
            det.guess(None, chardetng::Utf8Detection::Allow)
        }
    };
    // `decode` strips a BOM and switches to the BOM's encoding if one is present.
    let (text, _, _) = encoding.decode(body);
    text.into_owned()
}

fn sniff_meta_charset(head: &[u8]) -> Option<&'static encoding_rs::Encoding> {
    let lower: Vec<u8> = head.iter().map(|b| b.to_ascii_lowercase()).collect();
    let mut from = 0;
    while let Some(pos) = find(&lower[from..], b"<meta") {
        let start = from + pos;
        let end = lower[start..]
            .iter()
            .position(|&b| b == b'>')
            .map(|e| start + e)
            .unwrap_or(lower.len());
        let tag = &lower[start..end];
        if let Some(cpos) = find(tag, b"charset") {
            let rest = &tag[cpos + 7..];
            let rest = rest
                .iter()
                .position(|&b| b == b'=')
                .map(|i| &rest[i + 1..])
                .unwrap_or(&[]);
            let label: Vec<u8> = rest
                .iter()
                .copied()
                .skip_while(|b| b.is_ascii_whitespace() || *b == b'"' || *b == b'\'')
                .take_while(|b| !b.is_ascii_whitespace() && !b"\"';/>".contains(b))
                .collect();
            if let Some(enc) = encoding_rs::Encoding::for_label(&label) {
                // A page declaring UTF-16 in ASCII-compatible bytes is really UTF-8 (HTML spec).
                return Some(
                    if enc == encoding_rs::UTF_16LE || enc == encoding_rs::UTF_16BE {
                        encoding_rs::UTF_8
                    } else {
                        enc
                    },
                );
            }
        }
        from = end;
    }
    None
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn content_type_is_split() {
        assert_eq!(
            parse_content_type("Text/HTML; Charset=\"ISO-8859-1\""),
            (Some("text/html".into()), Some("ISO-8859-1".into()))
        );
        assert_eq!(
            parse_content_type("application/json"),
            (Some("application/json".into()), None)
        );
    }

    #[test]
    fn charsets_are_detected() {
        // Header charset wins.
        assert_eq!(decode_text(b"caf\xe9", Some("iso-8859-1"), false), "café");
        // Meta charset.
        let html =
            b"<html><head><meta charset=\"windows-1252\"></head><body>na\xefve</body></html>";
        assert!(decode_text(html, None, true).contains("naïve"));
        let html = b"<meta http-equiv=\"Content-Type\" content=\"text/html; charset=shift_jis\">\x93\xfa\x96\x7b";
        assert!(decode_text(html, None, true).contains("日本"));
        // BOM.
        assert_eq!(decode_text(b"\xef\xbb\xbfhi", None, false), "hi");
        // UTF-8 without declaration.
        assert_eq!(decode_text("żółw".as_bytes(), None, true), "żółw");
        // Undeclared legacy bytes: detector guess, never a failure.
        let guessed = decode_text(
            b"Das ist ein sch\xf6ner Tag f\xfcr alle M\xe4dchen",
            None,
            false,
        );
        assert!(guessed.contains("schöner"), "{guessed}");
    }
}
