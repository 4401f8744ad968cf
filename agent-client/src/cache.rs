//! The model response cache: a SQLite file (rusqlite, bundled SQLite) mapping the full
//! request — endpoint URL and the exact JSON body, model, messages, temperature and seed —
//! to the response text, as the released Sibyl code did with LangChain's SQLite cache.
//!
//! Why SQLite: one file that survives crashes mid-write (transactions), is safe to share
//! between concurrent `sibyl-agent` processes (file locking, a busy timeout), and can be
//! inspected or pruned with the stock `sqlite3` tool. The key column is the SHA-256 of the
//! request; the request text is stored beside it and compared on every hit, so a hash
//! collision can never return another request's answer.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use rusqlite::{Connection, OptionalExtension};
use sha2::{Digest, Sha256};

use crate::model::ModelError;

/// A response cache in one SQLite file.
pub struct ResponseCache {
    conn: Arc<Mutex<Connection>>,
    path: PathBuf,
}

impl ResponseCache {
    /// Opens (creating it and its parent directory when missing) the cache at `path`.
    ///
    /// # Errors
    /// [`ModelError::Cache`] when the file cannot be opened or is not a cache.
    pub fn open(path: &Path) -> Result<Self, ModelError> {
        if let Some(dir) = path.parent()
            && !dir.as_os_str().is_empty()
        {
            std::fs::create_dir_all(dir)
                .map_err(|e| ModelError::Cache(format!("{}: {e}", dir.display())))?;
        }
        let err = |e: rusqlite::Error| ModelError::Cache(format!("{}: {e}", path.display()));
        let conn = Connection::open(path).map_err(err)?;
        conn.busy_timeout(std::time::Duration::from_secs(10))
            .map_err(err)?;
        conn.execute_batch(
            "CREATE TABLE IF NOT EXISTS responses (
                 key TEXT PRIMARY KEY NOT NULL,
                 request TEXT NOT NULL,
                 response TEXT NOT NULL,
                 created_unix INTEGER NOT NULL
             );",
        )
        .map_err(err)?;
        Ok(Self {
            conn: Arc::new(Mutex::new(conn)),
            path: path.to_path_buf(),
        })
    }

    /// The default location: `$SIBYL_CACHE`, else `$XDG_CACHE_HOME/sibyl/model-cache.sqlite`,
    /// else `$HOME/.cache/sibyl/model-cache.sqlite`; `None` when none is set.
    #[must_use]
    pub fn default_path() -> Option<PathBuf> {
        if let Some(p) = std::env::var_os("SIBYL_CACHE").filter(|p| !p.is_empty()) {
            return Some(PathBuf::from(p));
        }
        let base = std::env::var_os("XDG_CACHE_HOME")
            .filter(|p| !p.is_empty())
            .map(PathBuf::from)
            .or_else(|| {
                std::env::var_os("HOME")
                    .filter(|p| !p.is_empty())
                    .map(|h| PathBuf::from(h).join(".cache"))
            })?;
        Some(base.join("sibyl").join("model-cache.sqlite"))
    }

    /// The cache file.
    #[must_use]
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn key_of(request: &str) -> String {
        Sha256::digest(request.as_bytes())
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect()
    }

    /// The cached response to `request` (the full request text), if any.
    ///
    /// # Errors
    /// [`ModelError::Cache`] on a database error.
    pub async fn get(&self, request: &str) -> Result<Option<String>, ModelError> {
        let conn = self.conn.clone();
        let request = request.to_string();
        tokio::task::spawn_blocking(move || {
            let conn = conn
                .lock()
                .map_err(|_| ModelError::Cache("cache lock poisoned".into()))?;
            let row: Option<(String, String)> = conn
                .query_row(
                    "SELECT request, response FROM responses WHERE key = ?1",
                    [Self::key_of(&request)],
                    |r| Ok((r.get(0)?, r.get(1)?)),
                )
                .optional()
                .map_err(|e| ModelError::Cache(e.to_string()))?;
            Ok(row.and_then(|(req, resp)| (req == request).then_some(resp)))
        })
        .await
        .map_err(|e| ModelError::Cache(e.to_string()))?
    }

    /// Stores `response` for `request`, replacing an older entry.
    ///
    /// # Errors
    /// [`ModelError::Cache`] on a database error.
    pub async fn put(&self, request: &str, response: &str) -> Result<(), ModelError> {
        let conn = self.conn.clone();
        let request = request.to_string();
        let response = response.to_string();
        tokio::task::spawn_blocking(move || {
            let conn = conn
                .lock()
                .map_err(|_| ModelError::Cache("cache lock poisoned".into()))?;
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_secs())
                .unwrap_or(0);
            conn.execute(
                "INSERT OR REPLACE INTO responses (key, request, response, created_unix)
                 VALUES (?1, ?2, ?3, ?4)",
                rusqlite::params![
                    Self::key_of(&request),
                    request,
                    response,
                    i64::try_from(now).unwrap_or(0)
                ],
            )
            .map_err(|e| ModelError::Cache(e.to_string()))?;
            Ok(())
        })
        .await
        .map_err(|e| ModelError::Cache(e.to_string()))?
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn stores_and_survives_reopen() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("sub/cache.sqlite");
        let c = ResponseCache::open(&path).expect("open");
        assert_eq!(c.get("req-a").await.expect("get"), None);
        c.put("req-a", "answer a").await.expect("put");
        drop(c);
        let c = ResponseCache::open(&path).expect("reopen");
        assert_eq!(
            c.get("req-a").await.expect("get"),
            Some("answer a".to_string())
        );
        assert_eq!(c.get("req-b").await.expect("get"), None);
    }

    #[test]
    fn a_file_that_is_not_a_cache_is_a_clear_error() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("junk.sqlite");
        std::fs::write(
            &path,
            b"this is not a database, just text, long enough to matter",
        )
        .expect("write");
        let e = ResponseCache::open(&path).err().expect("must fail");
        assert!(e.to_string().contains("junk.sqlite"), "{e}");
    }
}
