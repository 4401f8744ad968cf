//! The command-line contracts scripts rely on: `sibyl-agent tools|session open|call` and
//! `sibyl-server` refusing an invalid policy.

use sibyl_tests::{PageServer, Server, agent, bin, test_policy};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sibyl_agent_scripting_forms() {
    let pages = PageServer::start().await;
    let server = Server::start(&test_policy(""));
    let url = server.url();

    let (code, out, err) = agent(&["tools", "--server", &url]);
    assert_eq!(code, 0, "{err}");
    let lines: Vec<_> = out.lines().collect();
    assert_eq!(lines.len(), 10, "{out}");
    for line in &lines {
        let fields: Vec<_> = line.split('\t').collect();
        assert_eq!(fields.len(), 3, "NAME, ORIGIN, DESCRIPTION: {line}");
        assert_eq!(fields[1], "builtin");
        assert!(!fields[2].is_empty());
    }
    assert!(lines.iter().any(|l| l.starts_with("visit_page\tbuiltin\t")));

    let (code, out, err) = agent(&["session", "open", "--server", &url]);
    assert_eq!(code, 0, "{err}");
    let session = out.lines().last().expect("last line").to_string();
    assert_eq!(session.len(), 32);
    assert!(session.chars().all(|c| c.is_ascii_hexdigit()));

    let args = format!("{{\"url\": \"{}\"}}", pages.url("/other"));
    let (code, out, err) = agent(&[
        "call",
        "visit_page",
        &args,
        "--session",
        &session,
        "--server",
        &url,
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.starts_with(&format!(
            "Address: {}\nTitle: Other page\n",
            pages.url("/other")
        )),
        "{out}"
    );
    let (code, out, _) = agent(&[
        "call",
        "find_on_page_ctrl_f",
        "{\"search_string\": \"another page\"}",
        "--session",
        &session,
        "--server",
        &url,
    ]);
    assert_eq!(code, 0);
    assert!(out.contains("Search: showing match 1 of 1"), "{out}");

    // is_error result: exit 1, message on stderr, nothing on stdout.
    let (code, out, err) = agent(&["call", "find_next", "{}", "--server", &url]);
    assert_eq!(code, 1);
    assert!(out.is_empty());
    assert!(err.contains("No page is open"), "{err}");
    // gRPC errors: exit 1 with the status on stderr.
    let (code, _, err) = agent(&["call", "nope", "{}", "--server", &url]);
    assert_eq!(code, 1);
    assert!(err.contains("unknown tool"), "{err}");
    let (code, _, err) = agent(&["call", "visit_page", "{}", "--server", &url]);
    assert_eq!(code, 1);
    assert!(err.contains("`url`"), "{err}");
    // Closing the session ends it.
    let (code, _, err) = agent(&["session", "close", &session, "--server", &url]);
    assert_eq!(code, 0, "{err}");
    let (code, _, err) = agent(&[
        "call",
        "page_down",
        "{}",
        "--session",
        &session,
        "--server",
        &url,
    ]);
    assert_eq!(code, 1);
    assert!(err.contains("session"), "{err}");
    // No server: a clear connection error.
    let (code, _, err) = agent(&["tools", "--server", "http://127.0.0.1:1"]);
    assert_eq!(code, 1);
    assert!(err.contains("cannot connect"), "{err}");
}

/// Both Python runners through `sibyl-agent call` against the server binary: a session keeps
/// variables on each runner (WASM turns, subprocess notebook), a file written on one runner
/// is read on the other, and a failing program exits 1 with its traceback on stderr.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sibyl_agent_calls_both_python_runners() {
    let server = Server::start(&test_policy(""));
    let url = server.url();
    let (code, out, err) = agent(&["session", "open", "--server", &url]);
    assert_eq!(code, 0, "{err}");
    let session = out.lines().last().expect("session id").to_string();
    let call = |tool: &str, args: serde_json::Value| {
        agent(&[
            "call",
            tool,
            &args.to_string(),
            "--session",
            &session,
            "--server",
            &url,
        ])
    };
    for runner in ["subprocess", "wasm"] {
        let (code, out, err) = call(
            "python",
            serde_json::json!({"code": format!("x = 6 * 7\nopen('{runner}.txt', 'w').write('{runner} was here')"), "runner": runner}),
        );
        assert_eq!(code, 0, "{runner}: {out}{err}");
        let (code, out, err) = call(
            "python",
            serde_json::json!({"code": "print('x is', x)", "runner": runner}),
        );
        assert_eq!(code, 0, "{runner}: {err}");
        assert!(out.contains("x is 42"), "{runner}: {out}");
    }
    let (code, out, err) = call(
        "python",
        serde_json::json!({"code": "print(open('subprocess.txt').read())", "runner": "wasm"}),
    );
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("subprocess was here"), "{out}");
    let (code, out, err) = call(
        "computer_terminal",
        serde_json::json!({"code": "print(open('wasm.txt').read()); 1/0"}),
    );
    assert_eq!(code, 1, "{out}");
    assert!(err.contains("ZeroDivisionError"), "{err}");
}

