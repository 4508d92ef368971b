use std::collections::HashMap;
use std::sync::Mutex;

use gpu_mps_daemon::inventory::ComputeModeError;

use super::*;

/// GPUs with a compute mode each; a GPU not listed refuses.
#[derive(Debug, Default)]
struct Gpus(Mutex<HashMap<String, ComputeMode>>);

impl ComputeModeSetter for Gpus {
    fn set_compute_mode(
        &self,
        uuid: &str,
        mode: ComputeMode,
    ) -> Result<ComputeMode, ComputeModeError> {
        let mut g = self.0.lock().unwrap();
        let cur = g
            .get_mut(uuid)
            .ok_or_else(|| ComputeModeError::Unavailable {
                uuid: uuid.into(),
                reason: "Not Supported".into(),
            })?;
        Ok(std::mem::replace(cur, mode))
    }
}

impl Gpus {
    fn mode(&self, uuid: &str) -> ComputeMode {
        self.0.lock().unwrap()[uuid]
    }
}

fn gpus(modes: &[(&str, ComputeMode)]) -> Gpus {
    Gpus(Mutex::new(
        modes.iter().map(|(u, m)| (u.to_string(), *m)).collect(),
    ))
}

#[test]
fn exclusive_process_while_the_daemon_runs_then_the_previous_mode() {
    let dir = tempfile::tempdir().unwrap();
    let g = gpus(&[
        ("GPU-a", ComputeMode::Prohibited),
        ("GPU-b", ComputeMode::Default),
    ]);
    let uuids = vec!["GPU-a".to_string(), "GPU-b".to_string()];
    set_exclusive(&g, dir.path(), &uuids);
    assert_eq!(g.mode("GPU-a"), ComputeMode::ExclusiveProcess);
    assert_eq!(g.mode("GPU-b"), ComputeMode::ExclusiveProcess);
    // A second start (a restarted daemon) must not record EXCLUSIVE_PROCESS as "previous".
    set_exclusive(&g, dir.path(), &uuids);
    restore(&g, dir.path());
    assert_eq!(g.mode("GPU-a"), ComputeMode::Prohibited);
    assert_eq!(g.mode("GPU-b"), ComputeMode::Default);
    assert!(!record_path(dir.path()).exists());
}

#[test]
fn a_gpu_that_refuses_is_left_alone_and_the_others_are_set() {
    let dir = tempfile::tempdir().unwrap();
    let g = gpus(&[("GPU-a", ComputeMode::Default)]);
    set_exclusive(&g, dir.path(), &["GPU-x".into(), "GPU-a".into()]);
    assert_eq!(g.mode("GPU-a"), ComputeMode::ExclusiveProcess);
    let rec = std::fs::read_to_string(record_path(dir.path())).unwrap();
    assert!(!rec.contains("GPU-x"), "{rec}");
    restore(&g, dir.path());
    assert_eq!(g.mode("GPU-a"), ComputeMode::Default);
}

#[test]
fn a_gpu_already_exclusive_process_stays_so() {
    let dir = tempfile::tempdir().unwrap();
    let g = gpus(&[("GPU-a", ComputeMode::ExclusiveProcess)]);
    set_exclusive(&g, dir.path(), &["GPU-a".into()]);
    g.0.lock()
        .unwrap()
        .insert("GPU-a".into(), ComputeMode::ExclusiveProcess);
    restore(&g, dir.path());
    assert_eq!(g.mode("GPU-a"), ComputeMode::ExclusiveProcess);
}

#[test]
fn the_ready_marker_names_the_pipe_dir_the_start_check_reads() {
    let dir = tempfile::tempdir().unwrap();
    let l = GpuLayout::new(dir.path(), "uid-1");
    std::fs::create_dir_all(&l.dir).unwrap();
    write_ready(&l, 42, &["GPU-a".into()], 25, &[Some(10240)]).unwrap();
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&l.ready).unwrap()).unwrap();
    // gpuhook_request's check: `<pipe dir>/../ready` whose pipeDirectory is the pipe dir.
    assert_eq!(l.ready, l.pipe.parent().unwrap().join("ready"));
    assert_eq!(v["pipeDirectory"], l.pipe.display().to_string());
    assert_eq!(v["activeThreadPercentage"], 25);
    remove_ready(&l);
    assert!(!l.ready.exists());
    remove_ready(&l);
}

#[test]
fn a_restart_window_is_closed_by_restore_whatever_the_admin_mode() {
    // Fenced (PROHIBITED) by a restart window when the claim is unprepared: the recorded mode
    // is set again, EXCLUSIVE_PROCESS included.
    for admin in [ComputeMode::Default, ComputeMode::ExclusiveProcess] {
        let dir = tempfile::tempdir().unwrap();
        let g = gpus(&[("GPU-a", admin)]);
        set_exclusive(&g, dir.path(), &["GPU-a".into()]);
        g.0.lock()
            .unwrap()
            .insert("GPU-a".into(), ComputeMode::Prohibited);
        restore(&g, dir.path());
        assert_eq!(g.mode("GPU-a"), admin);
    }
}
