//! The CUDA forward-compatibility ELF note of an image's compat `libcuda.so.<ver>`.
//!
//! Compat packages since driver 575 carry a note section `.note.cuda.fwd_compatibility`, owner
//! `NVIDIA Corporation`, whose description is JSON such as
//! `{"Format":1,"CUDA Version":"12.9","Driver":[535,550,560,565,570,575],"Device":[…]}`: the host
//! driver branches the library supports. NVIDIA's `enable-cuda-compat` (nvidia-container-toolkit
//! v1.20.0, `cmd/nvidia-cdi-hook/cudacompat/cuda-elf-header.go` `GetCUDACompatElfHeaderFromReader`
//! and `compatElfHeader.UseCompat`, called from `cudacompat.go` `useCompatLibraries`) reads it
//! first: with the note, compat is used only when the host driver's major is in `Driver` and the
//! compat version is greater than the host's; without it (or when it cannot be read) the major
//! rule applies. The note is parsed as NVIDIA does (12-byte header in the file's byte order, name
//! and description lengths aligned to the section's `sh_addralign`, NULs trimmed).
//!
//! The file is the image's: it is read through the container root (the caller opens it with
//! `RESOLVE_IN_ROOT`), it must be a regular file, and only the ELF header, the section headers,
//! the section-name table and the note are read, each with a limit — never the whole library.

use std::io;

#[path = "cuda_compat_elf_error.rs"]
mod error;
pub use error::NoteError;

/// Name of the note section.
pub const NOTE_SECTION: &str = ".note.cuda.fwd_compatibility";
/// Owner name of the note.
const NOTE_OWNER: &str = "NVIDIA Corporation";
/// Most section headers read (real libcuda has about 30).
const MAX_SECTIONS: u64 = 4096;
/// Largest section-name table read.
const MAX_STRTAB_BYTES: u64 = 1 << 20;
/// Largest note section read (real ones are about 200 bytes).
const MAX_NOTE_BYTES: u64 = 64 << 10;
const SHT_NOTE: u32 = 7;

/// What the note says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompatNote {
    /// `CUDA Version` (e.g. `12.9`).
    pub cuda_version: String,
    /// `Driver`: host driver branches (majors) the library supports.
    pub drivers: Vec<u64>,
}

/// Positional reads (a file, or bytes in tests).
pub trait ReadAt {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize>;
}

impl ReadAt for std::fs::File {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        std::os::unix::fs::FileExt::read_at(self, buf, offset)
    }
}

impl ReadAt for [u8] {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        let start = usize::try_from(offset)
            .unwrap_or(usize::MAX)
            .min(self.len());
        let n = buf.len().min(self.len() - start);
        buf[..n].copy_from_slice(&self[start..start + n]);
        Ok(n)
    }
}

/// `len` bytes at `offset` of a file of `size` bytes, at most `limit`.
fn read_exact(
    f: &(impl ReadAt + ?Sized),
    size: u64,
    offset: u64,
    len: u64,
    limit: u64,
    what: &'static str,
) -> Result<Vec<u8>, NoteError> {
    let too_large = NoteError::TooLarge { what, len, limit };
    if len > limit {
        return Err(too_large);
    }
    if offset.checked_add(len).is_none_or(|end| end > size) {
        return Err(NoteError::OutsideFile { what });
    }
    let mut buf = vec![0; usize::try_from(len).map_err(|_| too_large)?];
    let mut done = 0;
    while done < buf.len() {
        let at = offset + u64::try_from(done).unwrap_or(u64::MAX);
        match f.read_at(&mut buf[done..], at) {
            Ok(0) => return Err(NoteError::Truncated { what }),
            Ok(n) => done += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(error) => return Err(NoteError::Io { what, error }),
        }
    }
    Ok(buf)
}

/// Field reader in the file's class and byte order.
struct Fields {
    is64: bool,
    big: bool,
}

