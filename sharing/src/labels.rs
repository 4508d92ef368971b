//! Node labels as NVIDIA's GPU feature discovery writes them, from the inventory and the config
//! (`internal/lm/resource.go`, `mig-strategy.go`, `nvml.go`, k8s-device-plugin v0.20.0;
//! `shared/reference/kdp-facts.md` §9), and the Node Feature Discovery local feature file that
//! carries them to the node object.
//!
//! Labels NVML facts we do not have are left out rather than guessed: `gpu.mode`, `gpu.machine`,
//! `vgpu.present`, `gfd.timestamp`, and a MIG device's multiprocessor and engine counts. A GPU
//! is `mig.capable` when MIG is on, or its model is one NVIDIA makes MIG-capable (the inventory
//! does not keep NVML's MIG-mode support).

use std::collections::BTreeMap;

use gpuhook_node::{Gpu, Inventory};

use crate::advertise::Advertisement;
use crate::config::{Config, MigStrategy, SharingStrategy};
use crate::model::{BaseDevice, GPU_RESOURCE};

type Labels = BTreeMap<String, String>;

/// Models with MIG support (A100, A30, Hopper, Blackwell data-centre GPUs).
const MIG_CAPABLE: &[&str] = &[
    "A100", "A30", "A800", "H100", "H20", "H200", "H800", "GH200", "B100", "B200", "B300", "GB200",
    "GB300",
];

/// One resource's sharing, as GFD's `resourceLabeler` sees it.
#[derive(Clone, Copy)]
struct Share {
    /// `None`: labelled without sharing (MIG-enabled parents: replicas 0).
    replicas: Option<u32>,
    renamed: bool,
    strategy: SharingStrategy,
}

fn share_of(config: &Config, resource: &str) -> Share {
    let found = config.sharing.replicated().and_then(|(section, _)| {
        let r = section
            .resources
            .iter()
            .find(|r| r.full_name() == resource)?;
        Some((
            u32::try_from(r.replicas).unwrap_or(1),
            section.rename_by_default,
        ))
    });
    let (replicas, renamed) = found.unwrap_or((1, false));
    Share {
        replicas: Some(replicas.max(1)),
        renamed,
        strategy: config.sharing.strategy(),
    }
}

/// `nvidia.com/<resource>.*`: product, count, replicas, sharing-strategy (`baseLabeler`).
fn base_labels(l: &mut Labels, resource: &str, count: usize, product: &[&str], share: Share) {
    if count == 0 {
        return;
    }
    let shared = share.replicas.is_some_and(|r| r > 1);
    let mut parts: Vec<String> = product
        .iter()
        .filter(|p| !p.is_empty())
        .map(|p| sanitise(p))
        .collect();
    if shared && !share.renamed {
        parts.push("SHARED".into());
    }
    let mut set = |k: &str, v: String| l.insert(format!("{resource}.{k}"), v);
    set("product", parts.join("-"));
    set("count", count.to_string());
    set("replicas", share.replicas.unwrap_or(0).to_string());
    let strategy = if shared {
        share.strategy
    } else {
        SharingStrategy::None
    };
    set("sharing-strategy", strategy.to_string());
}

/// `sanitise`: only `[A-Za-z0-9-_. ]` kept, runs of blanks made one `-`.
pub fn sanitise(s: &str) -> String {
    let kept: String = s
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | ' '))
        .collect();
    kept.split_whitespace().collect::<Vec<_>>().join("-")
}

/// `getArchFamily` (`internal/lm/resource.go`).
pub fn arch_family(major: u32, minor: u32) -> &'static str {
    match (major, minor) {
        (1, _) => "tesla",
        (2, _) => "fermi",
        (3, _) => "kepler",
        (5, _) => "maxwell",
        (6, _) => "pascal",
        (7, m) if m < 5 => "volta",
        (7, _) => "turing",
        (8, m) if m < 9 => "ampere",
        (8, _) => "ada-lovelace",
        (9, _) => "hopper",
        (10 | 12, _) => "blackwell",
        (13, _) => "rubin",
        _ => "undefined",
    }
}

fn full_gpu_labels(l: &mut Labels, g: &Gpu, count: usize, share: Share) {
    base_labels(l, GPU_RESOURCE, count, &[&g.name], share);
    if g.memory_mib != 0 {
        l.insert(format!("{GPU_RESOURCE}.memory"), g.memory_mib.to_string());
    }
    if let Some((major, minor)) = g.compute_capability.filter(|c| c.0 != 0) {
        let family = arch_family(major, minor).to_string();
        l.insert(format!("{GPU_RESOURCE}.family"), family);
        l.insert(format!("{GPU_RESOURCE}.compute.major"), major.to_string());
        l.insert(format!("{GPU_RESOURCE}.compute.minor"), minor.to_string());
    }
}

/// `newGPULabelers`: per model, MIG-enabled GPUs without sharing first, full GPUs over them.
fn gpu_labels(l: &mut Labels, config: &Config, inv: &Inventory) {
    let mut by_name: BTreeMap<&str, (usize, Option<&Gpu>, Option<&Gpu>)> = BTreeMap::new();
    for g in &inv.gpus {
        let e = by_name.entry(&g.name).or_default();
        e.0 += 1;
        let slot = if g.mig_enabled { &mut e.1 } else { &mut e.2 };
        slot.get_or_insert(g);
    }
    let disabled = Share {
        replicas: None,
        renamed: false,
        strategy: SharingStrategy::None,
    };
    for (count, mig, _) in by_name.values() {
        if let Some(g) = mig {
            full_gpu_labels(l, g, *count, disabled);
        }
    }
    let share = share_of(config, GPU_RESOURCE);
    for (count, _, full) in by_name.values() {
        if let Some(g) = full {
            full_gpu_labels(l, g, *count, share);
        }
    }
}

