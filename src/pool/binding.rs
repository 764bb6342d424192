//! Binding blocks: one binding, a binding resource, layout entries, and a checked bind group.
//!
//! # The read-only rule
//!
//! wgpu forbids one buffer from being read-only storage (or uniform) and read-write storage
//! in the same dispatch. Pool blocks share buffers, and which blocks share one depends on
//! where the policy placed them (a segment buffer, or in pages mode one of a range's
//! wrappers). So that the rule never depends on placement, [`BlockBindings`] applies a
//! stricter one that depends only on where blocks come from:
//!
//! **A read-only or uniform binding and a read-write binding of blocks of the same pool are
//! refused in one bind group**, in both memory modes, with
//! [`BindingError::ReadOnlyConflict`], whatever buffers the blocks happen to lie in. Two
//! shapes work:
//!
//! - declare every binding of that pool `var<storage, read_write>` (the crate's own kernels
//!   do this whenever an input shares a buffer with an output), or
//! - keep read-only inputs in another pool, for example the weights of a model: blocks of
//!   different pools never share a buffer.
//!
//! Plain buffers added with [`BlockBindings::buffer`] conflict only with bindings of the same
//! buffer.

use std::num::NonZeroU64;

use super::error::BindingError;
use super::{Block, PoolBindGroup, Residency};
use crate::gpu::scope::catch;

impl Block {
    /// The whole block as one binding: `offset()` and `bound_size()`.
    ///
    /// Counts as exposing the block (see [`FreeTiming`](super::FreeTiming)).
    ///
    /// # Errors
    ///
    /// [`BindingError::TooLarge`] when the block is larger than the device allows one binding
    /// to be (`max_storage_buffer_binding_size` for storage pools): bind it in windows with
    /// [`binding_range`](Block::binding_range) instead. [`BindingError::Offloaded`] for an
    /// offloaded block that kernels cannot reach on this device.
    pub fn binding(&self) -> Result<wgpu::BufferBinding<'_>, BindingError> {
        self.binding_range(0, self.bound_size())
    }

    /// A window `start..start + size` of the block as a binding.
    ///
    /// Guarantee: the binding never reaches a byte outside `offset()..offset() + capacity()`.
    /// Counts as exposing the block (see [`FreeTiming`](super::FreeTiming)).
    ///
    /// # Errors
    ///
    /// [`BindingError::Empty`] for `size` 0, [`BindingError::OutOfRange`] for a window that
    /// leaves the block, [`BindingError::Misaligned`] for a `start` that is not a multiple of
    /// the device's offset alignment, [`BindingError::TooLarge`] above the binding limit, and
    /// [`BindingError::Offloaded`] as for [`binding`](Block::binding).
    pub fn binding_range(
        &self,
        start: u64,
        size: u64,
    ) -> Result<wgpu::BufferBinding<'_>, BindingError> {
        self.checked_window(start, size)?;
        self.expose_resident()?;
        let (buffer, offset) = self.exposed_place();
        Ok(wgpu::BufferBinding {
            buffer,
            offset: offset + start,
            size: NonZeroU64::new(size),
        })
    }

    /// The window `start..start + size` for a bind group that keeps a
    /// [`BlockRef`](super::BlockRef) and marks it used when recorded: checked as by
    /// [`binding_range`](Block::binding_range), but not a use now (an evicted block stays
    /// evicted until the group is recorded).
    fn bind_group_window(
        &self,
        start: u64,
        size: u64,
    ) -> Result<wgpu::BufferBinding<'_>, BindingError> {
        self.checked_window(start, size)?;
        let (buffer, offset) = self.bound_place();
        Ok(wgpu::BufferBinding {
            buffer,
            offset: offset + start,
            size: NonZeroU64::new(size),
        })
    }

    /// Refuses a window that cannot be bound (see [`binding_range`](Block::binding_range)).
    fn checked_window(&self, start: u64, size: u64) -> Result<(), BindingError> {
        let limits = self.limits();
        if self.residency() == Residency::Host && !self.host_bindable() {
            return Err(BindingError::Offloaded);
        }
        let Some(size) = NonZeroU64::new(size) else {
            return Err(BindingError::Empty { offset: start });
        };
        if start
            .checked_add(size.get())
            .is_none_or(|end| end > self.capacity())
        {
            return Err(BindingError::OutOfRange {
                offset: start,
                size: size.get(),
                capacity: self.capacity(),
            });
        }
        if start % limits.offset_alignment != 0 {
            return Err(BindingError::Misaligned {
                offset: start,
                alignment: limits.offset_alignment,
            });
        }
        if size.get() > limits.binding_limit {
            return Err(BindingError::TooLarge {
                size: size.get(),
                limit: limits.binding_limit,
                kind: limits.binding_kind,
            });
        }
        Ok(())
    }

    /// The whole block as a [`wgpu::BindingResource`], like wgpu's
    /// `Buffer::as_entire_binding` (which would bind the whole segment, other blocks
    /// included).
    ///
    /// # Errors
    ///
    /// As for [`binding`](Block::binding).
    pub fn as_entire_binding(&self) -> Result<wgpu::BindingResource<'_>, BindingError> {
        self.binding().map(wgpu::BindingResource::Buffer)
    }
}

