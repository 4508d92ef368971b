//! A tiny writer of real ELF64 x86-64 shared objects.
//!
//! Driver libraries in a simulated node must be genuine shared objects: the real `ldconfig`
//! only records ELF files, reads their `DT_SONAME` and makes soname links from it, and product
//! code may `dlopen` them. Shipping a C compiler into tests for this would be heavy, so we write
//! the few structures a dynamic loader needs ourselves: the ELF header, two `PT_LOAD` segments
//! (read+exec for headers, hash, symbols, strings and code; read+write for `.dynamic`),
//! `PT_DYNAMIC` and `PT_GNU_STACK` (non-executable stack, which new glibc requires for dlopen).
//! Section headers are included so `readelf`, `nm -D` and `objdump` show the usual picture.
//! Every exported symbol is a function that returns 0 (`xor eax, eax; ret`).

const PAGE: u64 = 0x1000;
const EHDR_SIZE: u64 = 64;
const PHDR_SIZE: u64 = 56;
const SHDR_SIZE: u64 = 64;
const SYM_SIZE: u64 = 24;
const DYN_SIZE: u64 = 16;
const PHNUM: u64 = 4;

const PT_LOAD: u32 = 1;
const PT_DYNAMIC: u32 = 2;
const PT_GNU_STACK: u32 = 0x6474_e551;
const PF_X: u32 = 1;
const PF_W: u32 = 2;
const PF_R: u32 = 4;

const DT_NULL: u64 = 0;
const DT_HASH: u64 = 4;
const DT_STRTAB: u64 = 5;
const DT_SYMTAB: u64 = 6;
const DT_STRSZ: u64 = 10;
const DT_SYMENT: u64 = 11;
const DT_SONAME: u64 = 14;

/// Machine code of every exported function: `xor eax, eax; ret`.
const RETURN_ZERO: [u8; 3] = [0x31, 0xc0, 0xc3];

/// Section indexes (fixed layout: null, .hash, .dynsym, .dynstr, .text, .dynamic, .shstrtab).
const SHN_DYNSYM: u32 = 2;
const SHN_DYNSTR: u32 = 3;
const SHN_TEXT: u16 = 4;

/// SysV ELF hash of a symbol name (the `DT_HASH` table's hash function).
pub fn elf_hash(name: &[u8]) -> u32 {
    let mut h: u32 = 0;
    for &b in name {
        h = (h << 4).wrapping_add(u32::from(b));
        let g = h & 0xf000_0000;
        if g != 0 {
            h ^= g >> 24;
        }
        h &= !g;
    }
    h
}

fn align(v: u64, a: u64) -> u64 {
    v.div_ceil(a) * a
}

/// A string table under construction (starts with the empty string at offset 0).
struct StrTab(Vec<u8>);

impl StrTab {
    fn new() -> Self {
        Self(vec![0])
    }
    fn add(&mut self, s: &str) -> u32 {
        let off = u32::try_from(self.0.len()).expect("string table fits in u32");
        self.0.extend_from_slice(s.as_bytes());
        self.0.push(0);
        off
    }
}

/// Little-endian output buffer.
struct Out(Vec<u8>);

impl Out {
    fn u8(&mut self, v: u8) {
        self.0.push(v);
    }
    fn u16(&mut self, v: u16) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn u32(&mut self, v: u32) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn u64(&mut self, v: u64) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn pad_to(&mut self, off: u64) {
        let off = usize::try_from(off).expect("ELF stub is small");
        assert!(self.0.len() <= off, "ELF layout overlap");
        self.0.resize(off, 0);
    }
    fn pos(&self) -> u64 {
        self.0.len() as u64
    }
    #[allow(clippy::too_many_arguments)]
    fn phdr(&mut self, kind: u32, flags: u32, off: u64, size: u64, align: u64) {
        self.u32(kind);
        self.u32(flags);
        self.u64(off); // p_offset
        self.u64(off); // p_vaddr (= offset: the object is linked at 0)
        self.u64(off); // p_paddr
        self.u64(size); // p_filesz
        self.u64(size); // p_memsz
        self.u64(align);
    }
    #[allow(clippy::too_many_arguments)]
    fn shdr(
        &mut self,
        name: u32,
        kind: u32,
        flags: u64,
        off: u64,
        size: u64,
        link: u32,
        info: u32,
        align: u64,
        entsize: u64,
        loaded: bool,
    ) {
        self.u32(name);
        self.u32(kind);
        self.u64(flags);
        self.u64(if loaded { off } else { 0 }); // sh_addr
        self.u64(off);
        self.u64(size);
        self.u32(link);
        self.u32(info);
        self.u64(align);
        self.u64(entsize);
    }
}

