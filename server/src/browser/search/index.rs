//! The embedded offline search provider: an in-memory tantivy index of (url, title, body,
//! tenant) with English stemming, BM25 ranking (title boosted) and highlighted-snippet
//! generation.
//!
//! Documents of the configured folder are indexed with tenant `""` (visible to all); pages
//! fetched by the browser carry the fetching session's tenant and are visible to that tenant
//! only, so one tenant cannot learn what another browsed. A page fetched again replaces its
//! earlier version. Queries are parsed leniently (hostile syntax never fails a search).
//! Writes are committed lazily, right before the next search.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use tantivy::collector::TopDocs;
use tantivy::query::{BooleanQuery, Occur, Query, QueryParser, TermQuery};
use tantivy::schema::{
    Field, IndexRecordOption, STORED, STRING, Schema, TextFieldIndexing, TextOptions, Value,
};
use tantivy::snippet::SnippetGenerator;
use tantivy::{Index, IndexReader, IndexWriter, TantivyDocument, Term, doc};

use super::{Hit, SearchError};
use crate::browser::download::detect;
use crate::browser::extract::{self, ExtractPolicy, FileKind};

/// Longest body indexed per document, in bytes (the rest is not searchable).
const MAX_BODY_BYTES: usize = 2 << 20;
/// Largest folder file read, in bytes.
const MAX_FILE_BYTES: u64 = 50 << 20;
/// Snippet length in characters.
const SNIPPET_CHARS: usize = 240;

#[derive(Clone, Copy)]
struct Fields {
    url: Field,
    title: Field,
    body: Field,
    tenant: Field,
}

struct Inner {
    index: Index,
    reader: IndexReader,
    writer: Mutex<IndexWriter>,
    fields: Fields,
    dirty: AtomicBool,
    ready: tokio::sync::watch::Sender<bool>,
}

/// The embedded index (cheap to clone handles are kept inside).
pub struct EmbeddedIndex {
    inner: Arc<Inner>,
}

fn err(e: impl std::fmt::Display) -> SearchError {
    SearchError::Index(e.to_string())
}

impl EmbeddedIndex {
    /// Creates an empty in-memory index.
    ///
    /// # Errors
    /// [`SearchError::Index`] if tantivy cannot create it.
    pub fn new() -> Result<Self, SearchError> {
        let mut sb = Schema::builder();
        let text = TextOptions::default()
            .set_indexing_options(
                TextFieldIndexing::default()
                    .set_tokenizer("en_stem")
                    .set_index_option(IndexRecordOption::WithFreqsAndPositions),
            )
            .set_stored();
        let fields = Fields {
            url: sb.add_text_field("url", STRING | STORED),
            title: sb.add_text_field("title", text.clone()),
            body: sb.add_text_field("body", text),
            tenant: sb.add_text_field("tenant", STRING),
        };
        let index = Index::create_in_ram(sb.build());
        let writer = index.writer_with_num_threads(1, 30_000_000).map_err(err)?;
        let reader = index.reader().map_err(err)?;
        let (ready, _) = tokio::sync::watch::channel(false);
        Ok(Self {
            inner: Arc::new(Inner {
                index,
                reader,
                writer: Mutex::new(writer),
                fields,
                dirty: AtomicBool::new(false),
                ready,
            }),
        })
    }

    /// Marks the initial folder indexing as done (or not needed).
    pub fn mark_ready(&self) {
        self.inner.ready.send_replace(true);
    }

    /// Indexes every convertible file below `folder` on a background thread (symlinks not
    /// followed, at most `max_files`); searches wait for it.
    pub fn index_folder(&self, folder: PathBuf, max_files: usize, policy: ExtractPolicy) {
        let inner = self.inner.clone();
        let spawned = std::thread::Builder::new()
            .name("sibyl-search-index".into())
            .spawn(move || {
                let started = std::time::Instant::now();
                let n = index_dir(&inner, &folder, max_files, &policy);
                if let Ok(mut w) = inner.writer.lock()
                    && let Err(e) = w.commit()
                {
                    tracing::warn!(error = %e, "search index commit failed");
                }
                let _ = inner.reader.reload();
                tracing::info!(
                    folder = %folder.display(),
                    documents = n,
                    ms = started.elapsed().as_millis() as u64,
                    "search folder indexed"
                );
                inner.ready.send_replace(true);
            });
        if spawned.is_err() {
            self.mark_ready();
        }
    }

    /// Adds (or replaces) a fetched page for `tenant` (committed before the next search).
    pub async fn add_page(&self, tenant: &str, url: &str, title: &str, text: &str) {
        let inner = self.inner.clone();
        let (tenant, url, title) = (tenant.to_string(), url.to_string(), title.to_string());
        let body = truncate(text, MAX_BODY_BYTES).to_string();
        // Key by tenant and URL so tenants never replace each other's copies.
        let key = format!("{tenant}\u{0}{url}");
        let _ =
            tokio::task::spawn_blocking(move || add(&inner, &key, &tenant, &url, &title, &body))
                .await;
    }

