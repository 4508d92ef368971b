use super::*;
use crate::holders::NoHolders;
use crate::spec::MigConfigFile;
use crate::test_support::Fake;
use crate::{assert_applied, create_instance, destroy_instance};

const A100_80: &str = "NVIDIA A100-SXM4-80GB";

/// Seed 003's ConfigMap `config.yaml`, verbatim.
const SEED_003: &str = "version: v1
mig-configs:
  mixed-workload:
    - devices: [0]
      mig-enabled: true
      mig-devices:
        \"3g.40gb\": 1
        \"2g.20gb\": 2
  all-small:
    - devices: [0]
      mig-enabled: true
      mig-devices:
        \"1g.10gb\": 7
";

fn run(f: &mut Fake, file: &str, name: &str, opts: ApplyOptions) -> Result<Outcome, MigError> {
    let cfg = MigConfigFile::parse(file.as_bytes(), "config.yaml").unwrap();
    apply(f, cfg.config(name).unwrap(), &NoHolders, opts)
}

fn placements(f: &Fake, gpu: usize) -> Vec<(u32, u32, u32)> {
    f.gpus[gpu]
        .state
        .instances
        .iter()
        .map(|i| (i.id, i.placement.start, i.placement.size))
        .collect()
}

#[test]
fn seed_003_mixed_then_small_matches_the_user_guide_and_reapplies_without_writes() {
    let mut f = Fake::new(&[A100_80]);
    let out = run(&mut f, SEED_003, "mixed-workload", ApplyOptions::default()).unwrap();
    assert_eq!(out.gpus[0].status, GpuStatus::Changed);
    // MIG user guide (A100): 3g.40gb at {4}:4 is GPU instance 2 (`-cgi 9` example); the
    // two 2g.20gb take {0}:2 and {2}:2, GPU instances 3 and 4.
    assert_eq!(placements(&f, 0), [(2, 4, 4), (3, 0, 2), (4, 2, 2)]);
    assert!(f.gpus[0].state.instances.iter().all(|i| i.cis.len() == 1));
    f.writes.clear();
    let again = run(&mut f, SEED_003, "mixed-workload", ApplyOptions::default()).unwrap();
    assert!(again.unchanged() && f.writes.is_empty(), "{:?}", f.writes);
    run(&mut f, SEED_003, "all-small", ApplyOptions::default()).unwrap();
    // Seven 1g.10gb at {0..6}:1 are GPU instances 7..13.
    let want: Vec<(u32, u32, u32)> = (0..7).map(|s| (7 + s, s, 1)).collect();
    assert_eq!(placements(&f, 0), want);
    f.writes.clear();
    run(&mut f, SEED_003, "all-small", ApplyOptions::default()).unwrap();
    assert!(f.writes.is_empty(), "{:?}", f.writes);
}

#[test]
fn a_profile_the_gpu_lacks_is_an_error_and_nothing_is_written() {
    let mut f = Fake::enabled(&[A100_80]);
    let cfg = "version: v1\nmig-configs:\n  c:\n    - devices: all\n      mig-enabled: true\n      mig-devices: {\"2g.10gb\": 1}\n";
    let err = run(&mut f, cfg, "c", ApplyOptions::default())
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("GPU 0")
            && err.contains(A100_80)
            && err.contains("no MIG profile 2g.10gb")
            && err.contains("1g.10gb, 1g.10gb+me"),
        "{err}"
    );
    assert!(f.writes.is_empty());
}

#[test]
fn a_pending_mode_change_is_reported_and_other_gpus_are_still_applied() {
    let mut f = Fake::new(&[A100_80, A100_80]);
    f.gpus[0].needs_reset = true;
    let cfg = "version: v1\nmig-configs:\n  c:\n    - devices: all\n      mig-enabled: true\n      mig-devices: {\"7g.80gb\": 1}\n";
    let out = run(&mut f, cfg, "c", ApplyOptions::default()).unwrap();
    assert_eq!(out.gpus[0].status, GpuStatus::PendingReset);
    assert!(out.gpus[0].plans[0].set_mode == Some(true));
    assert_eq!(out.gpus[1].status, GpuStatus::Changed);
    assert_eq!(placements(&f, 1), [(0, 0, 8)]);
    f.writes.clear();
    let again = run(&mut f, cfg, "c", ApplyOptions::default()).unwrap();
    assert_eq!(again.gpus[0].status, GpuStatus::PendingReset);
    assert!(
        f.writes.is_empty(),
        "a pending change is not requested again: {:?}",
        f.writes
    );
}

