//! The `sibyl-agent` binary's own checks (this test target also makes `cargo test` build
//! the binary that the end-to-end tests in `tests/` run).

use std::process::Command;

#[test]
fn help_lists_the_scripting_subcommands() {
    let out = Command::new(env!("CARGO_BIN_EXE_sibyl-agent"))
        .arg("--help")
        .output()
        .expect("run");
    assert!(out.status.success());
    let help = String::from_utf8_lossy(&out.stdout);
    for sub in ["tools", "session", "call"] {
        assert!(help.contains(sub), "{help}");
    }
}

#[test]
fn an_unreachable_server_is_a_clear_error() {
    let out = Command::new(env!("CARGO_BIN_EXE_sibyl-agent"))
        .args(["tools", "--server", "http://127.0.0.1:1"])
        .env_remove("SIBYL_SERVER")
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("cannot connect to sibyl-server at http://127.0.0.1:1"),
        "{err}"
    );
}
