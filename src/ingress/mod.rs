//! The tunnel server: peer gateways' CONNECT requests, over HTTP/2 (`h2`)
//! and QUIC (`quic`), authenticated by their certificates, authorised and
//! dialled to local backends (`inbound`, shared by both transports); how
//! long a peer's connection may live (`lifetime`).

pub mod h2;
pub mod inbound;
pub mod lifetime;
pub mod quic;