#[test]
fn a_mode_change_on_one_gpu_leaves_the_other_gpus_instances() {
    let mut f = Fake::new(&[A100_80, A100_80]);
    run(&mut f, SEED_003, "mixed-workload", ApplyOptions::default()).unwrap();
    let before = placements(&f, 0);
    let cfg = "version: v1\nmig-configs:\n  c:\n    - devices: [0]\n      mig-enabled: true\n      mig-devices: {\"3g.40gb\": 1, \"2g.20gb\": 2}\n    - devices: [1]\n      mig-enabled: true\n      mig-devices: {\"1g.10gb\": 2}\n";
    f.writes.clear();
    run(&mut f, cfg, "c", ApplyOptions::default()).unwrap();
    assert_eq!(placements(&f, 0), before);
    assert!(
        f.writes.iter().all(|w| w.starts_with("1:")),
        "{:?}",
        f.writes
    );
}

struct PodOn(u32);
impl InUse for PodOn {
    fn holders(&self, _: &GpuState, gi: &GpuInstance) -> Vec<Holder> {
        if gi.id == self.0 {
            vec![Holder::Pod {
                namespace: "default".into(),
                pod: "train".into(),
                container: "main".into(),
                resource: "nvidia.com/mig-3g.40gb".into(),
            }]
        } else {
            Vec::new()
        }
    }
}

#[test]
fn devices_in_use_are_kept_unless_drained() {
    let mut f = Fake::new(&[A100_80]);
    run(&mut f, SEED_003, "mixed-workload", ApplyOptions::default()).unwrap();
    let cfg = MigConfigFile::parse(SEED_003.as_bytes(), "f").unwrap();
    let entries = cfg.config("all-small").unwrap();
    let out = apply(&mut f, entries, &PodOn(2), ApplyOptions::default()).unwrap();
    let GpuStatus::Failed(why) = &out.gpus[0].status else {
        panic!("{out:?}")
    };
    assert!(
        why.contains("pod default/train")
            && why.contains("3g.40gb (GPU instance 2")
            && why.contains("delete the pod")
            && why.contains("--drain"),
        "{why}"
    );
    assert_eq!(placements(&f, 0).len(), 3, "nothing destroyed");
    // NVML's own IN_USE (a process) is honoured the same way.
    f.gpus[0].busy = vec![3];
    let out = apply(&mut f, entries, &NoHolders, ApplyOptions::default()).unwrap();
    let GpuStatus::Failed(why) = &out.gpus[0].status else {
        panic!("{out:?}")
    };
    assert!(why.contains("NVML_ERROR_IN_USE"), "{why}");
    f.gpus[0].busy.clear();
    let drain = ApplyOptions {
        drain: true,
        ..ApplyOptions::default()
    };
    apply(&mut f, entries, &PodOn(2), drain).unwrap();
    assert_eq!(placements(&f, 0).len(), 7);
}

#[test]
fn a_run_cut_short_converges_next_time() {
    let mut f = Fake::enabled(&[A100_80]);
    // A crash after creating a GPU instance, before its compute instance.
    f.create_gpu_instance(0, 9, Some(Placement { start: 4, size: 4 }))
        .unwrap();
    let out = run(&mut f, SEED_003, "mixed-workload", ApplyOptions::default()).unwrap();
    assert_eq!(out.gpus[0].status, GpuStatus::Changed);
    let cfg = MigConfigFile::parse(SEED_003.as_bytes(), "f").unwrap();
    let gpus = f.gpus().unwrap();
    assert!(
        assert_applied(&gpus, cfg.config("mixed-workload").unwrap(), false)
            .unwrap()
            .is_empty()
    );
}

#[test]
fn dry_run_writes_nothing_and_shows_the_plan() {
    let mut f = Fake::enabled(&[A100_80]);
    let out = run(
        &mut f,
        SEED_003,
        "mixed-workload",
        ApplyOptions {
            dry_run: true,
            ..ApplyOptions::default()
        },
    )
    .unwrap();
    assert!(f.writes.is_empty());
    let text = out.gpus[0].plans[0].to_string();
    assert!(
        text.contains("create GPU instance 3g.40gb (profile id 9) at placement 4:4"),
        "{text}"
    );
}

#[test]
fn create_and_destroy_single_instances_for_claims() {
    let mut f = Fake::enabled(&["NVIDIA A30"]);
    let d = create_instance(&mut f, 0, "2g.12gb", None).unwrap();
    assert_eq!((d.placement.start, d.gpu_instance), (2, 2));
    assert!(d.uuid.is_some());
    let e = create_instance(&mut f, 0, "2g.12gb", Some(2)).unwrap_err();
    assert!(e.to_string().contains("do not fit"), "{e}");
    destroy_instance(&mut f, 0, d.gpu_instance, &PodOn(d.gpu_instance), false).unwrap_err();
    destroy_instance(&mut f, 0, d.gpu_instance, &NoHolders, false).unwrap();
    assert!(f.gpus[0].state.instances.is_empty());
}
