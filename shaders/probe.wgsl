// Dispatch-cost probe (`deltaspec bench dispatch`): y[i] = x[i] + 1 for i < n. The kernel does
// next to nothing, so a chain of its dispatches times what a dispatch costs besides its work:
// the barrier, the pipeline and bind-group switch, and launching its workgroups.
// EXTRA adds eight read-only bindings (the fused kernels bind up to a dozen buffers); SMEM
// uses 16 KiB of workgroup memory (as the GEMV's reduction buffer may), so alternating with a
// kernel without shows whether the L1/shared split is reconfigured between dispatches.
// BIG: 1024 dependent fmas in straight-line code (~16 KiB of machine code, like an unrolled
// GEMV), so a chain shows whether a kernel's code is fetched again at every dispatch.
// Constants: WG. Params: 0 n, 1 workgroups per grid row.

@group(0) @binding(#) var<storage, read> X: array<f32>;
//#if EXTRA
@group(0) @binding(#) var<storage, read> E0: array<f32>;
@group(0) @binding(#) var<storage, read> E1: array<f32>;
@group(0) @binding(#) var<storage, read> E2: array<f32>;
@group(0) @binding(#) var<storage, read> E3: array<f32>;
@group(0) @binding(#) var<storage, read> E4: array<f32>;
@group(0) @binding(#) var<storage, read> E5: array<f32>;
@group(0) @binding(#) var<storage, read> E6: array<f32>;
@group(0) @binding(#) var<storage, read> E7: array<f32>;
//#endif
@group(0) @binding(#) var<storage, read_write> Y: array<f32>;

//#if SMEM
var<workgroup> pad: array<f32, 4096>;
//#endif

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) tid: u32) {
    let i = (wid.x + wid.y * pu(1u)) * WG + tid;
    let live = i < pu(0u);
    var v = 1.0;
    if live {
        v += X[i];
    }
//#if EXTRA
    // Read, so the bindings stay live; index 0 exists in every buffer.
    if i == 0u {
        v += E0[0] + E1[0] + E2[0] + E3[0] + E4[0] + E5[0] + E6[0] + E7[0];
    }
//#endif
//#if BIG
//#unroll j 1024
    v = fma(v, pf(2u), pf(3u));
//#end
//#endif
//#if SMEM
    // Every word written, then one read back, so the array stays.
    for (var j = tid; j < 4096u; j += WG) {
        pad[j] = v;
    }
    workgroupBarrier();
    v = pad[4095u - tid];
//#endif
    if live {
        Y[i] = v;
    }
}
