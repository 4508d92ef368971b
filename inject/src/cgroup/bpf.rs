//! A tiny assembler for `BPF_PROG_TYPE_CGROUP_DEVICE` programs.
//!
//! The program gets `struct bpf_cgroup_dev_ctx { u32 access_type; u32 major; u32 minor; }` where
//! `access_type = (access << 16) | type` (type: block 1, char 2; access: mknod 1, read 2,
//! write 4) and returns 1 to allow, 0 to deny. OCI semantics: the *last* matching rule wins and
//! the default is deny, so rules are emitted last-to-first, each as a block that jumps to the next
//! block when a field does not match. A rule matches an access when the requested bits are a
//! subset of the rule's bits. A rule that matches everything ends the program (the verifier
//! rejects unreachable instructions).

use super::{Access, DeviceRule, DeviceType};

/// One eBPF instruction, laid out as the kernel's `struct bpf_insn`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BpfInsn {
    pub code: u8,
    /// dst register in the low nibble, src register in the high nibble.
    pub regs: u8,
    pub off: i16,
    pub imm: i32,
}

// Opcodes used (class | op | source).
const LDX_MEM_W: u8 = 0x61; // BPF_LDX | BPF_MEM | BPF_W
const ALU32_AND_K: u8 = 0x54; // BPF_ALU | BPF_AND | BPF_K
const ALU32_RSH_K: u8 = 0x74; // BPF_ALU | BPF_RSH | BPF_K
const ALU32_MOV_X: u8 = 0xbc; // BPF_ALU | BPF_MOV | BPF_X
const ALU64_MOV_K: u8 = 0xb7; // BPF_ALU64 | BPF_MOV | BPF_K
const JMP_JNE_K: u8 = 0x55; // BPF_JMP | BPF_JNE | BPF_K
const JMP_EXIT: u8 = 0x95; // BPF_JMP | BPF_EXIT

const BPF_DEVCG_DEV_BLOCK: i32 = 1;
const BPF_DEVCG_DEV_CHAR: i32 = 2;

fn insn(code: u8, dst: u8, src: u8, off: i16, imm: i32) -> BpfInsn {
    BpfInsn {
        code,
        regs: (src << 4) | (dst & 0x0f),
        off,
        imm,
    }
}

/// Build the program for `rules` (in OCI order). Registers: r2 = type, r3 = access,
/// r4 = major, r5 = minor, r1 scratch.
pub fn build_device_program(rules: &[DeviceRule]) -> Vec<BpfInsn> {
    let mut prog = vec![
        insn(LDX_MEM_W, 2, 1, 0, 0),
        insn(ALU32_AND_K, 2, 0, 0, 0xffff),
        insn(LDX_MEM_W, 3, 1, 0, 0),
        insn(ALU32_RSH_K, 3, 0, 0, 16),
        insn(LDX_MEM_W, 4, 1, 4, 0),
        insn(LDX_MEM_W, 5, 1, 8, 0),
    ];
    for rule in rules.iter().rev() {
        // Conditional jumps are emitted with a placeholder offset, patched once the block length
        // is known: a failed check skips to the first instruction after this block.
        let mut block: Vec<BpfInsn> = Vec::new();
        let mut jumps = Vec::new();
        match rule.kind {
            DeviceType::All => {}
            DeviceType::Char | DeviceType::Block => {
                let t = if rule.kind == DeviceType::Char {
                    BPF_DEVCG_DEV_CHAR
                } else {
                    BPF_DEVCG_DEV_BLOCK
                };
                jumps.push(block.len());
                block.push(insn(JMP_JNE_K, 2, 0, 0, t));
            }
        }
        if rule.access != Access::ALL {
            block.push(insn(ALU32_MOV_X, 1, 3, 0, 0));
            block.push(insn(ALU32_AND_K, 1, 0, 0, !i32::from(rule.access.0)));
            jumps.push(block.len());
            block.push(insn(JMP_JNE_K, 1, 0, 0, 0));
        }
        if let Some(major) = rule.major {
            jumps.push(block.len());
            // The immediate is the u32 major reinterpreted: the program compares 32-bit values.
            block.push(insn(JMP_JNE_K, 4, 0, 0, major.cast_signed()));
        }
        if let Some(minor) = rule.minor {
            jumps.push(block.len());
            block.push(insn(JMP_JNE_K, 5, 0, 0, minor.cast_signed()));
        }
        block.push(insn(ALU64_MOV_K, 0, 0, 0, i32::from(rule.allow)));
        block.push(insn(JMP_EXIT, 0, 0, 0, 0));
        let len = block.len();
        for j in &jumps {
            block[*j].off = i16::try_from(len - j - 1).expect("a rule is a few instructions");
        }
        prog.extend(block);
        if jumps.is_empty() {
            // Unconditional: everything after it is unreachable.
            return prog;
        }
    }
    prog.push(insn(ALU64_MOV_K, 0, 0, 0, 0));
    prog.push(insn(JMP_EXIT, 0, 0, 0, 0));
    prog
}

