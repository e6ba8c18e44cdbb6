//! Discovery: where the cluster set's Kubernetes objects come from (a
//! `gateway-config` directory, or the clusters' API servers) and the single
//! translation that turns them into the model. The file source never
//! touches sockets; the Kubernetes source talks only to API servers. Nothing
//! here writes: [`crate::controller`] does, following discovery's snapshots.

mod condensed;
pub mod export_validity;
pub mod files;
pub mod kube;
pub mod objects;
pub mod observed;
pub mod translate;
pub mod yaml;
