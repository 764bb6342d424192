//! [`Kernels`]: the compiled kernels of one device, and the checks every call goes through.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use wgpu::util::DeviceExt;

use super::call::KernelCall;
use super::error::KernelError;
use super::kernel::{Access, Kernel, shader_source};
use super::operand::Operand;
use super::prepared::{PreparedKernel, Window};
use super::window::split_windows;
use crate::gpu::scope::catch;
use crate::gpu::transfer::read_region;

/// Workgroup size of every kernel (`@workgroup_size(256)` in the shaders).
pub const WORKGROUP_SIZE: u32 = 256;

/// Bytes of the per-window parameter block (`struct Params` in the shaders).
const PARAMS_BYTES: u64 = 16;

/// Tuning knobs of [`Kernels`]; `Default` uses the device's limits.
///
/// ```
/// use wgpool::kernels::KernelOptions;
/// let options = KernelOptions::default().with_max_workgroups(1);
/// assert_eq!(options.max_workgroups, Some(1));
/// assert_eq!(options.max_window_bytes, None);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct KernelOptions {
    /// Largest range bound in one dispatch, in bytes. `None`: the device's
    /// `max_storage_buffer_binding_size`. Smaller values (tests) must be at least twice the
    /// binding granule (`max(min_storage_buffer_offset_alignment, 16)`); they are rounded
    /// down to a multiple of it.
    pub max_window_bytes: Option<u64>,
    /// Most workgroups per dispatch; the grid-stride loops cover the rest. `None`: the
    /// device's `max_compute_workgroups_per_dimension`.
    pub max_workgroups: Option<u32>,
}

impl KernelOptions {
    /// Binds at most `bytes` of an operand in one dispatch (see
    /// [`max_window_bytes`](Self::max_window_bytes)).
    pub fn with_max_window_bytes(mut self, bytes: u64) -> Self {
        self.max_window_bytes = Some(bytes);
        self
    }

    /// Dispatches at most `workgroups` workgroups at a time (see
    /// [`max_workgroups`](Self::max_workgroups)).
    pub fn with_max_workgroups(mut self, workgroups: u32) -> Self {
        self.max_workgroups = Some(workgroups);
        self
    }
}

struct Pipeline {
    layout: wgpu::BindGroupLayout,
    pipeline: wgpu::ComputePipeline,
}

/// The kernels of one device. Pipelines are compiled on first use and cached; the struct is
/// `Send + Sync` and meant to be built once per device.
///
/// Guarantees of every call (checked in [`prepare`](Self::prepare), which returns a
/// [`KernelError`] naming the operand otherwise):
/// - only bytes inside the output (or the 4-byte result word) are written;
/// - operands of any size up to the buffer size work, split into dispatches over binding
///   windows no larger than the device allows;
/// - operands may share buffers; an output may be exactly the same range as an input
///   (in-place), but may not partly overlap one; a move's source and destination may not
///   overlap at all.
pub struct Kernels {
    device: wgpu::Device,
    queue: wgpu::Queue,
    features: wgpu::Features,
    storage_alignment: u64,
    uniform_stride: u64,
    window_bytes: u64,
    max_workgroups: u32,
    pipelines: Mutex<HashMap<(Kernel, Access), Arc<Pipeline>>>,
}

impl Kernels {
    /// Kernels for `device` with the device's own limits.
    pub fn new(device: &wgpu::Device, queue: &wgpu::Queue) -> Kernels {
        Self::with_options(device, queue, KernelOptions::default())
            .expect("default kernel options are always valid")
    }

    /// Kernels for `device` with explicit tuning (for example a small binding window, so a
    /// test can cross window boundaries with small buffers).
    pub fn with_options(
        device: &wgpu::Device,
        queue: &wgpu::Queue,
        options: KernelOptions,
    ) -> Result<Kernels, KernelError> {
        let limits = device.limits();
        let storage_alignment = u64::from(limits.min_storage_buffer_offset_alignment);
        let granule = storage_alignment.max(16);
        let device_window = limits.max_storage_buffer_binding_size / granule * granule;
        let window_bytes = match options.max_window_bytes {
            None => device_window,
            Some(bytes) => {
                if bytes < 2 * granule || bytes > limits.max_storage_buffer_binding_size {
                    return Err(KernelError::BadOption {
                        name: "max_window_bytes",
                        value: bytes,
                        allowed: format!(
                            "{}..={} (twice the binding granule up to the device's storage binding limit)",
                            2 * granule,
                            limits.max_storage_buffer_binding_size
                        ),
                    });
                }
                bytes / granule * granule
            }
        };
        let device_groups = limits.max_compute_workgroups_per_dimension;
        let max_workgroups = match options.max_workgroups {
            None => device_groups,
            Some(groups) => {
                if groups == 0 || groups > device_groups {
                    return Err(KernelError::BadOption {
                        name: "max_workgroups",
                        value: u64::from(groups),
                        allowed: format!("1..={device_groups}"),
                    });
                }
                groups
            }
        };
        Ok(Kernels {
            device: device.clone(),
            queue: queue.clone(),
            features: device.features(),
            storage_alignment,
            uniform_stride: u64::from(limits.min_uniform_buffer_offset_alignment).max(PARAMS_BYTES),
            window_bytes,
            max_workgroups,
            pipelines: Mutex::new(HashMap::new()),
        })
    }

