//! The subprocess runner: the host's `python3` inside a bubblewrap sandbox.
//!
//! Each call runs
//! `prlimit <rlimits> -- setpriv --reuid U --regid U --clear-groups --inh-caps=-all
//! --no-new-privs -- bwrap --unshare-{user,pid,net,ipc,uts} --seccomp 0 --disable-userns
//! --die-with-parent …
//! python3 -u /run/sibyl/main.py` (the program bound read-only), where `U` is an
//! unprivileged host uid of its own for each session (`runner.subprocess.uid_base` + n), so the process limit counts only that session and the
//! sandbox owns nothing on the host but its scratch directory. Inside: a read-only bind of
//! `ro_binds` (default `/usr` and the merged-/usr symlinks), a private `/proc` of its own PID
//! namespace, a minimal `/dev`, a size-capped tmpfs `/tmp`, the session's scratch directory
//! at `/scratch` (the working directory, the only writable host path), an empty environment
//! but `PATH`, `HOME`, `TMPDIR`, `LANG`, no capabilities and no network (its own network
//! namespace has only a down loopback). At the deadline, or when output passes its cap, the
//! outer bwrap is killed with SIGKILL; `--die-with-parent` kills the namespace's init and the
//! kernel kills every process of the PID namespace with it, so no orphan survives a call.
//!
//! Notebook sessions (`runner.subprocess.notebook`, on by default): the calls of a session run
//! in one such sandbox kept between calls, a small driver ([`KERNEL_PY`]) that reads each
//! call's code from stdin and runs it in one `__main__` namespace, so variables and imports
//! persist like a notebook's. After each call it kills every other process of its PID
//! namespace (`kill(-1, SIGKILL)`), so no child outlives the call that started it, then writes
//! an end marker with the call's status on stdout and on stderr. A call that hits a limit
//! (time, output, disk) or ends the interpreter (`os._exit`, a crash) ends the kernel, as in
//! the WASM runner: the next call starts a fresh one (files in `/scratch` remain). Calls
//! without a session always get a fresh sandbox. The kernel's CPU-time limit is 32 call
//! deadlines over its life. At most `runner.subprocess.max_notebooks` kernels live at once
//! (an idle one is ~6 MB); a session that finds none free runs its call in a fresh sandbox,
//! and its stderr ends with a note saying so.
//!
//! A seccomp deny-list (see `seccomp_program`) is passed to bwrap (`--seccomp 0`, the filter
//! on stdin), so the program is written to a file bound read-only at `/run/sibyl/main.py`.
//! The deny-list does not look at `clone` flags; `--disable-userns` closes the one that
//! matters (a nested user namespace, the way to regain capabilities inside the sandbox).
//! Not applied: Landlock; the startup report says so.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::policy::{Protection, RunnerKind, SubprocessPolicy};
use super::{LimitHit, RunOutcome, Runner, RunnerError, StreamKind, emit, lossy, millis};
use crate::session::Session;

const NAME: &str = "subprocess";
/// Where the program is bound inside the sandbox when stdin carries the seccomp filter.
const PROGRAM: &str = "/run/sibyl/main.py";

/// The notebook kernel's driver: reads `NONCE LENGTH\n` + code frames from stdin, runs each
/// in one `__main__` namespace with the code's own tracebacks, kills every other process of
/// the sandbox, and ends each call with `\0SIBYL-END NONCE STATUS\n` on stdout and
/// `\0SIBYL-END NONCE\n` on stderr.
const KERNEL_PY: &str = r#"import os, sys, traceback
_frames = sys.stdin.buffer
sys.stdin = open(os.devnull)
_ns = {"__name__": "__main__", "__builtins__": __builtins__}
def _flush():
    for f in (sys.stdout, sys.stderr):
        try:
            f.flush()
        except BaseException:
            pass
while True:
    _head = _frames.readline()
    if not _head:
        break
    _nonce, _size = _head.split()
    _src = _frames.read(int(_size)).decode("utf-8", "replace")
    _status = 0
    try:
        exec(compile(_src, "<string>", "exec"), _ns)
    except SystemExit as _e:
        _c = _e.code
        if _c is None:
            _status = 0
        elif isinstance(_c, int):
            _status = _c & 0xFF
        else:
            print(_c, file=sys.stderr)
            _status = 1
    except BaseException as _e:
        _tb = _e.__traceback__
        if _tb is not None and _tb.tb_frame.f_code.co_filename == __file__:
            _tb = _tb.tb_next
        traceback.print_exception(type(_e), _e, _tb)
        _status = 1
    _flush()
    try:
        os.kill(-1, 9)
    except OSError:
        pass
    os.write(1, b"\0SIBYL-END " + _nonce + b" " + str(_status).encode() + b"\n")
    os.write(2, b"\0SIBYL-END " + _nonce + b"\n")
"#;

/// A session's running notebook kernel (see the module docs).
struct Kernel {
    /// Its place among `runner.subprocess.max_notebooks`, given back when it ends.
    _slot: tokio::sync::OwnedSemaphorePermit,
    child: tokio::process::Child,
    stdin: tokio::process::ChildStdin,
    stdout: tokio::process::ChildStdout,
    stderr: tokio::process::ChildStderr,
}