impl Fields {
    fn u16(&self, b: &[u8], at: usize) -> u64 {
        let v = [b[at], b[at + 1]];
        u64::from(if self.big {
            u16::from_be_bytes(v)
        } else {
            u16::from_le_bytes(v)
        })
    }
    fn u32(&self, b: &[u8], at: usize) -> u64 {
        let v = [b[at], b[at + 1], b[at + 2], b[at + 3]];
        u64::from(if self.big {
            u32::from_be_bytes(v)
        } else {
            u32::from_le_bytes(v)
        })
    }
    fn u64(&self, b: &[u8], at: usize) -> u64 {
        let mut v = [0; 8];
        v.copy_from_slice(&b[at..at + 8]);
        if self.big {
            u64::from_be_bytes(v)
        } else {
            u64::from_le_bytes(v)
        }
    }
    /// An address-sized field (`Elf32_Off`/`Elf64_Off`, sizes, alignments).
    fn word(&self, b: &[u8], at64: usize, at32: usize) -> u64 {
        if self.is64 {
            self.u64(b, at64)
        } else {
            self.u32(b, at32)
        }
    }
}

/// One section header: name offset, type, file offset, size, alignment.
struct Section {
    name: u64,
    kind: u64,
    offset: u64,
    size: u64,
    align: u64,
}

/// Reads the note of an ELF file of `size` bytes. `Ok(None)`: no such note (or not NVIDIA's);
/// `Err`: the file is not a readable ELF or the note is malformed (callers fall back).
pub fn read_note(f: &(impl ReadAt + ?Sized), size: u64) -> Result<Option<CompatNote>, NoteError> {
    let hdr = read_exact(f, size, 0, 64.min(size), 64, "ELF header")?;
    let (x, table) = read_section_table(f, size, &hdr)?;
    let section = |i: u64| {
        let at = usize::try_from(i * table.entsize).unwrap_or(usize::MAX);
        let b = &table.bytes[at..];
        Section {
            name: x.u32(b, 0),
            kind: x.u32(b, 4),
            offset: x.word(b, 0x18, 0x10),
            size: x.word(b, 0x20, 0x14),
            align: x.word(b, 0x30, 0x20),
        }
    };
    let strtab = section(table.shstrndx);
    let names = read_exact(
        f,
        size,
        strtab.offset,
        strtab.size,
        MAX_STRTAB_BYTES,
        "section names",
    )?;
    let name_of = |s: &Section| {
        let start = usize::try_from(s.name).ok().filter(|&n| n < names.len())?;
        let end = names[start..].iter().position(|&c| c == 0)? + start;
        Some(&names[start..end])
    };
    let Some(note) = (0..table.shnum)
        .map(section)
        .find(|s| s.kind == u64::from(SHT_NOTE) && name_of(s) == Some(NOTE_SECTION.as_bytes()))
    else {
        return Ok(None);
    };
    let data = read_exact(
        f,
        size,
        note.offset,
        note.size,
        MAX_NOTE_BYTES,
        "CUDA compat note",
    )?;
    parse_note(&data, note.align, &x)
}

/// The section header table, as read from the file.
struct SectionTable {
    bytes: Vec<u8>,
    entsize: u64,
    shnum: u64,
    shstrndx: u64,
}

/// The file's class and byte order from the ELF header `hdr`, and its section header table.
fn read_section_table(
    f: &(impl ReadAt + ?Sized),
    size: u64,
    hdr: &[u8],
) -> Result<(Fields, SectionTable), NoteError> {
    if hdr.len() < 52 || hdr[..4] != *b"\x7fELF" {
        return Err(NoteError::NotElf);
    }
    let x = match (hdr[4], hdr[5]) {
        (c @ (1 | 2), d @ (1 | 2)) => Fields {
            is64: c == 2,
            big: d == 2,
        },
        _ => return Err(NoteError::UnknownClass),
    };
    if x.is64 && hdr.len() < 64 {
        return Err(NoteError::TruncatedHeader);
    }
    let (shoff, entsize, shnum, shstrndx) = if x.is64 {
        (
            x.u64(hdr, 0x28),
            x.u16(hdr, 0x3a),
            x.u16(hdr, 0x3c),
            x.u16(hdr, 0x3e),
        )
    } else {
        (
            x.u32(hdr, 0x20),
            x.u16(hdr, 0x2e),
            x.u16(hdr, 0x30),
            x.u16(hdr, 0x32),
        )
    };
    let min_entsize = if x.is64 { 64 } else { 40 };
    if shnum == 0 || shnum > MAX_SECTIONS || shstrndx >= shnum || entsize < min_entsize {
        return Err(NoteError::SectionTable {
            sections: shnum,
            entry_size: entsize,
        });
    }
    let bytes = read_exact(
        f,
        size,
        shoff,
        shnum * entsize,
        MAX_SECTIONS * 256,
        "section headers",
    )?;
    let table = SectionTable {
        bytes,
        entsize,
        shnum,
        shstrndx,
    };
    Ok((x, table))
}

