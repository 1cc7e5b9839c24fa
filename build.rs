//! Generates the gRPC code of `proto/`: plegd's own observation API (events and statuses; client and server), and the
//! slim CRI messages the relist decodes — lists, status reads, events (client only; see
//! proto/runtime/v1/relist.proto).
fn main() -> Result<(), Box<dyn std::error::Error>> {
    const EVENTS: &str = "proto/plegd/v1/events.proto";
    const STATUS: &str = "proto/plegd/v1/status.proto";
    const RELIST: &str = "proto/runtime/v1/relist.proto";
    println!("cargo:rerun-if-changed={EVENTS}");
    println!("cargo:rerun-if-changed={STATUS}");
    println!("cargo:rerun-if-changed={RELIST}");
    tonic_prost_build::configure().compile_protos(&[EVENTS, STATUS], &["proto"])?;
    tonic_prost_build::configure()
        .build_server(false)
        // `bytes` fields become slices of the received buffer instead of copies.
        .bytes(".runtime.v1")
        .compile_protos(&[RELIST], &["proto"])?;
    Ok(())
}
