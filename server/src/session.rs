//! Sessions: the unit of state and isolation.
//!
//! A session carries its tenant and a typed state map in which each stateful tool keeps its
//! own state (the browser its current page, a runner its interpreter), so tools plug in
//! without this module knowing them. Calls in one session run one at a time (the state is
//! behind an async mutex), like one person at one browser; sessions never share state.
//! A session with no call for the policy's idle TTL is removed, never while a call runs;
//! removing it drops its state, which frees everything it held.

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use crate::error::ToolError;
use crate::policy::SessionPolicy;

/// The tenant a session belongs to. One tenant (`default`) until tenants with auth and quotas
/// arrive; policies per tenant will hang off this.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct TenantId(pub String);

impl Default for TenantId {
    fn default() -> Self {
        TenantId("default".to_string())
    }
}

/// Per-session state of every stateful tool, keyed by the state's type.
#[derive(Default)]
pub struct SessionState {
    slots: HashMap<TypeId, Box<dyn Any + Send>>,
}

impl SessionState {
    /// The state of type `T`, created with `T::default()` on first use.
    pub fn get_or_default<T: Default + Send + 'static>(&mut self) -> &mut T {
        let slot = self
            .slots
            .entry(TypeId::of::<T>())
            .or_insert_with(|| Box::new(T::default()));
        // The map is keyed by TypeId::of::<T>(), so the downcast cannot fail; fall back to
        // replacing the slot rather than panicking if that invariant were ever broken.
        if !slot.is::<T>() {
            *slot = Box::new(T::default());
        }
        slot.downcast_mut::<T>()
            .unwrap_or_else(|| unreachable!("slot type checked above"))
    }
}

/// One session.
pub struct Session {
    id: String,
    tenant: TenantId,
    ephemeral: bool,
    last_used: Mutex<Instant>,
    in_flight: AtomicUsize,
    scratch_root: Option<PathBuf>,
    scratch: OnceLock<tempfile::TempDir>,
    /// Tool state. Lock it for the length of a call so calls in a session run in order.
    pub state: tokio::sync::Mutex<SessionState>,
}

impl Session {
    fn new(id: String, tenant: TenantId, ephemeral: bool, scratch_root: Option<PathBuf>) -> Self {
        Self {
            id,
            tenant,
            ephemeral,
            last_used: Mutex::new(Instant::now()),
            in_flight: AtomicUsize::new(0),
            scratch_root,
            scratch: OnceLock::new(),
            state: tokio::sync::Mutex::new(SessionState::default()),
        }
    }

    /// The session's private scratch directory, created on first use (mode 0700, under the
    /// policy's `sessions.scratch_root` or the system temporary directory) and deleted with
    /// the session. The browser's downloads and the Python runners share it, as in Sibyl.
    ///
    /// # Errors
    /// The I/O error if the directory cannot be created.
    pub fn scratch_dir(&self) -> std::io::Result<&Path> {
        if let Some(d) = self.scratch.get() {
            return Ok(d.path());
        }
        let mut b = tempfile::Builder::new();
        b.prefix("sibyl-session-");
        let dir = match &self.scratch_root {
            Some(root) => b.tempdir_in(root)?,
            None => b.tempdir()?,
        };
        // A racing initialiser may win; its directory is used and ours is deleted on drop.
        Ok(self.scratch.get_or_init(|| dir).path())
    }

    /// The session id (empty for an ephemeral one-call session).
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The tenant the session belongs to.
    pub fn tenant(&self) -> &TenantId {
        &self.tenant
    }

    /// True for a one-call session that is dropped when the call ends.
    pub fn is_ephemeral(&self) -> bool {
        self.ephemeral
    }

    fn touch(&self) {
        if let Ok(mut t) = self.last_used.lock() {
            *t = Instant::now();
        }
    }

    fn idle_for(&self, now: Instant) -> Duration {
        self.last_used
            .lock()
            .map(|t| now.saturating_duration_since(*t))
            .unwrap_or_default()
    }
}

/// Marks a call in progress in a session; the session cannot expire while one exists.
pub struct CallGuard {
    session: Arc<Session>,
}

