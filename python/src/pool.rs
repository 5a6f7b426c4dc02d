//! The CPU engines' thread pool, one per process.
//!
//! rayon's global pool does not survive `fork()`: the child inherits the pool's state but
//! not its threads, and its first parallel call waits forever for workers that do not
//! exist. So the module keeps its own pool, tagged with the id of the process that built
//! it; a call from another process (a forked child) builds a fresh pool and runs there.
//! The parent's pool is never dropped in the child (dropping it would signal threads that
//! are not there); it is leaked, once per fork.

use std::sync::{Arc, Mutex};

use rayon::{ThreadPool, ThreadPoolBuilder};

use crate::errors::{Failure, Outcome};

static POOL: Mutex<Option<(u32, Arc<ThreadPool>)>> = Mutex::new(None);

/// The pool of the current process, built at its first use in this process.
/// `SEMICRF_NUM_THREADS` sets its size (default: rayon's, the number of CPUs).
fn pool() -> Outcome<Arc<ThreadPool>> {
    let pid = std::process::id();
    let mut slot = POOL.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    if let Some((owner, pool)) = slot.as_ref()
        && *owner == pid
    {
        return Ok(pool.clone());
    }
    let mut builder = ThreadPoolBuilder::new().thread_name(|i| format!("semicrf-{i}"));
    if let Some(n) = threads_from_env()? {
        builder = builder.num_threads(n);
    }
    let pool = Arc::new(
        builder
            .build()
            .map_err(|e| Failure::Runtime(format!("cannot start the CPU thread pool: {e}")))?,
    );
    if let Some(old) = slot.replace((pid, pool.clone())) {
        // Built by the parent before a fork: its threads are not in this process.
        std::mem::forget(old);
    }
    Ok(pool)
}

fn threads_from_env() -> Outcome<Option<usize>> {
    match std::env::var("SEMICRF_NUM_THREADS") {
        Err(_) => Ok(None),
        Ok(s) => match s.trim().parse::<usize>() {
            Ok(n) if n > 0 => Ok(Some(n)),
            _ => Err(Failure::Value(format!(
                "SEMICRF_NUM_THREADS = {s:?} is not a positive integer"
            ))),
        },
    }
}

/// Runs `work` inside this process's pool (its rayon calls use that pool).
pub fn install<T: Send>(work: impl FnOnce() -> Outcome<T> + Send) -> Outcome<T> {
    pool()?.install(work)
}