impl<'a> TryFrom<&'a Block> for wgpu::BindingResource<'a> {
    type Error = BindingError;

    /// [`Block::as_entire_binding`].
    fn try_from(block: &'a Block) -> Result<Self, BindingError> {
        block.as_entire_binding()
    }
}

/// How a shader declares a buffer binding.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum BindingAccess {
    /// `var<storage, read>`.
    ReadOnly,
    /// `var<storage, read_write>`.
    ReadWrite,
    /// `var<uniform>`.
    Uniform,
}

impl BindingAccess {
    /// The layout entry of a buffer binding with this access, without a minimum size.
    ///
    /// ```
    /// use wgpool::pool::BindingAccess;
    /// let entry = BindingAccess::ReadWrite.layout_entry(2, wgpu::ShaderStages::COMPUTE);
    /// assert_eq!(entry.binding, 2);
    /// ```
    pub fn layout_entry(
        self,
        binding: u32,
        visibility: wgpu::ShaderStages,
    ) -> wgpu::BindGroupLayoutEntry {
        let ty = match self {
            BindingAccess::ReadOnly => wgpu::BufferBindingType::Storage { read_only: true },
            BindingAccess::ReadWrite => wgpu::BufferBindingType::Storage { read_only: false },
            BindingAccess::Uniform => wgpu::BufferBindingType::Uniform,
        };
        wgpu::BindGroupLayoutEntry {
            binding,
            visibility,
            ty: wgpu::BindingType::Buffer {
                ty,
                has_dynamic_offset: false,
                min_binding_size: None,
            },
            count: None,
        }
    }

    /// Whether wgpu counts the binding as a read-only use of its buffer.
    fn read_only(self) -> bool {
        self != BindingAccess::ReadWrite
    }
}

/// The bindings of one bind group, made of blocks (or windows of blocks), from which it
/// builds the layout and the bind group after checking them.
///
/// ```no_run
/// use wgpool::config::Config;
/// use wgpool::gpu::{GpuContext, HeadlessOptions};
/// use wgpool::pool::{BlockBindings, Pool};
///
/// let gpu = GpuContext::headless(&HeadlessOptions::default())?;
/// let activations = Pool::from_context(&gpu, Config::default())?;
/// let weights = Pool::from_context(&gpu, Config::default())?;
/// let (x, w, y) = (activations.alloc(4096)?, weights.alloc(4096)?, activations.alloc(4096)?);
/// let bindings = BlockBindings::new()
///     .read_write(0, &x) // the same pool as y: read_write in WGSL too
///     .read(1, &w) // another pool: may stay `var<storage, read>`
///     .read_write(2, &y);
/// let layout = bindings.create_layout(gpu.device(), wgpu::ShaderStages::COMPUTE)?;
/// let group = bindings.create_bind_group(gpu.device(), &layout)?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Default)]
pub struct BlockBindings<'a> {
    entries: Vec<Entry<'a>>,
    /// The first error met while adding entries, returned by the builders.
    error: Option<BindingError>,
}

