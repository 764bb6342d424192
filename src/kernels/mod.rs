//! WGSL compute kernels from `shaders/`, and the code that dispatches them.
