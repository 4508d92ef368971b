//! Device cgroups: letting a container open the GPU nodes we injected.
//!
//! Security lesson 9.1 says: prefer declaring devices in the OCI spec (the runtime then owns the
//! rules and they survive `systemctl daemon-reload`). This module is for the legacy prestart path,
//! where the runtime has already applied its rules. v1 is a write to `devices.allow`; v2 has no
//! such file — access is decided by a `BPF_PROG_TYPE_CGROUP_DEVICE` program runc attached, whose
//! rules cannot be read back, so we rebuild a program from the OCI spec's
//! `linux.resources.devices` plus our rules and atomically replace runc's program with it.
//! Rules are exact major:minor (CVE-2021-1056: never wildcard minors for GPUs).

mod bpf;
mod rule;
mod v1;
mod v2;

use std::path::{Component, Path, PathBuf};

pub use bpf::{build_device_program, BpfInsn};
pub use rule::{Access, DeviceRule, DeviceType};
pub use v1::V1Devices;
pub use v2::{bpf_device_programs_supported, V2Devices};

use crate::error::{InjectError, Result};

/// Applies device rules to one cgroup; behind a trait so the hook's logic can use a fake.
pub trait DeviceController {
    /// Allow `add` on top of what the runtime configured (`base`, the OCI spec's rules; v1 ignores
    /// it because the kernel keeps v1 rules, v2 needs it to rebuild the program).
    fn apply(&self, base: &[DeviceRule], add: &[DeviceRule]) -> Result<()>;
}

/// Where a process' device cgroup lives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeviceCgroup {
    /// v1 `devices` controller directory.
    V1(PathBuf),
    /// cgroup2 directory (device access decided by eBPF).
    V2(PathBuf),
}

/// One line of `/proc/self/mountinfo` (the fields we need).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MountInfo {
    pub root: PathBuf,
    pub mount_point: PathBuf,
    pub fstype: String,
    pub super_options: Vec<String>,
}

