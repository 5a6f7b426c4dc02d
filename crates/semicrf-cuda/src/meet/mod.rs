//! The host side of the meet kernels (`kernels/meet.cu` and its headers): the log semiring's
//! streaming forward and backward with a static transition, swept from both ends of every
//! sequence at once in the linear domain.
//!
//! A forward pass is two launches: `meet_fwd_log` (two blocks a sequence: the forward sweep
//! to the middle and the reverse sweep to it) and `meet_z_log` (one block a sequence: `Z`
//! where the two meet). A backward pass is `meet_save_log` (the same first halves, saving
//! their rows) and `meet_bwd_log` (the meet, then both sweeps to the other end with the
//! marginals). Sequences the kernels give up (the flags of the kernels) are rerun by the
//! log-domain kernels by the caller (`streaming`).
//!
//! | module | what |
//! |---|---|
//! | [`plan`] | threads, label width, steps a block, shared-memory layout, parameters, memory |
//! | [`launch`] | the buffers, the launches, the small outputs read back |

pub(crate) mod launch;
pub(crate) mod plan;
#[cfg(test)]
mod tests;

pub(crate) use plan::{Layout, bytes, fitting_plan, layout, params};
