//! Which container a process belongs to, from its `/proc/<pid>/cgroup`.
//!
//! MPS reports clients by pid only; to cap clients per container and to notice clients whose
//! container is gone we map each pid to its container through the cgroup path that every
//! runtime gives its containers. The parser is pure (text in, [`Owner`] out) so every runtime's
//! naming is unit-tested; only [`owner_of`] and [`Owner::exists`] touch the file system, under
//! configurable roots (`procRoot`, `cgroupRoot`) so that tests and containers can point them
//! elsewhere.
//!
//! Names recognised (last path components, v1 and v2 alike):
//! - containerd: `cri-containerd-<id>.scope` (systemd driver), `/k8s.io/<id>`, `/default/<id>` and
//!   other `/<namespace>/<id>` paths with a 64-hex id (cgroupfs driver);
//! - CRI-O: `crio-<id>.scope` (`crio-conmon-*` is the monitor, not the container);
//! - podman: `libpod-<id>.scope` (`libpod-conmon-*` excluded), `/libpod_parent/libpod-<id>`;
//! - docker: `docker-<id>.scope`, `/docker/<id>`;
//! - runc with the systemd driver: `runc-<id>.scope`;
//! - kubelet cgroupfs (`/kubepods/.../pod<uid>/<64hex>`): any other 64-hex last component;
//! - anything else that is not `/` and not a systemd unit (`*.slice`, `*.service`, `*.scope`)
//!   is a plain runc container named by its `cgroupsPath`: the id is the whole path.
//!
//! Host processes (`/`, `/user.slice/...`, `/system.slice/x.service`) belong to no container.

use std::fmt;
use std::path::{Path, PathBuf};

/// The runtime naming scheme an id was recognised by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Runtime {
    Containerd,
    CriO,
    Podman,
    Docker,
    Runc,
    Kubernetes,
    /// A plain `cgroupsPath` (the id is the path).
    Cgroup,
}

impl Runtime {
    pub fn as_str(self) -> &'static str {
        match self {
            Runtime::Containerd => "containerd",
            Runtime::CriO => "cri-o",
            Runtime::Podman => "podman",
            Runtime::Docker => "docker",
            Runtime::Runc => "runc",
            Runtime::Kubernetes => "kubernetes",
            Runtime::Cgroup => "cgroup",
        }
    }
}

/// The hierarchy a cgroup path was read from.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Hierarchy {
    /// `0::/path` (cgroup v2, unified).
    V2,
    /// `N:controllers:/path`; the mount directory name (`pids`, `memory`, `systemd`, ...).
    V1(String),
}

/// The container of a process.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Owner {
    pub runtime: Runtime,
    /// Container id (64 hex for CRI runtimes, the cgroup path for plain runc).
    pub id: String,
    pub hierarchy: Hierarchy,
    /// The cgroup path inside its hierarchy.
    pub path: String,
}

impl fmt::Display for Owner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.id)
    }
}

fn is_hex64(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(|b| b.is_ascii_hexdigit())
}

fn scoped<'a>(c: &'a str, prefix: &str) -> Option<&'a str> {
    c.strip_prefix(prefix)?.strip_suffix(".scope")
}

/// The container named by a cgroup path, if any.
pub fn container_of_path(path: &str) -> Option<(Runtime, String)> {
    let comps: Vec<&str> = path.split('/').filter(|c| !c.is_empty()).collect();
    let last = *comps.last()?;
    let parent = comps.len().checked_sub(2).map(|i| comps[i]);
    let table: [(&str, Runtime); 5] = [
        ("cri-containerd-", Runtime::Containerd),
        ("crio-", Runtime::CriO),
        ("libpod-", Runtime::Podman),
        ("docker-", Runtime::Docker),
        ("runc-", Runtime::Runc),
    ];
    for (prefix, rt) in table {
        if let Some(id) = scoped(last, prefix) {
            if id.starts_with("conmon-") || id.is_empty() {
                return None;
            }
            return Some((rt, id.to_string()));
        }
    }
    if let Some(id) = last.strip_prefix("libpod-") {
        if parent == Some("libpod_parent") && !id.starts_with("conmon-") {
            return Some((Runtime::Podman, id.to_string()));
        }
    }
    if is_hex64(last) {
        let rt = match parent {
            Some("docker") => Runtime::Docker,
            Some(p) if p.starts_with("pod") || comps.first() == Some(&"kubepods") => {
                Runtime::Kubernetes
            }
            Some(_) => Runtime::Containerd,
            None => Runtime::Cgroup,
        };
        if rt != Runtime::Cgroup {
            return Some((rt, last.to_string()));
        }
    }
    let systemd_unit = [".slice", ".service", ".scope", ".mount", ".socket"]
        .iter()
        .any(|s| last.ends_with(s));
    if systemd_unit || comps.first() == Some(&"kubepods") {
        return None;
    }
    Some((Runtime::Cgroup, format!("/{}", comps.join("/"))))
}

