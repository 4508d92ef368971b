//! cgroup v2: load a device program and put it in place of the runtime's.
//!
//! runc attaches its program with `BPF_F_ALLOW_MULTI`; with several programs attached the kernel
//! allows an access only if *all* allow it, so adding ours next to runc's would change nothing.
//! We therefore replace: with one existing multi program, `BPF_F_REPLACE` swaps it atomically;
//! with several, ours is attached first and the old ones detached afterwards (during that window
//! the effective rules are the old ones, never more); a non-multi attachment is replaced by
//! attaching with the same flags.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};

use super::{build_device_program, BpfInsn, DeviceController, DeviceRule};
use crate::error::{InjectError, Result};

const BPF_PROG_LOAD: libc::c_long = 5;
const BPF_PROG_ATTACH: libc::c_long = 8;
const BPF_PROG_DETACH: libc::c_long = 9;
const BPF_PROG_GET_FD_BY_ID: libc::c_long = 13;
const BPF_PROG_QUERY: libc::c_long = 16;
const BPF_PROG_TYPE_CGROUP_DEVICE: u32 = 15;
const BPF_CGROUP_DEVICE: u32 = 6;
const BPF_F_ALLOW_MULTI: u32 = 2;
const BPF_F_REPLACE: u32 = 4;
const MAX_PROGS: usize = 64;

#[repr(C)]
#[derive(Default)]
struct ProgLoadAttr {
    prog_type: u32,
    insn_cnt: u32,
    insns: u64,
    license: u64,
    log_level: u32,
    log_size: u32,
    log_buf: u64,
    kern_version: u32,
    prog_flags: u32,
    prog_name: [u8; 16],
    prog_ifindex: u32,
    expected_attach_type: u32,
}

#[repr(C)]
#[derive(Default)]
struct AttachAttr {
    target_fd: u32,
    attach_bpf_fd: u32,
    attach_type: u32,
    attach_flags: u32,
    replace_bpf_fd: u32,
}

#[repr(C)]
#[derive(Default)]
struct QueryAttr {
    target_fd: u32,
    attach_type: u32,
    query_flags: u32,
    attach_flags: u32,
    prog_ids: u64,
    prog_cnt: u32,
    _pad: u32,
}

#[repr(C)]
#[derive(Default)]
struct GetFdAttr {
    prog_id: u32,
    next_id: u32,
    open_flags: u32,
}

/// bpf(2) with an attr struct of type `T`.
fn bpf<T>(cmd: libc::c_long, attr: &mut T) -> io::Result<i64> {
    // SAFETY: `attr` is a live, repr(C) attribute struct matching `cmd`'s union member and the
    // size passed is exactly its size; the kernel zero-extends the rest of `union bpf_attr`.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            cmd,
            attr as *mut T,
            libc::c_uint::try_from(std::mem::size_of::<T>()).expect("bpf attrs are small"),
        )
    };
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(rc)
    }
}

fn owned(fd: i64) -> OwnedFd {
    // SAFETY: bpf returned a new descriptor owned by nobody else.
    unsafe { OwnedFd::from_raw_fd(i32::try_from(fd).expect("the kernel returns an int fd")) }
}

/// Load a device program; on failure the verifier log is part of the error.
pub(crate) fn load_program(insns: &[BpfInsn], path: &Path) -> Result<OwnedFd> {
    let license = CString::new("Apache-2.0").expect("static string");
    let mut log = vec![0u8; 64 * 1024];
    let mut name = [0u8; 16];
    name[..7].copy_from_slice(b"gpuhook");
    let mut attr = ProgLoadAttr {
        prog_type: BPF_PROG_TYPE_CGROUP_DEVICE,
        insn_cnt: u32::try_from(insns.len()).expect("a device program is far below 4G insns"),
        insns: insns.as_ptr() as u64,
        license: license.as_ptr() as u64,
        log_level: 1,
        log_size: u32::try_from(log.len()).expect("64 KiB"),
        log_buf: log.as_mut_ptr() as u64,
        prog_name: name,
        expected_attach_type: BPF_CGROUP_DEVICE,
        ..Default::default()
    };
    bpf(BPF_PROG_LOAD, &mut attr).map(owned).map_err(|source| {
        let end = log.iter().position(|b| *b == 0).unwrap_or(log.len());
        let text = String::from_utf8_lossy(&log[..end]).trim().to_string();
        InjectError::Bpf {
            op: "BPF_PROG_LOAD",
            path: path.to_path_buf(),
            log: if text.is_empty() {
                String::new()
            } else {
                format!("; verifier: {text}")
            },
            error: source,
        }
    })
}

