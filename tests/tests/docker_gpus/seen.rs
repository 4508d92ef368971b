//! What a container of `docker_gpus.rs` reports about itself (its script) and how it is read.

use std::collections::BTreeSet;
use std::path::Path;

/// Lists device nodes (`NODE path major:minor`, hex), opens the GPU nodes (`OPEN path error`),
/// and names the driver libraries mounted (`MOUNT path`).
pub const SCRIPT: &str = r#"
for f in /dev/nvidia* /dev/nvidia-caps/* /host/*; do
  [ -c "$f" ] && echo "NODE $f $(stat -c '%t:%T' "$f")"
done
for f in /dev/nvidia[0-9]* /host/*; do [ -c "$f" ] && echo "OPEN $f $(cat "$f" 2>&1 </dev/null | head -n1)"; done
grep -o ' /usr/lib/x86_64-linux-gnu/lib[a-zA-Z0-9_-]*\.so[.0-9]*' /proc/self/mountinfo | sed 's/^ /MOUNT /'
env | grep '^NVIDIA_' | sed 's/^/ENV /'
exit 0
"#;

/// What a container reported.
#[derive(Debug, Default)]
pub struct Seen {
    pub nodes: BTreeSet<(String, u32, u32)>,
    pub open: Vec<(String, String)>,
    pub mounts: BTreeSet<String>,
    pub env: Vec<String>,
}

impl Seen {
    pub fn parse(stdout: &str) -> Seen {
        let mut s = Seen::default();
        for line in stdout.lines() {
            let mut w = line.splitn(3, ' ');
            match (w.next(), w.next(), w.next()) {
                (Some("NODE"), Some(p), Some(mm)) if !p.starts_with("/host/") => {
                    let (a, b) = mm.split_once(':').unwrap();
                    let hex = |x: &str| u32::from_str_radix(x, 16).unwrap();
                    s.nodes.insert((p.to_string(), hex(a), hex(b)));
                }
                (Some("OPEN"), Some(p), rest) => s.open.push((p.into(), rest.unwrap_or("").into())),
                (Some("MOUNT"), Some(p), _) => {
                    s.mounts.insert(p.to_string());
                }
                (Some("ENV"), Some(e), _) => s.env.push(e.to_string()),
                _ => {}
            }
        }
        s
    }

    /// Whether a library whose file name starts with `prefix` is mounted.
    pub fn has_lib(&self, prefix: &str) -> bool {
        self.mounts.iter().any(|m| {
            Path::new(m)
                .file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with(prefix))
        })
    }

    /// Every `/dev/nvidiaN` opens with ENXIO, every `/host/*` with EPERM.
    pub fn assert_cgroup(&self, ctx: &str) {
        assert!(
            !self.open.is_empty() || self.nodes.is_empty(),
            "{ctx}: {self:?}"
        );
        for (path, err) in &self.open {
            let want = if path.starts_with("/host/") {
                "Operation not permitted"
            } else {
                "No such device or address"
            };
            assert!(
                err.contains(want),
                "{ctx}: open {path}: {err:?}, want {want}"
            );
        }
    }
}
