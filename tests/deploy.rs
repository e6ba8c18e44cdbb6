//! The Kubernetes manifests in `deploy/`: every document parses into its
//! k8s-openapi type (with no field the type does not know), and the objects
//! agree with each other, with the `strait run` flags, with `gateway.yaml`'s
//! schema, with what the kube source reads and writes (`WATCHED_RESOURCES`
//! and `WRITTEN_RESOURCES` in src/discovery/kube), and with
//! docs/configuration.md.
//!
//! | module | checks |
//! |---|---|
//! | `manifests` | (loading: every file of `deploy/`, parsed into its type) |
//! | `gateway` | (the gateway Deployment, its flags, volumes and `gateway.yaml`) |
//! | `checks_objects` | parsing, the two kustomizations (`deploy/`, `deploy/crds/`), namespaces, the image set in `images:` only |
//! | `checks_pod` | probes, container ports, security, spreading, shutdown |
//! | `checks_services` | the gateway and connect Services; the load balancer's `externalTrafficPolicy: Local` |
//! | `checks_network` | the NetworkPolicy: the gateway pods, every container port, the import port range, who may reach each |
//! | `checks_config` | `gateway.yaml`, the Kubernetes source, the examples |
//! | `checks_rbac` | the ServiceAccount, its bindings, least privilege |
//! | `checks_crds` | the CRDs against docs/configuration.md, upstream's definitions and Strait's types |
//! | `helm` | the Helm chart `deploy/helm/strait/`: lint, and its objects against `deploy/`'s |

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may panic on what they set up

#[path = "deploy/manifests.rs"]
mod manifests;

#[path = "deploy/gateway.rs"]
mod gateway;

#[path = "deploy/checks_objects.rs"]
mod checks_objects;

#[path = "deploy/checks_pod.rs"]
mod checks_pod;

#[path = "deploy/checks_services.rs"]
mod checks_services;

#[path = "deploy/checks_network.rs"]
mod checks_network;

#[path = "deploy/checks_config.rs"]
mod checks_config;

#[path = "deploy/checks_rbac.rs"]
mod checks_rbac;

#[path = "deploy/checks_crds.rs"]
mod checks_crds;

#[path = "deploy/helm.rs"]
mod helm;