/// The session's kernel, if one is running; dropping it kills the sandbox.
#[derive(Default)]
struct KernelSlot {
    kernel: Option<Kernel>,
}

/// The sandbox uid of a session, kept in its state map.
#[derive(Default)]
struct SandboxUser {
    uid: Option<u32>,
}

/// The subprocess runner (see the module docs).
pub struct SubprocessRunner {
    policy: SubprocessPolicy,
    timeout: Duration,
    max_output: usize,
    memory_bytes: u64,
    max_disk: u64,
    supported: HashMap<Protection, bool>,
    unavailable: Option<String>,
    next_uid: AtomicU32,
    symlinks: Vec<(String, String)>,
    /// The compiled seccomp filter (BPF), handed to bwrap as its stdin (`--seccomp 0`).
    seccomp: Option<tempfile::NamedTempFile>,
    /// Where each run's program is written (mode 0711: others cannot list it) and bound
    /// read-only into the sandbox, since stdin carries the seccomp filter.
    code_dir: Option<tempfile::TempDir>,
    /// The notebook kernel's driver, bound read-only at [`PROGRAM`] in kernel sandboxes.
    kernel_program: Option<tempfile::TempPath>,
    /// Places for live notebook kernels (`runner.subprocess.max_notebooks`).
    notebooks: std::sync::Arc<tokio::sync::Semaphore>,
}

impl SubprocessRunner {
    /// Builds the runner and probes which protections this host supports (a few short
    /// sandbox starts, logged at `info`). A protection listed in
    /// `runner.subprocess.require` that the host lacks makes the runner unavailable; one
    /// that is missing but not required is left out of the sandbox and logged at `warn`.
    pub fn new(policy: &super::RunnerPolicy) -> Self {
        let sp = policy.subprocess.clone();
        let mut symlinks = Vec::new();
        for top in ["bin", "sbin", "lib", "lib32", "lib64", "libx32"] {
            let p = Path::new("/").join(top);
            if let Ok(target) = std::fs::read_link(&p) {
                let t = target.to_string_lossy().into_owned();
                let abs = Path::new("/").join(&target);
                if sp.ro_binds.iter().any(|b| abs.starts_with(b)) {
                    symlinks.push((t, format!("/{top}")));
                }
            }
        }
        let mut me = Self {
            timeout: policy.timeout,
            max_output: policy.max_output_bytes,
            memory_bytes: policy.memory_bytes,
            max_disk: policy.max_disk_bytes,
            supported: HashMap::new(),
            unavailable: None,
            next_uid: AtomicU32::new(0),
            symlinks,
            policy: sp,
            seccomp: None,
            code_dir: None,
            kernel_program: None,
            notebooks: std::sync::Arc::new(tokio::sync::Semaphore::new(
                policy.subprocess.max_notebooks,
            )),
        };
        match (seccomp_file(), code_dir()) {
            (Ok(f), Ok(d)) => {
                me.seccomp = Some(f);
                match kernel_file(d.path()) {
                    Ok(k) => me.kernel_program = Some(k),
                    Err(e) => {
                        tracing::warn!(runner = NAME, error = %e, "no notebook kernel");
                    }
                }
                me.code_dir = Some(d);
            }
            (Err(e), _) | (_, Err(e)) => {
                tracing::warn!(runner = NAME, error = %e, "no seccomp filter");
            }
        }
        if !me.policy.enabled {
            me.unavailable = Some("disabled by runner.subprocess.enabled = false".into());
            return me;
        }
        for (tool, path) in [
            ("bwrap", me.policy.bwrap.clone()),
            ("python", me.policy.python.clone()),
            ("prlimit", PathBuf::from("/usr/bin/prlimit")),
            ("setpriv", PathBuf::from("/usr/bin/setpriv")),
        ] {
            if !path.is_file() {
                me.unavailable = Some(format!(
                    "{tool} not found at {} (scripts/setup installs bubblewrap)",
                    path.display()
                ));
                tracing::warn!(runner = NAME, reason = ?me.unavailable, "runner unavailable");
                return me;
            }
        }
        me.probe();
        me
    }

