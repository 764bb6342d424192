//! The kernels there are, their operands, and their WGSL sources.

use std::borrow::Cow;

use serde::Serialize;

/// Element type a kernel works on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Dtype {
    /// 32-bit float.
    F32,
    /// 16-bit float (needs `Features::SHADER_F16`).
    F16,
    /// Raw 32-bit words.
    U32,
}

impl Dtype {
    /// Bytes per element.
    pub fn size(self) -> u64 {
        match self {
            Dtype::F16 => 2,
            Dtype::F32 | Dtype::U32 => 4,
        }
    }

    /// `f32`, `f16` or `u32`.
    pub fn as_str(self) -> &'static str {
        match self {
            Dtype::F32 => "f32",
            Dtype::F16 => "f16",
            Dtype::U32 => "u32",
        }
    }
}

/// One compute kernel. Each has one WGSL file in `shaders/`, named `{name}_{dtype}.wgsl`.
///
/// Operands are given in binding order: the inputs, then the output, then the result word
/// of a reduction. All data operands of one call have the same size.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kernel {
    /// STREAM copy: `c = a`.
    CopyF32,
    /// STREAM scale: `b = s * c`.
    ScaleF32,
    /// STREAM add: `c = a + b`.
    AddF32,
    /// STREAM triad: `a = b + s * c`.
    TriadF32,
    /// STREAM copy on f16: `c = a`.
    CopyF16,
    /// STREAM triad on f16: `a = b + s * c`.
    TriadF16,
    /// Every word of `dst` = a constant word.
    Fill,
    /// Word `i` of `dst` = [`pattern_word`](super::pattern_word)`(seed, i)`.
    FillPattern,
    /// `result` = [`checksum`](super::checksum) of `src`.
    Checksum,
    /// `result` = the number of words where `x` and `y` differ.
    Compare,
    /// `dst` = `src`, bit for bit (an in-device move).
    Move,
}

impl Kernel {
    /// Every kernel.
    pub const ALL: [Kernel; 11] = [
        Kernel::CopyF32,
        Kernel::ScaleF32,
        Kernel::AddF32,
        Kernel::TriadF32,
        Kernel::CopyF16,
        Kernel::TriadF16,
        Kernel::Fill,
        Kernel::FillPattern,
        Kernel::Checksum,
        Kernel::Compare,
        Kernel::Move,
    ];

