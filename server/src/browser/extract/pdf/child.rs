//! The PDF child process (`sibyl-server extract-pdf`): reads one PDF from stdin, prints a
//! [`ChildReply`](super::ChildReply) as JSON on stdout, and exits 0. A crash, a CPU-time
//! signal or an allocation failure ends it with a non-zero status, which the parent reports.
//!
//! Before the PDF is parsed the child confines itself, in this order:
//! 1. rlimits: address space (`--memory-mb`), CPU seconds (`--cpu-secs`), no core dumps, no
//!    file may be written to (file size 0);
//! 2. binds libpdfium (reading the library is the last file it opens) and reads stdin whole;
//! 3. `no_new_privs` and a seccomp filter: opening files, sockets, `execve`, `fork`,
//!    new namespaces, `ptrace`, and signals to any other process fail with EPERM; `clone3`
//!    fails with ENOSYS (so a thread is made with `clone`, whose flags the filter can check)
//!    and `clone` without `CLONE_THREAD` (a new process) fails with EPERM.
//!
//! Everything runs on the main thread; no other thread exists when the filter is installed.

use std::io::{Read, Write};
use std::path::PathBuf;

use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule, TargetArch,
};

use super::ChildReply;

/// Arguments of `sibyl-server extract-pdf`, set by the parent ([`super::extract`]).
#[derive(Debug, Clone)]
pub struct ChildArgs {
    /// Longest text kept (characters); extraction stops after about 4× this many bytes.
    pub max_chars: usize,
    /// Address-space limit of the child (MiB).
    pub memory_mb: u64,
    /// CPU-time limit of the child (seconds); SIGXCPU then SIGKILL past it.
    pub cpu_secs: u64,
    /// `libpdfium.so` to bind first, else the default search ([`super::pdfium`]).
    pub library: Option<PathBuf>,
    /// Instead of parsing a PDF, confine the process and then try what the sandbox must
    /// refuse; print a JSON object of `name → "denied" | "ALLOWED: …"` (for tests).
    pub probe_sandbox: bool,
}

/// Runs the child and returns its exit status (0 when a reply was printed).
pub fn main(args: &ChildArgs) -> i32 {
    match run(args) {
        Ok(()) => 0,
        Err(message) => {
            // Nothing useful can be printed as JSON; the parent shows stderr in its log.
            eprintln!("sibyl-server extract-pdf: {message}");
            2
        }
    }
}

fn run(args: &ChildArgs) -> Result<(), String> {
    limit_resources(args)?;
    if args.probe_sandbox {
        confine()?;
        return print(&probe());
    }
    let pdfium = super::pdfium(args.library.as_deref());
    let mut pdf = Vec::new();
    std::io::stdin()
        .lock()
        .read_to_end(&mut pdf)
        .map_err(|e| format!("cannot read the PDF from stdin: {e}"))?;
    confine()?;
    let reply = match pdfium {
        Err(e) => ChildReply::Unavailable(e.to_string()),
        Ok(p) => match super::extract_with(p, &pdf, args.max_chars) {
            Ok(x) => ChildReply::Ok {
                title: x.title,
                text: x.text,
            },
            Err(super::ExtractError::Unavailable(m)) => ChildReply::Unavailable(m),
            Err(e) => ChildReply::Corrupt(match e {
                super::ExtractError::Corrupt(m) => m,
                other => other.to_string(),
            }),
        },
    };
    print(&reply)
}

fn print<T: serde::Serialize>(value: &T) -> Result<(), String> {
    let mut out = std::io::stdout().lock();
    serde_json::to_writer(&mut out, value).map_err(|e| format!("cannot write the reply: {e}"))?;
    out.flush()
        .map_err(|e| format!("cannot write the reply: {e}"))
}

fn limit_resources(args: &ChildArgs) -> Result<(), String> {
    use rustix::process::{Resource, Rlimit, setrlimit};
    let set = |resource: Resource, value: u64, name: &str| {
        setrlimit(
            resource,
            Rlimit {
                current: Some(value),
                maximum: Some(value),
            },
        )
        .map_err(|e| format!("cannot set the {name} limit: {e}"))
    };
    set(
        Resource::As,
        args.memory_mb.saturating_mul(1 << 20),
        "address-space",
    )?;
    // The soft limit sends SIGXCPU; a hard limit one second later kills.
    setrlimit(
        Resource::Cpu,
        Rlimit {
            current: Some(args.cpu_secs),
            maximum: Some(args.cpu_secs.saturating_add(1)),
        },
    )
    .map_err(|e| format!("cannot set the CPU-time limit: {e}"))?;
    set(Resource::Core, 0, "core-dump")?;
    set(Resource::Fsize, 0, "file-size")?;
    Ok(())
}

