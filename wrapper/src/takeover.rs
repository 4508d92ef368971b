//! Hooks the wrapper does itself: work a hook of the edited spec would do inside `runc create`,
//! started by the wrapper before runc and finished while runc creates the container.
//!
//! A createContainer hook is a process the runtime forks from the container's init and waits
//! for, on the critical path of every start. When the caller ([`HookTakeover`]) knows a hook well
//! enough to do its work from the host side, it removes the hook from the spec and starts the
//! work; the wrapper then runs the runtime as a *child* instead of exec'ing it, so that it can
//! wait for both and report the outcome as one `create`:
//! - runtime failed: the work is stopped, the runtime's exit status is the wrapper's;
//! - work failed after the runtime created the container: the container is deleted
//!   (`<runtime> <global options> delete --force <id>`) and `create` fails with the work's error,
//!   as it would have when the hook failed;
//! - both succeeded: exit 0.
//!
//! Only `create` is taken over: `run` starts the container process at once, before the work
//! could be known to be done. The runtime child gets PDEATHSIG=SIGKILL, so killing the wrapper
//! (containerd's shim does on timeout) still kills the runtime, as when it was exec'd.

use std::ffi::OsString;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::Path;

use serde_json::Value;

use crate::argv::RuncArgs;
use crate::exec::ExecPlan;
use gpuhook_inject::InjectError;

/// Work started before the runtime; [`EarlyWork::wait`] says whether it succeeded. Dropping it
/// without waiting must stop it.
pub trait EarlyWork: Send + std::fmt::Debug {
    fn wait(self: Box<Self>) -> Result<(), InjectError>;
}

/// Decides whether hooks of the edited spec are done by the wrapper.
pub trait HookTakeover {
    /// Called for `create` with the spec about to be written: may start the work of some hooks,
    /// remove them from `spec` and return the running work. `None`: the spec is left as it was
    /// (the hooks run in the runtime as usual); an implementation that fails to start the work
    /// must leave the spec unchanged and return `None`.
    fn take_over(
        &self,
        bundle: &Path,
        container: Option<&str>,
        spec: &mut Value,
    ) -> Option<Box<dyn EarlyWork>>;
}

/// The outcome of [`run_beside`]: the exit status the wrapper must end with, and the error to
/// report when the work failed.
#[derive(Debug)]
pub struct Outcome {
    pub exit_code: i32,
    pub error: Option<String>,
}

/// argv of `<runtime> <global options> delete --force <id>` for the container of `args`.
fn delete_argv(plan: &ExecPlan, args: &RuncArgs) -> Option<Vec<OsString>> {
    let id = args.container_id.as_ref()?;
    let end = args.command_index?;
    let mut argv: Vec<OsString> = plan.argv[..end.min(plan.argv.len())].to_vec();
    argv.extend(["delete".into(), "--force".into(), id.into()]);
    Some(argv)
}

