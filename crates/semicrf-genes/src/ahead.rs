//! A source whose chunks are computed ahead, on a thread of their own, in the order a
//! forward sweep reads them: decoding then spends its sweep's thread on the sweep while the
//! potentials of the next rows are being computed.

use std::sync::Mutex;
use std::sync::mpsc::{Receiver, SyncSender, sync_channel};

use semicrf::{PotentialSource, Result, Scalar, SourceRows};

use crate::labels::C;

/// Chunks computed ahead and waiting: at most this many, besides the one in the making.
const WAITING: usize = 2;

/// One chunk of rows `[t0, t0 + n)`: scores, begin and end boundaries, `n·C` each.
struct Chunk<F> {
    t0: usize,
    rows: [Vec<F>; 3],
}

/// What the consumer side holds.
struct State<F> {
    /// Sends the chunk size (the rows of the first request) to the producer, once.
    start: Option<SyncSender<usize>>,
    chunks: Receiver<Chunk<F>>,
    /// The size and first row of the next chunk the producer delivers, once started.
    next: Option<(usize, usize)>,
}

/// `inner`'s rows, the full chunks `[i·n, (i + 1)·n)` (`n` the rows of the first request)
/// computed ahead by [`Ahead::produce`] on another thread; a request for any other rows
/// (a shifted last chunk, the traceback's recomputed blocks) is computed by `inner` on the
/// caller's thread. The values are `inner`'s either way (bitwise: the same calls).
pub(crate) struct Ahead<'a, F, S: ?Sized> {
    inner: &'a S,
    len: usize,
    state: Mutex<State<F>>,
}

/// The producer's end of an [`Ahead`]: [`Producer::run`] computes the chunks.
pub(crate) struct Producer<F> {
    start: Receiver<usize>,
    chunks: SyncSender<Chunk<F>>,
    len: usize,
}

impl<'a, F: Scalar, S: PotentialSource<F> + ?Sized> Ahead<'a, F, S> {
    /// A source of `inner`'s one sequence, and the producer that computes its chunks ahead
    /// once [`Producer::run`] runs it (on another thread).
    pub(crate) fn new(inner: &'a S) -> (Self, Producer<F>) {
        let (start_tx, start_rx) = sync_channel(1);
        let (tx, rx) = sync_channel(WAITING);
        let ahead = Ahead {
            inner,
            len: inner.lengths()[0],
            state: Mutex::new(State {
                start: Some(start_tx),
                chunks: rx,
                next: None,
            }),
        };
        let producer = Producer {
            start: start_rx,
            chunks: tx,
            len: ahead.len,
        };
        (ahead, producer)
    }
}

impl<F: Scalar> Producer<F> {
    /// Computes `inner`'s full chunks in order, until the last one or until the [`Ahead`]
    /// is dropped (then it stops at the next chunk).
    pub(crate) fn run<S: PotentialSource<F> + ?Sized>(self, inner: &S) {
        let p = self;
        let Ok(n) = p.start.recv() else {
            return;
        };
        let mut t0 = 0;
        while n > 0 && t0 + n <= p.len {
            let mut rows = [
                vec![F::zero(); n * C],
                vec![F::zero(); n * C],
                vec![F::zero(); n * C],
            ];
            let [s, b, e] = &mut rows;
            if inner
                .fill(0, t0, SourceRows::new(s, Some(b), Some(e)))
                .is_err()
            {
                // The consumer computes this chunk itself and meets the error there.
                return;
            }
            if p.chunks.send(Chunk { t0, rows }).is_err() {
                return;
            }
            t0 += n;
        }
    }
}

impl<F: Scalar, S: PotentialSource<F> + ?Sized> PotentialSource<F> for Ahead<'_, F, S> {
    fn lengths(&self) -> &[usize] {
        self.inner.lengths()
    }
    fn labels(&self) -> usize {
        self.inner.labels()
    }
    fn has_begin_boundary(&self) -> bool {
        self.inner.has_begin_boundary()
    }
    fn has_end_boundary(&self) -> bool {
        self.inner.has_end_boundary()
    }
    fn fill(&self, sequence: usize, t0: usize, rows: SourceRows<'_, F>) -> Result<()> {
        let n = rows.scores.len() / C;
        let ready = {
            let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(tx) = st.start.take() {
                // The first request sets the chunk size; the producer starts at row 0.
                st.next = (tx.send(n).is_ok() && t0 == 0).then_some((n, 0));
            }
            match st.next {
                Some((size, next)) if size == n && next == t0 && t0 + n <= self.len => {
                    let got = st.chunks.recv().ok();
                    st.next = got.as_ref().map(|_| (n, t0 + n));
                    got
                }
                _ => None,
            }
        };
        match (ready, rows.begin_boundary, rows.end_boundary) {
            (Some(ch), Some(bb), Some(eb)) if ch.t0 == t0 => {
                rows.scores.copy_from_slice(&ch.rows[0]);
                bb.copy_from_slice(&ch.rows[1]);
                eb.copy_from_slice(&ch.rows[2]);
                Ok(())
            }
            (_, bb, eb) => self
                .inner
                .fill(sequence, t0, SourceRows::new(rows.scores, bb, eb)),
        }
    }
}

#[cfg(test)]
mod tests {
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    use super::*;
    use crate::labels::PIECE;
    use crate::model::{Model, Prepared, Source};

    /// The rows of `src` at `t0..t0 + n`, as bits.
    fn rows(src: &dyn PotentialSource<f32>, t0: usize, n: usize) -> Vec<u32> {
        let (mut s, mut b, mut e) = (vec![0.0f32; n * C], vec![0.0; n * C], vec![0.0; n * C]);
        src.fill(0, t0, SourceRows::new(&mut s, Some(&mut b), Some(&mut e)))
            .unwrap();
        [s, b, e].iter().flatten().map(|x| x.to_bits()).collect()
    }

    #[test]
    fn the_rows_computed_ahead_are_the_sources_whatever_is_asked() {
        let mut rng = ChaCha8Rng::seed_from_u64(5);
        let mut model = Model::new(PIECE + 20);
        for w in model.w.iter_mut() {
            *w = rng.random_range(-1.0..1.0);
        }
        let x: Vec<u8> = (0..1000).map(|_| rng.random_range(0..4)).collect();
        let p = Prepared::lean(&x);
        let src = Source::new(&model, &p);
        // A forward sweep's chunks (the last one shifted), then a traceback's: blocks from
        // the top down, and a chunk of another size.
        let mut asks: Vec<(usize, usize)> = (0..1000 - 64).step_by(64).map(|t| (t, 64)).collect();
        asks.push((1000 - 64, 64));
        asks.extend([(640, 64), (704, 64), (0, 64), (64, 64), (3, 7)]);
        std::thread::scope(|s| {
            let (ahead, producer) = Ahead::new(&src);
            s.spawn(|| producer.run(&src));
            for &(t0, n) in &asks {
                assert_eq!(rows(&ahead, t0, n), rows(&src, t0, n), "rows {t0}..+{n}");
            }
        });
        // Dropped before its first request, or before the producer's last chunk: the
        // producer stops (the scope ends).
        std::thread::scope(|s| {
            let (ahead, producer) = Ahead::<f32, _>::new(&src);
            s.spawn(|| producer.run(&src));
            drop(ahead);
        });
        std::thread::scope(|s| {
            let (ahead, producer) = Ahead::new(&src);
            s.spawn(|| producer.run(&src));
            assert_eq!(rows(&ahead, 0, 10), rows(&src, 0, 10));
        });
    }
}
