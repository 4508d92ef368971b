//! The NVIDIA_VISIBLE_DEVICES forms of `prestart_runc.rs`: the cases per inventory, the nodes each
//! must give (computed from the inventory, not from the product's CDI code), and the run and checks
//! of one profile.

use std::collections::BTreeSet;

use gpuhook_node::{Capability, Inventory};

use super::prestart_support::{node, text, Bundle, Node};

/// A device node the container must have: path, major, minor.
pub type NodeSpec = (String, u32, u32);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Sel {
    Gpu(usize),
    Mig(usize, usize),
}

/// `host_has(path)`: whether the node has that device node. libnvidia-container lists only the
/// control nodes that exist (`src/nvc_info.c` `find_device_node`: a missing one is logged
/// "missing device" and skipped), so a node without `/dev/nvidia-uvm-tools` (l20-minimal)
/// gives containers none.
fn expected_nodes(
    inv: &Inventory,
    sel: &[Sel],
    any: bool,
    host_has: impl Fn(&str) -> bool,
) -> BTreeSet<NodeSpec> {
    let mut out = BTreeSet::new();
    if !any {
        return out;
    }
    out.insert(("/dev/nvidiactl".into(), 195, 255));
    if let Some(uvm) = inv.majors.nvidia_uvm {
        for (path, minor) in [("/dev/nvidia-uvm", 0), ("/dev/nvidia-uvm-tools", 1)] {
            if host_has(path) {
                out.insert((path.into(), uvm, minor));
            }
        }
    }
    for s in sel {
        let (g, mig) = match *s {
            Sel::Gpu(g) => (&inv.gpus[g], None),
            Sel::Mig(g, m) => (&inv.gpus[g], Some(&inv.gpus[g].mig_devices[m])),
        };
        out.insert((format!("/dev/nvidia{}", g.minor), 195, g.minor));
        if let Some(m) = mig {
            let caps = inv.majors.nvidia_caps.expect("caps major");
            for c in [m.gi_cap_minor, m.ci_cap_minor] {
                out.insert((format!("/dev/nvidia-caps/nvidia-cap{c}"), caps, c));
            }
        }
    }
    out
}

/// libnvidia-container `src/cli/common.c` `select_devices`: `all` is every GPU
/// (`select_all_gpu_devices`, MIG-enabled ones too) and every MIG device.
fn all_selection(inv: &Inventory) -> Vec<Sel> {
    let mut out = Vec::new();
    for (gi, g) in inv.gpus.iter().enumerate() {
        out.push(Sel::Gpu(gi));
        out.extend((0..g.mig_devices.len()).map(|m| Sel::Mig(gi, m)));
    }
    out
}

/// `(NVIDIA_VISIBLE_DEVICES value, selection, GPU container?)` for every form this node supports.
fn cases(inv: &Inventory) -> Vec<(String, Vec<Sel>, bool)> {
    let mut out = Vec::new();
    // Prefer a GPU whose minor differs from its index (dgx-h100): the node must follow the minor.
    let whole = inv
        .gpus
        .iter()
        .enumerate()
        .filter(|(_, g)| !g.mig_enabled)
        .max_by_key(|(_, g)| (g.minor != g.index, std::cmp::Reverse(g.index)));
    if let Some((i, g)) = whole {
        out.push((g.index.to_string(), vec![Sel::Gpu(i)], true));
        out.push((g.uuid.to_ascii_lowercase(), vec![Sel::Gpu(i)], true));
        // The kernel's short-domain form; the hook normalises it to NVML's.
        let pci = g
            .pci_bus_id
            .strip_prefix("0000")
            .unwrap_or(&g.pci_bus_id)
            .to_ascii_uppercase();
        out.push((pci, vec![Sel::Gpu(i)], true));
    }
    // A MIG-enabled GPU, preferably one with MIG devices.
    let mig = inv
        .gpus
        .iter()
        .enumerate()
        .filter(|(_, g)| g.mig_enabled)
        .max_by_key(|(_, g)| (!g.mig_devices.is_empty(), std::cmp::Reverse(g.index)));
    if let Some((gi, g)) = mig {
        // Issue #13.3: the MIG-enabled GPU itself (libnvc `select_gpu_device` ignores MIG
        // mode; NVIDIA's device plugin with MIG strategy `none` hands out its UUID): its
        // /dev/nvidia<minor> and no MIG cap node — with or without MIG instances
        // (h100-mig-empty).
        out.push((g.uuid.clone(), vec![Sel::Gpu(gi)], true));
        out.push((g.index.to_string(), vec![Sel::Gpu(gi)], true));
    }
    if let Some((gi, g)) = mig.filter(|(_, g)| !g.mig_devices.is_empty()) {
        let last = g.mig_devices.len() - 1;
        let m = &g.mig_devices[last];
        out.push((m.uuid.clone(), vec![Sel::Mig(gi, last)], true));
        out.push((
            format!("MIG-{}/{}/{}", g.uuid, m.gi_id, m.ci_id),
            vec![Sel::Mig(gi, last)],
            true,
        ));
        out.push((
            format!("{}:{}", g.index, m.index),
            vec![Sel::Mig(gi, last)],
            true,
        ));
    }
    out.push(("all".into(), all_selection(inv), true));
    out.push(("none".into(), vec![], true));
    out.push(("void".into(), vec![], false));
    out
}

