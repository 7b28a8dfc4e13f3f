//! Compiles the native GPU kernels (`hip/*.hip`) ahead of time with clang >= 19 into AMD code
//! objects (gfx1100, gfx1151, gfx1201) and NVIDIA PTX (sm_80, sm_90), and generates
//! `$OUT_DIR/hip_kernels.rs`: a table of the embedded blobs (`include_bytes!`).
//!
//! Without a usable clang the table is empty and the reason is embedded instead: the crate still
//! builds and the `hip` backend reports itself unavailable with that reason. With clang, a kernel
//! that does not compile fails the build (warnings are errors). `DELTASPEC_CLANG` picks the
//! compiler (`none` skips the kernels).
//!
//! Where NVIDIA's `ptxas` is found as well (`$DELTASPEC_PTXAS`, `ptxas` on the PATH,
//! `/usr/local/cuda/bin/ptxas`; `DELTASPEC_PTXAS=none` skips it), the sm_90 PTX is also
//! assembled into a cubin embedded next to it: a Hopper GPU then loads machine code instead of
//! JIT-compiling ~40 MB of PTX in the first process (40-120 s on a fresh H200).
//! `tools/device/get_ptxas.sh` fetches a ptxas for build machines without CUDA.

use std::env;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;
use std::time::Instant;

/// AMD targets (wave32 RDNA3 / RDNA3.5 / RDNA4).
const AMD_TARGETS: &[&str] = &["gfx1100", "gfx1151", "gfx1201"];

/// The AMD targets to build: the defaults plus `DELTASPEC_AMD_TARGETS` (comma-separated, e.g.
/// `gfx1101,gfx1200` for an RX 7800 XT or RX 9060 XT). A code object runs only on its own
/// target, and the kernels need RDNA3 or later (wave32, the mixed-sign dot4), so only gfx11xx
/// and gfx12xx names are taken; others fail the build with a message saying so.
fn amd_targets() -> Vec<String> {
    let mut v: Vec<String> = AMD_TARGETS.iter().map(|t| t.to_string()).collect();
    let extra = env::var("DELTASPEC_AMD_TARGETS").unwrap_or_default();
    for t in extra.split(',').map(str::trim).filter(|t| !t.is_empty()) {
        let ok = (t.starts_with("gfx11") || t.starts_with("gfx12"))
            && t.len() == 7
            && t[3..].chars().all(|c| c.is_ascii_hexdigit());
        if !ok {
            panic!(
                "DELTASPEC_AMD_TARGETS: '{t}' is not an RDNA3/RDNA4 target (gfx11xx or gfx12xx, e.g. gfx1101)"
            );
        }
        if !v.iter().any(|x| x == t) {
            v.push(t.to_string());
        }
    }
    v
}
/// NVIDIA targets and the PTX ISA version each is emitted with (7.0 is the first with sm_80,
/// 8.0 needs a CUDA 12.0+ driver).
const PTX_TARGETS: &[(&str, &str)] = &[("sm_80", "+ptx70"), ("sm_90", "+ptx80")];
const MIN_CLANG: u32 = 19;
/// PTX targets that also get a cubin where ptxas is found (the GPU we test on is an H200).
const CUBIN_TARGETS: &[&str] = &["sm_90"];

struct Job {
    source: String,
    path: PathBuf,
    target: String,
    out: PathBuf,
    /// Where ptxas writes this PTX job's cubin, if it makes one.
    cubin: Option<PathBuf>,
}