/// `no_new_privs` plus the seccomp filters described in the module docs.
fn confine() -> Result<(), String> {
    let arch = if cfg!(target_arch = "x86_64") {
        TargetArch::x86_64
    } else if cfg!(target_arch = "aarch64") {
        TargetArch::aarch64
    } else {
        return Err("no seccomp filter for this architecture".into());
    };
    let pid = u64::try_from(rustix::process::getpid().as_raw_nonzero().get())
        .map_err(|e| e.to_string())?;
    let cond = |arg: u8, op: SeccompCmpOp, value: u64| {
        SeccompCondition::new(arg, SeccompCmpArgLen::Dword, op, value).map_err(|e| e.to_string())
    };
    let mut denied: Vec<(i64, Vec<SeccompRule>)> = Vec::new();
    let always: &[libc::c_long] = &[
        libc::SYS_openat,
        libc::SYS_openat2,
        libc::SYS_open_by_handle_at,
        libc::SYS_name_to_handle_at,
        libc::SYS_socket,
        libc::SYS_socketpair,
        libc::SYS_connect,
        libc::SYS_bind,
        libc::SYS_execve,
        libc::SYS_execveat,
        libc::SYS_ptrace,
        libc::SYS_process_vm_readv,
        libc::SYS_process_vm_writev,
        libc::SYS_kill,
        libc::SYS_tkill,
        libc::SYS_unshare,
        libc::SYS_setns,
        libc::SYS_mount,
        libc::SYS_umount2,
        libc::SYS_pivot_root,
        libc::SYS_mkdirat,
        libc::SYS_unlinkat,
        libc::SYS_renameat2,
        libc::SYS_linkat,
        libc::SYS_symlinkat,
        libc::SYS_fchmodat,
        libc::SYS_fchownat,
        libc::SYS_truncate,
        libc::SYS_bpf,
        libc::SYS_perf_event_open,
        libc::SYS_userfaultfd,
        libc::SYS_io_uring_setup,
        libc::SYS_keyctl,
        libc::SYS_add_key,
        libc::SYS_request_key,
    ];
    for n in always {
        denied.push((*n, vec![]));
    }
    #[cfg(target_arch = "x86_64")]
    for n in [
        libc::SYS_open,
        libc::SYS_creat,
        libc::SYS_fork,
        libc::SYS_vfork,
        libc::SYS_mkdir,
        libc::SYS_unlink,
        libc::SYS_rename,
        libc::SYS_link,
        libc::SYS_symlink,
        libc::SYS_chmod,
        libc::SYS_chown,
    ] {
        denied.push((n, vec![]));
    }
    // A signal to a thread group other than this one.
    denied.push((
        libc::SYS_tgkill,
        vec![SeccompRule::new(vec![cond(0, SeccompCmpOp::Ne, pid)?]).map_err(|e| e.to_string())?],
    ));
    // clone without CLONE_THREAD is a new process (fork); flags are argument 0.
    denied.push((
        libc::SYS_clone,
        vec![
            SeccompRule::new(vec![cond(
                0,
                SeccompCmpOp::MaskedEq(libc::CLONE_THREAD as u64),
                0,
            )?])
            .map_err(|e| e.to_string())?,
        ],
    ));
    let eperm = SeccompFilter::new(
        denied.into_iter().collect(),
        SeccompAction::Allow,
        SeccompAction::Errno(libc::EPERM as u32),
        arch,
    )
    .map_err(|e| e.to_string())?;
    let enosys = SeccompFilter::new(
        [(libc::SYS_clone3, vec![])].into_iter().collect(),
        SeccompAction::Allow,
        SeccompAction::Errno(libc::ENOSYS as u32),
        arch,
    )
    .map_err(|e| e.to_string())?;
    for filter in [enosys, eperm] {
        let program: BpfProgram = filter
            .try_into()
            .map_err(|e: seccompiler::BackendError| e.to_string())?;
        // Sets no_new_privs first.
        seccompiler::apply_filter(&program).map_err(|e| format!("cannot install seccomp: {e}"))?;
    }
    Ok(())
}

/// Tries, under the sandbox, what it must refuse.
fn probe() -> std::collections::BTreeMap<&'static str, String> {
    let verdict = |r: Result<String, std::io::Error>| match r {
        Ok(what) => format!("ALLOWED: {what}"),
        Err(_) => "denied".to_string(),
    };
    let mut out = std::collections::BTreeMap::new();
    out.insert(
        "read_file",
        verdict(std::fs::read_to_string("/etc/passwd").map(|s| format!("{} bytes", s.len()))),
    );
    out.insert(
        "write_file",
        verdict(
            std::fs::write(
                std::env::temp_dir().join(format!("sibyl-probe-{}", std::process::id())),
                b"x",
            )
            .map(|()| "wrote a temp file".into()),
        ),
    );
    out.insert(
        "tcp_connect",
        verdict(
            std::net::TcpStream::connect(("127.0.0.1", 9))
                .map(|_| "connected to 127.0.0.1:9".into()),
        ),
    );
    out.insert(
        "udp_socket",
        verdict(std::net::UdpSocket::bind(("127.0.0.1", 0)).map(|_| "bound a UDP socket".into())),
    );
    out.insert(
        "spawn_process",
        verdict(
            std::process::Command::new("/bin/true")
                .status()
                .map(|s| format!("ran /bin/true: {s}")),
        ),
    );
    out.insert(
        "signal_parent",
        verdict(match rustix::process::getppid() {
            Some(ppid) => rustix::process::test_kill_process(ppid)
                .map(|()| "may signal its parent".to_string())
                .map_err(std::io::Error::from),
            None => Err(std::io::Error::other("no parent")),
        }),
    );
    // A thread must still work (PDFium may use one).
    out.insert(
        "thread",
        match std::thread::spawn(|| 7).join() {
            Ok(7) => "works".to_string(),
            _ => "BROKEN".to_string(),
        },
    );
    out
}