    fn probe(&mut self) {
        let scratch = match tempfile::Builder::new().prefix("sibyl-probe-").tempdir() {
            Ok(d) => d,
            Err(e) => {
                self.unavailable = Some(format!("cannot make a probe directory: {e}"));
                return;
            }
        };
        let uid = self.policy.uid_base;
        let _ = std::os::unix::fs::chown(scratch.path(), Some(uid), Some(uid));
        // The base sandbox (user + mount namespaces) is needed for anything to run.
        let all: Vec<Protection> = Protection::ALL.to_vec();
        let try_with = |me: &Self, prot: &[Protection]| -> bool {
            let mut cmd = me.command(scratch.path(), uid, prot, None, None);
            let stdin = if prot.contains(&Protection::Seccomp) {
                match me.seccomp.as_ref().map(|f| f.reopen()) {
                    Some(Ok(f)) => Stdio::from(f),
                    _ => return false,
                }
            } else {
                Stdio::null()
            };
            cmd.stdin(stdin).stdout(Stdio::null()).stderr(Stdio::null());
            let std_cmd = cmd.as_std_mut();
            std_cmd.arg("-c").arg("pass");
            matches!(std_cmd.status(), Ok(s) if s.success())
        };
        if try_with(self, &all) {
            for p in Protection::ALL {
                self.supported.insert(p, true);
            }
        } else {
            let base = [Protection::UserNamespace, Protection::MountNamespace];
            let base_ok = try_with(self, &base);
            for p in Protection::ALL {
                let ok = if base.contains(&p) {
                    base_ok
                } else {
                    base_ok && try_with(self, &[base[0], base[1], p])
                };
                self.supported.insert(p, ok);
            }
        }
        let report: Vec<String> = Protection::ALL
            .iter()
            .map(|p| format!("{}={}", p.as_str(), if self.has(*p) { "yes" } else { "NO" }))
            .collect();
        tracing::info!(
            runner = NAME,
            protections = %report.join(" "),
            landlock = "not applied",
            "subprocess sandbox protections on this host"
        );
        let missing: Vec<&str> = self
            .policy
            .require
            .iter()
            .filter(|p| !self.has(**p))
            .map(|p| p.as_str())
            .collect();
        if !missing.is_empty() {
            self.unavailable = Some(format!(
                "this host lacks required protections: {} (runner.subprocess.require)",
                missing.join(", ")
            ));
            tracing::warn!(runner = NAME, reason = ?self.unavailable, "runner refused");
        } else if !self.has(Protection::UserNamespace) || !self.has(Protection::MountNamespace) {
            self.unavailable = Some("bubblewrap cannot create a sandbox on this host".into());
        }
    }

    fn has(&self, p: Protection) -> bool {
        self.supported.get(&p).copied().unwrap_or(false)
    }

    /// Protections in force for runs (those the host supports).
    pub fn protections(&self) -> Vec<Protection> {
        Protection::ALL
            .into_iter()
            .filter(|p| self.has(*p))
            .collect()
    }

    /// The full sandbox command up to `python3 -u`; the caller appends the program path (or
    /// `-` to read it from stdin when there is no seccomp filter).
    ///
    /// A notebook kernel (`filter_on_fd3`) lives for many calls: its CPU-time limit is 32
    /// call deadlines, and its stdin carries the code, so the seccomp filter reaches bwrap
    /// as file descriptor 3, opened by `/bin/sh` just before it becomes bwrap.
    fn command(
        &self,
        scratch: &Path,
        uid: u32,
        prot: &[Protection],
        program: Option<&Path>,
        filter_on_fd3: Option<&Path>,
    ) -> tokio::process::Command {
        let p = &self.policy;
        let cpu_secs = if filter_on_fd3.is_some() {
            self.timeout.as_secs().saturating_mul(32) + 1
        } else {
            self.timeout.as_secs() + 1
        };
        let mut cmd = tokio::process::Command::new("/usr/bin/prlimit");
        if prot.contains(&Protection::Rlimits) {
            cmd.arg(format!("--nproc={}", p.max_processes))
                .arg(format!("--as={}", self.memory_bytes))
                .arg(format!("--fsize={}", p.max_file_bytes))
                .arg(format!("--nofile={}", p.max_open_files))
                .arg(format!("--cpu={cpu_secs}"))
                .arg("--core=0");
        }
        cmd.arg("--")
            .arg("/usr/bin/setpriv")
            .arg(format!("--reuid={uid}"))
            .arg(format!("--regid={uid}"))
            .arg("--clear-groups")
            .arg("--inh-caps=-all")
            .arg("--no-new-privs")
            .arg("--");
        if let Some(filter) = filter_on_fd3 {
            cmd.args(["/bin/sh", "-c", "exec \"$@\" 3<\"$0\""])
                .arg(filter);
        }
        cmd.arg(&p.bwrap);
        if prot.contains(&Protection::UserNamespace) {
            cmd.arg("--unshare-user");
        }
        if prot.contains(&Protection::PidNamespace) {
            cmd.arg("--unshare-pid");
        }
        if prot.contains(&Protection::NetNamespace) {
            cmd.arg("--unshare-net");
        }
        if prot.contains(&Protection::IpcNamespace) {
            cmd.arg("--unshare-ipc");
        }
        if prot.contains(&Protection::Seccomp) {
            let fd = if filter_on_fd3.is_some() { "3" } else { "0" };
            cmd.args(["--seccomp", fd]);
        }
        if prot.contains(&Protection::NoNestedUserns) {
            cmd.arg("--disable-userns");
        }
        if let Some(p) = program {
            cmd.arg("--ro-bind").arg(p).arg(PROGRAM);
        }
        cmd.args([
            "--unshare-uts",
            "--hostname",
            "sandbox",
            "--unshare-cgroup-try",
        ])
        .args(["--die-with-parent", "--new-session"]);
        for b in &p.ro_binds {
            cmd.arg("--ro-bind").arg(b).arg(b);
        }
        for (target, link) in &self.symlinks {
            cmd.args(["--symlink", target, link]);
        }
        cmd.args(["--proc", "/proc", "--dev", "/dev"])
            .arg("--size")
            .arg(p.tmp_bytes.to_string())
            .args(["--tmpfs", "/tmp"])
            .arg("--bind")
            .arg(scratch)
            .arg("/scratch")
            .args(["--chdir", "/scratch", "--clearenv"])
            .args(["--setenv", "PATH", "/usr/local/bin:/usr/bin:/bin"])
            .args(["--setenv", "HOME", "/scratch"])
            .args(["--setenv", "TMPDIR", "/tmp"])
            .args(["--setenv", "LANG", "C.UTF-8"])
            .args(["--setenv", "PYTHONDONTWRITEBYTECODE", "1"])
            .args(["--cap-drop", "ALL", "--"])
            .arg(&p.python)
            .arg("-u");
        cmd.env_clear()
            .env("PATH", "/usr/bin:/bin")
            .current_dir("/")
            .kill_on_drop(true);
        cmd
    }

