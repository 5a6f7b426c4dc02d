//! An array in device memory that a call reads ([`DeviceArray`]) and its element type.

use std::marker::PhantomData;

use cudarc::driver::sys::CUstream;
use cudarc::driver::{CudaSlice, DevicePtr, DeviceRepr};

/// The element type of a [`DeviceArray`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Dtype {
    /// `f32`: read as it is and widened exactly to `f64` by the kernels.
    F32,
    /// `f64`.
    F64,
}

impl Dtype {
    /// Bytes per element.
    pub(crate) fn bytes(self) -> usize {
        match self {
            Dtype::F32 => 4,
            Dtype::F64 => 8,
        }
    }
}

/// A `(B, T, C)` array in device memory (scores or a boundary), row-major and contiguous,
/// borrowed for `'a`: from a cudarc buffer, or from a raw device address with the stream
/// whose work writes it (another framework's tensor).
///
/// A call on it first makes the engine's stream wait for the work queued so far on that
/// stream, and returns only when its own work is done, so the array may be written again as
/// soon as the call returns.
#[derive(Clone, Copy, Debug)]
pub struct DeviceArray<'a> {
    pub(crate) ptr: u64,
    pub(crate) len: usize,
    pub(crate) dtype: Dtype,
    /// The producer's stream (`CUstream` as an integer; 0 is the legacy default stream).
    pub(crate) stream: usize,
    _borrow: PhantomData<&'a ()>,
}

impl<'a> DeviceArray<'a> {
    /// A cudarc buffer of `f32`.
    pub fn f32(s: &'a CudaSlice<f32>) -> Self {
        Self::of(s, Dtype::F32)
    }

    /// A cudarc buffer of `f64`.
    pub fn f64(s: &'a CudaSlice<f64>) -> Self {
        Self::of(s, Dtype::F64)
    }

    fn of<T: DeviceRepr>(s: &'a CudaSlice<T>, dtype: Dtype) -> Self {
        let stream = s.stream();
        let ptr = s.device_ptr(stream).0;
        DeviceArray {
            ptr,
            len: s.len(),
            dtype,
            stream: stream.cu_stream() as usize,
            _borrow: PhantomData,
        }
    }

    /// `len` elements of `dtype` at device address `ptr`, written by work queued on `stream`
    /// (null for the legacy default stream): a PyTorch tensor's `data_ptr()` with
    /// `torch.cuda.current_stream().cuda_stream`, for example. The address must be in
    /// memory of the device the engine runs on, in its primary context (where the CUDA
    /// runtime and PyTorch allocate); a call checks that and that the allocation holds the
    /// `len` elements.
    ///
    /// # Safety
    ///
    /// The memory must stay allocated, and must not be written by other work, until every
    /// call using this array has returned; `stream` must be a live stream of that context.
    pub unsafe fn from_raw(ptr: u64, len: usize, dtype: Dtype, stream: CUstream) -> Self {
        DeviceArray {
            ptr,
            len,
            dtype,
            stream: stream as usize,
            _borrow: PhantomData,
        }
    }

    /// The same description of memory whose use the caller vouches for (an output's, for
    /// its checks).
    pub(crate) fn at(ptr: u64, len: usize, dtype: Dtype, stream: usize) -> Self {
        DeviceArray {
            ptr,
            len,
            dtype,
            stream,
            _borrow: PhantomData,
        }
    }

    /// The device address.
    pub fn ptr(&self) -> u64 {
        self.ptr
    }

    /// The number of elements.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether there are no elements.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The element type.
    pub fn dtype(&self) -> Dtype {
        self.dtype
    }
}
