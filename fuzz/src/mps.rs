//! `gpu-mps-daemon`'s inputs: its config file (the device plugin's sharing format, edited by a
//! node admin or shipped in a ConfigMap) and the replies of `nvidia-cuda-mps-control`, which
//! travel through the pipe directory that MPS tenants' containers mount.

use gpu_mps_daemon::config::{parse, parse_duration, parse_size};
use gpu_mps_daemon::control::{parse_mem_limit_mib, parse_percentage};
use gpu_mps_daemon::enforce::parse_pids;
use gpu_mps_daemon::inventory::GpuFacts;
use gpu_mps_daemon::plan::{resolve, Overrides};

use crate::{check_message, text};

/// The node the config is planned against: two full GPUs and one in MIG mode.
fn node() -> Vec<GpuFacts> {
    (0..3u32)
        .map(|i| GpuFacts {
            index: i,
            uuid: format!("GPU-{i:08}-0000-0000-0000-000000000000"),
            memory_mib: 81_559,
            compute_capability: Some((9, 0)),
            mig_enabled: i == 2,
            mig_uuids: if i == 2 {
                vec!["MIG-00000000-0000-0000-0000-000000000002".into()]
            } else {
                Vec::new()
            },
        })
        .collect()
}

/// The config file: errors are bounded; a config that plans gives every GPU real limits (no
/// client without limits: 1..=100 % of threads, pinned memory within the GPU) on GPUs of the node.
pub fn config(data: &[u8]) {
    let yaml = text(data);
    let cfg = match parse(&yaml) {
        Ok(cfg) => cfg,
        Err(e) => return check_message("mps config parse", &e),
    };
    let gpus = node();
    let plan = match resolve(&cfg, &gpus, &Overrides::default()) {
        Ok(plan) => plan,
        Err(e) => return check_message("mps plan resolve", &e),
    };
    for g in &plan.gpus {
        let facts = gpus
            .iter()
            .find(|f| f.uuid == g.uuid && f.index == g.index)
            .unwrap_or_else(|| panic!("planned GPU {} {} is not on the node", g.index, g.uuid));
        assert!(!facts.mig_enabled, "MPS planned on MIG GPU {}", g.uuid);
        assert!((1..=100).contains(&g.replicas), "replicas {}", g.replicas);
        assert!(
            (1..=100).contains(&g.active_thread_percentage),
            "active thread percentage {} on {}",
            g.active_thread_percentage,
            g.uuid
        );
        if let Some(m) = g.pinned_memory_limit_mib {
            assert!(m <= facts.memory_mib, "pinned limit {m} MiB > GPU memory");
        }
    }
    let mut uuids: Vec<_> = plan.gpus.iter().map(|g| &g.uuid).collect();
    uuids.sort();
    uuids.dedup();
    assert_eq!(uuids.len(), plan.gpus.len(), "a GPU planned twice");
}

/// A control daemon reply: the read-back values the supervisor checks limits against are real
/// numbers (a `nan` reply must not pass `|got - want| > 0.5`), the values it writes read back as
/// themselves, pid lists print back to themselves, and errors are bounded.
pub fn control_reply(data: &[u8]) {
    let reply = text(data);
    if let Some(p) = parse_percentage(&reply) {
        // `nan` compares false with everything: `|nan - want| > 0.5` would pass any setting.
        assert!(
            p.is_finite(),
            "{reply:?} read back as thread percentage {p}"
        );
        assert_eq!(parse_percentage(&p.to_string()), Some(p));
    }
    // Limits are MiB of GPU memory: far below 2^40, where f64 is still exact.
    if let Some(m) = parse_mem_limit_mib(&reply).filter(|m| *m < 1 << 40) {
        // What the supervisor sets (`set_default_device_pinned_mem_limit 0 {m}M`) reads back.
        assert_eq!(parse_mem_limit_mib(&format!("{m}M")), Some(m), "{reply:?}");
        assert_eq!(
            parse_mem_limit_mib(&format!("0={m}M")),
            Some(m),
            "{reply:?}"
        );
    }
    match parse_pids(&reply) {
        Ok(pids) => {
            let printed = pids
                .iter()
                .map(u32::to_string)
                .collect::<Vec<_>>()
                .join("\n");
            assert_eq!(parse_pids(&printed), Ok(pids));
        }
        Err(e) => check_message("parse_pids", &e),
    }
    // The same bytes as config values (sizes and durations are parsed the same way).
    if let Some(n) = parse_size(&reply) {
        assert_eq!(parse_size(&n.to_string()), Some(n));
    }
    if let Some(d) = parse_duration(&reply) {
        let printed = if d.subsec_nanos() == 0 {
            format!("{}s", d.as_secs())
        } else {
            format!("{}ms", d.as_millis())
        };
        assert_eq!(parse_duration(&printed), Some(d), "{reply:?}");
    }
}