    /// Runs one call in the session's notebook kernel, starting the kernel if needed.
    #[allow(clippy::too_many_arguments)]
    async fn run_in_kernel(
        &self,
        slot: &mut KernelSlot,
        place: Option<tokio::sync::OwnedSemaphorePermit>,
        scratch: &Path,
        uid: u32,
        prot: &[Protection],
        kernel_program: &Path,
        filter: &Path,
        code: &str,
    ) -> Result<RunOutcome, RunnerError> {
        let start_err = |reason: String| RunnerError::Start {
            runner: NAME,
            reason,
        };
        let started = Instant::now();
        let deadline = tokio::time::Instant::now() + self.timeout;
        if slot.kernel.is_none() {
            let Some(place) = place else {
                return Err(start_err("no notebook place".into()));
            };
            let mut cmd = self.command(scratch, uid, prot, Some(kernel_program), Some(filter));
            cmd.arg(PROGRAM)
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped());
            let mut child = cmd
                .spawn()
                .map_err(|e| start_err(format!("cannot start bubblewrap: {e}")))?;
            let (Some(stdin), Some(stdout), Some(stderr)) =
                (child.stdin.take(), child.stdout.take(), child.stderr.take())
            else {
                let _ = child.start_kill();
                return Err(start_err("pipes missing".into()));
            };
            slot.kernel = Some(Kernel {
                _slot: place,
                child,
                stdin,
                stdout,
                stderr,
            });
        }
        let Some(k) = slot.kernel.as_mut() else {
            return Err(start_err("no kernel".into()));
        };
        let nonce = uuid::Uuid::new_v4().simple().to_string();
        let mut frame = format!("{nonce} {}\n", code.len()).into_bytes();
        frame.extend_from_slice(code.as_bytes());
        // A kernel that died while idle fails the write; its exit is reported below.
        let wrote = tokio::time::timeout_at(deadline, k.stdin.write_all(&frame))
            .await
            .map(|r| r.is_ok())
            .unwrap_or(false);
        let marker = format!("\0SIBYL-END {nonce}").into_bytes();
        let collected = if wrote {
            collect_turn(
                &mut k.stdout,
                &mut k.stderr,
                &marker,
                deadline,
                self.max_output,
                scratch,
                self.max_disk,
            )
            .await
        } else {
            Turn::default()
        };
        let mut limit = collected.limit;
        let (mut exit_code, mut signal) = (collected.status, None);
        if limit.is_some() || collected.status.is_none() {
            // Stopped by a limit, or the interpreter ended: the kernel goes.
            let _ = k.child.start_kill();
            let status = match tokio::time::timeout(Duration::from_secs(5), k.child.wait()).await {
                Ok(Ok(s)) => Some(s),
                _ => None,
            };
            slot.kernel = None;
            if limit.is_none() {
                use std::os::unix::process::ExitStatusExt;
                (exit_code, signal) = match status {
                    Some(s) => (s.code(), s.signal()),
                    None => (None, None),
                };
                if let Some(c) = exit_code
                    && c > 128
                    && c < 128 + 65
                {
                    signal = Some(c - 128);
                    exit_code = None;
                }
            }
        }
        if limit.is_some() {
            exit_code = None;
        } else {
            limit = classify(exit_code, signal, &collected.err);
        }
        let duration = started.elapsed();
        tracing::debug!(
            runner = NAME,
            uid,
            ms = millis(duration),
            ?exit_code,
            ?signal,
            limit = limit.map(|l| l.as_str()),
            kernel_kept = slot.kernel.is_some(),
            "notebook run"
        );
        Ok(RunOutcome {
            runner: RunnerKind::Subprocess,
            stdout: lossy(&collected.out),
            stderr: lossy(&collected.err),
            exit_code,
            signal,
            duration_ms: millis(duration),
            limit,
            truncated: collected.truncated,
        })
    }

    fn session_uid(&self, user: &mut SandboxUser) -> u32 {
        *user.uid.get_or_insert_with(|| {
            let n = self.next_uid.fetch_add(1, Ordering::Relaxed) % self.policy.uid_count;
            self.policy.uid_base.saturating_add(n)
        })
    }
}

/// Reads both pipes until EOF, the deadline or the output cap.
struct Collected {
    out: Vec<u8>,
    err: Vec<u8>,
    limit: Option<LimitHit>,
    truncated: bool,
}

