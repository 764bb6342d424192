// Checksum: result[0] += sum over words i of mix32(word_i ^ mix32(i)) (wrapping), where i is
// the word's index within the whole operand (params.base + index in window, mod 2^32). The
// terms depend on position, so swapped words change the sum. The caller zeroes result[0]
// before the first window.
//
// src is bound twice over the same range: as vec4 (the bulk, grid-stride loop) and as
// scalars (the 0 to 3 trailing words). Workgroup size 256.

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

@group(0) @binding(1) var<storage, read> src4: array<vec4<u32>>;
@group(0) @binding(2) var<storage, read> src1: array<u32>;
@group(0) @binding(3) var<storage, read_write> result: array<atomic<u32>>;

var<workgroup> group_sum: atomic<u32>;

// lowbias32 (Chris Wellons): a bijection on u32 with good avalanche.
fn mix32(v: u32) -> u32 {
    var x = v;
    x ^= x >> 16u;
    x *= 0x7feb352du;
    x ^= x >> 15u;
    x *= 0x846ca68bu;
    x ^= x >> 16u;
    return x;
}

@compute @workgroup_size(256)
fn main(
    @builtin(global_invocation_id) gid: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
    @builtin(num_workgroups) groups: vec3<u32>,
) {
    let n4 = params.count / 4u;
    let stride = groups.x * 256u;
    var sum = 0u;
    for (var i = gid.x; i < n4; i += stride) {
        let index = params.base + i * 4u;
        let w = src4[i];
        sum += mix32(w.x ^ mix32(index));
        sum += mix32(w.y ^ mix32(index + 1u));
        sum += mix32(w.z ^ mix32(index + 2u));
        sum += mix32(w.w ^ mix32(index + 3u));
    }
    if (gid.x < params.count % 4u) {
        let j = n4 * 4u + gid.x;
        sum += mix32(src1[j] ^ mix32(params.base + j));
    }
    atomicAdd(&group_sum, sum);
    workgroupBarrier();
    if (lid == 0u) {
        atomicAdd(&result[0], atomicLoad(&group_sum));
    }
}
