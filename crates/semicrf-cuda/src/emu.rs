//! Test support: the CPU emulation of the kernels (`tests/emu`, built with the C++ compiler),
//! which the tests of the meet kernels, of `shared_sum` and of `check_input` run.

use crate::kernel::args::layouts;

/// A directory holding the argument blocks' layout headers (`<Struct>_layout.cuh`), written
/// once per process.
fn layout_headers() -> std::path::PathBuf {
    static DIR: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();
    DIR.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("semicrf-layout-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        for l in layouts() {
            std::fs::write(dir.join(l.header_name()), l.header()).unwrap();
        }
        dir
    })
    .clone()
}

/// The emulated kernels of `tests/emu/{main}` (`meet_main.cpp`: those of
/// `kernels/meet.cu`) compiled for the CPU emulation of `tests/emu`
/// (`c++` or `$CXX`, C++20, threads, the argument blocks' layout assertions as NVRTC gets
/// them, and the extra `flags`) into `name` in the temporary directory; `None`, with the reason printed, where no C++ compiler can be started
/// (a failure instead when `SEMICRF_REQUIRE_CXX=1`, as CI sets it).
pub(crate) fn build_emulator(name: &str, main: &str, flags: &[&str]) -> Option<std::path::PathBuf> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let exe = std::env::temp_dir().join(format!("{name}-{}", std::process::id()));
    let cxx = std::env::var("CXX").unwrap_or_else(|_| "c++".into());
    let run = std::process::Command::new(&cxx)
        .args(["-std=c++20", "-O1", "-pthread"])
        .args(flags)
        .arg("-I")
        .arg(dir.join("kernels"))
        .arg("-I")
        .arg(layout_headers())
        .arg(dir.join("tests/emu").join(main))
        .arg("-o")
        .arg(&exe)
        .output();
    match run {
        Err(e) if std::env::var("SEMICRF_REQUIRE_CXX").as_deref() == Ok("1") => {
            panic!("SEMICRF_REQUIRE_CXX=1 but no C++ compiler ({cxx}: {e})")
        }
        Err(e) => {
            eprintln!("skipped: no C++ compiler ({cxx}: {e})");
            None
        }
        Ok(o) if !o.status.success() => panic!(
            "the emulated kernels do not compile:\n{}",
            String::from_utf8_lossy(&o.stderr)
        ),
        Ok(_) => Some(exe),
    }
}

/// Runs the emulator `exe` on the input `buf`: the `f64`s it writes.
pub(crate) fn run_emulated(exe: &std::path::Path, buf: &[u8]) -> Vec<f64> {
    let dir = std::env::temp_dir();
    let id = std::process::id();
    static CALLS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let call = CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let (fin, fout) = (
        dir.join(format!("semicrf-emu-{id}-{call}.in")),
        dir.join(format!("semicrf-emu-{id}-{call}.out")),
    );
    std::fs::write(&fin, buf).unwrap();
    let o = std::process::Command::new(exe)
        .arg(&fin)
        .arg(&fout)
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "emulated kernels: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let bytes = std::fs::read(&fout).unwrap();
    let _ = std::fs::remove_file(&fin);
    let _ = std::fs::remove_file(&fout);
    bytes
        .chunks(8)
        .map(|w| f64::from_le_bytes(w.try_into().unwrap()))
        .collect()
}