/// Offsets and sizes of every part of the object, computed before anything is written.
struct Layout {
    nsyms: u64,
    nbucket: u64,
    hash_off: u64,
    hash_size: u64,
    dynsym_off: u64,
    dynstr_off: u64,
    dynstr_len: u64,
    text_off: u64,
    text_end: u64,
    dyn_off: u64,
    dyn_size: u64,
    shstr_off: u64,
    shstr_len: u64,
    shoff: u64,
}

impl Layout {
    /// The read+exec segment (hash, symbols, strings, text), then `.dynamic` on its own page,
    /// then the section names and headers.
    fn new(nsyms: u64, dynstr_len: u64, ndyn: u64, shstr_len: u64) -> Self {
        let hash_off = EHDR_SIZE + PHNUM * PHDR_SIZE;
        let nbucket = nsyms.max(1);
        let hash_size = (2 + nbucket + nsyms) * 4;
        let dynsym_off = align(hash_off + hash_size, 8);
        let dynstr_off = dynsym_off + nsyms * SYM_SIZE;
        let text_off = align(dynstr_off + dynstr_len, 16);
        let text_end = text_off + RETURN_ZERO.len() as u64;
        let dyn_off = align(text_end, PAGE);
        let dyn_size = ndyn * DYN_SIZE;
        let shstr_off = dyn_off + dyn_size;
        let shoff = align(shstr_off + shstr_len, 8);
        Layout {
            nsyms,
            nbucket,
            hash_off,
            hash_size,
            dynsym_off,
            dynstr_off,
            dynstr_len,
            text_off,
            text_end,
            dyn_off,
            dyn_size,
            shstr_off,
            shstr_len,
            shoff,
        }
    }
}

/// Section names, in section header order after the null section.
const SECTION_NAMES: [&str; 6] = [
    ".hash",
    ".dynsym",
    ".dynstr",
    ".text",
    ".dynamic",
    ".shstrtab",
];

/// Builds an ELF64 x86-64 shared object with `DT_SONAME = soname` that exports `symbols` (each a
/// function returning 0).
pub fn shared_object(soname: &str, symbols: &[&str]) -> Vec<u8> {
    let mut dynstr = StrTab::new();
    let soname_off = dynstr.add(soname);
    let sym_names: Vec<u32> = symbols.iter().map(|s| dynstr.add(s)).collect();
    let mut shstr = StrTab::new();
    let names: Vec<u32> = SECTION_NAMES.iter().map(|n| shstr.add(n)).collect();
    let l = Layout::new(
        symbols.len() as u64 + 1,
        dynstr.0.len() as u64,
        7,
        shstr.0.len() as u64,
    );
    let dyn_entries: [(u64, u64); 7] = [
        (DT_SONAME, u64::from(soname_off)),
        (DT_HASH, l.hash_off),
        (DT_STRTAB, l.dynstr_off),
        (DT_SYMTAB, l.dynsym_off),
        (DT_STRSZ, l.dynstr_len),
        (DT_SYMENT, SYM_SIZE),
        (DT_NULL, 0),
    ];
    let mut o = Out(Vec::with_capacity(
        usize::try_from(l.shoff + 7 * SHDR_SIZE).unwrap_or(0),
    ));
    o.headers(&l);
    o.hash(&l, symbols);
    // .dynsym: the null symbol, then global functions in .text.
    o.pad_to(l.dynsym_off);
    o.pad_to(o.pos() + SYM_SIZE); // the null symbol
    for &name in &sym_names {
        o.u32(name);
        o.u8(0x12); // STB_GLOBAL | STT_FUNC
        o.u8(0); // STV_DEFAULT
        o.u16(SHN_TEXT);
        o.u64(l.text_off);
        o.u64(RETURN_ZERO.len() as u64);
    }
    o.0.extend_from_slice(&dynstr.0);
    o.pad_to(l.text_off);
    o.0.extend_from_slice(&RETURN_ZERO);
    // .dynamic
    o.pad_to(l.dyn_off);
    for (tag, val) in dyn_entries {
        o.u64(tag);
        o.u64(val);
    }
    debug_assert_eq!(o.pos(), l.shstr_off);
    o.0.extend_from_slice(&shstr.0);
    o.section_headers(&l, &names);
    o.0
}

