//! The `--kbest N` and `--posterior` outputs of `semicrf eval`: `"kbest"` and `"posterior"`.

use semicrf::interchange::Json;
use semicrf::{Decoded, Error, Potentials, Selection, SemiCrf};

/// `[[start, duration, label], ...]`.
fn segments_json(d: &Decoded) -> Json {
    Json::Arr(
        d.segments
            .iter()
            .map(|s| {
                Json::Arr(vec![
                    Json::Int(s.start),
                    Json::Int(s.duration),
                    Json::Int(s.label),
                ])
            })
            .collect(),
    )
}

/// `{"score": s, "segments": [...]}`.
fn decoded_json(d: &Decoded) -> Json {
    Json::Obj(vec![
        ("score".to_string(), Json::Num(d.score)),
        ("segments".to_string(), segments_json(d)),
    ])
}

/// The passes the extra outputs add, for the `backend` and `reason` keys: `kbest` (its
/// own selection) and, for `posterior`, the backward and Viterbi passes it runs.
pub fn selections(
    crf: &SemiCrf,
    problem: &Potentials<'_, f64>,
    kbest: Option<usize>,
) -> Result<Vec<(&'static str, Selection)>, Error> {
    match kbest {
        Some(k) => Ok(vec![("kbest", crf.select_kbest(problem, k)?)]),
        None => Ok(Vec::new()),
    }
}

/// The `"kbest"` field: per sequence, its list of `{"score", "segments"}`, best first.
pub fn kbest(
    crf: &SemiCrf,
    problem: &Potentials<'_, f64>,
    k: usize,
) -> Result<(String, Json), Error> {
    let lists = crf.kbest(problem, k)?;
    let json = lists
        .iter()
        .map(|list| Json::Arr(list.iter().map(decoded_json).collect()))
        .collect();
    Ok(("kbest".to_string(), Json::Arr(json)))
}

/// The `"posterior"` field: per sequence, the posterior decoding as `{"score", "segments"}`,
/// its score the expected number of correctly labelled positions.
pub fn posterior(crf: &SemiCrf, problem: &Potentials<'_, f64>) -> Result<(String, Json), Error> {
    let decoded = crf.posterior_decode(problem)?;
    let json = decoded.iter().map(decoded_json).collect();
    Ok(("posterior".to_string(), Json::Arr(json)))
}