fn main() {
    println!("cargo:rerun-if-changed=hip");
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=DELTASPEC_CLANG");
    println!("cargo:rerun-if-env-changed=DELTASPEC_PTXAS");
    println!("cargo:rerun-if-env-changed=DELTASPEC_AMD_TARGETS");
    println!("cargo:rerun-if-env-changed=DELTASPEC_HIP_DEFINES");
    let amd = amd_targets();
    let out_dir = PathBuf::from(env::var("OUT_DIR").expect("cargo sets OUT_DIR"));
    let hip_dir =
        Path::new(&env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"))
            .join("hip");

    let mut sources: Vec<(String, PathBuf)> = std::fs::read_dir(&hip_dir)
        .map(|rd| {
            rd.filter_map(|e| e.ok())
                .map(|e| e.path())
                .filter(|p| p.extension().is_some_and(|x| x == "hip"))
                .map(|p| (p.file_stem().unwrap().to_string_lossy().into_owned(), p))
                .collect()
        })
        .unwrap_or_default();
    sources.sort();
    if let Ok(rd) = std::fs::read_dir(&hip_dir) {
        for e in rd.flatten() {
            println!("cargo:rerun-if-changed={}", e.path().display());
        }
    }

    let (clang, version) = match find_clang() {
        Ok(c) => c,
        Err(reason) => {
            write_table(&out_dir, &[], Some(&reason), "");
            watch_for_clang();
            return;
        }
    };

    let ptxas = find_ptxas();
    let mut jobs = Vec::new();
    for (name, path) in &sources {
        for t in &amd {
            jobs.push(Job {
                source: name.clone(),
                path: path.clone(),
                target: t.clone(),
                out: out_dir.join(format!("{name}.{t}.hsaco")),
                cubin: None,
            });
        }
        for (t, _) in PTX_TARGETS {
            jobs.push(Job {
                source: name.clone(),
                path: path.clone(),
                target: t.to_string(),
                out: out_dir.join(format!("{name}.{t}.ptx")),
                cubin: (ptxas.is_some() && CUBIN_TARGETS.contains(t))
                    .then(|| out_dir.join(format!("{name}.{t}.cubin"))),
            });
        }
    }

    let start = Instant::now();
    let workers = env::var("NUM_JOBS")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
        .or_else(|| std::thread::available_parallelism().ok().map(|n| n.get()))
        .unwrap_or(2)
        .clamp(1, 32);
    let next = Mutex::new(0usize);
    let failures: Mutex<Vec<String>> = Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for _ in 0..workers {
            s.spawn(|| {
                loop {
                    let i = {
                        let mut n = next.lock().unwrap();
                        let i = *n;
                        *n += 1;
                        i
                    };
                    let Some(job) = jobs.get(i) else { break };
                    let done = compile(&clang, job).and_then(|()| match (&ptxas, &job.cubin) {
                        (Some((p, _)), Some(c)) => assemble(p, job, c),
                        _ => Ok(()),
                    });
                    if let Err(e) = done {
                        failures.lock().unwrap().push(e);
                    }
                }
            });
        }
    });
    let failures = failures.into_inner().unwrap();
    if !failures.is_empty() {
        panic!(
            "\n{} GPU kernel compile(s) failed with {} (set DELTASPEC_CLANG=none to build without native kernels; \
             AMD targets also need lld, e.g. `apt-get install lld-19`):\n\n{}",
            failures.len(),
            clang,
            failures.join("\n\n")
        );
    }
    let cubins = match &ptxas {
        Some((_, v)) => format!(", sm_90 cubins by {v}"),
        None => String::new(),
    };
    let note = format!(
        "{version}; {} kernel objects in {:.1} s{cubins}",
        jobs.len(),
        start.elapsed().as_secs_f64()
    );
    write_table(&out_dir, &jobs, None, &note);
}

/// `ptxas` and its version line, if one runs: `$DELTASPEC_PTXAS` (`none`: no cubins), else
/// `ptxas` on the PATH or CUDA's default location.
fn find_ptxas() -> Option<(String, String)> {
    let candidates: Vec<String> = match env::var("DELTASPEC_PTXAS") {
        Ok(p) if p.eq_ignore_ascii_case("none") || p.is_empty() => return None,
        Ok(p) => vec![p],
        Err(_) => vec!["ptxas".into(), "/usr/local/cuda/bin/ptxas".into()],
    };
    candidates.into_iter().find_map(|p| {
        let o = Command::new(&p).arg("--version").output().ok()?;
        let text = String::from_utf8_lossy(&o.stdout).into_owned();
        let line = text
            .lines()
            .rfind(|l| l.contains("release"))?
            .trim()
            .to_string();
        o.status.success().then_some((p, format!("ptxas {line}")))
    })
}

