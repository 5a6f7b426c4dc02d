//! Large copies between the host and the device through page-locked ("pinned") host memory.
//!
//! A copy from ordinary (pageable) host memory goes through the driver's own small staging
//! buffers, one after the other, at a fraction of the bus's speed. Here a copy of at least
//! [`DIRECT_BELOW`] bytes runs in chunks through one page-locked buffer per device (kept
//! for the life of the process, at most [`STAGE_BYTES`]): the bus moves one chunk while the
//! host's threads (rayon) fill or empty another, and each chunk's slot is reused only after
//! an event says its previous copy is done. `SEMICRF_CUDA_PINNED=0` in the environment sends
//! every copy through pageable memory, for comparison, and `SEMICRF_CUDA_DIRECT_BELOW=N`
//! moves the threshold to `N` bytes.

use std::sync::Mutex;

use bytemuck::Pod;
use cudarc::driver::sys::CUevent_flags;
use cudarc::driver::{CudaEvent, CudaSlice, CudaView, DeviceRepr, DriverError, PinnedHostSlice};
use rayon::prelude::*;

use crate::device::Gpu;

/// Copies smaller than this (bytes) go straight from and to pageable memory.
pub(crate) const DIRECT_BELOW: usize = 2 << 20;

/// A backward pass's host arrays of results of at least this many bytes are made ready on
/// another thread while the kernels run (every page written once), so that the copies back
/// do not wait for the operating system to map fresh memory.
pub(crate) const READY_FROM: usize = 64 << 10;

/// The page-locked buffer's size (bytes) for a copy of at least that much.
pub(crate) const STAGE_BYTES: usize = 32 << 20;

/// Bytes per chunk: a slot of the page-locked buffer.
const CHUNK_BYTES: usize = 2 << 20;

/// Elements per task of the host's threads.
const TASK: usize = 1 << 15;

/// Whether a copy of `bytes` goes straight from or to pageable memory.
pub(crate) fn direct(bytes: usize) -> bool {
    static BELOW: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    bytes
        < *BELOW.get_or_init(|| {
            if std::env::var("SEMICRF_CUDA_PINNED").as_deref() == Ok("0") {
                return usize::MAX;
            }
            std::env::var("SEMICRF_CUDA_DIRECT_BELOW")
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(DIRECT_BELOW)
        })
}

/// The page-locked buffer of a device, allocated on the first large copy.
#[derive(Default)]
pub(crate) struct Stage(Mutex<Option<PinnedHostSlice<u8>>>);

impl Gpu {
    /// The device array `src` into the host array `dst` (of the same length).
    pub(crate) fn download<T: Pod + DeviceRepr + Send + Sync>(
        &self,
        src: &CudaView<'_, T>,
        dst: &mut [T],
    ) -> Result<(), DriverError> {
        let n = src.len();
        assert_eq!(n, dst.len(), "download of {n} elements into {}", dst.len());
        if direct(n * size_of::<T>()) {
            return self.stream.memcpy_dtoh(src, dst);
        }
        let mut lock = self.stage.0.lock().unwrap_or_else(|p| p.into_inner());
        let buf = self.stage_buffer(&mut lock)?;
        let per = CHUNK_BYTES / size_of::<T>();
        let slots = STAGE_BYTES / CHUNK_BYTES;
        let chunks = n.div_ceil(per);
        let range = |i: usize| i * per..((i + 1) * per).min(n);
        let mut done: Vec<Option<CudaEvent>> = (0..chunks).map(|_| None).collect();
        let mut issued = 0;
        for i in 0..chunks {
            // Chunks `i - slots` and older are out of their slots: issue up to `i + slots - 1`.
            while issued < chunks && issued < i + slots {
                let r = range(issued);
                let slot = slot_of::<T>(buf, issued % slots, r.len());
                self.stream.memcpy_dtoh(&src.slice(r), slot)?;
                done[issued] = Some(self.event()?);
                issued += 1;
            }
            if let Some(e) = done[i].take() {
                e.synchronize()?;
            }
            let r = range(i);
            let slot = slot_of::<T>(buf, i % slots, r.len());
            dst[r]
                .par_chunks_mut(TASK)
                .zip(slot.par_chunks(TASK))
                .for_each(|(d, s)| d.copy_from_slice(s));
        }
        Ok(())
    }

    /// A device array of `n` elements whose elements `i..i + out.len()` `fill(i, out)` writes:
    /// called from several of the host's threads at once, on disjoint parts.
    pub(crate) fn upload_with<T: Pod + DeviceRepr + Send + Sync>(
        &self,
        n: usize,
        fill: impl Fn(usize, &mut [T]) + Sync,
    ) -> Result<CudaSlice<T>, DriverError> {
        if direct(n * size_of::<T>()) {
            let mut v = vec![T::zeroed(); n];
            fill(0, &mut v);
            return self.upload(&v);
        }
        let mut dst = self.uninit::<T>(n)?;
        let mut lock = self.stage.0.lock().unwrap_or_else(|p| p.into_inner());
        let buf = self.stage_buffer(&mut lock)?;
        let per = CHUNK_BYTES / size_of::<T>();
        let slots = STAGE_BYTES / CHUNK_BYTES;
        let chunks = n.div_ceil(per);
        let mut done: Vec<Option<CudaEvent>> = (0..slots).map(|_| None).collect();
        for i in 0..chunks {
            let r = i * per..((i + 1) * per).min(n);
            // The slot's previous copy must be done before it is filled again.
            if let Some(e) = done[i % slots].take() {
                e.synchronize()?;
            }
            let slot = slot_of::<T>(buf, i % slots, r.len());
            slot.par_chunks_mut(TASK)
                .enumerate()
                .for_each(|(j, s)| fill(r.start + j * TASK, s));
            let mut part = dst.slice_mut(r);
            self.stream.memcpy_htod(&*slot, &mut part)?;
            done[i % slots] = Some(self.event()?);
        }
        // The buffer may be reused as soon as the lock is released.
        for e in done.into_iter().flatten() {
            e.synchronize()?;
        }
        Ok(dst)
    }

    /// An event recorded on the stream now (no timing).
    fn event(&self) -> Result<CudaEvent, DriverError> {
        self.stream
            .record_event(Some(CUevent_flags::CU_EVENT_DISABLE_TIMING))
    }

    /// The page-locked buffer, allocated on first use.
    fn stage_buffer<'s>(
        &self,
        slot: &'s mut Option<PinnedHostSlice<u8>>,
    ) -> Result<&'s mut [u8], DriverError> {
        if slot.is_none() {
            // SAFETY: the buffer is only read and written through the slices below, after
            // the events of the copies that use it.
            let buf = unsafe { self.ctx.alloc_pinned_with_flags::<u8>(STAGE_BYTES, 0)? };
            *slot = Some(buf);
        }
        match slot.as_mut() {
            Some(b) => b.as_mut_slice(),
            None => unreachable!("allocated above"),
        }
    }
}

/// Slot `i` of the page-locked buffer, as `len` elements of `T`.
fn slot_of<T: Pod>(buf: &mut [u8], i: usize, len: usize) -> &mut [T] {
    let at = i * CHUNK_BYTES;
    bytemuck::cast_slice_mut(&mut buf[at..at + len * size_of::<T>()])
}