/// Interpret a program built by [`build_device_program`] (only the opcodes it emits) for one
/// access; lets the unit tests check the semantics, not just the bytes.
#[cfg(test)]
// It emulates the BPF machine's 32-bit ALU and sign-extended immediates: truncating and
// reinterpreting casts are its semantics.
#[allow(
    clippy::cast_possible_truncation,
    clippy::cast_sign_loss,
    clippy::cast_possible_wrap,
    clippy::cast_lossless
)]
pub(crate) fn interpret(prog: &[BpfInsn], kind: i32, access: u32, major: u32, minor: u32) -> u64 {
    let ctx = [((access << 16) | kind as u32), major, minor];
    let mut r = [0u64; 11];
    let mut pc = 0usize;
    loop {
        let i = prog[pc];
        let (dst, src) = ((i.regs & 0xf) as usize, (i.regs >> 4) as usize);
        pc += 1;
        match i.code {
            LDX_MEM_W => r[dst] = u64::from(ctx[i.off as usize / 4]),
            ALU32_AND_K => r[dst] = u64::from((r[dst] as u32) & (i.imm as u32)),
            ALU32_RSH_K => r[dst] = u64::from((r[dst] as u32) >> i.imm),
            ALU32_MOV_X => r[dst] = u64::from(r[src] as u32),
            ALU64_MOV_K => r[dst] = i.imm as i64 as u64,
            JMP_JNE_K => {
                if r[dst] != i.imm as i64 as u64 {
                    pc += i.off as usize;
                }
            }
            JMP_EXIT => return r[0],
            other => panic!("unexpected opcode {other:#x}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const C: i32 = BPF_DEVCG_DEV_CHAR;
    const RW: u32 = (Access::READ | Access::WRITE) as u32;

    fn rule(
        allow: bool,
        kind: DeviceType,
        maj: Option<u32>,
        min: Option<u32>,
        acc: &str,
    ) -> DeviceRule {
        DeviceRule::new(allow, kind, maj, min, acc).unwrap()
    }

    #[test]
    fn exact_instruction_stream_for_one_char_rule() {
        let p = build_device_program(&[DeviceRule::allow_char(195, 0)]);
        let expect = vec![
            insn(LDX_MEM_W, 2, 1, 0, 0),
            insn(ALU32_AND_K, 2, 0, 0, 0xffff),
            insn(LDX_MEM_W, 3, 1, 0, 0),
            insn(ALU32_RSH_K, 3, 0, 0, 16),
            insn(LDX_MEM_W, 4, 1, 4, 0),
            insn(LDX_MEM_W, 5, 1, 8, 0),
            insn(JMP_JNE_K, 2, 0, 4, C),
            insn(JMP_JNE_K, 4, 0, 3, 195),
            insn(JMP_JNE_K, 5, 0, 2, 0),
            insn(ALU64_MOV_K, 0, 0, 0, 1),
            insn(JMP_EXIT, 0, 0, 0, 0),
            insn(ALU64_MOV_K, 0, 0, 0, 0),
            insn(JMP_EXIT, 0, 0, 0, 0),
        ];
        assert_eq!(p, expect);
        assert_eq!(std::mem::size_of::<BpfInsn>(), 8);
        assert_eq!(insn(LDX_MEM_W, 2, 1, 0, 0).regs, 0x12);
    }

    #[test]
    fn semantics_exact_minor_and_default_deny() {
        let p = build_device_program(&[DeviceRule::allow_char(195, 0)]);
        assert_eq!(interpret(&p, C, RW, 195, 0), 1);
        assert_eq!(
            interpret(&p, C, RW, 195, 1),
            0,
            "CVE-2021-1056: no alias minors"
        );
        assert_eq!(interpret(&p, BPF_DEVCG_DEV_BLOCK, RW, 195, 0), 0);
        assert_eq!(interpret(&p, C, RW, 1, 3), 0);
    }

    #[test]
    fn last_rule_wins_and_access_is_a_subset_check() {
        let rules = [
            rule(false, DeviceType::All, None, None, "rwm"),
            rule(true, DeviceType::Char, Some(1), Some(3), "rw"),
            rule(true, DeviceType::Char, Some(195), None, "rwm"),
            rule(false, DeviceType::Char, Some(195), Some(7), "rwm"),
        ];
        let p = build_device_program(&rules);
        assert_eq!(interpret(&p, C, RW, 1, 3), 1);
        assert_eq!(
            interpret(&p, C, u32::from(Access::MKNOD), 1, 3),
            0,
            "m not granted"
        );
        assert_eq!(interpret(&p, C, RW, 195, 6), 1);
        assert_eq!(interpret(&p, C, RW, 195, 7), 0, "later deny wins");
        assert_eq!(interpret(&p, C, RW, 10, 200), 0);
    }

    #[test]
    fn catch_all_rule_ends_the_program() {
        let rules = [
            rule(true, DeviceType::Char, Some(5), Some(1), "rw"),
            rule(true, DeviceType::All, None, None, "rwm"),
        ];
        let p = build_device_program(&rules);
        // header (6) + mov + exit: nothing after the unconditional allow.
        assert_eq!(p.len(), 8);
        assert_eq!(interpret(&p, C, RW, 99, 99), 1);
        // No rules at all: header + default deny.
        let empty = build_device_program(&[]);
        assert_eq!(empty.len(), 8);
        assert_eq!(interpret(&empty, C, RW, 1, 3), 0);
    }
}
