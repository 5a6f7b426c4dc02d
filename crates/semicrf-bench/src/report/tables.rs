//! The page's tables of record: the sources (machine, date and commit of each), the
//! criterion run at the canonical shapes, and the peer results.

use std::collections::BTreeSet;
use std::fmt::Write as _;

use semicrf_core::human_bytes;

use super::markdown::ms;
use super::{Inputs, PeerResult, Source, Timing};
use crate::CANONICAL;

fn date_of(time: std::time::SystemTime) -> String {
    let text = humantime::format_rfc3339_seconds(time).to_string();
    // 2026-11-26T06:40:12Z → 2026-11-26 06:40 UTC
    match (text.get(..10), text.get(11..16)) {
        (Some(d), Some(t)) => format!("{d} {t} UTC"),
        _ => text,
    }
}

fn rfc_date(text: &str) -> String {
    match (text.get(..10), text.get(11..16)) {
        (Some(d), Some(t)) => format!("{d} {t} UTC"),
        _ => text.to_string(),
    }
}

fn peers_dates(src: &Source<Vec<PeerResult>>) -> String {
    let dates: BTreeSet<&str> = src
        .data
        .iter()
        .filter_map(|r| r.date_utc.as_deref().and_then(|d| d.get(..10)))
        .collect();
    match (dates.first(), dates.last()) {
        (Some(a), Some(b)) if a == b => a.to_string(),
        (Some(a), Some(b)) => format!("{a} to {b}"),
        _ => "not recorded in the result files".into(),
    }
}

fn peers_machine(src: &Source<Vec<PeerResult>>) -> String {
    let details: BTreeSet<&str> = src
        .data
        .iter()
        .filter(|r| !r.detail.is_empty())
        .map(|r| r.detail.as_str())
        .collect();
    let gpu = details.iter().find_map(|d| {
        d.split(" on ")
            .nth(1)
            .map(|rest| rest.split(',').next().unwrap_or(rest).trim().to_string())
    });
    let threads: BTreeSet<&str> = details
        .iter()
        .filter(|d| d.ends_with("CPU threads"))
        .copied()
        .collect();
    let mut parts: Vec<String> = threads.into_iter().map(String::from).collect();
    if let Some(gpu) = gpu {
        parts.push(gpu);
    }
    if parts.is_empty() {
        "not recorded in the result files".into()
    } else {
        parts.join("; ")
    }
}

pub(super) fn sources(out: &mut String, inputs: &Inputs) {
    let crit = &inputs.criterion;
    let newest = crit
        .data
        .iter()
        .filter(|t| t.sweep)
        .map(|t| t.written)
        .max()
        .or_else(|| crit.data.iter().map(|t| t.written).max());
    let crit_date = newest.map_or("unknown".into(), date_of);
    let _ = writeln!(out, "## Sources\n");
    let _ = writeln!(out, "| source | what | machine | date | commit |");
    let _ = writeln!(out, "|---|---|---|---|---|");
    let _ = writeln!(
        out,
        "| criterion, `{}` | median time per call of criterion's samples, `{}` sweep | {} | {} | `{}` |",
        crit.path, inputs.sweep.name, inputs.machine, crit_date, inputs.commit
    );
    if let Some(m) = &inputs.memory {
        let machine = m
            .data
            .machine
            .clone()
            .unwrap_or_else(|| "not recorded".into());
        let threads = m
            .data
            .threads
            .map_or(String::new(), |t| format!(" ({t} threads)"));
        let date = m
            .data
            .date_utc
            .as_deref()
            .map_or("not recorded".into(), rfc_date);
        let _ = writeln!(
            out,
            "| `memory` binary, `{}` | peak heap beyond inputs and outputs (counting allocator), `memory_required` | {machine}{threads} | {date} | `{}` |",
            m.path, inputs.commit
        );
    }
    for (src, what) in [
        (
            &inputs.peers_cpu,
            "peer harness on the CPU (`peers/run.sh`)",
        ),
        (
            &inputs.peers_gpu,
            "peer harness on a GPU machine (`peers/run_gpu.sh`)",
        ),
    ] {
        if let Some(src) = src {
            let _ = writeln!(
                out,
                "| {what}, `{}` | medians of repeated calls at the canonical shapes | {} | {} | not recorded in the result files |",
                src.path,
                peers_machine(src),
                peers_dates(src)
            );
        }
    }
    let _ = writeln!(out);
    if let Some(note) = &inputs.note {
        let _ = writeln!(out, "{note}\n");
    }
}

pub(super) fn canonical_section(out: &mut String, inputs: &Inputs) {
    let rows: Vec<&Timing> = inputs.criterion.data.iter().filter(|t| !t.sweep).collect();
    if rows.is_empty() {
        return;
    }
    let _ = writeln!(out, "## The canonical shapes (criterion)\n");
    let _ = writeln!(
        out,
        "| shape | (B, T, K, C) | engine | pass | median (ms) | positions/s |"
    );
    let _ = writeln!(out, "|---|---|---|---|---:|---:|");
    for t in rows {
        let id = CANONICAL
            .iter()
            .find(|c| c.shape == t.shape)
            .map_or("—", |c| c.id);
        let sh = t.shape;
        let per_s = (sh.batch * sh.len) as f64 / (t.median_ns / 1e9);
        let pass = if t.semiring == "log_backward" {
            "forward+backward"
        } else {
            "forward"
        };
        let _ = writeln!(
            out,
            "| {id} | ({}, {}, {}, {}) | {} {} | {pass} | {} | {:.3e} |",
            sh.batch,
            sh.len,
            sh.max_duration,
            sh.labels,
            t.device,
            t.algo,
            ms(t.median_ns / 1e6),
            per_s
        );
    }
    let _ = writeln!(out);
}

pub(super) fn peers_section(out: &mut String, title: &str, src: &Source<Vec<PeerResult>>) {
    let _ = writeln!(out, "## {title}\n");
    let _ = writeln!(
        out,
        "From `{}`: the same problems (`semicrf_bench::problem`), f32 inputs unless the peer \
         says otherwise; medians of repeated calls in ms; memory: bytes allocated by one \
         forward+backward call where measured.\n",
        src.path
    );
    let _ = writeln!(
        out,
        "| shape | (B, T, K, C) | engine | how | forward (ms) | forward+backward (ms) | memory (fwd+bwd) |"
    );
    let _ = writeln!(out, "|---|---|---|---|---:|---:|---:|");
    for r in &src.data {
        let sh = r.shape;
        let opt = |v: Option<f64>| v.map_or("—".into(), ms);
        let mut bwd = opt(r.backward_ms);
        if let Some(status) = r.status.as_deref().filter(|s| *s != "ok") {
            // The first clause of a status (`error during forward: RuntimeError: …`).
            let short = status.split(": ").next().unwrap_or(status);
            bwd = format!("{bwd} ({short})");
        }
        let _ = writeln!(
            out,
            "| {} | ({}, {}, {}, {}) | {} | {} | {} | {bwd} | {} |",
            r.shape_id,
            sh.batch,
            sh.len,
            sh.max_duration,
            sh.labels,
            r.engine,
            r.detail,
            opt(r.forward_ms),
            r.backward_bytes.map_or("—".into(), human_bytes)
        );
    }
    let _ = writeln!(out);
}
