//! Native parser of glibc's `ld.so.cache`.
//!
//! The driver's libraries are found the way the dynamic linker finds them: through the driver
//! root's `/etc/ld.so.cache`. Running `ldconfig -p` would cost a subprocess per discovery (and
//! would read the *host's* cache, not the driver root's), so we parse the file ourselves, from one
//! read, and never trust it: a truncated or corrupt cache gives an error naming the problem, never
//! a panic or an out-of-bounds read.
//!
//! Three layouts exist (glibc `sysdeps/generic/dl-cache.h`):
//! - old (`ld.so-1.7.0`): 16-byte header, 12-byte entries `{flags, key, value}`, string offsets
//!   relative to the end of the entries;
//! - new (`glibc-ld.so.cache1.1`): 48-byte header, 24-byte entries `{flags, key, value,
//!   osversion, hwcap}`, string offsets relative to the start of the new header;
//! - compat: an old cache whose string table starts with a complete new cache. Like glibc, we use
//!   the new part when it is there.

use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

pub use crate::error::LdCacheError;
use crate::error::NodeError;

#[cfg(test)]
mod tests;

const OLD_MAGIC: &[u8] = b"ld.so-1.7.0";
const NEW_MAGIC: &[u8] = b"glibc-ld.so.cache";
const NEW_VERSION: &[u8] = b"1.1";
const OLD_HEADER: usize = 16;
const OLD_ENTRY: usize = 12;
const NEW_HEADER: usize = 48;
const NEW_ENTRY: usize = 24;

/// Low byte of the flags: kind of object.
pub const FLAG_TYPE_MASK: u32 = 0x00ff;
/// Any ELF object (no libc dependency seen).
pub const FLAG_ELF: u32 = 0x0001;
/// ELF linked against libc5.
pub const FLAG_ELF_LIBC5: u32 = 0x0002;
/// ELF linked against glibc.
pub const FLAG_ELF_LIBC6: u32 = 0x0003;
/// Second byte of the flags: ABI / word size the object requires.
pub const FLAG_REQUIRED_MASK: u32 = 0xff00;
/// x86-64 64-bit.
pub const FLAG_X8664_LIB64: u32 = 0x0300;
/// x32.
pub const FLAG_X8664_LIBX32: u32 = 0x0800;
/// 32-bit ARM hard-float.
pub const FLAG_ARM_LIBHF: u32 = 0x0900;
/// AArch64 64-bit.
pub const FLAG_AARCH64_LIB64: u32 = 0x0a00;
/// 64-bit POWER.
pub const FLAG_POWERPC_LIB64: u32 = 0x0500;
/// `hwcap` bit telling that the low 32 bits index a `glibc-hwcaps` subdirectory.
pub const HWCAP_EXTENSION: u64 = 1 << 62;

/// Layout of a parsed cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LdCacheFormat {
    Old,
    New,
    /// Old entries followed by a complete new cache (`ldconfig -c compat`).
    Compat,
}

/// One cache entry: a library name (usually the SONAME) and the path the linker would load.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LdCacheEntry {
    pub flags: u32,
    /// e.g. `libcuda.so.1`.
    pub key: String,
    /// Absolute path as the cache's root sees it, e.g. `/usr/lib/x86_64-linux-gnu/libcuda.so.1`.
    pub path: PathBuf,
    /// 0 for ordinary entries (always 0 in the old format).
    pub hwcap: u64,
}

impl LdCacheEntry {
    /// True for entries of a `glibc-hwcaps` subdirectory (optimised variants).
    pub fn is_hwcaps_subdir(&self) -> bool {
        self.hwcap & HWCAP_EXTENSION != 0
    }
}

/// Which word size / ABI of library a caller wants.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum LibClass {
    /// The host's native 64-bit ABI.
    Native,
    /// 32-bit libraries a 64-bit host can run (`compat32`).
    Compat32,
}

impl LibClass {
    /// Whether cache entry flags describe a library of this class on the build host's arch.
    pub fn matches(self, flags: u32) -> bool {
        let kind = flags & FLAG_TYPE_MASK;
        if kind != FLAG_ELF && kind != FLAG_ELF_LIBC6 {
            return false;
        }
        let required = flags & FLAG_REQUIRED_MASK;
        match self {
            LibClass::Native => required == NATIVE_REQUIRED,
            LibClass::Compat32 => COMPAT32_REQUIRED.is_some_and(|r| r == required),
        }
    }
}

