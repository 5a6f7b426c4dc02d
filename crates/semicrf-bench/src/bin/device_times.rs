//! Median wall-clock times of one complete [`semicrf_cuda::CudaEngine::backward_into`] call
//! on potentials already on the GPU, at canonical shapes: the Rust API's cost of what the
//! Python binding's `cuda_backward` does per call, to set the binding's overhead against.
//!
//! ```text
//! cargo run --release -p semicrf-bench --features cuda --bin device_times -- \
//!     [--repeats 21] [S1 S2 ...]
//! ```
//!
//! The scores `(B, T, C)` are uploaded once as `f32` device arrays (cudarc), with
//! preallocated `f32` outputs for their gradient and log Z. Each timed call builds and
//! checks the [`semicrf_cuda::DevicePotentials`] (scores, transition and duration: the
//! inputs of `python/examples/bench_head.py`'s bare `log_partition(hidden, lengths, k, tr,
//! dur)` step, no start, end or boundaries) and runs the backward pass into the outputs;
//! it returns when the device's work is done. After one untimed call, the median of
//! `--repeats` calls by the host's clock (`std::time::Instant`). One line per shape:
//! `S1 (32, 64, 7, 9) rust backward_into 0.123 ms`.
//!
//! Then the same work as a training loop runs it, as the Python binding's `log_partition`
//! step does: the transition and duration on the device too, their gradients into device
//! outputs, and [`semicrf_cuda::CudaEngine::backward_into_queued`], which returns once the
//! work is queued. `--repeats` calls back to back, then one wait for the device: the time
//! per call of that loop (the device's pace when the host keeps ahead), and the host's own
//! median time per call (building and checking the potentials included, the input checks'
//! one read-back with it). One line per shape:
//! `S1 (32, 64, 7, 9) rust backward_into_queued 0.101 ms a call in a loop, host 0.090 ms`.

use ndarray::ArrayViewD;
use semicrf_bench::{SEED, canonical, median, ones, problem, time_ms};
use semicrf_cuda::cudarc::driver::CudaContext;
use semicrf_cuda::{CudaEngine, DeviceArray, DeviceArrayMut, DeviceOutputs, DevicePotentials};

fn main() {
    let (repeats, _, shapes) = semicrf_bench::timing_args(21, &[]);
    let engine = CudaEngine::usable_or_skip(0).expect("a usable GPU");
    let stream = CudaContext::new(0).expect("CUDA device 0").default_stream();
    for id in shapes {
        let s = canonical(&id).unwrap_or_else(|| panic!("unknown shape {id}"));
        let (b, t, k, c) = (s.batch, s.len, s.max_duration, s.labels);
        let owned = problem(s, SEED);
        let widen = |a: &ndarray::ArrayD<f32>| a.mapv(f64::from);
        let tr = widen(owned.transition.as_ref().expect("a transition"));
        let dur = widen(owned.duration.as_ref().expect("a duration"));
        let flat: Vec<f32> = owned.scores.iter().copied().collect();
        let scores = stream.clone_htod(&flat).expect("scores on the device");
        let mut grad = stream.alloc_zeros::<f32>(b * t * c).expect("an output");
        let mut log_z = stream.alloc_zeros::<f32>(b).expect("an output");
        let lengths = owned.lengths.clone();
        let up = ones(b);
        let (trv, durv): (ArrayViewD<'_, f64>, ArrayViewD<'_, f64>) = (tr.view(), dur.view());
        let mut call = || {
            let p = DevicePotentials::builder(DeviceArray::f32(&scores), (b, t, c), &lengths, k)
                .transition(trv.clone())
                .duration(durv.clone())
                .build(&engine)
                .expect("valid potentials");
            let out = DeviceOutputs::new(DeviceArrayMut::f32(&mut grad))
                .log_z(DeviceArrayMut::f32(&mut log_z));
            engine.backward_into(&p, &up, out).expect("backward")
        };
        call();
        let ms = median(&mut time_ms(repeats, &mut call));
        println!("{id} ({b}, {t}, {k}, {c}) rust backward_into {ms:.3} ms");
        // The loop of queued calls, the shared parameters on the device.
        let to32 = |a: &ndarray::ArrayD<f64>| a.iter().map(|&x| x as f32).collect::<Vec<_>>();
        let (dtr, ddur) = (
            stream.clone_htod(&to32(&tr)).expect("on the device"),
            stream.clone_htod(&to32(&dur)).expect("on the device"),
        );
        let mut gtr = stream.alloc_zeros::<f32>(tr.len()).expect("an output");
        let mut gdur = stream.alloc_zeros::<f32>(dur.len()).expect("an output");
        let (trs, durs) = (tr.shape().to_vec(), dur.shape().to_vec());
        let mut queued = || {
            let p = DevicePotentials::builder(DeviceArray::f32(&scores), (b, t, c), &lengths, k)
                .transition_on_device(DeviceArray::f32(&dtr), &trs)
                .duration_on_device(DeviceArray::f32(&ddur), &durs)
                .build(&engine)
                .expect("valid potentials");
            let out = DeviceOutputs::new(DeviceArrayMut::f32(&mut grad))
                .log_z(DeviceArrayMut::f32(&mut log_z))
                .transition(DeviceArrayMut::f32(&mut gtr))
                .duration(DeviceArrayMut::f32(&mut gdur));
            engine.backward_into_queued(&p, &up, out).expect("backward")
        };
        queued();
        stream.synchronize().expect("the device's work");
        let t0 = std::time::Instant::now();
        let host = median(&mut time_ms(repeats, &mut queued));
        stream.synchronize().expect("the device's work");
        let per = t0.elapsed().as_secs_f64() * 1e3 / repeats as f64;
        println!(
            "{id} ({b}, {t}, {k}, {c}) rust backward_into_queued {per:.3} ms a call in a loop, \
             host {host:.3} ms"
        );
    }
}
