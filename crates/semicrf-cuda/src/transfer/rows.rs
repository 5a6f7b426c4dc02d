//! Rows of a potentials source on their way to the device, and rows of a backward pass's
//! results on their way back to a gradient sink, through the two halves of the page-locked
//! buffer of [`stage`](super::stage): the host fills (or reads) one half while the bus moves
//! the other, and a half is reused only after an event says its copies are done.

use std::sync::MutexGuard;

use bytemuck::Pod;
use cudarc::driver::{CudaEvent, CudaSlice, CudaView, DeviceRepr, DriverError, PinnedHostSlice};
use rayon::prelude::*;

use crate::device::Gpu;
use crate::tuning::STAGE_BYTES;

/// Bytes of one half of the page-locked buffer.
pub(crate) const HALF: usize = STAGE_BYTES / 2;

/// Where each array starts in a half: a multiple of 16 bytes.
fn room(bytes: usize) -> usize {
    bytes.next_multiple_of(16)
}

/// Host-to-device copies of rows through the page-locked buffer (held until dropped): each
/// [`RowUpload::put`] is enqueued on the stream as soon as its rows are in the buffer, so
/// the bus moves them while the host produces the next ones.
pub(crate) struct RowUpload<'g> {
    gpu: &'g Gpu,
    buf: MutexGuard<'g, Option<PinnedHostSlice<u8>>>,
    /// The half being filled, and its bytes used.
    half: usize,
    used: usize,
    /// The copies out of each half, once it has been left.
    done: [Option<CudaEvent>; 2],
}

impl<'g> RowUpload<'g> {
    /// Takes the page-locked buffer of `gpu` (allocated on first use).
    pub(crate) fn new(gpu: &'g Gpu) -> Result<Self, DriverError> {
        let mut buf = gpu.stage.0.lock().unwrap_or_else(|p| p.into_inner());
        gpu.stage_buffer(&mut buf)?;
        Ok(RowUpload {
            gpu,
            buf,
            half: 0,
            used: 0,
            done: [None, None],
        })
    }

    /// `src`, each element converted by `to`, into `dst` from element `at` on: through the
    /// buffer, the copies enqueued on the stream.
    pub(crate) fn put<F: Copy + Sync, T: Pod + DeviceRepr + Send>(
        &mut self,
        src: &[F],
        to: impl Fn(F) -> T + Sync,
        dst: &mut CudaSlice<T>,
        at: usize,
    ) -> Result<(), DriverError> {
        let size = size_of::<T>();
        let (mut src, mut at) = (src, at);
        while !src.is_empty() {
            if self.used + size > HALF {
                self.switch()?;
            }
            let n = ((HALF - self.used) / size).min(src.len());
            let from = self.half * HALF + self.used;
            let buf = self.gpu.stage_buffer(&mut self.buf)?;
            let slot: &mut [T] = bytemuck::cast_slice_mut(&mut buf[from..from + n * size]);
            // Converted on the rayon pool's threads (8 Ki elements each).
            slot.par_chunks_mut(1 << 13)
                .zip(src[..n].par_chunks(1 << 13))
                .for_each(|(o, x)| {
                    for (o, &x) in o.iter_mut().zip(x) {
                        *o = to(x);
                    }
                });
            let mut part = dst.slice_mut(at..at + n);
            self.gpu.stream.memcpy_htod(&*slot, &mut part)?;
            self.used += room(n * size);
            (src, at) = (&src[n..], at + n);
        }
        Ok(())
    }

    /// Leaves the half being filled for the other, once the other's copies are done.
    fn switch(&mut self) -> Result<(), DriverError> {
        self.done[self.half] = Some(self.gpu.event()?);
        self.half = 1 - self.half;
        self.used = 0;
        if let Some(e) = self.done[self.half].take() {
            e.synchronize()?;
        }
        Ok(())
    }

    /// Waits for every copy (the buffer may then serve another copy).
    pub(crate) fn finish(mut self) -> Result<(), DriverError> {
        self.wait_all()
    }

    fn wait_all(&mut self) -> Result<(), DriverError> {
        if self.used > 0 {
            self.done[self.half] = Some(self.gpu.event()?);
            self.used = 0;
        }
        for e in self.done.iter_mut().filter_map(Option::take) {
            e.synchronize()?;
        }
        Ok(())
    }
}

impl Drop for RowUpload<'_> {
    fn drop(&mut self) {
        // The buffer is released only once the copies out of it are done; an error here is
        // the stream's, and the next call on it reports it.
        let _ = self.wait_all();
    }
}

/// Device-to-host copies of rows through the page-locked buffer (held until dropped): the
/// copies of one piece into a half ([`RowDownload::fetch`]) run while the host reads the
/// piece in the other ([`RowDownload::take`]).
pub(crate) struct RowDownload<'g> {
    gpu: &'g Gpu,
    buf: MutexGuard<'g, Option<PinnedHostSlice<u8>>>,
    done: [Option<CudaEvent>; 2],
    /// Byte offset and length of each array fetched into each half.
    parts: [Vec<(usize, usize)>; 2],
}

impl<'g> RowDownload<'g> {
    /// Takes the page-locked buffer of `gpu` (allocated on first use).
    pub(crate) fn new(gpu: &'g Gpu) -> Result<Self, DriverError> {
        let mut buf = gpu.stage.0.lock().unwrap_or_else(|p| p.into_inner());
        gpu.stage_buffer(&mut buf)?;
        Ok(RowDownload {
            gpu,
            buf,
            done: [None, None],
            parts: [Vec::new(), Vec::new()],
        })
    }

    /// Whether arrays of these lengths (`f64`) fit one half together.
    pub(crate) fn fits(lens: impl IntoIterator<Item = usize>) -> bool {
        lens.into_iter().map(|n| room(8 * n)).sum::<usize>() <= HALF
    }

    /// Enqueues copies of `srcs` into half `half` (which must [`RowDownload::fits`] them,
    /// and whose previous piece has been read).
    pub(crate) fn fetch(
        &mut self,
        half: usize,
        srcs: &[CudaView<'_, f64>],
    ) -> Result<(), DriverError> {
        assert!(
            Self::fits(srcs.iter().map(|s| s.len())),
            "a piece too large"
        );
        let buf = self.gpu.stage_buffer(&mut self.buf)?;
        let mut at = half * HALF;
        let mut parts = Vec::with_capacity(srcs.len());
        for s in srcs {
            let n = s.len();
            let dst: &mut [f64] = bytemuck::cast_slice_mut(&mut buf[at..at + 8 * n]);
            self.gpu.stream.memcpy_dtoh(s, dst)?;
            parts.push((at, n));
            at += room(8 * n);
        }
        self.done[half] = Some(self.gpu.event()?);
        self.parts[half] = parts;
        Ok(())
    }

    /// The arrays fetched into half `half`, once their copies are done.
    pub(crate) fn take(&mut self, half: usize) -> Result<Vec<&[f64]>, DriverError> {
        if let Some(e) = self.done[half].take() {
            e.synchronize()?;
        }
        let buf = self.gpu.stage_buffer(&mut self.buf)?;
        let buf: &[u8] = buf;
        Ok(self.parts[half]
            .iter()
            .map(|&(at, n)| bytemuck::cast_slice(&buf[at..at + 8 * n]))
            .collect())
    }
}

impl Drop for RowDownload<'_> {
    fn drop(&mut self) {
        // The buffer is released only once the copies into it are done.
        for e in self.done.iter_mut().filter_map(Option::take) {
            let _ = e.synchronize();
        }
    }
}