/// Runs the runtime as a child while `work` goes on, then settles both (see the module docs).
pub fn run_beside(
    plan: &ExecPlan,
    args: &RuncArgs,
    work: Box<dyn EarlyWork>,
) -> std::io::Result<Outcome> {
    let mut cmd = plan.command();
    // SAFETY: prctl(PR_SET_PDEATHSIG) is async-signal-safe and touches only the child.
    unsafe {
        cmd.pre_exec(|| {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let status = match cmd.spawn() {
        Ok(mut child) => child.wait()?,
        Err(e) => {
            drop(work);
            return Err(e);
        }
    };
    let runtime_code = status
        .code()
        .unwrap_or_else(|| 128 + status.signal().unwrap_or(0));
    if runtime_code != 0 {
        drop(work);
        return Ok(Outcome {
            exit_code: runtime_code,
            error: None,
        });
    }
    let Err(error) = work.wait() else {
        return Ok(Outcome {
            exit_code: 0,
            error: None,
        });
    };
    let cleanup = match delete_argv(plan, args) {
        Some(argv) => {
            let delete = ExecPlan {
                program: plan.program.clone(),
                argv,
            };
            match delete.command().output() {
                Ok(out) if out.status.success() => "the container was deleted".to_string(),
                Ok(out) => format!(
                    "deleting the container failed too: {}",
                    String::from_utf8_lossy(&out.stderr).trim()
                ),
                Err(e) => format!("deleting the container failed too: {e}"),
            }
        }
        None => "no container id to delete".to_string(),
    };
    Ok(Outcome {
        exit_code: crate::error::EXIT_FAILURE,
        error: Some(format!("container setup failed: {error}; {cleanup}")),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delete_keeps_the_global_options_and_names_the_container() {
        let argv: Vec<OsString> = ["/usr/sbin/runc", "--root", "/r", "--log=/l", "create"]
            .iter()
            .chain(&["--bundle", "/b", "c1"])
            .map(OsString::from)
            .collect();
        let args = crate::argv::parse(&argv).unwrap();
        let plan = ExecPlan::new("/usr/sbin/runc".into(), &argv);
        let del = delete_argv(&plan, &args).unwrap();
        let want: Vec<OsString> = [
            "/usr/sbin/runc",
            "--root",
            "/r",
            "--log=/l",
            "delete",
            "--force",
            "c1",
        ]
        .iter()
        .map(OsString::from)
        .collect();
        assert_eq!(del, want);
    }

    /// Work that ends with `result` and records whether it was waited for or dropped.
    #[derive(Debug)]
    struct FakeWork {
        result: Result<(), InjectError>,
        log: std::sync::Arc<std::sync::Mutex<Vec<&'static str>>>,
        waited: bool,
    }

    impl EarlyWork for FakeWork {
        fn wait(mut self: Box<Self>) -> Result<(), InjectError> {
            self.waited = true;
            self.log.lock().unwrap().push("waited");
            std::mem::replace(&mut self.result, Ok(()))
        }
    }

    impl Drop for FakeWork {
        fn drop(&mut self) {
            if !self.waited {
                self.log.lock().unwrap().push("dropped");
            }
        }
    }

    /// A fake runtime that records its argv in `calls` and fails `create` with `create_code`.
    fn fake_runtime(dir: &Path, create_code: i32) -> std::path::PathBuf {
        let calls = dir.join("calls");
        let path = dir.join("runc");
        let script = format!(
            "#!/bin/sh\necho \"$*\" >> {}\ncase \"$*\" in *create*) exit {create_code};; esac\nexit 0\n",
            calls.display()
        );
        gpuhook_fs::testing::write_executable(&path, &script).unwrap();
        path
    }

    fn run(
        create_code: i32,
        work: Result<(), InjectError>,
    ) -> (Outcome, Vec<&'static str>, String) {
        let tmp = tempfile::tempdir().unwrap();
        let rt = fake_runtime(tmp.path(), create_code);
        let argv: Vec<OsString> = [
            "gpuhook-runtime",
            "--root",
            "/r",
            "create",
            "--bundle",
            "/b",
            "c1",
        ]
        .iter()
        .map(OsString::from)
        .collect();
        let args = crate::argv::parse(&argv).unwrap();
        let plan = ExecPlan::new(rt, &argv);
        let log = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let work = Box::new(FakeWork {
            result: work,
            log: log.clone(),
            waited: false,
        });
        let outcome = run_beside(&plan, &args, work).unwrap();
        let calls = std::fs::read_to_string(tmp.path().join("calls")).unwrap();
        let log = log.lock().unwrap().clone();
        (outcome, log, calls)
    }

    #[test]
    fn both_succeed() {
        let (out, log, calls) = run(0, Ok(()));
        assert_eq!((out.exit_code, out.error), (0, None));
        assert_eq!(log, ["waited"]);
        assert_eq!(calls, "--root /r create --bundle /b c1\n");
    }

    #[test]
    fn a_failed_runtime_stops_the_work_and_its_status_is_ours() {
        let (out, log, calls) = run(3, Ok(()));
        assert_eq!((out.exit_code, out.error), (3, None));
        assert_eq!(log, ["dropped"]);
        assert_eq!(calls.lines().count(), 1, "{calls}");
    }

    #[test]
    fn failed_work_deletes_the_created_container() {
        let (out, log, calls) = run(
            0,
            Err(InjectError::Ldconfig {
                binary: "/sbin/ldconfig".into(),
                rootfs: "/r".into(),
                reason: "exited with 1".into(),
            }),
        );
        assert_eq!(out.exit_code, crate::error::EXIT_FAILURE);
        assert_eq!(
            out.error.as_deref(),
            Some(
                "container setup failed: ldconfig /sbin/ldconfig for rootfs /r: exited with 1; \
                 the container was deleted"
            )
        );
        assert_eq!(log, ["waited"]);
        assert_eq!(
            calls,
            "--root /r create --bundle /b c1\n--root /r delete --force c1\n"
        );
    }
}
