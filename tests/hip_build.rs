//! The embedded GPU kernel objects (no GPU needed): when clang was found at build time, every
//! AMD code object is an AMDGPU ELF for the right chip with every kernel (and its `.kd`
//! descriptor), without scratch spills, in wave32; every PTX file targets the right SM and defines
//! every kernel. Also: the driver layer reports "unavailable" cleanly on a machine without
//! `libamdhip64` / `libcuda`.

use deltaspec::backend::hip::{self, kernels};
use std::collections::BTreeSet;

const EM_AMDGPU: u16 = 224;

/// `e_flags & 0xff` (EF_AMDGPU_MACH) per target, as `llvm-readelf -h` prints it.
fn amd_mach(target: &str) -> Option<u32> {
    match target {
        "gfx1100" => Some(0x41),
        "gfx1151" => Some(0x4a),
        "gfx1201" => Some(0x4e),
        _ => None,
    }
}

fn u16_at(b: &[u8], o: usize) -> u16 {
    u16::from_le_bytes(b[o..o + 2].try_into().unwrap())
}
fn u32_at(b: &[u8], o: usize) -> u32 {
    u32::from_le_bytes(b[o..o + 4].try_into().unwrap())
}
fn u64_at(b: &[u8], o: usize) -> usize {
    u64::from_le_bytes(b[o..o + 8].try_into().unwrap()) as usize
}

struct Section<'a> {
    kind: u32,
    link: usize,
    data: &'a [u8],
}

/// The sections of a little-endian ELF64 file.
fn sections(elf: &[u8]) -> Vec<Section<'_>> {
    assert_eq!(&elf[..4], b"\x7fELF", "not an ELF file");
    assert_eq!(elf[4], 2, "not ELF64");
    assert_eq!(elf[5], 1, "not little-endian");
    let (shoff, shentsize, shnum) = (
        u64_at(elf, 40),
        u16_at(elf, 58) as usize,
        u16_at(elf, 60) as usize,
    );
    (0..shnum)
        .map(|i| {
            let h = &elf[shoff + i * shentsize..][..shentsize];
            let (off, size) = (u64_at(h, 24), u64_at(h, 32));
            Section {
                kind: u32_at(h, 4),
                link: u32_at(h, 40) as usize,
                data: if u32_at(h, 4) == 8 {
                    &[]
                } else {
                    &elf[off..off + size]
                }, // 8 = NOBITS
            }
        })
        .collect()
}

/// Names of all symbols in `.symtab` and `.dynsym`.
fn symbols(elf: &[u8]) -> BTreeSet<String> {
    let secs = sections(elf);
    let mut out = BTreeSet::new();
    for s in secs.iter().filter(|s| s.kind == 2 || s.kind == 11) {
        let strtab = secs[s.link].data;
        for sym in s.data.chunks_exact(24) {
            let name = u32_at(sym, 0) as usize;
            let end = strtab[name..].iter().position(|c| *c == 0).unwrap() + name;
            out.insert(String::from_utf8_lossy(&strtab[name..end]).into_owned());
        }
    }
    out
}

/// The AMDGPU metadata note (msgpack) of a code object.
fn amdgpu_metadata(elf: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    for s in sections(elf).iter().filter(|s| s.kind == 7) {
        let mut o = 0;
        while o + 12 <= s.data.len() {
            let (namesz, descsz, kind) = (
                u32_at(s.data, o) as usize,
                u32_at(s.data, o + 4) as usize,
                u32_at(s.data, o + 8),
            );
            let name_at = o + 12;
            let desc_at = name_at + namesz.div_ceil(4) * 4;
            if kind == 32 && &s.data[name_at..name_at + namesz.min(6)] == b"AMDGPU" {
                out.extend_from_slice(&s.data[desc_at..desc_at + descsz]);
            }
            o = desc_at + descsz.div_ceil(4) * 4;
        }
    }
    out
}

/// Every msgpack value that follows the string key `key` (positive integers only; None for
/// other encodings).
fn msgpack_values(meta: &[u8], key: &str) -> Vec<Option<u64>> {
    let mut pat = vec![0xa0 | key.len() as u8];
    pat.extend_from_slice(key.as_bytes());
    let mut out = Vec::new();
    let mut i = 0;
    while let Some(at) = meta[i..]
        .windows(pat.len())
        .position(|w| w == pat.as_slice())
    {
        let v = i + at + pat.len();
        out.push(match meta.get(v) {
            Some(b) if *b < 0x80 => Some(u64::from(*b)),
            Some(0xcc) => meta.get(v + 1).map(|b| u64::from(*b)),
            Some(0xcd) => meta
                .get(v + 1..v + 3)
                .map(|b| u64::from(u16::from_be_bytes([b[0], b[1]]))),
            Some(0xce) => meta
                .get(v + 1..v + 5)
                .map(|b| u64::from(u32::from_be_bytes(b.try_into().unwrap()))),
            _ => None,
        });
        i = v;
    }
    out
}

