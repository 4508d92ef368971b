//! Driver libraries: ELF stubs with the real file names and SONAMEs, the mock NVML, soname and
//! development links, `/etc/ld.so.conf` and an `ld.so.cache` built by the host's real `ldconfig`.
//!
//! Libraries of drivers before R470 that modern drivers no longer ship
//! (`libnvidia-fatbinaryloader`, `libnvidia-compiler`, `libnvidia-ifr`) are left out, like on a
//! real 570/580 install.

use std::path::{Path, PathBuf};
use std::process::Command;

use super::fsutil::{copy_atomic, mkdirs, symlink_atomic, under, write_atomic};
use super::SimError;
use crate::profile::{NodeProfile, PROFILE_FILE_NAME};
use crate::{elf, elf32};

pub use crate::library_table::{installs, LibrarySpec, Soname, EXTERNAL, LIBRARIES};
use Soname::{Major, Version};

/// A library file as installed for one profile.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InstalledLibrary {
    /// Directory inside the root: `lib_dir`, or `features.lib32_dir` for an i386 build.
    pub dir: String,
    /// `libcuda.so.570.158.01`
    pub file_name: String,
    /// `libcuda.so.1`
    pub soname: String,
    pub capability: &'static str,
    /// `libcuda.so` when the profile lists it in `features.dev_links`.
    pub dev_link: Option<String>,
    /// An i386 (ELF32) build.
    pub i386: bool,
    symbols: &'static [&'static str],
}

impl InstalledLibrary {
    /// Path of the file inside the root.
    pub fn path(&self) -> String {
        format!("{}/{}", self.dir.trim_end_matches('/'), self.file_name)
    }
}

/// The libraries a profile installs: the x86-64 set, the i386 set in `features.lib32_dir`, and
/// the EGL platform libraries of `features.gbm` / `features.xorg`.
pub fn libraries(p: &NodeProfile) -> Vec<InstalledLibrary> {
    let mut dirs = vec![(p.lib_dir.clone(), false)];
    dirs.extend(p.features.lib32_dir.clone().map(|d| (d, true)));
    let mut out = Vec::new();
    for (dir, i386) in dirs {
        for l in LIBRARIES
            .iter()
            .filter(|l| installs(p, l) && (!i386 || l.lib32))
        {
            let file_name = format!("{}.{}", l.stem, p.driver_version);
            let soname = match l.soname {
                Major(m) => format!("{}.{m}", l.stem),
                Version => file_name.clone(),
            };
            out.push(InstalledLibrary {
                dir: dir.clone(),
                dev_link: p
                    .features
                    .dev_links
                    .iter()
                    .any(|d| d == l.stem)
                    .then(|| l.stem.to_string()),
                file_name,
                soname,
                capability: l.capability,
                i386,
                symbols: l.symbols,
            });
        }
    }
    for e in EXTERNAL.iter().filter(|e| match e.feature {
        "gbm" => p.features.gbm,
        _ => p.features.xorg,
    }) {
        out.push(InstalledLibrary {
            dir: p.lib_dir.clone(),
            file_name: e.file_name.to_string(),
            soname: e.soname.to_string(),
            capability: "graphics",
            dev_link: None,
            i386: false,
            symbols: e.symbols,
        });
    }
    out
}

/// Relative target and path inside the root of the GBM backend link the driver installs:
/// `<lib_dir>/gbm/nvidia-drm_gbm.so -> ../libnvidia-allocator.so.1`.
pub fn gbm_link(p: &NodeProfile) -> Option<(&'static str, String)> {
    p.features.gbm.then(|| {
        (
            "../libnvidia-allocator.so.1",
            format!("{}/gbm/nvidia-drm_gbm.so", p.lib_dir.trim_end_matches('/')),
        )
    })
}

