//! Crafted ELF files with a compat note (also used by `cuda_compat`'s tests), and the note
//! reader's tests.

use super::*;

/// An ELF shared object (64- or 32-bit, little- or big-endian) whose only content is a
/// `.note.cuda.fwd_compatibility` section with owner `owner` and description `desc`, aligned
/// to `align` bytes, after `pad` bytes of filler (a library's code).
pub(crate) fn build(
    is64: bool,
    big: bool,
    owner: &str,
    desc: &str,
    align: u64,
    pad: usize,
) -> Vec<u8> {
    let put = |out: &mut Vec<u8>, v: u64, n: usize| {
        let b = v.to_le_bytes();
        let mut f: Vec<u8> = b[..n].to_vec();
        if big {
            f.reverse();
        }
        out.extend_from_slice(&f);
    };
    let word = if is64 { 8 } else { 4 };
    let ehsize: usize = if is64 { 64 } else { 52 };
    let shentsize: usize = if is64 { 64 } else { 40 };
    // The note: header, owner and description, each padded to 4 bytes.
    let pad4 = |v: &mut Vec<u8>| v.resize(v.len().div_ceil(4) * 4, 0);
    let mut note = Vec::new();
    put(&mut note, (owner.len() + 1) as u64, 4);
    put(&mut note, (desc.len() + 1) as u64, 4);
    put(&mut note, 1, 4);
    note.extend_from_slice(owner.as_bytes());
    note.push(0);
    pad4(&mut note);
    note.extend_from_slice(desc.as_bytes());
    note.push(0);
    pad4(&mut note);
    let names = b"\0.shstrtab\0.note.cuda.fwd_compatibility\0";
    let note_off = ehsize + pad;
    let names_off = note_off + note.len();
    let sh_off = (names_off + names.len()).div_ceil(8) * 8;
    let mut out = Vec::new();
    out.extend_from_slice(b"\x7fELF");
    out.extend_from_slice(&[if is64 { 2 } else { 1 }, if big { 2 } else { 1 }, 1, 0]);
    out.resize(16, 0);
    put(&mut out, 3, 2); // e_type ET_DYN
    put(&mut out, 62, 2); // e_machine
    put(&mut out, 1, 4); // e_version
    put(&mut out, 0, word); // e_entry
    put(&mut out, 0, word); // e_phoff
    put(&mut out, sh_off as u64, word); // e_shoff
    put(&mut out, 0, 4); // e_flags
    put(&mut out, ehsize as u64, 2);
    put(&mut out, 0, 2); // e_phentsize
    put(&mut out, 0, 2); // e_phnum
    put(&mut out, shentsize as u64, 2);
    put(&mut out, 3, 2); // e_shnum
    put(&mut out, 1, 2); // e_shstrndx
    assert_eq!(out.len(), ehsize);
    out.resize(note_off, 0x90);
    out.extend_from_slice(&note);
    out.extend_from_slice(names);
    out.resize(sh_off, 0);
    let section = |out: &mut Vec<u8>, name: u64, kind: u64, off: usize, size: usize, al: u64| {
        let start = out.len();
        put(out, name, 4);
        put(out, kind, 4);
        put(out, 0, word); // sh_flags
        put(out, 0, word); // sh_addr
        put(out, off as u64, word);
        put(out, size as u64, word);
        put(out, 0, 4); // sh_link
        put(out, 0, 4); // sh_info
        put(out, al, word);
        put(out, 0, word); // sh_entsize
        assert_eq!(out.len() - start, shentsize);
    };
    section(&mut out, 0, 0, 0, 0, 0);
    section(&mut out, 1, 3, names_off, names.len(), 1);
    section(&mut out, 11, 7, note_off, note.len(), align);
    out
}

/// The note of NVIDIA's 575.57.08 compat libcuda (its `cuda-elf-header_test.go` expectation).
pub(crate) const NOTE_575: &str = r#"{"Format":1,"CUDA Version":"12.9","Driver":[535,550,560,565,570,575],"Device":[1,2,7,8,9,10,11,12,13,14]}"#;

fn note(bytes: &[u8]) -> Result<Option<CompatNote>, NoteError> {
    read_note(bytes, u64::try_from(bytes.len()).unwrap())
}

#[test]
fn reads_the_note_in_every_class_and_byte_order() {
    let want = CompatNote {
        cuda_version: "12.9".into(),
        drivers: vec![535, 550, 560, 565, 570, 575],
    };
    for is64 in [true, false] {
        for big in [false, true] {
            let elf = build(is64, big, NOTE_OWNER, NOTE_575, 4, 100);
            assert_eq!(
                note(&elf).unwrap(),
                Some(want.clone()),
                "64={is64} be={big}"
            );
        }
    }
}

#[test]
fn other_owners_and_empty_alignment_are_no_note() {
    assert_eq!(
        note(&build(true, false, "Someone Else", NOTE_575, 4, 0)).unwrap(),
        None
    );
    // NVIDIA aligns the owner's length to sh_addralign; 0 gives an empty owner.
    assert_eq!(
        note(&build(true, false, NOTE_OWNER, NOTE_575, 0, 0)).unwrap(),
        None
    );
}

#[test]
fn malformed_files_are_errors_and_reads_stay_bounded() {
    assert!(note(b"").is_err());
    assert!(note(b"not an elf at all, just text........................................").is_err());
    let elf = build(true, false, NOTE_OWNER, NOTE_575, 4, 0);
    assert!(
        note(&elf[..elf.len() - 10]).is_err(),
        "truncated section table"
    );
    let mut huge = elf.clone();
    huge[0x3c] = 0xff; // e_shnum 0x..ff: past the section limit or the file
    huge[0x3d] = 0xff;
    assert!(note(&huge).unwrap_err().to_string().contains("section"));
    // A note section claiming gigabytes is refused from its header, before any read.
    let big_note = build(true, false, NOTE_OWNER, &"x".repeat(70_000), 4, 0);
    assert!(note(&big_note).unwrap_err().to_string().contains("limit"));
    let bad_json = build(true, false, NOTE_OWNER, "{\"Driver\": \"570\"}", 4, 0);
    assert!(note(&bad_json).is_err());
}

/// cudacompat.go `useCompatLibraries` + `compatElfHeader.UseCompat` with a host driver
/// version and no host CUDA version (what the CDI spec passes).
#[test]
fn the_note_decides_before_the_major_rule() {
    let n = CompatNote {
        cuda_version: "12.9".into(),
        drivers: vec![535, 550, 570, 575],
    };
    // Same major, newer compat, host branch listed: the note says yes, the major rule no.
    assert!(use_compat_libraries("570.200.01", "570.158.01", Some(&n)));
    assert!(!use_compat_libraries("570.200.01", "570.158.01", None));
    // Newer major but the host branch is not listed: the note says no.
    assert!(!use_compat_libraries("575.57.08", "560.35.03", Some(&n)));
    assert!(use_compat_libraries("575.57.08", "560.35.03", None));
    // Listed branch, compat not newer.
    assert!(!use_compat_libraries("570.100.01", "570.158.01", Some(&n)));
    assert!(!use_compat_libraries(
        "575.57.08",
        "not-a-version",
        Some(&n)
    ));
    assert_eq!(parse_version("575.57.08"), Some(vec![575, 57, 8]));
    assert_eq!(parse_version("575"), Some(vec![575, 0, 0]));
    assert_eq!(parse_version("1.2.3.4"), None);
}
