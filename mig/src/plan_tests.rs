use super::*;
use crate::apply::MigBackend;
use crate::select::select;
use crate::spec::MigConfigFile;
use crate::test_support::Fake;

fn desired(yaml_devices: &str) -> Vec<crate::spec::MigConfigSpec> {
    let text = format!("version: v1\nmig-configs:\n  c:\n    - devices: all\n      mig-enabled: true\n      mig-devices: {yaml_devices}\n");
    MigConfigFile::parse(text.as_bytes(), "f").unwrap().configs["c"].clone()
}

#[test]
fn matching_instances_are_kept_and_only_the_rest_is_created() {
    let mut f = Fake::enabled(&["NVIDIA A100-SXM4-80GB"]);
    let gi = f
        .create_gpu_instance(0, 9, Some(Placement { start: 4, size: 4 }))
        .unwrap();
    f.create_compute_instance(0, gi, 2).unwrap();
    let gpus = f.gpus().unwrap();
    let d = &select(&desired("{\"3g.40gb\": 1, \"2g.20gb\": 2}"), &gpus).unwrap()[0];
    let p = plan(&gpus[0], d).unwrap();
    assert_eq!(p.keep, [gi]);
    assert!(p.destroy.is_empty());
    let starts: Vec<u32> = p.create.iter().map(|n| n.placement.start).collect();
    assert_eq!(starts, [2, 0]);
}

#[test]
fn kept_instances_that_block_the_layout_are_recreated() {
    let mut f = Fake::enabled(&["NVIDIA A100-SXM4-80GB"]);
    // A 3g at slice 0 blocks 4g.40gb (only at 0): everything is recreated.
    let gi = f
        .create_gpu_instance(0, 9, Some(Placement { start: 0, size: 4 }))
        .unwrap();
    f.create_compute_instance(0, gi, 2).unwrap();
    let gpus = f.gpus().unwrap();
    let d = &select(&desired("{\"4g.40gb\": 1, \"3g.40gb\": 1}"), &gpus).unwrap()[0];
    let p = plan(&gpus[0], d).unwrap();
    assert!(p.keep.is_empty());
    assert_eq!(p.destroy.len(), 1);
    let got: Vec<(u32, u32)> = p
        .create
        .iter()
        .map(|n| (n.profile_id, n.placement.start))
        .collect();
    assert_eq!(got, [(5, 0), (9, 4)]);
}

#[test]
fn layouts_that_cannot_fit_are_refused_with_the_gpu_named() {
    let f = Fake::enabled(&["NVIDIA A100-SXM4-80GB"]);
    let gpus = f.gpus.iter().map(|g| g.state.clone()).collect::<Vec<_>>();
    let d = &select(&desired("{\"3g.40gb\": 2, \"1g.10gb\": 1}"), &gpus).unwrap()[0];
    let e = plan(&gpus[0], d).unwrap_err().to_string();
    assert!(e.contains("GPU 0") && e.contains("do not fit"), "{e}");
    // Shared GPU instances: 1c.2g.20gb x2 is one 2g.20gb holding two compute instances.
    let d = &select(&desired("{\"1c.2g.20gb\": 2}"), &gpus).unwrap()[0];
    let p = plan(&gpus[0], d).unwrap();
    assert_eq!(p.create.len(), 1);
    assert_eq!(p.create[0].cis, [1, 1]);
}