    /// Title and text of a folder document by address.
    pub async fn stored(&self, url: &str) -> Option<(String, String)> {
        self.wait_ready().await;
        let inner = self.inner.clone();
        let key = format!("\u{0}{url}");
        tokio::task::spawn_blocking(move || {
            inner.flush();
            let searcher = inner.reader.searcher();
            let q = TermQuery::new(
                Term::from_field_text(inner.fields.url, &key),
                IndexRecordOption::Basic,
            );
            let top = searcher
                .search(&q, &TopDocs::with_limit(1).order_by_score())
                .ok()?;
            let (_, addr) = top.into_iter().next()?;
            let d: TantivyDocument = searcher.doc(addr).ok()?;
            let get = |f| {
                d.get_first(f)
                    .and_then(|v| v.as_str())
                    .unwrap_or("")
                    .to_string()
            };
            Some((get(inner.fields.title), get(inner.fields.body)))
        })
        .await
        .ok()
        .flatten()
    }

    async fn wait_ready(&self) {
        let mut rx = self.inner.ready.subscribe();
        let _ = rx.wait_for(|r| *r).await;
    }

    /// Top `n` documents for `query` visible to `tenant`.
    ///
    /// # Errors
    /// [`SearchError::Index`] on an index failure.
    pub async fn search(
        &self,
        tenant: &str,
        query: &str,
        n: usize,
    ) -> Result<Vec<Hit>, SearchError> {
        self.wait_ready().await;
        let inner = self.inner.clone();
        let (tenant, query) = (tenant.to_string(), query.to_string());
        tokio::task::spawn_blocking(move || inner.search(&tenant, &query, n))
            .await
            .map_err(err)?
    }
}

impl Inner {
    fn flush(&self) {
        if self.dirty.swap(false, Ordering::AcqRel) {
            if let Ok(mut w) = self.writer.lock()
                && let Err(e) = w.commit()
            {
                tracing::warn!(error = %e, "search index commit failed");
            }
            let _ = self.reader.reload();
        }
    }

    fn search(&self, tenant: &str, query: &str, n: usize) -> Result<Vec<Hit>, SearchError> {
        self.flush();
        let f = self.fields;
        let mut parser = QueryParser::for_index(&self.index, vec![f.title, f.body]);
        parser.set_field_boost(f.title, 2.0);
        let (text_q, _errors) = parser.parse_query_lenient(query);
        let visible: Box<dyn Query> = Box::new(BooleanQuery::new(vec![
            (
                Occur::Should,
                Box::new(TermQuery::new(
                    Term::from_field_text(f.tenant, ""),
                    IndexRecordOption::Basic,
                )) as Box<dyn Query>,
            ),
            (
                Occur::Should,
                Box::new(TermQuery::new(
                    Term::from_field_text(f.tenant, tenant),
                    IndexRecordOption::Basic,
                )),
            ),
        ]));
        let q = BooleanQuery::new(vec![
            (Occur::Must, text_q.box_clone()),
            (Occur::Must, visible),
        ]);
        let searcher = self.reader.searcher();
        let top = searcher
            .search(&q, &TopDocs::with_limit(n).order_by_score())
            .map_err(err)?;
        let mut snippets = SnippetGenerator::create(&searcher, &*text_q, f.body).map_err(err)?;
        snippets.set_max_num_chars(SNIPPET_CHARS);
        let mut hits = Vec::new();
        for (_, addr) in top {
            let d: TantivyDocument = searcher.doc(addr).map_err(err)?;
            let get = |fl| {
                d.get_first(fl)
                    .and_then(|v| v.as_str())
                    .unwrap_or("")
                    .to_string()
            };
            let key = get(f.url);
            let url = key
                .split_once('\u{0}')
                .map(|(_, u)| u.to_string())
                .unwrap_or(key);
            let snippet = snippets.snippet_from_doc(&d);
            let mut text = snippet
                .fragment()
                .split_whitespace()
                .collect::<Vec<_>>()
                .join(" ");
            if text.is_empty() {
                text = get(f.body).chars().take(SNIPPET_CHARS).collect::<String>();
                text = text.split_whitespace().collect::<Vec<_>>().join(" ");
            }
            hits.push(Hit {
                title: get(f.title),
                url,
                snippet: text,
            });
        }
        Ok(hits)
    }
}

