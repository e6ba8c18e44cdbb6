//! The socket layer under every listener: dialling with the gateway's
//! socket options, splicing two streams with bounded buffers, the
//! descriptor and memory budgets new work is admitted against, the per-source caps of
//! each listener, the slots of clients that cost by the connection (DNS
//! over TCP, tunnel handshakes), and the accept loop.
//! Knows nothing of routes, tunnels or services.

pub mod accept;
pub mod buffer;
pub mod datagram;
pub mod dial;
pub mod listen;
pub mod memory;
pub mod overload;
pub mod proxy_header;
pub mod slots;
pub mod sources;
pub mod splice;