fn expected(source: &str, ptx: bool) -> Vec<String> {
    kernels::kernel_names()
        .into_iter()
        .filter(|(s, n)| *s == source && (ptx || !kernels::ptx_only(n)))
        .map(|(_, n)| n)
        .collect()
}

/// True when the build embedded kernels; otherwise prints why and the test passes vacuously.
fn have_kernels() -> bool {
    if kernels::blobs().is_empty() {
        eprintln!(
            "SKIP: no kernels embedded: {}",
            kernels::build_error().unwrap_or("unknown reason")
        );
        return false;
    }
    eprintln!("embedded kernels: {}", kernels::build_note());
    true
}

#[test]
fn every_target_has_every_source() {
    if !have_kernels() {
        return;
    }
    let targets = kernels::targets();
    assert_eq!(targets, ["gfx1100", "gfx1151", "gfx1201", "sm_80", "sm_90"]);
    for t in &targets {
        for s in kernels::SOURCES {
            let n = kernels::blobs()
                .iter()
                .filter(|b| b.target == t && b.source == *s)
                .count();
            assert_eq!(n, 1, "{s} for {t}");
        }
    }
    // Every source is in SOURCES (a new hip/*.hip file must be listed there too).
    for b in kernels::blobs() {
        assert!(
            kernels::SOURCES.contains(&b.source),
            "{} is not in kernels::SOURCES",
            b.source
        );
    }
}

#[test]
fn amd_code_objects_are_complete_and_spill_free() {
    if !have_kernels() {
        return;
    }
    for b in kernels::blobs()
        .iter()
        .filter(|b| b.target.starts_with("gfx"))
    {
        let what = format!("{}.{}", b.source, b.target);
        let elf = b.bytes;
        assert_eq!(u16_at(elf, 18), EM_AMDGPU, "{what}: e_machine");
        assert_eq!(elf[7], 64, "{what}: OS/ABI must be AMDGPU HSA");
        let mach = u32_at(elf, 48) & 0xff;
        assert_eq!(
            Some(mach),
            amd_mach(b.target),
            "{what}: e_flags mach {mach:#x}"
        );

        let syms = symbols(elf);
        let names = expected(b.source, false);
        if names.is_empty() {
            // A source of NVIDIA-only kernels (`kernels::ptx_only`) defines none here.
            assert!(
                kernels::kernel_names()
                    .iter()
                    .any(|(s, n)| *s == b.source && kernels::ptx_only(n)),
                "{what}: no kernels expected"
            );
            continue;
        }
        for n in &names {
            assert!(syms.contains(n), "{what}: kernel {n} missing");
            assert!(
                syms.contains(&format!("{n}.kd")),
                "{what}: descriptor {n}.kd missing"
            );
        }

        let meta = amdgpu_metadata(elf);
        assert!(!meta.is_empty(), "{what}: no AMDGPU metadata note");
        let waves = msgpack_values(&meta, ".wavefront_size");
        assert_eq!(
            waves.len(),
            names.len(),
            "{what}: one .wavefront_size per kernel"
        );
        assert!(
            waves.iter().all(|w| *w == Some(32)),
            "{what}: wave32 expected, got {waves:?}"
        );
        for key in [
            ".sgpr_spill_count",
            ".vgpr_spill_count",
            ".private_segment_fixed_size",
        ] {
            let v = msgpack_values(&meta, key);
            assert_eq!(v.len(), names.len(), "{what}: one {key} per kernel");
            assert!(
                v.iter().all(|x| *x == Some(0)),
                "{what}: {key} must be 0 for every kernel, got {v:?}"
            );
        }
    }
}

#[test]
fn ptx_targets_the_right_sm_and_defines_every_kernel() {
    if !have_kernels() {
        return;
    }
    for b in kernels::blobs()
        .iter()
        .filter(|b| b.target.starts_with("sm_"))
    {
        let what = format!("{}.{}", b.source, b.target);
        let text = std::str::from_utf8(b.bytes).expect("PTX is text");
        assert!(
            !text.contains('\0'),
            "{what}: PTX must not contain NUL (the loader appends one)"
        );
        assert!(
            text.lines()
                .any(|l| l.trim() == format!(".target {}", b.target)),
            "{what}: .target {} missing",
            b.target
        );
        let version = text
            .lines()
            .find(|l| l.starts_with(".version"))
            .unwrap_or("");
        let want = if b.target == "sm_90" {
            ".version 8.0"
        } else {
            ".version 7.0"
        };
        assert_eq!(version.trim(), want, "{what}");
        for n in expected(b.source, true) {
            assert!(
                text.contains(&format!(".entry {n}(")),
                "{what}: .entry {n} missing"
            );
        }
        // Local memory means spills or runtime-indexed arrays: slow, and unintended here.
        assert!(!text.contains(".local"), "{what}: uses local memory");
    }
}

