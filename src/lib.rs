//! Strait: an east-west gateway for Kubernetes cluster sets that span more
//! than one network.
//!
//! The core is pure: [`model`] (the cluster set), [`merge`] (the MCS rules),
//! [`routing`] (routes seen from one gateway), and the planners
//! [`imports`] and [`export_status`]. [`discovery`] reads Kubernetes objects
//! into the model; [`controller`] writes what the planners want to the local
//! cluster; the data plane is [`net`] (sockets) under [`tunnel`] (client
//! pools) under [`state`] (what listeners share) under the listeners
//! [`proxy`], [`ingress`] and [`dns`]; [`gateway`] wires one gateway,
//! [`config`] reads its settings, and [`cli`] is the command line. Every
//! module imports only those below it (`tests/module_graph.rs`).

pub mod admin;
pub mod backoff;
pub mod cli;
pub mod config;
pub mod controller;
pub mod diagnostics;
pub mod discovery;
pub mod dns;
pub mod export_status;
pub mod feed;
pub mod gateway;
pub mod imports;
pub mod ingress;
pub mod logging;
pub mod merge;
pub mod model;
pub mod net;
pub mod proxy;
pub mod routing;
pub mod state;
#[cfg(test)]
mod testing;
pub mod tls;
pub mod token_bucket;
pub mod tunnel;
