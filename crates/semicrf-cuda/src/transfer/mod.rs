//! Moving data between the host and the device: a call's inputs ([`upload`]) and large
//! copies through page-locked memory ([`stage`]).

pub(crate) mod stage;
pub(crate) mod upload;
