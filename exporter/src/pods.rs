//! Per-pod usage of shared GPUs: each process NVML lists on a device belongs to a container
//! (its cgroup, read in `sample.rs`), and the CRI runtime names the container's pod (the
//! kubelet's labels, `gpu_mps_daemon::cri`). A device's figure is then split among its pods so
//! that the pod series of a device sum to the device series ([`split`]).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::PathBuf;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use gpu_mps_daemon::cri::{self, PodRef};

use crate::collect::Collector;

/// Container id → its pod.
pub type Names = Arc<RwLock<HashMap<String, PodRef>>>;

/// `(namespace, pod, container)`: a pod's container, ordered for output.
pub type PodKey = (String, String, String);

/// How often the task looks for unnamed containers.
const PASS: Duration = Duration::from_secs(2);
/// How long after a call that did not name every container it is asked again.
const RETRY_AFTER: Duration = Duration::from_secs(10);

/// The key of a pod reference.
pub fn key(p: &PodRef) -> PodKey {
    (p.namespace.clone(), p.pod.clone(), p.container.clone())
}

/// Splits a device figure among its pods' measured parts so that the shares sum to `device`:
/// each pod keeps its measured part, scaled down evenly when the parts add up to more than the
/// device (samples of a slightly different window); the rest is the `None` share (memory or time
/// of no known pod: host processes, contexts NVML does not list, reserved memory).
pub fn split(device: f64, parts: &BTreeMap<PodKey, f64>) -> Vec<(Option<PodKey>, f64)> {
    let sum: f64 = parts.values().sum();
    let scale = if sum > device && sum > 0.0 {
        device / sum
    } else {
        1.0
    };
    let mut out: Vec<(Option<PodKey>, f64)> = parts
        .iter()
        .map(|(k, v)| (Some(k.clone()), v * scale))
        .collect();
    let attributed: f64 = out.iter().map(|(_, v)| v).sum();
    out.push((None, (device - attributed).max(0.0)));
    out
}

/// The container ids of every process in the latest samples.
fn present(c: &Collector) -> BTreeSet<String> {
    (0..c.gpus.len())
        .filter_map(|i| c.slot(i).sample)
        .flat_map(|s| {
            s.procs
                .iter()
                .flatten()
                .filter_map(|p| p.container.clone())
                .collect::<Vec<_>>()
        })
        .collect()
}

/// Keeps `names` current from the CRI socket: asks `ListContainers` when a container without a
/// name appears (bounded by `cri::CALL_TIMEOUT`), forgets containers without processes.
pub async fn run(socket: PathBuf, collector: Arc<Collector>, names: Names) {
    let mut asked: Option<(Instant, BTreeSet<String>)> = None;
    loop {
        let ids = present(&collector);
        let unnamed: BTreeSet<String> = {
            let mut n = names.write().unwrap_or_else(|p| p.into_inner());
            n.retain(|id, _| ids.contains(id));
            ids.iter()
                .filter(|id| !n.contains_key(*id))
                .cloned()
                .collect()
        };
        let due = !unnamed.is_empty()
            && asked
                .as_ref()
                .is_none_or(|(t, before)| t.elapsed() >= RETRY_AFTER || !unnamed.is_subset(before));
        if due {
            match cri::list_running(&socket).await {
                Ok(list) => {
                    let mut n = names.write().unwrap_or_else(|p| p.into_inner());
                    for c in list.iter().filter(|c| unnamed.contains(&c.id)) {
                        if let Some(p) = c.pod_ref() {
                            n.insert(c.id.clone(), p);
                        }
                    }
                }
                Err(e) => tracing::debug!(error = %e, "cannot name GPU processes' pods"),
            }
            asked = Some((Instant::now(), unnamed));
        }
        tokio::time::sleep(PASS).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn k(pod: &str) -> PodKey {
        ("ns".into(), pod.into(), "c".into())
    }

    #[test]
    fn shares_sum_to_the_device_figure() {
        let parts: BTreeMap<PodKey, f64> = [(k("a"), 30.0), (k("b"), 10.0)].into_iter().collect();
        let s = split(50.0, &parts);
        assert_eq!(
            s,
            vec![(Some(k("a")), 30.0), (Some(k("b")), 10.0), (None, 10.0)]
        );
        // Parts over the device figure (another sampling window) are scaled down to it.
        let s = split(20.0, &parts);
        assert_eq!(
            s,
            vec![(Some(k("a")), 15.0), (Some(k("b")), 5.0), (None, 0.0)]
        );
        let total: f64 = s.iter().map(|(_, v)| v).sum();
        assert!((total - 20.0).abs() < 1e-9);
        assert_eq!(split(7.0, &BTreeMap::new()), vec![(None, 7.0)]);
    }
}
