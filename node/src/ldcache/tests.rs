use std::process::Command;

use super::*;
use crate::testutil::{can_ldconfig, FakeRoot};

const NEW: &[u8] = include_bytes!("fixtures/new.cache");
const OLD: &[u8] = include_bytes!("fixtures/old.cache");
const COMPAT: &[u8] = include_bytes!("fixtures/compat.cache");

/// `(key, flags, path)` as `ldconfig -p` prints the checked-in fixtures.
fn fixture_entries() -> Vec<(&'static str, u32, &'static str)> {
    vec![
        (
            "libnvidia-ml.so.1",
            0x0303,
            "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1",
        ),
        (
            "libnvidia-ml.so",
            0x0303,
            "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so",
        ),
        (
            "libcuda.so.1",
            0x0303,
            "/usr/lib/x86_64-linux-gnu/libcuda.so.1",
        ),
        ("libcuda.so.1", 0x0001, "/usr/lib32/libcuda.so.1"),
        ("libcuda.so", 0x0303, "/usr/lib/x86_64-linux-gnu/libcuda.so"),
        (
            "libGLX_nvidia.so.0",
            0x0303,
            "/usr/lib/x86_64-linux-gnu/libGLX_nvidia.so.0",
        ),
        (
            "libGLX_nvidia.so",
            0x0303,
            "/usr/lib/x86_64-linux-gnu/libGLX_nvidia.so",
        ),
    ]
}

fn triples(cache: &LdCache) -> Vec<(String, u32, String)> {
    cache
        .entries
        .iter()
        .map(|e| (e.key.clone(), e.flags, e.path.display().to_string()))
        .collect()
}

#[test]
fn parses_all_three_formats_made_by_ldconfig() {
    let want: Vec<_> = fixture_entries()
        .into_iter()
        .map(|(k, f, p)| (k.to_string(), f, p.to_string()))
        .collect();
    for (data, format) in [
        (NEW, LdCacheFormat::New),
        (OLD, LdCacheFormat::Old),
        (COMPAT, LdCacheFormat::Compat),
    ] {
        let cache = LdCache::parse(data).unwrap();
        assert_eq!(cache.format, format);
        assert_eq!(triples(&cache), want, "{format:?}");
        assert!(cache.entries.iter().all(|e| e.hwcap == 0));
    }
}

#[cfg(target_arch = "x86_64")]
#[test]
fn selects_native_and_compat32_entries() {
    let cache = LdCache::parse(NEW).unwrap();
    let native = cache.lookup("libcuda.so.1", LibClass::Native).unwrap();
    assert_eq!(
        native.path,
        Path::new("/usr/lib/x86_64-linux-gnu/libcuda.so.1")
    );
    let m32 = cache.lookup("libcuda.so.1", LibClass::Compat32).unwrap();
    assert_eq!(m32.path, Path::new("/usr/lib32/libcuda.so.1"));
    assert_eq!(cache.entries_of(LibClass::Native).count(), 6);
    assert_eq!(cache.entries_of(LibClass::Compat32).count(), 1);
    assert!(cache
        .lookup("libnvidia-ml.so.1", LibClass::Compat32)
        .is_none());
    // aarch64, x32 and libc5 entries are never selected on x86-64.
    assert!(!LibClass::Native.matches(FLAG_AARCH64_LIB64 | FLAG_ELF_LIBC6));
    assert!(!LibClass::Native.matches(FLAG_X8664_LIBX32 | FLAG_ELF_LIBC6));
    assert!(!LibClass::Native.matches(FLAG_X8664_LIB64 | FLAG_ELF_LIBC5));
    assert!(LibClass::Compat32.matches(FLAG_ELF_LIBC6));
    assert!(!LibClass::Compat32.matches(FLAG_X8664_LIB64 | FLAG_ELF_LIBC6));
}

#[test]
fn truncated_and_corrupted_inputs_never_panic() {
    for data in [NEW, OLD, COMPAT] {
        for len in 0..data.len() {
            // Every strict prefix is either rejected or (if only the string tail is cut) parsed.
            let _ = LdCache::parse(&data[..len]);
        }
        for at in 0..data.len() {
            for byte in [0x00, 0x7f, 0xff] {
                let mut bad = data.to_vec();
                bad[at] = byte;
                let _ = LdCache::parse(&bad);
            }
        }
    }
}

