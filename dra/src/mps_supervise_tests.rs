use gpu_mps_daemon::layout::GpuLayout;

use super::*;

fn want() -> ClaimMps {
    ClaimMps {
        uuids: vec!["GPU-a".into(), "GPU-b".into()],
        active_thread_percentage: 25,
        pinned_limits_mib: vec![Some(10240), None],
        shared: false,
    }
}

#[test]
fn a_restart_gets_the_recorded_limits_else_the_ready_markers() {
    let dir = tempfile::tempdir().unwrap();
    let l = GpuLayout::new(dir.path(), "uid-1");
    std::fs::create_dir_all(&l.dir).unwrap();
    assert_eq!(recorded_want(&l), None, "nothing recorded: not supervised");
    // A daemon of a plugin version without the record: its marker has the limits.
    let w = want();
    mps_node::write_ready(&l, 42, &w.uuids, 25, &w.pinned_limits_mib).unwrap();
    assert_eq!(recorded_want(&l), Some(w.clone()));
    // The record wins over the marker (which a shared ceiling or a window may change).
    let mut recorded = w.clone();
    recorded.active_thread_percentage = 40;
    record_want(&l, &recorded);
    assert_eq!(recorded_want(&l), Some(recorded));
}

#[test]
fn only_a_live_process_with_the_recorded_start_time_is_adopted() {
    let dir = tempfile::tempdir().unwrap();
    let l = GpuLayout::new(dir.path(), "uid-1");
    std::fs::create_dir_all(&l.dir).unwrap();
    assert!(matches!(found(&l), Proc::Dead), "no record");
    let record = gpu_mps_daemon::daemon_proc::record_path(&l);
    // A live process that is not an MPS control daemon (this test) is not adopted.
    let me = Identity::of(i32::try_from(std::process::id()).unwrap()).unwrap();
    std::fs::write(&record, me.to_record()).unwrap();
    assert!(matches!(found(&l), Proc::Dead));
    // An MPS control process (argv[0]) with the recorded start time is adopted; the same pid
    // with another start time (a reused pid) is not, nor is it once gone.
    use std::os::unix::process::CommandExt;
    let mut child = std::process::Command::new("sleep")
        .arg0("nvidia-cuda-mps-control")
        .arg("30")
        .spawn()
        .unwrap();
    let id = Identity::of(i32::try_from(child.id()).unwrap()).unwrap();
    std::fs::write(&record, id.to_record()).unwrap();
    assert!(matches!(found(&l), Proc::Adopted(a) if a == id));
    let other = Identity {
        pid: id.pid,
        start_time: id.start_time + 1,
    };
    std::fs::write(&record, other.to_record()).unwrap();
    assert!(matches!(found(&l), Proc::Dead));
    std::fs::write(&record, id.to_record()).unwrap();
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(matches!(found(&l), Proc::Dead));
}
