//! The host side of the edge-form kernels (`kernels/edge.cu`): the exact and scan algorithms
//! on the GPU. Structured input is materialised on the host, as the CPU's exact engine does;
//! edge input is copied in `f64`.

use cudarc::driver::{CudaSlice, DeviceRepr, LaunchConfig, PushKernelArg, ValidAsZeroBits};
use ndarray::Array5;
use semicrf_core::{
    Backward, ByteCount, Decoded, Error, Gradients, Problem, Result, Scalar, Shape, decode_best,
    materialize, pull_back,
};

use crate::call::team_plan;
use crate::device::{Gpu, driver};
use crate::kernel::{DevPtr, EdgeArgs, Kernel, SemiringId, What};

/// Device bytes a call allocates for `shape`: the edges in `f64` (whatever the input type),
/// the `(T+1, C)` tables of `α` (and its entropies, `β`, backpointers) and the small
/// per-sequence buffers. The marginals are written over the edges.
pub(crate) fn bytes(shape: Shape, what: What) -> ByteCount {
    let (b, t, k, c) = (shape.batch, shape.len, shape.max_duration, shape.labels);
    let t1 = t.saturating_add(1);
    let edges = ByteCount::f64s(&[b, t, k, c, c]);
    let table = ByteCount::f64s(&[b, t1, c]);
    let small = ByteCount::f64s(&[2, b]) + ByteCount::bytes(&[8, b]);
    let work = match what {
        What::Forward(SemiringId::Entropy) => table + table + ByteCount::f64s(&[b, k, c]),
        What::Forward(_) => table,
        What::Viterbi => table + ByteCount::bytes(&[4, b, t1, c]),
        What::Backward => table + table + ByteCount::f64s(&[2, b]) + ByteCount::f64s(&[b, t]),
    };
    edges + small + work
}

/// One call's edges and lengths on the device.
struct EdgeCall<'g> {
    gpu: &'g Gpu,
    backend: &'g str,
    shape: Shape,
    team: usize,
    threads: usize,
    /// The edges, `(B, T, K, C, C)` in standard layout, as `f64`.
    e: CudaSlice<f64>,
    /// The entropy forward's items for first segments ([`virtual_start`]).
    v0: Option<CudaSlice<f64>>,
    len: CudaSlice<i64>,
}

impl<'g> EdgeCall<'g> {
    /// The edges of `problem` on the device, with the virtual start's items when `ring` is
    /// the entropy semiring's.
    fn new<F: Scalar>(
        gpu: &'g Gpu,
        backend: &'g str,
        problem: &Problem<'_, F>,
        ring: SemiringId,
    ) -> Result<Self> {
        let shape = problem.shape();
        let host: Vec<f64> = match problem {
            Problem::Structured(p) => materialize(p).into_raw_vec_and_offset().0,
            Problem::Edges(e) => e.edges().iter().map(|x| x.as_f64()).collect(),
        };
        let e = gpu.upload(&host).map_err(|e| driver(backend, e))?;
        let v0 = match ring {
            SemiringId::Entropy => Some(
                gpu.upload(&virtual_start(&host, shape))
                    .map_err(|e| driver(backend, e))?,
            ),
            _ => None,
        };
        drop(host);
        let lengths: Vec<i64> = problem.lengths().iter().map(|&l| l as i64).collect();
        let len = gpu.upload(&lengths).map_err(|e| driver(backend, e))?;
        let (k, c) = (shape.max_duration, shape.labels);
        let (team, threads) = team_plan(k.saturating_mul(c), c);
        Ok(EdgeCall {
            gpu,
            backend,
            shape,
            team,
            threads,
            e,
            v0,
            len,
        })
    }

    fn err(&self, e: cudarc::driver::DriverError) -> Error {
        driver(self.backend, e)
    }

    fn zeros<T: DeviceRepr + ValidAsZeroBits>(&self, n: usize) -> Result<CudaSlice<T>> {
        self.gpu.zeros::<T>(n).map_err(|e| self.err(e))
    }

    fn up(&self, v: &[f64]) -> Result<CudaSlice<f64>> {
        self.gpu.upload(v).map_err(|e| self.err(e))
    }

