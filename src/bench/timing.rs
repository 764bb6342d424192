//! Timing of GPU work: timestamp queries where the device has them, wall time (submit and
//! wait) otherwise; warm-up runs, then the median of the timed runs.

use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::gpu::scope::{CaughtError, catch};

/// How a [`Measurement`] was taken.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum TimingMethod {
    /// GPU timestamps written at the start and end of the timed work; excludes submission
    /// and CPU overhead.
    GpuTimestamps,
    /// Wall-clock time from `submit` until `poll(Wait)` returns; includes submission latency.
    Wall,
}

impl TimingMethod {
    /// The name used in reports: `gpu_timestamps` or `wall`.
    pub fn as_str(self) -> &'static str {
        match self {
            TimingMethod::GpuTimestamps => "gpu_timestamps",
            TimingMethod::Wall => "wall",
        }
    }
}

/// The timed runs of one piece of work.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Measurement {
    /// How the samples were taken.
    pub method: TimingMethod,
    /// Duration of every timed run, in nanoseconds, in run order.
    pub samples_ns: Vec<f64>,
    /// The median of `samples_ns`.
    pub median_ns: f64,
}

impl Measurement {
    pub(crate) fn new(method: TimingMethod, samples_ns: Vec<f64>) -> Measurement {
        Measurement {
            method,
            median_ns: median(&samples_ns),
            samples_ns,
        }
    }

    /// Throughput in GB/s (10^9 bytes per second) for `bytes` moved per run.
    pub fn gbps(&self, bytes: u64) -> f64 {
        if self.median_ns > 0.0 {
            bytes as f64 / self.median_ns
        } else {
            0.0
        }
    }
}

/// The median of a set of samples: the middle value, or the mean of the two middle values
/// for an even count; `0.0` for no samples.
///
/// ```
/// assert_eq!(wgpool::bench::timing::median(&[5.0, 1.0, 3.0]), 3.0);
/// assert_eq!(wgpool::bench::timing::median(&[4.0, 1.0, 3.0, 2.0]), 2.5);
/// ```
pub fn median(samples: &[f64]) -> f64 {
    if samples.is_empty() {
        return 0.0;
    }
    let mut sorted = samples.to_vec();
    sorted.sort_by(f64::total_cmp);
    let middle = sorted.len() / 2;
    if sorted.len() % 2 == 1 {
        sorted[middle]
    } else {
        (sorted[middle - 1] + sorted[middle]) / 2.0
    }
}

/// How many runs to do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RunCounts {
    /// Untimed runs first (pipeline compilation, caches, clocks).
    pub warmup: u32,
    /// Keep warming up until at least this much wall time has passed, so that a GPU that
    /// idled (and lowered its clocks) is back at speed; `Duration::ZERO` for count only.
    /// On an H200 about a second of sustained load is needed after the GPU idled.
    pub min_warmup: Duration,
    /// Timed runs; the median is taken over these. At least 1.
    pub timed: u32,
}

impl RunCounts {
    /// `warmup` runs and `timed` runs, with no minimum warm-up time.
    pub fn new(warmup: u32, timed: u32) -> RunCounts {
        RunCounts {
            warmup,
            min_warmup: Duration::ZERO,
            timed,
        }
    }
}

