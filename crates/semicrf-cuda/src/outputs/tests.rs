//! The checks of [`DeviceOutputs`] that need no device.

use super::*;

const MIB: u64 = 1 << 20;

/// Outputs at made-up addresses, never touched (the checks read no memory).
fn raw(at: u64, len: usize, dtype: Dtype) -> DeviceArrayMut<'static> {
    // SAFETY: only checked, never used.
    unsafe { DeviceArrayMut::from_raw(at, len, dtype, std::ptr::null_mut()) }
}

fn check(out: &DeviceOutputs<'_>, has: [bool; 2]) -> Result<()> {
    let inputs = [("scores", 100 * MIB, 2 * 5 * 3 * 8)];
    out.check(
        "cuda/streaming",
        Shape::new(2, 5, 4, 3),
        Dtype::F64,
        has,
        false,
        &inputs,
    )
}

/// Outputs of the right lengths, element type and boundaries pass; a wrong length, a
/// wrong element type, a missing or extra boundary output and overlapping arrays are
/// refused with errors that name them.
#[test]
fn outputs_are_checked_against_the_problem() {
    let (btc, bt, b) = (30, 10, 2);
    let full = || {
        DeviceOutputs::new(raw(MIB, btc, Dtype::F64))
            .begin_boundary(raw(2 * MIB, btc, Dtype::F64))
            .end_boundary(raw(3 * MIB, btc, Dtype::F64))
            .boundary(raw(4 * MIB, bt, Dtype::F64))
            .log_z(raw(5 * MIB, b, Dtype::F64))
    };
    check(&full(), [true, true]).unwrap();
    check(
        &DeviceOutputs::new(raw(MIB, btc, Dtype::F64)),
        [false, false],
    )
    .unwrap();

    let shape_of = |r: Result<()>| match r {
        Err(Error::Shape { tensor, got, .. }) => (tensor, got),
        other => panic!("{other:?}"),
    };
    let short = DeviceOutputs::new(raw(MIB, btc - 1, Dtype::F64));
    assert_eq!(
        shape_of(check(&short, [false; 2])),
        ("scores output", vec![29])
    );
    let bm = DeviceOutputs::new(raw(MIB, btc, Dtype::F64)).boundary(raw(4 * MIB, btc, Dtype::F64));
    assert_eq!(
        shape_of(check(&bm, [false; 2])),
        ("boundary output", vec![30])
    );
    let lz = DeviceOutputs::new(raw(MIB, btc, Dtype::F64)).log_z(raw(4 * MIB, bt, Dtype::F64));
    assert_eq!(shape_of(check(&lz, [false; 2])), ("log_z output", vec![10]));

    let what = |r: Result<()>| match r {
        Err(Error::Unsupported { what, .. }) => what,
        other => panic!("{other:?}"),
    };
    let f32 = DeviceOutputs::new(raw(MIB, btc, Dtype::F32));
    assert!(what(check(&f32, [false; 2])).contains("F32 for potentials of F64"));
    let mixed = full().log_z(raw(5 * MIB, b, Dtype::F32));
    assert!(what(check(&mixed, [true; 2])).starts_with("log_z output of F32"));
    let w = what(check(&full(), [true, false]));
    assert!(
        w.contains("end boundary's gradient on a problem without"),
        "{w}"
    );
    let no_bb =
        DeviceOutputs::new(raw(MIB, btc, Dtype::F64)).end_boundary(raw(3 * MIB, btc, Dtype::F64));
    let w = what(check(&no_bb, [true, true]));
    assert!(w.contains("begin boundary without an output"), "{w}");
    // One byte of overlap, between two outputs and with an input.
    let o = DeviceOutputs::new(raw(MIB, btc, Dtype::F64)).boundary(raw(
        MIB + 8 * 30 - 1,
        bt,
        Dtype::F64,
    ));
    assert_eq!(
        what(check(&o, [false; 2])),
        "scores output overlapping boundary output in device memory"
    );
    let o = DeviceOutputs::new(raw(100 * MIB + 8 * 29, btc, Dtype::F64));
    assert_eq!(
        what(check(&o, [false; 2])),
        "scores output overlapping scores in device memory"
    );
    let o =
        DeviceOutputs::new(raw(MIB + 8 * 30, btc, Dtype::F64)).boundary(raw(MIB, bt, Dtype::F64));
    check(&o, [false; 2]).unwrap();
}

