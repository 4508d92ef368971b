use super::*;

#[test]
fn backoff_doubles_and_is_capped() {
    let max = Duration::from_secs(2);
    assert_eq!(backoff(1, max), Duration::from_millis(100));
    assert_eq!(backoff(2, max), Duration::from_millis(200));
    assert_eq!(backoff(4, max), Duration::from_millis(800));
    assert_eq!(backoff(10, max), max);
    assert_eq!(backoff(u32::MAX, max), max);
}

#[tokio::test]
async fn a_replaced_supervisor_hands_the_admin_mode_over_and_leaves_the_gpu_prohibited() {
    use crate::inventory::{ComputeModeError, ComputeModeSetter};
    #[derive(Debug, Default)]
    struct Nvml(std::sync::Mutex<Option<ComputeMode>>);
    impl ComputeModeSetter for Nvml {
        fn set_compute_mode(
            &self,
            _uuid: &str,
            mode: ComputeMode,
        ) -> Result<ComputeMode, ComputeModeError> {
            let mut m = self.0.lock().unwrap_or_else(|p| p.into_inner());
            let prev = m.unwrap_or(ComputeMode::ExclusiveProcess);
            *m = Some(mode);
            Ok(prev)
        }
    }
    let to = Duration::from_secs(30);
    let nvml = Arc::new(Nvml::default());
    let ho = Handover::default();
    // The admin's mode is EXCLUSIVE_PROCESS; the old supervisor is ready.
    let mut old = ComputeFence::new(nvml.clone(), "GPU-a").with_admin(ho.take("GPU-a"));
    old.prohibit(to).await;
    old.allow_mps(to).await.unwrap();
    ho.before_quit(&mut old, Stop::Replace, to).await;
    ho.finish(&mut old, "GPU-a", Stop::Replace, to).await;
    let mode = || *nvml.0.lock().unwrap_or_else(|p| p.into_inner());
    assert_eq!(
        mode(),
        Some(ComputeMode::Prohibited),
        "fenced between the two"
    );
    // The successor reads PROHIBITED, but knows the admin's mode from the hand-over.
    let mut new = ComputeFence::new(nvml.clone(), "GPU-a").with_admin(ho.take("GPU-a"));
    new.prohibit(to).await;
    new.allow_mps(to).await.unwrap();
    ho.finish(&mut new, "GPU-a", Stop::Remove, to).await;
    assert_eq!(
        mode(),
        Some(ComputeMode::ExclusiveProcess),
        "the admin's mode"
    );
    assert_eq!(ho.take("GPU-a"), None);
}
