//! PDF text with PDFium (pdfium-render), which keeps reading order, puts a table row on one
//! line and decodes CJK correctly (measured here against pdf-extract and lopdf).
//!
//! PDFium is a large C++ parser and PDFs come from hostile pages, so the server never parses
//! one in its own process: [`extract`] runs `sibyl-server extract-pdf` as a child process
//! ([`child`]) that takes the PDF on stdin and answers with JSON on stdout. The child limits
//! itself (address space `browser.extract.pdf_memory_mb`, CPU time, no files written), binds
//! libpdfium, reads the PDF, and then installs a seccomp filter under which it can open no
//! file, make no socket, execute nothing, fork nothing and signal no other process, before the
//! first byte of the PDF is parsed. The parent kills it at `browser.extract.pdf_timeout_ms`.
//! A crash of the parser is a clear error for that one file; the server does not notice it.
//!
//! `libpdfium.so` is loaded from `browser.extract.pdfium_library`, else
//! `$SIBYL_PDFIUM_LIBRARY`, else `/opt/sibyl/lib/libpdfium.so` (put there by
//! `scripts/setup.d/browser-files.sh` from the `pypdfium2` wheel), else the system library.
//! Pages are separated by a blank line and a `<!-- Page N -->` marker is not added (the
//! paper's pdfminer output had none).

pub mod child;

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use pdfium_render::prelude::*;
use serde::{Deserialize, Serialize};

use super::{ExtractError, ExtractPolicy, Extracted};

/// Default install location of `libpdfium.so`.
pub const DEFAULT_PDFIUM: &str = "/opt/sibyl/lib/libpdfium.so";

/// Environment variable naming the `sibyl-server` binary that runs the PDF child process,
/// for programs that embed the server library (the server binary uses itself).
pub const SERVER_BIN_ENV: &str = "SIBYL_SERVER_BIN";

/// The subcommand of `sibyl-server` that runs [`child::main`].
pub const CHILD_SUBCOMMAND: &str = "extract-pdf";

static PDFIUM: OnceLock<Result<Pdfium, String>> = OnceLock::new();

/// The process-wide PDFium binding, made on first use.
///
/// # Errors
/// [`ExtractError::Unavailable`] naming every library path tried.
pub(crate) fn pdfium(library: Option<&Path>) -> Result<&'static Pdfium, ExtractError> {
    PDFIUM
        .get_or_init(|| {
            let mut tried = Vec::new();
            let mut candidates: Vec<PathBuf> = Vec::new();
            if let Some(p) = library {
                candidates.push(p.to_path_buf());
            }
            if let Ok(p) = std::env::var("SIBYL_PDFIUM_LIBRARY")
                && !p.is_empty()
            {
                candidates.push(p.into());
            }
            candidates.push(DEFAULT_PDFIUM.into());
            for c in candidates {
                match Pdfium::bind_to_library(&c) {
                    Ok(b) => return Ok(Pdfium::new(b)),
                    Err(e) => tried.push(format!("{}: {e}", c.display())),
                }
            }
            match Pdfium::bind_to_system_library() {
                Ok(b) => Ok(Pdfium::new(b)),
                Err(e) => {
                    tried.push(format!("system library: {e}"));
                    Err(format!(
                        "PDF text extraction needs libpdfium.so (run scripts/setup, or set \
                         browser.extract.pdfium_library); tried {}",
                        tried.join("; ")
                    ))
                }
            }
        })
        .as_ref()
        .map_err(|e| ExtractError::Unavailable(e.clone()))
}

/// What the child process prints on stdout: one JSON object.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum ChildReply {
    /// The text and title of the PDF.
    Ok {
        /// Document title from the PDF's metadata.
        title: Option<String>,
        /// Text of every page, pages separated by a blank line.
        text: String,
    },
    /// The PDF could not be read (the message names why).
    Corrupt(String),
    /// libpdfium could not be loaded.
    Unavailable(String),
}

/// Extracts the text of every page in a sandboxed child process (see the module docs).
/// Blocking: call it from `spawn_blocking`.
///
/// # Errors
/// [`ExtractError::Unavailable`] without libpdfium or without a `sibyl-server` binary to run;
/// [`ExtractError::Corrupt`] for a PDF PDFium cannot open (including password-protected ones)
/// or one that crashed the parser; [`ExtractError::TooLarge`] when the child ran out of time
/// or memory.
pub fn extract(bytes: &[u8], policy: &ExtractPolicy) -> Result<Extracted, ExtractError> {
    let mut cmd = Command::new(server_binary()?);
    cmd.arg(CHILD_SUBCOMMAND);
    supervise(cmd, bytes, policy)
}

