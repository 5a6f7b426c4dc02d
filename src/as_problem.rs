//! What the methods of [`SemiCrf`](crate::SemiCrf) take: anything that is or makes a
//! [`Problem`].

use std::borrow::Cow;

use semicrf_core::{EdgePotentials, Potentials, Problem};

/// A problem as the methods of [`SemiCrf`](crate::SemiCrf) take it: built [`Potentials`] or
/// [`EdgePotentials`] directly, or a [`Problem`] that holds either.
///
/// So `crf.log_partition(&potentials)` needs no conversion and no type annotation; a
/// [`Problem`] is borrowed as it is, and potentials are wrapped in one (a copy of their
/// views and per-sequence bounds, never of the tensors).
///
/// ```
/// use semicrf::ndarray::Array3;
/// use semicrf::{Potentials, Problem, SemiCrf};
///
/// let scores = Array3::<f64>::zeros((1, 3, 2));
/// let lengths = [3];
/// let potentials = Potentials::builder(scores.view(), &lengths, 3).build()?;
/// let crf = SemiCrf::new();
/// let log_z = crf.log_partition(&potentials)?;
///
/// // A `Problem` holding either form is taken as well.
/// let problem = Problem::from(potentials);
/// assert_eq!(crf.log_partition(&problem)?, log_z);
/// # Ok::<(), semicrf::Error>(())
/// ```
pub trait AsProblem<'a, F: Clone> {
    /// The problem, borrowed where it is one already.
    fn as_problem(&self) -> Cow<'_, Problem<'a, F>>;
}

impl<'a, F: Clone> AsProblem<'a, F> for Problem<'a, F> {
    fn as_problem(&self) -> Cow<'_, Problem<'a, F>> {
        Cow::Borrowed(self)
    }
}

impl<'a, F: Clone> AsProblem<'a, F> for Potentials<'a, F> {
    fn as_problem(&self) -> Cow<'_, Problem<'a, F>> {
        Cow::Owned(Problem::Structured(self.clone()))
    }
}

impl<'a, F: Clone> AsProblem<'a, F> for EdgePotentials<'a, F> {
    fn as_problem(&self) -> Cow<'_, Problem<'a, F>> {
        Cow::Owned(Problem::Edges(self.clone()))
    }
}
