//! A headless wgpu device: instance, adapter, device and queue, opened from options and the
//! usual wgpu environment variables.

use std::sync::Arc;

use super::error::GpuError;
use super::error_log::ErrorLog;
use super::memory::DeviceMemoryInfo;

/// Features [`GpuContext::headless`] enables whenever the adapter has them.
///
/// - `TIMESTAMP_QUERY` and `TIMESTAMP_QUERY_INSIDE_ENCODERS`: GPU timing of passes and copies.
/// - `SHADER_F16`: the `f16` kernels.
/// - `MAPPABLE_PRIMARY_BUFFERS`: mappable buffers that kernels can also bind.
pub const OPTIONAL_FEATURES: wgpu::Features = wgpu::Features::TIMESTAMP_QUERY
    .union(wgpu::Features::TIMESTAMP_QUERY_INSIDE_ENCODERS)
    .union(wgpu::Features::SHADER_F16)
    .union(wgpu::Features::MAPPABLE_PRIMARY_BUFFERS);

/// How to choose and open a headless device. `Default` means "whatever the environment says".
///
/// ```
/// use wgpool::gpu::HeadlessOptions;
/// let options = HeadlessOptions::default()
///     .with_adapter_name("NVIDIA")
///     .with_backends(wgpu::Backends::VULKAN);
/// assert_eq!(options.adapter_name.as_deref(), Some("NVIDIA"));
/// ```
#[derive(Clone, Debug, Default)]
#[non_exhaustive]
pub struct HeadlessOptions {
    /// Pick the first adapter whose name contains this (case-insensitive). Overrides
    /// `WGPU_ADAPTER_NAME`; when both are `None`, wgpu's `request_adapter` chooses.
    pub adapter_name: Option<String>,
    /// Backends to search. Overrides `WGPU_BACKEND`; when both are `None`, all backends.
    pub backends: Option<wgpu::Backends>,
    /// Power preference for `request_adapter`. Overrides `WGPU_POWER_PREF` (`low`, `high`,
    /// `none`); when both are `None`, wgpu's default.
    pub power_preference: Option<wgpu::PowerPreference>,
    /// Features the device must have on top of [`OPTIONAL_FEATURES`]; opening fails with
    /// [`GpuError::MissingFeatures`] when the adapter lacks any of them.
    pub required_features: wgpu::Features,
    /// wgpu's memory allocation hints (for example `Manual` sub-allocation block sizes).
    pub memory_hints: wgpu::MemoryHints,
    /// wgpu's memory budget thresholds. Applied after the environment is read, because
    /// `InstanceDescriptor::with_env` resets them.
    pub memory_budget_thresholds: wgpu::MemoryBudgetThresholds,
}

impl HeadlessOptions {
    /// Picks the first adapter whose name contains `name` (see
    /// [`adapter_name`](Self::adapter_name)).
    pub fn with_adapter_name(mut self, name: impl Into<String>) -> Self {
        self.adapter_name = Some(name.into());
        self
    }

    /// Searches only `backends` (see [`backends`](Self::backends)).
    pub fn with_backends(mut self, backends: wgpu::Backends) -> Self {
        self.backends = Some(backends);
        self
    }

    /// Asks `request_adapter` for `preference` (see
    /// [`power_preference`](Self::power_preference)).
    pub fn with_power_preference(mut self, preference: wgpu::PowerPreference) -> Self {
        self.power_preference = Some(preference);
        self
    }

    /// Requires `features` on top of [`OPTIONAL_FEATURES`] (see
    /// [`required_features`](Self::required_features)).
    pub fn with_required_features(mut self, features: wgpu::Features) -> Self {
        self.required_features = features;
        self
    }

    /// wgpu's memory allocation hints (see [`memory_hints`](Self::memory_hints)).
    pub fn with_memory_hints(mut self, hints: wgpu::MemoryHints) -> Self {
        self.memory_hints = hints;
        self
    }

    /// wgpu's memory budget thresholds (see
    /// [`memory_budget_thresholds`](Self::memory_budget_thresholds)).
    pub fn with_memory_budget_thresholds(
        mut self,
        thresholds: wgpu::MemoryBudgetThresholds,
    ) -> Self {
        self.memory_budget_thresholds = thresholds;
        self
    }
}

/// An open headless device and the facts about it.
///
/// Guarantees, once [`GpuContext::headless`] returned `Ok`:
/// - the device was opened with `required_limits = adapter.limits()`, so every limit is the
///   adapter's best, not wgpu's conservative defaults;
/// - [`features`](Self::features) is exactly what the device has enabled: every feature of
///   [`OPTIONAL_FEATURES`] the adapter supports, plus the required ones;
/// - the device was opened by [`sparse::request_device`](super::sparse::request_device): it
///   can map pages wherever the adapter has Vulkan sparse binding
///   ([`page_mapping`](Self::page_mapping) says which);
/// - uncaptured wgpu errors are recorded in [`errors`](Self::errors) and printed; they never
///   panic. Use error scopes to attribute an error to an operation.
pub struct GpuContext {
    instance: wgpu::Instance,
    adapter: wgpu::Adapter,
    device: wgpu::Device,
    queue: wgpu::Queue,
    info: wgpu::AdapterInfo,
    limits: wgpu::Limits,
    features: wgpu::Features,
    errors: ErrorLog,
}

