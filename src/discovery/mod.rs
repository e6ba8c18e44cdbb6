//! Discovery: where the cluster set's Kubernetes objects come from (a
//! `gateway-config` directory, or the clusters' API servers) and the single
//! translation that turns them into the model. The file source never
//! touches sockets; the Kubernetes source talks only to API servers.

pub mod export_status;
pub mod files;
pub mod kube;
pub mod objects;
pub mod translate;
pub mod yaml;