#[derive(Debug)]
struct Entry<'a> {
    binding: u32,
    access: BindingAccess,
    window: wgpu::BufferBinding<'a>,
    /// The block the window lies in; `None` for a plain buffer.
    block: Option<&'a Block>,
}

impl<'a> Entry<'a> {
    /// Whether the two bindings may not differ in read-only-ness: blocks of one pool, or the
    /// same buffer.
    fn shares_memory_with(&self, other: &Entry<'_>) -> bool {
        match (self.block, other.block) {
            (Some(a), Some(b)) => a.same_pool(b),
            _ => self.window.buffer == other.window.buffer,
        }
    }
}

impl<'a> BlockBindings<'a> {
    /// No bindings yet.
    pub fn new() -> Self {
        BlockBindings::default()
    }

    /// Binds the whole block as `var<storage, read>`.
    pub fn read(self, binding: u32, block: &'a Block) -> Self {
        self.whole(binding, BindingAccess::ReadOnly, block)
    }

    /// Binds the whole block as `var<storage, read_write>`.
    pub fn read_write(self, binding: u32, block: &'a Block) -> Self {
        self.whole(binding, BindingAccess::ReadWrite, block)
    }

    /// Binds the whole block as `var<uniform>` (a block of a `UNIFORM` pool).
    pub fn uniform(self, binding: u32, block: &'a Block) -> Self {
        self.whole(binding, BindingAccess::Uniform, block)
    }

    /// Binds the window `start..start + size` of `block` with `access` (checked as by
    /// [`Block::binding_range`]).
    pub fn window(
        self,
        binding: u32,
        access: BindingAccess,
        block: &'a Block,
        start: u64,
        size: u64,
    ) -> Self {
        self.block(binding, access, block, block.bind_group_window(start, size))
    }

    fn whole(self, binding: u32, access: BindingAccess, block: &'a Block) -> Self {
        let window = block.bind_group_window(0, block.bound_size());
        self.block(binding, access, block, window)
    }

    /// Binds a plain buffer range that is not a pool block (for example a uniform buffer of
    /// the application's own). It conflicts with the read-only rule only through the same
    /// buffer; pool blocks go through [`read`](Self::read), [`read_write`](Self::read_write),
    /// [`uniform`](Self::uniform) or [`window`](Self::window), which the bind group keeps.
    pub fn buffer(
        mut self,
        binding: u32,
        access: BindingAccess,
        window: wgpu::BufferBinding<'a>,
    ) -> Self {
        self.entries.push(Entry {
            binding,
            access,
            window,
            block: None,
        });
        self
    }

    fn block(
        mut self,
        binding: u32,
        access: BindingAccess,
        block: &'a Block,
        window: Result<wgpu::BufferBinding<'a>, BindingError>,
    ) -> Self {
        let window = if access == BindingAccess::ReadWrite && block.is_read_only() {
            Err(BindingError::ReadOnlyBlock)
        } else {
            window
        };
        match window {
            Ok(window) => self.entries.push(Entry {
                binding,
                access,
                window,
                block: Some(block),
            }),
            Err(error) => {
                self.error.get_or_insert(error);
            }
        }
        self
    }

    /// Checks the bindings: each block could be bound, all blocks come from pools on one
    /// device, no binding number is given twice, and no read-only (or uniform) binding
    /// shares a pool (or, for plain buffers, a buffer) with a read-write binding (see the
    /// read-only rule in the module documentation). The answer depends only on the blocks'
    /// pools and the accesses, never on where the blocks were placed.
    ///
    /// # Errors
    ///
    /// The first binding error met while adding blocks (among them
    /// [`BindingError::ReadOnlyBlock`] for a read-write binding of a block declared
    /// read-only), then
    /// [`BindingError::ForeignDevice`], [`BindingError::DuplicateBinding`] or
    /// [`BindingError::ReadOnlyConflict`].
    pub fn check(&self) -> Result<(), BindingError> {
        if let Some(error) = &self.error {
            return Err(error.clone());
        }
        if let Some(first) = self.entries.iter().find_map(|entry| entry.block)
            && let Some(entry) = self
                .entries
                .iter()
                .find(|entry| entry.block.is_some_and(|block| !block.same_device(first)))
        {
            return Err(BindingError::ForeignDevice {
                binding: entry.binding,
            });
        }
        for (i, entry) in self.entries.iter().enumerate() {
            for other in &self.entries[i + 1..] {
                if entry.binding == other.binding {
                    return Err(BindingError::DuplicateBinding {
                        binding: entry.binding,
                    });
                }
                if entry.access.read_only() == other.access.read_only()
                    || !entry.shares_memory_with(other)
                {
                    continue;
                }
                let (read_only, read_write) = if entry.access.read_only() {
                    (entry.binding, other.binding)
                } else {
                    (other.binding, entry.binding)
                };
                return Err(BindingError::ReadOnlyConflict {
                    read_only,
                    read_write,
                });
            }
        }
        Ok(())
    }