impl GpuContext {
    /// Opens a device without a window or surface.
    ///
    /// Adapter choice, in order: `options.adapter_name`, then `WGPU_ADAPTER_NAME` (first
    /// adapter whose name contains the text, case-insensitive), else `request_adapter` with
    /// the power preference from `options` or `WGPU_POWER_PREF`. Backends come from
    /// `options.backends`, then `WGPU_BACKEND`, else all. Other instance settings
    /// (`WGPU_VALIDATION`, `WGPU_DEBUG`, ...) come from the environment as wgpu reads them.
    ///
    /// ```no_run
    /// use wgpool::gpu::{GpuContext, HeadlessOptions};
    /// let ctx = GpuContext::headless(&HeadlessOptions::default())?;
    /// println!("{} ({:?})", ctx.info().name, ctx.info().backend);
    /// # Ok::<(), wgpool::gpu::GpuError>(())
    /// ```
    pub fn headless(options: &HeadlessOptions) -> Result<GpuContext, GpuError> {
        let instance = create_instance(options)?;
        let adapter = select_adapter(&instance, options)?;
        open(instance, adapter, options)
    }

    /// Opens a device on an adapter that was already chosen (for example from
    /// [`enumerate_adapters`]), with the same feature, limit and error-handler guarantees as
    /// [`headless`](Self::headless). `options` supplies the required features and hints; its
    /// adapter choice fields are ignored.
    pub fn from_adapter(
        instance: wgpu::Instance,
        adapter: wgpu::Adapter,
        options: &HeadlessOptions,
    ) -> Result<GpuContext, GpuError> {
        open(instance, adapter, options)
    }

    /// The wgpu instance the adapter came from.
    pub fn instance(&self) -> &wgpu::Instance {
        &self.instance
    }

    /// The adapter the device was opened on.
    pub fn adapter(&self) -> &wgpu::Adapter {
        &self.adapter
    }

    /// The device.
    pub fn device(&self) -> &wgpu::Device {
        &self.device
    }

    /// The device's only queue.
    pub fn queue(&self) -> &wgpu::Queue {
        &self.queue
    }

    /// Name, backend, device type, driver and ids of the adapter.
    pub fn info(&self) -> &wgpu::AdapterInfo {
        &self.info
    }

    /// The limits the device was opened with (the adapter's own limits).
    pub fn limits(&self) -> &wgpu::Limits {
        &self.limits
    }

    /// The features enabled on the device.
    pub fn features(&self) -> wgpu::Features {
        self.features
    }

    /// The record of uncaptured errors and device loss.
    pub fn errors(&self) -> &ErrorLog {
        &self.errors
    }

    /// The device's page mapping (Vulkan sparse binding), or why it has none. Pools on a
    /// device with page mapping can map pages (`expandable_segments`).
    pub fn page_mapping(
        &self,
    ) -> Result<super::sparse::SparseDevice, super::sparse::NoPageMapping> {
        super::sparse::sparse_device(&self.device)
    }

    /// What pools on this device get (page mapping, host overflow, timestamps, f16, memory
    /// heaps and budget, binding limits), and why not where they do not.
    pub fn capabilities(&self) -> super::capabilities::BackendCapabilities {
        super::capabilities::BackendCapabilities::of_device(&self.adapter, &self.device)
    }

    /// Memory heaps, and budget where the driver reports it. `None` off Vulkan.
    pub fn memory_info(&self) -> Option<DeviceMemoryInfo> {
        DeviceMemoryInfo::query(&self.adapter)
    }

    /// Blocks until all submitted work has finished.
    pub fn wait_idle(&self) -> Result<(), wgpu::PollError> {
        self.device
            .poll(wgpu::PollType::wait_indefinitely())
            .map(|_| ())
    }
}

impl std::fmt::Debug for GpuContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GpuContext")
            .field("adapter", &self.info.name)
            .field("backend", &self.info.backend)
            .field("features", &self.features)
            .finish_non_exhaustive()
    }
}

/// Creates an instance from the environment, with `options.backends` and
/// `options.memory_budget_thresholds` applied on top. Readies pools' owner bias first
/// (as `wgpool::pool::prepare_owner_bias` does), before wgpu starts threads.
pub fn create_instance(options: &HeadlessOptions) -> Result<wgpu::Instance, GpuError> {
    crate::asymmetric_fence::available();
    let mut descriptor = wgpu::InstanceDescriptor::new_without_display_handle_from_env();
    descriptor.backends = match options.backends {
        Some(backends) => backends,
        None => backends_from_env()?,
    };
    descriptor.memory_budget_thresholds = options.memory_budget_thresholds;
    Ok(wgpu::Instance::new(descriptor))
}

/// Every adapter the instance can see on its backends, in wgpu's order.
pub fn enumerate_adapters(instance: &wgpu::Instance) -> Vec<wgpu::Adapter> {
    pollster::block_on(instance.enumerate_adapters(wgpu::Backends::all()))
}