#[test]
fn sibyl_server_refuses_an_invalid_policy_naming_the_key() {
    let dir = tempfile::tempdir().expect("tmp");
    for (toml, key) in [
        ("[browser]\nviewport_sise = 100\n", "viewport_sise"),
        ("[browser]\nviewport_size = 1\n", "browser.viewport_size"),
        ("[sessions]\nidle_ttl_secs = \"long\"\n", "idle_ttl_secs"),
        (
            "[browser]\nallow_hosts = [\"bad host\"]\n",
            "browser.allow_hosts[0]",
        ),
    ] {
        let path = dir.path().join("p.toml");
        std::fs::write(&path, toml).expect("write");
        let out = std::process::Command::new(bin("sibyl-server"))
            .args(["serve", "--listen", "127.0.0.1:0", "--policy"])
            .arg(&path)
            .output()
            .expect("run");
        assert!(!out.status.success(), "{toml} accepted");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(key), "message must name `{key}`: {err}");
    }
    // The shipped policies are valid.
    for p in ["default.toml", "dev.toml"] {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../sandbox-policies")
            .join(p);
        let out = std::process::Command::new(bin("sibyl-server"))
            .arg("check-policy")
            .arg(&path)
            .output()
            .expect("run");
        assert!(
            out.status.success(),
            "{p}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// `sibyl-agent tools` prints the server's plugin diagnostics on stderr, one `warning:` line
/// each, and leaves stdout exactly as without them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sibyl_agent_tools_prints_plugin_diagnostics_on_stderr() {
    let plain = Server::start(&test_policy(""));
    let (code, expected, err) = agent(&["tools", "--server", &plain.url()]);
    assert_eq!(code, 0, "{err}");
    assert!(err.is_empty(), "no diagnostics, no stderr: {err}");
    drop(plain);

    let dir = tempfile::tempdir().expect("plugins dir");
    std::fs::write(dir.path().join("broken.wasm"), b"\0asm\x01\0\0\0garbage").expect("write");
    std::fs::write(dir.path().join("Bad Name.wasm"), b"x").expect("write");
    let server = Server::start(&test_policy(&format!(
        "\n[plugins]\ndir = \"{}\"\nrequire_pinned = false\n",
        dir.path().display()
    )));
    let (code, out, err) = agent(&["tools", "--server", &server.url()]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        out, expected,
        "stdout is the same contract with diagnostics"
    );
    let warnings: Vec<_> = err.lines().collect();
    assert_eq!(warnings.len(), 2, "{err}");
    assert!(
        warnings[0].starts_with("warning: Bad Name.wasm: plugin file names are"),
        "{err}"
    );
    assert!(
        warnings[1].starts_with("warning: broken.wasm: not a valid WebAssembly component"),
        "{err}"
    );
}
