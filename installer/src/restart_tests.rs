use super::*;

/// The pid `signal` would send SIGHUP to is the one of the process listening on the socket
/// (here this test process), as NVIDIA's `SignalContainerd` reads it from the credentials.
#[test]
fn peer_pid_is_the_listening_process() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("containerd.sock");
    let _listener = std::os::unix::net::UnixListener::bind(&socket).unwrap();
    let pid = peer_pid(&socket).unwrap();
    assert_eq!(u32::try_from(pid.as_raw()).unwrap(), std::process::id());
}

#[test]
fn peer_pid_without_a_listener_names_the_socket() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("containerd.sock");
    let err = format!("{:#}", peer_pid(&socket).unwrap_err());
    assert!(err.contains(&socket.display().to_string()), "{err}");
}

/// A process running a binary named `dockerd` (a copy of `sleep`), with its pid in a pidfile.
fn fake_dockerd(dir: &Path) -> (std::process::Child, PathBuf) {
    let bin = dir.join("dockerd");
    let sleep = ["/bin/sleep", "/usr/bin/sleep"]
        .into_iter()
        .find(|p| Path::new(p).exists())
        .unwrap();
    std::fs::copy(sleep, &bin).unwrap();
    let child = Command::new(&bin).arg("30").spawn().unwrap();
    let pidfile = dir.join("docker.pid");
    std::fs::write(&pidfile, format!("{}\n", child.id())).unwrap();
    (child, pidfile)
}

fn signal_args(dir: &Path, pidfile: &Path) -> RestartArgs {
    RestartArgs {
        restart_mode: RestartMode::Signal,
        containerd_socket: dir.join("containerd.sock"),
        docker_pidfile: pidfile.to_path_buf(),
        crio_socket: dir.join("crio.sock"),
    }
}

/// signal + docker: SIGHUP to the pid of dockerd's pidfile (dockerd reloads its runtimes on
/// SIGHUP; this stand-in has no handler, so the signal ends it, which proves who got it).
#[test]
fn docker_signal_sighups_the_pid_of_the_pidfile() {
    use std::os::unix::process::ExitStatusExt;
    let dir = tempfile::tempdir().unwrap();
    let (mut child, pidfile) = fake_dockerd(dir.path());
    // The child must have exec'd the `dockerd` copy before its name can be checked.
    let comm = format!("/proc/{}/comm", child.id());
    for _ in 0..100 {
        if std::fs::read_to_string(&comm).is_ok_and(|c| c.trim_end() == "dockerd") {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    restart(&signal_args(dir.path(), &pidfile), Runtime::Docker, "/bin").unwrap();
    let status = child.wait().unwrap();
    assert_eq!(status.signal(), Some(nix::libc::SIGHUP), "{status}");
}

/// A pidfile naming a process that is not dockerd (here this test, standing for a reused pid)
/// is refused and nothing is signalled; a pidfile without a pid is named in the error.
#[test]
fn a_stale_or_bad_docker_pidfile_signals_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let pidfile = dir.path().join("docker.pid");
    std::fs::write(&pidfile, format!("{}\n", std::process::id())).unwrap();
    let args = signal_args(dir.path(), &pidfile);
    let err = format!("{:#}", restart(&args, Runtime::Docker, "/bin").unwrap_err());
    assert!(
        err.contains("not dockerd") && err.contains("--restart-mode"),
        "{err}"
    );
    std::fs::write(&pidfile, "garbage").unwrap();
    let err = format!("{:#}", restart(&args, Runtime::Docker, "/bin").unwrap_err());
    assert!(err.contains(pidfile.to_str().unwrap()), "{err}");
    std::fs::remove_file(&pidfile).unwrap();
    let err = format!("{:#}", restart(&args, Runtime::Docker, "/bin").unwrap_err());
    assert!(
        err.contains("cannot signal dockerd") && err.contains("systemctl restart docker"),
        "{err}"
    );
}

/// signal + crio: the process serving CRI-O's socket, checked by name: a socket served by
/// something else (this test) is refused.
#[test]
fn crio_signal_refuses_a_socket_served_by_another_process() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("crio.sock");
    let _listener = std::os::unix::net::UnixListener::bind(&socket).unwrap();
    let args = signal_args(dir.path(), &dir.path().join("docker.pid"));
    let err = format!("{:#}", restart(&args, Runtime::Crio, "/bin").unwrap_err());
    assert!(err.contains("not crio"), "{err}");
}

/// none: the command for each engine (NVIDIA's installer restarts these units).
#[test]
fn none_names_each_engines_command() {
    assert_eq!(
        Runtime::Docker.restart_command(),
        "systemctl restart docker"
    );
    assert_eq!(Runtime::Crio.restart_command(), "systemctl restart crio");
    assert_eq!(
        Runtime::Containerd.restart_command(),
        "systemctl restart containerd"
    );
}