/// Whether this kernel lets us load a cgroup device program (probe for tests and diagnostics).
pub fn bpf_device_programs_supported() -> Result<()> {
    load_program(&build_device_program(&[]), Path::new("(probe)")).map(drop)
}

/// A cgroup2 directory whose device access is governed by eBPF.
#[derive(Debug, Clone)]
pub struct V2Devices {
    pid: i32,
    dir: PathBuf,
}

impl V2Devices {
    /// `dir` is the cgroup2 directory; `pid` is for messages.
    pub fn new(pid: i32, dir: PathBuf) -> Self {
        V2Devices { pid, dir }
    }

    fn bpf_err(&self, op: &'static str, source: io::Error) -> InjectError {
        InjectError::Bpf {
            op,
            path: self.dir.clone(),
            log: String::new(),
            error: source,
        }
    }

    fn open_dir(&self) -> Result<OwnedFd> {
        std::fs::File::open(&self.dir)
            .map(OwnedFd::from)
            .map_err(|source| InjectError::Cgroup {
                pid: self.pid,
                reason: format!("open {}: {source}", self.dir.display()),
            })
    }

    /// Ids and attach flags of the device programs attached to this cgroup.
    pub fn attached_programs(&self) -> Result<(Vec<u32>, u32)> {
        let cg = self.open_dir()?;
        let mut ids = vec![0u32; MAX_PROGS];
        let mut q = QueryAttr {
            target_fd: cg.as_raw_fd().cast_unsigned(),
            attach_type: BPF_CGROUP_DEVICE,
            prog_ids: ids.as_mut_ptr() as u64,
            prog_cnt: u32::try_from(MAX_PROGS).expect("a small constant"),
            ..Default::default()
        };
        bpf(BPF_PROG_QUERY, &mut q).map_err(|e| self.bpf_err("BPF_PROG_QUERY", e))?;
        ids.truncate(usize::try_from(q.prog_cnt).unwrap_or(MAX_PROGS));
        Ok((ids, q.attach_flags))
    }

    /// Attach `prog` following the replacement policy in the module docs.
    fn replace_with(&self, prog: &OwnedFd) -> Result<()> {
        let cg = self.open_dir()?;
        let (ids, flags) = self.attached_programs()?;
        let old: Vec<OwnedFd> = ids
            .iter()
            .map(|id| {
                let mut a = GetFdAttr {
                    prog_id: *id,
                    ..Default::default()
                };
                bpf(BPF_PROG_GET_FD_BY_ID, &mut a)
                    .map(owned)
                    .map_err(|e| self.bpf_err("BPF_PROG_GET_FD_BY_ID", e))
            })
            .collect::<Result<_>>()?;
        let mut attach = AttachAttr {
            target_fd: cg.as_raw_fd().cast_unsigned(),
            attach_bpf_fd: prog.as_raw_fd().cast_unsigned(),
            attach_type: BPF_CGROUP_DEVICE,
            attach_flags: BPF_F_ALLOW_MULTI,
            replace_bpf_fd: 0,
        };
        if !old.is_empty() && flags & BPF_F_ALLOW_MULTI == 0 {
            // Single (non-multi) attachment: attaching again with the same flags replaces it.
            attach.attach_flags = flags;
            bpf(BPF_PROG_ATTACH, &mut attach).map_err(|e| self.bpf_err("BPF_PROG_ATTACH", e))?;
            return Ok(());
        }
        if old.len() == 1 {
            attach.attach_flags |= BPF_F_REPLACE;
            attach.replace_bpf_fd = old[0].as_raw_fd().cast_unsigned();
            bpf(BPF_PROG_ATTACH, &mut attach)
                .map_err(|e| self.bpf_err("BPF_PROG_ATTACH(REPLACE)", e))?;
            return Ok(());
        }
        bpf(BPF_PROG_ATTACH, &mut attach).map_err(|e| self.bpf_err("BPF_PROG_ATTACH", e))?;
        for fd in &old {
            let mut detach = AttachAttr {
                target_fd: cg.as_raw_fd().cast_unsigned(),
                attach_bpf_fd: fd.as_raw_fd().cast_unsigned(),
                attach_type: BPF_CGROUP_DEVICE,
                ..Default::default()
            };
            bpf(BPF_PROG_DETACH, &mut detach).map_err(|e| self.bpf_err("BPF_PROG_DETACH", e))?;
        }
        Ok(())
    }
}