/// Assembles a PTX job's output into its cubin.
fn assemble(ptxas: &str, job: &Job, cubin: &Path) -> Result<(), String> {
    let mut cmd = Command::new(ptxas);
    cmd.arg(format!("-arch={}", job.target))
        .args(["-O3", "-o"])
        .arg(cubin)
        .arg(&job.out);
    run_tool(
        cmd,
        job,
        ptxas,
        " (DELTASPEC_PTXAS=none builds without cubins)",
    )
}

/// Runs a compile step of `job`; the error names the job, the command and its output.
fn run_tool(mut cmd: Command, job: &Job, tool: &str, hint: &str) -> Result<(), String> {
    match cmd.output() {
        Ok(o) if o.status.success() => Ok(()),
        Ok(o) => Err(format!(
            "{} for {}: {:?}{hint}\n{}{}",
            job.source,
            job.target,
            cmd,
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        )),
        Err(e) => Err(format!(
            "{} for {}: cannot run {tool}: {e}",
            job.source, job.target
        )),
    }
}

/// The first clang >= 19 among `$DELTASPEC_CLANG`, `/opt/rocm/llvm/bin/clang`, `clang-19`,
/// `clang`, with its version line.
fn find_clang() -> Result<(String, String), String> {
    let mut candidates = Vec::new();
    if let Ok(c) = env::var("DELTASPEC_CLANG") {
        if c.eq_ignore_ascii_case("none") || c.is_empty() {
            return Err("native kernels disabled at build time (DELTASPEC_CLANG=none)".into());
        }
        candidates.push(c);
    } else {
        candidates.extend(["/opt/rocm/llvm/bin/clang", "clang-19", "clang"].map(String::from));
    }
    let mut tried = Vec::new();
    for c in candidates {
        match Command::new(&c).arg("--version").output() {
            Ok(o) if o.status.success() => {
                let text = String::from_utf8_lossy(&o.stdout).into_owned();
                let line = text.lines().next().unwrap_or("").trim().to_string();
                match clang_major(&text) {
                    Some(v) if v >= MIN_CLANG => return Ok((c, line)),
                    Some(v) => tried.push(format!("{c}: version {v} < {MIN_CLANG}")),
                    None => tried.push(format!("{c}: unrecognised version output '{line}'")),
                }
            }
            Ok(o) => tried.push(format!("{c}: --version exited with {}", o.status)),
            Err(e) => tried.push(format!("{c}: {e}")),
        }
    }
    Err(format!(
        "no clang >= {MIN_CLANG} found at build time ({}); install clang-19 and lld-19 and rebuild",
        tried.join("; ")
    ))
}

/// Without a clang, reruns this script when one may have been installed since: the folders
/// the candidates live in change their mtime when a package adds a binary (watching a missing
/// path instead would rerun the script, and rebuild the crate, on every build). Without this, a
/// build made before `apt-get install clang-19` kept reporting "no GPU kernels are embedded"
/// until build.rs itself changed.
fn watch_for_clang() {
    let mut dirs: Vec<PathBuf> = ["/usr/bin", "/usr/local/bin", "/opt/rocm/llvm/bin", "/opt"]
        .iter()
        .map(PathBuf::from)
        .collect();
    if let Ok(c) = env::var("DELTASPEC_CLANG") {
        dirs.extend(Path::new(&c).parent().map(Path::to_path_buf));
    }
    for d in dirs.iter().filter(|d| d.is_dir()) {
        println!("cargo:rerun-if-changed={}", d.display());
    }
}

/// The major version in `clang --version` output ("Debian clang version 19.1.7 ...",
/// "AMD clang version 19.0.0git ...").
fn clang_major(text: &str) -> Option<u32> {
    let at = text.find("clang version ")? + "clang version ".len();
    let digits: String = text[at..]
        .chars()
        .take_while(|c| c.is_ascii_digit())
        .collect();
    digits.parse().ok()
}