/// `WGPU_BACKEND`, or all backends when it is not set. A value naming no known backend is
/// an error rather than a silent "no adapters".
fn backends_from_env() -> Result<wgpu::Backends, GpuError> {
    match std::env::var("WGPU_BACKEND") {
        Err(_) => Ok(wgpu::Backends::all()),
        Ok(value) => {
            let backends = wgpu::Backends::from_comma_list(&value);
            if backends.is_empty() {
                Err(GpuError::BadEnvironment {
                    name: "WGPU_BACKEND",
                    value,
                    allowed: "a comma-separated list of vulkan, metal, dx12, gl, webgpu",
                })
            } else {
                Ok(backends)
            }
        }
    }
}

fn power_preference(options: &HeadlessOptions) -> Result<wgpu::PowerPreference, GpuError> {
    if let Some(preference) = options.power_preference {
        return Ok(preference);
    }
    match std::env::var("WGPU_POWER_PREF") {
        Err(_) => Ok(wgpu::PowerPreference::default()),
        Ok(value) => wgpu::PowerPreference::from_env().ok_or(GpuError::BadEnvironment {
            name: "WGPU_POWER_PREF",
            value,
            allowed: "low, high, none",
        }),
    }
}

fn select_adapter(
    instance: &wgpu::Instance,
    options: &HeadlessOptions,
) -> Result<wgpu::Adapter, GpuError> {
    let wanted = match &options.adapter_name {
        Some(name) => Some((name.clone(), "the adapter option")),
        None => std::env::var("WGPU_ADAPTER_NAME")
            .ok()
            .filter(|name| !name.is_empty())
            .map(|name| (name, "WGPU_ADAPTER_NAME")),
    };
    let adapters = enumerate_adapters(instance);
    if adapters.is_empty() {
        return Err(no_adapter());
    }
    if let Some((wanted, source_name)) = wanted {
        let needle = wanted.to_lowercase();
        return adapters
            .iter()
            .find(|adapter| adapter.get_info().name.to_lowercase().contains(&needle))
            .cloned()
            .ok_or_else(|| GpuError::NoMatchingAdapter {
                wanted,
                source_name: source_name.to_string(),
                available: adapter_list(&adapters),
            });
    }
    let request = wgpu::RequestAdapterOptions {
        power_preference: power_preference(options)?,
        // Limit bucketing hides the real limits (a fingerprinting defence for browsers);
        // this tool wants the device's actual limits.
        ..Default::default()
    };
    match pollster::block_on(instance.request_adapter(&request)) {
        Ok(adapter) => Ok(adapter),
        // request_adapter can refuse adapters that enumerate_adapters lists (a software
        // device when a preference asks for a real one); any listed adapter beats none.
        Err(_) => Ok(adapters[0].clone()),
    }
}

fn no_adapter() -> GpuError {
    let backends = backends_from_env()
        .map(|b| format!("{b:?}"))
        .unwrap_or_else(|_| "(WGPU_BACKEND is invalid)".into());
    GpuError::NoAdapter { backends }
}

fn adapter_list(adapters: &[wgpu::Adapter]) -> String {
    adapters
        .iter()
        .map(|adapter| {
            let info = adapter.get_info();
            format!("{} ({:?})", info.name, info.backend)
        })
        .collect::<Vec<_>>()
        .join(", ")
}

fn open(
    instance: wgpu::Instance,
    adapter: wgpu::Adapter,
    options: &HeadlessOptions,
) -> Result<GpuContext, GpuError> {
    let info = adapter.get_info();
    let supported = adapter.features();
    let missing = options.required_features - supported;
    if !missing.is_empty() {
        return Err(GpuError::MissingFeatures {
            adapter: info.name,
            missing: format!("{missing:?}"),
        });
    }
    let features = options.required_features | (OPTIONAL_FEATURES & supported);
    let descriptor = wgpu::DeviceDescriptor {
        label: Some("wgpool"),
        required_features: features,
        required_limits: adapter.limits(),
        experimental_features: wgpu::ExperimentalFeatures::disabled(),
        memory_hints: options.memory_hints.clone(),
        trace: wgpu::Trace::Off,
    };
    // Sparse binding where the adapter has it, so that pools can map pages.
    let (device, queue) =
        super::sparse::request_device(&adapter, &descriptor).map_err(|error| match error {
            super::sparse::SparseError::RequestDevice(source) => GpuError::RequestDevice {
                adapter: info.name.clone(),
                source,
            },
            source => GpuError::SparseDevice {
                adapter: info.name.clone(),
                source,
            },
        })?;
    let errors = ErrorLog::default();
    let log = errors.clone();
    device.on_uncaptured_error(Arc::new(move |error| log.record_error(&error)));
    let log = errors.clone();
    device
        .set_device_lost_callback(move |reason, message| log.record_device_lost(reason, &message));
    Ok(GpuContext {
        limits: device.limits(),
        features: device.features(),
        instance,
        adapter,
        device,
        queue,
        info,
        errors,
    })
}
