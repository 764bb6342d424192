// STREAM copy, f16: c = a.
//
// Every operand is bound twice over the same range: as vec4 (the bulk, grid-stride loop)
// and as scalars (the 0 to 3 trailing elements). Workgroup size 256.

enable f16;

// Parameters of one dispatch window (16 bytes, one uniform binding).
struct Params {
    // Elements in this window.
    count: u32,
    // Global index of the window's first element within the whole operand (mod 2^32).
    base: u32,
    // Constant word (fill) or seed (fill_pattern); unused elsewhere.
    word: u32,
    // The scalar s of scale and triad; unused elsewhere.
    scalar: f32,
}

@group(0) @binding(0) var<uniform> params: Params;

@group(0) @binding(1) var<storage, read> a4: array<vec4<f16>>;
@group(0) @binding(2) var<storage, read> a1: array<f16>;
@group(0) @binding(3) var<storage, read_write> c4: array<vec4<f16>>;
@group(0) @binding(4) var<storage, read_write> c1: array<f16>;

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
    let n4 = params.count / 4u;
    let stride = groups.x * 256u;
    for (var i = gid.x; i < n4; i += stride) {
        c4[i] = a4[i];
    }
    if (gid.x < params.count % 4u) {
        let j = n4 * 4u + gid.x;
        c1[j] = a1[j];
    }
}
