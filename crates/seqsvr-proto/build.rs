//! Compiles `proto/` with a vendored `protoc`: building seqsvr never needs a system protoc.

use std::path::PathBuf;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let protoc = protoc_bin_vendored::protoc_bin_path()?;
    // SAFETY: build scripts are single-threaded; nothing else reads the environment concurrently.
    unsafe { std::env::set_var("PROTOC", protoc) };

    let root = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR")?).join("../../proto");
    let protos = [root.join("seqsvr/v1/seq.proto"), root.join("seqsvr/v1/store.proto")];
    let out_dir = PathBuf::from(std::env::var("OUT_DIR")?);
    tonic_prost_build::configure()
        .file_descriptor_set_path(out_dir.join("seqsvr_v1_descriptor.bin"))
        .compile_protos(&protos, std::slice::from_ref(&root))?;
    for p in &protos {
        println!("cargo:rerun-if-changed={}", p.display());
    }
    Ok(())
}
