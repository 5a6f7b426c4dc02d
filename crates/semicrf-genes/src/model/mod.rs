//! The gene model's parameters and the semi-CRF potentials they define, with the adjoint
//! that maps gradients of the potentials back onto the parameters.
//!
//! Every potential is a sum of learned weights (the model is linear in them):
//!
//! - **content** (`scores`): coding bases score the hexamer and the trimer that end at them,
//!   per codon position, read on their own strand; intron bases the same without codon
//!   position; intergenic bases both strands' hexamers and trimers (intergenic sequence has
//!   no strand). A base that ends an in-frame stop codon is `-inf` for every exon label of
//!   that frame, so no exon holds an in-frame stop (and the engine's windows stop there).
//! - **signals** (`begin_boundary`, `end_boundary`): start codon, splice acceptor, splice
//!   donor and stop codon windows score one weight per (offset, base) and per (offset,
//!   dinucleotide); a boundary without its consensus (`ATG`, `AG`, `GT`/`GC`, a stop codon
//!   in frame) is `-inf`.
//! - **durations**: one table per exon type, for intron first pieces and for intergenic
//!   first pieces, on logarithmic bins; one weight for each continuation piece.
//! - **transitions**: one weight per pair of label kinds (frames share it); `-inf` for what
//!   the gene structure forbids.
//!
//! # Finding your way
//!
//! Each file uses only those listed before it:
//!
//! - `signals.rs`: [`Signal`], the four signal windows; where their consensus allows an exon
//!   boundary; the weights a window reads.
//! - `layout.rs`: [`Layout`], where each block of weights lives in the flat vector, with the
//!   named sizes of the blocks and the duration bins ([`bin`]); [`Model`], a layout and its
//!   weights.
//! - `prepared.rs`: [`Prepared`], a sequence as the model reads it: both strands' bases and
//!   k-mer contexts.
//! - `potentials.rs`: the [`Potentials`] of a sequence ([`Model::potentials`]) and their
//!   adjoint ([`Model::pull_back`]), written side by side and tested against each other; the
//!   [`engine`] every call runs on.
//! - `source.rs`: [`Source`], the same potentials as a
//!   [`PotentialSource`](semicrf::PotentialSource), computed chunk by chunk (decoding).
//! - `init.rs`: [`Model::initialise`], starting weights read off annotated genes (the
//!   model as a generative semi-Markov model).
//! - `segments.rs`: between genes and segmentations: [`gold_segments`], [`why_impossible`],
//!   [`genes_of`].

mod init;
mod layout;
mod potentials;
mod prepared;
mod segments;
mod signals;
mod source;

pub use init::log_length_density;
pub use layout::{Layout, Model, bin};
pub use potentials::{Potentials, Shared, engine};
pub use prepared::Prepared;
pub use segments::{genes_of, gold_segments, why_impossible};
pub use signals::Signal;
pub use source::Source;
