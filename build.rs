fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto/plegd/v1/events.proto");
    tonic_prost_build::configure().compile_protos(&["proto/plegd/v1/events.proto"], &["proto"])?;
    Ok(())
}