/// Overlapped launches (the hip backend's programmatic dependent launch on sm_90+) are only
/// safe if every kernel waits for its predecessor (`grid_begin`, hip/common.h): one that did not
/// could read a buffer before the kernel writing it finished, or finish before it and let the
/// next kernel run early. So every sm_90 entry point must contain the wait; sm_80 code has none
/// (the instruction needs sm_90, and the backend never overlaps launches of that code).
#[test]
fn sm90_kernels_wait_for_their_predecessor() {
    if !have_kernels() {
        return;
    }
    for b in kernels::blobs()
        .iter()
        .filter(|b| b.target.starts_with("sm_"))
    {
        let text = std::str::from_utf8(b.bytes).expect("PTX is text");
        let mut bodies = text.split(".entry ").skip(1).peekable();
        assert!(
            bodies.peek().is_some(),
            "{}.{}: no entry",
            b.source,
            b.target
        );
        for body in bodies {
            let name = body.split('(').next().unwrap_or("?");
            let waits = body.contains("griddepcontrol.wait");
            assert_eq!(
                waits,
                b.target == "sm_90",
                "{}.{}: kernel {name} {} griddepcontrol.wait",
                b.source,
                b.target,
                if waits { "has" } else { "lacks" }
            );
        }
    }
}

/// `e_machine` of NVIDIA cubins.
const EM_CUDA: u16 = 190;

#[test]
fn cubins_where_built_are_cuda_elfs_with_every_kernel() {
    // Built only where ptxas was found (build.rs); CI has none, so this usually checks nothing.
    if !have_kernels() {
        return;
    }
    for b in kernels::blobs() {
        let Some(elf) = b.cubin else { continue };
        let what = format!("{}.{}.cubin", b.source, b.target);
        assert!(
            b.target.starts_with("sm_"),
            "{what}: cubin for a non-NVIDIA target"
        );
        assert_eq!(u16_at(elf, 18), EM_CUDA, "{what}: e_machine");
        // e_flags holds the SM number in its low byte (sm_90: 90).
        let sm: u32 = b.target.trim_start_matches("sm_").parse().unwrap();
        assert_eq!(u32_at(elf, 48) & 0xff, sm, "{what}: e_flags SM");
        let syms = symbols(elf);
        for n in expected(b.source, true) {
            assert!(syms.contains(&n), "{what}: kernel {n} missing");
        }
    }
}

#[test]
fn weight_kernels_cover_the_cpu_types() {
    use deltaspec::tensor::DType;
    for d in [
        DType::F32,
        DType::F16,
        DType::BF16,
        DType::Q4_0,
        DType::Q4_1,
        DType::Q5_0,
        DType::Q5_1,
        DType::Q8_0,
        DType::Q4K,
        DType::Q5K,
        DType::Q6K,
        DType::Iq4Nl,
        DType::Iq4Xs,
    ] {
        let k = 256;
        let s = kernels::weight_kernel(d, k).unwrap_or_else(|| panic!("{d}: no kernel"));
        let (qk, qb, sub) = kernels::geometry(s);
        if d.is_quantized() {
            // The device block: the file's, except where the upload pads it (Q6_K).
            assert_eq!(
                (qk, qb),
                (d.block_elems(), kernels::dev_bytes_for(d, qk).unwrap()),
                "{d}: block geometry"
            );
        }
        assert_eq!(qk % sub, 0, "{d}");
    }
    assert_eq!(kernels::weight_kernel(DType::F32, 7), Some("f32s"));
    assert_eq!(kernels::weight_kernel(DType::F16, 12), Some("f16s"));
    assert_eq!(kernels::weight_kernel(DType::Q8K, 256), None);
}

#[test]
fn unavailable_is_reported_cleanly() {
    // On a machine without the vendor libraries this must be an error with a reason, never a
    // panic; on a GPU machine it opens.
    let report = hip::describe();
    match &report.usable {
        Ok(dev) => eprintln!("hip backend usable here: {dev}"),
        Err(why) => {
            eprintln!("hip backend unavailable (expected without a GPU): {why}");
            assert!(!why.is_empty());
        }
    }
    for name in ["hip", "hip:rocm", "hip:cuda"] {
        match deltaspec::backend::create(name) {
            Ok(b) => eprintln!("{name}: {}", b.name()),
            Err(e) => {
                let msg = e.to_string();
                assert!(msg.contains("unavailable"), "{name}: {msg}");
                eprintln!("{name}: {msg}");
            }
        }
    }
    if !kernels::blobs().is_empty() {
        assert_eq!(
            report.embedded_targets,
            ["gfx1100", "gfx1151", "gfx1201", "sm_80", "sm_90"]
        );
    }
}

#[test]
fn driver_open_fails_cleanly_without_libraries() {
    use deltaspec::backend::hip::driver::{self, Api};
    for api in [Api::Rocm, Api::Cuda] {
        match driver::open(api) {
            Ok(d) => eprintln!(
                "{}: {} (warp {})",
                api.name(),
                d.device_name(),
                d.warp_size()
            ),
            Err(e) => {
                assert!(!e.is_empty());
                eprintln!("{}: unavailable: {e}", api.name());
            }
        }
    }
}
