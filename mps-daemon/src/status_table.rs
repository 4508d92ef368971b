//! The human table of `gpu-mps-daemon status`: one row per GPU, then its clients per container.

use crate::status::{ClientStatus, GpuStatus, StatusFile};

/// The human table of `gpu-mps-daemon status`.
pub fn render_table(s: &StatusFile, daemon_alive: bool) -> String {
    let mut out = String::new();
    let liveness = if daemon_alive {
        "running"
    } else {
        "NOT RUNNING (stale status file)"
    };
    out.push_str(&format!(
        "gpu-mps-daemon pid {} {liveness}, updated at {}\n",
        s.pid, s.updated_at
    ));
    if let Some(e) = &s.last_reload_error {
        out.push_str(&format!("last reload refused: {e}\n"));
    }
    out.push_str(&aligned(gpu_rows(s)));
    for g in &s.gpus {
        out.push_str(&usage(g));
    }
    out
}

/// The header and one row per GPU.
fn gpu_rows(s: &StatusFile) -> Vec<Vec<String>> {
    let header = [
        "IDX",
        "UUID",
        "RESOURCE",
        "STATE",
        "PID",
        "THREADS%",
        "MEMLIMIT",
        "RESTARTS",
        "LAST ERROR",
    ];
    let mut rows: Vec<Vec<String>> = vec![header.iter().map(|h| h.to_string()).collect()];
    for g in &s.gpus {
        rows.push(vec![
            g.index.to_string(),
            g.uuid.clone(),
            g.resource.clone(),
            g.state.as_str().to_string(),
            g.pid.map(|p| p.to_string()).unwrap_or_else(|| "-".into()),
            g.active_thread_percentage.to_string(),
            g.pinned_memory_limit_mib
                .map(|m| format!("{m}M"))
                .unwrap_or_else(|| "-".into()),
            g.restarts.to_string(),
            g.last_error.clone().unwrap_or_else(|| "-".into()),
        ]);
    }
    rows
}

/// Rows as columns two spaces apart, each as wide as its widest cell (the last one as it is).
fn aligned(rows: Vec<Vec<String>>) -> String {
    let mut out = String::new();
    let ncols = rows.first().map_or(0, Vec::len);
    let widths: Vec<usize> = (0..ncols)
        .map(|c| rows.iter().map(|r| r[c].chars().count()).max().unwrap_or(0))
        .collect();
    for r in rows {
        let line: Vec<String> = r
            .iter()
            .enumerate()
            .map(|(c, v)| {
                if c + 1 == r.len() {
                    v.clone()
                } else {
                    format!("{v:<w$}", w = widths[c])
                }
            })
            .collect();
        out.push_str(line.join("  ").trim_end());
        out.push('\n');
    }
    out
}

/// A GPU's servers, clients per container and host clients; empty when it has none.
fn usage(g: &GpuStatus) -> String {
    let mut out = String::new();
    let u = &g.usage;
    if u.servers.is_empty() && u.clients.is_empty() && u.terminations.is_empty() {
        return out;
    }
    {
        let ended: Vec<String> = u
            .terminations
            .iter()
            .map(|(r, n)| format!("{r}={n}"))
            .collect();
        out.push_str(&format!(
            "GPU {}: {} server(s), {} client(s){}\n",
            g.index,
            u.servers.len(),
            u.clients.len(),
            if ended.is_empty() {
                String::new()
            } else {
                format!(", terminated: {}", ended.join(" "))
            }
        ));
        for (ctr, n) in u.clients_per_container() {
            let pids: Vec<String> = u
                .clients
                .iter()
                .filter(|c| c.container.as_deref() == Some(ctr.as_str()))
                .map(|c| c.pid.to_string())
                .collect();
            let first = u
                .clients
                .iter()
                .find(|c| c.container.as_deref() == Some(ctr.as_str()));
            let runtime = first.and_then(|c| c.runtime.clone()).unwrap_or_default();
            out.push_str(&format!(
                "  container {ctr} ({runtime}): {n} client(s), pids {}{}\n",
                pids.join(","),
                first.map(pod_of).unwrap_or_default()
            ));
        }
        let host: Vec<String> = u
            .clients
            .iter()
            .filter(|c| c.container.is_none())
            .map(|c| c.pid.to_string())
            .collect();
        if !host.is_empty() {
            out.push_str(&format!(
                "  host processes: {} client(s), pids {}\n",
                host.len(),
                host.join(",")
            ));
        }
    }
    out
}

/// `, pod NAMESPACE/POD container NAME` when `--cri-socket` named the client's container.
fn pod_of(c: &ClientStatus) -> String {
    match (&c.namespace, &c.pod, &c.container_name) {
        (Some(ns), Some(pod), Some(name)) => format!(", pod {ns}/{pod} container {name}"),
        _ => String::new(),
    }
}
