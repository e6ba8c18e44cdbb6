//! Discovery: where the cluster set's Kubernetes objects come from (a
//! `gateway-config` directory today) and the single translation that turns
//! them into the model. Discovery never touches sockets.

pub mod files;
pub mod objects;
pub mod translate;
