//! Issue #17.6: the daemon's log lines on stderr are JSON with `GPUHOOK_LOG_FORMAT=json` (or
//! `--log-format json`), and carry no colour codes when stderr is not a terminal.
// Test support: a failed unwrap is a failed test, with its location.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::Node;

fn run_and_stop(node: &Node, f: impl FnOnce(&mut std::process::Command)) -> String {
    let mut d = node.start_with(f);
    node.wait_ready(0);
    d.signal(libc::SIGTERM);
    assert_eq!(d.wait_exit(), Some(0), "{}", d.log_text());
    d.log_text()
}

#[test]
fn json_lines_on_request_and_no_colours_off_a_terminal() {
    let node = Node::new(1, 8192);
    node.write_config("      - {name: r, replicas: 2}\n", "");
    for json in [
        run_and_stop(&node, |c| {
            c.env("GPUHOOK_LOG_FORMAT", "json");
        }),
        run_and_stop(&node, |c| {
            c.args(["--log-format", "json"]);
        }),
    ] {
        assert!(!json.contains('\u{1b}'), "{json:?}");
        let mut lines = 0;
        for l in json.lines() {
            let v: serde_json::Value =
                serde_json::from_str(l).unwrap_or_else(|e| panic!("{l}: {e}"));
            assert!(v["timestamp"].is_string() && v["level"].is_string(), "{l}");
            assert!(v["fields"]["message"].is_string(), "{l}");
            lines += 1;
        }
        assert!(lines > 0, "the daemon logged nothing");
    }
    let text = run_and_stop(&node, |_| {});
    assert!(!text.contains('\u{1b}'), "colour codes in a pipe: {text:?}");
    assert!(text.contains("INFO") || text.contains("DEBUG"), "{text}");
}