/// Slices of a MIG profile: `3g.40gb` → (3, 3); `1c.3g.40gb` → (3, 1).
fn slices(profile: &str) -> (Option<u32>, Option<u32>) {
    let num = |suffix: char| {
        profile
            .split(['.', '+'])
            .find_map(|p| p.strip_suffix(suffix)?.parse::<u32>().ok())
    };
    let gi = num('g');
    (gi, num('c').or(gi))
}

/// MIG resources under single (`nvidia.com/gpu`) and mixed (`nvidia.com/mig-<profile>`).
fn mig_labels(l: &mut Labels, config: &Config, inv: &Inventory, base: &[BaseDevice]) {
    let mut by_resource: BTreeMap<&str, Vec<&BaseDevice>> = BTreeMap::new();
    for d in base.iter().filter(|d| d.backing.mig.is_some()) {
        by_resource.entry(&d.resource).or_default().push(d);
    }
    for (resource, devices) in by_resource {
        let Some(first) = devices.first() else {
            continue;
        };
        let Some(mig) = &first.backing.mig else {
            continue;
        };
        let parent = inv.gpus.iter().find(|g| g.uuid == first.backing.gpu_uuid);
        let model = parent.map_or("", |g| g.name.as_str());
        let share = share_of(config, resource);
        base_labels(
            l,
            resource,
            devices.len(),
            &[model, "MIG", &mig.profile],
            share,
        );
        let memory = parent
            .and_then(|g| g.mig_devices.iter().find(|m| m.uuid == mig.uuid))
            .map_or(0, |m| m.memory_mib);
        l.insert(format!("{resource}.memory"), memory.to_string());
        let (gi, ci) = slices(&mig.profile);
        if let (Some(gi), Some(ci)) = (gi, ci) {
            l.insert(format!("{resource}.slices.gi"), gi.to_string());
            l.insert(format!("{resource}.slices.ci"), ci.to_string());
        }
    }
}

/// Driver and CUDA version labels (`internal/lm/nvml.go`).
fn version_labels(l: &mut Labels, inv: &Inventory) {
    let mut set = |k: &str, v: &str| l.insert(format!("nvidia.com/{k}"), v.to_string());
    let mut d = inv.driver_version.splitn(3, '.');
    let (major, minor, rev) = (
        d.next().unwrap_or(""),
        d.next().unwrap_or(""),
        d.next().unwrap_or(""),
    );
    set("cuda.driver.major", major);
    set("cuda.driver.minor", minor);
    set("cuda.driver.rev", rev);
    set("cuda.driver-version.major", major);
    set("cuda.driver-version.minor", minor);
    set("cuda.driver-version.revision", rev);
    set("cuda.driver-version.full", &inv.driver_version);
    if let Some(cuda) = &inv.cuda_driver_version {
        let (major, minor) = cuda.split_once('.').unwrap_or((cuda, "0"));
        set("cuda.runtime.major", major);
        set("cuda.runtime.minor", minor);
        set("cuda.runtime-version.major", major);
        set("cuda.runtime-version.minor", minor);
        set("cuda.runtime-version.full", cuda);
    }
}

/// Whether `g` supports MIG (see the module doc).
pub fn mig_capable(g: &Gpu) -> bool {
    g.mig_enabled
        || !g.mig_devices.is_empty()
        || g.name
            .split([' ', '-'])
            .any(|w| MIG_CAPABLE.contains(&w.to_ascii_uppercase().as_str()))
}

/// All GFD labels of this node under `config`.
pub fn node_labels(config: &Config, inv: &Inventory, base: &[BaseDevice]) -> Labels {
    let mut l = Labels::new();
    version_labels(&mut l, inv);
    if inv.gpus.is_empty() {
        return l;
    }
    gpu_labels(&mut l, config, inv);
    let mig = config.flags.mig_strategy.unwrap_or_default();
    if mig != MigStrategy::None {
        let name = if mig == MigStrategy::Single {
            "single"
        } else {
            "mixed"
        };
        l.insert("nvidia.com/mig.strategy".into(), name.into());
        mig_labels(&mut l, config, inv, base);
    }
    let capable = inv.gpus.iter().any(mig_capable);
    l.insert(
        "nvidia.com/gpu.mode".into(),
        crate::host_labels::gpu_mode(inv).into(),
    );
    l.insert(
        "nvidia.com/gpu.machine".into(),
        sanitise(&crate::host_labels::machine(inv)),
    );
    l.insert("nvidia.com/mig.capable".into(), capable.to_string());
    let mps = config.sharing.strategy() == SharingStrategy::Mps
        && !inv.gpus.iter().any(|g| g.mig_enabled);
    l.insert("nvidia.com/mps.capable".into(), mps.to_string());
    l
}

/// The Node Feature Discovery local feature file (`/etc/kubernetes/node-feature-discovery/
/// features.d/<file>`): one `name=value` line per label, sorted.
pub fn nfd_feature_file(ad: &Advertisement) -> String {
    ad.labels
        .iter()
        .map(|(k, v)| format!("{k}={v}\n"))
        .collect()
}