/// `f64` outputs are the kernels' targets; `f32` ones are not (the engine narrows).
#[test]
fn only_f64_outputs_are_written_by_the_kernels() {
    let t = DeviceOutputs::new(raw(MIB, 30, Dtype::F64))
        .boundary(raw(4 * MIB, 10, Dtype::F64))
        .targets();
    assert_eq!(t.sc, Some(DevPtr::at(MIB)));
    assert_eq!((t.bb, t.eb, t.bm), (None, None, Some(DevPtr::at(4 * MIB))));
    let t = DeviceOutputs::new(raw(MIB, 30, Dtype::F32))
        .boundary(raw(4 * MIB, 10, Dtype::F32))
        .targets();
    assert_eq!((t.sc, t.bm), (None, None));
}

/// `narrow_f32` (`kernels/io.cu`), run on the CPU, rounds every value as the host's
/// `as f32` does, bit for bit: values that round up, down and to even, beyond `f32`'s
/// range, subnormal and infinite, over a grid-stride loop of several rounds.
#[test]
fn narrow_f32_rounds_as_the_host_does() {
    let exe = crate::emu::build_emulator("semicrf-narrow-emu", "narrow_main.cpp", &[]);
    let Some(exe) = exe else { return };
    let mut x: u64 = 0x2545_f491_4f6c_dd1d;
    let mut v: Vec<f64> = (0..300)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            f64::from_bits(x) % 1e6
        })
        .filter(|y| y.is_finite())
        .collect();
    let half = f64::from(f32::EPSILON) / 2.0;
    v.extend([
        1.0 + half,
        1.0 + 3.0 * half,
        -(1.0 + half),
        1e39,
        -1e39,
        1e-40,
        -1e-45,
        f64::INFINITY,
        f64::NEG_INFINITY,
        0.0,
        -0.0,
        f64::from(f32::MAX) * (1.0 + half / 2.0),
    ]);
    let mut buf = (v.len() as i64).to_le_bytes().to_vec();
    for y in &v {
        buf.extend_from_slice(&y.to_le_bytes());
    }
    let got = crate::emu::run_emulated(&exe, &buf);
    let want: Vec<u64> = v.iter().map(|&y| f64::from(y as f32).to_bits()).collect();
    let got: Vec<u64> = got.iter().map(|y| y.to_bits()).collect();
    assert_eq!(got, want);
}

/// `copy_out` (`kernels/io.cu`), run on the CPU: every item of one launch, `f32` and `f64`,
/// with strides 1 and 2, gets its source's values (every `stride`-th), rounded as the
/// host's `as f32` where the item is `f32`, over grid-stride loops of several rounds.
#[test]
fn copy_out_copies_every_item_as_the_host_does() {
    let exe = crate::emu::build_emulator("semicrf-copy-emu", "copy_main.cpp", &[]);
    let Some(exe) = exe else { return };
    let half = f64::from(f32::EPSILON) / 2.0;
    let vals = |n: usize, seed: f64| -> Vec<f64> {
        (0..n)
            .map(|i| (i as f64 * seed).sin() * 1e3 + if i % 3 == 0 { half } else { 0.0 })
            .collect()
    };
    // (values, stride, f32)
    let items: Vec<(Vec<f64>, usize, bool)> = vec![
        (vals(300, 0.7), 1, true),
        (vals(2 * 9, 1.3), 2, true),
        (vals(2 * 9, 1.9), 2, false),
        (vals(150, 2.3), 1, false),
        (vec![1e39, -1e-45, f64::INFINITY, -0.0], 1, true),
    ];
    let mut buf = (items.len() as i64).to_le_bytes().to_vec();
    for (v, stride, f32) in &items {
        for x in [(v.len() / stride) as i64, *stride as i64, *f32 as i64] {
            buf.extend_from_slice(&x.to_le_bytes());
        }
    }
    for (v, _, _) in &items {
        for y in v {
            buf.extend_from_slice(&y.to_le_bytes());
        }
    }
    let got = crate::emu::run_emulated(&exe, &buf);
    let want: Vec<u64> = items
        .iter()
        .flat_map(|(v, stride, f32)| {
            v.iter().step_by(*stride).map(move |&y| {
                if *f32 {
                    f64::from(y as f32).to_bits()
                } else {
                    y.to_bits()
                }
            })
        })
        .collect();
    let got: Vec<u64> = got.iter().map(|y| y.to_bits()).collect();
    assert_eq!(got, want);
}