    /// Bytes bound per dispatch at most.
    pub fn window_bytes(&self) -> u64 {
        self.window_bytes
    }

    /// Alignment every operand offset must have.
    pub fn offset_alignment(&self) -> u64 {
        self.storage_alignment
    }

    /// Whether the device can run `kernel`.
    pub fn supports(&self, kernel: Kernel) -> bool {
        self.features.contains(kernel.required_features())
    }

    /// The kernels this device can run, in [`Kernel::ALL`] order.
    pub fn supported(&self) -> Vec<Kernel> {
        Kernel::ALL
            .into_iter()
            .filter(|&k| self.supports(k))
            .collect()
    }

    /// Compiles the pipelines of `kernels` now (both input-access variants), so that the first
    /// call does not pay for it.
    pub fn compile(&self, kernels: &[Kernel]) -> Result<(), KernelError> {
        for &kernel in kernels {
            self.check_supported(kernel)?;
            for access in [Access::ReadOnlyInputs, Access::ReadWriteInputs] {
                self.pipeline(kernel, access)?;
            }
        }
        Ok(())
    }

    /// Checks a call and builds its bind groups and parameters, so that it can be recorded
    /// any number of times without further allocation.
    pub fn prepare(&self, call: &KernelCall<'_>) -> Result<PreparedKernel, KernelError> {
        let kernel = call.kernel;
        self.check_supported(kernel)?;
        if call.dtype != kernel.dtype() {
            return Err(KernelError::NoSuchDtype {
                kernel: kernel.name(),
                dtype: call.dtype.as_str(),
                allowed: "f32, f16",
            });
        }
        let data = self.check_operands(call)?;
        let access = if data.iter().take(call.inputs.len()).any(|(_, input)| {
            call.output.is_some_and(|o| o.same_buffer(input))
                || call.result.is_some_and(|r| r.same_buffer(input))
        }) {
            Access::ReadWriteInputs
        } else {
            Access::ReadOnlyInputs
        };
        let pipeline = self.pipeline(kernel, access)?;
        let size = data.first().map_or(0, |(_, o)| o.size);
        let granule = self.storage_alignment.max(16);
        let windows = split_windows(size, self.window_bytes, granule);
        let element = kernel.dtype().size();

        catch(&self.device, || {
            let mut params =
                vec![0u8; (windows.len().max(1) as u64 * self.uniform_stride) as usize];
            for (index, &(start, length)) in windows.iter().enumerate() {
                let at = index * self.uniform_stride as usize;
                let words = [
                    (length / element) as u32,
                    (start / element) as u32,
                    call.word,
                    call.scalar.to_bits(),
                ];
                params[at..at + 16].copy_from_slice(bytemuck::cast_slice(&words));
            }
            let params_buffer = self
                .device
                .create_buffer_init(&wgpu::util::BufferInitDescriptor {
                    label: Some("wgpool kernel params"),
                    contents: &params,
                    usage: wgpu::BufferUsages::UNIFORM,
                });
            let windows = windows
                .iter()
                .enumerate()
                .map(|(index, &(start, length))| {
                    let mut entries = vec![wgpu::BindGroupEntry {
                        binding: 0,
                        resource: wgpu::BindingResource::Buffer(wgpu::BufferBinding {
                            buffer: &params_buffer,
                            offset: index as u64 * self.uniform_stride,
                            size: wgpu::BufferSize::new(PARAMS_BYTES),
                        }),
                    }];
                    for (slot, (_, operand)) in data.iter().enumerate() {
                        let (vec_offset, vec_size) = if length >= 16 {
                            (operand.offset + start, length)
                        } else {
                            // Never accessed (no whole vec4), but a vec4 binding needs 16
                            // bytes; `check_operands` made sure the buffer has them.
                            (0, 16)
                        };
                        let binding = 1 + 2 * slot as u32;
                        entries.push(storage_entry(binding, operand.buffer, vec_offset, vec_size));
                        entries.push(storage_entry(
                            binding + 1,
                            operand.buffer,
                            operand.offset + start,
                            length,
                        ));
                    }
                    if let Some(result) = call.result {
                        entries.push(storage_entry(
                            1 + 2 * data.len() as u32,
                            result.buffer,
                            result.offset,
                            4,
                        ));
                    }
                    let bind_group = self.device.create_bind_group(&wgpu::BindGroupDescriptor {
                        label: Some("wgpool kernel window"),
                        layout: &pipeline.layout,
                        entries: &entries,
                    });
                    let units = (length / element).div_ceil(4);
                    let groups = units
                        .div_ceil(u64::from(WORKGROUP_SIZE))
                        .clamp(1, u64::from(self.max_workgroups))
                        as u32;
                    Window { bind_group, groups }
                })
                .collect();
            PreparedKernel {
                kernel,
                access,
                pipeline: pipeline.pipeline.clone(),
                windows,
                params: params_buffer,
                clear: call.result.map(|r| (r.buffer.clone(), r.offset)),
                operand_bytes: size,
                blocks: data
                    .iter()
                    .map(|(_, operand)| operand)
                    .chain(call.result.as_ref())
                    .filter_map(|operand| operand.block().map(|block| block.reference()))
                    .collect(),
            }
        })
        .map_err(KernelError::from)
    }

