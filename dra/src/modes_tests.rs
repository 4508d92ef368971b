//! MIG mode switches against an in-memory GPU: NVIDIA's rules (`nvlib.go`: enable before the
//! first MIG device, `maybeDisableMigMode` after the last, only without a reset) and ours (never
//! with MIG devices present, never a GPU the plugin did not switch on, a pending switch refused).
#![allow(clippy::unwrap_used)]

use gpuhook_mig::{DeviceId, GpuInstance, MigError, MigMode, Placement};

use super::*;

/// One GPU; `reset` makes NVML leave a mode change pending (as on Ampere).
struct Fake {
    gpu: GpuState,
    reset: bool,
    sets: Vec<bool>,
}

impl Fake {
    fn new(on: bool) -> Fake {
        Fake {
            gpu: GpuState {
                index: 0,
                uuid: "GPU-0a".into(),
                model: "NVIDIA H100 80GB HBM3".into(),
                device_id: DeviceId::from_nvml(0x233010de, None),
                mig: MigMode::Capable {
                    current: on,
                    pending: on,
                },
                profiles: Vec::new(),
                compute_slices: 7,
                instances: Vec::new(),
            },
            reset: false,
            sets: Vec::new(),
        }
    }

    fn on(&self) -> bool {
        self.gpu.mig.enabled()
    }

    fn add_instance(&mut self) {
        self.gpu.instances.push(GpuInstance {
            id: 3,
            profile_id: 19,
            placement: Placement { start: 6, size: 1 },
            cis: Vec::new(),
        });
    }
}

impl MigBackend for Fake {
    fn gpus(&mut self) -> Result<Vec<GpuState>, MigError> {
        Ok(vec![self.gpu.clone()])
    }
    fn gpu(&mut self, _: u32) -> Result<GpuState, MigError> {
        Ok(self.gpu.clone())
    }
    fn set_mig_mode(&mut self, _: u32, on: bool) -> Result<bool, MigError> {
        self.sets.push(on);
        let current = self.on();
        let pending = self.reset && on != current;
        self.gpu.mig = MigMode::Capable {
            current: if pending { current } else { on },
            pending: on,
        };
        Ok(pending)
    }
    fn create_gpu_instance(
        &mut self,
        _: u32,
        _: u32,
        _: Option<Placement>,
    ) -> Result<u32, MigError> {
        unreachable!()
    }
    fn create_compute_instance(&mut self, _: u32, _: u32, _: u32) -> Result<u32, MigError> {
        unreachable!()
    }
    fn destroy_compute_instance(&mut self, _: u32, _: u32, _: u32) -> Result<(), MigError> {
        unreachable!()
    }
    fn destroy_gpu_instance(&mut self, _: u32, _: u32) -> Result<(), MigError> {
        unreachable!()
    }
}

fn slot(toggles: bool) -> Slot {
    Slot {
        gpu_index: 0,
        counter_set: "gpu-0-counter-set".into(),
        memory_slices: 0..8,
        compute_slices: 7,
        engines: None,
        mig: None,
        taken: None,
        toggles,
        offered: true,
    }
}

#[test]
fn switched_on_for_a_placement_and_off_after_the_last_device() {
    let dir = tempfile::tempdir().unwrap();
    let mut b = Fake::new(false);
    let g = b.gpu.clone();
    switch_on(&mut b, &g, &slot(true), Some(dir.path())).unwrap();
    assert!(b.on());
    assert!(dir.path().join("GPU-0a").exists());
    // A MIG device still there (anyone's): MIG mode stays on.
    b.add_instance();
    maybe_off(&mut b, 0, Some(dir.path()));
    assert!(b.on());
    b.gpu.instances.clear();
    maybe_off(&mut b, 0, Some(dir.path()));
    assert!(!b.on());
    assert!(!dir.path().join("GPU-0a").exists());
    assert_eq!(b.sets, vec![true, false]);
}

#[test]
fn a_gpu_the_plugin_did_not_switch_on_is_left_on() {
    let dir = tempfile::tempdir().unwrap();
    let mut b = Fake::new(true);
    maybe_off(&mut b, 0, Some(dir.path()));
    maybe_off(&mut b, 0, None);
    assert!(b.on());
    assert!(b.sets.is_empty());
}

#[test]
fn a_switch_that_needs_a_reset_is_set_back_and_refused() {
    let dir = tempfile::tempdir().unwrap();
    let mut b = Fake::new(false);
    b.reset = true;
    let g = b.gpu.clone();
    let e = switch_on(&mut b, &g, &slot(true), Some(dir.path())).unwrap_err();
    assert!(
        e.contains("needs a GPU reset") && e.contains("set back"),
        "{e}"
    );
    assert_eq!(b.sets, vec![true, false]);
    assert!(!b.gpu.mig.pending_change() && !b.on());
    assert!(!dir.path().join("GPU-0a").exists());
}

#[test]
fn a_pending_change_or_a_gpu_that_needs_a_reset_is_refused_untouched() {
    let mut b = Fake::new(false);
    b.gpu.mig = MigMode::Capable {
        current: false,
        pending: true,
    };
    let g = b.gpu.clone();
    let e = switch_on(&mut b, &g, &slot(true), None).unwrap_err();
    assert!(e.contains("pending a GPU reset"), "{e}");
    let e = full_gpu(&mut b, &slot(true), None).unwrap_err();
    assert!(e.contains("pending a GPU reset"), "{e}");
    let mut b = Fake::new(false);
    let g = b.gpu.clone();
    let e = switch_on(&mut b, &g, &slot(false), None).unwrap_err();
    assert!(e.contains("without a reset"), "{e}");
    let mut a100 = Fake::new(true);
    let e = full_gpu(&mut a100, &slot(false), None).unwrap_err();
    assert!(e.contains("cannot leave without a reset"), "{e}");
    assert!(b.sets.is_empty() && a100.sets.is_empty());
}

#[test]
fn the_full_gpu_switches_mig_off_only_without_mig_devices() {
    let mut b = Fake::new(true);
    b.add_instance();
    let e = full_gpu(&mut b, &slot(true), None).unwrap_err();
    assert!(
        e.contains("1 MIG device(s)") && e.contains("GPU instance 3"),
        "{e}"
    );
    assert!(b.on() && b.sets.is_empty());
    b.gpu.instances.clear();
    full_gpu(&mut b, &slot(true), None).unwrap();
    assert!(!b.on());
    // Already off: nothing asked of NVML.
    full_gpu(&mut b, &slot(true), None).unwrap();
    assert_eq!(b.sets, vec![false]);
}
