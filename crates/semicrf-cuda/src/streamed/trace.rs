//! The max-semiring forward's device buffers and the traceback that reads its backpointers
//! from the device a block of rows at a time.

use std::cell::RefCell;

use cudarc::driver::CudaSlice;
use semicrf_core::{Decoded, Error, Result, decode_best};

use crate::call::{Model, Source, StreamCall};
use crate::device::Gpu;
use crate::kernel::SemiringId;

/// Rows `[lo, lo + ρ)` of a sequence's backpointers: `lo`, the durations, the labels.
type Block = (usize, Vec<i32>, Vec<i32>);

/// Viterbi decodings as `streaming::viterbi` computes them (the same kernel, the same
/// backpointers on the device), traced back on the host from blocks of `rows` rows of
/// backpointers read from the device as the traceback reaches them, instead of all of them.
pub(super) fn viterbi(
    gpu: &Gpu,
    backend: &str,
    model: &Model,
    src: Source<'_, '_, f64>,
    rows: usize,
) -> Result<Vec<Decoded>> {
    let _guard = gpu.lock.lock().unwrap_or_else(|e| e.into_inner());
    let call = StreamCall::new(gpu, backend, model, src, &[], None)?;
    let f = MaxForward::run(&call, false)?;
    let last = call.back(&f.last)?;
    let (t, c) = (model.shape.len, model.shape.labels);
    (0..model.shape.batch)
        .map(|b| {
            let fetch = |lo: usize, hi: usize| f.rows(&call, b, lo, hi);
            let rows = trace_rows(rows, c);
            let finals = |j: usize| last[b * c + j] + model.en[j];
            trace_in_blocks(model.lengths[b], t, c, model.dd, rows, finals, fetch)
        })
        .collect()
}

/// Rows of backpointers a traceback reads at a time: at least `rows`, and 16 MiB of them
/// (`c` labels) so that few copies move them.
pub(crate) fn trace_rows(rows: usize, c: usize) -> usize {
    rows.max((16 << 20) / (8 * c.max(1)))
}

/// The device buffers of a max-semiring forward: backpointers `(B, T + 1, C)` (durations,
/// labels), the last `α` of each sequence, and, where asked, every `u` `(B, T + 1, C)`.
pub(crate) struct MaxForward {
    pub(crate) bpd: CudaSlice<i32>,
    pub(crate) bpi: CudaSlice<i32>,
    pub(crate) last: CudaSlice<f64>,
    pub(crate) u: Option<CudaSlice<f64>>,
}

impl MaxForward {
    /// The max-semiring forward of `call`'s sequences (their `u` too where `save_u`).
    pub(crate) fn run(call: &StreamCall<'_>, save_u: bool) -> Result<MaxForward> {
        let sh = call.shape;
        let n = sh.batch * (sh.len + 1) * sh.labels;
        let f = MaxForward {
            bpd: call.zeros::<i32>(n)?,
            bpi: call.zeros::<i32>(n)?,
            last: call.zeros::<f64>(sh.batch * sh.labels)?,
            u: if save_u {
                Some(call.zeros::<f64>(n)?)
            } else {
                None
            },
        };
        call.log_forward(SemiringId::Max, None, None, |a| {
            a.bpd = call.ptr(&f.bpd);
            a.bpi = call.ptr(&f.bpi);
            a.last = call.ptr(&f.last);
            a.u = call.opt(&f.u);
        })?;
        call.gpu.mark();
        Ok(f)
    }

    /// Rows `[lo, hi)` of sequence `b`'s backpointers on the host: durations, labels.
    pub(crate) fn rows(
        &self,
        call: &StreamCall<'_>,
        b: usize,
        lo: usize,
        hi: usize,
    ) -> Result<(Vec<i32>, Vec<i32>)> {
        let c = call.shape.labels;
        let at = b * (call.shape.len + 1) * c;
        let r = at + lo * c..at + hi * c;
        Ok((
            call.back_all_of(&self.bpd.slice(r.clone()))?,
            call.back_all_of(&self.bpi.slice(r))?,
        ))
    }
}