/// Preference among v1 hierarchies: the ones every runtime creates a cgroup in.
const V1_ORDER: [&str; 5] = ["pids", "memory", "cpu", "devices", "systemd"];

/// Parses `/proc/<pid>/cgroup` text: the container of the first line (v2 first, then v1 in
/// [`V1_ORDER`], then any other) whose path names one.
pub fn parse_proc_cgroup(text: &str) -> Option<Owner> {
    let mut lines: Vec<(usize, Hierarchy, &str)> = Vec::new();
    for line in text.lines() {
        let mut parts = line.splitn(3, ':');
        let (Some(_), Some(ctrls), Some(path)) = (parts.next(), parts.next(), parts.next()) else {
            continue;
        };
        let (rank, h) = if ctrls.is_empty() {
            (0, Hierarchy::V2)
        } else {
            let names: Vec<&str> = ctrls
                .split(',')
                .map(|c| c.strip_prefix("name=").unwrap_or(c))
                .collect();
            let rank = V1_ORDER
                .iter()
                .position(|o| names.contains(o))
                .map_or(V1_ORDER.len() + 1, |p| p + 1);
            (rank, Hierarchy::V1(names.join(",")))
        };
        lines.push((rank, h, path));
    }
    lines.sort_by_key(|(rank, _, _)| *rank);
    lines.into_iter().find_map(|(_, hierarchy, path)| {
        container_of_path(path).map(|(runtime, id)| Owner {
            runtime,
            id,
            hierarchy,
            path: path.to_string(),
        })
    })
}

/// Reads `<proc_root>/<pid>/cgroup`: `Ok(None)` for a host process, `Err` when the process is gone.
pub fn owner_of(proc_root: &Path, pid: u32) -> std::io::Result<Option<Owner>> {
    let text = std::fs::read_to_string(proc_root.join(pid.to_string()).join("cgroup"))?;
    Ok(parse_proc_cgroup(&text))
}

