//! semicrf facade.