/// [`decode_best`] of one sequence of length `len` whose backpointers, `(T + 1, C)` durations
/// and labels (`dd`: the previous label; else the label read at the segment's start, as
/// the max kernels write them), are read `rows` rows at a time by `fetch(lo, hi)` (rows
/// `[lo, hi)`), as the traceback reaches them.
pub(crate) fn trace_in_blocks(
    len: usize,
    t: usize,
    c: usize,
    dd: bool,
    rows: usize,
    finals: impl Fn(usize) -> f64,
    fetch: impl Fn(usize, usize) -> Result<(Vec<i32>, Vec<i32>)>,
) -> Result<Decoded> {
    let rho = rows.clamp(1, t + 1);
    let block: RefCell<Option<Block>> = RefCell::new(None);
    let failed: RefCell<Option<Error>> = RefCell::new(None);
    let at = |x: usize, j: usize| -> (i32, i32) {
        let mut blk = block.borrow_mut();
        if !blk
            .as_ref()
            .is_some_and(|(lo, _, _)| (*lo..*lo + rho).contains(&x))
        {
            let lo = (x + 1).saturating_sub(rho);
            match fetch(lo, (lo + rho).min(t + 1)) {
                Ok((d, i)) => *blk = Some((lo, d, i)),
                Err(e) => {
                    failed.borrow_mut().get_or_insert(e);
                    return (1, 0);
                }
            }
        }
        match blk.as_ref() {
            Some((lo, d, i)) => (d[(x - lo) * c + j], i[(x - lo) * c + j]),
            None => (1, 0),
        }
    };
    let d = decode_best(len, c, finals, |x, j| {
        let (d, i) = at(x, j);
        let d = (d as usize).clamp(1, x);
        let prev = if dd {
            i as usize
        } else if x == d {
            0
        } else {
            at(x - d, j).1 as usize
        };
        (d, prev.min(c - 1))
    });
    match failed.into_inner() {
        Some(e) => Err(e),
        None => Ok(d),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The traceback from blocks of backpointers gives the segments of the traceback from
    /// all of them (as `streaming::viterbi` reads them), for every block size, both
    /// transition forms; a failed read is the call's error.
    #[test]
    fn the_traceback_in_blocks_is_the_traceback_of_all_the_backpointers() {
        let mut x: u64 = 0x2545_f491_4f6c_dd1d;
        let mut next = move |n: usize| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x % n as u64) as usize
        };
        for (t, c, k) in [(1, 1, 1), (9, 3, 4), (40, 5, 7), (33, 2, 33)] {
            // Valid backpointers at every position 1..=T: durations within K and x.
            let mut bpd = vec![0i32; (t + 1) * c];
            let mut bpi = vec![0i32; (t + 1) * c];
            for xx in 1..=t {
                for j in 0..c {
                    bpd[xx * c + j] = (1 + next(k.min(xx))) as i32;
                    bpi[xx * c + j] = next(c) as i32;
                }
            }
            let finals: Vec<f64> = (0..c).map(|_| next(100) as f64).collect();
            for dd in [false, true] {
                let len = t - t / 3;
                let want = decode_best(
                    len,
                    c,
                    |j| finals[j],
                    |xx, j| {
                        let d = bpd[xx * c + j] as usize;
                        let prev = if dd {
                            bpi[xx * c + j] as usize
                        } else if xx == d {
                            0
                        } else {
                            bpi[(xx - d) * c + j] as usize
                        };
                        (d, prev)
                    },
                );
                for rows in [1, 2, 3, 7, t + 5] {
                    let fetch = |lo: usize, hi: usize| {
                        assert!(lo < hi && hi <= t + 1 && hi - lo <= rows.max(1));
                        Ok((bpd[lo * c..hi * c].to_vec(), bpi[lo * c..hi * c].to_vec()))
                    };
                    let got = trace_in_blocks(len, t, c, dd, rows, |j| finals[j], fetch).unwrap();
                    assert_eq!(got, want, "T {t} C {c} K {k} dd {dd} rows {rows}");
                }
                let fail = |_: usize, _: usize| {
                    Err(Error::Device {
                        backend: "test".into(),
                        message: "read failed".into(),
                    })
                };
                let got = trace_in_blocks(len, t, c, dd, 4, |j| finals[j], fail);
                assert!(matches!(got, Err(Error::Device { .. })), "{got:?}");
            }
        }
    }
}