impl CallGuard {
    /// The session of the call.
    pub fn session(&self) -> &Arc<Session> {
        &self.session
    }
}

impl Drop for CallGuard {
    fn drop(&mut self) {
        self.session.touch();
        self.session.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

/// All open sessions of the server.
pub struct SessionManager {
    policy: SessionPolicy,
    sessions: Mutex<HashMap<String, Arc<Session>>>,
}

impl SessionManager {
    /// An empty manager enforcing `policy` (idle TTL, max sessions).
    pub fn new(policy: SessionPolicy) -> Self {
        Self {
            policy,
            sessions: Mutex::new(HashMap::new()),
        }
    }

    /// The idle TTL in force.
    pub fn idle_ttl(&self) -> Duration {
        self.policy.idle_ttl
    }

    fn map(&self) -> Result<std::sync::MutexGuard<'_, HashMap<String, Arc<Session>>>, ToolError> {
        self.sessions
            .lock()
            .map_err(|_| ToolError::Internal("session table lock poisoned".into()))
    }

    /// Opens a session for `tenant`.
    ///
    /// # Errors
    /// [`ToolError::ResourceExhausted`] when `sessions.max_sessions` are open.
    pub fn open(&self, tenant: TenantId) -> Result<Arc<Session>, ToolError> {
        let now = Instant::now();
        let mut map = self.map()?;
        if map.len() >= self.policy.max_sessions {
            Self::remove_expired(&mut map, now, self.policy.idle_ttl);
        }
        if map.len() >= self.policy.max_sessions {
            return Err(ToolError::ResourceExhausted(format!(
                "too many open sessions: sessions.max_sessions = {} reached; close one first",
                self.policy.max_sessions
            )));
        }
        let id = uuid::Uuid::new_v4().simple().to_string();
        let session = Arc::new(Session::new(
            id.clone(),
            tenant,
            false,
            self.policy.scratch_root.clone(),
        ));
        map.insert(id, session.clone());
        tracing::debug!(session = %session.id, "session opened");
        Ok(session)
    }

    /// Starts a call in session `id` (or in a fresh ephemeral session when `id` is empty).
    ///
    /// # Errors
    /// [`ToolError::UnknownSession`] when the id is unknown or the session idled past its TTL.
    pub fn begin_call(&self, id: &str) -> Result<CallGuard, ToolError> {
        let session = if id.is_empty() {
            Arc::new(Session::new(
                String::new(),
                TenantId::default(),
                true,
                self.policy.scratch_root.clone(),
            ))
        } else {
            let mut map = self.map()?;
            let Some(s) = map.get(id).cloned() else {
                return Err(ToolError::UnknownSession(truncate_id(id)));
            };
            if s.in_flight.load(Ordering::Acquire) == 0
                && s.idle_for(Instant::now()) > self.policy.idle_ttl
            {
                map.remove(id);
                tracing::debug!(session = %id, "session expired");
                return Err(ToolError::UnknownSession(truncate_id(id)));
            }
            s
        };
        // Counted while the table lock was held, so the reaper cannot remove it in between.
        session.in_flight.fetch_add(1, Ordering::AcqRel);
        session.touch();
        Ok(CallGuard { session })
    }

    /// Closes session `id`, dropping all its state.
    ///
    /// # Errors
    /// [`ToolError::UnknownSession`] when there is no such session.
    pub fn close(&self, id: &str) -> Result<(), ToolError> {
        let removed = self.map()?.remove(id);
        match removed {
            Some(_) => {
                tracing::debug!(session = %id, "session closed");
                Ok(())
            }
            None => Err(ToolError::UnknownSession(truncate_id(id))),
        }
    }

    /// Number of open sessions.
    pub fn len(&self) -> usize {
        self.map().map(|m| m.len()).unwrap_or(0)
    }

    /// True when no session is open.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Removes every session idle past the TTL with no call running; returns how many.
    pub fn reap(&self) -> usize {
        match self.map() {
            Ok(mut map) => Self::remove_expired(&mut map, Instant::now(), self.policy.idle_ttl),
            Err(_) => 0,
        }
    }

    fn remove_expired(
        map: &mut HashMap<String, Arc<Session>>,
        now: Instant,
        ttl: Duration,
    ) -> usize {
        let before = map.len();
        map.retain(|_, s| s.in_flight.load(Ordering::Acquire) > 0 || s.idle_for(now) <= ttl);
        let n = before - map.len();
        if n > 0 {
            tracing::info!(expired = n, "idle sessions closed");
        }
        n
    }

    /// Runs [`reap`](Self::reap) periodically (every quarter TTL, at most every 30 s) until
    /// the manager is dropped.
    pub fn spawn_reaper(self: &Arc<Self>) -> tokio::task::JoinHandle<()> {
        let weak = Arc::downgrade(self);
        let period =
            (self.policy.idle_ttl / 4).clamp(Duration::from_millis(100), Duration::from_secs(30));
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(period);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                let Some(mgr) = weak.upgrade() else { break };
                mgr.reap();
            }
        })
    }
}

