//! The criterion suite: `cargo bench -p semicrf-bench [-- FILTER]`.
//!
//! One module per algorithm; ids are `{device}/{algo}/{semiring}/B{B}_T{T}_K{K}_C{C}` with
//! semiring `log` for the forward pass and `log_backward` for forward+backward, throughput in
//! positions (`B·T`). Before timing a shape each module prints its peak heap beyond inputs and
//! outputs next to `memory_required`. Set `SEMICRF_BENCH_FULL=1` to include the shapes that
//! take minutes (S8 forward+backward). S9 is never run here (see the `memory` binary).
//!
//! `sweep/` is the benchmark report's T-sweep (`semicrf_bench::sweep`, ids prefixed with
//! `sweep/`): `cargo bench -p semicrf-bench --bench main -- sweep/`, then the `report` binary.

mod common;
mod cuda;
mod edge;
mod streaming;
mod sweep;

#[global_allocator]
static ALLOC: semicrf_bench::alloc::CountingAlloc = semicrf_bench::alloc::CountingAlloc;

criterion::criterion_main!(
    streaming::streaming,
    edge::scan,
    edge::exact,
    cuda::cuda,
    sweep::sweep_group
);
