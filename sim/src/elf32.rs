//! A writer of real ELF32 i386 shared objects: the 32-bit (compat32) driver libraries.
//!
//! A multilib node carries i386 builds of the driver libraries beside the x86-64 ones, with the
//! same SONAMEs. The host's `ldconfig` records them in `ld.so.cache` with the plain `libc6` flag
//! (no `x86-64` bits), so a consumer that ignores the entry flags would pick a 32-bit
//! `libnvidia-ml.so.1` it cannot load. The stub has what `ldconfig` and the loader read: the ELF
//! header, one `PT_LOAD`, `PT_DYNAMIC` with `DT_SONAME`/`DT_HASH`/`DT_SYMTAB`/`DT_STRTAB`, and
//! `PT_GNU_STACK`, and `DT_NEEDED libc.so.6`. Sections are left out (a loader never reads them); each exported symbol is an
//! absolute function returning 0 (`xor eax, eax; ret`).

const EHDR_SIZE: u32 = 52;
const PHDR_SIZE: u32 = 32;
const SYM_SIZE: u32 = 16;
const DYN_SIZE: u32 = 8;
const PHNUM: u32 = 3;
const PAGE: u32 = 0x1000;

const PT_LOAD: u32 = 1;
const PT_DYNAMIC: u32 = 2;
const PT_GNU_STACK: u32 = 0x6474_e551;
const PF_R_W_X: u32 = 7;
const PF_R_W: u32 = 6;

/// `e_machine` of i386.
pub const EM_386: u16 = 3;
const SHN_ABS: u16 = 0xfff1;
const RETURN_ZERO: [u8; 3] = [0x31, 0xc0, 0xc3];

fn align(v: u32, a: u32) -> u32 {
    v.div_ceil(a) * a
}

fn len32(n: usize) -> u32 {
    u32::try_from(n).expect("ELF32 stub parts are small")
}

fn w16(o: &mut Vec<u8>, v: u16) {
    o.extend_from_slice(&v.to_le_bytes());
}

fn w32(o: &mut Vec<u8>, v: u32) {
    o.extend_from_slice(&v.to_le_bytes());
}

fn pad(o: &mut Vec<u8>, off: u32) {
    let off = usize::try_from(off).expect("ELF32 stub is small");
    assert!(o.len() <= off, "ELF32 layout overlap");
    o.resize(off, 0);
}

/// Offsets of the parts of the one loaded segment.
struct Layout {
    nsyms: u32,
    hash_off: u32,
    dynsym_off: u32,
    dynstr_off: u32,
    text_off: u32,
    dyn_off: u32,
}

impl Layout {
    fn new(nsyms: u32, dynstr_len: u32) -> Self {
        let hash_off = EHDR_SIZE + PHNUM * PHDR_SIZE;
        let hash_size = (2 + nsyms + nsyms) * 4;
        let dynsym_off = align(hash_off + hash_size, 4);
        let dynstr_off = dynsym_off + nsyms * SYM_SIZE;
        let text_off = align(dynstr_off + dynstr_len, 16);
        let dyn_off = align(text_off + len32(RETURN_ZERO.len()), 8);
        Layout {
            nsyms,
            hash_off,
            dynsym_off,
            dynstr_off,
            text_off,
            dyn_off,
        }
    }
}

/// Builds an ELF32 i386 shared object with `DT_SONAME = soname` exporting `symbols`.
pub fn shared_object_i386(soname: &str, symbols: &[&str]) -> Vec<u8> {
    let mut dynstr = vec![0u8];
    let mut add = |s: &str| {
        let off = len32(dynstr.len());
        dynstr.extend_from_slice(s.as_bytes());
        dynstr.push(0);
        off
    };
    let soname_off = add(soname);
    // Real i386 driver libraries need libc.so.6; ldconfig derives the `libc6` cache flag from it.
    let libc_off = add("libc.so.6");
    let names: Vec<u32> = symbols.iter().map(|s| add(s)).collect();
    let l = Layout::new(len32(symbols.len()) + 1, len32(dynstr.len()));
    let dyn_entries: [(u32, u32); 8] = [
        (1, libc_off),     // DT_NEEDED
        (14, soname_off),  // DT_SONAME
        (4, l.hash_off),   // DT_HASH
        (5, l.dynstr_off), // DT_STRTAB
        (6, l.dynsym_off), // DT_SYMTAB
        (10, len32(dynstr.len())),
        (11, SYM_SIZE), // DT_SYMENT
        (0, 0),         // DT_NULL
    ];
    let dyn_size = len32(dyn_entries.len()) * DYN_SIZE;
    let end = l.dyn_off + dyn_size;

    let mut o: Vec<u8> = Vec::with_capacity(usize::try_from(end).unwrap_or(0));
    headers(&mut o, &l, end, dyn_size);
    hash(&mut o, &l, symbols);
    // .dynsym: null symbol, then global functions.
    pad(&mut o, l.dynsym_off);
    o.extend_from_slice(&[0u8; SYM_SIZE as usize]);
    for name in names {
        w32(&mut o, name);
        w32(&mut o, l.text_off);
        w32(&mut o, len32(RETURN_ZERO.len()));
        o.push(0x12); // STB_GLOBAL | STT_FUNC
        o.push(0);
        w16(&mut o, SHN_ABS);
    }
    o.extend_from_slice(&dynstr);
    pad(&mut o, l.text_off);
    o.extend_from_slice(&RETURN_ZERO);
    pad(&mut o, l.dyn_off);
    for (tag, val) in dyn_entries {
        w32(&mut o, tag);
        w32(&mut o, val);
    }
    o
}

