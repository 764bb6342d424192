// Fill with a pattern: word i of dst = mix32(i ^ mix32(seed ^ 0x9e3779b9)), where i is the
// word's index within the whole operand (params.base + index in window, mod 2^32). For a
// fixed seed distinct indices give distinct words, so misplaced blocks are detectable.
//
// dst is bound twice over the same range: as vec4 (the bulk, grid-stride loop) and as
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

@group(0) @binding(1) var<storage, read_write> dst4: array<vec4<u32>>;
@group(0) @binding(2) var<storage, read_write> dst1: array<u32>;

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
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
    let n4 = params.count / 4u;
    let stride = groups.x * 256u;
    let key = mix32(params.word ^ 0x9e3779b9u);
    for (var i = gid.x; i < n4; i += stride) {
        let index = params.base + i * 4u;
        dst4[i] = vec4<u32>(
            mix32(index ^ key),
            mix32((index + 1u) ^ key),
            mix32((index + 2u) ^ key),
            mix32((index + 3u) ^ key),
        );
    }
    if (gid.x < params.count % 4u) {
        let j = n4 * 4u + gid.x;
        dst1[j] = mix32((params.base + j) ^ key);
    }
}
