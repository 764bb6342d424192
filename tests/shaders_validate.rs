//! Every WGSL file in `shaders/` parses and validates with naga, with exactly the
//! capabilities its kernel is allowed to need, in both input-access variants.

use std::collections::BTreeSet;
use std::path::Path;

use naga::valid::{Capabilities, ValidationFlags, Validator};
use wgpool::kernels::{Access, Kernel, shader_source};

/// The naga capabilities each shader may use. A shader file missing here fails the test.
fn capabilities(file: &str) -> Option<Capabilities> {
    match file {
        "copy_f16.wgsl" | "triad_f16.wgsl" => Some(Capabilities::SHADER_FLOAT16),
        "copy_f32.wgsl"
        | "scale_f32.wgsl"
        | "add_f32.wgsl"
        | "triad_f32.wgsl"
        | "fill_u32.wgsl"
        | "fill_pattern_u32.wgsl"
        | "checksum_u32.wgsl"
        | "compare_u32.wgsl"
        | "move_u32.wgsl" => Some(Capabilities::empty()),
        _ => None,
    }
}

fn validate(name: &str, source: &str, caps: Capabilities) -> Result<naga::Module, String> {
    let module = naga::front::wgsl::parse_str(source)
        .map_err(|e| format!("{name}: parse error:\n{}", e.emit_to_string(source)))?;
    Validator::new(ValidationFlags::all(), caps)
        .validate(&module)
        .map_err(|e| format!("{name}: validation error: {e:?}"))?;
    Ok(module)
}

fn shader_files() -> BTreeSet<String> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("shaders");
    std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("cannot list {}: {e}", dir.display()))
        .map(|entry| {
            entry
                .expect("directory entry")
                .file_name()
                .to_string_lossy()
                .into_owned()
        })
        .collect()
}

#[test]
fn every_shader_file_is_known_and_validates() {
    let files = shader_files();
    assert!(!files.is_empty(), "shaders/ is empty");
    for file in &files {
        let caps = capabilities(file).unwrap_or_else(|| {
            panic!("shaders/{file} is not listed in tests/shaders_validate.rs; add it with the capabilities it needs")
        });
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("shaders")
            .join(file);
        let source = std::fs::read_to_string(&path).expect("readable shader");
        if let Err(message) = validate(file, &source, caps) {
            panic!("{message}");
        }
    }
}

#[test]
fn f16_shaders_need_the_float16_capability() {
    for kernel in [Kernel::CopyF16, Kernel::TriadF16] {
        assert!(
            validate(kernel.shader_file(), kernel.source(), Capabilities::empty()).is_err(),
            "{} validated without SHADER_FLOAT16",
            kernel.shader_file()
        );
    }
}

#[test]
fn every_kernel_has_its_file_and_both_access_variants_validate() {
    let files = shader_files();
    for kernel in Kernel::ALL {
        assert!(
            files.contains(kernel.shader_file()),
            "{kernel:?} refers to missing shaders/{}",
            kernel.shader_file()
        );
        let caps = capabilities(kernel.shader_file()).expect("listed");
        for access in [Access::ReadOnlyInputs, Access::ReadWriteInputs] {
            let source = shader_source(kernel, access);
            let module = validate(kernel.shader_file(), &source, caps)
                .unwrap_or_else(|message| panic!("{access:?}: {message}"));
            let entry = module
                .entry_points
                .iter()
                .find(|e| e.name == "main")
                .unwrap_or_else(|| panic!("{} has no entry point main", kernel.shader_file()));
            assert_eq!(entry.stage, naga::ShaderStage::Compute);
            assert_eq!(
                entry.workgroup_size,
                [256, 1, 1],
                "{}",
                kernel.shader_file()
            );
            // Binding 0 params, two views per data operand, then the result word.
            let operands = kernel.input_names().len() + usize::from(kernel.output_name().is_some());
            let expected = 1 + 2 * operands + usize::from(kernel.has_result());
            let bound = module
                .global_variables
                .iter()
                .filter(|(_, v)| v.binding.is_some())
                .count();
            assert_eq!(bound, expected, "{} binding count", kernel.shader_file());
            let read_only = module
                .global_variables
                .iter()
                .filter(|(_, v)| {
                    matches!(v.space, naga::AddressSpace::Storage { access } if !access.contains(naga::StorageAccess::STORE))
                })
                .count();
            let expected_read_only = match access {
                Access::ReadOnlyInputs => 2 * kernel.input_names().len(),
                Access::ReadWriteInputs => 0,
            };
            assert_eq!(
                read_only,
                expected_read_only,
                "{} {access:?} read-only bindings",
                kernel.shader_file()
            );
        }
    }
}
