//! The exposition parses back line by line, with the values the board holds.
use super::*;
use crate::metrics_parse::parse_text;
use crate::status::{ClientStatus, GpuStatus};

fn gpu() -> GpuStatus {
    GpuStatus {
        uuid: "GPU-a\"b".into(),
        index: 3,
        resource: "r".into(),
        replicas: 4,
        state: GpuState::Ready,
        pid: Some(42),
        active_thread_percentage: 50,
        pinned_memory_limit_mib: Some(1024),
        applied_active_thread_percentage: Some(50.0),
        applied_pinned_memory_limit_mib: Some(1024),
        restarts: 2,
        last_error: None,
        last_error_at: None,
        ready_since: None,
        pipe_directory: String::new(),
        log_directory: String::new(),
        shm_directory: None,
        usage: Default::default(),
    }
}

#[test]
fn exposition_parses_back() {
    let board = Board::default();
    let mut g = gpu();
    g.usage.servers = vec![7];
    for (pid, ctr) in [(1, Some("c1")), (2, Some("c1")), (3, None)] {
        g.usage.clients.push(ClientStatus {
            pid,
            server: 7,
            container: ctr.map(str::to_string),
            runtime: ctr.map(|_| "containerd".to_string()),
            pod: None,
            namespace: None,
            container_name: None,
        });
    }
    g.usage.terminations.insert("over_cap".into(), 4);
    board.insert(g);
    board.observe_command("GPU-a\"b", "get_server_list", 0.003);
    board.observe_command("GPU-a\"b", "get_server_list", 0.2);
    board.observe_command("GPU-a\"b", "get_server_list", 30.0);
    let text = render(&board);
    let samples = parse_text(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    let find = |name: &str, extra: &[(&str, &str)]| {
        samples
            .iter()
            .find(|s| {
                s.name == name
                    && s.labels["UUID"] == "GPU-a\"b"
                    && s.labels["gpu"] == "3"
                    && extra
                        .iter()
                        .all(|(k, v)| s.labels.get(*k).map(String::as_str) == Some(*v))
            })
            .unwrap_or_else(|| panic!("no {name} {extra:?} in\n{text}"))
            .value
    };
    assert_eq!(find("gpuhook_mps_up", &[]), 1.0);
    assert_eq!(find("gpuhook_mps_ready", &[]), 1.0);
    assert_eq!(find("gpuhook_mps_restarts_total", &[]), 2.0);
    assert_eq!(find("gpuhook_mps_servers", &[]), 1.0);
    assert_eq!(find("gpuhook_mps_clients", &[]), 3.0);
    assert_eq!(
        find(
            "gpuhook_mps_clients_per_container",
            &[("container", "c1"), ("runtime", "containerd")]
        ),
        2.0
    );
    assert_eq!(
        find("gpuhook_mps_pinned_memory_limit_bytes", &[]),
        1073741824.0
    );
    assert_eq!(
        find(
            "gpuhook_mps_client_terminations_total",
            &[("reason", "over_cap")]
        ),
        4.0
    );
    assert_eq!(
        find(
            "gpuhook_mps_client_terminations_total",
            &[("reason", "container_gone")]
        ),
        0.0
    );
    let h = "gpuhook_mps_command_duration_seconds";
    let cmd = ("command", "get_server_list");
    assert_eq!(find(&format!("{h}_bucket"), &[cmd, ("le", "0.005")]), 1.0);
    assert_eq!(find(&format!("{h}_bucket"), &[cmd, ("le", "0.25")]), 2.0);
    assert_eq!(find(&format!("{h}_bucket"), &[cmd, ("le", "10")]), 2.0);
    assert_eq!(find(&format!("{h}_bucket"), &[cmd, ("le", "+Inf")]), 3.0);
    assert_eq!(find(&format!("{h}_count"), &[cmd]), 3.0);
    assert!((find(&format!("{h}_sum"), &[cmd]) - 30.203).abs() < 1e-9);
    // Every family has HELP and TYPE exactly once.
    for fam in ["gpuhook_mps_up", h, "gpuhook_mps_clients_per_container"] {
        assert_eq!(text.matches(&format!("# HELP {fam} ")).count(), 1, "{fam}");
        assert_eq!(text.matches(&format!("# TYPE {fam} ")).count(), 1, "{fam}");
    }
}

#[test]
fn parser_rejects_malformed_lines() {
    let ok = "# HELP a x\n# TYPE a gauge\na{b=\"c\"} 1\n";
    assert_eq!(parse_text(ok).unwrap().len(), 1);
    for bad in [
        "a{b=\"c\"} 1\n",
        "# HELP a x\n# TYPE a gauge\na{b=\"c} 1\n",
        "# HELP a x\n# TYPE a gauge\na{b=c} 1\n",
        "# HELP a x\n# TYPE a gauge\na{b=\"c\"} one\n",
        "# HELP a x\n# TYPE a gauge\na{b=\"c\"}1\n",
        "# HELP a x\n# TYPE a gauge\n9a 1\n",
    ] {
        assert!(parse_text(bad).is_err(), "{bad:?}");
    }
}