async fn collect(
    mut stdout: tokio::process::ChildStdout,
    mut stderr: tokio::process::ChildStderr,
    deadline: tokio::time::Instant,
    cap: usize,
    scratch: &Path,
    max_disk: u64,
) -> Collected {
    let mut watchdog = tokio::time::interval(Duration::from_millis(200));
    watchdog.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut c = Collected {
        out: Vec::new(),
        err: Vec::new(),
        limit: None,
        truncated: false,
    };
    let (mut out_done, mut err_done) = (false, false);
    let mut b1 = vec![0u8; 16 << 10];
    let mut b2 = vec![0u8; 16 << 10];
    while !(out_done && err_done) {
        let (stream, n) = tokio::select! {
            r = stdout.read(&mut b1), if !out_done => match r {
                Ok(0) | Err(_) => { out_done = true; continue; }
                Ok(n) => (StreamKind::Stdout, n),
            },
            r = stderr.read(&mut b2), if !err_done => match r {
                Ok(0) | Err(_) => { err_done = true; continue; }
                Ok(n) => (StreamKind::Stderr, n),
            },
            _ = tokio::time::sleep_until(deadline) => {
                c.limit = Some(LimitHit::Time);
                break;
            }
            _ = watchdog.tick() => {
                if over_disk(scratch, max_disk).await {
                    c.limit = Some(LimitHit::Disk);
                    break;
                }
                continue;
            }
        };
        let (buf, data) = match stream {
            StreamKind::Stdout => (&mut c.out, &b1[..n]),
            StreamKind::Stderr => (&mut c.err, &b2[..n]),
        };
        let room = cap.saturating_sub(buf.len());
        let keep = &data[..n.min(room)];
        buf.extend_from_slice(keep);
        emit(stream, keep);
        if n > room {
            c.limit = Some(LimitHit::Output);
            c.truncated = true;
            break;
        }
    }
    c
}

/// What one notebook call produced.
#[derive(Default)]
struct Turn {
    out: Vec<u8>,
    err: Vec<u8>,
    /// The status from the end marker; `None` if the kernel ended (or was stopped) first.
    status: Option<i32>,
    limit: Option<LimitHit>,
    truncated: bool,
}

/// One stream of a notebook call: output is passed on as it comes, except for a last few
/// bytes that could be the start of the end marker.
struct MarkedStream {
    pending: Vec<u8>,
    kept: Vec<u8>,
    done: bool,
    /// What followed the marker up to its newline (the status, on stdout).
    tail: Vec<u8>,
}

impl MarkedStream {
    fn new() -> Self {
        Self {
            pending: Vec::new(),
            kept: Vec::new(),
            done: false,
            tail: Vec::new(),
        }
    }

    /// Takes `data`; returns the bytes now known to be output, or `Err(())` when the output
    /// cap was passed (the bytes up to the cap are kept and passed on).
    fn push(
        &mut self,
        stream: StreamKind,
        data: &[u8],
        marker: &[u8],
        cap: usize,
    ) -> Result<(), ()> {
        self.pending.extend_from_slice(data);
        let (ready, rest_from) = match find(&self.pending, marker) {
            Some(i) => {
                let after = &self.pending[i + marker.len()..];
                match after.iter().position(|b| *b == b'\n') {
                    Some(nl) => {
                        self.tail = after[..nl].to_vec();
                        self.done = true;
                        (i, None)
                    }
                    // The marker's line is not complete yet: wait for more.
                    None => (i, Some(i)),
                }
            }
            None => {
                let keep_back = partial_suffix(&self.pending, marker);
                let ready = self.pending.len() - keep_back;
                (ready, Some(ready))
            }
        };
        let room = cap.saturating_sub(self.kept.len());
        let take = ready.min(room);
        self.kept.extend_from_slice(&self.pending[..take]);
        emit(stream, &self.pending[..take]);
        let over = ready > room;
        match rest_from {
            Some(from) => {
                self.pending.drain(..from);
            }
            None => self.pending.clear(),
        }
        if over { Err(()) } else { Ok(()) }
    }
}

