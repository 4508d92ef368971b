//! Fakes of the three seams for the unit tests: an in-memory Node that records every PATCH and
//! Event, a layout with scripted previews and applies, and a host with scripted client processes.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::host::{Host, HostError, Proc};
use crate::labels::{Changes, GpuClient, Labels, STATE_LABEL};
use crate::layout::{GpuRef, Layout, LayoutError, Preview};
use crate::node::{NodeApi, NodeApiError, NodeMeta};
use crate::reconcile::{Reconciler, Settings};

/// The fake Node and what was done to it.
#[derive(Debug, Default)]
pub struct NodeState {
    pub meta: NodeMeta,
    /// Every PATCH: (labels, annotations).
    pub patches: Vec<(Changes, Changes)>,
    /// Every Event: (warning, reason, message).
    pub events: Vec<(bool, String, String)>,
    /// After `ok_before_failing` more PATCHes succeed, the next `fail_patches` fail.
    pub ok_before_failing: usize,
    pub fail_patches: usize,
}

#[derive(Debug, Clone, Default)]
pub struct FakeNode(pub Arc<Mutex<NodeState>>);

fn apply_changes(map: &mut Labels, changes: &Changes) {
    for (k, v) in changes {
        match v {
            Some(v) => map.insert(k.clone(), v.clone()),
            None => map.remove(k),
        };
    }
}

impl FakeNode {
    pub fn with_labels(labels: &[(&str, &str)]) -> FakeNode {
        let n = FakeNode::default();
        n.0.lock().unwrap().meta.labels = labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        n
    }

    pub fn label(&self, k: &str) -> Option<String> {
        self.0.lock().unwrap().meta.labels.get(k).cloned()
    }

    pub fn annotation(&self, k: &str) -> Option<String> {
        self.0.lock().unwrap().meta.annotations.get(k).cloned()
    }

    pub fn set_label(&self, k: &str, v: Option<&str>) {
        let mut s = self.0.lock().unwrap();
        apply_changes(
            &mut s.meta.labels,
            &Changes::from([(k.to_string(), v.map(str::to_string))]),
        );
    }

    /// The values `nvidia.com/mig.config.state` was set to, in order.
    pub fn states(&self) -> Vec<String> {
        self.0
            .lock()
            .unwrap()
            .patches
            .iter()
            .filter_map(|(l, _)| l.get(STATE_LABEL).cloned().flatten())
            .collect()
    }

    pub fn patches(&self) -> Vec<(Changes, Changes)> {
        self.0.lock().unwrap().patches.clone()
    }

    pub fn events(&self) -> Vec<(bool, String, String)> {
        self.0.lock().unwrap().events.clone()
    }
}

impl NodeApi for FakeNode {
    fn read(&self) -> Result<NodeMeta, NodeApiError> {
        Ok(self.0.lock().unwrap().meta.clone())
    }

    fn patch(&self, labels: &Changes, annotations: &Changes) -> Result<(), NodeApiError> {
        let mut s = self.0.lock().unwrap();
        if s.ok_before_failing > 0 {
            s.ok_before_failing -= 1;
        } else if s.fail_patches > 0 {
            s.fail_patches -= 1;
            return Err(NodeApiError::Shape {
                node: "n".into(),
                what: "injected PATCH failure".into(),
            });
        }
        s.patches.push((labels.clone(), annotations.clone()));
        apply_changes(&mut s.meta.labels, labels);
        apply_changes(&mut s.meta.annotations, annotations);
        Ok(())
    }

    fn event(&self, warning: bool, reason: &str, message: &str) -> Result<(), NodeApiError> {
        let mut s = self.0.lock().unwrap();
        s.events.push((warning, reason.into(), message.into()));
        Ok(())
    }
}

/// Scripted layout: per config name, a preview and an apply result.
#[derive(Default)]
pub struct LayoutState {
    pub preview: Option<Result<Preview, String>>,
    pub apply: Option<Result<Vec<GpuRef>, String>>,
    /// Config names applied, in order.
    pub applied: Vec<String>,
    /// Runs inside `apply` (e.g. a relabel during the apply).
    pub during_apply: Option<Box<dyn FnMut() + Send>>,
}