    /// Checks that every block's pool is on `device`.
    fn check_device(&self, device: &wgpu::Device) -> Result<(), BindingError> {
        match self
            .entries
            .iter()
            .find(|entry| entry.block.is_some_and(|block| !block.is_on(device)))
        {
            Some(entry) => Err(BindingError::ForeignDevice {
                binding: entry.binding,
            }),
            None => Ok(()),
        }
    }

    /// The layout entries, in the order the bindings were added.
    ///
    /// # Errors
    ///
    /// As for [`check`](Self::check).
    pub fn layout_entries(
        &self,
        visibility: wgpu::ShaderStages,
    ) -> Result<Vec<wgpu::BindGroupLayoutEntry>, BindingError> {
        self.check()?;
        Ok(self
            .entries
            .iter()
            .map(|entry| entry.access.layout_entry(entry.binding, visibility))
            .collect())
    }

    /// A bind group layout for these bindings.
    ///
    /// # Errors
    ///
    /// As for [`check`](Self::check), [`BindingError::ForeignDevice`] when a block's pool is
    /// on another device than `device`, and [`BindingError::Gpu`] when wgpu refuses the
    /// layout.
    pub fn create_layout(
        &self,
        device: &wgpu::Device,
        visibility: wgpu::ShaderStages,
    ) -> Result<wgpu::BindGroupLayout, BindingError> {
        let entries = self.layout_entries(visibility)?;
        self.check_device(device)?;
        catch(device, || {
            device.create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor {
                label: Some("wgpool block bindings"),
                entries: &entries,
            })
        })
        .map_err(BindingError::Gpu)
    }

    /// The bind group of these bindings in `layout`. It keeps the memory of every block it
    /// binds from reuse while it lives (see [`PoolBindGroup`]).
    ///
    /// # Errors
    ///
    /// As for [`check`](Self::check), [`BindingError::ForeignDevice`] when a block's pool is
    /// on another device than `device`, [`BindingError::Gpu`] when wgpu refuses the group
    /// (for example a layout that does not match), and [`BindingError::DeviceLost`] once a
    /// block's pool knows its device is lost.
    pub fn create_bind_group(
        &self,
        device: &wgpu::Device,
        layout: &wgpu::BindGroupLayout,
    ) -> Result<PoolBindGroup, BindingError> {
        self.check()?;
        self.check_device(device)?;
        if let Some(lost) = self
            .entries
            .iter()
            .filter_map(|entry| entry.block)
            .find_map(|block| block.shared().check_device().err())
        {
            return Err(BindingError::DeviceLost(lost));
        }
        let entries: Vec<wgpu::BindGroupEntry<'_>> = self
            .entries
            .iter()
            .map(|entry| wgpu::BindGroupEntry {
                binding: entry.binding,
                resource: wgpu::BindingResource::Buffer(entry.window.clone()),
            })
            .collect();
        let group = catch(device, || {
            device.create_bind_group(&wgpu::BindGroupDescriptor {
                label: Some("wgpool block bindings"),
                layout,
                entries: &entries,
            })
        })
        .map_err(BindingError::Gpu)?;
        let refs = self
            .entries
            .iter()
            .filter_map(|entry| entry.block.map(Block::reference))
            .collect();
        Ok(PoolBindGroup::new(group, refs))
    }
}
