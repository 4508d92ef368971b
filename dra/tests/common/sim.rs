//! Simulated nodes (`gpuhook-sim build PROFILE`, mock NVML) for tests that need root.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

/// Builds `profile` under `dir/node`; `None` skips (a failure under GPUHOOK_REQUIRE_E2E=1).
pub fn sim_node(dir: &Path, profile: &str, test: &str) -> Option<PathBuf> {
    let tool =
        PathBuf::from(env!("CARGO_BIN_EXE_gpuhook-dra-plugin")).with_file_name("gpuhook-sim");
    let mock = tool.with_file_name("libgpuhook_mock_nvml.so");
    let why = if !is_root() {
        "needs root"
    } else if !tool.is_file() || !mock.is_file() {
        "cargo build -p gpuhook-sim --bins and cargo build -p gpuhook-mock-nvml first"
    } else {
        let root = dir.join("node");
        let out = std::process::Command::new(&tool)
            .args(["build", profile])
            .arg(&root)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        return Some(root);
    };
    assert!(
        std::env::var_os("GPUHOOK_REQUIRE_E2E").is_none_or(|v| v != "1"),
        "{test} cannot run: {why}"
    );
    eprintln!("skipped: {why}");
    None
}

pub fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(1) == Some("0"))
}