/// Installs every library of the profile; returns their paths inside the root.
pub fn install(root: &Path, p: &NodeProfile, mock_nvml: &Path) -> Result<Vec<String>, SimError> {
    if !mock_nvml.is_file() {
        return Err(SimError::MockNvmlMissing {
            path: mock_nvml.to_path_buf(),
        });
    }
    let mut installed = Vec::new();
    for l in libraries(p) {
        let dir = under(root, &l.dir);
        mkdirs(&dir)?;
        let path = dir.join(&l.file_name);
        if l.soname == "libnvidia-ml.so.1" && !l.i386 {
            copy_atomic(mock_nvml, &path, 0o755)?;
            write_atomic(&dir.join(PROFILE_FILE_NAME), p.to_toml().as_bytes(), 0o644)?;
        } else if l.i386 {
            write_atomic(
                &path,
                &elf32::shared_object_i386(&l.soname, l.symbols),
                0o755,
            )?;
        } else {
            write_atomic(&path, &elf::shared_object(&l.soname, l.symbols), 0o755)?;
        }
        if l.soname != l.file_name {
            symlink_atomic(&l.file_name, &dir.join(&l.soname))?;
        }
        if let Some(link) = &l.dev_link {
            symlink_atomic(&l.soname, &dir.join(link))?;
        }
        installed.push(l.path());
    }
    if let Some((target, link)) = gbm_link(p) {
        let link = under(root, &link);
        if let Some(parent) = link.parent() {
            mkdirs(parent)?;
        }
        symlink_atomic(target, &link)?;
    }
    Ok(installed)
}

/// Writes `/etc/ld.so.conf` (including `ld.so.conf.d/*.conf`) and a drop-in listing the lib dir.
pub fn write_ld_so_conf(root: &Path, p: &NodeProfile) -> Result<(), SimError> {
    write_atomic(
        &under(root, "/etc/ld.so.conf"),
        b"include /etc/ld.so.conf.d/*.conf\n",
        0o644,
    )?;
    let mut conf = format!(
        "# NVIDIA driver libraries (gpuhook-sim profile {})\n{}\n",
        p.name, p.lib_dir
    );
    if let Some(lib32) = &p.features.lib32_dir {
        conf.push_str(lib32);
        conf.push('\n');
    }
    write_atomic(
        &under(root, "/etc/ld.so.conf.d/00-nvidia-driver.conf"),
        conf.as_bytes(),
        0o644,
    )
}

/// The host's real ldconfig: Debian's `/sbin/ldconfig` is a shell wrapper of `ldconfig.real`.
pub fn find_ldconfig() -> Option<PathBuf> {
    [
        "/sbin/ldconfig.real",
        "/usr/sbin/ldconfig.real",
        "/sbin/ldconfig",
        "/usr/sbin/ldconfig",
    ]
    .iter()
    .map(PathBuf::from)
    .find(|p| p.is_file())
}

/// Runs `ldconfig -r <root>` so that `<root>/etc/ld.so.cache` lists the driver libraries.
pub fn run_ldconfig(root: &Path, ldconfig: Option<&Path>) -> Result<PathBuf, SimError> {
    let ldconfig = match ldconfig {
        Some(p) => p.to_path_buf(),
        None => find_ldconfig().ok_or(SimError::LdconfigNotFound)?,
    };
    // ldconfig keeps an aux cache under the root; give it its directory. `-i` ignores what is in
    // it: the cache is keyed by inode and ctime (seconds), and rebuilding a root within the same
    // second recycles inodes, so a stale entry would give a library another library's SONAME.
    mkdirs(&under(root, "/var/cache/ldconfig"))?;
    let out = Command::new(&ldconfig)
        .arg("-i")
        .arg("-r")
        .arg(root)
        .env_clear()
        .output()
        .map_err(|error| SimError::Io {
            op: "run",
            path: ldconfig.clone(),
            error,
        })?;
    if !out.status.success() {
        return Err(SimError::Ldconfig {
            command: format!("{} -i -r {}", ldconfig.display(), root.display()),
            detail: format!(
                "{}: {}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            ),
        });
    }
    let cache = under(root, "/etc/ld.so.cache");
    if !cache.is_file() {
        return Err(SimError::Ldconfig {
            command: format!("{} -i -r {}", ldconfig.display(), root.display()),
            detail: format!("it succeeded but wrote no {}", cache.display()),
        });
    }
    Ok(cache)
}

#[cfg(test)]
#[path = "libraries_tests.rs"]
mod tests;