#[test]
fn truncations_give_clear_errors() {
    assert_eq!(LdCache::parse(b""), Err(LdCacheError::Empty));
    assert!(matches!(
        LdCache::parse(&NEW[..30]),
        Err(LdCacheError::Truncated {
            what: "new header",
            ..
        })
    ));
    assert!(matches!(
        LdCache::parse(&NEW[..60]),
        Err(LdCacheError::Truncated {
            what: "new entries",
            ..
        })
    ));
    assert!(matches!(
        LdCache::parse(&OLD[..14]),
        Err(LdCacheError::Truncated {
            what: "old header",
            ..
        })
    ));
    assert!(matches!(
        LdCache::parse(&OLD[..40]),
        Err(LdCacheError::Truncated {
            what: "old entries",
            ..
        })
    ));
    // Cut in the string table: the last string loses its NUL or its start.
    let err = LdCache::parse(&NEW[..NEW.len() - 200]).unwrap_err();
    assert!(
        matches!(
            err,
            LdCacheError::StringOutOfBounds { .. } | LdCacheError::Unterminated { .. }
        ),
        "{err}"
    );
}

#[test]
fn unknown_magic_and_version_and_endianness() {
    let err = LdCache::parse(b"not a cache at all, really").unwrap_err();
    assert!(
        err.to_string()
            .contains("unknown magic \"not a cache at all"),
        "{err}"
    );
    let mut v = NEW.to_vec();
    v[17..20].copy_from_slice(b"2.0");
    assert_eq!(
        LdCache::parse(&v),
        Err(LdCacheError::UnsupportedVersion {
            found: "2.0".into()
        })
    );
    let mut v = NEW.to_vec();
    v[28] = 3;
    assert_eq!(
        LdCache::parse(&v),
        Err(LdCacheError::WrongEndian("big-endian"))
    );
    let mut v = NEW.to_vec();
    v[28] = 0; // older ldconfig left it unset: accepted
    assert!(LdCache::parse(&v).is_ok());
}

#[test]
fn huge_counts_are_rejected_not_allocated() {
    let mut v = NEW.to_vec();
    v[20..24].copy_from_slice(&u32::MAX.to_ne_bytes());
    assert!(matches!(
        LdCache::parse(&v),
        Err(LdCacheError::Truncated { .. })
    ));
    let mut v = OLD.to_vec();
    v[12..16].copy_from_slice(&u32::MAX.to_ne_bytes());
    assert!(matches!(
        LdCache::parse(&v),
        Err(LdCacheError::Truncated { .. })
    ));
}

#[test]
fn load_names_the_file_and_the_fix() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ld.so.cache");
    std::fs::write(&path, &NEW[..100]).unwrap();
    let msg = LdCache::load(&path).unwrap_err().to_string();
    assert!(
        msg.contains(&path.display().to_string()) && msg.contains("ldconfig"),
        "{msg}"
    );
    let msg = LdCache::load(&dir.path().join("missing"))
        .unwrap_err()
        .to_string();
    assert!(msg.contains("missing"), "{msg}");
}

/// Parses what `ldconfig -p -C FILE` prints into `(key, path)` pairs.
fn ldconfig_print(path: &Path) -> Vec<(String, String)> {
    let out = Command::new("ldconfig")
        .arg("-p")
        .arg("-C")
        .arg(path)
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let (left, right) = l.split_once(" => ")?;
            let key = left.trim().split(" (").next()?;
            Some((key.to_string(), right.trim().to_string()))
        })
        .collect()
}

#[test]
fn agrees_with_real_ldconfig_on_fresh_caches() {
    if !can_ldconfig() {
        return;
    }
    let mut root = FakeRoot::new();
    let lib = "/usr/lib/x86_64-linux-gnu";
    // Odd and even entry counts exercise the compat format's alignment padding.
    for i in 0..9 {
        root.lib(
            lib,
            &format!("libnv{i}.so.570.1.2"),
            &format!("libnv{i}.so.1"),
            false,
            i % 2 == 0,
        );
    }
    root.lib(
        "/usr/lib32",
        "libnv0.so.570.1.2",
        "libnv0.so.1",
        true,
        false,
    );
    for format in ["new", "old", "compat"] {
        root.ldconfig(format);
        let path = root.path("/etc/ld.so.cache");
        let cache = LdCache::load(&path).unwrap();
        let ours: Vec<_> = cache
            .entries
            .iter()
            .map(|e| (e.key.clone(), e.path.display().to_string()))
            .collect();
        assert_eq!(ours, ldconfig_print(&path), "{format}");
        assert_eq!(
            ours.len(),
            15,
            "{format}: 9 sonames + 5 dev links + 1 32-bit"
        );
    }
}
