//! Output of the simulated `nvidia-smi` (bin `sim-nvidia-smi`, installed as `/usr/bin/nvidia-smi`
//! in a driver root). Operators and tests run `nvidia-smi` / `nvidia-smi -L` on a node to see what
//! it has; the simulated one prints the same shapes from the node's profile.

use std::path::{Path, PathBuf};

use crate::profile::{NodeProfile, PROFILE_FILE_NAME};

/// Library directories searched for the installed profile when `ld.so.conf` names none.
const LIB_DIRS: &[&str] = &[
    "/usr/lib/x86_64-linux-gnu",
    "/usr/lib64",
    "/usr/lib",
    "/lib64",
    "/lib/x86_64-linux-gnu",
];

/// Finds the profile installed in a driver root: `$GPUHOOK_SIM_PROFILE`, else
/// `<lib dir>/gpuhook-sim-profile.toml` for the dirs of `<root>/etc/ld.so.conf.d/*.conf`, then the
/// usual library dirs.
pub fn find_profile(root: &Path) -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("GPUHOOK_SIM_PROFILE") {
        return Some(PathBuf::from(p));
    }
    let mut dirs: Vec<String> = Vec::new();
    if let Ok(entries) = std::fs::read_dir(root.join("etc/ld.so.conf.d")) {
        let mut confs: Vec<PathBuf> = entries.filter_map(|e| e.ok().map(|e| e.path())).collect();
        confs.sort();
        for conf in confs {
            let text = std::fs::read_to_string(&conf).unwrap_or_default();
            dirs.extend(
                text.lines()
                    .map(str::trim)
                    .filter(|l| l.starts_with('/'))
                    .map(String::from),
            );
        }
    }
    dirs.extend(LIB_DIRS.iter().map(|d| d.to_string()));
    dirs.iter()
        .map(|d| root.join(d.trim_start_matches('/')).join(PROFILE_FILE_NAME))
        .find(|p| p.is_file())
}

/// `nvidia-smi -L`.
pub fn list(p: &NodeProfile) -> String {
    let mut out = String::new();
    let mut gpus: Vec<_> = p.gpus.iter().collect();
    gpus.sort_by_key(|g| g.index);
    for g in gpus {
        out.push_str(&format!("GPU {}: {} (UUID: {})\n", g.index, g.name, g.uuid));
        for (i, m) in g.mig_devices.iter().enumerate() {
            out.push_str(&format!(
                "  MIG {:<12} Device {i:>2}: (UUID: {})\n",
                m.profile, m.uuid
            ));
        }
    }
    out
}

/// The default `nvidia-smi` table.
pub fn table(p: &NodeProfile) -> String {
    let line = format!("+{}+\n", "-".repeat(89));
    let mut out = String::new();
    out.push_str(&line);
    out.push_str(&format!(
        "| {:<87} |\n",
        format!(
            "NVIDIA-SMI {}             Driver Version: {}     CUDA Version: {}",
            p.driver_version, p.driver_version, p.cuda_driver_version
        )
    ));
    out.push_str(&line);
    out.push_str(&format!(
        "| {:<4} {:<32} {:<18} {:<29} |\n",
        "GPU", "Name", "Bus-Id", "Memory-Usage / MIG M."
    ));
    out.push_str(&format!("|{}|\n", "=".repeat(89)));
    let mut gpus: Vec<_> = p.gpus.iter().collect();
    gpus.sort_by_key(|g| g.index);
    for g in &gpus {
        let mig = if g.mig_mode { "Enabled" } else { "Disabled" };
        let mem = format!("0MiB / {}MiB  {mig}", g.memory_mib);
        out.push_str(&format!(
            "| {:<4} {:<32} {:<18} {:<29} |\n",
            g.index, g.name, g.pci_bus_id, mem
        ));
    }
    out.push_str(&line);
    if gpus.iter().any(|g| !g.mig_devices.is_empty()) {
        out.push_str(&format!("| {:<87} |\n", "MIG devices:"));
        out.push_str(&format!(
            "| {:<4} {:<4} {:<4} {:<4} {:<12} {:<54} |\n",
            "GPU", "GI", "CI", "MIG", "Profile", "Memory"
        ));
        out.push_str(&format!("|{}|\n", "=".repeat(89)));
        for g in &gpus {
            for (i, m) in g.mig_devices.iter().enumerate() {
                let mem = format!("0MiB / {}MiB", m.memory_mib);
                out.push_str(&format!(
                    "| {:<4} {:<4} {:<4} {:<4} {:<12} {:<54} |\n",
                    g.index, m.gi_id, m.ci_id, i, m.profile, mem
                ));
            }
        }
        out.push_str(&line);
    }
    out.push_str(&line);
    out.push_str(&format!("| {:<87} |\n", "Processes:"));
    out.push_str(&format!("| {:<87} |\n", " No running processes found"));
    out.push_str(&line);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn list_prints_gpus_by_index_and_their_mig_devices() {
        let p = NodeProfile::builtin("a100-mig-mixed").unwrap();
        let text = list(&p);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines[0],
            format!("GPU 0: NVIDIA A100-SXM4-80GB (UUID: {})", p.gpus[0].uuid)
        );
        assert!(
            lines[1].starts_with("  MIG 3g.40gb") && lines[1].contains("Device  0:"),
            "{}",
            lines[1]
        );
        assert_eq!(lines.len(), 2 + 10);
    }

    #[test]
    fn table_shows_driver_and_cuda_versions() {
        let p = NodeProfile::builtin("t4").unwrap();
        let text = table(&p);
        assert!(text.contains("Driver Version: 570.158.01") && text.contains("CUDA Version: 12.8"));
        assert!(text.contains("Tesla T4") && !text.contains("MIG devices"));
    }
}
