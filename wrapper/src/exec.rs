//! Finding the real OCI runtime and replacing this process with it.
//!
//! The wrapper is often installed where a runtime would be found (or even named `runc`), so the
//! lookup skips any candidate that is this very executable — compared by device and inode, which
//! sees through symlinks, hard links and relative PATH entries — or an exec loop would fork-bomb
//! containerd's shim.

use std::ffi::{OsStr, OsString};
use std::io;
use std::os::unix::fs::MetadataExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Variables never passed on to the runtime: they would load code into a root process.
pub const SCRUBBED_ENV: &[&str] = &["LD_PRELOAD", "LD_LIBRARY_PATH", "LD_AUDIT"];

/// The runtime to exec and its argv.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecPlan {
    /// Absolute path of the runtime.
    pub program: PathBuf,
    /// Full argv: `argv[0]` is `program`, the rest is the wrapper's original arguments.
    pub argv: Vec<OsString>,
}

impl ExecPlan {
    /// The plan for `program` with the arguments of `original` (whose `argv[0]` is replaced).
    pub fn new(program: PathBuf, original: &[OsString]) -> ExecPlan {
        let mut argv = vec![program.clone().into_os_string()];
        argv.extend(original.iter().skip(1).cloned());
        ExecPlan { program, argv }
    }

    /// The command, with the environment minus [`SCRUBBED_ENV`] (spawn it in tests).
    pub fn command(&self) -> Command {
        let mut cmd = Command::new(&self.program);
        cmd.arg0(&self.argv[0]).args(&self.argv[1..]);
        for var in SCRUBBED_ENV {
            cmd.env_remove(var);
        }
        cmd
    }

    /// Replaces this process with the runtime; returns only on failure.
    pub fn exec(&self) -> io::Error {
        self.command().exec()
    }
}

fn identity(path: &Path) -> Option<(u64, u64)> {
    std::fs::metadata(path).ok().map(|m| (m.dev(), m.ino()))
}

fn is_executable_file(path: &Path) -> bool {
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.mode() & 0o111 != 0)
}

/// Where a candidate was looked for, for the error message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lookup {
    /// Paths that exist but are this executable.
    pub skipped_self: Vec<PathBuf>,
}

/// The first candidate that exists and is not `self_exe`: a name containing `/` is used as a
/// path, a bare name is searched in every directory of `path_env` in order.
pub fn find_runtime(
    candidates: &[PathBuf],
    path_env: Option<&OsStr>,
    self_exe: &Path,
) -> Result<PathBuf, Lookup> {
    let me = identity(self_exe);
    let mut lookup = Lookup {
        skipped_self: Vec::new(),
    };
    let dirs: Vec<PathBuf> = path_env.map_or_else(Vec::new, |p| std::env::split_paths(p).collect());
    for cand in candidates {
        let paths: Vec<PathBuf> = if cand.as_os_str().as_encoded_bytes().contains(&b'/') {
            vec![cand.clone()]
        } else {
            dirs.iter()
                .filter(|d| d.is_absolute())
                .map(|d| d.join(cand))
                .collect()
        };
        for p in paths {
            if !is_executable_file(&p) {
                continue;
            }
            if me.is_some() && identity(&p) == me {
                lookup.skipped_self.push(p);
                continue;
            }
            return Ok(p);
        }
    }
    Err(lookup)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn script(dir: &Path, name: &str) -> PathBuf {
        let p = dir.join(name);
        std::fs::write(&p, "#!/bin/sh\nexit 0\n").unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
        p
    }

    #[test]
    fn first_candidate_on_path_wins_and_self_is_skipped() {
        let tmp = tempfile::tempdir().unwrap();
        let (a, b) = (tmp.path().join("a"), tmp.path().join("b"));
        std::fs::create_dir_all(&a).unwrap();
        std::fs::create_dir_all(&b).unwrap();
        let me = script(&a, "gpuhook-runtime");
        // `a/runc` is a symlink to ourselves: a misconfigured PATH.
        std::os::unix::fs::symlink(&me, a.join("runc")).unwrap();
        let real = script(&b, "runc");
        let crun = script(&a, "crun");
        let path = std::env::join_paths([&a, &b]).unwrap();
        let cands = [PathBuf::from("runc"), PathBuf::from("crun")];
        let found = find_runtime(&cands, Some(&path), &me).unwrap();
        assert_eq!(found, real);
        // Without a real runc, crun.
        std::fs::remove_file(&real).unwrap();
        assert_eq!(find_runtime(&cands, Some(&path), &me).unwrap(), crun);
        // Hard link to ourselves under another name is skipped too.
        std::fs::remove_file(&crun).unwrap();
        std::fs::hard_link(&me, a.join("crun")).unwrap();
        let err = find_runtime(&cands, Some(&path), &me).unwrap_err();
        assert_eq!(err.skipped_self, [a.join("runc"), a.join("crun")]);
    }

    #[test]
    fn absolute_candidates_and_non_executables() {
        let tmp = tempfile::tempdir().unwrap();
        let me = script(tmp.path(), "me");
        let plain = tmp.path().join("runc");
        std::fs::write(&plain, "not executable").unwrap();
        let abs = script(tmp.path(), "my-runc");
        let cands = [PathBuf::from("runc"), abs.clone()];
        let path = tmp.path().as_os_str().to_os_string();
        assert_eq!(find_runtime(&cands, Some(&path), &me).unwrap(), abs);
        // Relative PATH entries are ignored (they depend on the shim's working directory).
        assert!(find_runtime(&[PathBuf::from("my-runc")], Some(OsStr::new(".")), &me).is_err());
    }

    #[test]
    fn plan_replaces_argv0_and_keeps_the_rest() {
        let original: Vec<OsString> = [
            "/usr/local/bin/gpuhook-runtime",
            "--root",
            "/r",
            "start",
            "id",
        ]
        .iter()
        .map(OsString::from)
        .collect();
        let plan = ExecPlan::new("/usr/sbin/runc".into(), &original);
        assert_eq!(plan.argv[0], "/usr/sbin/runc");
        assert_eq!(plan.argv[1..], original[1..]);
    }
}
