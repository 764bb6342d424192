// Compare: result[0] += the number of words where x and y differ (bitwise). The caller
// zeroes result[0] before the first window.
//
// Every operand is bound twice over the same range: as vec4 (the bulk, grid-stride loop)
// and as scalars (the 0 to 3 trailing words). Workgroup size 256.

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

@group(0) @binding(1) var<storage, read> x4: array<vec4<u32>>;
@group(0) @binding(2) var<storage, read> x1: array<u32>;
@group(0) @binding(3) var<storage, read> y4: array<vec4<u32>>;
@group(0) @binding(4) var<storage, read> y1: array<u32>;
@group(0) @binding(5) var<storage, read_write> result: array<atomic<u32>>;

var<workgroup> group_count: atomic<u32>;

@compute @workgroup_size(256)
fn main(
    @builtin(global_invocation_id) gid: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
    @builtin(num_workgroups) groups: vec3<u32>,
) {
    let n4 = params.count / 4u;
    let stride = groups.x * 256u;
    var differing = vec4<u32>(0u);
    for (var i = gid.x; i < n4; i += stride) {
        differing += select(vec4<u32>(0u), vec4<u32>(1u), x4[i] != y4[i]);
    }
    var count = differing.x + differing.y + differing.z + differing.w;
    if (gid.x < params.count % 4u) {
        let j = n4 * 4u + gid.x;
        count += select(0u, 1u, x1[j] != y1[j]);
    }
    atomicAdd(&group_count, count);
    workgroupBarrier();
    if (lid == 0u) {
        atomicAdd(&result[0], atomicLoad(&group_count));
    }
}
