#![allow(clippy::unwrap_used)]

use super::*;
use crate::labels::CLIENTS;

fn proc_entry(root: &Path, pid: u32, comm: &str) {
    let d = root.join(pid.to_string());
    std::fs::create_dir_all(&d).unwrap();
    std::fs::write(d.join("comm"), format!("{comm}\n")).unwrap();
}

fn host(dir: &Path) -> NodeHost {
    NodeHost {
        proc_root: dir.join("proc"),
        mps_root: dir.join("mps"),
        cdi_refresh: None,
        reboot: Argv {
            program: "/bin/false".into(),
            args: vec![],
            root: None,
        },
    }
}

#[test]
fn holders_are_the_clients_processes_and_mps_only_for_its_gpus() {
    let dir = tempfile::tempdir().unwrap();
    let h = host(dir.path());
    proc_entry(&h.proc_root, 10, "nvidia-device-p");
    proc_entry(&h.proc_root, 11, "bash");
    proc_entry(&h.proc_root, 12, "nvidia-cuda-mps");
    std::fs::create_dir_all(h.proc_root.join("self")).unwrap();
    let g0 = GpuRef {
        index: 0,
        uuid: "GPU-a".into(),
    };
    let found: Vec<(u32, &str)> = h
        .holders(CLIENTS, std::slice::from_ref(&g0))
        .iter()
        .map(|p| (p.pid, p.label))
        .collect();
    assert_eq!(found, [(10, "nvidia.com/gpu.deploy.device-plugin")]);
    // The MPS daemon serves GPU-a: now it holds it too.
    std::fs::create_dir_all(h.mps_root.join("GPU-a")).unwrap();
    let pids: Vec<u32> = h.holders(CLIENTS, &[g0]).iter().map(|p| p.pid).collect();
    assert_eq!(pids, [10, 12]);
}

#[test]
fn commands_run_with_a_clean_env_and_failures_carry_stderr() {
    let ok = Argv {
        program: "/bin/sh".into(),
        args: vec!["-c".into(), "test -z \"$HOME\"".into()],
        root: None,
    };
    ok.run("t").unwrap();
    let bad = Argv {
        program: "/bin/sh".into(),
        args: vec!["-c".into(), "echo boom >&2; exit 3".into()],
        root: None,
    };
    let e = bad.run("CDI spec refresh").unwrap_err().to_string();
    assert!(e.contains("CDI spec refresh") && e.contains("boom"), "{e}");
    let missing = Argv {
        program: "/nonexistent/gpuhook".into(),
        args: vec![],
        root: None,
    };
    assert!(missing
        .run("x")
        .unwrap_err()
        .to_string()
        .contains("/nonexistent/gpuhook"));
}

#[test]
fn a_chrooted_command_sees_the_host_root_as_slash() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("SKIP: chroot needs root");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    // A host root with a static shell and a marker only it has.
    let busybox = Path::new("/bin/busybox");
    if !busybox.is_file() {
        eprintln!("SKIP: no /bin/busybox (busybox-static)");
        return;
    }
    std::fs::create_dir_all(root.join("bin")).unwrap();
    std::fs::copy(busybox, root.join("bin/busybox")).unwrap();
    std::fs::write(root.join("host-marker"), "x").unwrap();
    let argv = |script: &str| Argv {
        program: "/bin/busybox".into(),
        args: vec!["sh".into(), "-c".into(), script.into()],
        root: Some(root.to_path_buf()),
    };
    argv("test -f /host-marker && test \"$(pwd)\" = /")
        .run("t")
        .unwrap();
    assert!(
        argv("test -f /etc/os-release").run("t").is_err(),
        "the container's / is not seen"
    );
}
