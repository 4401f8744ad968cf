//! The `sibyl-server` binary's own checks (this test target also makes `cargo test` build
//! the binary that the end-to-end tests in `tests/` run).

use std::process::Command;

#[test]
fn check_policy_accepts_the_shipped_policies_and_names_bad_keys() {
    let bin = env!("CARGO_BIN_EXE_sibyl-server");
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../sandbox-policies");
    for p in ["default.toml", "dev.toml"] {
        let out = Command::new(bin)
            .arg("check-policy")
            .arg(dir.join(p))
            .output()
            .expect("run");
        assert!(
            out.status.success(),
            "{p}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(String::from_utf8_lossy(&out.stdout).contains("valid"));
    }
    let tmp = tempfile::NamedTempFile::new().expect("tmp");
    std::fs::write(tmp.path(), "[sessions]\nmax_sesions = 3\n").expect("write");
    let out = Command::new(bin)
        .arg("check-policy")
        .arg(tmp.path())
        .output()
        .expect("run");
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("max_sesions"));
}
