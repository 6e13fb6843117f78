//! Compiles the etcd KV subset with a vendored `protoc` (no system protoc needed).

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let protoc = protoc_bin_vendored::protoc_bin_path()?;
    // SAFETY: build scripts are single-threaded; nothing else reads the environment concurrently.
    unsafe { std::env::set_var("PROTOC", protoc) };
    tonic_prost_build::configure()
        .build_server(false)
        .compile_protos(&["proto/etcd_kv.proto"], &["proto"])?;
    println!("cargo:rerun-if-changed=proto/etcd_kv.proto");
    Ok(())
}
