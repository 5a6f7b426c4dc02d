//! Compiling the kernels with NVRTC: one program per [`Module`], from its main source file
//! with every other source and the argument blocks' layout assertions as named headers
//! (resolved by the `#include`s), the shared constants as defines, and the options of
//! `SEMICRF_CUDA_NVRTC_FLAGS`; and loading a compiled module's kernels.

use std::collections::HashMap;
use std::ffi::{CString, c_char};
use std::sync::Arc;

use cudarc::driver::{CudaContext, CudaFunction, CudaModule};
use cudarc::nvrtc::{Ptx, result, sys};

use crate::kernel::{self, Module};
use crate::tuning::tuning;

/// The kernels of `module` compiled by NVRTC for a virtual architecture (`compute_90`, ...),
/// as PTX the driver finishes for the device.
pub(crate) fn compile(module: Module, arch: &str) -> std::result::Result<Ptx, String> {
    let what = match module {
        Module::General => "the kernels".to_string(),
        Module::Meet { width, steps } => {
            format!("the kernels of width {width}, {steps} steps")
        }
    };
    let options: Vec<String> = [format!("--gpu-architecture={arch}"), "-std=c++17".into()]
        .into_iter()
        .chain(module.defines())
        .chain(tuning().nvrtc_flags.iter().cloned())
        .collect();
    program(
        kernel::source(module.main()),
        &module.program_name(),
        &kernel::headers(),
        &options,
    )
    .map_err(|e| format!("NVRTC could not compile {what}: {e}"))
}

/// `src` (named `name` in NVRTC's messages) compiled with `headers` (name, text) and
/// `options`.
fn program(
    src: &str,
    name: &str,
    headers: &[(String, String)],
    options: &[String],
) -> std::result::Result<Ptx, String> {
    let c = |s: &str| CString::new(s).map_err(|e| format!("{name}: {e}"));
    let src = c(src)?;
    let name_c = c(name)?;
    let texts = headers
        .iter()
        .map(|(_, t)| c(t))
        .collect::<std::result::Result<Vec<_>, _>>()?;
    let names = headers
        .iter()
        .map(|(n, _)| c(n))
        .collect::<std::result::Result<Vec<_>, _>>()?;
    let text_ptrs: Vec<*const c_char> = texts.iter().map(|s| s.as_ptr()).collect();
    let name_ptrs: Vec<*const c_char> = names.iter().map(|s| s.as_ptr()).collect();
    let mut prog: sys::nvrtcProgram = std::ptr::null_mut();
    // SAFETY: every pointer is to a NUL-terminated string that outlives the call; the two
    // arrays hold `headers.len()` of them each.
    unsafe {
        sys::nvrtcCreateProgram(
            &mut prog,
            src.as_ptr(),
            name_c.as_ptr(),
            headers.len() as i32,
            text_ptrs.as_ptr(),
            name_ptrs.as_ptr(),
        )
    }
    .result()
    .map_err(|e| format!("{e:?}"))?;
    // SAFETY: `prog` was created above and is destroyed once below.
    let compiled = unsafe { result::compile_program(prog, options) };
    let out = match compiled {
        // SAFETY: as above.
        Ok(()) => unsafe { result::get_ptx(prog) }.map_err(|e| format!("{e:?}")),
        Err(e) => {
            // SAFETY: as above.
            let log = unsafe { result::get_program_log(prog) }.unwrap_or_default();
            Err(format!("{e:?}: {}", text(&log)))
        }
    };
    // SAFETY: as above; not used after this.
    let _ = unsafe { result::destroy_program(prog) };
    out.map(|ptx| Ptx::from_src(text(&ptx)))
}

/// NVRTC's NUL-terminated text.
fn text(v: &[c_char]) -> String {
    let bytes: Vec<u8> = v.iter().map(|&b| b as u8).take_while(|&b| b != 0).collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

/// Loads `ptx` and the kernels `names` of it (each under its key), each allowed
/// `smem_limit` bytes of shared memory: its static arrays (`check_input`'s tiles) and what a
/// launch asks for dynamically together.
pub(crate) fn load<N: Eq + std::hash::Hash>(
    ctx: &Arc<CudaContext>,
    ptx: Ptx,
    names: impl IntoIterator<Item = (N, String)>,
    smem_limit: i32,
) -> std::result::Result<(Arc<CudaModule>, HashMap<N, CudaFunction>), String> {
    use cudarc::driver::sys::CUfunction_attribute;
    let module = ctx
        .load_module(ptx)
        .map_err(|e| format!("loading the kernels: {e:?}"))?;
    let mut functions = HashMap::new();
    for (key, n) in names {
        let f = module
            .load_function(&n)
            .map_err(|e| format!("kernel {n}: {e:?}"))?;
        // The driver refuses a dynamic limit that leaves no room for the static arrays.
        let fixed = f
            .shared_size_bytes()
            .map_err(|e| format!("kernel {n}: static shared memory: {e:?}"))?;
        f.set_attribute(
            CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
            smem_limit - fixed,
        )
        .map_err(|e| format!("kernel {n}: shared memory: {e:?}"))?;
        functions.insert(key, f);
    }
    Ok((module, functions))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernel::{Kernel, MeetKernel, STEPS_WIDE, WIDTHS};

    /// NVRTC alone (no driver or GPU needed) compiles every kernel for the H100's and the
    /// oldest supported architecture, with the argument blocks' layouts asserted; skipped
    /// with the reason where NVRTC is missing.
    #[test]
    fn the_kernels_compile_with_nvrtc() {
        // SAFETY: only tries to load the library by name.
        if !unsafe { cudarc::nvrtc::sys::is_culib_present() } {
            eprintln!("skipped: no NVRTC library (libnvrtc) on this machine");
            return;
        }
        for arch in ["compute_75", "compute_90"] {
            let ptx = match compile(Module::General, arch) {
                Ok(p) => p.to_src(),
                Err(e) => panic!("{arch}: {e}"),
            };
            for k in Kernel::ALL {
                let k = k.name();
                assert!(
                    ptx.contains(&format!(".entry {k}(")),
                    "{arch}: no kernel {k}"
                );
            }
            for width in WIDTHS {
                let module = Module::Meet {
                    width,
                    steps: STEPS_WIDE,
                };
                let ptx = match compile(module, arch) {
                    Ok(p) => p.to_src(),
                    Err(e) => panic!("{arch}: {e}"),
                };
                for k in MeetKernel::of_width(width) {
                    let k = k.name();
                    assert!(
                        ptx.contains(&format!(".entry {k}(")),
                        "{arch}: no kernel {k}"
                    );
                }
            }
        }
    }
}