/// Runs `cmd` (the child, with its leading arguments) on `bytes` under the policy's limits
/// and turns what it did into the result.
fn supervise(
    mut cmd: Command,
    bytes: &[u8],
    policy: &ExtractPolicy,
) -> Result<Extracted, ExtractError> {
    let program = cmd.get_program().to_string_lossy().into_owned();
    cmd.arg("--max-chars")
        .arg(policy.max_text_chars.to_string())
        .arg("--memory-mb")
        .arg(policy.pdf_memory_mb.to_string())
        .arg("--cpu-secs")
        .arg(policy.pdf_timeout.as_secs().saturating_add(1).to_string());
    if let Some(lib) = &policy.pdfium_library {
        cmd.arg("--library").arg(lib);
    }
    // The child sees nothing of the server's environment but what finds libpdfium.
    cmd.env_clear().env("RUST_LOG", "error");
    if let Ok(p) = std::env::var("SIBYL_PDFIUM_LIBRARY") {
        cmd.env("SIBYL_PDFIUM_LIBRARY", p);
    }
    cmd.stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().map_err(|e| {
        ExtractError::Unavailable(format!(
            "PDF: cannot start the PDF child process {program}: {e}"
        ))
    })?;
    let (Some(mut stdin), Some(stdout), Some(stderr)) =
        (child.stdin.take(), child.stdout.take(), child.stderr.take())
    else {
        let _ = child.kill();
        let _ = child.wait();
        return Err(ExtractError::Unavailable(
            "PDF: the child process has no pipes".into(),
        ));
    };
    let input = bytes.to_vec();
    // A dead child closes its stdin early; the write error is then moot.
    let writer = std::thread::spawn(move || {
        let _ = stdin.write_all(&input);
    });
    // JSON escapes can at most sextuple the text; the child cuts the text near 4× the cap.
    let out_cap = (policy.max_text_chars as u64)
        .saturating_mul(24)
        .saturating_add(1 << 20);
    let reader = std::thread::spawn(move || {
        let mut out = Vec::new();
        let _ = stdout.take(out_cap).read_to_end(&mut out);
        out
    });
    let err_reader = std::thread::spawn(move || {
        let mut err = Vec::new();
        let _ = stderr.take(8192).read_to_end(&mut err);
        err
    });
    let deadline = Instant::now() + policy.pdf_timeout;
    let mut pause = Duration::from_millis(1);
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break Some(status),
            Ok(None) if Instant::now() >= deadline => {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
            Ok(None) => {
                std::thread::sleep(pause);
                pause = (pause * 2).min(Duration::from_millis(20));
            }
            Err(e) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(ExtractError::Unavailable(format!(
                    "PDF: cannot wait for the child process: {e}"
                )));
            }
        }
    };
    let _ = writer.join();
    let out = reader.join().unwrap_or_default();
    let err = err_reader.join().unwrap_or_default();
    let Some(status) = status else {
        return Err(ExtractError::TooLarge(format!(
            "PDF: parsing took longer than browser.extract.pdf_timeout_ms = {} ms",
            policy.pdf_timeout.as_millis()
        )));
    };
    if !status.success() {
        use std::os::unix::process::ExitStatusExt;
        let stderr_tail = String::from_utf8_lossy(&err);
        let stderr_tail = stderr_tail.trim();
        tracing::warn!(?status, stderr = %stderr_tail, "PDF child process failed");
        let why = match status.signal() {
            Some(libc::SIGXCPU) => {
                return Err(ExtractError::TooLarge(format!(
                    "PDF: parsing used more CPU time than browser.extract.pdf_timeout_ms = {} ms",
                    policy.pdf_timeout.as_millis()
                )));
            }
            Some(sig) => format!("was killed by signal {sig}"),
            None => format!("exited with status {}", status.code().unwrap_or(-1)),
        };
        let oom = ["memory allocation", "bad_alloc", "out of memory"]
            .iter()
            .any(|m| stderr_tail.contains(m));
        return Err(if oom {
            ExtractError::TooLarge(format!(
                "PDF: the parser needed more memory than browser.extract.pdf_memory_mb = {} MiB",
                policy.pdf_memory_mb
            ))
        } else {
            ExtractError::Corrupt(format!(
                "PDF: the parser process {why} (a malformed or hostile file, or more memory \
                 than browser.extract.pdf_memory_mb = {} MiB)",
                policy.pdf_memory_mb
            ))
        });
    }
    match serde_json::from_slice::<ChildReply>(&out) {
        Ok(ChildReply::Ok { title, text }) => Ok(Extracted {
            title,
            text,
            hidden: Vec::new(),
        }),
        Ok(ChildReply::Corrupt(m)) => Err(ExtractError::Corrupt(m)),
        Ok(ChildReply::Unavailable(m)) => Err(ExtractError::Unavailable(m)),
        Err(e) if out.len() as u64 >= out_cap => Err(ExtractError::TooLarge(format!(
            "PDF: the text is longer than browser.extract.max_text_chars allows ({e})"
        ))),
        Err(e) => Err(ExtractError::Corrupt(format!(
            "PDF: the child process gave no readable answer: {e}"
        ))),
    }
}

