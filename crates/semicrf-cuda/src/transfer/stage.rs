//! Large copies between the host and the device through page-locked ("pinned") host memory.
//!
//! A copy from ordinary (pageable) host memory goes through the driver's own small staging
//! buffers, one after the other, at a fraction of the bus's speed. Here a copy of at least
//! [`crate::tuning::Tuning::direct_below`] bytes runs in chunks through one page-locked buffer per device
//! (kept for the life of the process, at most [`STAGE_BYTES`]): the bus moves one chunk while
//! the host's threads (rayon) fill or empty another, and each chunk's slot is reused only
//! after an event says its previous copy is done.
//!
//! A backward pass's results, when they come to at most [`crate::tuning::Tuning::one_copy_upto`] bytes in
//! all, are copied into that buffer by copies enqueued right behind the kernels
//! ([`Gpu::stage_all`]): the host waits once, for all of them, and the bus runs at the speed
//! of page-locked memory.

use std::sync::MutexGuard;

use bytemuck::Pod;
use cudarc::driver::sys::CUevent_flags;
use cudarc::driver::{CudaEvent, CudaSlice, CudaView, DeviceRepr, DriverError, PinnedHostSlice};
use rayon::prelude::*;

use crate::device::Gpu;
use crate::tuning::{STAGE_BYTES, tuning};

/// Bytes per chunk: a slot of the page-locked buffer.
const CHUNK_BYTES: usize = 2 << 20;

/// Elements per task of the host's threads.
const TASK: usize = 1 << 15;

/// Whether a copy of `bytes` goes straight from or to pageable memory.
pub(crate) fn direct(bytes: usize) -> bool {
    bytes < tuning().direct_below
}

/// Device arrays on their way into the page-locked buffer, by copies enqueued on the stream
/// ([`Gpu::stage_all`]); the buffer is held until they are dropped.
pub(crate) struct Staged<'g> {
    buf: MutexGuard<'g, Option<PinnedHostSlice<u8>>>,
    done: CudaEvent,
    /// Byte offset and length of each array.
    parts: Vec<(usize, usize)>,
}

impl Staged<'_> {
    /// Waits for the copies.
    pub(crate) fn wait(&self) -> Result<(), DriverError> {
        self.done.synchronize()
    }

    /// Array `i` (of those given to [`Gpu::stage_all`]), once [`Staged::wait`] has returned.
    pub(crate) fn part(&self, i: usize) -> Result<&[f64], DriverError> {
        let (at, n) = self.parts[i];
        let buf = match self.buf.as_ref() {
            Some(b) => b.as_slice()?,
            None => unreachable!("allocated by stage_all"),
        };
        Ok(bytemuck::cast_slice(&buf[at..at + 8 * n]))
    }
}

impl Drop for Staged<'_> {
    fn drop(&mut self) {
        // The buffer is released only once the copies into it are done (a copy out of it
        // filled in the meantime would be overwritten); an error here is the stream's, and
        // the next call on it reports it.
        let _ = self.done.synchronize();
    }
}

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

    /// Copies of `srcs` into the page-locked buffer, enqueued on the stream (behind the
    /// work enqueued before), or `None` where they come to more than
    /// [`crate::tuning::Tuning::one_copy_upto`] bytes.
    pub(crate) fn stage_all<'g>(
        &'g self,
        srcs: &[CudaView<'_, f64>],
    ) -> Result<Option<Staged<'g>>, DriverError> {
        // Each array at a multiple of 256 bytes.
        let room = |n: usize| (8 * n).next_multiple_of(256);
        let bytes: usize = srcs.iter().map(|s| room(s.len())).sum();
        if bytes > tuning().one_copy_upto {
            return Ok(None);
        }
        let mut lock = self.stage.0.lock().unwrap_or_else(|p| p.into_inner());
        let buf = self.stage_buffer(&mut lock)?;
        let mut parts = Vec::with_capacity(srcs.len());
        let mut at = 0;
        for s in srcs {
            let n = s.len();
            let dst: &mut [f64] = bytemuck::cast_slice_mut(&mut buf[at..at + 8 * n]);
            self.stream.memcpy_dtoh(s, dst)?;
            parts.push((at, n));
            at += room(n);
        }
        let done = self.event()?;
        Ok(Some(Staged {
            buf: lock,
            done,
            parts,
        }))
    }

    /// An event recorded on the stream now (no timing).
    pub(crate) fn event(&self) -> Result<CudaEvent, DriverError> {
        self.stream
            .record_event(Some(CUevent_flags::CU_EVENT_DISABLE_TIMING))
    }

    /// The page-locked buffer, allocated on first use.
    pub(crate) fn stage_buffer<'s>(
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
