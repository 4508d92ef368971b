//! Test support: fake driver roots with ELF stub libraries and a cache made by the real `ldconfig`.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// Assembled stub objects (64-bit, 32-bit), built once per test process.
fn objects() -> &'static (PathBuf, PathBuf) {
    static OBJS: OnceLock<(tempfile::TempDir, (PathBuf, PathBuf))> = OnceLock::new();
    &OBJS
        .get_or_init(|| {
            let dir = tempfile::tempdir().expect("tempdir");
            let src = dir.path().join("s.s");
            std::fs::write(&src, ".text\n.globl f\nf:\n ret\n").expect("write asm");
            let o64 = dir.path().join("s64.o");
            let o32 = dir.path().join("s32.o");
            run(Command::new("as").arg("--64").arg("-o").arg(&o64).arg(&src));
            run(Command::new("as").arg("--32").arg("-o").arg(&o32).arg(&src));
            (dir, (o64, o32))
        })
        .1
}

fn run(cmd: &mut Command) {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("spawn {cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// True when tests that need `ldconfig -r` (root, binutils) can run here.
pub fn can_ldconfig() -> bool {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    let tools = ["ldconfig", "as", "ld"].iter().all(|t| {
        std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())
            .chain([PathBuf::from("/sbin"), PathBuf::from("/usr/sbin")])
            .any(|d| d.join(t).is_file())
    });
    if !(root && tools) {
        eprintln!("SKIP: needs root, ldconfig, as and ld");
    }
    root && tools
}

/// A temporary driver root.
pub struct FakeRoot {
    pub dir: tempfile::TempDir,
    lib_dirs: Vec<String>,
}

impl FakeRoot {
    pub fn new() -> Self {
        FakeRoot {
            dir: tempfile::tempdir().expect("tempdir"),
            lib_dirs: Vec::new(),
        }
    }

    pub fn root(&self) -> &Path {
        self.dir.path()
    }

    pub fn path(&self, p: &str) -> PathBuf {
        self.root().join(p.trim_start_matches('/'))
    }

    pub fn write(&self, p: &str, content: &str) {
        let path = self.path(p);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, content).unwrap();
    }

    pub fn symlink(&self, target: &str, link: &str) {
        let path = self.path(link);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::os::unix::fs::symlink(target, path).unwrap();
    }

    /// Installs `<dir>/<file>` with SONAME `soname` (32-bit when `m32`), plus the dev link
    /// `<stem>.so -> soname` when `dev_link`.
    pub fn lib(&mut self, dir: &str, file: &str, soname: &str, m32: bool, dev_link: bool) {
        let (o64, o32) = objects();
        let full = self.path(dir);
        std::fs::create_dir_all(&full).unwrap();
        let mut cmd = Command::new("ld");
        if m32 {
            cmd.args(["-m", "elf_i386"]);
        }
        cmd.arg("-shared")
            .arg("-soname")
            .arg(soname)
            .arg("-o")
            .arg(full.join(file));
        cmd.arg(if m32 { o32 } else { o64 });
        run(&mut cmd);
        if dev_link {
            let stem = &soname[..soname.find(".so").unwrap() + 3];
            std::os::unix::fs::symlink(soname, full.join(stem)).unwrap();
        }
        if !self.lib_dirs.iter().any(|d| d == dir) {
            self.lib_dirs.push(dir.to_string());
        }
    }

    /// Writes `etc/ld.so.conf` and runs the real `ldconfig -r` (twice, so dev links to SONAME
    /// links made by the first run are cached too), with `-c format`.
    pub fn ldconfig(&self, format: &str) {
        self.write("/etc/ld.so.conf", &(self.lib_dirs.join("\n") + "\n"));
        for _ in 0..2 {
            run(Command::new("ldconfig")
                .arg("-r")
                .arg(self.root())
                .arg("-c")
                .arg(format));
        }
    }
}
