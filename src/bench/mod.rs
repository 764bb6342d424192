//! `wgpool bench`: kernels on pool-like blocks and on raw buffers, and in-device moves.

pub mod half;
pub mod rng;