/// ELF header (ELFCLASS32, little endian, ET_DYN, EM_386, no sections) and program headers.
fn headers(o: &mut Vec<u8>, l: &Layout, end: u32, dyn_size: u32) {
    o.extend_from_slice(&[0x7f, b'E', b'L', b'F', 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
    w16(o, 3);
    w16(o, EM_386);
    w32(o, 1); // EV_CURRENT
    w32(o, 0); // e_entry
    w32(o, EHDR_SIZE); // e_phoff
    w32(o, 0); // e_shoff: no sections
    w32(o, 0); // e_flags
    for v in [EHDR_SIZE, PHDR_SIZE, PHNUM, 40, 0, 0] {
        w16(o, u16::try_from(v).expect("header field fits"));
    }
    // Program headers: type, offset, vaddr, paddr, filesz, memsz, flags, align.
    for (kind, off, size, flags, al) in [
        (PT_LOAD, 0, end, PF_R_W_X, PAGE),
        (PT_DYNAMIC, l.dyn_off, dyn_size, PF_R_W, 4),
        (PT_GNU_STACK, 0, 0, PF_R_W, 16),
    ] {
        for v in [kind, off, off, off, size, size, flags, al] {
            w32(o, v);
        }
    }
}

/// `.hash` with one bucket per symbol (SysV layout).
fn hash(o: &mut Vec<u8>, l: &Layout, symbols: &[&str]) {
    pad(o, l.hash_off);
    let n = usize::try_from(l.nsyms).expect("few symbols");
    let mut buckets = vec![0u32; n];
    let mut chains = vec![0u32; n];
    for (i, name) in symbols.iter().enumerate() {
        let idx = len32(i + 1);
        let b = usize::try_from(crate::elf::elf_hash(name.as_bytes()) % l.nsyms).expect("small");
        chains[i + 1] = buckets[b];
        buckets[b] = idx;
    }
    w32(o, l.nsyms);
    w32(o, l.nsyms);
    buckets.iter().chain(chains.iter()).for_each(|&v| w32(o, v));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_is_elf32_i386_shared_object() {
        let so = shared_object_i386("libcuda.so.1", &["cuInit"]);
        assert_eq!(&so[..4], b"\x7fELF");
        assert_eq!((so[4], so[5]), (1, 1), "ELFCLASS32, little endian");
        assert_eq!(u16::from_le_bytes([so[16], so[17]]), 3, "ET_DYN");
        assert_eq!(u16::from_le_bytes([so[18], so[19]]), EM_386);
    }

    #[test]
    fn readelf_sees_the_soname_and_the_symbol() {
        let Ok(out) = std::process::Command::new("readelf")
            .arg("--version")
            .output()
        else {
            eprintln!("skipping: no readelf");
            return;
        };
        assert!(out.status.success());
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("libnvidia-ml.so.570.158.01");
        std::fs::write(
            &path,
            shared_object_i386("libnvidia-ml.so.1", &["nvmlInit_v2"]),
        )
        .unwrap();
        let out = std::process::Command::new("readelf")
            .args(["-h", "-d", "--dyn-syms", "-D"])
            .arg(&path)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains("ELF32"), "{text}");
        assert!(text.contains("80386"), "{text}");
        assert!(
            text.contains("Library soname: [libnvidia-ml.so.1]"),
            "{text}"
        );
        assert!(text.contains("Shared library: [libc.so.6]"), "{text}");
    }
}