    /// Prepares `call` and records it into `encoder` as one compute pass.
    pub fn record(
        &self,
        encoder: &mut wgpu::CommandEncoder,
        call: &KernelCall<'_>,
    ) -> Result<(), KernelError> {
        let prepared = self.prepare(call)?;
        prepared.record(encoder, None);
        Ok(())
    }

    /// Prepares `call`, records it and submits it. Returns once submitted; work submitted
    /// later runs after it.
    pub fn run(&self, call: &KernelCall<'_>) -> Result<(), KernelError> {
        let prepared = self.prepare(call)?;
        self.submit(&prepared)
    }

    /// Records a prepared kernel and submits it.
    ///
    /// # Errors
    ///
    /// [`KernelError::Stale`] for a kernel prepared before one of its operand blocks moved
    /// (nothing is submitted), and the device's errors.
    pub fn submit(&self, prepared: &PreparedKernel) -> Result<(), KernelError> {
        if prepared.is_stale() {
            return Err(KernelError::Stale);
        }
        catch(&self.device, || {
            let mut encoder = self.device.create_command_encoder(&Default::default());
            prepared.record(&mut encoder, None);
            self.queue.submit([encoder.finish()]);
        })?;
        Ok(())
    }

    /// Records an in-device move `dst = src` (copy kernel, bit-exact) into `encoder`. Source
    /// and destination may be in the same buffer if they do not overlap.
    pub fn record_move(
        &self,
        encoder: &mut wgpu::CommandEncoder,
        src: Operand<'_>,
        dst: Operand<'_>,
    ) -> Result<(), KernelError> {
        self.record(encoder, &KernelCall::move_bytes(src, dst))
    }

    /// Moves `src` to `dst` inside the device with the copy kernel, and submits. Sizes are
    /// multiples of 4 bytes; offsets multiples of [`offset_alignment`](Self::offset_alignment).
    pub fn move_bytes(&self, src: Operand<'_>, dst: Operand<'_>) -> Result<(), KernelError> {
        self.run(&KernelCall::move_bytes(src, dst))
    }

    /// Runs the checksum kernel on `src` and waits for its value
    /// (equal to [`checksum`](super::checksum)`(words of src, 0)`).
    pub fn checksum(&self, src: Operand<'_>) -> Result<u32, KernelError> {
        self.reduce(Kernel::Checksum, &[src])
    }

    /// Runs the compare kernel and waits for the number of 4-byte words where `x` and `y`
    /// differ.
    pub fn count_mismatches(&self, x: Operand<'_>, y: Operand<'_>) -> Result<u32, KernelError> {
        self.reduce(Kernel::Compare, &[x, y])
    }