/// NVIDIA's `alignUp(size, addralign)` (0 when `addralign` is 0, as its unsigned arithmetic).
fn align_up(size: u64, to: u64) -> usize {
    let v = size.wrapping_add(to).wrapping_sub(1) & !to.wrapping_sub(1);
    usize::try_from(v).unwrap_or(usize::MAX)
}

/// NVIDIA's `trim`: `n` bytes from `from` (clamped to the data), NULs trimmed at both ends.
fn trim(data: &[u8], from: usize, n: usize) -> &[u8] {
    if data.is_empty() {
        return data;
    }
    let from = from.min(data.len() - 1);
    let to = data.len().min(from.saturating_add(n));
    let s = &data[from..to];
    let start = s.iter().position(|&c| c != 0).unwrap_or(s.len());
    let end = s.iter().rposition(|&c| c != 0).map_or(start, |e| e + 1);
    &s[start..end.max(start)]
}

fn parse_note(data: &[u8], align: u64, x: &Fields) -> Result<Option<CompatNote>, NoteError> {
    if data.len() < 12 {
        return Err(NoteError::ShortNote);
    }
    let (namesz, descsz) = (x.u32(data, 0), x.u32(data, 4));
    if namesz == 0 || descsz == 0 {
        return Ok(None);
    }
    let name_len = align_up(namesz, align);
    if trim(data, 12, name_len) != NOTE_OWNER.as_bytes() {
        return Ok(None);
    }
    let desc_len = usize::try_from(descsz).unwrap_or(usize::MAX);
    let desc = trim(data, 12usize.saturating_add(name_len), desc_len);
    let doc: serde_json::Value =
        serde_json::from_slice(desc).map_err(|error| NoteError::NotJson { error })?;
    // Go's encoding/json matches field names case-insensitively.
    let field = |name: &str| {
        doc.as_object()?
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v)
    };
    let cuda_version = match field("CUDA Version") {
        None | Some(serde_json::Value::Null) => String::new(),
        Some(serde_json::Value::String(s)) => s.clone(),
        Some(_) => {
            return Err(NoteError::BadField {
                field: "CUDA Version",
                problem: "is not a string",
            })
        }
    };
    let drivers = match field("Driver") {
        None | Some(serde_json::Value::Null) => Vec::new(),
        Some(serde_json::Value::Array(a)) => a
            .iter()
            .map(|v| {
                v.as_u64().ok_or(NoteError::BadField {
                    field: "Driver",
                    problem: "holds a non-integer",
                })
            })
            .collect::<Result<_, _>>()?,
        Some(_) => {
            return Err(NoteError::BadField {
                field: "Driver",
                problem: "is not a list",
            })
        }
    };
    Ok(Some(CompatNote {
        cuda_version,
        drivers,
    }))
}

/// A driver version as numbers (`575.57.08` -> [575, 57, 8]; one to three parts, as the semver
/// parser NVIDIA uses accepts), `None` otherwise.
pub fn parse_version(v: &str) -> Option<Vec<u64>> {
    let parts: Vec<u64> = v
        .split('.')
        .map(|p| p.parse().ok())
        .collect::<Option<_>>()?;
    (1..=3).contains(&parts.len()).then(|| {
        let mut p = parts;
        p.resize(3, 0);
        p
    })
}

/// `useCompatLibraries` for the CDI/prestart path (a host driver version, no host CUDA version):
/// with a note, the host major must be one of its `Driver` branches and the compat version
/// greater than the host's; without one, the compat major must be greater.
pub fn use_compat_libraries(
    compat_version: &str,
    host_driver_version: &str,
    note: Option<&CompatNote>,
) -> bool {
    let (Some(compat), Some(host)) = (
        parse_version(compat_version),
        parse_version(host_driver_version),
    ) else {
        return false;
    };
    match note {
        Some(n) => n.drivers.contains(&host[0]) && compat > host,
        None => host[0] < compat[0],
    }
}

#[cfg(test)]
#[path = "cuda_compat_elf_tests.rs"]
pub(crate) mod tests;
