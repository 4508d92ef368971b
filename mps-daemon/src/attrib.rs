//! `--cri-socket`: names the Kubernetes pod, namespace and container of each MPS client's
//! container, as DCGM exporter labels its metrics (`pod`, `namespace`, `container`).
//!
//! The cgroup gives a container id; the CRI runtime (containerd, CRI-O) knows the kubelet's labels
//! of that id. A task of its own asks the runtime (`ListContainers`, bounded by
//! [`cri::CALL_TIMEOUT`]) only when a client's container id is not yet named, so a slow or dead
//! runtime delays names, never the supervisors, the status file or `/metrics`.
//!
//! Cache: a container id's pod never changes, so a name is kept while the id has clients and
//! dropped with its last client. An id the runtime does not list (a podman container, or one the
//! runtime has not reported yet) is asked again after [`RETRY_AFTER`].

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use tokio::sync::watch;

use crate::cri::{self, Container, PodRef};
use crate::status::Board;

/// How often the task looks for unnamed container ids.
pub const PASS_INTERVAL: Duration = Duration::from_secs(5);
/// How long an id the runtime did not know (or a failed call) waits before it is asked again.
pub const RETRY_AFTER: Duration = Duration::from_secs(30);

/// Names known and ids asked for in vain.
#[derive(Debug, Default)]
pub struct Cache {
    known: BTreeMap<String, PodRef>,
    /// Ids not named at the last call, with the time of that call.
    unknown: BTreeMap<String, Instant>,
}

impl Cache {
    /// Forgets ids without clients; true when an id in `present` should be asked for now.
    pub fn prune(&mut self, present: &BTreeSet<String>, now: Instant) -> bool {
        self.known.retain(|id, _| present.contains(id));
        self.unknown.retain(|id, _| present.contains(id));
        present.iter().any(|id| {
            !self.known.contains_key(id)
                && self
                    .unknown
                    .get(id)
                    .is_none_or(|t| now.saturating_duration_since(*t) >= RETRY_AFTER)
        })
    }

    /// Takes the names of `present` ids from a `ListContainers` answer (`None`: the call failed).
    pub fn absorb(
        &mut self,
        present: &BTreeSet<String>,
        listed: Option<&[Container]>,
        now: Instant,
    ) {
        if let Some(list) = listed {
            for c in list.iter().filter(|c| present.contains(&c.id)) {
                if let Some(p) = c.pod_ref() {
                    self.known.insert(c.id.clone(), p);
                }
            }
        }
        for id in present.iter().filter(|id| !self.known.contains_key(*id)) {
            self.unknown.insert(id.clone(), now);
        }
    }

    pub fn known(&self) -> &BTreeMap<String, PodRef> {
        &self.known
    }
}

/// Container ids of all clients on the board.
fn present(board: &Board) -> BTreeSet<String> {
    board
        .snapshot()
        .gpus
        .iter()
        .flat_map(|g| g.usage.clients.iter())
        .filter_map(|c| c.container.clone())
        .collect()
}

/// One pass: asks the runtime when needed and publishes the names that changed.
pub async fn pass(board: &Board, socket: &std::path::Path, cache: &mut Cache) {
    let ids = present(board);
    let before = cache.known().clone();
    if cache.prune(&ids, Instant::now()) {
        match cri::list_running(socket).await {
            Ok(list) => cache.absorb(&ids, Some(&list), Instant::now()),
            Err(e) => {
                tracing::warn!(error = %e, "cannot name the pods of MPS clients");
                cache.absorb(&ids, None, Instant::now());
            }
        }
    }
    if *cache.known() != before {
        board.set_pods(cache.known().clone());
    }
}

/// Names the board's container ids through the CRI socket until `stop` turns true.
pub async fn run(board: Board, socket: PathBuf, mut stop: watch::Receiver<bool>) {
    let mut cache = Cache::default();
    let mut tick = tokio::time::interval(PASS_INTERVAL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => pass(&board, &socket, &mut cache).await,
            r = stop.changed() => if r.is_err() || *stop.borrow() { return },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kube(id: &str, pod: &str) -> Container {
        Container {
            id: id.into(),
            metadata: None,
            labels: [
                (cri::POD_NAME_LABEL, pod),
                (cri::POD_NAMESPACE_LABEL, "ns"),
                (cri::CONTAINER_NAME_LABEL, "c"),
            ]
            .iter()
            .map(|(k, v)| ((*k).to_string(), (*v).to_string()))
            .collect(),
        }
    }

    fn ids(list: &[&str]) -> BTreeSet<String> {
        list.iter().map(|s| (*s).to_string()).collect()
    }

    #[test]
    fn named_ids_are_not_asked_again_and_unknown_ones_after_the_retry_delay() {
        let t0 = Instant::now();
        let mut c = Cache::default();
        let present = ids(&["a", "podman"]);
        assert!(c.prune(&present, t0));
        c.absorb(&present, Some(&[kube("a", "p"), kube("other", "q")]), t0);
        assert_eq!(c.known().keys().collect::<Vec<_>>(), ["a"]);
        assert!(!c.prune(&present, t0 + RETRY_AFTER / 2));
        assert!(c.prune(&present, t0 + RETRY_AFTER));
        // A failed call keeps the names and delays the unknown ids again.
        c.absorb(&present, None, t0 + RETRY_AFTER);
        assert_eq!(c.known().len(), 1);
        assert!(!c.prune(&present, t0 + RETRY_AFTER + RETRY_AFTER / 2));
    }

    #[test]
    fn ids_without_clients_are_forgotten_and_a_new_id_is_asked_at_once() {
        let t0 = Instant::now();
        let mut c = Cache::default();
        c.absorb(&ids(&["a"]), Some(&[kube("a", "p")]), t0);
        assert!(c.prune(&ids(&["b"]), t0));
        assert!(c.known().is_empty());
    }

    #[test]
    fn a_container_without_kubelet_labels_has_no_pod() {
        let mut k = kube("a", "p");
        k.labels.remove(cri::POD_NAMESPACE_LABEL);
        assert_eq!(k.pod_ref(), None);
        // The container name falls back to the CRI metadata name.
        let mut k = kube("a", "p");
        k.labels.remove(cri::CONTAINER_NAME_LABEL);
        k.metadata = Some(cri::ContainerMetadata { name: "m".into() });
        assert_eq!(k.pod_ref().map(|p| p.container), Some("m".to_string()));
    }
}