/// Length of the longest end of `data` that is a start of `marker` (shorter than it).
fn partial_suffix(data: &[u8], marker: &[u8]) -> usize {
    let longest = marker.len().saturating_sub(1).min(data.len());
    (1..=longest)
        .rev()
        .find(|k| data.ends_with(&marker[..*k]))
        .unwrap_or(0)
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    if needle.is_empty() || haystack.len() < needle.len() {
        return None;
    }
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// Reads a notebook call's output up to both end markers, the deadline, the output cap, the
/// disk cap, or the kernel's end (EOF).
async fn collect_turn(
    stdout: &mut tokio::process::ChildStdout,
    stderr: &mut tokio::process::ChildStderr,
    marker: &[u8],
    deadline: tokio::time::Instant,
    cap: usize,
    scratch: &Path,
    max_disk: u64,
) -> Turn {
    let mut watchdog = tokio::time::interval(Duration::from_millis(200));
    watchdog.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut t = Turn::default();
    let (mut o, mut e) = (MarkedStream::new(), MarkedStream::new());
    let (mut out_eof, mut err_eof) = (false, false);
    let mut b1 = vec![0u8; 16 << 10];
    let mut b2 = vec![0u8; 16 << 10];
    while !((o.done || out_eof) && (e.done || err_eof)) {
        let pushed = tokio::select! {
            r = stdout.read(&mut b1), if !o.done && !out_eof => match r {
                Ok(0) | Err(_) => { out_eof = true; continue; }
                Ok(n) => o.push(StreamKind::Stdout, &b1[..n], marker, cap),
            },
            r = stderr.read(&mut b2), if !e.done && !err_eof => match r {
                Ok(0) | Err(_) => { err_eof = true; continue; }
                Ok(n) => e.push(StreamKind::Stderr, &b2[..n], marker, cap),
            },
            _ = tokio::time::sleep_until(deadline) => {
                t.limit = Some(LimitHit::Time);
                break;
            }
            _ = watchdog.tick() => {
                if over_disk(scratch, max_disk).await {
                    t.limit = Some(LimitHit::Disk);
                    break;
                }
                continue;
            }
        };
        if pushed.is_err() {
            t.limit = Some(LimitHit::Output);
            t.truncated = true;
            break;
        }
    }
    if t.limit.is_none() && o.done && e.done {
        t.status = std::str::from_utf8(&o.tail)
            .ok()
            .and_then(|s| s.trim().parse().ok());
    }
    // A kernel that ended or was stopped mid-call may have left output short of a marker.
    if t.status.is_none() && !t.truncated {
        for (s, kind) in [(&mut o, StreamKind::Stdout), (&mut e, StreamKind::Stderr)] {
            let room = cap.saturating_sub(s.kept.len());
            let take = s.pending.len().min(room);
            s.kept.extend_from_slice(&s.pending[..take]);
            emit(kind, &s.pending[..take]);
        }
    }
    t.out = o.kept;
    t.err = e.kept;
    t
}

/// The disk watchdog's check: whether the scratch directory holds more than `max_disk`
/// bytes or [`super::MAX_DISK_ENTRIES`] entries (walked on a blocking thread).
async fn over_disk(scratch: &Path, max_disk: u64) -> bool {
    let root = scratch.to_path_buf();
    let (bytes, entries) = tokio::task::spawn_blocking(move || {
        super::disk_usage(&[root.as_path()], super::MAX_DISK_ENTRIES)
    })
    .await
    .unwrap_or((0, 0));
    bytes > max_disk || entries > super::MAX_DISK_ENTRIES
}

/// Names the limit a failed run most likely hit, from its exit and the end of its stderr.
fn classify(exit_code: Option<i32>, signal: Option<i32>, stderr: &[u8]) -> Option<LimitHit> {
    const SIGXCPU: i32 = 24;
    const SIGXFSZ: i32 = 25;
    match signal {
        Some(SIGXCPU) => return Some(LimitHit::Time),
        Some(SIGXFSZ) => return Some(LimitHit::Disk),
        _ => {}
    }
    if exit_code == Some(0) {
        return None;
    }
    let tail = &stderr[stderr.len().saturating_sub(4096)..];
    let tail = String::from_utf8_lossy(tail);
    let last = tail
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("");
    if last.contains("MemoryError") || tail.contains("Cannot allocate memory") {
        Some(LimitHit::Memory)
    } else if last.contains("Resource temporarily unavailable")
        || last.contains("can't start new thread")
    {
        Some(LimitHit::Processes)
    } else if last.contains("File too large") || last.contains("No space left on device") {
        Some(LimitHit::Disk)
    } else if last.contains("Too many open files") {
        Some(LimitHit::OpenFiles)
    } else if tail.contains("Resource temporarily unavailable")
        || tail.contains("can't start new thread")
    {
        // Children of a fork bomb interleave their tracebacks; the limit shows in the tail.
        Some(LimitHit::Processes)
    } else {
        None
    }
}

#[async_trait::async_trait]
impl Runner for SubprocessRunner {
    fn kind(&self) -> RunnerKind {
        RunnerKind::Subprocess
    }

    fn unavailable(&self) -> Option<String> {
        self.unavailable.clone()
    }

    async fn run(&self, session: &Session, code: &str) -> Result<RunOutcome, RunnerError> {
        if let Some(reason) = &self.unavailable {
            return Err(RunnerError::Unavailable {
                runner: NAME,
                reason: reason.clone(),
            });
        }
        let start_err = |reason: String| RunnerError::Start {
            runner: NAME,
            reason,
        };
        // Calls in a session run one at a time.
        let mut state = session.state.lock().await;
        let uid = self.session_uid(state.get_or_default::<SandboxUser>());
        let scratch = session
            .scratch_dir()
            .map_err(|e| start_err(format!("cannot create the scratch directory: {e}")))?
            .to_path_buf();
        std::os::unix::fs::chown(&scratch, Some(uid), Some(uid))
            .map_err(|e| start_err(format!("cannot hand the scratch directory over: {e}")))?;
        let prot = self.protections();
        let mut notebooks_full = false;
        if self.policy.notebook
            && !session.is_ephemeral()
            && let (Some(kernel), Some(filter)) = (&self.kernel_program, &self.seccomp)
            && prot.contains(&Protection::Seccomp)
        {
            let slot = state.get_or_default::<KernelSlot>();
            let alive = slot
                .kernel
                .as_mut()
                .is_some_and(|k| matches!(k.child.try_wait(), Ok(None)));
            if !alive {
                slot.kernel = None;
            }
            let place = if alive {
                None
            } else {
                self.notebooks.clone().try_acquire_owned().ok()
            };
            if alive || place.is_some() {
                return self
                    .run_in_kernel(
                        slot,
                        place,
                        &scratch,
                        uid,
                        &prot,
                        kernel,
                        filter.path(),
                        code,
                    )
                    .await;
            }
            notebooks_full = true;
        }
        let started = Instant::now();
        let deadline = tokio::time::Instant::now() + self.timeout;
        let use_seccomp = prot.contains(&Protection::Seccomp);
        // With seccomp, stdin is the filter and the program is a read-only file.
        let program = match (&self.code_dir, use_seccomp) {
            (Some(dir), true) => {
                let mut f = tempfile::Builder::new()
                    .prefix("prog-")
                    .suffix(".py")
                    .tempfile_in(dir.path())
                    .map_err(|e| start_err(format!("cannot write the program: {e}")))?;
                use std::io::Write;
                use std::os::unix::fs::PermissionsExt;
                f.write_all(code.as_bytes())
                    .and_then(|()| f.flush())
                    .and_then(|()| {
                        std::fs::set_permissions(f.path(), std::fs::Permissions::from_mode(0o644))
                    })
                    .map_err(|e| start_err(format!("cannot write the program: {e}")))?;
                Some(f.into_temp_path())
            }
            _ => None,
        };
        let mut cmd = self.command(&scratch, uid, &prot, program.as_deref(), None);
        let stdin = if use_seccomp {
            let f = self
                .seccomp
                .as_ref()
                .ok_or_else(|| start_err("seccomp filter missing".into()))?
                .reopen()
                .map_err(|e| start_err(format!("cannot open the seccomp filter: {e}")))?;
            cmd.arg(PROGRAM);
            Stdio::from(f)
        } else {
            cmd.arg("-");
            Stdio::piped()
        };
        cmd.stdin(stdin)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd
            .spawn()
            .map_err(|e| start_err(format!("cannot start bubblewrap: {e}")))?;
        let (Some(stdout), Some(stderr)) = (child.stdout.take(), child.stderr.take()) else {
            let _ = child.start_kill();
            return Err(start_err("pipes missing".into()));
        };
        // Without seccomp the program goes through stdin, read whole before it runs; a write
        // that fails means the sandbox died early, which the exit status reports.
        let writer = child.stdin.take().map(|mut stdin| {
            let code = code.as_bytes().to_vec();
            tokio::spawn(async move {
                let _ = stdin.write_all(&code).await;
                drop(stdin);
            })
        });
        let collected = collect(
            stdout,
            stderr,
            deadline,
            self.max_output,
            &scratch,
            self.max_disk,
        )
        .await;
        let mut limit = collected.limit;
        if limit.is_some() {
            let _ = child.start_kill();
        }
        let status = match tokio::time::timeout_at(deadline, child.wait()).await {
            Ok(s) => s.ok(),
            Err(_) => {
                limit = limit.or(Some(LimitHit::Time));
                let _ = child.start_kill();
                child.wait().await.ok()
            }
        };
        if let Some(w) = writer {
            w.abort();
        }
        drop(program);
        let duration = started.elapsed();
        use std::os::unix::process::ExitStatusExt;
        let (mut exit_code, mut signal) = match status {
            Some(s) => (s.code(), s.signal()),
            None => (None, None),
        };
        // bwrap reports a signal-killed child as exit status 128 + signal.
        if let Some(c) = exit_code
            && c > 128
            && c < 128 + 65
            && limit.is_none()
        {
            signal = Some(c - 128);
            exit_code = None;
        }
        if limit.is_some() {
            exit_code = None;
        } else {
            limit = classify(exit_code, signal, &collected.err);
        }
        tracing::debug!(
            runner = NAME,
            uid,
            ms = millis(duration),
            ?exit_code,
            ?signal,
            limit = limit.map(|l| l.as_str()),
            "run"
        );
        let mut stderr = lossy(&collected.err);
        if notebooks_full {
            if !stderr.is_empty() && !stderr.ends_with('\n') {
                stderr.push('\n');
            }
            stderr.push_str(&format!(
                "[sibyl: all {} notebook interpreters of this server are in use \
                 (runner.subprocess.max_notebooks), so this call ran in a fresh interpreter: \
                 variables from earlier calls are not available here, files in the working \
                 directory are]",
                self.policy.max_notebooks
            ));
        }
        Ok(RunOutcome {
            runner: RunnerKind::Subprocess,
            stdout: lossy(&collected.out),
            stderr,
            exit_code,
            signal,
            duration_ms: millis(duration),
            limit,
            truncated: collected.truncated,
        })
    }
}

/// The seccomp filter: the listed system calls fail with EPERM, everything else is allowed
/// (an allow-list would break too much of Python's standard library).
fn seccomp_program() -> Result<Vec<u8>, String> {
    use seccompiler::{BpfProgram, SeccompAction, SeccompFilter, TargetArch};
    let arch = if cfg!(target_arch = "x86_64") {
        TargetArch::x86_64
    } else if cfg!(target_arch = "aarch64") {
        TargetArch::aarch64
    } else {
        return Err("no seccomp filter for this architecture".into());
    };
    let denied: &[libc::c_long] = &[
        libc::SYS_ptrace,
        libc::SYS_process_vm_readv,
        libc::SYS_process_vm_writev,
        libc::SYS_mount,
        libc::SYS_umount2,
        libc::SYS_pivot_root,
        libc::SYS_unshare,
        libc::SYS_setns,
        libc::SYS_keyctl,
        libc::SYS_add_key,
        libc::SYS_request_key,
        libc::SYS_bpf,
        libc::SYS_perf_event_open,
        libc::SYS_userfaultfd,
        libc::SYS_kexec_load,
        libc::SYS_kexec_file_load,
        libc::SYS_init_module,
        libc::SYS_finit_module,
        libc::SYS_delete_module,
        libc::SYS_swapon,
        libc::SYS_swapoff,
        libc::SYS_reboot,
        libc::SYS_acct,
        libc::SYS_quotactl,
        libc::SYS_open_by_handle_at,
        libc::SYS_name_to_handle_at,
        libc::SYS_syslog,
        libc::SYS_kcmp,
        libc::SYS_io_uring_setup,
        libc::SYS_io_uring_enter,
        libc::SYS_io_uring_register,
        libc::SYS_fanotify_init,
        libc::SYS_fsopen,
        libc::SYS_fsmount,
        libc::SYS_move_mount,
        libc::SYS_open_tree,
    ];
    let rules = denied.iter().map(|n| (*n, vec![])).collect();
    let filter = SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::EPERM as u32),
        arch,
    )
    .map_err(|e| e.to_string())?;
    let program: BpfProgram = filter
        .try_into()
        .map_err(|e: seccompiler::BackendError| e.to_string())?;
    let mut bytes = Vec::with_capacity(program.len() * 8);
    for ins in program {
        bytes.extend_from_slice(&ins.code.to_ne_bytes());
        bytes.push(ins.jt);
        bytes.push(ins.jf);
        bytes.extend_from_slice(&ins.k.to_ne_bytes());
    }
    Ok(bytes)
}