fn compute_utility_libs(inv: &Inventory) -> Vec<String> {
    inv.files
        .libraries
        .iter()
        .filter(|l| matches!(l.capability, Capability::Compute | Capability::Utility))
        .map(|l| l.path.display().to_string())
        .collect()
}

pub const SCRIPT: &str = r#"
for f in /dev/nvidia* /dev/nvidia-caps/* /dev/nvidia-caps-imex-channels/*; do
  [ -c "$f" ] && echo "NODE $f $(stat -c '%t:%T' "$f")"
done
for f in $CHECK_OPEN; do echo "OPEN $f $(cat "$f" 2>&1 </dev/null | head -n1)"; done
for f in $CHECK_LIBS; do [ -f "$f" ] && echo "LIB $f"; done
[ -f /etc/ld.so.cache ] && echo "LDCACHE $(grep -c libnvidia-ml.so.1 /etc/ld.so.cache)"
exit 0
"#;

pub fn check_profile(profile: &str) {
    let n = node(profile, "");
    let inv = &n.inventory;
    let libs = check_inventory(profile, &n);
    let host_has = |path: &str| n.root.join(path.trim_start_matches('/')).exists();
    for (value, sel, gpu) in cases(inv) {
        let ctx = format!("{profile} NVIDIA_VISIBLE_DEVICES={value}");
        let want = expected_nodes(inv, &sel, gpu, host_has);
        let mut bundle = Bundle::new(SCRIPT, true);
        let denied = denied_nodes(&n, &want);
        for (dest, host) in &denied {
            bundle.bind(&n.root.join("dev").join(host), dest);
        }
        let open: Vec<String> = want
            .iter()
            .map(|(p, _, _)| p.clone())
            .chain(denied.iter().map(|(d, _)| d.clone()))
            .collect();
        bundle
            .env(&format!("NVIDIA_VISIBLE_DEVICES={value}"))
            .env(&format!("CHECK_OPEN={}", open.join(" ")))
            .env(&format!("CHECK_LIBS={}", libs.join(" ")))
            .hook(n.hook());
        let (id, out) = bundle.run("runc");
        let (stdout, stderr) = text(&out);
        assert!(
            out.status.success(),
            "{ctx}: runc failed\n{stdout}\n{stderr}"
        );
        check_output(&ctx, &stdout, &want, open.len(), libs.len(), gpu);
        let decisions = n.decisions(&id);
        let outcome = if gpu { "inject" } else { "skip" };
        assert!(
            decisions.iter().any(|d| d["fields"]["outcome"] == outcome),
            "{ctx}: no {outcome} decision in the log: {decisions:?}"
        );
    }
}

/// The compute/utility libraries are where the profile's driver put them, and the inventory's
/// layout is the profile's. Returns the libraries the container must get.
fn check_inventory(profile: &str, n: &Node) -> Vec<String> {
    let inv = &n.inventory;
    let libs = compute_utility_libs(inv);
    assert!(!libs.is_empty(), "{profile}: no compute/utility libraries");
    // The libraries are where the profile's driver put them (rhel-a100: /usr/lib64), and the
    // container gets them there (the checks below look for these paths and the ldcache entry).
    let lib_dir = format!("{}/", n.profile.lib_dir);
    assert!(
        libs.iter().all(|l| l.starts_with(&lib_dir)),
        "{profile}: libraries outside {lib_dir}: {libs:?}"
    );
    // Expectations use the inventory's index/minor/MIG layout: pin it to the profile (rhel-a100:
    // index 0 is minor 1), so a discovery bug cannot hide behind itself.
    for pg in &n.profile.gpus {
        let g = inv
            .gpus
            .iter()
            .find(|g| g.uuid == pg.uuid)
            .expect("profile GPU");
        assert_eq!(
            (g.index, g.minor),
            (pg.index, pg.minor),
            "{profile}: {}",
            pg.uuid
        );
        assert_eq!(g.mig_enabled, pg.mig_mode, "{profile}: {}", pg.uuid);
        assert_eq!(g.mig_devices.len(), pg.mig_devices.len(), "{profile}");
    }
    libs
}

/// Host nodes that are not injected, bind-mounted to have a denied one at hand: modeset
/// (display only) where the node has it and, when one GPU is selected, another GPU.
fn denied_nodes(n: &Node, want: &BTreeSet<NodeSpec>) -> Vec<(String, String)> {
    let inv = &n.inventory;
    let host_has = |path: &str| n.root.join(path.trim_start_matches('/')).exists();
    let mut denied = Vec::new();
    if host_has("/dev/nvidia-modeset") {
        denied.push((
            "/dev/gpuhook-denied-modeset".to_string(),
            "nvidia-modeset".to_string(),
        ));
    }
    let selected: BTreeSet<String> = want.iter().map(|(p, _, _)| p.clone()).collect();
    if let Some(other) = inv
        .gpus
        .iter()
        .find(|g| !selected.contains(&format!("/dev/nvidia{}", g.minor)))
    {
        denied.push((
            "/dev/gpuhook-denied-gpu".into(),
            format!("nvidia{}", other.minor),
        ));
    }
    denied
}

/// The nodes listed are exactly `want`, allowed ones open with ENXIO and denied ones with EPERM,
/// and the libraries and ld.so.cache are there exactly for a GPU request.
fn check_output(
    ctx: &str,
    stdout: &str,
    want: &BTreeSet<NodeSpec>,
    open: usize,
    libs: usize,
    gpu: bool,
) {
    let got: BTreeSet<NodeSpec> = stdout
        .lines()
        .filter_map(|l| l.strip_prefix("NODE "))
        .filter(|l| !l.starts_with("/dev/gpuhook-denied"))
        .map(|l| {
            let (path, num) = l.split_once(' ').unwrap();
            let (ma, mi) = num.split_once(':').unwrap();
            (
                path.to_string(),
                u32::from_str_radix(ma, 16).unwrap(),
                u32::from_str_radix(mi, 16).unwrap(),
            )
        })
        .collect();
    assert_eq!(&got, want, "{ctx}: device nodes\n{stdout}");
    for line in stdout.lines().filter_map(|l| l.strip_prefix("OPEN ")) {
        let (path, result) = line.split_once(' ').unwrap();
        let expect = if path.starts_with("/dev/gpuhook-denied") {
            "Operation not permitted"
        } else {
            "No such device or address"
        };
        assert!(
            result.contains(expect),
            "{ctx}: open {path}: {result:?}, want {expect}"
        );
    }
    assert_eq!(
        stdout.lines().filter(|l| l.starts_with("OPEN ")).count(),
        open,
        "{ctx}\n{stdout}"
    );
    let got_libs = stdout.lines().filter(|l| l.starts_with("LIB ")).count();
    if gpu {
        assert_eq!(got_libs, libs, "{ctx}: libraries\n{stdout}");
        assert!(
            stdout
                .lines()
                .any(|l| l.starts_with("LDCACHE ") && l != "LDCACHE 0"),
            "{ctx}: ld.so.cache lacks libnvidia-ml.so.1\n{stdout}"
        );
    } else {
        assert_eq!(got_libs, 0, "{ctx}: void must inject nothing\n{stdout}");
        assert!(!stdout.contains("LDCACHE"), "{ctx}\n{stdout}");
    }
}