    fn ptr<T>(&self, s: &CudaSlice<T>) -> DevPtr {
        self.gpu.ptr(s)
    }

    fn back<T: DeviceRepr>(&self, s: &CudaSlice<T>) -> Result<Vec<T>> {
        self.gpu.stream.clone_dtoh(s).map_err(|e| self.err(e))
    }

    fn args(&self) -> EdgeArgs {
        let sh = self.shape;
        EdgeArgs {
            e: self.ptr(&self.e),
            len: self.ptr(&self.len),
            b: sh.batch as i64,
            t: sh.len as i64,
            k: sh.max_duration as i64,
            c: sh.labels as i64,
            team: self.team as i32,
            ..EdgeArgs::default()
        }
    }

    /// Launches `kernel` with one block per sequence (`per_sequence`) or a grid of 256-thread
    /// blocks over `n` items.
    fn launch(&self, kernel: Kernel, a: &EdgeArgs, per_sequence: bool, n: usize) -> Result<()> {
        let (grid, block) = if per_sequence {
            (self.shape.batch, self.threads)
        } else {
            (n.div_ceil(256).clamp(1, 1 << 16), 256)
        };
        let cfg = LaunchConfig {
            grid_dim: (grid as u32, 1, 1),
            block_dim: (block as u32, 1, 1),
            shared_mem_bytes: 0,
        };
        let mut b = self.gpu.stream.launch_builder(self.gpu.function(kernel));
        b.arg(a);
        // SAFETY: `a` is the kernel's `struct EArgs` (its layout asserted at compile time); every pointer in it is a live
        // allocation of this call sized for the shape, or null where the kernel checks.
        unsafe { b.launch(cfg) }.map_err(|e| self.err(e))?;
        Ok(())
    }

    /// The forward pass in `ring`: `(x, h)` per sequence, and the α table.
    fn forward(&self, ring: SemiringId, bp: Option<&CudaSlice<i32>>) -> Result<(Vec<f64>, Table)> {
        let sh = self.shape;
        let (bn, t, c) = (sh.batch, sh.len, sh.labels);
        let rows = bn * (t + 1) * c;
        let alpha = self.zeros::<f64>(rows)?;
        let ent = ring == SemiringId::Entropy;
        let alphah = if ent {
            Some(self.zeros::<f64>(rows)?)
        } else {
            None
        };
        let out = self.zeros::<f64>(2 * bn)?;
        let mut a = self.args();
        a.alpha = self.ptr(&alpha);
        a.alphah = alphah.as_ref().map_or(DevPtr::NULL, |s| self.ptr(s));
        a.v0 = self.v0.as_ref().map_or(DevPtr::NULL, |s| self.ptr(s));
        a.bp = bp.map_or(DevPtr::NULL, |s| self.ptr(s));
        a.out = self.ptr(&out);
        let kernel = match ring {
            SemiringId::Log => Kernel::EdgeFwdLog,
            SemiringId::Max => Kernel::EdgeFwdMax,
            SemiringId::Entropy => Kernel::EdgeFwdEnt,
        };
        self.launch(kernel, &a, true, 0)?;
        self.gpu.mark();
        Ok((self.back(&out)?, Table { alpha }))
    }
}

/// The saved `α` of a forward pass.
struct Table {
    alpha: CudaSlice<f64>,
}

/// The entropy forward's item for a first segment: `⊕_i E[b, 0, d-1, j, i]` per `(b, d, j)`
/// in the log semiring (`-inf` when every source is), `(B, K, C)`.
fn virtual_start(edges: &[f64], sh: Shape) -> Vec<f64> {
    let (bn, t, k, c) = (sh.batch, sh.len, sh.max_duration, sh.labels);
    let mut v = Vec::with_capacity(bn * k * c);
    for b in 0..bn {
        for dj in 0..k * c {
            let row = &edges[(b * t * k * c + dj) * c..][..c];
            let m = row.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            v.push(if m == f64::NEG_INFINITY {
                m
            } else {
                m + row.iter().map(|&x| (x - m).exp()).sum::<f64>().ln()
            });
        }
    }
    v
}