fn seccomp_file() -> Result<tempfile::NamedTempFile, String> {
    use std::io::Write;
    let bytes = seccomp_program()?;
    let mut f = tempfile::Builder::new()
        .prefix("sibyl-seccomp-")
        .tempfile()
        .map_err(|e| e.to_string())?;
    f.write_all(&bytes).map_err(|e| e.to_string())?;
    f.flush().map_err(|e| e.to_string())?;
    // Not secret; a notebook kernel's shell opens it as the sandbox uid.
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(f.path(), std::fs::Permissions::from_mode(0o644))
        .map_err(|e| e.to_string())?;
    Ok(f)
}

/// Writes the notebook kernel's driver ([`KERNEL_PY`]) into the programs directory.
fn kernel_file(dir: &Path) -> Result<tempfile::TempPath, String> {
    use std::io::Write;
    use std::os::unix::fs::PermissionsExt;
    let mut f = tempfile::Builder::new()
        .prefix("kernel-")
        .suffix(".py")
        .tempfile_in(dir)
        .map_err(|e| e.to_string())?;
    f.write_all(KERNEL_PY.as_bytes())
        .and_then(|()| f.flush())
        .map_err(|e| e.to_string())?;
    std::fs::set_permissions(f.path(), std::fs::Permissions::from_mode(0o644))
        .map_err(|e| e.to_string())?;
    Ok(f.into_temp_path())
}