    fn reduce(&self, kernel: Kernel, inputs: &[Operand<'_>]) -> Result<u32, KernelError> {
        let result = catch(&self.device, || {
            self.device.create_buffer(&wgpu::BufferDescriptor {
                label: Some("wgpool reduction result"),
                size: 16,
                usage: wgpu::BufferUsages::STORAGE
                    | wgpu::BufferUsages::COPY_DST
                    | wgpu::BufferUsages::COPY_SRC,
                mapped_at_creation: false,
            })
        })?;
        let word = Operand::new(&result, 0, 4);
        let call = match (kernel, inputs) {
            (Kernel::Checksum, &[src]) => KernelCall::checksum(src, word),
            (_, &[x, y]) => KernelCall::compare(x, y, word),
            _ => unreachable!("reduce is only called with checksum or compare operands"),
        };
        self.run(&call)?;
        let bytes = read_region(&self.device, &self.queue, &result, 0, 4)?;
        Ok(u32::from_le_bytes(bytes[..4].try_into().expect("4 bytes")))
    }

    fn check_supported(&self, kernel: Kernel) -> Result<(), KernelError> {
        let missing = kernel.required_features() - self.features;
        if missing.is_empty() {
            Ok(())
        } else {
            Err(KernelError::Unsupported {
                kernel: format!("{}_{}", kernel.name(), kernel.dtype().as_str()),
                missing: format!("{missing:?}"),
            })
        }
    }

    /// Checks every operand and returns the data operands (inputs, then output) with their
    /// role names.
    fn check_operands<'a>(
        &self,
        call: &KernelCall<'a>,
    ) -> Result<Vec<(&'static str, Operand<'a>)>, KernelError> {
        let kernel = call.kernel;
        let mut data: Vec<(&'static str, Operand<'a>)> = kernel
            .input_names()
            .iter()
            .copied()
            .zip(call.inputs.iter().copied())
            .collect();
        if let (Some(name), Some(output)) = (kernel.output_name(), call.output) {
            data.push((name, output));
        }
        for &(role, operand) in &data {
            self.check_device(role, operand)?;
            self.check_placement(role, operand, wgpu::BufferUsages::STORAGE, "STORAGE")?;
            if operand.size % 4 != 0 {
                return Err(KernelError::BadSize {
                    role,
                    size: operand.size,
                });
            }
            if operand.size > 0 && operand.size < 16 && operand.buffer.size() < 16 {
                return Err(KernelError::TinyBuffer {
                    role,
                    size: operand.size,
                    buffer_size: operand.buffer.size(),
                });
            }
        }
        if let Some(&(first, reference)) = data.first() {
            for &(role, operand) in &data[1..] {
                if operand.size != reference.size {
                    return Err(KernelError::SizeMismatch {
                        kernel: kernel.name(),
                        first,
                        expected: reference.size,
                        role,
                        size: operand.size,
                    });
                }
            }
        }
        if let (Some(name), Some(output)) = (kernel.output_name(), call.output) {
            for (&role, input) in kernel.input_names().iter().zip(&call.inputs) {
                if kernel == Kernel::Move && input.overlaps(&output) {
                    return Err(KernelError::Overlap {
                        first: role,
                        second: name,
                        detail: "a move's source and destination must be disjoint",
                    });
                }
                if input.overlaps(&output) && !input.same_range(&output) {
                    return Err(KernelError::Overlap {
                        first: role,
                        second: name,
                        detail: "an output may be exactly an input's range (in place) or disjoint from it",
                    });
                }
            }
        }
        if kernel.has_result() {
            let Some(result) = call.result else {
                return Err(KernelError::ResultTooSmall { size: 0 });
            };
            self.check_device("result", result)?;
            self.check_placement(
                "result",
                result,
                wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST,
                "STORAGE | COPY_DST",
            )?;
            if result.size < 4 {
                return Err(KernelError::ResultTooSmall { size: result.size });
            }
            let word = Operand::new(result.buffer, result.offset, 4);
            for &(role, operand) in &data {
                if word.overlaps(&operand) {
                    return Err(KernelError::Overlap {
                        first: role,
                        second: "result",
                        detail: "the result word must be disjoint from the data",
                    });
                }
            }
        }
        Ok(data)
    }

    /// Refuses an operand made from a block of a pool on another device, or from an evicted
    /// block that could not be brought back when the operand was taken and cannot be now
    /// (another thread's recording may have held the room then).
    fn check_device(&self, role: &'static str, operand: Operand<'_>) -> Result<(), KernelError> {
        match operand.block() {
            Some(block) if !block.is_on(&self.device) => Err(KernelError::ForeignDevice { role }),
            Some(block) if block.is_evicted() => {
                block
                    .use_resident()
                    .map_err(|source| KernelError::NotResident {
                        role,
                        source: Box::new(source),
                    })
            }
            _ => Ok(()),
        }
    }

