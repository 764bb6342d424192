//! Errors raised while opening a headless device.

/// Why a headless [`GpuContext`](super::GpuContext) could not be opened.
///
/// Every variant's message says what was wrong and, where there is one, what to do about it.
#[derive(thiserror::Error)]
#[non_exhaustive]
pub enum GpuError {
    /// The instance found no adapter at all on the enabled backends.
    #[error(
        "no GPU adapter found on backends {backends}. Install a Vulkan driver; for a software \
         device (Mesa lavapipe) run `apt-get install -y mesa-vulkan-drivers libvulkan1`, then \
         set WGPU_BACKEND=vulkan"
    )]
    NoAdapter {
        /// The backends that were searched, as wgpu prints them.
        backends: String,
    },
    /// Adapters exist but none has the requested name.
    #[error(
        "no adapter's name contains {wanted:?} (case-insensitive; from {source_name}); \
         available adapters: {available}"
    )]
    NoMatchingAdapter {
        /// The name fragment that was asked for.
        wanted: String,
        /// Where the name came from: `--adapter`, `HeadlessOptions` or `WGPU_ADAPTER_NAME`.
        source_name: String,
        /// The adapters that do exist, comma-separated, with their backends.
        available: String,
    },
    /// An environment variable had a value wgpu does not understand.
    #[error("environment variable {name}={value:?} is not valid; allowed: {allowed}")]
    BadEnvironment {
        /// The variable's name.
        name: &'static str,
        /// Its value.
        value: String,
        /// The values that are accepted.
        allowed: &'static str,
    },
    /// The caller required features the adapter does not have.
    #[error("adapter {adapter:?} lacks the required features {missing}")]
    MissingFeatures {
        /// The adapter's name.
        adapter: String,
        /// The features that are missing, as wgpu prints them.
        missing: String,
    },
    /// `request_device` failed.
    #[error("could not open a device on adapter {adapter:?}: {source}")]
    RequestDevice {
        /// The adapter's name.
        adapter: String,
        /// wgpu's error.
        #[source]
        source: wgpu::RequestDeviceError,
    },
    /// Creating the Vulkan device with sparse binding failed.
    #[error("could not open a device with sparse binding on adapter {adapter:?}: {source}")]
    SparseDevice {
        /// The adapter's name.
        adapter: String,
        /// What failed.
        #[source]
        source: super::sparse::SparseError,
    },
}

crate::error_debug::debug_as_message!(GpuError);