/// A forward pass: `(log-weight, entropy)` per sequence.
pub(crate) fn forward<F: Scalar>(
    gpu: &Gpu,
    backend: &str,
    problem: &Problem<'_, F>,
    ring: SemiringId,
) -> Result<Vec<[f64; 2]>> {
    let _guard = gpu.lock.lock().unwrap_or_else(|e| e.into_inner());
    let call = EdgeCall::new(gpu, backend, problem, ring)?;
    let (out, _) = call.forward(ring, None)?;
    Ok(out.chunks(2).map(|w| [w[0], w[1]]).collect())
}

/// Viterbi decodings: ties go to the smaller duration, then the smaller previous label, and
/// the final label is the smallest best one, as on the CPU.
pub(crate) fn viterbi<F: Scalar>(
    gpu: &Gpu,
    backend: &str,
    problem: &Problem<'_, F>,
) -> Result<Vec<Decoded>> {
    let _guard = gpu.lock.lock().unwrap_or_else(|e| e.into_inner());
    let call = EdgeCall::new(gpu, backend, problem, SemiringId::Max)?;
    let sh = call.shape;
    let (t, c) = (sh.len, sh.labels);
    let bp = call.zeros::<i32>(sh.batch * (t + 1) * c)?;
    let (_, table) = call.forward(SemiringId::Max, Some(&bp))?;
    let (alpha, bp) = (call.back(&table.alpha)?, call.back(&bp)?);
    Ok((0..sh.batch)
        .map(|b| {
            let at = |x: usize, j: usize| (b * (t + 1) + x) * c + j;
            let len = problem.lengths()[b];
            decode_best(
                len,
                c,
                |j| alpha[at(len, j)],
                |x, j| {
                    let packed = bp[at(x, j)] as usize;
                    (packed / c + 1, packed % c)
                },
            )
        })
        .collect())
}

/// Forward and backward: log Z, the edge marginals scaled by `upstream` (pulled back onto
/// structured input), boundary marginals.
pub(crate) fn backward<F: Scalar>(
    gpu: &Gpu,
    backend: &str,
    problem: &Problem<'_, F>,
    upstream: &[f64],
) -> Result<Backward> {
    let _guard = gpu.lock.lock().unwrap_or_else(|e| e.into_inner());
    let call = EdgeCall::new(gpu, backend, problem, SemiringId::Log)?;
    let sh = call.shape;
    let (bn, t, k, c) = (sh.batch, sh.len, sh.max_duration, sh.labels);
    let (out, table) = call.forward(SemiringId::Log, None)?;
    let log_z: Vec<f64> = out.chunks(2).map(|w| w[0]).collect();
    semicrf_core::check_feasible(&log_z)?;
    let beta = call.zeros::<f64>(bn * (t + 1) * c)?;
    let lz = call.up(&log_z)?;
    let upd = call.up(upstream)?;
    let bm = call.zeros::<f64>(bn * t)?;
    let mut a = call.args();
    a.alpha = call.ptr(&table.alpha);
    a.beta = call.ptr(&beta);
    a.lz = call.ptr(&lz);
    a.up = call.ptr(&upd);
    a.bm = call.ptr(&bm);
    call.launch(Kernel::EdgeBwdLog, &a, true, 0)?;
    call.launch(Kernel::EdgeBm, &a, false, bn * t)?;
    call.launch(Kernel::EdgeMarg, &a, false, bn * t * k * c * c)?;
    gpu.mark();
    let shape_err = |e: ndarray::ShapeError| Error::Device {
        backend: backend.into(),
        message: e.to_string(),
    };
    let mu = Array5::from_shape_vec((bn, t, k, c, c), call.back(&call.e)?).map_err(shape_err)?;
    let boundary_marginals =
        ndarray::Array2::from_shape_vec((bn, t), call.back(&bm)?).map_err(shape_err)?;
    let grad = match problem {
        Problem::Structured(p) => pull_back(p, mu.view()),
        Problem::Edges(_) => Gradients {
            edges: Some(mu),
            ..Gradients::default()
        },
    };
    Ok(Backward {
        log_z,
        grad,
        boundary_marginals,
    })
}
