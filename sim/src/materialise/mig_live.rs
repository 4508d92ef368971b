//! The driver root's MIG capability files and nodes after a layout change, as the driver and
//! `nvidia-modprobe` keep them: `/proc/driver/nvidia/capabilities/gpu<N>/mig/gi<G>/access` and
//! `…/gi<G>/ci<C>/access` exist exactly for the instances that exist; `/dev/nvidia-caps/nvidia-cap<M>`
//! is created for each (and, as `nvidia-modprobe` does, left in place when it goes away).

use std::path::Path;

use super::devices::{apply_node, DeviceNode};
use super::fsutil::{io, mkdirs, under, write_atomic};
use super::procfs::capability;
use crate::profile::{ci_cap_minor, gi_cap_minor};
use crate::SimError;

/// Makes GPU `gpu_minor`'s capability files list exactly `instances` (`(gi, [ci…])`), creating
/// their `nvidia-caps` nodes (major `caps_major`) when the process may.
pub fn sync_gpu(
    root: &Path,
    caps_major: u32,
    gpu_minor: u32,
    instances: &[(u32, Vec<u32>)],
) -> Result<(), SimError> {
    let mig_dir = under(
        root,
        &format!("/proc/driver/nvidia/capabilities/gpu{gpu_minor}/mig"),
    );
    if let Ok(entries) = std::fs::read_dir(&mig_dir) {
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            let keep = name
                .strip_prefix("gi")
                .and_then(|n| n.parse::<u32>().ok())
                .and_then(|gi| instances.iter().find(|(g, _)| *g == gi));
            match keep {
                None if name.starts_with("gi") => {
                    std::fs::remove_dir_all(e.path()).map_err(io("remove", &e.path()))?;
                }
                Some((_, cis)) => remove_stale_cis(&e.path(), cis)?,
                None => {}
            }
        }
    }
    let mknod = super::devices::can_mknod();
    for (gi, cis) in instances {
        let gi_dir = mig_dir.join(format!("gi{gi}"));
        mkdirs(&gi_dir)?;
        let gi_minor = gi_cap_minor(gpu_minor, *gi);
        write_atomic(
            &gi_dir.join("access"),
            capability(gi_minor, 0o444).as_bytes(),
            0o444,
        )?;
        let mut minors = vec![gi_minor];
        for ci in cis {
            let ci_dir = gi_dir.join(format!("ci{ci}"));
            mkdirs(&ci_dir)?;
            let ci_minor = ci_cap_minor(gpu_minor, *gi, *ci);
            write_atomic(
                &ci_dir.join("access"),
                capability(ci_minor, 0o444).as_bytes(),
                0o444,
            )?;
            minors.push(ci_minor);
        }
        if mknod {
            for m in minors {
                let n = DeviceNode {
                    path: format!("/dev/nvidia-caps/nvidia-cap{m}"),
                    major: caps_major,
                    minor: m,
                    mode: 0o444,
                };
                apply_node(root, &n)?;
            }
        }
    }
    Ok(())
}

fn remove_stale_cis(gi_dir: &Path, cis: &[u32]) -> Result<(), SimError> {
    let Ok(entries) = std::fs::read_dir(gi_dir) else {
        return Ok(());
    };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let stale = name
            .strip_prefix("ci")
            .and_then(|n| n.parse::<u32>().ok())
            .is_some_and(|ci| !cis.contains(&ci));
        if stale {
            std::fs::remove_dir_all(e.path()).map_err(io("remove", &e.path()))?;
        }
    }
    Ok(())
}