fn code_dir() -> Result<tempfile::TempDir, String> {
    use std::os::unix::fs::PermissionsExt;
    let d = tempfile::Builder::new()
        .prefix("sibyl-programs-")
        .tempdir()
        .map_err(|e| e.to_string())?;
    std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o711))
        .map_err(|e| e.to_string())?;
    Ok(d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn end_markers_are_found_across_reads_and_output_is_not_held_back() {
        let marker = b"\0SIBYL-END abc";
        let mut s = MarkedStream::new();
        assert!(s.push(StreamKind::Stdout, b"busy\n", marker, 1000).is_ok());
        assert_eq!(s.kept, b"busy\n", "plain output is passed on at once");
        assert!(
            s.push(StreamKind::Stdout, b"partial\0SIBYL", marker, 1000)
                .is_ok()
        );
        assert_eq!(s.kept, b"busy\npartial");
        assert!(!s.done);
        assert!(
            s.push(StreamKind::Stdout, b"-END abc 3", marker, 1000)
                .is_ok()
        );
        assert!(!s.done, "the marker line is not complete");
        assert!(s.push(StreamKind::Stdout, b"\n", marker, 1000).is_ok());
        assert!(s.done);
        assert_eq!(s.tail, b" 3");
        assert_eq!(s.kept, b"busy\npartial");
        // A NUL that is not a marker is output.
        let mut s = MarkedStream::new();
        assert!(s.push(StreamKind::Stdout, b"a\0b", marker, 1000).is_ok());
        assert_eq!(s.kept, b"a\0b");
        // The cap.
        let mut s = MarkedStream::new();
        assert!(
            s.push(StreamKind::Stdout, b"0123456789", marker, 4)
                .is_err()
        );
        assert_eq!(s.kept, b"0123");
    }
}
