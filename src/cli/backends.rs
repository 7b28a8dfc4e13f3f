//! `deltaspec backends`: every backend, whether it runs here (and why not), and for the native
//! backend the kernel targets embedded in this binary.

use crate::backend::{self, hip};

pub fn run(json: bool) -> anyhow::Result<()> {
    let probe = |name: &str| {
        backend::create(name)
            .map(|b| b.name())
            .map_err(|e| e.to_string())
    };
    let hip_report = hip::describe();
    let rows = [
        (
            "cpu",
            probe("cpu"),
            "reference, f32, rayon threads".to_string(),
        ),
        (
            "wgpu",
            probe("wgpu"),
            "Vulkan through wgpu, WGSL kernels".to_string(),
        ),
        (
            "hip",
            hip_report.usable.clone(),
            format!(
                "embedded kernels: {}",
                hip_report.embedded_targets.join(" ")
            ),
        ),
    ];
    if json {
        let list: Vec<_> = rows
            .iter()
            .map(|(n, r, d)| {
                serde_json::json!({
                    "name": n,
                    "usable": r.is_ok(),
                    "device": r.as_ref().ok(),
                    "reason": r.as_ref().err(),
                    "detail": d,
                })
            })
            .collect();
        println!("{}", serde_json::Value::Array(list));
        return Ok(());
    }
    for (name, r, detail) in rows {
        match r {
            Ok(dev) => println!("{name:<5} usable      {dev}  ({detail})"),
            Err(why) => println!("{name:<5} unavailable {why}  ({detail})"),
        }
    }
    println!("hip targets: {}", hip_report.embedded_targets.join(" "));
    let cubins = hip::kernels::cubin_targets();
    if !cubins.is_empty() {
        println!("hip machine code (no PTX JIT): {}", cubins.join(" "));
    }
    Ok(())
}
