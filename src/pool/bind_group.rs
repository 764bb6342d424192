//! [`PoolBindGroup`]: a bind group of pool blocks that keeps their memory while it lives.

use super::block_ref::BlockRef;
use super::error::BindingError;

/// A wgpu bind group built by [`BlockBindings::create_bind_group`](super::BlockBindings::create_bind_group),
/// with a [`BlockRef`] for every block it binds.
///
/// Guarantees, whatever the application does with the blocks:
/// - while the bind group lives, the memory it binds serves no other block, even after the
///   blocks are dropped: caching bind groups and recording them again later is safe;
/// - recording it (`pass.set_bind_group(i, &group, &[])`, which goes through
///   `From<&PoolBindGroup> for Option<&wgpu::BindGroup>`, or [`bind_group`](Self::bind_group))
///   counts as exposing its blocks on the calling thread: once both the blocks and the bind
///   group are dropped, the memory still waits for that thread's next submission point;
/// - in a pool with residency, recording it brings its evicted blocks back: eviction keeps
///   a block's place, so the group stays valid;
/// - a block moved by [`Pool::offload`](super::Pool::offload) or
///   [`Pool::prefetch`](super::Pool::prefetch) changes place: a group built before the move
///   still binds the place it left (kept from reuse while the group lives, so it never
///   reaches another block's data), which no longer holds the block's contents. Such a group
///   is [stale](Self::is_stale): [`try_bind_group`](Self::try_bind_group) refuses it,
///   recording it otherwise logs an error, and
///   `kernels::Kernels::submit` refuses a prepared kernel built on
///   a block that moved. Build the group again from the block.
///
/// ```no_run
/// # fn demo(pool: &wgpool::pool::Pool, layout: &wgpu::BindGroupLayout, pipeline: &wgpu::ComputePipeline) -> Result<(), Box<dyn std::error::Error>> {
/// use wgpool::pool::BlockBindings;
/// let (x, y) = (pool.alloc(4096)?, pool.alloc(4096)?);
/// let group = BlockBindings::new()
///     .read_write(0, &x)
///     .read_write(1, &y)
///     .create_bind_group(pool.device(), layout)?;
/// drop(x); // the group keeps x's memory
/// let mut encoder = pool.device().create_command_encoder(&Default::default());
/// {
///     let mut pass = encoder.begin_compute_pass(&Default::default());
///     pass.set_pipeline(pipeline);
///     pass.set_bind_group(0, &group, &[]);
///     pass.dispatch_workgroups(16, 1, 1);
/// }
/// pool.submit([encoder.finish()]);
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
pub struct PoolBindGroup {
    group: wgpu::BindGroup,
    refs: Vec<BlockRef>,
}

impl PoolBindGroup {
    pub(super) fn new(group: wgpu::BindGroup, refs: Vec<BlockRef>) -> PoolBindGroup {
        PoolBindGroup { group, refs }
    }

    /// The wgpu bind group, for recording. Counts as exposing its blocks on the calling
    /// thread (see the type's guarantees).
    ///
    /// A group whose blocks moved since it was built ([`is_stale`](Self::is_stale)) is
    /// returned all the same, as `set_bind_group` needs, and the misuse is logged as an
    /// error; [`try_bind_group`](Self::try_bind_group) refuses it instead.
    #[inline]
    pub fn bind_group(&self) -> &wgpu::BindGroup {
        if let Err(error) = self.check_current() {
            log::error!("recording a stale PoolBindGroup: {error}");
        }
        for reference in &self.refs {
            reference.mark_used();
        }
        &self.group
    }

    /// [`bind_group`](Self::bind_group), refusing a stale group.
    ///
    /// # Errors
    ///
    /// [`BindingError::Stale`] when a block the group binds was moved by
    /// [`Pool::offload`](super::Pool::offload) or [`Pool::prefetch`](super::Pool::prefetch)
    /// after the group was built; nothing is marked used then.
    pub fn try_bind_group(&self) -> Result<&wgpu::BindGroup, BindingError> {
        self.check_current()?;
        Ok(self.bind_group())
    }

    /// Whether a block the group binds moved after the group was built (see
    /// [`BlockRef::is_stale`]): the group then binds memory that no longer holds the block.
    pub fn is_stale(&self) -> bool {
        self.refs.iter().any(BlockRef::is_stale)
    }

    fn check_current(&self) -> Result<(), BindingError> {
        match self.refs.iter().find(|r| r.is_stale()) {
            Some(stale) => Err(BindingError::Stale {
                generation: stale.generation(),
            }),
            None => Ok(()),
        }
    }

    /// The references the group holds, one per block it binds.
    pub fn references(&self) -> &[BlockRef] {
        &self.refs
    }
}

impl<'a> From<&'a PoolBindGroup> for Option<&'a wgpu::BindGroup> {
    /// [`PoolBindGroup::bind_group`], so that `pass.set_bind_group(i, &group, &[])` works as
    /// for a wgpu bind group.
    #[inline]
    fn from(group: &'a PoolBindGroup) -> Self {
        Some(group.bind_group())
    }
}