    /// The operation's name: `copy`, `scale`, `add`, `triad`, `fill`, `fill_pattern`,
    /// `checksum`, `compare` or `move`.
    pub fn name(self) -> &'static str {
        match self {
            Kernel::CopyF32 | Kernel::CopyF16 => "copy",
            Kernel::ScaleF32 => "scale",
            Kernel::AddF32 => "add",
            Kernel::TriadF32 | Kernel::TriadF16 => "triad",
            Kernel::Fill => "fill",
            Kernel::FillPattern => "fill_pattern",
            Kernel::Checksum => "checksum",
            Kernel::Compare => "compare",
            Kernel::Move => "move",
        }
    }

    /// The element type.
    pub fn dtype(self) -> Dtype {
        match self {
            Kernel::CopyF32 | Kernel::ScaleF32 | Kernel::AddF32 | Kernel::TriadF32 => Dtype::F32,
            Kernel::CopyF16 | Kernel::TriadF16 => Dtype::F16,
            Kernel::Fill
            | Kernel::FillPattern
            | Kernel::Checksum
            | Kernel::Compare
            | Kernel::Move => Dtype::U32,
        }
    }

    /// Names of the input operands, in binding order.
    pub fn input_names(self) -> &'static [&'static str] {
        match self {
            Kernel::CopyF32 | Kernel::CopyF16 => &["a"],
            Kernel::ScaleF32 => &["c"],
            Kernel::AddF32 => &["a", "b"],
            Kernel::TriadF32 | Kernel::TriadF16 => &["b", "c"],
            Kernel::Fill | Kernel::FillPattern => &[],
            Kernel::Checksum | Kernel::Move => &["src"],
            Kernel::Compare => &["x", "y"],
        }
    }

    /// Name of the output operand, if the kernel writes one.
    pub fn output_name(self) -> Option<&'static str> {
        match self {
            Kernel::CopyF32 | Kernel::CopyF16 | Kernel::AddF32 => Some("c"),
            Kernel::ScaleF32 => Some("b"),
            Kernel::TriadF32 | Kernel::TriadF16 => Some("a"),
            Kernel::Fill | Kernel::FillPattern | Kernel::Move => Some("dst"),
            Kernel::Checksum | Kernel::Compare => None,
        }
    }

    /// Whether the kernel reduces into a 4-byte `result` word.
    pub fn has_result(self) -> bool {
        matches!(self, Kernel::Checksum | Kernel::Compare)
    }

    /// Bytes read plus bytes written by one run over operands of `operand_bytes` each (the
    /// 4-byte result word is not counted).
    pub fn bytes_moved(self, operand_bytes: u64) -> u64 {
        let operands = self.input_names().len() as u64 + u64::from(self.output_name().is_some());
        operands * operand_bytes
    }

    /// Device features the kernel needs.
    pub fn required_features(self) -> wgpu::Features {
        match self.dtype() {
            Dtype::F16 => wgpu::Features::SHADER_F16,
            Dtype::F32 | Dtype::U32 => wgpu::Features::empty(),
        }
    }

    /// The shader's file name under `shaders/`.
    pub fn shader_file(self) -> &'static str {
        match self {
            Kernel::CopyF32 => "copy_f32.wgsl",
            Kernel::ScaleF32 => "scale_f32.wgsl",
            Kernel::AddF32 => "add_f32.wgsl",
            Kernel::TriadF32 => "triad_f32.wgsl",
            Kernel::CopyF16 => "copy_f16.wgsl",
            Kernel::TriadF16 => "triad_f16.wgsl",
            Kernel::Fill => "fill_u32.wgsl",
            Kernel::FillPattern => "fill_pattern_u32.wgsl",
            Kernel::Checksum => "checksum_u32.wgsl",
            Kernel::Compare => "compare_u32.wgsl",
            Kernel::Move => "move_u32.wgsl",
        }
    }

    /// The WGSL source as it is in `shaders/` (inputs declared `read`).
    pub fn source(self) -> &'static str {
        match self {
            Kernel::CopyF32 => include_str!("../../shaders/copy_f32.wgsl"),
            Kernel::ScaleF32 => include_str!("../../shaders/scale_f32.wgsl"),
            Kernel::AddF32 => include_str!("../../shaders/add_f32.wgsl"),
            Kernel::TriadF32 => include_str!("../../shaders/triad_f32.wgsl"),
            Kernel::CopyF16 => include_str!("../../shaders/copy_f16.wgsl"),
            Kernel::TriadF16 => include_str!("../../shaders/triad_f16.wgsl"),
            Kernel::Fill => include_str!("../../shaders/fill_u32.wgsl"),
            Kernel::FillPattern => include_str!("../../shaders/fill_pattern_u32.wgsl"),
            Kernel::Checksum => include_str!("../../shaders/checksum_u32.wgsl"),
            Kernel::Compare => include_str!("../../shaders/compare_u32.wgsl"),
            Kernel::Move => include_str!("../../shaders/move_u32.wgsl"),
        }
    }
}

/// How a kernel's inputs are declared.
///
/// wgpu forbids using one buffer as read-only storage and as read-write storage in the same
/// dispatch, but allows several read-write bindings of one buffer. When an input shares a
/// buffer with a written operand (two pool blocks in one segment, a move inside a segment),
/// the kernel is compiled with its inputs declared `read_write`; its code is the same.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Access {
    /// Inputs are `var<storage, read>`: the shader file as it is.
    ReadOnlyInputs,
    /// Inputs are `var<storage, read_write>`, for inputs that share a buffer with an output.
    ReadWriteInputs,
}

/// The WGSL that is compiled for `kernel` with `access`.
///
/// ```
/// use wgpool::kernels::{Access, Kernel, shader_source};
/// let rw = shader_source(Kernel::Move, Access::ReadWriteInputs);
/// assert!(!rw.contains("var<storage, read>"));
/// assert_eq!(shader_source(Kernel::Move, Access::ReadOnlyInputs), Kernel::Move.source());
/// ```
pub fn shader_source(kernel: Kernel, access: Access) -> Cow<'static, str> {
    match access {
        Access::ReadOnlyInputs => Cow::Borrowed(kernel.source()),
        Access::ReadWriteInputs => Cow::Owned(
            kernel
                .source()
                .replace("var<storage, read>", "var<storage, read_write>"),
        ),
    }
}
