//! wgpu device set-up and adapter facts (owned by the GPU-context work; see issue 3 and 4).