#[cfg(target_arch = "x86_64")]
const NATIVE_REQUIRED: u32 = FLAG_X8664_LIB64;
#[cfg(target_arch = "aarch64")]
const NATIVE_REQUIRED: u32 = FLAG_AARCH64_LIB64;
#[cfg(target_arch = "powerpc64")]
const NATIVE_REQUIRED: u32 = FLAG_POWERPC_LIB64;
#[cfg(not(any(
    target_arch = "x86_64",
    target_arch = "aarch64",
    target_arch = "powerpc64"
)))]
const NATIVE_REQUIRED: u32 = 0;

#[cfg(target_arch = "x86_64")]
const COMPAT32_REQUIRED: Option<u32> = Some(0);
#[cfg(target_arch = "aarch64")]
const COMPAT32_REQUIRED: Option<u32> = Some(FLAG_ARM_LIBHF);
#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
const COMPAT32_REQUIRED: Option<u32> = None;

/// A parsed `ld.so.cache`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LdCache {
    pub format: LdCacheFormat,
    /// Entries in file order (ldconfig sorts them; the first match of a key wins).
    pub entries: Vec<LdCacheEntry>,
}

impl LdCache {
    /// Reads and parses a cache file (one read).
    pub fn load(path: &Path) -> Result<LdCache, NodeError> {
        let data = crate::bounded::read_bounded(path, crate::bounded::MAX_LD_CACHE_BYTES)?;
        LdCache::parse(&data).map_err(|error| NodeError::LdCache {
            path: path.to_path_buf(),
            error,
        })
    }

    /// Parses the bytes of a cache file.
    pub fn parse(data: &[u8]) -> Result<LdCache, LdCacheError> {
        if data.is_empty() {
            return Err(LdCacheError::Empty);
        }
        if data.starts_with(NEW_MAGIC) {
            let entries = parse_new(data, 0)?;
            return Ok(LdCache {
                format: LdCacheFormat::New,
                entries,
            });
        }
        if !data.starts_with(OLD_MAGIC) {
            let n = data.len().min(NEW_MAGIC.len() + NEW_VERSION.len());
            let found = String::from_utf8_lossy(&data[..n]).into_owned();
            return Err(LdCacheError::UnknownMagic { found });
        }
        let nlibs = read_u32(data, OLD_MAGIC.len() + 1, "old header")? as usize;
        let entries_end = nlibs
            .checked_mul(OLD_ENTRY)
            .and_then(|n| n.checked_add(OLD_HEADER))
            .ok_or(LdCacheError::Truncated {
                what: "old entries",
                offset: OLD_HEADER,
                end: usize::MAX,
                len: data.len(),
            })?;
        check_range(data, OLD_HEADER, entries_end, "old entries")?;
        // The new cache, if any, starts at the next 8-byte boundary after the old entries.
        let new_start = entries_end.next_multiple_of(8);
        if data.len() >= new_start + NEW_MAGIC.len() && data[new_start..].starts_with(NEW_MAGIC) {
            let entries = parse_new(data, new_start)?;
            return Ok(LdCache {
                format: LdCacheFormat::Compat,
                entries,
            });
        }
        let mut entries = Vec::with_capacity(nlibs);
        for index in 0..nlibs {
            let at = OLD_HEADER + index * OLD_ENTRY;
            let flags = read_u32(data, at, "old entry")?;
            let key = read_u32(data, at + 4, "old entry")? as usize;
            let value = read_u32(data, at + 8, "old entry")? as usize;
            entries.push(make_entry(data, entries_end, index, flags, key, value, 0)?);
        }
        Ok(LdCache {
            format: LdCacheFormat::Old,
            entries,
        })
    }

    /// Entries of one library class, hwcaps-subdirectory variants left out.
    pub fn entries_of(&self, class: LibClass) -> impl Iterator<Item = &LdCacheEntry> {
        self.entries
            .iter()
            .filter(move |e| class.matches(e.flags) && !e.is_hwcaps_subdir())
    }

