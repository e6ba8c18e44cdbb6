//! Strait: an east-west gateway for Kubernetes cluster sets that span more
//! than one network.
//!
//! The core is pure: [`model`] (the cluster set), [`merge`] (the MCS rules)
//! and [`routing`] (routes seen from one gateway). [`discovery`] turns
//! Kubernetes objects into the model; [`config`] reads the gateway's own
//! settings; [`cli`] is the command line.

pub mod admin;
pub mod backoff;
pub mod cli;
pub mod config;
pub mod controller;
pub mod diagnostics;
pub mod discovery;
pub mod dns;
pub mod export_status;
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
pub mod tunnel;
