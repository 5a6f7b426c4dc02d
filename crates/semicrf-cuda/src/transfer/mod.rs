//! Moving data between the host and the device: a call's inputs ([`upload`]), large
//! copies through page-locked memory ([`stage`]), and the rows of a potentials source and of
//! its gradients, chunk by chunk, through the same memory ([`rows`]).

pub(crate) mod rows;
pub(crate) mod stage;
pub(crate) mod upload;