impl std::fmt::Debug for LayoutState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LayoutState")
            .field("applied", &self.applied)
            .finish_non_exhaustive()
    }
}

#[derive(Debug, Clone, Default)]
pub struct FakeLayout(pub Arc<Mutex<LayoutState>>);

pub fn gpu(index: u32) -> GpuRef {
    GpuRef {
        index,
        uuid: format!("GPU-{index}"),
    }
}

impl FakeLayout {
    /// Previews a change of GPU 0, applies it cleanly.
    pub fn changing() -> FakeLayout {
        let l = FakeLayout::default();
        {
            let mut s = l.0.lock().unwrap();
            s.preview = Some(Ok(Preview {
                changes: vec![gpu(0)],
                pending_reset: vec![],
            }));
            s.apply = Some(Ok(vec![]));
        }
        l
    }

    pub fn applied(&self) -> Vec<String> {
        self.0.lock().unwrap().applied.clone()
    }
}

impl Layout for FakeLayout {
    fn preview(&mut self, _name: &str) -> Result<Preview, LayoutError> {
        let s = self.0.lock().unwrap();
        s.preview
            .clone()
            .unwrap_or(Ok(Preview::default()))
            .map_err(LayoutError)
    }

    fn apply(&mut self, name: &str) -> Result<Vec<GpuRef>, LayoutError> {
        let hook = self.0.lock().unwrap().during_apply.take();
        if let Some(mut h) = hook {
            h();
        }
        let mut s = self.0.lock().unwrap();
        s.applied.push(name.to_string());
        s.apply.clone().unwrap_or(Ok(vec![])).map_err(LayoutError)
    }
}

/// Scripted host: the client processes and how many polls they survive (`None`: forever).
#[derive(Debug, Default)]
pub struct HostState {
    pub procs: Vec<(Proc, Option<usize>)>,
    pub polls: usize,
    pub cdi_refreshes: usize,
    pub cdi_fails: bool,
    pub reboots: usize,
}

#[derive(Debug, Clone, Default)]
pub struct FakeHost(pub Arc<Mutex<HostState>>);

impl FakeHost {
    pub fn with_proc(label: &'static str, comm: &str, lives: Option<usize>) -> FakeHost {
        let h = FakeHost::default();
        h.0.lock().unwrap().procs.push((
            Proc {
                label,
                pid: 100,
                comm: comm.into(),
            },
            lives,
        ));
        h
    }
}

impl Host for FakeHost {
    fn holders(&self, clients: &[GpuClient], _gpus: &[GpuRef]) -> Vec<Proc> {
        let mut s = self.0.lock().unwrap();
        s.polls += 1;
        let polls = s.polls;
        s.procs
            .iter()
            .filter(|(p, lives)| {
                clients.iter().any(|c| c.label == p.label) && lives.is_none_or(|n| polls <= n)
            })
            .map(|(p, _)| p.clone())
            .collect()
    }

    fn refresh_cdi(&self) -> Result<(), HostError> {
        let mut s = self.0.lock().unwrap();
        s.cdi_refreshes += 1;
        if s.cdi_fails {
            return Err(HostError("gpuhook cdi generate exited with 1".into()));
        }
        Ok(())
    }

    fn reboot(&self) -> Result<(), HostError> {
        self.0.lock().unwrap().reboots += 1;
        Ok(())
    }
}

/// A reconciler over the fakes with short timeouts.
pub fn reconciler(node: &FakeNode, layout: &FakeLayout, host: &FakeHost) -> Reconciler {
    Reconciler {
        api: Box::new(node.clone()),
        layout: Box::new(layout.clone()),
        host: Box::new(host.clone()),
        settings: Settings {
            with_reboot: false,
            client_timeout: Duration::from_millis(50),
            client_poll: Duration::from_millis(1),
            stop: Arc::default(),
        },
    }
}