    fn check_placement(
        &self,
        role: &'static str,
        operand: Operand<'_>,
        usage: wgpu::BufferUsages,
        usage_name: &'static str,
    ) -> Result<(), KernelError> {
        if operand.offset % self.storage_alignment != 0 {
            return Err(KernelError::Misaligned {
                role,
                offset: operand.offset,
                alignment: self.storage_alignment,
            });
        }
        let end = operand.offset.saturating_add(operand.size);
        if end > operand.buffer.size() {
            return Err(KernelError::OutOfRange {
                role,
                offset: operand.offset,
                end,
                buffer_size: operand.buffer.size(),
            });
        }
        if !operand.buffer.usage().contains(usage) {
            return Err(KernelError::MissingUsage {
                role,
                needed: usage_name,
            });
        }
        Ok(())
    }

    fn pipeline(&self, kernel: Kernel, access: Access) -> Result<Arc<Pipeline>, KernelError> {
        let mut cache = self.pipelines.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(pipeline) = cache.get(&(kernel, access)) {
            return Ok(pipeline.clone());
        }
        let label = format!("wgpool {}_{}", kernel.name(), kernel.dtype().as_str());
        let pipeline = catch(&self.device, || {
            let module = self
                .device
                .create_shader_module(wgpu::ShaderModuleDescriptor {
                    label: Some(&label),
                    source: wgpu::ShaderSource::Wgsl(shader_source(kernel, access)),
                });
            let layout = self
                .device
                .create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor {
                    label: Some(&label),
                    entries: &layout_entries(kernel, access),
                });
            let pipeline_layout =
                self.device
                    .create_pipeline_layout(&wgpu::PipelineLayoutDescriptor {
                        label: Some(&label),
                        bind_group_layouts: &[Some(&layout)],
                        immediate_size: 0,
                    });
            let pipeline = self
                .device
                .create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
                    label: Some(&label),
                    layout: Some(&pipeline_layout),
                    module: &module,
                    entry_point: Some("main"),
                    compilation_options: Default::default(),
                    cache: None,
                });
            Pipeline { layout, pipeline }
        })?;
        let pipeline = Arc::new(pipeline);
        cache.insert((kernel, access), pipeline.clone());
        Ok(pipeline)
    }
}

fn storage_entry(
    binding: u32,
    buffer: &wgpu::Buffer,
    offset: u64,
    size: u64,
) -> wgpu::BindGroupEntry<'_> {
    wgpu::BindGroupEntry {
        binding,
        resource: wgpu::BindingResource::Buffer(wgpu::BufferBinding {
            buffer,
            offset,
            size: wgpu::BufferSize::new(size),
        }),
    }
}

/// The bind group layout of `kernel`: binding 0 the parameters, then two views (vec4 and
/// scalar) per data operand, inputs first, then the result word.
fn layout_entries(kernel: Kernel, access: Access) -> Vec<wgpu::BindGroupLayoutEntry> {
    let entry = |binding: u32, ty: wgpu::BufferBindingType| wgpu::BindGroupLayoutEntry {
        binding,
        visibility: wgpu::ShaderStages::COMPUTE,
        ty: wgpu::BindingType::Buffer {
            ty,
            has_dynamic_offset: false,
            min_binding_size: None,
        },
        count: None,
    };
    let mut entries = vec![entry(0, wgpu::BufferBindingType::Uniform)];
    let inputs_read_only = access == Access::ReadOnlyInputs;
    let mut binding = 1;
    for _ in kernel.input_names() {
        for _view in 0..2 {
            entries.push(entry(
                binding,
                wgpu::BufferBindingType::Storage {
                    read_only: inputs_read_only,
                },
            ));
            binding += 1;
        }
    }
    if kernel.output_name().is_some() {
        for _view in 0..2 {
            entries.push(entry(
                binding,
                wgpu::BufferBindingType::Storage { read_only: false },
            ));
            binding += 1;
        }
    }
    if kernel.has_result() {
        entries.push(entry(
            binding,
            wgpu::BufferBindingType::Storage { read_only: false },
        ));
    }
    entries
}

impl std::fmt::Debug for Kernels {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Kernels")
            .field("window_bytes", &self.window_bytes)
            .field("max_workgroups", &self.max_workgroups)
            .field("offset_alignment", &self.storage_alignment)
            .finish()
    }
}

/// `Kernels` is shared across threads by the pool.
const _: fn() = || {
    fn check<T: Send + Sync>() {}
    check::<Kernels>();
};