impl DeviceController for V2Devices {
    fn apply(&self, base: &[DeviceRule], add: &[DeviceRule]) -> Result<()> {
        let rules: Vec<DeviceRule> = base.iter().chain(add).copied().collect();
        let prog = load_program(&build_device_program(&rules), &self.dir)?;
        self.replace_with(&prog)
    }
}

#[cfg(test)]
mod tests {
    //! The replacement branches runc's single program does not exercise: several multi programs,
    //! and a non-multi attachment. Needs root and cgroup2 + BPF; skips (saying so) otherwise.
    use super::*;
    use crate::cgroup::DeviceType;

    fn attach_raw(cg: &Path, rules: &[DeviceRule], flags: u32) -> u32 {
        let prog = load_program(&build_device_program(rules), cg).unwrap();
        let dir = std::fs::File::open(cg).unwrap();
        let mut a = AttachAttr {
            target_fd: dir.as_raw_fd().cast_unsigned(),
            attach_bpf_fd: prog.as_raw_fd().cast_unsigned(),
            attach_type: BPF_CGROUP_DEVICE,
            attach_flags: flags,
            replace_bpf_fd: 0,
        };
        bpf(BPF_PROG_ATTACH, &mut a).unwrap();
        V2Devices::new(0, cg.to_path_buf())
            .attached_programs()
            .unwrap()
            .1
    }

    #[test]
    fn several_multi_programs_and_single_attachments_are_replaced() {
        // SAFETY: geteuid has no preconditions.
        let root = unsafe { libc::geteuid() } == 0;
        let unified = Path::new("/sys/fs/cgroup/unified");
        if !root
            || !unified.join("cgroup.procs").exists()
            || bpf_device_programs_supported().is_err()
        {
            eprintln!("SKIP: needs root, cgroup2 at {} and BPF", unified.display());
            return;
        }
        let deny = DeviceRule::new(false, DeviceType::All, None, None, "rwm").unwrap();
        for (name, flags, count) in [("multi", BPF_F_ALLOW_MULTI, 2), ("single", 0, 1)] {
            let cg = unified.join(format!("gpuhook-inject-unit-{name}-{}", std::process::id()));
            std::fs::create_dir(&cg).unwrap();
            for _ in 0..count {
                assert_eq!(attach_raw(&cg, &[deny], flags), flags);
            }
            let ctl = V2Devices::new(0, cg.clone());
            assert_eq!(ctl.attached_programs().unwrap().0.len(), count);
            ctl.apply(&[deny], &[DeviceRule::allow_char(195, 0)])
                .unwrap();
            let (ids, got_flags) = ctl.attached_programs().unwrap();
            assert_eq!(ids.len(), 1, "{name}: exactly our program remains");
            assert_eq!(got_flags, flags, "{name}: attach flags preserved");
            std::fs::remove_dir(&cg).unwrap();
        }
    }
}
