use super::*;
use std::ffi::CString;

fn write_stub(
    dir: &std::path::Path,
    file: &str,
    soname: &str,
    syms: &[&str],
) -> std::path::PathBuf {
    let path = dir.join(file);
    std::fs::write(&path, shared_object(soname, syms)).unwrap();
    path
}

#[test]
fn elf_hash_matches_the_sysv_reference_values() {
    assert_eq!(elf_hash(b""), 0);
    assert_eq!(elf_hash(b"printf"), 0x077905a6);
    assert_eq!(elf_hash(b"exit"), 0x0006cf04);
}

#[test]
fn stub_has_the_elf_header_of_an_x86_64_shared_object() {
    let bytes = shared_object("libcuda.so.1", &["cuInit"]);
    assert_eq!(&bytes[..4], b"\x7fELF");
    assert_eq!(bytes[4], 2, "ELFCLASS64");
    assert_eq!(u16::from_le_bytes([bytes[16], bytes[17]]), 3, "ET_DYN");
    assert_eq!(u16::from_le_bytes([bytes[18], bytes[19]]), 62, "EM_X86_64");
}

#[test]
fn readelf_sees_the_soname_and_symbols() {
    let Some(readelf) = ["/usr/bin/readelf", "/bin/readelf"]
        .iter()
        .find(|p| std::path::Path::new(p).exists())
    else {
        eprintln!("SKIP: readelf not installed");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let path = write_stub(
        dir.path(),
        "libnvidia-encode.so.570.158.01",
        "libnvidia-encode.so.1",
        &["NvEncodeAPICreateInstance"],
    );
    let out = std::process::Command::new(readelf)
        .arg("-dW")
        .arg(&path)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.contains("Library soname: [libnvidia-encode.so.1]"),
        "{text}"
    );
    let out = std::process::Command::new(readelf)
        .arg("--dyn-syms")
        .arg("-W")
        .arg(&path)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("NvEncodeAPICreateInstance"), "{text}");
    assert!(
        out.stderr.is_empty(),
        "readelf warnings: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn stub_can_be_dlopened_and_its_functions_return_zero() {
    if !cfg!(all(target_arch = "x86_64", target_os = "linux")) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let syms = ["cuInit", "cuDriverGetVersion", "cuDeviceGetCount"];
    let path = write_stub(dir.path(), "libcuda.so.570.158.01", "libcuda.so.1", &syms);
    let c_path = CString::new(path.to_str().unwrap()).unwrap();
    // SAFETY: the path is a valid C string; the object has no constructors to run.
    let handle = unsafe { libc::dlopen(c_path.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
    if handle.is_null() {
        // SAFETY: dlerror returns a thread-local C string after a failed dlopen.
        let err = unsafe { std::ffi::CStr::from_ptr(libc::dlerror()) };
        panic!("dlopen failed: {}", err.to_string_lossy());
    }
    for name in syms {
        let c_name = CString::new(name).unwrap();
        // SAFETY: handle is a live handle from dlopen; c_name is a valid C string.
        let f = unsafe { libc::dlsym(handle, c_name.as_ptr()) };
        assert!(!f.is_null(), "dlsym {name}");
        // SAFETY: every stub symbol is `xor eax, eax; ret`, a function taking nothing, returning int.
        let func: extern "C" fn() -> i32 = unsafe { std::mem::transmute(f) };
        assert_eq!(func(), 0);
    }
    let missing = CString::new("cuNotThere").unwrap();
    // SAFETY: as above.
    assert!(unsafe { libc::dlsym(handle, missing.as_ptr()) }.is_null());
    // SAFETY: handle came from dlopen and is closed once.
    assert_eq!(unsafe { libc::dlclose(handle) }, 0);
}