fn add(inner: &Inner, key: &str, tenant: &str, _url: &str, title: &str, body: &str) {
    let f = inner.fields;
    let Ok(w) = inner.writer.lock() else { return };
    w.delete_term(Term::from_field_text(f.url, key));
    if let Err(e) = w.add_document(doc!(
        f.url => key,
        f.title => title,
        f.body => body,
        f.tenant => tenant,
    )) {
        tracing::warn!(error = %e, "search index add failed");
        return;
    }
    inner.dirty.store(true, Ordering::Release);
}

fn truncate(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// Walks `dir` (depth-first, sorted, no symlinks, depth <= 16) and indexes what converts.
fn index_dir(
    inner: &Inner,
    dir: &std::path::Path,
    max_files: usize,
    policy: &ExtractPolicy,
) -> usize {
    let mut stack = vec![(dir.to_path_buf(), 0usize)];
    let mut count = 0usize;
    while let Some((d, depth)) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&d) else {
            continue;
        };
        let mut entries: Vec<_> = rd.flatten().collect();
        entries.sort_by_key(|e| std::cmp::Reverse(e.file_name()));
        for e in entries {
            if count >= max_files {
                return count;
            }
            let Ok(ft) = e.file_type() else { continue };
            let path = e.path();
            if ft.is_dir() && depth < 16 {
                stack.push((path, depth + 1));
                continue;
            }
            if !ft.is_file()
                || e.metadata()
                    .map(|m| m.len() > MAX_FILE_BYTES)
                    .unwrap_or(true)
            {
                continue;
            }
            let name = path.to_string_lossy().into_owned();
            let Ok(bytes) = std::fs::read(&path) else {
                continue;
            };
            let kind = detect(&name, None, None, &bytes);
            // Images (OCR is slow) and opaque types are not indexed.
            if matches!(
                kind,
                FileKind::Unknown | FileKind::Unsupported(_) | FileKind::Audio | FileKind::Image
            ) {
                continue;
            }
            let Ok(doc) = extract::extract(kind, &bytes, &name, policy) else {
                continue;
            };
            let Ok(url) = url::Url::from_file_path(&path) else {
                continue;
            };
            let title = doc.title.unwrap_or_else(|| {
                path.file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_default()
            });
            let url = url.to_string();
            add(
                inner,
                &format!("\u{0}{url}"),
                "",
                &url,
                &title,
                truncate(&doc.text, MAX_BODY_BYTES),
            );
            count += 1;
        }
    }
    count
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Pages fetched by one tenant are found by that tenant only; folder documents (tenant
    /// `""`) by every tenant; the same URL fetched by two tenants keeps both copies. (Over
    /// gRPC every session is of the one default tenant until OpenSession can carry a
    /// tenant, so this is tested at the index.)
    #[tokio::test]
    async fn fetched_pages_are_per_tenant() {
        let index = EmbeddedIndex::new().expect("index");
        let folder = tempfile::tempdir().expect("dir");
        std::fs::write(
            folder.path().join("shared.txt"),
            "A shared folder note about quokkas and marsupials.",
        )
        .expect("write");
        index.index_folder(folder.path().to_path_buf(), 10, ExtractPolicy::default());
        index
            .add_page(
                "alpha",
                "https://a.example/secret",
                "Alpha secret",
                "The zebrafish regeneration study from tenant alpha.",
            )
            .await;
        let urls = |hits: Vec<Hit>| hits.into_iter().map(|h| h.url).collect::<Vec<_>>();
        let a = urls(
            index
                .search("alpha", "zebrafish regeneration", 10)
                .await
                .expect("a"),
        );
        assert_eq!(a, ["https://a.example/secret"]);
        let b = urls(
            index
                .search("beta", "zebrafish regeneration", 10)
                .await
                .expect("b"),
        );
        assert!(b.is_empty(), "tenant beta sees alpha's page: {b:?}");
        for tenant in ["alpha", "beta"] {
            let hits = index.search(tenant, "quokkas", 10).await.expect("folder");
            assert_eq!(hits.len(), 1, "{tenant}: {:?}", urls(hits));
        }
        // Beta fetching the same URL (with other text) does not replace alpha's copy.
        index
            .add_page(
                "beta",
                "https://a.example/secret",
                "Beta copy",
                "Beta sees an axolotl here.",
            )
            .await;
        let a = urls(index.search("alpha", "zebrafish", 10).await.expect("a"));
        assert_eq!(a, ["https://a.example/secret"]);
        assert!(
            index
                .search("alpha", "axolotl", 10)
                .await
                .expect("a")
                .is_empty()
        );
        let b = urls(index.search("beta", "axolotl", 10).await.expect("b"));
        assert_eq!(b, ["https://a.example/secret"]);
        assert!(
            index
                .search("beta", "zebrafish", 10)
                .await
                .expect("b")
                .is_empty()
        );
    }
}
