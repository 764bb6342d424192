//! One kernel invocation: which kernel, on which operands, with which scalars.

use super::kernel::{Dtype, Kernel};
use super::operand::Operand;

/// A kernel together with its operands and parameters, ready for
/// [`Kernels::prepare`](super::Kernels::prepare). Built with the constructor named after
/// the operation; the checks happen in `prepare`.
#[derive(Clone, Debug)]
pub struct KernelCall<'a> {
    pub(super) kernel: Kernel,
    pub(super) inputs: Vec<Operand<'a>>,
    pub(super) output: Option<Operand<'a>>,
    pub(super) result: Option<Operand<'a>>,
    pub(super) scalar: f32,
    pub(super) word: u32,
    /// The element type the caller asked for; `prepare` refuses it when the kernel has no
    /// variant for it.
    pub(super) dtype: Dtype,
}

impl<'a> KernelCall<'a> {
    fn new(kernel: Kernel, inputs: Vec<Operand<'a>>, output: Option<Operand<'a>>) -> Self {
        KernelCall {
            kernel,
            inputs,
            output,
            result: None,
            scalar: 0.0,
            word: 0,
            dtype: kernel.dtype(),
        }
    }

    /// STREAM copy `c = a` on `dtype` (`F32` or `F16`; `U32` is [`move_bytes`](Self::move_bytes)).
    pub fn copy(dtype: Dtype, a: Operand<'a>, c: Operand<'a>) -> Self {
        let kernel = match dtype {
            Dtype::F16 => Kernel::CopyF16,
            Dtype::F32 => Kernel::CopyF32,
            Dtype::U32 => Kernel::Move,
        };
        Self::new(kernel, vec![a], Some(c))
    }

    /// STREAM scale `b = s * c` on f32.
    pub fn scale(c: Operand<'a>, s: f32, b: Operand<'a>) -> Self {
        KernelCall {
            scalar: s,
            ..Self::new(Kernel::ScaleF32, vec![c], Some(b))
        }
    }

    /// STREAM add `c = a + b` on f32.
    pub fn add(a: Operand<'a>, b: Operand<'a>, c: Operand<'a>) -> Self {
        Self::new(Kernel::AddF32, vec![a, b], Some(c))
    }

    /// STREAM triad `a = b + s * c` on `dtype` (`F32` or `F16`; the scalar is converted to
    /// f16 in the shader). `U32` is refused by `prepare`.
    pub fn triad(dtype: Dtype, b: Operand<'a>, c: Operand<'a>, s: f32, a: Operand<'a>) -> Self {
        let kernel = match dtype {
            Dtype::F16 => Kernel::TriadF16,
            _ => Kernel::TriadF32,
        };
        KernelCall {
            scalar: s,
            dtype,
            ..Self::new(kernel, vec![b, c], Some(a))
        }
    }

    /// Sets every 4-byte word of `dst` to `word` (for an f32 value pass `value.to_bits()`).
    pub fn fill(dst: Operand<'a>, word: u32) -> Self {
        KernelCall {
            word,
            ..Self::new(Kernel::Fill, vec![], Some(dst))
        }
    }

    /// Sets word `i` of `dst` to [`pattern_word`](super::pattern_word)`(seed, i)`.
    pub fn fill_pattern(dst: Operand<'a>, seed: u32) -> Self {
        KernelCall {
            word: seed,
            ..Self::new(Kernel::FillPattern, vec![], Some(dst))
        }
    }

    /// Writes [`checksum`](super::checksum)`(src, 0)` into the first 4 bytes of `result`
    /// (which needs `STORAGE | COPY_DST` usage; it is zeroed by the recorded commands).
    pub fn checksum(src: Operand<'a>, result: Operand<'a>) -> Self {
        KernelCall {
            result: Some(result),
            ..Self::new(Kernel::Checksum, vec![src], None)
        }
    }

    /// Writes the number of 4-byte words where `x` and `y` differ into the first 4 bytes of
    /// `result` (which needs `STORAGE | COPY_DST` usage; it is zeroed by the recorded commands).
    pub fn compare(x: Operand<'a>, y: Operand<'a>, result: Operand<'a>) -> Self {
        KernelCall {
            result: Some(result),
            ..Self::new(Kernel::Compare, vec![x, y], None)
        }
    }

    /// Copies `src` to `dst` bit for bit with the copy kernel. They may be in the same
    /// buffer but must not overlap.
    pub fn move_bytes(src: Operand<'a>, dst: Operand<'a>) -> Self {
        Self::new(Kernel::Move, vec![src], Some(dst))
    }

    /// The kernel this call runs.
    pub fn kernel(&self) -> Kernel {
        self.kernel
    }
}
