// Unit tests: a failed unwrap is the test failure.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::*;
use std::sync::Mutex;

const TO: Duration = Duration::from_secs(30);

/// A GPU's compute mode as NVML keeps it, with every successful set recorded and the next
/// calls made to fail on demand.
#[derive(Debug)]
struct FakeNvml {
    mode: Mutex<ComputeMode>,
    sets: Mutex<Vec<ComputeMode>>,
    fail: Mutex<Option<&'static str>>,
}

impl FakeNvml {
    fn new(mode: ComputeMode) -> Arc<Self> {
        Arc::new(FakeNvml {
            mode: Mutex::new(mode),
            sets: Mutex::default(),
            fail: Mutex::default(),
        })
    }
    fn mode(&self) -> ComputeMode {
        *self.mode.lock().unwrap()
    }
    fn sets(&self) -> Vec<ComputeMode> {
        self.sets.lock().unwrap().clone()
    }
    fn fail(&self, why: Option<&'static str>) {
        *self.fail.lock().unwrap() = why;
    }
}

impl ComputeModeSetter for FakeNvml {
    fn set_compute_mode(
        &self,
        uuid: &str,
        mode: ComputeMode,
    ) -> Result<ComputeMode, ComputeModeError> {
        if let Some(why) = *self.fail.lock().unwrap() {
            return Err(ComputeModeError::Nvml(gpuhook_node::NodeError::Nvml {
                path: "libnvidia-ml.so.1".into(),
                call: "nvmlDeviceSetComputeMode",
                target: Some(uuid.to_string()),
                code: 4,
                message: why.to_string(),
            }));
        }
        let mut m = self.mode.lock().unwrap();
        let prev = *m;
        *m = mode;
        self.sets.lock().unwrap().push(mode);
        Ok(prev)
    }
}

fn fence(nvml: &Arc<FakeNvml>) -> ComputeFence {
    ComputeFence::new(nvml.clone(), "GPU-a")
}

#[tokio::test]
async fn prohibited_from_crash_to_read_back_then_exclusive_then_admin_mode() {
    let nvml = FakeNvml::new(ComputeMode::Default);
    let mut f = fence(&nvml);
    // First start: no context until the limits are read back.
    assert_eq!(f.prohibit(TO).await, None);
    assert_eq!(nvml.mode(), ComputeMode::Prohibited);
    f.allow_mps(TO).await.unwrap();
    assert_eq!(nvml.mode(), ComputeMode::ExclusiveProcess);
    // Crash: prohibited at once; the bring-up's own prohibit does not call NVML again.
    assert_eq!(f.prohibit(TO).await, None);
    assert_eq!(f.prohibit(TO).await, None);
    assert_eq!(nvml.mode(), ComputeMode::Prohibited);
    f.allow_mps(TO).await.unwrap();
    f.restore(TO).await;
    use ComputeMode::*;
    assert_eq!(
        nvml.sets(),
        vec![
            Prohibited,
            ExclusiveProcess,
            Prohibited,
            ExclusiveProcess,
            Default
        ]
    );
}

#[tokio::test]
async fn a_stop_in_the_restart_window_restores_the_admin_mode_even_when_it_was_exclusive() {
    let nvml = FakeNvml::new(ComputeMode::ExclusiveProcess);
    let mut f = fence(&nvml);
    f.prohibit(TO).await;
    f.allow_mps(TO).await.unwrap();
    f.prohibit(TO).await;
    assert_eq!(nvml.mode(), ComputeMode::Prohibited);
    f.restore(TO).await;
    assert_eq!(
        nvml.mode(),
        ComputeMode::ExclusiveProcess,
        "never left PROHIBITED"
    );
}

#[tokio::test]
async fn a_failed_prohibit_is_reported_not_fatal_and_retried() {
    let nvml = FakeNvml::new(ComputeMode::Default);
    let mut f = fence(&nvml);
    nvml.fail(Some("NVML_ERROR_NO_PERMISSION"));
    let err = f.prohibit(TO).await.unwrap();
    assert!(
        err.contains("PROHIBITED") && err.contains("NVML_ERROR_NO_PERMISSION"),
        "{err}"
    );
    nvml.fail(None);
    assert_eq!(f.prohibit(TO).await, None, "tried again");
    assert_eq!(nvml.mode(), ComputeMode::Prohibited);
}

#[tokio::test]
async fn exclusive_failing_while_prohibited_keeps_the_gpu_not_ready() {
    let nvml = FakeNvml::new(ComputeMode::Default);
    let mut f = fence(&nvml);
    f.prohibit(TO).await;
    nvml.fail(Some("NVML_ERROR_UNKNOWN"));
    let err = f.allow_mps(TO).await.unwrap_err();
    assert!(err.contains("stays PROHIBITED"), "{err}");
    nvml.fail(None);
    f.restore(TO).await;
    assert_eq!(nvml.mode(), ComputeMode::Default);
}

#[tokio::test]
async fn without_nvml_nothing_is_set_and_nothing_fails() {
    let none = Arc::new(crate::inventory::NoComputeMode {
        reason: "no NVML".into(),
    });
    let mut f = ComputeFence::new(none, "GPU-a");
    assert_eq!(f.prohibit(TO).await, None);
    f.allow_mps(TO).await.unwrap();
    f.restore(TO).await;
    assert_eq!(f.current(), None);
}

#[tokio::test]
async fn prohibited_left_by_a_killed_instance_is_restored_as_default() {
    let nvml = FakeNvml::new(ComputeMode::Prohibited);
    let mut f = fence(&nvml);
    f.prohibit(TO).await;
    f.allow_mps(TO).await.unwrap();
    f.restore(TO).await;
    assert_eq!(nvml.mode(), ComputeMode::Default);
}