fn unescape(field: &str) -> String {
    let b = field.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\'
            && i + 3 < b.len()
            && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c))
        {
            let v = (b[i + 1] - b'0') * 64 + (b[i + 2] - b'0') * 8 + (b[i + 3] - b'0');
            out.push(v);
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Parse `/proc/<pid>/mountinfo` text; malformed lines are skipped.
pub fn parse_mountinfo(text: &str) -> Vec<MountInfo> {
    text.lines()
        .filter_map(|line| {
            let (pre, post) = line.split_once(" - ")?;
            let pre: Vec<&str> = pre.split(' ').collect();
            let post: Vec<&str> = post.split(' ').collect();
            if pre.len() < 6 || post.len() < 3 {
                return None;
            }
            Some(MountInfo {
                root: PathBuf::from(unescape(pre[3])),
                mount_point: PathBuf::from(unescape(pre[4])),
                fstype: post[0].to_string(),
                super_options: post[2].split(',').map(str::to_string).collect(),
            })
        })
        .collect()
}

fn join_cgroup(pid: i32, mount: &MountInfo, cg_path: &str) -> Result<PathBuf> {
    let cg = Path::new(cg_path);
    if cg.components().any(|c| c == Component::ParentDir) || !cg.is_absolute() {
        return Err(cgroup_err(
            pid,
            format!("suspicious cgroup path {cg_path:?}"),
        ));
    }
    let rel = cg.strip_prefix(&mount.root).map_err(|_| {
        cgroup_err(
            pid,
            format!(
                "cgroup {cg_path} is not below the mount root {} of {}",
                mount.root.display(),
                mount.mount_point.display()
            ),
        )
    })?;
    Ok(mount.mount_point.join(rel))
}

fn cgroup_err(pid: i32, reason: String) -> InjectError {
    InjectError::Cgroup { pid, reason }
}

/// Find the device cgroup from the text of `/proc/<pid>/cgroup` and of our own mountinfo. A v1
/// `devices` controller wins over cgroup2 (hybrid hosts: runc uses v1 there).
pub fn locate_from(pid: i32, proc_cgroup: &str, mountinfo: &str) -> Result<DeviceCgroup> {
    let mounts = parse_mountinfo(mountinfo);
    let mut unified = None;
    for line in proc_cgroup.lines() {
        let mut parts = line.splitn(3, ':');
        let (Some(id), Some(ctrls), Some(path)) = (parts.next(), parts.next(), parts.next()) else {
            continue;
        };
        if ctrls.split(',').any(|c| c == "devices") {
            let mount = mounts
                .iter()
                .filter(|m| m.fstype == "cgroup" && m.super_options.iter().any(|o| o == "devices"))
                .find(|m| Path::new(path).starts_with(&m.root))
                .ok_or_else(|| cgroup_err(pid, "no cgroup v1 devices mount in mountinfo".into()))?;
            return Ok(DeviceCgroup::V1(join_cgroup(pid, mount, path)?));
        }
        if id == "0" && ctrls.is_empty() {
            unified = Some(path.to_string());
        }
    }
    let path = unified.ok_or_else(|| {
        cgroup_err(
            pid,
            "neither a v1 devices controller nor a cgroup2 entry".into(),
        )
    })?;
    let mount = mounts
        .iter()
        .filter(|m| m.fstype == "cgroup2")
        .find(|m| Path::new(&path).starts_with(&m.root))
        .ok_or_else(|| cgroup_err(pid, "no cgroup2 mount in mountinfo".into()))?;
    Ok(DeviceCgroup::V2(join_cgroup(pid, mount, &path)?))
}

/// Find the device cgroup of `pid`.
pub fn locate_device_cgroup(pid: i32) -> Result<DeviceCgroup> {
    let read = |p: String| {
        std::fs::read_to_string(&p).map_err(|e| cgroup_err(pid, format!("read {p}: {e}")))
    };
    let cg = read(format!("/proc/{pid}/cgroup"))?;
    let mi = read("/proc/self/mountinfo".to_string())?;
    locate_from(pid, &cg, &mi)
}

/// Allow `rules` for the container whose init is `pid`; `base_rules` are the OCI spec's
/// `linux.resources.devices` (needed for v2). Returns the cgroup that was changed.
pub fn allow_devices(
    pid: i32,
    base_rules: &[DeviceRule],
    rules: &[DeviceRule],
) -> Result<DeviceCgroup> {
    let cg = locate_device_cgroup(pid)?;
    match &cg {
        DeviceCgroup::V1(dir) => V1Devices::new(pid, dir.clone()).apply(base_rules, rules)?,
        DeviceCgroup::V2(dir) => V2Devices::new(pid, dir.clone()).apply(base_rules, rules)?,
    }
    tracing::info!(pid, cgroup = ?cg, rules = rules.len(), "device cgroup updated");
    Ok(cg)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MI: &str = "36 31 0:33 / /sys/fs/cgroup/devices rw,relatime - cgroup cgroup rw,devices\n\
        41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n\
        50 1 8:1 / /mnt/with\\040space rw - ext4 /dev/sda1 rw\n";

    #[test]
    fn mountinfo_parses_and_unescapes() {
        let m = parse_mountinfo(MI);
        assert_eq!(m.len(), 3);
        assert_eq!(m[0].super_options, vec!["rw", "devices"]);
        assert_eq!(m[2].mount_point, Path::new("/mnt/with space"));
    }

    #[test]
    fn v1_devices_wins_on_hybrid_hosts() {
        let cg = "12:devices:/docker/abc\n0::/docker/abc\n";
        assert_eq!(
            locate_from(1, cg, MI).unwrap(),
            DeviceCgroup::V1("/sys/fs/cgroup/devices/docker/abc".into())
        );
    }

    #[test]
    fn v2_only_uses_cgroup2_mount() {
        assert_eq!(
            locate_from(1, "0::/kubepods/pod1\n", MI).unwrap(),
            DeviceCgroup::V2("/sys/fs/cgroup/unified/kubepods/pod1".into())
        );
    }

    #[test]
    fn hostile_or_missing_paths_are_errors() {
        assert!(locate_from(1, "12:devices:/../../etc\n", MI).is_err());
        assert!(locate_from(1, "12:cpu:/x\n", MI).is_err());
        let err = locate_from(7, "12:devices:/x\n", "")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("pid 7") && err.contains("devices mount"),
            "{err}"
        );
    }

    #[test]
    fn mount_root_is_stripped() {
        let mi = "36 31 0:33 /docker /sys/fs/cgroup/devices rw - cgroup cgroup rw,devices\n";
        assert_eq!(
            locate_from(1, "3:devices:/docker/abc\n", mi).unwrap(),
            DeviceCgroup::V1("/sys/fs/cgroup/devices/abc".into())
        );
    }
}