    /// The first entry with exactly this key and class, as the dynamic linker would pick it.
    pub fn lookup(&self, key: &str, class: LibClass) -> Option<&LdCacheEntry> {
        self.entries_of(class).find(|e| e.key == key)
    }
}

fn parse_new(data: &[u8], base: usize) -> Result<Vec<LdCacheEntry>, LdCacheError> {
    let end = base.saturating_add(NEW_HEADER);
    check_range(data, base, end, "new header")?;
    let version = &data[base + NEW_MAGIC.len()..base + NEW_MAGIC.len() + NEW_VERSION.len()];
    if version != NEW_VERSION {
        return Err(LdCacheError::UnsupportedVersion {
            found: String::from_utf8_lossy(version).into_owned(),
        });
    }
    let nlibs = read_u32(data, base + 20, "new header")? as usize;
    // Byte 28: endianness flags (0 unset, 1 invalid, 2 little, 3 big).
    match (data[base + 28] & 3, cfg!(target_endian = "little")) {
        (0, _) | (2, true) | (3, false) => {}
        (1, _) => return Err(LdCacheError::WrongEndian("an invalid")),
        (2, false) => return Err(LdCacheError::WrongEndian("little-endian")),
        _ => return Err(LdCacheError::WrongEndian("big-endian")),
    }
    let entries_start = base + NEW_HEADER;
    let entries_end = nlibs
        .checked_mul(NEW_ENTRY)
        .and_then(|n| n.checked_add(entries_start))
        .ok_or(LdCacheError::Truncated {
            what: "new entries",
            offset: entries_start,
            end: usize::MAX,
            len: data.len(),
        })?;
    check_range(data, entries_start, entries_end, "new entries")?;
    let mut entries = Vec::with_capacity(nlibs);
    for index in 0..nlibs {
        let at = entries_start + index * NEW_ENTRY;
        let flags = read_u32(data, at, "new entry")?;
        let key = read_u32(data, at + 4, "new entry")? as usize;
        let value = read_u32(data, at + 8, "new entry")? as usize;
        let hwcap = read_u64(data, at + 16, "new entry")?;
        entries.push(make_entry(data, base, index, flags, key, value, hwcap)?);
    }
    Ok(entries)
}

fn make_entry(
    data: &[u8],
    base: usize,
    index: usize,
    flags: u32,
    key: usize,
    value: usize,
    hwcap: u64,
) -> Result<LdCacheEntry, LdCacheError> {
    let key = read_str(data, base, key, index)?;
    let value = read_str(data, base, value, index)?;
    Ok(LdCacheEntry {
        flags,
        key: String::from_utf8_lossy(key).into_owned(),
        path: PathBuf::from(std::ffi::OsStr::from_bytes(value)),
        hwcap,
    })
}

/// Bytes of the NUL-terminated string at `base + offset`.
fn read_str(data: &[u8], base: usize, offset: usize, index: usize) -> Result<&[u8], LdCacheError> {
    let start = base.checked_add(offset).filter(|&s| s < data.len()).ok_or(
        LdCacheError::StringOutOfBounds {
            index,
            offset: base.saturating_add(offset),
            len: data.len(),
        },
    )?;
    let len = data[start..]
        .iter()
        .position(|&b| b == 0)
        .ok_or(LdCacheError::Unterminated {
            index,
            offset: start,
        })?;
    Ok(&data[start..start + len])
}

fn check_range(
    data: &[u8],
    offset: usize,
    end: usize,
    what: &'static str,
) -> Result<(), LdCacheError> {
    if end > data.len() || offset > end {
        return Err(LdCacheError::Truncated {
            what,
            offset,
            end,
            len: data.len(),
        });
    }
    Ok(())
}

fn read_u32(data: &[u8], at: usize, what: &'static str) -> Result<u32, LdCacheError> {
    let end = at.saturating_add(4);
    check_range(data, at, end, what)?;
    let mut b = [0u8; 4];
    b.copy_from_slice(&data[at..end]);
    Ok(u32::from_ne_bytes(b))
}

fn read_u64(data: &[u8], at: usize, what: &'static str) -> Result<u64, LdCacheError> {
    let end = at.saturating_add(8);
    check_range(data, at, end, what)?;
    let mut b = [0u8; 8];
    b.copy_from_slice(&data[at..end]);
    Ok(u64::from_ne_bytes(b))
}