impl Owner {
    /// The owner's cgroup directory under `cgroup_root`: `<root>/<controllers>/<path>` for v1;
    /// `<root>/<path>` for v2 when `<root>` is the unified mount, else `<root>/unified/<path>`
    /// (hybrid). `None` when no such directory exists (cgroup file system not visible).
    pub fn cgroup_dir(&self, cgroup_root: &Path) -> Option<PathBuf> {
        // `/../..` paths come from a private cgroup namespace: not resolvable from here.
        if self.path.split('/').any(|c| c == "..") {
            return None;
        }
        let rel = self.path.trim_start_matches('/');
        let candidates = match &self.hierarchy {
            Hierarchy::V2 => vec![cgroup_root.join(rel), cgroup_root.join("unified").join(rel)],
            Hierarchy::V1(names) => {
                let mut c = vec![cgroup_root.join(names).join(rel)];
                c.extend(names.split(',').map(|n| cgroup_root.join(n).join(rel)));
                c
            }
        };
        candidates.into_iter().find(|p| p.is_dir())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ID: &str = "4f2b1c0d9e8a7b6c5d4e3f2a1b0c9d8e7f6a5b4c3d2e1f0a9b8c7d6e5f4a3b2c";

    fn one(path: &str) -> Option<(Runtime, String)> {
        container_of_path(path)
    }

    #[test]
    fn runtimes_by_name() {
        let c = |rt| Some((rt, ID.to_string()));
        let p = format!("/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1.slice/cri-containerd-{ID}.scope");
        assert_eq!(one(&p), c(Runtime::Containerd));
        assert_eq!(one(&format!("/k8s.io/{ID}")), c(Runtime::Containerd));
        assert_eq!(one(&format!("/default/{ID}")), c(Runtime::Containerd));
        assert_eq!(
            one(&format!("/kubepods.slice/x.slice/crio-{ID}.scope")),
            c(Runtime::CriO)
        );
        assert_eq!(one(&format!("/x.slice/crio-conmon-{ID}.scope")), None);
        assert_eq!(
            one(&format!(
                "/user.slice/user-1000.slice/user@1000.service/user.slice/libpod-{ID}.scope"
            )),
            c(Runtime::Podman)
        );
        assert_eq!(
            one(&format!("/machine.slice/libpod-conmon-{ID}.scope")),
            None
        );
        assert_eq!(
            one(&format!("/libpod_parent/libpod-{ID}")),
            c(Runtime::Podman)
        );
        assert_eq!(
            one(&format!("/system.slice/docker-{ID}.scope")),
            c(Runtime::Docker)
        );
        assert_eq!(one(&format!("/docker/{ID}")), c(Runtime::Docker));
        assert_eq!(
            one(&format!("/system.slice/runc-{ID}.scope")),
            c(Runtime::Runc)
        );
        assert_eq!(
            one(&format!("/kubepods/besteffort/pod12-34/{ID}")),
            c(Runtime::Kubernetes)
        );
        assert_eq!(
            one("/gpuhook-test/my-ctr"),
            Some((Runtime::Cgroup, "/gpuhook-test/my-ctr".into()))
        );
        for host in [
            "/",
            "",
            "/user.slice/user-0.slice/session-3.scope",
            "/system.slice/containerd.service",
            "/init.scope",
            "/kubepods/burstable",
        ] {
            assert_eq!(one(host), None, "{host}");
        }
    }

    #[test]
    fn proc_cgroup_v1_hybrid_and_v2() {
        let v1 = format!(
            "12:pids:/gpuhook-test/cri-containerd-{ID}.scope\n11:memory:/gpuhook-test/cri-containerd-{ID}.scope\n1:name=systemd:/user.slice/session-1.scope\n0::/user.slice/session-1.scope\n"
        );
        let o = parse_proc_cgroup(&v1).unwrap();
        assert_eq!((o.runtime, o.id.as_str()), (Runtime::Containerd, ID));
        assert_eq!(o.hierarchy, Hierarchy::V1("pids".into()));
        assert_eq!(o.path, format!("/gpuhook-test/cri-containerd-{ID}.scope"));
        let v2 = format!("0::/system.slice/crio-{ID}.scope\n");
        let o = parse_proc_cgroup(&v2).unwrap();
        assert_eq!((o.runtime, o.hierarchy), (Runtime::CriO, Hierarchy::V2));
        let cpu = format!("4:cpu,cpuacct:/libpod_parent/libpod-{ID}\n");
        let o = parse_proc_cgroup(&cpu).unwrap();
        assert_eq!(o.hierarchy, Hierarchy::V1("cpu,cpuacct".into()));
        assert_eq!(
            parse_proc_cgroup("0::/\n1:name=systemd:/init.scope\n"),
            None
        );
        assert_eq!(parse_proc_cgroup("garbage"), None);
    }

    #[test]
    fn cgroup_dir_under_a_fake_root() {
        let t = tempfile::tempdir().unwrap();
        let o = parse_proc_cgroup("5:cpu,cpuacct:/a/b\n").unwrap();
        assert_eq!(o.cgroup_dir(t.path()), None);
        std::fs::create_dir_all(t.path().join("cpu/a/b")).unwrap();
        assert_eq!(o.cgroup_dir(t.path()), Some(t.path().join("cpu/a/b")));
        let o = parse_proc_cgroup("0::/c\n").unwrap();
        std::fs::create_dir_all(t.path().join("unified/c")).unwrap();
        assert_eq!(o.cgroup_dir(t.path()), Some(t.path().join("unified/c")));
        let p = t.path().join("proc/42");
        std::fs::create_dir_all(&p).unwrap();
        std::fs::write(p.join("cgroup"), "0::/c\n").unwrap();
        assert_eq!(owner_of(&t.path().join("proc"), 42).unwrap(), Some(o));
        assert!(owner_of(&t.path().join("proc"), 43).is_err());
        let ns = parse_proc_cgroup(&format!(
            "0::/../../kubepods.slice/cri-containerd-{ID}.scope\n"
        ))
        .unwrap();
        assert_eq!((ns.runtime, ns.id.as_str()), (Runtime::Containerd, ID));
        assert_eq!(ns.cgroup_dir(t.path()), None);
    }
}