/// Extracts the text of every page in this process. Only for the sandboxed child
/// ([`child::main`]) and for code that runs it in a sandbox of its own.
///
/// # Errors
/// [`ExtractError::Unavailable`] without libpdfium; [`ExtractError::Corrupt`] for a PDF
/// PDFium cannot open (including password-protected ones).
pub fn extract_in_process(
    bytes: &[u8],
    library: Option<&Path>,
    max_text_chars: usize,
) -> Result<Extracted, ExtractError> {
    let pdfium = pdfium(library)?;
    extract_with(pdfium, bytes, max_text_chars)
}

fn extract_with(
    pdfium: &Pdfium,
    bytes: &[u8],
    max_text_chars: usize,
) -> Result<Extracted, ExtractError> {
    let doc = pdfium
        .load_pdf_from_byte_slice(bytes, None)
        .map_err(|e| ExtractError::Corrupt(format!("PDF: {e}")))?;
    let title = doc
        .metadata()
        .get(PdfDocumentMetadataTagType::Title)
        .map(|t| t.value().trim().to_string())
        .filter(|t| !t.is_empty());
    let mut text = String::new();
    for page in doc.pages().iter() {
        let t = page
            .text()
            .map_err(|e| ExtractError::Corrupt(format!("PDF page text: {e}")))?;
        let s = t.all();
        text.push_str(&s.replace('\r', ""));
        text.push_str("\n\n");
        if text.len() > max_text_chars.saturating_mul(4) {
            break;
        }
    }
    Ok(Extracted {
        title,
        text,
        hidden: Vec::new(),
    })
}

/// The `sibyl-server` binary that runs the child: `$SIBYL_SERVER_BIN`, else this process if
/// it is `sibyl-server`, else a `sibyl-server` beside this executable or one directory up
/// (Cargo's `target/<profile>/` for tests, benches and examples).
fn server_binary() -> Result<PathBuf, ExtractError> {
    if let Some(p) = std::env::var_os(SERVER_BIN_ENV).filter(|p| !p.is_empty()) {
        return Ok(PathBuf::from(p));
    }
    let exe = std::env::current_exe().map_err(|e| {
        ExtractError::Unavailable(format!("PDF: cannot find this program's path: {e}"))
    })?;
    if exe.file_stem().is_some_and(|s| s == "sibyl-server") {
        return Ok(exe);
    }
    let beside = exe.parent();
    let up = beside.and_then(Path::parent);
    for dir in [beside, up].into_iter().flatten() {
        let candidate = dir.join("sibyl-server");
        if candidate.is_file() {
            return Ok(candidate);
        }
    }
    Err(ExtractError::Unavailable(format!(
        "PDF text is extracted by a sandboxed `sibyl-server {CHILD_SUBCOMMAND}` child process, \
         and no sibyl-server binary was found beside {} (set ${SERVER_BIN_ENV})",
        exe.display()
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stand-in child: `/bin/sh -c SCRIPT`, given the real child's arguments.
    fn sh(script: &str) -> Command {
        let mut cmd = Command::new("/bin/sh");
        cmd.args(["-c", script, "sh"]);
        cmd
    }

    fn policy(timeout_ms: u64) -> ExtractPolicy {
        ExtractPolicy {
            pdf_timeout: Duration::from_millis(timeout_ms),
            ..ExtractPolicy::default()
        }
    }

    #[test]
    fn a_crashing_parser_is_an_error_for_that_file_only() {
        let e = supervise(
            sh("cat >/dev/null; kill -SEGV $$"),
            b"%PDF-1.7",
            &policy(5000),
        )
        .expect_err("crash");
        assert!(matches!(e, ExtractError::Corrupt(_)), "{e:?}");
        assert!(e.to_string().contains("killed by signal 11"), "{e}");
    }

    #[test]
    fn a_hanging_parser_is_killed_at_the_deadline() {
        let started = Instant::now();
        let e = supervise(sh("exec sleep 30"), b"%PDF-1.7", &policy(300)).expect_err("timeout");
        assert!(matches!(e, ExtractError::TooLarge(_)), "{e:?}");
        assert!(e.to_string().contains("pdf_timeout_ms = 300 ms"), "{e}");
        assert!(started.elapsed() < Duration::from_secs(10));
    }

    #[test]
    fn out_of_memory_and_garbage_answers_are_named() {
        let e = supervise(
            sh("echo 'memory allocation of 4096 bytes failed' >&2; kill -ABRT $$"),
            b"%PDF",
            &policy(5000),
        )
        .expect_err("oom");
        assert!(e.to_string().contains("pdf_memory_mb = 1024 MiB"), "{e}");
        assert!(matches!(e, ExtractError::TooLarge(_)), "{e:?}");
        let e = supervise(sh("echo not json"), b"%PDF", &policy(5000)).expect_err("garbage");
        assert!(e.to_string().contains("no readable answer"), "{e}");
        let ok = supervise(
            sh(r#"cat >/dev/null; printf '{"ok":{"title":"T","text":"hello"}}'"#),
            b"%PDF",
            &policy(5000),
        )
        .expect("reply");
        assert_eq!(
            (ok.title.as_deref(), ok.text.as_str()),
            (Some("T"), "hello")
        );
    }
}