/// A header field that is one of the small constants above.
fn half(v: u64) -> u16 {
    u16::try_from(v).expect("ELF header sizes fit in 16 bits")
}

impl Out {
    /// The ELF header and the program headers.
    fn headers(&mut self, l: &Layout) {
        self.0
            .extend_from_slice(&[0x7f, b'E', b'L', b'F', 2, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
        self.u16(3); // ET_DYN
        self.u16(62); // EM_X86_64
        self.u32(1); // EV_CURRENT
        self.u64(0); // e_entry
        self.u64(EHDR_SIZE); // e_phoff
        self.u64(l.shoff);
        self.u32(0); // e_flags
        self.u16(half(EHDR_SIZE));
        self.u16(half(PHDR_SIZE));
        self.u16(half(PHNUM));
        self.u16(half(SHDR_SIZE));
        self.u16(7); // e_shnum
        self.u16(6); // e_shstrndx
        self.phdr(PT_LOAD, PF_R | PF_X, 0, l.text_end, PAGE);
        self.phdr(PT_LOAD, PF_R | PF_W, l.dyn_off, l.dyn_size, PAGE);
        self.phdr(PT_DYNAMIC, PF_R | PF_W, l.dyn_off, l.dyn_size, 8);
        self.phdr(PT_GNU_STACK, PF_R | PF_W, 0, 0, 16);
    }

    /// `.hash`: nbucket, nchain, buckets, chains (SysV).
    fn hash(&mut self, l: &Layout, symbols: &[&str]) {
        self.pad_to(l.hash_off);
        let nbucket = u32::try_from(l.nbucket).expect("few symbols");
        let nsyms = u32::try_from(l.nsyms).expect("few symbols");
        let mut buckets = vec![0u32; usize::try_from(nbucket).expect("small")];
        let mut chains = vec![0u32; usize::try_from(nsyms).expect("small")];
        for (i, name) in symbols.iter().enumerate() {
            let idx = u32::try_from(i + 1).expect("few symbols");
            let b = usize::try_from(elf_hash(name.as_bytes()) % nbucket).expect("small");
            chains[i + 1] = buckets[b];
            buckets[b] = idx;
        }
        self.u32(nbucket);
        self.u32(nsyms);
        buckets
            .iter()
            .chain(chains.iter())
            .for_each(|&v| self.u32(v));
    }

    /// The section headers (the null one first), for tools such as `readelf`.
    fn section_headers(&mut self, l: &Layout, names: &[u32]) {
        self.pad_to(l.shoff);
        self.pad_to(self.pos() + SHDR_SIZE); // the null section
        let text_len = RETURN_ZERO.len() as u64;
        let dynsym_size = l.nsyms * SYM_SIZE;
        // name, type, flags, offset, size, link, info, align, entsize, loaded
        let rows = [
            (
                names[0],
                5,
                2,
                l.hash_off,
                l.hash_size,
                SHN_DYNSYM,
                0,
                8,
                4,
                true,
            ),
            (
                names[1],
                11,
                2,
                l.dynsym_off,
                dynsym_size,
                SHN_DYNSTR,
                1,
                8,
                SYM_SIZE,
                true,
            ),
            (names[2], 3, 2, l.dynstr_off, l.dynstr_len, 0, 0, 1, 0, true),
            (names[3], 1, 6, l.text_off, text_len, 0, 0, 16, 0, true),
            (
                names[4], 6, 3, l.dyn_off, l.dyn_size, SHN_DYNSTR, 0, 8, DYN_SIZE, true,
            ),
            (names[5], 3, 0, l.shstr_off, l.shstr_len, 0, 0, 1, 0, false),
        ];
        for (name, kind, flags, off, size, link, info, al, entsize, loaded) in rows {
            self.shdr(
                name, kind, flags, off, size, link, info, al, entsize, loaded,
            );
        }
    }
}

#[cfg(test)]
#[path = "elf_tests.rs"]
mod tests;