fn compile(clang: &str, job: &Job) -> Result<(), String> {
    let mut cmd = Command::new(clang);
    if job.target.starts_with("gfx") {
        cmd.args(["-x", "hip", &format!("--offload-arch={}", job.target)])
            .args([
                "-nogpulib",
                "-nogpuinc",
                "--cuda-device-only",
                "--no-gpu-bundle-output",
            ]);
    } else {
        let ptx = PTX_TARGETS
            .iter()
            .find(|(t, _)| *t == job.target)
            .map(|(_, f)| *f)
            .expect("a PTX target");
        cmd.args(["-x", "cuda", &format!("--cuda-gpu-arch={}", job.target)])
            .args(["--cuda-device-only", "-nocudainc", "-nocudalib"])
            .args(["-Xclang", "-target-feature", "-Xclang", ptx, "-S"]);
    }
    // No floating-point contraction: clang's CUDA/HIP default fuses a·b + c into an FMA where it
    // chooses, and it chooses differently in each unrolled variant of a kernel (e.g. the 1-row and
    // 8-row GEMV tiles), so a verify row would differ from the decode of the same row in the last
    // bit (seen on the H200 for Q4_K) and greedy speculation would stop being exactly lossless.
    // The CPU reference (Rust) never contracts either.
    cmd.args(["-O3", "-std=c++17", "-Wall", "-Werror", "-ffp-contract=off"])
        .args(experiment_defines())
        .arg("-o")
        .arg(&job.out)
        .arg(&job.path);
    run_tool(cmd, job, clang, "")
}

/// `$DELTASPEC_HIP_DEFINES`: extra `-D` flags for every kernel (device experiments built into a
/// separate binary, e.g. `DELTASPEC_HIP_DEFINES=DS_EXP_X`; empty for every shipped build), and
/// always `DS_WL_G`, the weight panel's rows ([`wl_group`]).
fn experiment_defines() -> Vec<String> {
    let user = env::var("DELTASPEC_HIP_DEFINES").unwrap_or_default();
    user.split_whitespace()
        .filter(|d| !d.starts_with("DS_WL_G="))
        .map(|d| format!("-D{d}"))
        .chain([format!("-DDS_WL_G={}", wl_group())])
        .collect()
}

/// Rows per panel of the int8 GEMV types' weights (`DS_WL_G` in hip/quant.h, `kernels::WL_GROUP`
/// on the host): 1024, or `DS_WL_G=<n>` among `$DELTASPEC_HIP_DEFINES` (1: row-major, for
/// comparisons; 32: the default before session 36).
fn wl_group() -> u32 {
    env::var("DELTASPEC_HIP_DEFINES")
        .unwrap_or_default()
        .split_whitespace()
        .find_map(|d| d.strip_prefix("DS_WL_G=")?.parse().ok())
        .filter(|&g| g > 0)
        .unwrap_or(1024)
}

fn write_table(out_dir: &Path, jobs: &[Job], error: Option<&str>, note: &str) {
    let mut s = String::from("// Generated by build.rs: the embedded GPU kernel objects.\n");
    s.push_str("pub static BLOBS: &[Blob] = &[\n");
    for j in jobs {
        let cubin = match &j.cubin {
            Some(c) => format!("Some(include_bytes!({:?}))", c.display().to_string()),
            None => "None".into(),
        };
        writeln!(
            s,
            "    Blob {{ target: {:?}, source: {:?}, bytes: include_bytes!({:?}), cubin: {cubin} }},",
            j.target,
            j.source,
            j.out.display().to_string()
        )
        .unwrap();
    }
    s.push_str("];\n");
    writeln!(s, "pub static BUILD_ERROR: Option<&str> = {error:?};").unwrap();
    writeln!(s, "pub static BUILD_NOTE: &str = {note:?};").unwrap();
    // The host lays weights out as the kernels read them (src/backend/hip/layout.rs).
    writeln!(s, "pub const WL_GROUP: usize = {};", wl_group()).unwrap();
    let path = out_dir.join("hip_kernels.rs");
    // Rewrite only on change, so dependants are not rebuilt needlessly.
    if std::fs::read_to_string(&path).ok().as_deref() != Some(s.as_str()) {
        std::fs::write(&path, s).expect("write hip_kernels.rs");
    }
}