/// Why a measurement failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TimingError {
    /// `timed` was 0.
    #[error("at least one timed run is needed")]
    NoRuns,
    /// wgpu reported an error while recording or submitting the work.
    #[error(transparent)]
    Gpu(#[from] CaughtError),
    /// Waiting for the device failed.
    #[error("waiting for the device failed: {0}")]
    Poll(#[from] wgpu::PollError),
    /// Reading the timestamps back failed.
    #[error("reading timestamps back failed: {0}")]
    Readback(String),
}

/// Times work recorded by a closure. Built once per device; reusable.
///
/// Guarantees: the timed runs of one call are submitted after the warm-up runs finished;
/// with [`TimingMethod::GpuTimestamps`] the samples cover exactly the recorded GPU work;
/// timestamp samples that come back as zero or negative (a driver that does not really
/// implement them) make the call fall back to wall time, and the measurement says so.
pub struct Timer {
    device: wgpu::Device,
    queue: wgpu::Queue,
    pass_timestamps: bool,
    encoder_timestamps: bool,
    period_ns: f64,
}

impl Timer {
    /// A timer for the device. It uses GPU timestamps when the device has
    /// `Features::TIMESTAMP_QUERY` (for compute passes) and additionally
    /// `TIMESTAMP_QUERY_INSIDE_ENCODERS` (for work outside passes, such as copies);
    /// `force_wall` turns them off.
    pub fn new(device: &wgpu::Device, queue: &wgpu::Queue, force_wall: bool) -> Timer {
        let features = device.features();
        let pass_timestamps = !force_wall && features.contains(wgpu::Features::TIMESTAMP_QUERY);
        let encoder_timestamps =
            pass_timestamps && features.contains(wgpu::Features::TIMESTAMP_QUERY_INSIDE_ENCODERS);
        Timer {
            device: device.clone(),
            queue: queue.clone(),
            pass_timestamps,
            encoder_timestamps,
            period_ns: f64::from(queue.get_timestamp_period()),
        }
    }

    /// The method [`measure_pass`](Self::measure_pass) tries first.
    pub fn pass_method(&self) -> TimingMethod {
        if self.pass_timestamps {
            TimingMethod::GpuTimestamps
        } else {
            TimingMethod::Wall
        }
    }

    /// The method [`measure_commands`](Self::measure_commands) tries first.
    pub fn commands_method(&self) -> TimingMethod {
        if self.encoder_timestamps {
            TimingMethod::GpuTimestamps
        } else {
            TimingMethod::Wall
        }
    }

    /// Times work that is exactly one compute pass. `record` is called once per run and must
    /// begin one compute pass with the given `timestamp_writes` (which is `None` for warm-up
    /// runs and under wall timing); it may record other commands before that pass.
    pub fn measure_pass(
        &self,
        counts: RunCounts,
        mut record: impl FnMut(&mut wgpu::CommandEncoder, Option<wgpu::ComputePassTimestampWrites<'_>>),
    ) -> Result<Measurement, TimingError> {
        if counts.timed == 0 {
            return Err(TimingError::NoRuns);
        }
        self.warm_up(counts, |encoder| record(encoder, None))?;
        if self.pass_timestamps {
            let samples = self.timestamped(counts.timed, |encoder, query_set, index| {
                record(
                    encoder,
                    Some(wgpu::ComputePassTimestampWrites {
                        query_set,
                        beginning_of_pass_write_index: Some(index),
                        end_of_pass_write_index: Some(index + 1),
                    }),
                )
            })?;
            if let Some(samples) = samples {
                return Ok(Measurement::new(TimingMethod::GpuTimestamps, samples));
            }
        }
        self.wall(counts.timed, |encoder| record(encoder, None))
    }

    /// Times arbitrary commands (copies, several passes). With encoder timestamps, a
    /// timestamp is written before and after the commands `record` adds.
    pub fn measure_commands(
        &self,
        counts: RunCounts,
        mut record: impl FnMut(&mut wgpu::CommandEncoder),
    ) -> Result<Measurement, TimingError> {
        if counts.timed == 0 {
            return Err(TimingError::NoRuns);
        }
        self.warm_up(counts, &mut record)?;
        if self.encoder_timestamps {
            let samples = self.timestamped(counts.timed, |encoder, query_set, index| {
                encoder.write_timestamp(query_set, index);
                record(encoder);
                encoder.write_timestamp(query_set, index + 1);
            })?;
            if let Some(samples) = samples {
                return Ok(Measurement::new(TimingMethod::GpuTimestamps, samples));
            }
        }
        self.wall(counts.timed, record)
    }

    /// Runs the work untimed until both `counts.warmup` runs and `counts.min_warmup` of wall
    /// time are done. The next run is submitted before the previous one is waited for, so the
    /// GPU stays busy: clock governors (NVIDIA's drops an idle H200 to about 400 MHz, which
    /// halves memory bandwidth) only raise the clocks under sustained load.
    fn warm_up(
        &self,
        counts: RunCounts,
        mut record: impl FnMut(&mut wgpu::CommandEncoder),
    ) -> Result<(), TimingError> {
        let start = Instant::now();
        let mut runs = 0u32;
        let mut in_flight: Option<wgpu::SubmissionIndex> = None;
        while runs < counts.warmup || start.elapsed() < counts.min_warmup {
            runs += 1;
            let submitted = catch(&self.device, || {
                let mut encoder = self.device.create_command_encoder(&Default::default());
                record(&mut encoder);
                self.queue.submit([encoder.finish()])
            })?;
            if let Some(previous) = in_flight.replace(submitted) {
                self.device.poll(wgpu::PollType::Wait {
                    submission_index: Some(previous),
                    timeout: None,
                })?;
            }
        }
        self.device.poll(wgpu::PollType::wait_indefinitely())?;
        Ok(())
    }

    fn wall(
        &self,
        runs: u32,
        mut record: impl FnMut(&mut wgpu::CommandEncoder),
    ) -> Result<Measurement, TimingError> {
        let mut samples = Vec::with_capacity(runs as usize);
        for _ in 0..runs {
            let elapsed = catch(&self.device, || {
                let mut encoder = self.device.create_command_encoder(&Default::default());
                record(&mut encoder);
                let commands = encoder.finish();
                let start = Instant::now();
                let submission = self.queue.submit([commands]);
                self.device
                    .poll(wgpu::PollType::Wait {
                        submission_index: Some(submission),
                        timeout: None,
                    })
                    .map(|_| start.elapsed())
            })??;
            samples.push(elapsed.as_nanos() as f64);
        }
        Ok(Measurement::new(TimingMethod::Wall, samples))
    }

    /// Records `runs` runs into one command buffer, run `i` writing timestamps `2i` and
    /// `2i + 1`, and returns the durations; `None` if the timestamps are not usable.
    fn timestamped(
        &self,
        runs: u32,
        mut record: impl FnMut(&mut wgpu::CommandEncoder, &wgpu::QuerySet, u32),
    ) -> Result<Option<Vec<f64>>, TimingError> {
        let count = runs * 2;
        let bytes = u64::from(count) * 8;
        let (query_set, resolve, readback) = catch(&self.device, || {
            let query_set = self.device.create_query_set(&wgpu::QuerySetDescriptor {
                label: Some("wgpool timer"),
                ty: wgpu::QueryType::Timestamp,
                count,
            });
            let resolve = self.device.create_buffer(&wgpu::BufferDescriptor {
                label: Some("wgpool timer resolve"),
                size: bytes,
                usage: wgpu::BufferUsages::QUERY_RESOLVE | wgpu::BufferUsages::COPY_SRC,
                mapped_at_creation: false,
            });
            let readback = self.device.create_buffer(&wgpu::BufferDescriptor {
                label: Some("wgpool timer readback"),
                size: bytes,
                usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
                mapped_at_creation: false,
            });
            (query_set, resolve, readback)
        })?;
        catch(&self.device, || {
            let mut encoder = self.device.create_command_encoder(&Default::default());
            for run in 0..runs {
                record(&mut encoder, &query_set, run * 2);
            }
            // Resolved at offset 0 of its own buffer: 256-aligned as wgpu requires.
            encoder.resolve_query_set(&query_set, 0..count, &resolve, 0);
            encoder.copy_buffer_to_buffer(&resolve, 0, &readback, 0, bytes);
            self.queue.submit([encoder.finish()]);
        })?;
        let (sender, receiver) = mpsc::channel();
        readback.map_async(wgpu::MapMode::Read, .., move |result| {
            let _ = sender.send(result);
        });
        self.device.poll(wgpu::PollType::wait_indefinitely())?;
        match receiver.recv() {
            Ok(Ok(())) => {}
            Ok(Err(error)) => return Err(TimingError::Readback(error.to_string())),
            Err(_) => return Err(TimingError::Readback("the map callback never ran".into())),
        }
        let ticks: Vec<u64> = {
            let view = readback
                .get_mapped_range(..)
                .map_err(|e| TimingError::Readback(e.to_string()))?;
            view.chunks_exact(8)
                .map(|b| u64::from_le_bytes(b.try_into().expect("8-byte chunk")))
                .collect()
        };
        readback.unmap();
        let samples: Vec<f64> = ticks
            .chunks_exact(2)
            .map(|pair| pair[1].wrapping_sub(pair[0]) as i64 as f64 * self.period_ns)
            .collect();
        if samples.iter().any(|&ns| ns <= 0.0) {
            return Ok(None);
        }
        Ok(Some(samples))
    }
}