/// Session ids come from clients: echo at most 64 characters of one back.
fn truncate_id(id: &str) -> String {
    id.chars().take(64).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mgr(ttl_ms: u64, max: usize) -> SessionManager {
        SessionManager::new(SessionPolicy {
            idle_ttl: Duration::from_millis(ttl_ms),
            max_sessions: max,
            scratch_root: None,
        })
    }

    #[test]
    fn open_call_close() {
        let m = mgr(60_000, 2);
        let s = m.open(TenantId::default()).expect("open");
        assert_eq!(s.id().len(), 32);
        drop(m.begin_call(s.id()).expect("call"));
        m.close(s.id()).expect("close");
        assert!(matches!(
            m.begin_call(s.id()),
            Err(ToolError::UnknownSession(_))
        ));
        assert!(matches!(m.close(s.id()), Err(ToolError::UnknownSession(_))));
    }

    #[test]
    fn max_sessions_is_enforced() {
        let m = mgr(60_000, 2);
        let _a = m.open(TenantId::default()).expect("a");
        let _b = m.open(TenantId::default()).expect("b");
        assert!(matches!(
            m.open(TenantId::default()),
            Err(ToolError::ResourceExhausted(ref msg)) if msg.contains("sessions.max_sessions")
        ));
    }

    #[test]
    fn idle_sessions_expire_but_not_during_a_call() {
        let m = mgr(30, 10);
        let idle = m.open(TenantId::default()).expect("idle");
        let busy = m.open(TenantId::default()).expect("busy");
        let guard = m.begin_call(busy.id()).expect("call");
        std::thread::sleep(Duration::from_millis(60));
        assert_eq!(m.reap(), 1);
        assert!(matches!(
            m.begin_call(idle.id()),
            Err(ToolError::UnknownSession(_))
        ));
        drop(guard);
        assert!(m.begin_call(busy.id()).is_ok());
    }

    #[test]
    fn scratch_dirs_are_private_and_freed_on_close() {
        let root = tempfile::tempdir().expect("root");
        let m = SessionManager::new(SessionPolicy {
            idle_ttl: Duration::from_secs(60),
            max_sessions: 4,
            scratch_root: Some(root.path().to_path_buf()),
        });
        let a = m.open(TenantId::default()).expect("a");
        let b = m.open(TenantId::default()).expect("b");
        let da = a.scratch_dir().expect("dir a").to_path_buf();
        let db = b.scratch_dir().expect("dir b").to_path_buf();
        assert_ne!(da, db);
        assert_eq!(a.scratch_dir().expect("again"), da.as_path());
        assert!(da.starts_with(root.path()) && da.is_dir());
        m.close(a.id()).expect("close");
        drop(a);
        assert!(!da.exists(), "closing a session deletes its scratch dir");
        assert!(db.is_dir());
    }

    #[test]
    fn state_is_per_session() {
        let a = Session::new("a".into(), TenantId::default(), false, None);
        let b = Session::new("b".into(), TenantId::default(), false, None);
        *a.state.try_lock().expect("lock").get_or_default::<u32>() = 7;
        assert_eq!(
            *b.state.try_lock().expect("lock").get_or_default::<u32>(),
            0
        );
        assert_eq!(
            *a.state.try_lock().expect("lock").get_or_default::<u32>(),
            7
        );
    }
}
