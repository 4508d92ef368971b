//! Build-script support shared by gpuhook's binaries: the unwinder is linked statically.
//!
//! Rust's std on `*-linux-gnu` links the unwinder (`_Unwind_*`) from `libgcc_s.so.1`, so every
//! start of every binary loads one more shared object, relocates it and runs its constructor,
//! which probes the CPU with a dozen `cpuid` instructions. Under a hypervisor each `cpuid` traps
//! (about 4 µs each on the benchmark VM): together ~0.1 ms of a ~2 ms `gpuhook cdi generate`
//! (`scripts/bench-cdi-generate.sh`), paid again by every prestart hook and wrapper start.
//! gcc's `libgcc_eh.a` is the same unwinder as a static archive (what `gcc -static-libgcc` links,
//! under the GCC runtime library exception).
//!
//! How: rustc asks the linker for `-lgcc_s`. A linker script named `libgcc_s.so` in a directory
//! searched before the compiler's own says `INPUT(-lgcc_eh)`, so the archive is linked instead.
//! Left as it was (dynamic `libgcc_s.so.1`) when the target is not `linux-gnu`, when linking
//! with `crt-static`, when the C compiler has no `libgcc_eh.a`, and under `cargo zigbuild`
//! (the release build), whose linker already replaces `-lgcc_s` with its own static libunwind.

use std::path::PathBuf;
use std::process::Command;

/// Makes the package's binaries, cdylibs and tests link the unwinder statically where the
/// toolchain allows it (see the module docs); prints a cargo warning when it does not.
pub fn link_unwinder_statically() {
    println!("cargo:rerun-if-env-changed=CC");
    let target = env("TARGET");
    let linker_var = format!(
        "CARGO_TARGET_{}_LINKER",
        target.to_uppercase().replace('-', "_")
    );
    println!("cargo:rerun-if-env-changed={linker_var}");
    let features = env("CARGO_CFG_TARGET_FEATURE");
    if env("CARGO_CFG_TARGET_OS") != "linux"
        || env("CARGO_CFG_TARGET_ENV") != "gnu"
        || features.split(',').any(|f| f == "crt-static")
        || env(&linker_var).contains("zig")
    {
        return;
    }
    let Some(archive) = libgcc_eh() else {
        println!("cargo:warning=no libgcc_eh.a: the binaries load libgcc_s.so.1 at start");
        return;
    };
    let dir = PathBuf::from(env("OUT_DIR")).join("static-unwinder");
    let script = format!(
        "/* gpuhook-build: {} */\nINPUT(-lgcc_eh)\n",
        archive.display()
    );
    let written = std::fs::create_dir_all(&dir)
        .and_then(|()| std::fs::write(dir.join("libgcc_s.so"), script));
    match written {
        Ok(()) => println!("cargo:rustc-link-search=native={}", dir.display()),
        Err(e) => println!("cargo:warning=cannot write {}: {e}", dir.display()),
    }
}

/// The C compiler's `libgcc_eh.a`, when it has one (`-print-file-name` echoes a bare name back
/// when it finds nothing).
fn libgcc_eh() -> Option<PathBuf> {
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".to_owned());
    let out = Command::new(cc)
        .arg("-print-file-name=libgcc_eh.a")
        .output()
        .ok()?;
    let path = PathBuf::from(String::from_utf8(out.stdout).ok()?.trim());
    (out.status.success() && path.is_absolute() && path.is_file()).then_some(path)
}

fn env(name: &str) -> String {
    std::env::var(name).unwrap_or_default()
}
